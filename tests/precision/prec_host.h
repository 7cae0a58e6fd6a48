/* A small deterministic host for the mixed-precision tests, written against
 * abi/zero.h only (like a real trainer): it registers its params in the
 * model dtype (fp32, bf16 or fp16), keeps its activations and gradient math
 * in fp32 and converts at the boundaries (RNE, with the per-element
 * conversions of kernels/cpu/optim_math.h), multiplies its loss by
 * zero_loss_scale() and records every zero_step result.
 *
 * Model: PREC_NPARAMS params of awkward sizes (they straddle rank
 * partitions), per-sample loss 0.5 * sum_k a_k(s) * (w_k - t_k(s))^2 with
 * a_k(s) in [0.5, 1.5) and t_k(s) in [-1, 1) pure functions of the sample
 * index s, so every quantity can be recomputed independently in fp64 (the
 * clipping test does).  The host gradient of a micro-step is the MEAN over
 * its local samples.  Rank r of W in micro-step m takes samples
 * [m*W*mb + r*mb, m*W*mb + (r+1)*mb).
 *
 * Not thread-safe; one run at a time per process. */
#ifndef PREC_HOST_H
#define PREC_HOST_H
#include <stddef.h>
#include <stdint.h>

#include "zero.h"

#define PREC_NPARAMS 6
#define PREC_MAX_STEPS 64

typedef struct prec_cfg {
    const char *plugin;      /* "stage0" ... "stage3", "stage1-pp" */
    int stage;               /* zero_optimization.stage */
    zero_dtype dtype;        /* model dtype */
    int steps;               /* boundary steps (<= PREC_MAX_STEPS) */
    int gas, mb;
    const char *fp16_json;   /* NULL: {"enabled": true, "initial_scale_power": 12} when dtype is F16 */
    const char *optimizer_json; /* NULL: AdamW lr 1e-2 */
    const char *extra_json;  /* extra top-level members ("\"gradient_clipping\": 0.5"), or NULL */
    uint64_t inject_mask;    /* bit s: at boundary step s one rank (s % W) writes Inf/NaN into its gradient */
    int self_comm;           /* ZERO_COMM_SELF instead of MPI_COMM_WORLD */
    const char *zero_extra_json; /* extra zero_optimization members, or NULL */
    const char *ckpt_dir;    /* zero_save / zero_load directory */
    int save_at;             /* > 0: zero_save after this many boundary steps */
    int load_at;             /* > 0: zero_load right after params_done and continue at this step */
} prec_cfg;

prec_cfg prec_default_cfg(void);

typedef struct prec_out {
    zero_status status;      /* first failing call (ZERO_OK if none) */
    char error[512];
    float *params;           /* final params widened to fp32, registration order (malloc) */
    float *params_step1;     /* the same after the first boundary step */
    size_t numel;
    int nsteps;              /* boundary steps recorded */
    zero_status step_status[PREC_MAX_STEPS];
    int taken[PREC_MAX_STEPS], overflow[PREC_MAX_STEPS];
    double norm[PREC_MAX_STEPS], scale[PREC_MAX_STEPS], lr[PREC_MAX_STEPS];
    double scale_before[PREC_MAX_STEPS]; /* zero_loss_scale() used for the window's losses */
    zero_memory_stats mem;   /* this rank, after the last step */
} prec_out;

/* Train as configured.  Collective over MPI_COMM_WORLD unless self_comm.
 * Stops at the first failing call except ZERO_ERR_LOSS_SCALE from
 * zero_step, which is recorded and ends the run. */
void prec_run(const prec_cfg *c, prec_out *o);
void prec_free(prec_out *o);

/* Independent fp64 model: sizes, initial value, and the gradient of the
 * mean loss over samples [s0, s0 + n) for element k of param i. */
size_t prec_param_numel(int i);
size_t prec_total_numel(void);
double prec_init(int i, size_t k);
double prec_sample_a(uint64_t s, int i, size_t k);
double prec_sample_t(uint64_t s, int i, size_t k);

double prec_rel_l2(const float *a, const float *b, size_t n);
#endif
