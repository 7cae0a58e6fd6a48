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
} zero__layout;

/* Build; returns 0 on success, -1 on bad input (world == 0, align == 0 or not a
 * power of two, allocation failure).  nparams may be 0. */
int zero__layout_build(zero__layout *out, const zero__layout_input *params, uint32_t nparams,
                       uint32_t world, uint32_t rank, uint64_t align);
void zero__layout_free(zero__layout *l);

/* Pieces of [flat_lo, flat_hi) owned by `rank`; returns count written (<= cap). */
uint32_t zero__layout_owned(const zero_layout *l, uint32_t rank, uint64_t flat_lo, uint64_t flat_hi,
                            zero_owned_range *out, uint32_t cap);

/* Index of the group containing flat offset x, or -1. */
int zero__layout_group_of(const zero_layout *l, uint64_t x);
#endif
