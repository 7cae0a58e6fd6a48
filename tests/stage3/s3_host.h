/* Test host for the stage3 plugin: an MLP trained through abi/zero.h only,
 * bracketing EVERY layer's use with zero_gather/zero_release the way a
 * stage-3 trainer must (forward: layer by layer; backward: gathered again in
 * reverse), so that gather order, prefetch, reuse and release are exercised.
 *
 * Model: `nlin` tanh-linear layers din -> h -> ... -> dout (last linear),
 * params W1, b1, W2, b2, ... in registration = forward order; weights are
 * param group 0, biases group 1 (no weight decay).  Loss: mean squared error.
 * Data: sample g is a pure function of g, rank r of W takes samples
 * [m*G + r*mb, m*G + (r+1)*mb) of global micro-step m (G = W*mb), so every
 * world size trains on the same global batch.  The host gradient is the
 * mean over local samples; libzero divides the sum by world*gas.
 *
 * Knobs that misbehave on purpose (order perturbation, divergence,
 * read-after-release) serve the fallback/error/poison tests.
 * One run at a time per process; collective over MPI_COMM_WORLD. */
#ifndef STAGE3_TEST_HOST_H
#define STAGE3_TEST_HOST_H
#include <stddef.h>
#include <stdint.h>

#include "zero.h"

typedef struct s3_cfg {
    const char *plugin;      /* "stage3", "stage0", "stage2" */
    int steps, gas, mb;
    int din, h, dout, nlin;  /* model shape */
    long long prefetch;      /* stage3_prefetch_bucket_size (elements), < 0: default */
    long long persist;       /* stage3_param_persistence_threshold, < 0: default */
    long long max_live;      /* stage3_max_live_parameters, < 0: default */
    long long reuse;         /* stage3_max_reuse_distance, < 0: default */
    long long bucket;        /* reduce_bucket_size, < 0: default */
    int overlap;             /* overlap_comm */
    double clip;             /* gradient_clipping (0 = off) */
    int perturb_step;        /* >= 0: in this step's first micro-step, gather all layers up front (new order) */
    int diverge_rank;        /* >= 0: this rank gathers layer 1 before layer 0 (others 0 then 1)... */
    int diverge_micro;       /* ...in this global micro-step (default 1) */
    int diverge_extra;       /* instead of swapping, that rank gathers layer 0 one extra time first */
    int read_after_release;  /* forward reads layer 0's weights after releasing them */
    int threaded_hooks;      /* fire each layer's zero_on_grad_ready from a new thread (nlin <= 64) */
    const char *ckpt_dir;    /* checkpoints: with save_after > 0, zero_save here after that many steps; */
    int save_after;
    int load;                /* with load, zero_load from here right after zero_params_done */
    int first_step;          /* data of the first step trained (resume after a load) */
    /* (appended for mid-window checkpoints) */
    int save_after_micro;    /* > 0: zero_save after this many micro-steps of the run (may be inside a window) */
    int first_micro;         /* > 0: the run starts at this global micro-step (overrides first_step * gas) and
                                trains up to the end of step first_step + steps - 1 as usual */
    /* (appended for uneven micro-steps, issue 34) */
    int short_rank;          /* >= 0: this rank stops one micro-step before the others (an uneven data split) */
} s3_cfg;

s3_cfg s3_default_cfg(void);

typedef struct s3_out {
    zero_status status;      /* first failing call (ZERO_OK if none) */
    char error[1024];
    float *params;           /* final params, registration order (free with s3_out_free) */
    size_t numel;            /* Psi */
    uint32_t nparams;
    size_t max_param;        /* largest param (elements) */
    zero_memory_stats mem;   /* after the last step, before the final gather (peaks: whole run so far) */
    zero_memory_stats mem_after_done; /* right after zero_params_done */
    int warnings;            /* WARN lines logged */
    char first_warning[512];
    int order_warnings;      /* WARN lines about the gather order (fallback) */
    /* stage3's INFO summary at engine destroy (needs ZERO_LOG_LEVEL=info) */
    unsigned long long gathers, gathers_prefetched, gathers_resident;
    int nan_loss;            /* a NaN/Inf loss was seen */
    double last_loss;
} s3_out;

void s3_run(const s3_cfg *cfg, s3_out *out);
void s3_out_free(s3_out *out);
double s3_rel_l2(const float *a, const float *b, size_t n);
#endif
