/* zero-pipeline-demo: the demo's character-level model (examples/demo/model.c,
 * compiled into this binary unchanged) split into pipeline stages, each
 * stage replicated over a data-parallel group, trained with libzero's
 * stage1-pp plugin through the public ABI only.
 *
 * Rank layout (the same rule libzero applies when pipeline.stages = P > 1):
 *     global rank g -> stage g / D, data-parallel rank g % D, D = world / P.
 * Stage s holds the demo's layers [layer_lo, layer_hi) (4 layers split as
 * evenly as possible, earlier stages take the remainder); stage 0 embeds the
 * tokens, the last stage computes the loss.  Activations travel forward and
 * their gradients backward between global ranks g and g +- D (same DP rank,
 * neighbouring stage) with MPI point-to-point on the host's own
 * communicator.  Every stage draws the same batch itself (the sampler is a
 * pure function of seed, micro-step and sample index), so tokens and
 * targets never travel.
 *
 * Ownership: one pipe_trainer per process, owned by main; buffers are
 * allocated by pipe_buffers_alloc and freed by pipe_buffers_free.  Nothing
 * here is thread-safe; the trainer runs on the main thread. */
#ifndef PIPE_H
#define PIPE_H
#include <mpi.h>
#include <stdint.h>

#include "data.h"
#include "model.h"
#include "zero.h"

/* The activation between layers: act[i] is the input of layer i (act[0],
 * the tokens, is kept as bytes in tok), act[DEMO_NLAYERS] the logits. */
enum { PIPE_NACT = DEMO_NLAYERS + 1 };

/* One micro-batch in flight: its batch, the activations of the local
 * layers (inputs and outputs) and their gradients. */
typedef struct pipe_slot {
    uint8_t *tok, *tgt;
    float *act[PIPE_NACT];  /* act[1..4]; act[0] unused (tok) */
    float *grad[PIPE_NACT]; /* dL/d act[i]; grad[4] aliases act[4] (softmax writes in place) */
    double loss;            /* last stage: this micro-batch's mean loss */
} pipe_slot;

typedef enum { PIPE_1F1B = 0, PIPE_GPIPE = 1 } pipe_schedule;

typedef struct pipe_trainer {
    zero_engine *e;
    MPI_Comm comm;         /* the whole job (dup of MPI_COMM_WORLD): p2p and host reductions */
    int grank, gsize;      /* global rank and size */
    int stages, dp_size;   /* P and D */
    int stage, dp_rank;
    int layer_lo, layer_hi;/* local layers [lo, hi) */
    int prev, next;        /* global ranks of the neighbour stages, or -1 */
    demo_dims d;
    zero_param *p[DEMO_NPARAMS]; /* NULL for params of other stages */
    int micro, nmicro;     /* samples per micro-batch, micro-batches per step (M) */
    pipe_schedule schedule;
    pipe_slot *slots;      /* nmicro, plus one for validation */
    int cap;               /* samples per slot buffer */
    float *scratch;
    MPI_Request *reqs;     /* outstanding sends of this step */
    int nreq, reqs_cap;
} pipe_trainer;

/* A failed call is fatal for the job: print, then MPI_Abort. */
void pipe_die(pipe_trainer *t, const char *what, const char *detail);
#define PIPE_ZCALL(t, call)                                                          \
    do {                                                                             \
        zero_status zs_ = (call);                                                    \
        if (zs_ != ZERO_OK) pipe_die((t), #call, zero_last_error((t)->e));           \
    } while (0)

/* Which stage holds layer l with P stages, and stage s's layer range. */
int pipe_stage_of_layer(int stages, int l);
void pipe_layers_of_stage(int stages, int s, int *lo, int *hi);
/* Which stage holds parameter k. */
int pipe_stage_of_param(int stages, int k);
/* Width (floats per sample) of activation i (1..4). */
int pipe_act_width(const demo_dims *d, int i);

/* Allocate `nmicro` + 1 slots of `cap` samples; abort on failure. */
void pipe_buffers_alloc(pipe_trainer *t, int cap);
void pipe_buffers_free(pipe_trainer *t);

/* Register this stage's params (deterministic init from seed) and call
 * zero_params_done. */
void pipe_register_params(pipe_trainer *t, uint64_t seed);

/* Forward of slot `s` (`batch` samples, tok/tgt filled): receive the input
 * activation from the previous stage (tag), run the local layers, send the
 * output on (nonblocking, completed by pipe_wait_sends) or, on the last
 * stage, compute the loss and its gradient times grad_scale (0: no grad). */
void pipe_forward(pipe_trainer *t, pipe_slot *s, int batch, int tag, double grad_scale);
/* Backward of slot `s`: receive the output gradient from the next stage
 * (unless last), run the local layers' backward handing every gradient to
 * libzero (zero_grad_buffer / zero_on_grad_ready), send the input gradient
 * back (unless first stage). */
void pipe_backward(pipe_trainer *t, pipe_slot *s, int batch, int tag);
/* Complete every send issued since the last call. */
void pipe_wait_sends(pipe_trainer *t);

/* One optimizer step: M micro-batches through the pipeline in the
 * configured schedule, zero_step after each backward.  Returns this rank's
 * sum of micro-batch losses (0 off the last stage); *res gets the last
 * zero_step result (the boundary one). */
double pipe_train_step(pipe_trainer *t, const demo_corpus *c, uint64_t seed, long step, zero_step_result *res);
#endif
