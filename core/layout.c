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

uint64_t zero__layout_stripe_numel(const zero__layout_input *params, uint32_t nparams, uint64_t align,
                                   uint64_t requested) {
    uint64_t flat = 0, largest = 0;
    for (uint32_t i = 0; i < nparams; ++i) {
        uint64_t e;
        if (round_up_u64(params[i].numel, align ? align : 1, &e) != 0 || add_u64(flat, e, &flat) != 0)
            return UINT64_MAX; /* the build refuses such a model anyway */
        if (e > largest) largest = e;
    }
    uint64_t T = requested ? requested : flat;
    if (T > flat / 8) T = flat / 8;
    if (T < largest) T = largest;
    return T ? T : 1;
}

void zero__layout_mark_stripes(const zero__layout_input *params, uint32_t nparams, uint64_t align, uint64_t stripe,
                               uint8_t *starts) {
    if (!align) align = 1;
    for (uint32_t i = 0; i < nparams; ++i) starts[i] = 0;
    if (!stripe || !nparams) return;
    uint32_t *idx = malloc(nparams * sizeof *idx);
    uint64_t *ext = malloc(nparams * sizeof *ext);
    int32_t *ids = malloc(nparams * sizeof *ids);
    if (!idx || !ext || !ids) { /* no stripes: the contiguous layout is still a valid one */
        free(idx);
        free(ext);
        free(ids);
        return;
    }
    const uint32_t nids = collect_groups(params, nparams, ids);
    for (uint32_t g = 0; g < nids; ++g) {
        uint32_t n = 0;
        uint64_t total = 0;
        for (uint32_t i = 0; i < nparams; ++i) {
            if (params[i].group != ids[g]) continue;
            uint64_t e;
            if (round_up_u64(params[i].numel, align, &e) != 0) e = UINT64_MAX;
            idx[n] = i;
            ext[n++] = e;
            total = e > UINT64_MAX - total ? UINT64_MAX : total + e;
        }
        /* the param group launched last (buckets run param groups in
         * order): its lowest params, at most stripe/4 (at least one), form
         * a stripe of their own -- the bucket that can only start after
         * backward ends stays small (zero__bucket_plan_tail) */
        uint32_t tail = 0;
        if (g + 1 == nids && total > stripe) {
            uint64_t acc = 0;
            while (tail < n && (acc == 0 || acc + ext[tail] <= stripe / 4)) acc += ext[tail++];
            if (tail == n) tail = 0;
        }
        /* from the last param down: a stripe closes when the next (lower)
         * param would take it past `stripe`, or where the tail begins; the
         * param above the cut opens the stripe above */
        uint64_t cur = 0;
        for (uint32_t k = n; k-- > 0;) {
            if (cur > 0 && (ext[k] > stripe || cur > stripe - ext[k] || k + 1 == tail)) {
                starts[idx[k + 1]] = 1;
                cur = 0;
            }
            cur = ext[k] > UINT64_MAX - cur ? UINT64_MAX : cur + ext[k];
        }
    }
    free(idx);
    free(ext);
    free(ids);
}

static int build_full(zero__layout *out, const zero__layout_input *params, uint32_t nparams, uint32_t world,
                      uint32_t rank, uint64_t align, const uint8_t *starts, const uint32_t *part_world,
                      const uint32_t *part_rank);

int zero__layout_build(zero__layout *out, const zero__layout_input *params, uint32_t nparams,
                       uint32_t world, uint32_t rank, uint64_t align) {
    return build_full(out, params, nparams, world, rank, align, NULL, NULL, NULL);
}

int zero__layout_build_parts(zero__layout *out, const zero__layout_input *params, uint32_t nparams, uint32_t world,
                             uint32_t rank, uint64_t align, const uint32_t *part_world, const uint32_t *part_rank) {
    return build_full(out, params, nparams, world, rank, align, NULL, part_world, part_rank);
}

int zero__layout_build_striped(zero__layout *out, const zero__layout_input *params, uint32_t nparams, uint32_t world,
                               uint32_t rank, uint64_t align, const uint8_t *starts) {
    return build_full(out, params, nparams, world, rank, align, starts, NULL, NULL);
}

/* The one builder: layout groups cut at stripe starts (round_robin_gradients)
 * and, per layout group, the partition communicator of its first param
 * (expert groups, 1.3).  The engine never asks for both at once (api.c
 * refuses round_robin_gradients with expert groups: the expert communicators
 * are one per param group, not per stripe). */
static int build_full(zero__layout *out, const zero__layout_input *params, uint32_t nparams, uint32_t world,
                      uint32_t rank, uint64_t align, const uint8_t *starts, const uint32_t *part_world,
                      const uint32_t *part_rank) {
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
    uint32_t nids = collect_groups(params, nparams, ids);
    /* layout groups: one per param group, plus one per stripe start (each
     * stripe start opens a new one; the first param of a group always does) */
    uint32_t cap = nids;
    for (uint32_t i = 0; starts && i < nparams; ++i) cap += starts[i] ? 1 : 0;
    out->groups = calloc(cap ? cap : 1, sizeof(*out->groups));
    out->group_world = calloc(cap ? cap : 1, sizeof(*out->group_world));
    out->group_rank = calloc(cap ? cap : 1, sizeof(*out->group_rank));
    if (!out->groups || !out->group_world || !out->group_rank) goto fail;
    int any_expert = 0;

    uint64_t flat = 0, part = 0;
    uint32_t ordered = 0, ngroups = 0;
    for (uint32_t g = 0; g < nids; ++g) {
        uint32_t i = 0; /* next param of id g to place, registration order */
        for (;;) {
            while (i < nparams && params[i].group != ids[g]) ++i; /* every id has a param */
            /* open a layout group at param i */
            const uint32_t lg = ngroups++;
            zero_layout_group *grp = &out->groups[lg];
            grp->group_id = ids[g];
            grp->flat_begin = flat;
            grp->first_param = ordered;
            /* (1.3) the group's partition communicator: the world, or an expert group's */
            uint32_t gw = world, gr = rank;
            uint64_t gq = quantum;
            if (i < nparams && part_world && part_rank && part_world[i]) {
                gw = part_world[i];
                gr = part_rank[i];
                if (gr >= gw || gw > world || align > UINT64_MAX / gw) goto fail;
                gq = align * gw;
                any_expert = 1;
            }
            uint64_t pos = 0; /* offset inside the layout group */
            for (int first = 1; i < nparams; ++i) {
                if (params[i].group != ids[g]) continue;
                if (!first && starts && starts[i]) break; /* the next stripe */
                first = 0;
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
            out->group_world[lg] = gw;
            out->group_rank[lg] = gr;
            grp->part_offset = part;
            if (add_u64(flat, grp->numel, &flat) != 0) goto fail;
            part += grp->part_numel; /* part <= flat, cannot overflow */
            if (i == nparams) break;
        }
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

int zero__layout_build_run(zero__layout *out, const zero__layout_input *params, uint32_t nparams, uint32_t world,
                           uint32_t rank, uint64_t align, int round_robin, uint64_t bucket_numel) {
    if (!round_robin) return zero__layout_build(out, params, nparams, world, rank, align);
    if (out) memset(out, 0, sizeof(*out));
    if (nparams > 0 && !params) return -1;
    uint8_t *starts = calloc(nparams ? nparams : 1, 1);
    if (!starts) return -1;
    zero__layout_mark_stripes(params, nparams, align, zero__layout_stripe_numel(params, nparams, align, bucket_numel),
                              starts);
    int rc = zero__layout_build_striped(out, params, nparams, world, rank, align, starts);
    free(starts);
    return rc;
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
