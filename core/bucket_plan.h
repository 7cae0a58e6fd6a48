/* Bucket plan: the pure arithmetic of the gradient bucket engine (which
 * flat ranges form buckets, which buckets cover a param, and which block of
 * a bucket each rank receives), split from buckets.c so that it can be
 * tested on its own over every (layout, N, bucket size) combination
 * (tests/layout/test_bucket_plan.c).  No I/O, no globals, no engine.
 *
 * Buckets are contiguous flat ranges built once from the layout, walking
 * each group's params in REVERSE flat order (backward produces the last
 * layers first); a bucket never crosses a group and the buckets of a group
 * tile it exactly, alignment padding included.  SCATTER mode never splits a
 * param (a param's gradient must be one contiguous slot); the other modes
 * split a param larger than a bucket into consecutive buckets.
 *
 * Block r of a bucket is rank r's share of the bucket's group clipped to
 * the bucket (possibly empty); with interleaved ownership (striped) a
 * bucket is a whole layout group, so every block is 1/world of it.  Every mode reduces exactly these blocks, so
 * an element is always summed by the same owner in the same ring order,
 * whatever the bucket size and plugin (issue 13). */
#ifndef ZERO_CORE_BUCKET_PLAN_H
#define ZERO_CORE_BUCKET_PLAN_H
#include <stdint.h>
#include "zero_plugin.h"

typedef struct zero__bplan_bucket {
    uint64_t lo, hi;  /* flat range */
    uint32_t group;   /* layout group index */
    uint32_t nparts;  /* params (or pieces of a split param) inside */
} zero__bplan_bucket;

typedef struct zero__bplan_param {
    uint64_t offset, numel;          /* from the layout / registration */
    uint32_t group;                  /* layout group index */
    uint32_t first_bucket, nbuckets; /* consecutive buckets covering the param */
} zero__bplan_param;

typedef struct zero__bucket_plan {
    uint64_t bucket_numel;   /* effective (clamped) bucket size */
    zero__bplan_bucket *b;   /* nb buckets, launch order */
    uint32_t nb;
} zero__bucket_plan;

/* Effective bucket size for `requested` elements (0 = the whole model).
 * scatter: SCATTER mode (staged slots: at most flat/8 so that a small model
 * pays little staging, but at least the largest param extent); mixed: 16-bit
 * gradients (in-place modes stage fp32 copies, bounded at flat/8 too).
 * striped: the layout has interleaved ownership (round_robin_gradients,
 * layout.h): never below its largest layout group, so that every stripe is
 * exactly one bucket and each bucket's reduce-scatter gives every rank an
 * equal block (its padding can take a stripe a little past the size the
 * stripes were cut at).
 * pm[i].offset, pm[i].group must be filled for every param.
 * (libzero 1.10) in_set: the layout groups one bucket set reduces (buckets.c, with
 * expert groups: the dense ones or one expert group's), NULL = all; the
 * size follows that set's own elements and extents, so a small expert set
 * is not staged in buckets sized for the whole model. */
uint64_t zero__bucket_plan_size(const zero_layout *L, const zero__bplan_param *pm, uint64_t requested, int scatter,
                                int mixed, int striped, const uint8_t *in_set);

/* Build the buckets of every group for bucket size B (> 0); fills
 * pm[].first_bucket / nbuckets.  Returns ZERO_OK or ZERO_ERR_OUT_OF_MEMORY
 * (then *out holds nothing). */
zero_status zero__bucket_plan_build(zero__bucket_plan *out, const zero_layout *L, zero__bplan_param *pm, uint64_t B,
                                    int scatter);
void zero__bucket_plan_free(zero__bucket_plan *p);

/* The tail (issue 18, overlap): the bucket launched last can only start
 * after backward has ended, so all of its reduction is exposed.  The
 * lowest params of the layout group launched last therefore form a
 * bucket of their own of at most B/4 elements (at least one param:
 * params are never split for it), when that group needs more than one
 * bucket anyway.  zero__bucket_plan_last_group: that group (the lowest
 * layout group with buckets of the last param group that has any: launch
 * order is param groups in order, each from the top down; UINT32_MAX when
 * there is none).  zero__bucket_plan_tail: how many of
 * group g's params (in flat order) form the tail at bucket size B, 0 for
 * none; offsets[i] is param i's flat offset.  Pure; the planner
 * (plan_buckets.c) and the striped layout (layout.c) cut the same tail. */
uint32_t zero__bucket_plan_last_group(const zero_layout *L);
uint32_t zero__bucket_plan_tail(const zero_layout *L, const uint64_t *offsets, uint32_t g, uint64_t B);

/* (issue 18) Small buckets join the next param.  A bucket that would be
 * closed holding at most `slack` elements (a bias, a norm's scale: the
 * param above a weight that fills a bucket on its own) is not reduced
 * alone; the next param's extent joins it when that extent fits a bucket by
 * itself (<= B; never split for it).  Such a bucket holds up to B + slack
 * elements.  SCATTER mode only (stage 2, 3, offload): slack = min(B/16,
 * cap - B), 0 when B >= cap, where cap = max(flat/8, largest param extent)
 * is the bound on a SCATTER slot, so staging stays within its documented
 * bounds; the in-place modes keep slack 0 (stage 1 measured no gain from
 * fewer buckets, bench/peers/README.md).  Why: in SCATTER every bucket takes
 * one slot of the two-slot pool until its reduction completes; a
 * 1024-element bias in its own bucket made each layer two buckets, both
 * slots busy, and backward waited for the previous layer's whole reduction
 * before every layer (zero_grad_buffer had no free slot).  The sums
 * do not change: each element is summed by its owner in the same ring order
 * whatever the bucket boundaries (header comment).  offsets[i]: param i's
 * flat offset.  Pure; bucket_plan.c and plan_buckets.c use the same rule. */
static inline uint64_t zero__bucket_plan_slack(const zero_layout *L, const uint64_t *offsets, uint64_t B,
                                               int scatter) {
    if (!scatter) return 0;
    uint64_t cap = L->flat_numel / 8;
    for (uint32_t g = 0; g < L->ngroups; g++) {
        const zero_layout_group *lg = &L->groups[g];
        for (uint32_t j = 0; j < lg->nparams; j++) {
            const uint64_t lo = j == 0 ? lg->flat_begin : offsets[L->param_order[lg->first_param + j]];
            const uint64_t hi = j + 1 < lg->nparams ? offsets[L->param_order[lg->first_param + j + 1]]
                                                    : lg->flat_begin + lg->numel;
            if (hi - lo > cap) cap = hi - lo;
        }
    }
    const uint64_t s = B / 16;
    return cap > B ? (cap - B < s ? cap - B : s) : 0;
}

/* May the open bucket of open_n elements take the next extent of ext_n
 * elements although together they exceed B?  (zero__bucket_plan_slack) */
static inline int zero__bucket_plan_merges(uint64_t open_n, uint64_t ext_n, uint64_t B, uint64_t slack) {
    return open_n > 0 && open_n <= slack && ext_n <= B;
}

/* Rank r's block of bucket bk: [*lo, *lo + *n) in flat space (n may be 0;
 * then *lo is the start of r's share) and where it lands in r's partition
 * buffer (*part_pos). */
void zero__bucket_plan_block(const zero_layout *L, const zero__bplan_bucket *bk, uint32_t r, uint64_t *lo,
                             uint64_t *n, uint64_t *part_pos);
/* Does a bucket set exchange anything (stage its buckets and run its
 * collectives)?  A set over one rank has nothing to reduce -- except with
 * 16-bit gradients in a job of several ranks (libzero 1.12): the
 * reduction is where the mean's 1/world scaling happens (buckets.c
 * pre/post), so an expert group partitioned over one rank still runs it
 * (a collective over one rank: a copy) and its gradient is the mean like
 * every other.  buckets.c and the planner (plan_buckets.c) both ask here. */
static inline int zero__bucket_set_exchanges(uint32_t set_world, int mixed, uint32_t world_size) {
    return set_world > 1 || (mixed && world_size > 1);
}

#endif
