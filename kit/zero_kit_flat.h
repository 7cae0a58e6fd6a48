/* libzero plugin kit: the flat data-parallel engine (zero_kit.h includes
 * this; include zero_kit.h).  Conventions (svc, errors, memory, threads) as
 * in zero_kit_glue.h.
 *
 * Two levels:
 *  - zero_kit_flat: a flat-layout plugin's model state and the steps on it
 *    (allocate and place, bucket engine over its gradient, boundary step,
 *    checkpoint, plan), for a strategy that keeps the full flat parameters
 *    and decides itself how its gradient is reduced and when it steps
 *    (examples/plugin-template is one);
 *  - zero_kit_dp: a whole strategy from a spec (zero_kit_dp_spec): the
 *    table entries of stage0, stage1, stage2 and stage1-pp, which are
 *    presets of it.  A plugin that is a preset is a spec, a create and a
 *    table. */
#ifndef ZERO_KIT_FLAT_H
#define ZERO_KIT_FLAT_H
#include "zero_kit_glue.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the flat model state ------------------------------------------------ */

/* The full flat parameters, the fp32 master (the params themselves for an
 * fp32 model), the optimizer states over this rank's owned ranges -- or
 * over the whole flat space for a replicated strategy (stage 0) -- and the
 * gradient buffer the bucket engine reduces into.  Owned by the plugin that
 * embeds it (zero it first): zero_kit_flat_init fills it at params_done,
 * zero_kit_flat_free releases it at destroy.  The fields are public to
 * read; norm_comm and gather_comm may be changed after init.  Step thread
 * only, except that hooks may read it. */
typedef struct zero_kit_flat {
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
} zero_kit_flat;

/* At params_done: allocate params (ZERO_MEM_PARAMS), master
 * (ZERO_MEM_MASTER, 16-bit models only), states (ZERO_MEM_OPTIM) and the
 * gradient buffer (ZERO_MEM_GRADS, grad_numel elements, indexed as
 * grad_index) in the device tier, master and states partition-sized
 * (replicated = 0) or flat-sized (replicated = 1); find the owned ranges;
 * place the initial values (svc->params_place: every param must be in the
 * model dtype) and widen the master from them (svc->master_init).  norm_comm
 * starts NULL (comm_global: every stage of a pipeline, else comm_world),
 * gather_comm as comm_world (NULL when replicated).  `who` names the plugin
 * in errors.  On error f holds what was allocated: zero_kit_flat_free it.
 * Step thread. */
zero_status zero_kit_flat_init(zero_kit_flat *f, const zero_services *svc, int replicated, uint64_t grad_numel,
                               zero_index_kind grad_index, const char *who);
/* Free everything zero_kit_flat_init allocated (NULL-safe, idempotent).
 * Step thread (destroy). */
void zero_kit_flat_free(zero_kit_flat *f);
/* The bucket spec over f's gradient buffer (zero_kit_bucket_spec with f's
 * gradient dtype): `dst` is the flat window sum (in-place modes) or the
 * partition accumulator (SCATTER), of f's gradient dtype -- f->grads, or a
 * buffer of the plugin's (stage0 reducing every micro-step keeps a
 * partition accumulator beside its flat gradient).  Borrows f, comm, dst.
 * Pure. */
zero_bucket_spec zero_kit_flat_bucket_spec(const zero_kit_flat *f, zero_bucket_mode mode, zero_comm *comm,
                                           int contiguous, void *dst);
/* svc->buckets_create over that spec with dst = f->grads; the plugin owns
 * *out (svc->buckets_destroy).  Step thread. */
zero_status zero_kit_flat_buckets(zero_kit_flat *f, zero_bucket_mode mode, zero_comm *comm, int contiguous,
                                  zero_buckets **out);
/* The same with the destination given. */
zero_status zero_kit_flat_buckets_into(zero_kit_flat *f, zero_bucket_mode mode, zero_comm *comm, int contiguous,
                                       void *dst, zero_buckets **out);
/* The core's step / checkpoint description of f.  Master and states
 * partition-indexed (the params when the master is the params); 16-bit
 * models round the new weights into the flat params.  Pure; the result
 * points into f (valid while f is). */
zero_part_step zero_kit_flat_part_step(const zero_kit_flat *f);
/* The boundary, after the buckets are flushed: svc->boundary_step (norm,
 * clip, step, report), the gradient buffer cleared for the next window,
 * and -- unless the step overflowed -- the updated shares all-gathered over
 * gather_comm.  Collective over norm_comm and gather_comm.  Step thread. */
zero_status zero_kit_flat_boundary(zero_kit_flat *f, const zero_step_ctx *ctx, zero_step_report *rep);
/* Checkpoint blobs of f: svc->ckpt_shard under `prefix` (params, master,
 * states: reshardable between world sizes and plugins) and the gradient
 * buffer as "<prefix>.<grads_blob>" (a save in the middle of a window
 * resumes exactly).  A resharding read clears the gradient instead (such a
 * checkpoint is at a boundary).  Local.  Step thread. */
zero_status zero_kit_flat_ckpt(zero_kit_flat *f, const char *dir, const char *prefix, const char *grads_blob,
                               int write);
/* The same with the gradient blob's buffer given (`grads`, `grad_bytes`
 * bytes, device tier): the buffer that holds the window's state. */
zero_status zero_kit_flat_ckpt_buf(zero_kit_flat *f, const char *dir, const char *prefix, const char *grads_blob,
                                   void *grads, size_t grad_bytes, int write);
/* zero_load: read the blobs, agree on the read status over agree_comm
 * (NULL: comm_world; a shard missing on one rank fails on every rank,
 * never a hang), then all-gather the shares over gather_comm.  Collective.
 * Step thread. */
zero_status zero_kit_flat_load(zero_kit_flat *f, const char *dir, const char *prefix, const char *grads_blob,
                               zero_comm *agree_comm);
/* zero_kit_flat_load with the gradient blob read into `grads`. */
zero_status zero_kit_flat_load_buf(zero_kit_flat *f, const char *dir, const char *prefix, const char *grads_blob,
                                   void *grads, size_t grad_bytes, zero_comm *agree_comm);

/* (plugin ABI 1.8) write_params for a flat state: params[i]'s values
 * (values[i], its numel elements in the model dtype, device tier, the same
 * on every rank) into its slot of the flat params on this rank, and, for a
 * 16-bit model, widened into the fp32 master where this rank owns them.
 * Gradients and optimizer states are untouched; no communication (every
 * rank holds the full flat params and was handed the same values). */
zero_status zero_kit_flat_write(zero_kit_flat *f, zero_param_info *const *params, size_t n,
                                const void *const *values);
/* Plan (ABI 1.2) of what zero_kit_flat_init and a bucket set in `mode`
 * allocate, recorded through ps->add without allocating: params (flat,
 * model dtype), master (16-bit models: partition- or, replicated,
 * flat-sized fp32), optimizer states, the gradient buffer (grad_numel
 * elements of the grad dtype) and the bucket engine's staging
 * (ps->buckets_bytes), all device tier.  Pure apart from ps->add. */
void zero_kit_flat_plan(const zero_plan_services *ps, int replicated, uint64_t grad_numel, zero_bucket_mode mode);

/* ---- the flat data-parallel engine: strategies as presets ---------------- */

/* What distinguishes one flat data-parallel strategy from another.  A
 * static const in the plugin; it must outlive every state made from it. */
typedef struct zero_kit_dp_spec {
    const char *name;       /* error messages and the checkpoint blob prefix */
    const char *grads_blob; /* checkpoint name of the window's gradient ("<name>.<grads_blob>") */
    zero_bucket_mode mode;  /* ALLREDUCE / SCATTER_INPLACE: a flat window sum reduced at the boundary;
                               SCATTER: a partition accumulator reduced every micro-step */
    int replicated;         /* every rank steps everything (stage 0) */
    /* Checkpoint name of the partition accumulator when an in-place spec
     * reduces every micro-step (zero_kit_reduce_every_micro_step); NULL:
     * "part" (stage 2's). */
    const char *micro_blob;
    /* A load agrees on its outcome over comm_global (every pipeline stage)
     * instead of comm_world: for presets that run with a pipeline and whose
     * load must fail on every stage together (stage1-pp). */
    int agree_global;
} zero_kit_dp_spec;

/* The table entries.  Ownership: zero_kit_dp_create allocates the state
 * (*state), zero_kit_dp_destroy frees it and everything it holds; the spec
 * is borrowed for the state's life.  Threading: as the plugin ABI says --
 * grad_buffer / on_grad_ready are hook-safe (distinct params), everything
 * else runs on the step thread.
 *
 * A preset's create is `return zero_kit_dp_create(svc, &spec, state);`. */
zero_status zero_kit_dp_create(const zero_services *svc, const zero_kit_dp_spec *spec, void **state);
/* Optional register_param entry: refuse, at registration, a param that is
 * not in the model dtype (without it params_done refuses it). */
zero_status zero_kit_dp_register_param(void *state, zero_param_info *p);
/* Allocates the model state (zero_kit_flat_init), the partition
 * accumulator when the spec reduces every micro-step, and the bucket sets. */
zero_status zero_kit_dp_params_done(void *state);
zero_status zero_kit_dp_grad_buffer(void *state, zero_param_info *p, void **buf);
zero_status zero_kit_dp_on_grad_ready(void *state, zero_param_info *p, void *stream);
/* Every micro-step: reduce what is left; at the boundary norm, clip, step,
 * gradient cleared and shares all-gathered (zero_kit_flat_boundary). */
zero_status zero_kit_dp_step(void *state, const zero_step_ctx *ctx, zero_step_report *rep);
/* Sharded checkpoint incl. the window's gradient, so a save in the middle
 * of an accumulation window resumes exactly; load agrees on the read status
 * on every rank before the all-gather. */
zero_status zero_kit_dp_save(void *state, const char *dir);
zero_status zero_kit_dp_load(void *state, const char *dir);
zero_status zero_kit_dp_write_params(void *state, zero_param_info *const *params, size_t n,
                                     const void *const *values);
void zero_kit_dp_destroy(void *state);
/* The engine's entries of a plugin table, for a preset:
 *   ZERO_PLUGIN_EXPORT const zero_plugin_table ZERO_PLUGIN_TABLE = {
 *       ZERO_PLUGIN_TABLE_HEAD, .caps = ..., .name = ..., .create = my_create,
 *       ZERO_KIT_DP_ENTRIES, .plan = my_plan};
 * (create and plan bind the preset's spec; register_param is left to the
 * preset: zero_kit_dp_register_param refuses params not in the model dtype
 * at registration instead of at params_done). */
#define ZERO_KIT_DP_ENTRIES                                                                                    \
    .params_done = zero_kit_dp_params_done, .grad_buffer = zero_kit_dp_grad_buffer,                           \
    .on_grad_ready = zero_kit_dp_on_grad_ready, .step = zero_kit_dp_step, .save = zero_kit_dp_save,            \
    .load = zero_kit_dp_load, .write_params = zero_kit_dp_write_params, .destroy = zero_kit_dp_destroy
/* The table's plan entry (ABI 1.2) for `spec`: what params_done and the
 * bucket engine will allocate, plus the per-param gradient temporaries when
 * they are used.  A preset's plan is
 * `return zero_kit_dp_plan(ps, &spec);`.  Pure apart from ps->add. */
zero_status zero_kit_dp_plan(const zero_plan_services *ps, const zero_kit_dp_spec *spec);

#ifdef __cplusplus
}
#endif
#endif /* ZERO_KIT_FLAT_H */
