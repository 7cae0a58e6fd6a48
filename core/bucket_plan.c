/* Bucket plan (contract in bucket_plan.h). */
#include "bucket_plan.h"

#include <stdlib.h>
#include <string.h>

/* Extent of the j-th param of group g in flat order: from its offset (the
 * group's start for the first one, which absorbs any head gap) to the next
 * param's offset or the group's end, so extents tile the group. */
static void extent(const zero_layout *L, const zero__bplan_param *pm, uint32_t g, uint32_t j, uint64_t *lo,
                   uint64_t *hi) {
    const zero_layout_group *lg = &L->groups[g];
    *lo = j == 0 ? lg->flat_begin : pm[L->param_order[lg->first_param + j]].offset;
    *hi = j + 1 < lg->nparams ? pm[L->param_order[lg->first_param + j + 1]].offset : lg->flat_begin + lg->numel;
}

/* SCATTER slots are the only memory the engine allocates: two slots of at
 * most flat/8 elements keep staging at or under a quarter of the model, so a
 * 10k-param model with DeepSpeed's default 5e8 reduce_bucket_size pays
 * ~nothing (DeepSpeedExamples issue 123).  The floor is the largest param
 * extent, because a param's gradient must be one contiguous slot.  In-place
 * modes allocate nothing, so their buckets are only clamped to the model
 * (16-bit ones stage fp32 copies: bounded like SCATTER's, params may split,
 * so no floor). */
uint64_t zero__bucket_plan_size(const zero_layout *L, const zero__bplan_param *pm, uint64_t requested, int scatter,
                                int mixed, int striped, const uint8_t *in_set) {
    uint64_t flat = 0; /* the elements this set reduces (the model's without expert groups) */
    for (uint32_t g = 0; g < L->ngroups; g++)
        if (!in_set || in_set[g]) flat += L->groups[g].numel;
    uint64_t B = requested ? requested : flat;
    if (!scatter && mixed) {
        uint64_t lim = flat / 8 ? flat / 8 : 1;
        if (B > lim) B = lim;
    } else if (scatter) {
        if (B > flat / 8) B = flat / 8;
        for (uint32_t g = 0; g < L->ngroups; g++)
            for (uint32_t j = 0; (!in_set || in_set[g]) && j < L->groups[g].nparams; j++) {
                uint64_t lo, hi;
                extent(L, pm, g, j, &lo, &hi);
                if (hi - lo > B) B = hi - lo;
            }
    } else if (B > flat) {
        B = flat;
    }
    if (striped)
        for (uint32_t g = 0; g < L->ngroups; g++)
            if ((!in_set || in_set[g]) && L->groups[g].numel > B) B = L->groups[g].numel;
    return B ? B : 1;
}

static zero_status push(zero__bucket_plan *p, uint32_t *cap, uint64_t lo, uint64_t hi, uint32_t group,
                        uint32_t nparts) {
    if (p->nb == *cap) {
        uint32_t nc = *cap ? *cap * 2 : 16;
        zero__bplan_bucket *nb = realloc(p->b, nc * sizeof *nb);
        if (!nb) return ZERO_ERR_OUT_OF_MEMORY;
        p->b = nb;
        *cap = nc;
    }
    p->b[p->nb++] = (zero__bplan_bucket){lo, hi, group, nparts};
    return ZERO_OK;
}

uint32_t zero__bucket_plan_tail(const zero_layout *L, const uint64_t *offsets, uint32_t g, uint64_t B) {
    const zero_layout_group *lg = &L->groups[g];
    if (lg->numel <= B || lg->nparams == 0) return 0;
    uint64_t acc = 0;
    uint32_t jt = 0;
    while (jt < lg->nparams) {
        const uint64_t lo = jt == 0 ? lg->flat_begin : offsets[L->param_order[lg->first_param + jt]];
        const uint64_t hi = jt + 1 < lg->nparams ? offsets[L->param_order[lg->first_param + jt + 1]]
                                                 : lg->flat_begin + lg->numel;
        if (acc > 0 && acc + (hi - lo) > B / 4) break; /* at least one param with elements */
        acc += hi - lo;
        jt++;
    }
    return jt < lg->nparams ? jt : 0;
}

/* Walk one group's params from the highest flat offset down, filling an
 * open bucket [cur_lo, cur_hi) until the next extent does not fit.  tail:
 * params [0, tail) open a bucket of their own (zero__bucket_plan_tail). */
static zero_status build_group(zero__bucket_plan *p, uint32_t *cap, const zero_layout *L, zero__bplan_param *pm,
                               uint32_t g, uint64_t B, uint64_t slack, int scatter, uint32_t tail) {
    const zero_layout_group *lg = &L->groups[g];
    if (lg->nparams == 0 || lg->numel == 0) return ZERO_OK;
    uint64_t cur_hi = lg->flat_begin + lg->numel, cur_lo = cur_hi;
    uint32_t cur_parts = 0;
    zero_status s;
    for (uint32_t j = lg->nparams; j-- > 0;) {
        uint32_t pi = L->param_order[lg->first_param + j];
        uint64_t lo, hi;
        extent(L, pm, g, j, &lo, &hi);
        uint64_t top = cur_lo; /* == hi: extents tile the group */
        (void)hi;
        /* does not fit (unless a small open bucket takes it: slack) or the tail starts: close */
        if (cur_parts > 0 &&
            ((cur_hi - lo > B && !zero__bucket_plan_merges(cur_hi - cur_lo, top - lo, B, slack)) || j + 1 == tail)) {
            if ((s = push(p, cap, cur_lo, cur_hi, g, cur_parts)) != ZERO_OK) return s;
            cur_hi = cur_lo;
            cur_parts = 0;
        }
        if (!scatter && top - lo > B) {
            /* split a large extent from the top into full buckets; the rest
             * opens a new bucket.  Its buckets are consecutive indices. */
            pm[pi].first_bucket = p->nb;
            pm[pi].nbuckets = 0;
            while (top - lo > B) {
                if ((s = push(p, cap, top - B, top, g, 1)) != ZERO_OK) return s;
                pm[pi].nbuckets++;
                top -= B;
            }
            cur_hi = top;
            cur_lo = lo;
            cur_parts = 1;
            pm[pi].nbuckets++; /* the open bucket, index p->nb when pushed */
            continue;
        }
        cur_lo = lo;
        cur_parts++;
        pm[pi].first_bucket = p->nb; /* the open bucket's future index */
        pm[pi].nbuckets = 1;
    }
    if (cur_parts > 0) return push(p, cap, cur_lo, cur_hi, g, cur_parts);
    return ZERO_OK;
}

zero_status zero__bucket_plan_build(zero__bucket_plan *out, const zero_layout *L, zero__bplan_param *pm, uint64_t B,
                                    int scatter) {
    memset(out, 0, sizeof *out);
    out->bucket_numel = B ? B : 1;
    uint32_t cap = 0;
    uint64_t *offsets = malloc((L->nparams ? L->nparams : 1) * sizeof *offsets);
    if (!offsets) return ZERO_ERR_OUT_OF_MEMORY;
    for (uint32_t i = 0; i < L->nparams; i++) offsets[i] = pm[i].offset;
    const uint32_t last = zero__bucket_plan_last_group(L);
    const uint64_t slack = zero__bucket_plan_slack(L, offsets, out->bucket_numel, scatter);
    /* Param groups in order; the layout groups of one param group (its
     * stripes with round_robin_gradients: consecutive, same id) from the
     * top down, so that launch order stays reverse flat order inside a
     * param group -- backward's order -- whatever the ownership.  Without
     * stripes every run is one layout group: the order is unchanged. */
    for (uint32_t g0 = 0, g1; g0 < L->ngroups; g0 = g1) {
        for (g1 = g0 + 1; g1 < L->ngroups && L->groups[g1].group_id == L->groups[g0].group_id;) g1++;
        for (uint32_t g = g1; g-- > g0;) {
            const uint32_t tail = g == last ? zero__bucket_plan_tail(L, offsets, g, out->bucket_numel) : 0;
            zero_status s = build_group(out, &cap, L, pm, g, out->bucket_numel, slack, scatter, tail);
            if (s != ZERO_OK) {
                free(offsets);
                zero__bucket_plan_free(out);
                return s;
            }
        }
    }
    free(offsets);
    return ZERO_OK;
}

uint32_t zero__bucket_plan_last_group(const zero_layout *L) {
    uint32_t last = UINT32_MAX;
    for (uint32_t g0 = 0, g1; g0 < L->ngroups; g0 = g1) { /* runs of one param group, in launch order */
        for (g1 = g0 + 1; g1 < L->ngroups && L->groups[g1].group_id == L->groups[g0].group_id;) g1++;
        for (uint32_t g = g0; g < g1; g++) /* launched last in the run: its lowest group with buckets */
            if (L->groups[g].nparams && L->groups[g].numel) {
                last = g;
                break;
            }
    }
    return last;
}

void zero__bucket_plan_free(zero__bucket_plan *p) {
    if (!p) return;
    free(p->b);
    p->b = NULL;
    p->nb = 0;
}

void zero__bucket_plan_block(const zero_layout *L, const zero__bplan_bucket *bk, uint32_t r, uint64_t *lo,
                             uint64_t *n, uint64_t *part_pos) {
    const zero_layout_group *lg = &L->groups[bk->group];
    const uint64_t olo = lg->flat_begin + (uint64_t)r * lg->part_numel, ohi = olo + lg->part_numel;
    const uint64_t a = bk->lo > olo ? bk->lo : olo, z = bk->hi < ohi ? bk->hi : ohi;
    *lo = z > a ? a : olo;
    *n = z > a ? z - a : 0;
    *part_pos = lg->part_offset + (*lo - olo);
}
