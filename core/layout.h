/* Partition layout: pure functions, no I/O, no globals.
 *
 * Params are flattened per param group, in registration order, each param
 * starting at a multiple of `align` elements.  Groups are ordered by first
 * appearance and laid end to end; a group is padded to a multiple of
 * world*align so each rank owns an equal contiguous share of each group
 * (with stripes, each stripe of a param group is such a layout group):
 * rank r owns [flat_begin + r*part_numel, flat_begin + (r+1)*part_numel).
 * A rank's partition buffer is its shares of all groups, concatenated. */
#ifndef ZERO_CORE_LAYOUT_H
#define ZERO_CORE_LAYOUT_H
#include <stdint.h>
#include "zero_plugin.h"

typedef struct zero__layout_input {
    uint64_t numel;
    int32_t group;
} zero__layout_input;

/* Owning storage behind the public zero_layout view. */
typedef struct zero__layout {
    zero_layout view;          /* points into the arrays below */
    zero_layout_group *groups;
    uint32_t *param_order;
    uint64_t *param_offset;    /* flat offset of each param, by registration index */
    uint32_t *group_world;     /* (1.3) per group: partition size / this rank's place; */
    uint32_t *group_rank;      /*       view.group_world/_rank point here when some group is expert */
} zero__layout;

/* Interleaved ownership (zero_optimization.round_robin_gradients).
 *
 * Contiguous partitions make every gradient bucket (a contiguous flat range
 * far smaller than a rank's share) a reduce to ONE owner: all of its
 * traffic and all of its summing land on one rank while the others wait.
 * With stripes, each param group is cut into consecutive runs of whole
 * params ("stripes") of at most `stripe` elements, walking from the last
 * param down exactly as the bucket engine does (backward produces the last
 * layers first, so a short remainder is the first stripe, reduced last),
 * and every stripe becomes a layout group of its own: padded to
 * world * align and shared equally by all ranks.  A bucket then equals a
 * stripe, and its reduce-scatter gives every rank 1/world of it.  Nothing
 * in the public contract changes -- every layout group is still shared
 * equally and contiguously; several layout groups now carry the same
 * group_id (hyper-parameters are looked up by id) -- so plugins that go
 * through owned_ranges / allgather_shares (all built-in ones) follow.
 *
 * The stripe set depends on the params and `stripe` only, never on the
 * world size (only the padding does): a checkpoint moves between world
 * sizes through the usual param-offset mapping.
 *
 * zero__layout_stripe_numel: the stripe size for a requested bucket size
 * (0 = the whole model): the bucket engine's SCATTER rule applied to the
 * unpadded model -- at most an eighth of it (so a small model still gets
 * several buckets to overlap), never below its largest param (a param is
 * never split).  zero__layout_mark_stripes fills starts[0..nparams):
 * nonzero where a param opens a new stripe inside its param group, for
 * that size (all zero when stripe is 0).  Pure. */
uint64_t zero__layout_stripe_numel(const zero__layout_input *params, uint32_t nparams, uint64_t align,
                                   uint64_t requested);
void zero__layout_mark_stripes(const zero__layout_input *params, uint32_t nparams, uint64_t align, uint64_t stripe,
                               uint8_t *starts);

/* Build; returns 0 on success, -1 on bad input (world == 0, align == 0 or not a
 * power of two, allocation failure).  nparams may be 0. */
int zero__layout_build(zero__layout *out, const zero__layout_input *params, uint32_t nparams,
                       uint32_t world, uint32_t rank, uint64_t align);
/* (1.3) The same with expert groups: part_world[i] / part_rank[i] give the
 * partition communicator size of param i's group and this rank's place in
 * it (0 / 0 = the world: a dense group); every param of a group carries
 * the same values (the group's first param's are used).  Either array NULL
 * = every group dense, exactly zero__layout_build. */
int zero__layout_build_parts(zero__layout *out, const zero__layout_input *params, uint32_t nparams, uint32_t world,
                             uint32_t rank, uint64_t align, const uint32_t *part_world, const uint32_t *part_rank);
/* The same with stripes: starts (NULL = none) as zero__layout_mark_stripes
 * fills it; a param with starts[i] set opens a new layout group (the first
 * param of each param group always does). */
int zero__layout_build_striped(zero__layout *out, const zero__layout_input *params, uint32_t nparams, uint32_t world,
                               uint32_t rank, uint64_t align, const uint8_t *starts);
/* The layout a run uses: contiguous, or with round_robin nonzero the
 * stripes of zero__layout_stripe_numel(bucket_numel) (the config's
 * reduce_bucket_size, 0 = unset).  The engine, the planner and zero-ckpt
 * convert all build through this, so they agree. */
int zero__layout_build_run(zero__layout *out, const zero__layout_input *params, uint32_t nparams, uint32_t world,
                           uint32_t rank, uint64_t align, int round_robin, uint64_t bucket_numel);
void zero__layout_free(zero__layout *l);

/* Pieces of [flat_lo, flat_hi) owned by `rank`; returns count written (<= cap).
 * (1.3) In an expert group (l->group_world set) `rank` == l->rank means
 * this rank's own share (group_rank[g]); any other value is taken as a
 * place in the group's own communicator (skipped when >= its size). */
uint32_t zero__layout_owned(const zero_layout *l, uint32_t rank, uint64_t flat_lo, uint64_t flat_hi,
                            zero_owned_range *out, uint32_t cap);

/* Index of the group containing flat offset x, or -1. */
int zero__layout_group_of(const zero_layout *l, uint64_t x);
#endif
