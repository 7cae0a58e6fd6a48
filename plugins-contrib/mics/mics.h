/* mics plugin internals (shared by the files of plugins-contrib/mics only).
 *
 * MiCS (Zhang et al. 2022): the model states (parameters, gradients,
 * optimizer states) are partitioned over a shard group of S =
 * zero_optimization.mics_shard_size consecutive ranks and replicated over
 * the N / S groups.  Parameter all-gathers span S ranks, not N.
 *
 * Built the way a third party builds a plugin: on the installed plugin kit
 * (zero_kit.h, libzero_kit.a: create, accounted allocation, the parameter
 * map, gradient hand-in, bucket spec, checkpoint blobs) and the installed
 * ABI headers only, reaching the core only through the services table
 * (README.md in this folder).
 *
 * Ownership in terms of the core's world layout (rank j owns the equal
 * share j of every layout group): the member with shard index i = rank % S
 * holds the world shares of its replication group R_i = {i, i + S, i + 2S,
 * ...}, packed block after block ("k-th block" = world share of rank
 * i + k*S, k < R = N / S).  So
 *  - the shards of one shard group's S members cover the flat space once
 *    (a gather spans S ranks);
 *  - the gradient path is the core's world reduce-scatter into this rank's
 *    world share (exactly stage 2's sums, summed by the layout owner in its
 *    ring order: bitwise stage0), then an all-gather inside R_i of those
 *    shares -- the same bytes per rank as MiCS's reduce-scatter in the
 *    group plus all-reduce across groups (README), but in stage0's
 *    summation order.
 *
 * Gathers: the plugin kit's gather engine (zero_kit_gather.h) with MiCS's
 * shard-group all-gather as the fetch, so MiCS gets stage 3's recorded
 * order, prefetch, reuse distance, persistence and budget.
 *
 * Threading: everything runs on the engine's step thread (gather, release,
 * step, save, load, destroy) except grad_buffer / on_grad_ready, which use
 * only the thread-safe bucket engine and per-param temporaries. */
#ifndef ZERO_CONTRIB_MICS_H
#define ZERO_CONTRIB_MICS_H
#include <stddef.h>
#include <stdint.h>

#include "zero_kit.h" /* the glue and the gather engine (zero_kit_gather.h) */

/* One param: where its elements live.  piece j (j < N) is the part of the
 * param in world share j: `len[j]` elements starting `off[j]` elements into
 * the param, at `part_lo[j]` in share j's partition numbering (borrowed
 * from the plugin's zero_kit_pmap).  Owned by the plugin, from params_done
 * to destroy. */
typedef struct mics_param {
    zero_param_info *info;
    const uint64_t *off;           /* N entries each, into mics.pmap */
    const size_t *len;
    const uint64_t *part_lo;
    size_t *counts;                /* S entries: elements each shard-group member contributes to a gather */
    void *recv;                    /* staging of an in-flight fetch (member-major order): allocated by the
                                      fetch, freed when it lands (the full tensor is the gather engine's) */
    void *grad_tmp;                /* per-param gradient temporary (non-contiguous gradients) */
} mics_param;

typedef struct mics {
    const zero_services *svc;
    zero_core *c;
    const zero_run_config *rc;
    int rank, nranks;
    int S, R, shard_index;         /* shard size, groups (N / S), this rank's index in its shard group */
    zero_comm *shard_comm;         /* the S ranks of this shard group (rank order): parameter all-gathers */
    zero_comm *repl_comm;          /* the R ranks with this shard index (rank order): gradient all-gather */
    zero_dtype dtype, gdtype;      /* model dtype; gradient accumulation dtype */
    size_t esize, gesize;
    uint64_t part;                 /* layout part_numel: one world share */
    uint64_t shard_numel;          /* R * part: this rank's MiCS shard */
    /* model state, shard_numel elements each (packed blocks) */
    void *pshard;                  /* parameters, model dtype */
    float *master;                 /* fp32 master (== pshard for fp32 models) */
    float *state[4];
    uint32_t nstate;
    void *grad;                    /* gradient of the shard at the boundary (gdtype) */
    void *acc;                     /* world-share gradient accumulator (part elements, gdtype), the bucket target */
    zero_owned_range *ranges;      /* the shard's pieces, part_lo in packed numbering (R * ngroups) */
    uint32_t nranges;
    zero_owned_range *mine;        /* this rank's world share ranges (the accumulator), for the norm */
    uint32_t nmine;
    zero_buckets *b;
    int contiguous;
    mics_param *params;
    uint32_t nparams;
    zero_kit_pmap pmap;            /* every param's piece in every world share (the kit's) */
    zero_kit_gather *gather;       /* the kit's gather engine over shard_comm (mics_gather.c): recorded order,
                                      prefetch, reuse distance, persistence, pool and budget */
} mics;

/* mics_gather.c */
zero_status mics_place_params(mics *s);
/* Create s->gather (params_done, after the shard holds the initial values):
 * the hierarchical all-gather inside the shard group as its fetch. */
zero_status mics_gather_setup(mics *s);
zero_status mics_gather(void *state, zero_param_info *const *params, size_t n, void **ptrs);
zero_status mics_release(void *state, zero_param_info *const *params, size_t n);
zero_status mics_set_phase(void *state, const char *phase);

/* mics_step.c */
zero_status mics_step(void *state, const zero_step_ctx *ctx, zero_step_report *rep);
zero_part_step mics_part_step(const mics *s);

/* mics_ckpt.c: the table's save / load (resharding: another world size,
 * plugin or shard size) */
zero_status mics_save(void *state, const char *dir);
zero_status mics_load(void *state, const char *dir);
/* ... and the table's write_params (zero_params_write): the shard, every
 * replica block, and the master; gathered copies dropped and refetched */
zero_status mics_write_params(void *state, zero_param_info *const *params, size_t n, const void *const *values);

/* mics_plan.c: the table's plan entry (formulas there and in README.md) */
zero_status mics_plan(const zero_plan_services *ps);

#endif
