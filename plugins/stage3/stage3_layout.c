/* stage3: where each param's pieces live (stage3.h "where pieces live").
 *
 * A param's full tensor is the concatenation, in rank order, of its
 * intersections with the shares of the ranks of its layout group's
 * partition communicator: the world for a dense group, the expert-data-
 * parallel group for an expert group (libzero 1.12).  These are the
 * all-gather counts of stage3_plugin.c (params) and stage3_gather.c
 * (slices of stacked params).  Pure; any thread. */
#include "stage3.h"

uint32_t zero__s3_group_world(const zero__s3 *s, uint32_t g) {
    const zero_layout *L = s->L;
    const int has = L->struct_size >= offsetof(zero_layout, group_rank) + sizeof L->group_rank && L->group_world;
    return has ? L->group_world[g] : L->world;
}

/* The layout's rule (abi/zero_plugin.h zero_layout): group g's place k owns
 * [flat_begin + k * part_numel, + part_numel), at part_offset of its
 * partition.  Computed here over the places of g's communicator, not with
 * svc->owned_ranges, whose `rank` is a world rank. */
uint64_t zero__s3_pieces(const zero__s3 *s, uint32_t g, uint64_t lo, uint64_t hi, size_t *counts, uint64_t *part_lo,
                         uint64_t *piece_lo) {
    const zero_layout *L = s->L;
    const zero_layout_group *G = &L->groups[g];
    const int has = L->struct_size >= offsetof(zero_layout, group_rank) + sizeof L->group_rank && L->group_rank;
    const uint32_t gw = zero__s3_group_world(s, g), mine = has ? L->group_rank[g] : L->rank;
    uint64_t own = 0;
    for (uint32_t k = 0; k < gw; k++) {
        const uint64_t own_lo = G->flat_begin + (uint64_t)k * G->part_numel, own_hi = own_lo + G->part_numel;
        const uint64_t a = lo > own_lo ? lo : own_lo, b = hi < own_hi ? hi : own_hi;
        counts[k] = b > a ? (size_t)(b - a) : 0;
        if (k != mine || b <= a) continue;
        own = b - a;
        *part_lo = G->part_offset + (a - own_lo);
        *piece_lo = a - lo;
    }
    return own;
}
