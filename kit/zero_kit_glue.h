/* libzero plugin kit: the glue every strategy needs (zero_kit.h includes
 * this; include zero_kit.h).
 *
 * The kit is a floor between the core and the plugins: it includes only the
 * abi/ headers (zero.h, zero_plugin.h) and reaches the core only through the
 * services table a plugin's create receives.  libzero installs it as
 * libzero_kit.a (static, position independent: it is linked into the
 * plugin's own .so, whose hidden visibility keeps every kit symbol inside
 * the plugin) with these headers; find_package(zero) gives zero::kit,
 * pkg-config zero-kit.  A plugin built against the kit never links libzero.
 *
 * Conventions, for every function below unless it says otherwise:
 *  - `svc` is the table the plugin's create received; it is borrowed and
 *    must stay valid (it does, from create until destroy returns);
 *  - errors are set on the engine with svc->error (so the host's
 *    zero_last_error names the plugin through `who`) and returned;
 *  - memory comes from svc->mem_alloc (accounted, device tier unless
 *    named) and goes back through the matching kit or svc free;
 *  - threads: "step thread" means the engine's calling thread, one call at
 *    a time (every table entry except grad_buffer / on_grad_ready);
 *    "hook-safe" means it may also run inside grad_buffer / on_grad_ready,
 *    concurrently for distinct params; "pure" functions touch nothing but
 *    their arguments and may run anywhere.
 *
 * The kit names only the version-free ABI aliases (zero_services,
 * zero_plugin_table, zero_plan_services) and uses services by field name:
 * rebuilt against a newer zero_plugin.h it follows that header's layout.  A
 * plugin built against a header only loads into a core at least that new
 * (the loader refuses a newer minor), so the kit needs no ZERO_SERVICES_HAS
 * checks. */
#ifndef ZERO_KIT_GLUE_H
#define ZERO_KIT_GLUE_H
#include <stddef.h>
#include <stdint.h>

#include "zero_plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- dtypes and the accumulation rule (pure, inline) -------------------- */

/* Bytes per element of a model / gradient dtype (F32: 4; BF16, F16: 2). */
static inline size_t zero_kit_dtype_size(zero_dtype dt) { return dt == ZERO_DTYPE_F32 ? 4 : 2; }

/* The dtype a plugin keeps gradients in: zero_run_config.grad_accum_dtype
 * as the core resolved it for this plugin (a plugin using it declares
 * ZERO_PLUGIN_CAP_GRAD_DTYPES; otherwise the core resolves it to the model
 * dtype).  A plugin runs only on a core at least as new as its headers, so
 * the field is always there. */
static inline zero_dtype zero_kit_grad_dtype(const zero_run_config *rc) { return rc->grad_accum_dtype; }

/* The model and gradient dtypes of rc and their element sizes, into the
 * four fields every strategy keeps.  Pure. */
static inline void zero_kit_dtypes(const zero_run_config *rc, zero_dtype *dtype, size_t *esize, zero_dtype *gdtype,
                                   size_t *gesize) {
    *dtype = rc->model_dtype;
    *esize = zero_kit_dtype_size(*dtype);
    *gdtype = zero_kit_grad_dtype(rc);
    *gesize = zero_kit_dtype_size(*gdtype);
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
static inline int zero_kit_reduce_every_micro_step(const zero_run_config *rc) {
    return rc->grad_accum_steps > 1 && rc->pipeline_stages <= 1 && !rc->reduce_once_per_window;
}

/* ---- create and memory --------------------------------------------------- */

/* What a strategy refuses at create (zero_kit_create's `refuse`). */
enum {
    ZERO_KIT_REFUSE_LAMB = 1u << 0,     /* optimizer.type Lamb (its trust ratios span comm_world) */
    ZERO_KIT_REFUSE_PIPELINE = 1u << 1  /* pipeline.stages > 1 */
};

/* The start of a table's create: refuse what `refuse` names with a message
 * naming `who`, then allocate `size` zeroed bytes (plain calloc: plugin
 * bookkeeping, not model state) into *state.  The plugin owns *state and
 * frees it with free() in its destroy.  *state is NULL on error.  Step
 * thread (create). */
zero_status zero_kit_create(const zero_services *svc, size_t size, unsigned refuse, const char *who, void **state);

/* n elements of esize bytes from svc->mem_alloc in (tier, tag): accounted,
 * 64-byte aligned, zero-filled; at least one element, so that NULL always
 * means out of memory.  The caller owns the block and frees it with
 * svc->mem_free.  Thread-safe (the allocator is). */
void *zero_kit_alloc_n(const zero_services *svc, zero_mem_tier tier, zero_mem_tag tag, uint64_t n, size_t esize);

/* ---- gradient hand-in (grad_buffer / on_grad_ready) --------------------- */

/* grad_buffer with contiguous_gradients off (or fp32 accumulation of a
 * 16-bit model): the param's own temporary in *tmp (allocated on first use,
 * device tier, GRADS-tagged, p->numel elements of esize bytes), handed to
 * the host in *buf and freed by zero_kit_grad_ready.  *tmp is a slot the
 * plugin keeps per param (p->plugin_data, or a field of its own per-param
 * record), NULL before the first call.  `who` names the plugin in the
 * out-of-memory error.  Hook-safe. */
zero_status zero_kit_grad_tmp(const zero_services *svc, zero_param_info *p, size_t esize, void **tmp, void **buf,
                              const char *who);
/* on_grad_ready: p's gradient is final.  With a temporary (tmp non-NULL and
 * *tmp non-NULL) it goes into p's bucket slot and is freed (*tmp = NULL);
 * else the host-owned gradient, if any, is added into the slot.  A
 * gradient the core marked missing (grad_is_zero) counts as zero.
 * Hook-safe; b is the bucket set that reduces p. */
zero_status zero_kit_grad_ready(const zero_services *svc, zero_buckets *b, zero_param_info *p, void **tmp);
/* At destroy, for a plugin that keeps the temporaries in p->plugin_data:
 * free those of params never reported ready (it must have set every
 * plugin_data to NULL at params_done; before params_done nothing is
 * freed).  Step thread (destroy). */
void zero_kit_grad_tmps_free(const zero_services *svc);

/* ---- bucket engine ----------------------------------------------------- */

/* The bucket spec the config asks for: `mode`, reduce_bucket_size,
 * overlap_comm, the gradient dtype (zero_kit_grad_dtype), over comm (NULL:
 * comm_world), contiguous as given; `dst` is the flat window sum
 * (ALLREDUCE / SCATTER_INPLACE, reduced only at the boundary) or the
 * partition accumulator (SCATTER, reduced every micro-step).  The spec
 * borrows dst and comm; pass it to svc->buckets_create or
 * zero_kit_bsets_create.  Pure apart from reading the config. */
zero_bucket_spec zero_kit_bucket_spec(const zero_services *svc, zero_bucket_mode mode, zero_comm *comm,
                                      int contiguous, void *dst);

/* Bucket sets, one per partition communicator: the dense groups' over
 * spec->comm (the world), and one per expert group over its
 * expert-data-parallel communicator (svc->group_comm), all reducing into
 * the same flat / partition buffer (their blocks are disjoint).  Without
 * expert groups it is exactly one bucket set.  Owned by the plugin that
 * embeds it (zero it first); create at params_done, destroy at destroy.
 * zero_kit_bsets_of is hook-safe (reads only); the others run on the step
 * thread. */
typedef struct zero_kit_bsets {
    const zero_services *svc;
    zero_buckets **b;   /* n bucket sets; b[0] is the dense groups' */
    uint32_t n;
    uint32_t *of_param; /* bucket set of each param (NULL when n == 1) */
} zero_kit_bsets;
/* Creates the sets from `spec` (borrowed for the call).  On error the sets
 * made so far stay in s: zero_kit_bsets_destroy them. */
zero_status zero_kit_bsets_create(zero_kit_bsets *s, const zero_services *svc, const zero_bucket_spec *spec);
/* The bucket set that reduces param `index` (borrowed from s). */
static inline zero_buckets *zero_kit_bsets_of(const zero_kit_bsets *s, uint32_t index) {
    return s->of_param ? s->b[s->of_param[index]] : s->b[0];
}
/* buckets_flush of every set, in order (every set is flushed even after an
 * error; the first error is returned).  Collective over each set's comm. */
zero_status zero_kit_bsets_flush(zero_kit_bsets *s);
/* Destroys every set and frees s's arrays (NULL-safe, idempotent). */
void zero_kit_bsets_destroy(zero_kit_bsets *s);

/* ---- where each param lives in the world layout ------------------------ */

/* For every param i and world rank j: the piece of param i inside rank j's
 * share of the layout (a param lies in one layout group, so at most one
 * piece per rank): `count[i * world + j]` elements starting `off[..]`
 * elements into the param, at `part_lo[..]` in rank j's partition
 * numbering (count 0: none).  The arrays are owned by the map; a plugin may
 * keep pointers into them (zero_kit_pmap_off / count / part_lo of a param:
 * `world` entries) until zero_kit_pmap_free. */
typedef struct zero_kit_pmap {
    uint32_t nparams, world;
    uint64_t *off;
    size_t *count;      /* size_t: what the collectives' counts take */
    uint64_t *part_lo;
} zero_kit_pmap;
/* At params_done (the layout is final): fills m for every registered
 * param over `world` ranks (comm_world's size for a plain data-parallel
 * layout).  Every param must be in the model dtype, else
 * ZERO_ERR_UNSUPPORTED naming the param and `who`.  On error m holds what
 * was allocated: zero_kit_pmap_free it.  Step thread. */
zero_status zero_kit_pmap_init(zero_kit_pmap *m, const zero_services *svc, uint32_t world, const char *who);
/* zero_kit_pmap_init, and a zeroed array of one `elem`-byte record per
 * param for the strategy's own bookkeeping into *per_param (malloc'd,
 * owned by the caller: free() it, after zero_kit_pmap_free or before) and
 * its length into *nparams.  On error both hold what was allocated.  Step
 * thread. */
zero_status zero_kit_pmap_params(zero_kit_pmap *m, const zero_services *svc, uint32_t world, size_t elem,
                                 void **per_param, uint32_t *nparams, const char *who);
/* Param i's `world` entries of each array (borrowed from m).  Pure;
 * hook-safe once zero_kit_pmap_init has returned. */
static inline const uint64_t *zero_kit_pmap_off(const zero_kit_pmap *m, uint32_t i) {
    return m->off + (size_t)i * m->world;
}
static inline const size_t *zero_kit_pmap_count(const zero_kit_pmap *m, uint32_t i) {
    return m->count + (size_t)i * m->world;
}
static inline const uint64_t *zero_kit_pmap_part_lo(const zero_kit_pmap *m, uint32_t i) {
    return m->part_lo + (size_t)i * m->world;
}
/* Frees the arrays (NULL-safe, idempotent).  Any thread, once nothing
 * reads the map. */
void zero_kit_pmap_free(zero_kit_pmap *m);

/* ---- a partitioned optimizer's shard ------------------------------------ */

/* The zero_part_step of a partition-indexed shard, for the step services:
 * gradient, master, states and copy-out all indexed by partition offset
 * (ZERO_INDEX_PART).  param_out: the model-dtype shard the new weights are
 * rounded into (16-bit models), or NULL when the master is the shard.
 * norm_comm NULL: comm_global.  Pure: the result borrows every pointer. */
zero_part_step zero_kit_shard_part_step(const zero_owned_range *ranges, uint32_t nranges, zero_comm *norm_comm,
                                        zero_dtype dtype, const void *grad, zero_dtype gdtype, float *master,
                                        float *const state[4], uint32_t nstate, void *param_out);
/* Free what a strategy allocated with mem_alloc for its shard: the
 * optimizer states state[0..3], the fp32 master (when it is not the
 * model-dtype shard itself, as with fp32 models) and the model-dtype
 * shard; NULL entries are skipped.  Step thread (destroy). */
void zero_kit_shard_free(const zero_services *svc, float *const state[4], float *master, void *shard);

/* ---- checkpoint blobs --------------------------------------------------- */

/* One named per-rank blob of a checkpoint: `bytes` bytes at buf (device or
 * host memory; svc->ckpt_write / ckpt_read copy either).  Borrowed. */
typedef struct zero_kit_blob {
    const char *name; /* "<prefix>.<name>" in the checkpoint */
    void *buf;
    size_t bytes;
} zero_kit_blob;
/* The model state of a shard of `numel` elements as blobs: "params"
 * (esize bytes each), "master" (fp32, only when master != params: a 16-bit
 * model), "state0".."state<nstate-1>" (fp32).  Writes at most 6 entries
 * into out and returns how many.  The names are static; the buffers are
 * borrowed from the caller.  Pure. */
uint32_t zero_kit_state_blobs(zero_kit_blob *out, void *params, size_t esize, float *master, float *const *state,
                              uint32_t nstate, uint64_t numel);
/* Write (write = 1) or read the n blobs as "<prefix>.<name>" in dir
 * (svc->ckpt_write is atomic per blob); stops at the first error.  Local:
 * after a read call zero_kit_blobs_agree.  Step thread (save / load). */
zero_status zero_kit_blobs_io(const zero_services *svc, const char *dir, const char *prefix,
                              const zero_kit_blob *b, uint32_t n, int write);
/* A load's outcome agreed over comm (NULL: comm_world): `local` where this
 * rank failed, ZERO_ERR_IO naming `who` and dir on the ranks where it did
 * not, so that a blob missing on one rank fails every rank instead of
 * leaving the others in the next collective (svc->ckpt_agree).  Collective
 * over comm.  Step thread (load). */
zero_status zero_kit_blobs_agree(const zero_services *svc, zero_comm *comm, zero_status local, const char *dir,
                                 const char *who);

/* ---- a shard checkpoint that reshards ------------------------------------ */

/* A partition-indexed shard (what zero_kit_shard_part_step steps): its
 * flat ranges (part_lo indexing the arrays below; any order), the
 * model-dtype shard, the fp32 master (== params for fp32 models), the
 * optimizer states, all `numel` elements, and the window's gradient
 * accumulator (acc_bytes bytes, or NULL).  Borrowed. */
typedef struct zero_kit_shard_ckpt_spec {
    const zero_owned_range *ranges;
    uint32_t nranges;
    zero_dtype dtype;
    void *params;
    float *master;
    float *const *state;
    uint32_t nstate;
    uint64_t numel;
    void *acc;
    size_t acc_bytes;
} zero_kit_shard_ckpt_spec;
/* Write (write = 1) or read the shard as "<prefix>.master" and
 * "<prefix>.state<k>" through svc->ckpt_shard (each blob's flat ranges in
 * the manifest: so the checkpoint reshards), plus "<prefix>.params" (16-bit
 * shard) and "<prefix>.acc", which only a native load reads.  A resharding
 * load (svc->ckpt_reshard: another world size, plugin or layout wrote it,
 * always at an accumulation boundary) fills master and states from the
 * saver's files, rounds the master into a 16-bit shard, zeroes acc and
 * sets *resharded = 1: the caller then resets or derives whatever else it
 * keeps (its own blobs cannot be read).  A strategy using this declares
 * ZERO_PLUGIN_CAP_RESHARD.  Local: follow a read with
 * zero_kit_blobs_agree.  Step thread (save / load). */
zero_status zero_kit_shard_ckpt(const zero_services *svc, const char *dir, const char *prefix,
                                const zero_kit_shard_ckpt_spec *sc, int write, int *resharded);
/* (plugin ABI 1.8) write_params for a partition-indexed shard described as
 * zero_kit_shard_ckpt's spec (ranges, dtype, params, master; the states,
 * numel and acc are not read; params and master in the device tier, like
 * the values): params[i]'s values (values[i], its numel elements in the
 * model dtype, the same on every rank that holds the param) into every
 * piece of the shard that lies in it -- each range [flat_lo, flat_hi)
 * meeting [p->flat_offset, p->flat_offset + p->numel) -- and, for a 16-bit
 * shard (master != params), widened into the fp32 master there exactly
 * (svc->convert), as params_done does with init_data.  A shard whose
 * ranges repeat world shares (MiCS's replication group blocks) gets every
 * copy written.  Optimizer states, the accumulator and every other element
 * stay as they are.  No communication: every rank writes its own shard
 * from the values it was handed.  A param not in sc->dtype is
 * ZERO_ERR_INVALID_ARGUMENT, checked before anything is written.  Gathered
 * copies are the caller's: drop them first (zero_kit_gather_drop_all) and
 * mark them stale after (zero_kit_gather_mark_stale), as a load does.  sc,
 * params and values are borrowed for the call.  Step thread (the table's
 * write_params). */
zero_status zero_kit_shard_write(const zero_services *svc, const zero_kit_shard_ckpt_spec *sc,
                                 zero_param_info *const *params, size_t n, const void *const *values);

/* ---- planning (the table's optional `plan` entry) ------------------------ */

/* The bucket spec a plan passes to ps->buckets_bytes: mode,
 * reduce_bucket_size, overlap_comm and the gradient dtype as
 * zero_kit_bucket_spec would build them (no buffers).  Pure. */
zero_bucket_spec zero_kit_plan_bucket_spec(const zero_plan_services *ps, zero_bucket_mode mode);
/* contiguous_gradients off (or fp32 accumulation of a 16-bit model): the
 * per-param temporaries zero_kit_grad_tmp allocates, for a host that hands
 * in one gradient at a time: the largest param's, model dtype, GRADS,
 * recorded through ps->add.  Pure apart from ps->add. */
void zero_kit_grad_tmp_plan(const zero_plan_services *ps);
/* (1.13) The fp32 tile the core's part_step / boundary_step service upcasts
 * 16-bit gradients into when expert groups exist or max_group_size is set
 * (moe. or zero_optimization.max_group_size): one tile of the largest
 * stepped piece of a param group, capped by max_group_size.  `shares`: how
 * many consecutive layout shares (part_numel) of each group this rank
 * steps -- 1 for a partitioning plugin, R for one that steps R places
 * (MiCS's shard), 0 for the whole group (a replicated plugin, stage 0).
 * Recorded as ZERO_MEM_OTHER, host tier (a plan is a CPU engine's; on a
 * device engine the tile is device memory); nothing with fp32 gradients.
 * Pure apart from ps->add. */
void zero_kit_step_tile_plan(const zero_plan_services *ps, uint32_t shares);

#ifdef __cplusplus
}
#endif
#endif /* ZERO_KIT_GLUE_H */
