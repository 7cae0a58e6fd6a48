/* Glue shared by the built-in flat-layout plugins (stage0, stage1,
 * stage1-pp, stage2, stage3, offload): the few pieces of plugin-side code
 * that were the same in each of them.  Compiled into every plugin that
 * lists plugin_glue.c in its sources (hidden like the rest of the plugin);
 * it includes only abi/ headers, so a third-party plugin may copy it.
 *
 * zero__flat_state: a flat-layout plugin's model state: the full flat
 * parameters, the fp32 master (the params themselves for an fp32 model),
 * the optimizer states over this rank's owned ranges -- or over the whole
 * flat space for a replicated plugin (stage 0) -- and the gradient buffer
 * the bucket engine reduces into; with the functions that build its bucket
 * engine, step it at the boundary and checkpoint it.  Owned by the plugin
 * that embeds it: zero__flat_init fills it at params_done, zero__flat_free
 * releases it at destroy.  Step thread only.  (offload keeps its own
 * buffers: its master and states live in the host tier; stage 3 has no flat
 * parameters at all.)
 *
 * Gradient hand-in (grad_buffer / on_grad_ready): thread-safe for distinct
 * params, as the plugin ABI requires; each call touches only that param's
 * temporary and the (thread-safe) bucket engine. */
#ifndef ZERO_PLUGIN_GLUE_H
#define ZERO_PLUGIN_GLUE_H
#include "zero_plugin.h"

#include <stddef.h>

/* The dtype the plugin keeps gradients in (zero_run_config.grad_accum_dtype
 * as the core resolved it), or the model dtype from a 1.0 core, which has
 * no such field.  A plugin using this declares ZERO_PLUGIN_CAP_GRAD_DTYPES. */
static inline zero_dtype zero__grad_dtype_of(const zero_run_config *rc) {
    return rc->struct_size >= offsetof(zero_run_config, grad_accum_dtype) + sizeof rc->grad_accum_dtype
               ? rc->grad_accum_dtype
               : rc->model_dtype;
}

/* Does a plugin that would sum the micro-steps of a window locally and
 * reduce once (stage 0/1, stage1-pp, offload with stage-1 partitioning)
 * instead reduce every micro-step and add the reduced values into a
 * partition accumulator, exactly as stage 2 does?  Yes with
 * gradient_accumulation_steps > 1, no pipeline, and
 * zero_optimization.reduce_once_per_window off (the default): then every
 * plugin forms bitwise stage 2's window sums, partition[i] + R(g_m)[i]
 * from zero in micro-step order, R the layout-block reduction
 * (docs/determinism.md).  With a pipeline the local sum stays (stage 2/3
 * are refused there, so stage0 and stage1-pp, the plugins that run with a
 * pipeline, still agree bitwise with each other; the reduction's cost
 * is why stage1-pp exists).  Gradient accumulation 1: no difference, the
 * window is one micro-step, and nothing changes. */
static inline int zero__reduce_every_micro_step(const zero_run_config *rc) {
    const int once = rc->struct_size >= offsetof(zero_run_config, reduce_once_per_window) +
                                            sizeof rc->reduce_once_per_window &&
                     rc->reduce_once_per_window;
    return rc->grad_accum_steps > 1 && rc->pipeline_stages <= 1 && !once;
}

typedef struct zero__flat_state {
    const zero_services *svc;
    zero_core *c;
    const zero_layout *L;
    zero_dtype dtype;         /* model dtype of params and gradients */
    size_t esize;             /* its bytes per element */
    void *params;             /* flat_numel, model dtype, device tier: every param's permanent storage */
    float *master;            /* fp32: == params; 16-bit: fp32, partition- (or, replicated, flat-) sized */
    float *state[4];          /* optimizer states, one per svc->optim_state_count */
    uint32_t nstate;
    zero_owned_range *owned;  /* what this rank steps: its share of each group, or the whole flat space */
    uint32_t nowned;
    int replicated;           /* stage 0: every rank steps everything */
    zero_dtype gdtype;        /* gradient dtype: fp32 (grad_accum_dtype fp32) or the model dtype */
    size_t gesize;            /* its bytes per element */
    void *grads;              /* the reduced gradient (device tier, gdtype, GRADS), grad_index-indexed */
    size_t grad_bytes;
    zero_index_kind grad_index;
    zero_comm *norm_comm;     /* norm and overflow (NULL: comm_global) */
    zero_comm *gather_comm;   /* all-gather of the updated shares after a step or load (comm_world by
                                 default; NULL for a replicated state: nothing to gather) */
} zero__flat_state;

/* At params_done: allocate params (ZERO_MEM_PARAMS), master
 * (ZERO_MEM_MASTER, 16-bit models only), states (ZERO_MEM_OPTIM) and the
 * gradient buffer (ZERO_MEM_GRADS, grad_numel elements, indexed as
 * grad_index) in the device tier, master and states partition-sized
 * (replicated = 0) or flat-sized (replicated = 1); find the owned ranges;
 * place the initial values (svc->params_place: every param must be in the
 * model dtype) and widen the master from them (svc->master_init).  norm_comm
 * starts NULL (comm_global: every stage of a pipeline, else comm_world),
 * gather_comm as comm_world (NULL when replicated).
 * `who` names the plugin in errors.  Requires the services up to
 * ckpt_agree (else ZERO_ERR_UNSUPPORTED).  On error the state holds what
 * was allocated: zero__flat_free it. */
zero_status zero__flat_init(zero__flat_state *f, const zero_services *svc, int replicated, uint64_t grad_numel,
                            zero_index_kind grad_index, const char *who);
/* The bucket engine over f's gradient buffer, sized and overlapped as the
 * config says (reduce_bucket_size, overlap_comm), over comm (NULL: world).
 * ALLREDUCE / SCATTER_INPLACE: the buffer is the flat window sum, reduced
 * only at the boundary; SCATTER: it is the partition accumulator, reduced
 * every micro-step (the staging cannot hold a window's sum). */
zero_status zero__flat_buckets(zero__flat_state *f, zero_bucket_mode mode, zero_comm *comm, int contiguous,
                               zero_buckets **out);
/* The same with the bucket engine's destination given: `dst` is the flat
 * window sum (in-place modes) or the partition accumulator (SCATTER), of
 * f's gradient dtype.  (stage0 reducing every micro-step keeps a partition
 * accumulator beside its flat gradient.) */
zero_status zero__flat_buckets_into(zero__flat_state *f, zero_bucket_mode mode, zero_comm *comm, int contiguous,
                                    void *dst, zero_buckets **out);
/* The spec zero__flat_buckets_into would create (for zero__bsets_create). */
zero_bucket_spec zero__flat_bucket_spec(const zero__flat_state *f, zero_bucket_mode mode, zero_comm *comm,
                                        int contiguous, void *dst);

/* (1.3) Bucket sets, one per partition communicator: the dense groups'
 * over spec->comm (the world), and one per expert group over its
 * expert-data-parallel communicator (svc->group_comm), all reducing into
 * the same flat / partition buffer (their blocks are disjoint).  Without
 * expert groups (or with a core older than 1.3) it is exactly one bucket
 * set, as before.  Owned by the plugin that embeds it; create at
 * params_done, destroy at destroy.  zero__bsets_of is thread-safe (reads
 * only); the others run on the step thread. */
typedef struct zero__bsets {
    const zero_services *svc;
    zero_buckets **b;   /* n bucket sets; b[0] is the dense groups' */
    uint32_t n;
    uint32_t *of_param; /* bucket set of each param (NULL when n == 1) */
} zero__bsets;
zero_status zero__bsets_create(zero__bsets *s, const zero_services *svc, const zero_bucket_spec *spec);
/* The bucket set that reduces param `index`. */
static inline zero_buckets *zero__bsets_of(const zero__bsets *s, uint32_t index) {
    return s->of_param ? s->b[s->of_param[index]] : s->b[0];
}
/* buckets_flush of every set, in order (every set is flushed even after an
 * error; the first error is returned).  Collective over each set's comm. */
zero_status zero__bsets_flush(zero__bsets *s);
void zero__bsets_destroy(zero__bsets *s); /* NULL-safe, idempotent */

/* Free everything zero__flat_init allocated (NULL-safe, idempotent). */
void zero__flat_free(zero__flat_state *f);
/* The core's step / checkpoint description of f.  Master and states
 * partition-indexed (the params when the master is the params); 16-bit
 * models round the new weights into the flat params.  Pure; the result
 * points into f. */
zero_part_step zero__flat_part_step(const zero__flat_state *f);
/* The boundary, after buckets_flush: svc->boundary_step (norm, clip,
 * step, report), the gradient buffer cleared for the next window, and --
 * unless the step overflowed -- the updated shares all-gathered over
 * gather_comm.  Collective. */
zero_status zero__flat_boundary(zero__flat_state *f, const zero_step_ctx *ctx, zero_step_report *rep);
/* Checkpoint blobs of f: svc->ckpt_shard under `prefix` (params, master,
 * states) and the gradient buffer as "<prefix>.<grads_blob>" (a save in the
 * middle of a window resumes exactly).  Local. */
zero_status zero__flat_ckpt(zero__flat_state *f, const char *dir, const char *prefix, const char *grads_blob,
                            int write);
/* The same with the gradient blob's buffer given (`grads`, `grad_bytes`
 * bytes, device tier) instead of f->grads: the buffer that holds the
 * window's state. */
zero_status zero__flat_ckpt_buf(zero__flat_state *f, const char *dir, const char *prefix, const char *grads_blob,
                                void *grads, size_t grad_bytes, int write);
/* zero_load: read the blobs, agree on the read status over comm_world (a
 * shard missing on one rank fails on every rank, never a hang), then
 * all-gather the shares over gather_comm.  Collective. */
zero_status zero__flat_load(zero__flat_state *f, const char *dir, const char *prefix, const char *grads_blob);
/* zero__flat_load with the gradient blob read into `grads` (see
 * zero__flat_ckpt_buf). */
zero_status zero__flat_load_buf(zero__flat_state *f, const char *dir, const char *prefix, const char *grads_blob,
                                void *grads, size_t grad_bytes);

/* grad_buffer with contiguous_gradients off: the param's own temporary in
 * *tmp (allocated on first use, device tier, GRADS-tagged, p->numel
 * elements of esize bytes), handed to the bucket engine and freed by
 * zero__grad_ready.  `who` names the plugin in the out-of-memory error. */
zero_status zero__grad_tmp(const zero_services *svc, zero_param_info *p, size_t esize, void **tmp, void **buf,
                           const char *who);
/* on_grad_ready: p's gradient is final.  With a temporary (*tmp non-NULL,
 * tmp may be NULL) it goes into p's bucket slot and is freed (*tmp = NULL);
 * else the host-owned gradient, if any, is added into the slot.  A
 * gradient the core marked missing (grad_is_zero) counts as zero. */
zero_status zero__grad_ready(const zero_services *svc, zero_buckets *b, zero_param_info *p, void **tmp);
/* At destroy, for a plugin that keeps the temporaries in p->plugin_data:
 * free those of params never reported ready (none after params_done is
 * NULL-safe: params_done sets every plugin_data to NULL first). */
void zero__grad_tmps_free(const zero_services *svc);
#endif

/* ---- planning (ABI 1.2: the table's optional `plan` entry) ---------------
 * What zero__flat_init and zero__flat_buckets allocate, recorded through
 * ps->add without allocating: params (flat, model dtype), master (16-bit
 * models: partition- or, replicated, flat-sized fp32), optimizer states,
 * the gradient buffer (grad_numel elements of the grad dtype) and the
 * bucket engine's staging for `mode` (ps->buckets_bytes), all device tier.
 * Pure; thread-safe. */
void zero__flat_plan(const zero_plan_services *ps, int replicated, uint64_t grad_numel, zero_bucket_mode mode);
/* contiguous_gradients off (or fp32 accumulation of a 16-bit model): the
 * per-param temporaries zero__grad_tmp allocates, for a host that hands in
 * one gradient at a time: the largest param's, model dtype, GRADS. */
void zero__grad_tmp_plan(const zero_plan_services *ps);
/* The bucket spec a plugin's plan passes to ps->buckets_bytes: mode,
 * reduce_bucket_size, overlap_comm and the grad dtype as the plugin would
 * build them. */
zero_bucket_spec zero__plan_bucket_spec(const zero_plan_services *ps, zero_bucket_mode mode);
