/* A small deterministic test host for the stage plugins: an MLP trained
 * against abi/zero.h only, the way a real C trainer would use libzero.
 *
 * Model: `nlin` linear layers (tanh between them), widths din -> h -> ... ->
 * dout, then a scalar output gain.  Registration order: W1, b1, W2, b2, ...,
 * gain; weights are param group 0, biases and the gain group 1 (no weight
 * decay), so the layout has two groups and awkward param sizes (1, 7, 31,
 * 217, 899, 961 for the "small" model) that straddle rank partitions.
 * No param is larger than ~12% of the model, so stage 2's two staging slots
 * stay within an eighth of the model each (see buckets.c).
 *
 * Data: sample g of the run is a pure function of g (fixed seed), so the
 * global micro-batch of micro-step m is samples [m*G, (m+1)*G) and rank r of
 * W takes [m*G + r*mb, m*G + (r+1)*mb) with G = W*mb.  A single process with
 * mb' = W*mb therefore sees exactly the concatenated batch.
 *
 * The host gradient of a micro-step is the MEAN over its local samples;
 * libzero divides the sum by world*gas, giving the global mean.
 *
 * Not thread-safe across runs; one run at a time per process. */
#ifndef STAGES_MLP_HOST_H
#define STAGES_MLP_HOST_H
#include <stddef.h>
#include <stdint.h>

#include "zero.h"

enum { HOST_MODEL_SMALL = 0, HOST_MODEL_10K = 1 };
enum { HOST_ORDER_NATURAL = 0, HOST_ORDER_SHUFFLED = 1 };

typedef struct host_run_cfg {
    const char *plugin;    /* "stage0", ... */
    int model;             /* HOST_MODEL_* */
    int steps;             /* optimizer steps */
    int gas;               /* gradient_accumulation_steps */
    int mb;                /* local micro-batch */
    int overlap;           /* overlap_comm */
    int contiguous;        /* contiguous_gradients */
    long long bucket;      /* reduce_bucket_size, <= 0: leave the default */
    int order;             /* HOST_ORDER_* */
    int threads;           /* 1 or 2 threads firing hooks */
    int host_grad;         /* register host-owned gradient buffers */
    int self_comm;         /* ZERO_COMM_SELF (world 1) instead of MPI_COMM_WORLD */
    int strict;            /* zero_optimization.strict_grads */
    int skip_param;        /* >= 0: never report this param's gradient on the last micro-step of each window */
    int zero_param;        /* >= 0: report this param with an all-zero gradient on the same micro-steps */
    int data_rank, data_world; /* sharding of the data (defaults to the comm's rank/size when < 0) */
    const char *ckpt_dir;  /* zero_save / zero_load directory */
    int save_after;        /* >= 0: zero_save after this many micro-steps */
    int resume_from;       /* >= 0: zero_load right after params_done and continue at this micro-step */
    /* (appended by offload) */
    int stage;             /* zero_optimization.stage; < 0 (default): from the plugin name "stageN", else 0 */
    int offload;           /* zero_optimization.offload_optimizer = {"device": "cpu"} */
    /* (appended by issue13-gas) */
    int once_per_window;   /* zero_optimization.reduce_once_per_window (gas > 1: the local window sum) */
    /* (appended by bindings, ABI 1.1) */
    int host_owned;        /* register ZERO_PARAM_HOST_OWNED: forward reads the host's own arrays, no zero_gather;
                              after each step they must equal what zero_gather gives (checked: ZERO_ERR_INTERNAL) */
    double config_lr;      /* optimizer lr in the config (default 0.001) */
    double hp_lr;          /* >= 0: zero_set_hparams(ALL_GROUPS, lr) right after zero_engine_create */
    /* (appended by issue17b: tests/multihost waits for training to run before it cuts the link) */
    void (*on_step)(void *user, uint64_t micro_steps_done); /* NULL, or called after every zero_step that succeeded */
    void *on_step_user;
    /* (appended by issue18a) */
    int round_robin;       /* zero_optimization.round_robin_gradients: interleaved ownership */
    /* (appended by the client state, ABI 1.7) */
    const char *client_state; /* non-NULL: the save at save_after is zero_save_ex with these bytes (strlen) */
} host_run_cfg;

/* Defaults: stage0, small model, 30 steps, gas 1, mb 3, overlap 1,
 * contiguous 1, bucket 1500 (several buckets), natural order, 1 thread. */
host_run_cfg host_default_cfg(void);

typedef struct host_run_out {
    zero_status status;       /* first failing call's status (ZERO_OK if all went well) */
    char error[1024];         /* its message */
    float *params;            /* nparams_total floats, registration order (malloc; free with host_run_free) */
    size_t numel;             /* Psi */
    uint32_t nparams;
    size_t max_param_numel;
    zero_memory_stats mem;    /* after the last step */
    zero_comm_stats comm;
    double last_norm;
    int warnings;             /* WARN log lines seen */
    char first_warning[512];
} host_run_out;

/* Train as configured and gather the final parameters.  Collective over
 * MPI_COMM_WORLD unless self_comm. */
void host_run(const host_run_cfg *cfg, host_run_out *out);
/* host_run on the first n ranks of MPI_COMM_WORLD (a split the engine runs
 * over, th_set_comm); out is zeroed everywhere.  Returns 1 on those ranks,
 * 0 on the others.  Collective over MPI_COMM_WORLD; main thread only. */
int host_run_on(int n, const host_run_cfg *cfg, host_run_out *out);
void host_run_free(host_run_out *out);

/* Relative L2 difference |a-b| / |b| (fp64). */
double host_rel_l2(const float *a, const float *b, size_t n);

/* Model shape helpers (for the memory bounds). */
size_t host_model_numel(int model, uint32_t *nparams, size_t *max_param);
#endif
