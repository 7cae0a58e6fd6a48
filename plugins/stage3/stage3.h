/* stage3 plugin internals: shared by the files of plugins/stage3 only.
 *
 * ZeRO-3: each rank keeps only its share of the flat parameter space (in the
 * model dtype), its fp32 master (mixed precision only; for fp32 the shard is
 * its own master), its optimizer-state share and its gradient partition.
 * Full tensors exist only between zero_gather and zero_release, in buffers
 * from a pool bounded by stage3_max_live_parameters: the plugin kit's gather
 * engine (kit/zero_kit_gather.h) owns them, with the recorded per-phase
 * order, prefetch, reuse distance and persistence; this plugin gives it the
 * fetch (an all-gather of each rank's piece over gcomm, stage3_gather.c).
 *
 * Everything here runs on the host's single "engine" thread (gather,
 * release, step, save/load, destroy), except grad_buffer/on_grad_ready,
 * which touch only the (thread-safe) bucket engine and per-param temporaries.
 * No function here is thread-safe beyond that contract.
 *
 * Collective discipline (why prefetch cannot hang): every collective this
 * plugin issues outside zero_step is issued from zero_gather, after a tiny
 * agreement all-reduce has proved that every rank asked for the same params
 * in the same order so far, with the same set of live buffers.  Issue
 * decisions depend only on that agreed state and on the recorded trace
 * (itself built from agreed requests), so every rank issues the same
 * collectives in the same order.  A gather that needs no communication (all
 * params resident, nothing to prefetch) defers its verification to the next
 * agreement, at the latest the one zero_step always makes: divergence is
 * still reported on every rank, just one call later, and never after a data
 * collective was issued on unverified requests.  zero_release never
 * communicates. */
#ifndef ZERO_PLUGIN_STAGE3_H
#define ZERO_PLUGIN_STAGE3_H
#include <stddef.h>
#include <stdint.h>

#include "zero_kit.h" /* the gather engine, the shard step (zero_kit_shard_part_step) */
#include "zero_plugin.h"

/* Per-param state, hung off zero_param_info.plugin_data.  Owned by the
 * plugin; lives from params_done to destroy.  (Its gather buffer and
 * request are the gather engine's.) */
typedef struct zero__s3_param {
    zero_param_info *info;
    zero_comm *comm;       /* its all-gathers' communicator: gcomm, or (expert groups) s->xcomms' duplicate of
                              its expert-data-parallel group (borrowed from s) */
    size_t *counts;        /* one entry per rank of comm: elements of this param each owns (all-gather blocks) */
    uint64_t count;        /* this rank's elements of it: counts[its place in comm] */
    uint64_t part_lo;      /* where this rank's piece starts in the shard (valid if count > 0) */
    uint64_t piece_off;    /* ... and where it starts in the param (elements), for the NVMe shard's init */
    void *grad_tmp;        /* contiguous_gradients off: per-param gradient temporary */
} zero__s3_param;

typedef struct zero__s3_slice {
    size_t *counts;        /* one entry per rank of its param's comm, NULL until the slice's first fetch */
    uint64_t part_lo;      /* this rank's piece in the shard (valid if its count > 0) */
} zero__s3_slice;

typedef struct zero__s3 {
    const zero_services *svc;
    zero_core *c;
    const zero_run_config *rc;
    const zero_layout *L;
    zero_comm *world;      /* norm/overflow all-reduce (the bucket engine also uses world) */
    zero_comm *gcomm;      /* private duplicate of world for agreements and param all-gathers: the host may
                              fire grad hooks (bucket collectives on world) from other threads while this
                              thread gathers, and collectives on one communicator must be issued in the same
                              order on every rank */
    int rank, nranks;
    /* (libzero 1.12) expert groups: layout group g's pieces are all-gathered over fcomm[g] -- gcomm
     * for a dense group, a private duplicate of the group's expert-data-parallel communicator
     * (svc->group_comm) for an expert group, one duplicate per distinct communicator (xcomms, owned:
     * freed at destroy) for the same reason gcomm exists.  group_of[i]: param i's layout group. */
    zero_comm **fcomm;
    uint32_t *group_of;
    zero_comm **xcomms;    /* owned duplicates */
    zero_comm **xsrc;      /* ... and the core's communicators they duplicate (borrowed) */
    uint32_t nxcomms;
    zero_dtype dtype;      /* model dtype: shard and gather buffers */
    size_t esize;
    zero_dtype gdtype;     /* gradient partition: fp32 (grad_accum_dtype fp32) or the model dtype */
    size_t gesize;

    /* model state, part_numel elements each */
    void *shard;           /* params, model dtype (ZERO_MEM_PARAMS) */
    float *master;         /* fp32 master: == shard for fp32 models, else ZERO_MEM_MASTER */
    void *grads;           /* gradient partition, gdtype (ZERO_MEM_GRADS) */
    float *state[4];       /* optimizer state (ZERO_MEM_OPTIM) */
    uint32_t nstate;
    zero_owned_range *owned;
    uint32_t nowned;
    zero_kit_bsets bs;     /* bucket sets: one per partition communicator (expert groups: libzero 1.12) */
    int contiguous;

    zero__s3_param *params;
    uint32_t nparams;
    zero_kit_gather *gather; /* the kit's gather engine over gcomm (stage3_gather.c): order, prefetch, reuse,
                                persistence, pool and budget */
    int poison;            /* Debug builds / ZERO_DEBUG_POISON: released gather buffers are filled with NaN */
    /* (1.7) slices of stacked params, by gather unit - nparams (stage3_gather.c): each rank's
     * piece of the slice (all-gather counts) and where this rank's starts in the shard; made at
     * the slice's first fetch, freed by zero__s3_gather_free */
    zero__s3_slice *slices;
    uint32_t nslices;

    /* offload (stage3_tiers.h): zero_optimization.stage 3 with
     * offload_optimizer / offload_param */
    int off_opt;           /* ZERO__S3_OFF_NONE / _CPU / _NVME: where master and states live */
    int off_param;         /* the owned shard lives in the host tier (or, with off_param_nvme, a file) */
    int off_param_nvme;    /* offload_param.device "nvme": s->shard is NULL, the shard is in off->pfile */
    const char *param_nvme_path; /* offload_param.nvme_path (config-owned) */
    const char *nvme_path; /* offload_optimizer.nvme_path (config-owned) */
    struct zero__s3_off *off; /* the tiled step's buffers, worker, NVMe file; NULL without offload */
} zero__s3;

/* ---- where pieces live (stage3_layout.c) -------------------------------- */
/* The pieces of flat range [lo, hi) (inside layout group g) held by each
 * rank of g's partition communicator, in its rank order: counts[k] elements
 * for place k (size zero__s3_group_world(s, g)); this rank's starts at
 * *part_lo of its shard and *piece_lo elements into the range (both left
 * alone when it holds none).  Returns this rank's count.  Pure. */
uint64_t zero__s3_pieces(const zero__s3 *s, uint32_t g, uint64_t lo, uint64_t hi, size_t *counts, uint64_t *part_lo,
                         uint64_t *piece_lo);
/* The number of ranks layout group g is partitioned over (the world for a
 * dense group; its expert-data-parallel size for an expert group). */
uint32_t zero__s3_group_world(const zero__s3 *s, uint32_t g);

/* ---- gathers (stage3_gather.c) ----------------------------------------- */
/* Create s->gather over every param (params_done, after the shard holds
 * the initial values and s->params their counts): stage 3's config keys,
 * the budget capped by what partitioning saves over stage 2, world 1's
 * aliases of the shard, the all-gather fetch. */
zero_status zero__s3_gather_setup(zero__s3 *s);
/* The table's gather / release / set_phase / sync, on the engine. */
zero_status zero__s3_gather(void *state, zero_param_info *const *params, size_t n, void **ptrs);
zero_status zero__s3_release(void *state, zero_param_info *const *params, size_t n);
zero_status zero__s3_set_phase(void *state, const char *phase);
/* (1.7) The table's gather_slices / release_slices: slice units of the
 * engine, fetched as all-gathers of each rank's part of the slice's flat
 * range (offload_param nvme: through the whole param's gather). */
zero_status zero__s3_gather_slices(void *state, const zero_slice_ref *refs, size_t n, void **ptrs);
zero_status zero__s3_release_slices(void *state, const zero_slice_ref *refs, size_t n);
/* Is param idx's full tensor its place in the shard (a param partitioned
 * over one rank, without offload_param)?  Pure. */
int zero__s3_aliased(const zero__s3 *s, uint32_t idx);
/* Free what the slice fetches made (destroy, after the engine's). */
void zero__s3_gather_free(zero__s3 *s);

/* ---- step (stage3_step.c) ---------------------------------------------- */
zero_status zero__s3_step(void *state, const zero_step_ctx *ctx, zero_step_report *rep);
/* write_params (stage3_write.c): each rank's piece of each param into
 * its master and shard, in every tier; cached gathers dropped. */
zero_status zero__s3_write_params(void *state, zero_param_info *const *params, size_t n, const void *const *values);
/* What the core's boundary_step and ckpt_shard services need: the owned
 * ranges of the partition-indexed shard, master, states and gradient
 * partition.  fp32: the shard is the master, updated in place; mixed
 * precision: the new weights are rounded into the model-dtype shard.  Pure;
 * borrows s (the result points into it).  Inline here, not in a unit: the
 * step, the offload step and the checkpoint all use it. */
static inline zero_part_step zero__s3_part_step(const zero__s3 *s) {
    return zero_kit_shard_part_step(s->owned, s->nowned, s->world, s->dtype, s->grads, s->gdtype, s->master,
                                    s->state, s->nstate, s->dtype == ZERO_DTYPE_F32 ? NULL : s->shard);
}

/* ---- plan (stage3_plan.c) ---------------------------------------------- */
/* The table's plan entry (ABI 1.2): model state, persistent buffers, the
 * gather pool replayed for the canonical host, bucket staging. */
zero_status zero__s3_plan(const zero_plan_services *ps);

static inline size_t zero__s3_dtype_size(zero_dtype dt) { return dt == ZERO_DTYPE_F32 ? 4 : 2; }
#endif
