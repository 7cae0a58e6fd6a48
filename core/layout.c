/* Partition layout (see layout.h for the contract).
 *
 * Pure: no globals, no logging, no I/O; the only side effect is the heap
 * memory owned by the zero__layout it fills.  Safe to call from any thread
 * on distinct outputs. */
#include "layout.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* a + b with overflow detection (element counts come from the host). */
static int add_u64(uint64_t a, uint64_t b, uint64_t *out) {
    if (a > UINT64_MAX - b) return -1;
    *out = a + b;
    return 0;
}

/* Round x up to a multiple of m (m > 0); -1 on overflow. */
static int round_up_u64(uint64_t x, uint64_t m, uint64_t *out) {
    uint64_t rem = x % m;
    if (rem == 0) {
        *out = x;
        return 0;
    }
    return add_u64(x, m - rem, out);
}

void zero__layout_free(zero__layout *l) {
    if (!l) return;
    free(l->groups);
    free(l->param_order);
    free(l->param_offset);
    free(l->group_world);
    free(l->group_rank);
    memset(l, 0, sizeof(*l));
}

/* Distinct group ids in order of first appearance.  Quadratic in the number
 * of groups, which is tiny (a handful: decay/no-decay, MoE experts). */
static uint32_t collect_groups(const zero__layout_input *params, uint32_t nparams, int32_t *ids) {
    uint32_t ng = 0;
    for (uint32_t i = 0; i < nparams; ++i) {
        uint32_t g = 0;
        while (g < ng && ids[g] != params[i].group) ++g;
        if (g == ng) ids[ng++] = params[i].group;
    }
    return ng;
}

int zero__layout_build(zero__layout *out, const zero__layout_input *params, uint32_t nparams,
                       uint32_t world, uint32_t rank, uint64_t align) {
    return zero__layout_build_parts(out, params, nparams, world, rank, align, NULL, NULL);
}

int zero__layout_build_parts(zero__layout *out, const zero__layout_input *params, uint32_t nparams, uint32_t world,
                             uint32_t rank, uint64_t align, const uint32_t *part_world, const uint32_t *part_rank) {
    if (!out) return -1;
    memset(out, 0, sizeof(*out));
    if (world == 0 || rank >= world || align == 0 || (align & (align - 1)) != 0) return -1;
    if (nparams > 0 && !params) return -1;
    uint64_t quantum; /* every group's size is a multiple of this */
    if (align > UINT64_MAX / world) return -1;
    quantum = align * world;

    int32_t *ids = malloc((nparams ? nparams : 1) * sizeof(*ids));
    out->param_order = malloc((nparams ? nparams : 1) * sizeof(*out->param_order));
    out->param_offset = malloc((nparams ? nparams : 1) * sizeof(*out->param_offset));
    if (!ids || !out->param_order || !out->param_offset) goto fail;
    uint32_t ngroups = collect_groups(params, nparams, ids);
    out->groups = calloc(ngroups ? ngroups : 1, sizeof(*out->groups));
    out->group_world = calloc(ngroups ? ngroups : 1, sizeof(*out->group_world));
    out->group_rank = calloc(ngroups ? ngroups : 1, sizeof(*out->group_rank));
    if (!out->groups || !out->group_world || !out->group_rank) goto fail;
    int any_expert = 0;

    uint64_t flat = 0, part = 0;
    uint32_t ordered = 0;
    for (uint32_t g = 0; g < ngroups; ++g) {
        zero_layout_group *grp = &out->groups[g];
        grp->group_id = ids[g];
        grp->flat_begin = flat;
        grp->first_param = ordered;
        /* (1.3) the group's partition communicator: the world, or an expert group's */
        uint32_t gw = world, gr = rank, seen = 0;
        uint64_t gq = quantum;
        uint64_t pos = 0; /* offset inside the group */
        for (uint32_t i = 0; i < nparams; ++i) {
            if (params[i].group != ids[g]) continue;
            if (!seen++ && part_world && part_rank && part_world[i]) {
                gw = part_world[i];
                gr = part_rank[i];
                if (gr >= gw || gw > world || align > UINT64_MAX / gw) goto fail;
                gq = align * gw;
                any_expert = 1;
            }
            if (round_up_u64(pos, align, &pos) != 0) goto fail;
            out->param_offset[i] = flat + pos;
            out->param_order[ordered++] = i;
            if (add_u64(pos, params[i].numel, &pos) != 0) goto fail;
            /* flat + pos must stay representable too */
            uint64_t end;
            if (add_u64(flat, pos, &end) != 0) goto fail;
        }
        grp->nparams = ordered - grp->first_param;
        grp->used = pos;
        if (round_up_u64(pos, gq, &grp->numel) != 0) goto fail;
        grp->part_numel = grp->numel / gw;
        out->group_world[g] = gw;
        out->group_rank[g] = gr;
        grp->part_offset = part;
        if (add_u64(flat, grp->numel, &flat) != 0) goto fail;
        part += grp->part_numel; /* part <= flat, cannot overflow */
    }
    free(ids);
    ids = NULL;

    zero_layout *v = &out->view;
    v->struct_size = sizeof(*v);
    v->world = world;
    v->rank = rank;
    v->ngroups = ngroups;
    v->nparams = nparams;
    v->align = align;
    v->flat_numel = flat;
    v->part_numel = part;
    v->groups = out->groups;
    v->param_order = out->param_order;
    v->group_world = any_expert ? out->group_world : NULL;
    v->group_rank = any_expert ? out->group_rank : NULL;
    return 0;

fail:
    free(ids);
    zero__layout_free(out);
    return -1;
}

uint32_t zero__layout_owned(const zero_layout *l, uint32_t rank, uint64_t flat_lo, uint64_t flat_hi,
                            zero_owned_range *out, uint32_t cap) {
    if (!l || rank >= l->world || flat_lo >= flat_hi || (cap > 0 && !out)) return 0;
    uint32_t n = 0;
    for (uint32_t g = 0; g < l->ngroups && n < cap; ++g) {
        const zero_layout_group *grp = &l->groups[g];
        uint32_t pos = rank; /* place in the group's partition communicator */
        if (l->struct_size >= offsetof(zero_layout, group_rank) + sizeof l->group_rank && l->group_world) {
            if (rank == l->rank) pos = l->group_rank[g];
            if (pos >= l->group_world[g]) continue;
        }
        uint64_t own_lo = grp->flat_begin + (uint64_t)pos * grp->part_numel;
        uint64_t own_hi = own_lo + grp->part_numel;
        uint64_t lo = flat_lo > own_lo ? flat_lo : own_lo;
        uint64_t hi = flat_hi < own_hi ? flat_hi : own_hi;
        if (lo >= hi) continue;
        out[n].flat_lo = lo;
        out[n].flat_hi = hi;
        out[n].part_lo = grp->part_offset + (lo - own_lo);
        ++n;
    }
    return n;
}

int zero__layout_group_of(const zero_layout *l, uint64_t x) {
    if (!l || l->ngroups == 0 || x >= l->flat_numel) return -1;
    /* Groups are sorted by flat_begin: last group whose begin is <= x.  Empty
     * groups (numel 0) share their begin with the next one; skipping to the
     * last such group lands on the one that really contains x. */
    uint32_t lo = 0, hi = l->ngroups; /* invariant: groups[lo].flat_begin <= x */
    while (hi - lo > 1) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (l->groups[mid].flat_begin <= x)
            lo = mid;
        else
            hi = mid;
    }
    const zero_layout_group *g = &l->groups[lo];
    return (x >= g->flat_begin && x < g->flat_begin + g->numel) ? (int)lo : -1;
}
