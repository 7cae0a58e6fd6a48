/* Partition layout: pure functions, no I/O, no globals.
 *
 * Params are flattened per param group, in registration order, each param
 * starting at a multiple of `align` elements.  Groups are ordered by first
 * appearance and laid end to end; a group is padded to a multiple of
 * world*align so each rank owns an equal contiguous share of each group:
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
