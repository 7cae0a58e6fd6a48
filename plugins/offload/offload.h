/* offload: ZeRO-Offload (optimizer states and fp32 master in host memory).
 * Internal to the plugin; shared by its four source files:
 *   offload_plugin.c  the table, create/params_done/hooks/destroy
 *   offload_step.c    the boundary step (grads to host, CPU optimizer,
 *                     params back to the device, all-gather)
 *   offload_tiers.c   crossings between the tiers (gradient blocks, params)
 *   offload_ckpt.c    sharded save/load
 *
 * Two memory tiers (DESIGN.md section 7):
 *   device tier (ZERO_TIER_DEVICE): the model-dtype parameters (flat, full)
 *     and the gradients: the full flat window sum for stage-1 partitioning,
 *     the owned partition's accumulator for stage-2 partitioning, plus the
 *     bucket engine's staging slots (stage 2).
 *   host tier (ZERO_TIER_HOST, pinned when a GPU backend is in use): this
 *     rank's fp32 master copy (4 Psi/N, separate even for an fp32 model: the
 *     device copy is the working parameter), the optimizer states (8 Psi/N
 *     with Adam) and the landing buffer of the gradient copy (model dtype,
 *     4 or 2 Psi/N: the CPU optimizer cannot read device memory; DeepSpeed
 *     keeps the same buffer as the fp32 partition's .grad).
 * Model dtype fp32, bf16 or fp16 (bf16.enabled / fp16.enabled): device
 * params and gradients are in the model dtype; the optimizer pass rounds the
 * new weights from the host master into the device params (RNE). (The bucket
 * engine decides which gradient dtypes it can reduce.)
 *
 * Threading: as every plugin (abi/zero_plugin.h): grad_buffer/on_grad_ready
 * may run concurrently for distinct params and touch only that param's
 * plugin_data and the thread-safe bucket engine; everything else runs on the
 * step thread.  Built on the plugin kit (kit/zero_kit.h: gradient hand-in,
 * bucket specs and sets, planning), which includes only abi/ headers, like
 * any third-party plugin built on the installed kit. */
#ifndef ZERO_PLUGIN_OFFLOAD_H
#define ZERO_PLUGIN_OFFLOAD_H
#include "zero_kit.h"

typedef struct offload {
    const zero_services *svc;
    zero_core *c;
    const zero_layout *L;
    zero_comm *world;
    int part_stage;     /* 1: grads partitioned only at the boundary; 2: reduce-scatter every micro-step */
    int contiguous;     /* contiguous_gradients (stage 2) */
    int pin_memory;     /* offload_optimizer.pin_memory: host tier pinned with a GPU backend */
    zero_dtype dtype;   /* model dtype of params (F32, BF16, F16) */
    size_t esize;       /* its bytes per element */
    zero_dtype gdtype;  /* gradients (dgrad, hgrad): fp32 (grad_accum_dtype fp32) or the model dtype */
    size_t gesize;

    /* device tier */
    void *params;       /* flat_numel, model dtype: permanent full storage */
    void *dgrad;        /* gdtype; stage 1: flat_numel window sum; stage 2: part_numel accumulator */
    zero_kit_bsets bs;     /* bucket sets: one per partition communicator (1.3 expert groups) */

    /* host tier */
    float *master;      /* part_numel fp32 master of the owned partition */
    void *hgrad;        /* part_numel, gdtype: summed gradient copied from the device */
    float *state[4];    /* optimizer states, part_numel each */
    uint32_t nstate;

    zero_owned_range *owned; /* this rank's share of each group */
    uint32_t nowned;

    /* Gradient elements copied to the host by on_block_final during the
     * current boundary micro-step (written under the bucket engine's lock,
     * read by the step thread after buckets_flush, which orders them). */
    uint64_t early_numel;
    uint64_t backward_numel;  /* of which before zero_step (from hook threads), all steps */
    uint64_t copied_numel;    /* all gradient elements copied to the host, all steps */
    int in_flush;             /* step thread inside buckets_flush (read by on_block_final) */

    /* timings (seconds, summed; logged at destroy) */
    double t_d2h_early;  /* block copies inside on_block_final (during backward or in the flush) */
    double t_d2h, t_cpu_step, t_h2d_gather; /* the boundary step's parts */
    uint64_t steps, early_steps; /* optimizer steps; of which the gradient came fully by on_block_final */
} offload;

/* Ownership: every function below borrows `s` (owned by the plugin table's
 * create/destroy) and the buffers in it; none allocates or frees.
 *
 * Tier crossings (offload_tiers.c).  They never dereference device memory
 * (svc->mem_copy / mem_set only).  Step thread only, except
 * zero__of_block_to_host, which also runs inside on_block_final under the
 * bucket engine's lock (it touches only that block of hgrad). */
void zero__of_block_to_host(offload *s, const zero_owned_range *o); /* gradient block -> hgrad */
void zero__of_params_to_device(offload *s);   /* host master -> owned device params (model dtype, RNE) */
/* Bytes of the device gradient buffer.  Pure. */
static inline size_t zero__of_dgrad_bytes(const offload *s) {
    return (size_t)(s->part_stage == 1 ? s->L->flat_numel : s->L->part_numel) * s->gesize;
}
/* The owned partition as the core's step, master_init and ckpt_shard
 * services see it: host master, states and gradient landing buffer, all
 * partition-indexed; no param_out (the new weights cross to the device
 * afterwards).  Pure; the result points into s (offload_step.c). */
zero_part_step zero__of_part_step(const offload *s);
/* Bucket engine callback (zero_bucket_spec.on_block_final; offload_step.c):
 * at the boundary micro-step, copy a final reduced block to the host now.
 * Runs on a hook thread or the step thread, serialized by the engine's lock;
 * `block` is borrowed for the call. */
void zero__of_block_final(void *user, const zero_owned_range *block);
/* Boundary work of zero_step (offload_step.c); called after buckets_flush
 * at a boundary micro-step.  Collective over the world communicator.  Step
 * thread only. */
zero_status zero__of_boundary(offload *s, const zero_step_ctx *ctx, zero_step_report *rep);
/* Checkpoint (offload_ckpt.c): the plugin table's save/load.  Load is
 * collective (agreed status, then the all-gather).  Step thread only. */
zero_status zero__of_save(void *state, const char *dir);
zero_status zero__of_load(void *state, const char *dir);
/* write_params (offload_write.c): the device params and the owned fp32
 * master of each param; no communication. */
zero_status zero__of_write_params(void *state, zero_param_info *const *params, size_t n, const void *const *values);
/* Monotonic seconds (offload_step.c, where the step times its copies).
 * Thread-safe. */
double zero__of_now(void);
#endif
