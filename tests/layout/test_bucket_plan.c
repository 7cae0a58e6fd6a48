/* Bucket plan (core/bucket_plan.c), property sweep (issue 13): for every
 * model layout below x N in 1..33 and a few larger x bucket size x mode
 * (SCATTER or in-place) x 16-bit or not x alignment:
 *   - the effective bucket size follows its rules (SCATTER: at most
 *     max(flat/8, largest param extent), at least the largest extent; in
 *     place: the request clamped to the model, 16-bit to flat/8);
 *   - the buckets of a group tile it exactly, in reverse flat order, none
 *     larger than the bucket size, none crossing a group;
 *   - each param lies in exactly the buckets first_bucket ..
 *     first_bucket + nbuckets - 1 (one in SCATTER mode), and a bucket's
 *     nparts counts the params (pieces) inside it;
 *   - the reduce-scatter blocks of every bucket tile it in rank order, and
 *     every gradient element (padding included) is reduced exactly once, by
 *     exactly its owner (per-element layout oracle), into exactly its place
 *     in the owner's partition buffer: every partition position of every
 *     rank is hit once over all buckets.
 * Layouts include partitions smaller than a bucket, empty partitions, N
 * larger than some params' element counts, N not dividing the model,
 * several groups (one of them tiny), zero-element params and one param
 * dominating the model. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bucket_plan.h"
#include "check.h"
#include "layout.h"

typedef struct model {
    const char *name;
    uint32_t n;
    zero__layout_input p[20];
} model;

static const model MODELS[] = {
    {"demo-like", 7, {{2048, 0}, {4096, 0}, {64, 0}, {4096, 0}, {64, 0}, {2048, 0}, {32, 0}}},
    {"tiny params", 6, {{1, 0}, {3, 0}, {2, 0}, {5, 0}, {1, 0}, {7, 0}}},
    {"one dominant", 4, {{3000, 0}, {5, 0}, {17, 0}, {1, 0}}},
    {"groups", 8, {{300, 0}, {40, 1}, {301, 0}, {2, 2}, {77, 1}, {1, 0}, {129, 2}, {5, 1}}},
    {"zero-size params", 5, {{0, 0}, {100, 0}, {0, 0}, {33, 0}, {0, 1}}},
    {"primes", 9, {{97, 0}, {89, 0}, {83, 0}, {79, 0}, {73, 0}, {71, 0}, {67, 0}, {61, 0}, {59, 0}}},
    {"single", 1, {{1000, 0}}},
    {"one element", 1, {{1, 0}}},
    /* 10 x (Linear weight + bias): a weight fills a bucket of 1000 alone */
    {"linear layers", 20, {{1000, 0}, {10, 0}, {1000, 0}, {10, 0}, {1000, 0}, {10, 0}, {1000, 0}, {10, 0},
                           {1000, 0}, {10, 0}, {1000, 0}, {10, 0}, {1000, 0}, {10, 0}, {1000, 0}, {10, 0},
                           {1000, 0}, {10, 0}, {1000, 0}, {10, 0}}},
};

/* (issue 18) The small-bucket rule on "linear layers", N = 2, buckets of
 * 1000: in SCATTER each bias joins the weight below it (slack min(1000/16,
 * flat/8 - 1000) = 62), so 9 buckets of 1010 plus the tail's two (layer
 * 0's bias, then its weight alone: zero__bucket_plan_tail) instead of 20;
 * the in-place modes keep the old plan (slack 0, 20 buckets). */
static void check_small_buckets_merge(void) {
    const model *m = &MODELS[sizeof MODELS / sizeof MODELS[0] - 1];
    for (int scatter = 0; scatter <= 1; ++scatter) {
        zero__layout L;
        CHECK_EQ_INT(zero__layout_build(&L, m->p, m->n, 2, 0, 1), 0);
        const zero_layout *l = &L.view;
        zero__bplan_param pm[20];
        uint64_t offs[20];
        memset(pm, 0, sizeof pm);
        for (uint32_t i = 0; i < m->n; ++i) {
            pm[i].offset = offs[i] = L.param_offset[i];
            pm[i].numel = m->p[i].numel;
            pm[i].group = 0;
        }
        const uint64_t B = zero__bucket_plan_size(l, pm, 1000, scatter, 0, 0, NULL);
        CHECK_EQ_INT(B, 1000);
        CHECK_EQ_INT(zero__bucket_plan_slack(l, offs, B, scatter), scatter ? 62 : 0);
        zero__bucket_plan plan;
        CHECK_EQ_INT(zero__bucket_plan_build(&plan, l, pm, B, scatter), ZERO_OK);
        CHECK_EQ_INT(plan.nb, scatter ? 11 : 20);
        if (scatter) {
            for (uint32_t k = 0; k + 2 < plan.nb; ++k) CHECK_EQ_INT(plan.b[k].hi - plan.b[k].lo, 1010);
            CHECK_EQ_INT(plan.b[9].hi - plan.b[9].lo, 10);
            CHECK_EQ_INT(plan.b[10].hi - plan.b[10].lo, 1000);
        }
        zero__bucket_plan_free(&plan);
        /* a request of flat/8 or more leaves no slack: B is the cap */
        CHECK_EQ_INT(zero__bucket_plan_slack(l, offs, zero__bucket_plan_size(l, pm, 5000, scatter, 0, 0, NULL), scatter), 0);
        zero__layout_free(&L);
    }
}

/* (1.9) A bucket set of some groups (expert groups: one set per partition
 * communicator) sizes its buckets from its own groups: the dense group of
 * 8 x 1000 and an expert group of 2 x 300 partitioned over 2 of 4 ranks.
 * Whole model (NULL): flat/8 = 8600/8 = 1075; the dense set: 8000/8 = 1000.
 * Expert set: its 600 elements / 8 = 75, raised to its own largest extent
 * (300), not to 1075; in-place modes cap a request at its 600 elements
 * (the whole model's 8600 leave 5000 as asked). */
static void check_set_size(void) {
    zero__layout_input in[10];
    for (int i = 0; i < 8; ++i) in[i] = (zero__layout_input){1000, 0};
    in[8] = in[9] = (zero__layout_input){300, 1};
    uint32_t pw[10] = {0, 0, 0, 0, 0, 0, 0, 0, 2, 2}, pr[10] = {0};
    zero__layout L;
    CHECK_EQ_INT(zero__layout_build_parts(&L, in, 10, 4, 0, 1, pw, pr), 0);
    const zero_layout *l = &L.view;
    CHECK_EQ_INT(l->ngroups, 2);
    zero__bplan_param pm[10];
    memset(pm, 0, sizeof pm);
    for (uint32_t i = 0; i < 10; ++i) {
        pm[i].offset = L.param_offset[i];
        pm[i].numel = in[i].numel;
        pm[i].group = (uint32_t)in[i].group;
    }
    const uint8_t dense[2] = {1, 0}, expert[2] = {0, 1};
    CHECK_EQ_INT(zero__bucket_plan_size(l, pm, 0, 1, 0, 0, NULL), 1075);
    CHECK_EQ_INT(zero__bucket_plan_size(l, pm, 0, 1, 0, 0, dense), 1000);
    CHECK_EQ_INT(zero__bucket_plan_size(l, pm, 0, 1, 0, 0, expert), 300);
    CHECK_EQ_INT(zero__bucket_plan_size(l, pm, 5000, 0, 0, 0, expert), 600);
    CHECK_EQ_INT(zero__bucket_plan_size(l, pm, 5000, 0, 0, 0, NULL), 5000);
    zero__layout_free(&L);
}

static uint64_t oracle_owner(const zero_layout *l, uint64_t x, uint64_t *part_pos) {
    for (uint32_t g = 0; g < l->ngroups; ++g) {
        const zero_layout_group *grp = &l->groups[g];
        if (x >= grp->flat_begin && x < grp->flat_begin + grp->numel) {
            uint64_t off = x - grp->flat_begin;
            *part_pos = grp->part_offset + off % grp->part_numel;
            return off / grp->part_numel;
        }
    }
    return UINT64_MAX;
}

static long combos = 0, failures_before = 0;

/* One (layout, N, align, bucket request, mode, 16-bit) combination; returns
 * 0 on the first broken property (so one bug does not print thousands). */
static int check_one(const model *m, uint32_t N, uint64_t align, uint64_t req, int scatter, int mixed, int striped) {
    ++combos;
    zero__layout L;
    /* striped: round_robin_gradients, stripes cut at the same request */
    if (zero__layout_build_run(&L, m->p, m->n, N, 0, align, striped, req) != 0) {
        CHECK(0, "%s: layout N=%u align=%llu failed", m->name, N, (unsigned long long)align);
        return 0;
    }
    const zero_layout *l = &L.view;
    zero__bplan_param *pm = calloc(m->n ? m->n : 1, sizeof *pm);
    for (uint32_t i = 0; i < m->n; ++i) {
        pm[i].offset = L.param_offset[i];
        pm[i].numel = m->p[i].numel;
        int g = zero__layout_group_of(l, pm[i].offset);
        pm[i].group = g < 0 ? 0 : (uint32_t)g;
    }
    char what[160];
    snprintf(what, sizeof what, "%s N=%u align=%llu request=%llu %s%s%s", m->name, N, (unsigned long long)align,
             (unsigned long long)req, scatter ? "SCATTER" : "in-place", mixed ? " 16-bit" : "",
             striped ? " round-robin" : "");
    int ok = 1;
#define PROP(cond, ...)                                                                \
    do {                                                                               \
        if (ok && !(cond)) {                                                           \
            CHECK(0, "%s: ", what);                                                    \
            fprintf(stderr, "    " __VA_ARGS__);                                       \
            fputc('\n', stderr);                                                       \
            ok = 0;                                                                    \
        }                                                                              \
    } while (0)

    /* effective size */
    const uint64_t flat = l->flat_numel;
    uint64_t largest = 0;
    for (uint32_t g = 0; g < l->ngroups; ++g) {
        const zero_layout_group *grp = &l->groups[g];
        for (uint32_t j = 0; j < grp->nparams; ++j) {
            uint64_t lo = j == 0 ? grp->flat_begin : pm[l->param_order[grp->first_param + j]].offset;
            uint64_t hi = j + 1 < grp->nparams ? pm[l->param_order[grp->first_param + j + 1]].offset
                                               : grp->flat_begin + grp->numel;
            if (hi - lo > largest) largest = hi - lo;
        }
    }
    const uint64_t B = zero__bucket_plan_size(l, pm, req, scatter, mixed, striped, NULL);
    const uint64_t want = req ? req : flat;
    PROP(B >= 1, "bucket size 0");
    if (striped) {
        for (uint32_t g = 0; g < l->ngroups; ++g)
            PROP(B >= l->groups[g].numel, "round-robin bucket %llu below stripe %u (%llu)", (unsigned long long)B, g,
                 (unsigned long long)l->groups[g].numel);
    } else if (scatter) {
        PROP(B >= largest, "SCATTER bucket %llu below the largest extent %llu", (unsigned long long)B,
             (unsigned long long)largest);
        PROP(B <= (largest > flat / 8 ? largest : flat / 8) || B == 1, "SCATTER bucket %llu above its cap",
             (unsigned long long)B);
        PROP(B == (want < flat / 8 ? want : flat / 8) || B == largest || B == 1, "SCATTER bucket %llu: no rule gives it",
             (unsigned long long)B);
    } else if (mixed) {
        PROP(B <= (flat / 8 ? flat / 8 : 1) && (B == want || B == (flat / 8 ? flat / 8 : 1)),
             "16-bit in-place bucket %llu", (unsigned long long)B);
    } else {
        PROP(B == (want < flat ? want : flat) || (flat == 0 && B == 1), "in-place bucket %llu", (unsigned long long)B);
    }

    uint64_t *offs = malloc((m->n ? m->n : 1) * sizeof *offs);
    for (uint32_t i = 0; i < m->n; ++i) offs[i] = pm[i].offset;
    const uint64_t slack = zero__bucket_plan_slack(l, offs, B, scatter);
    free(offs);
    /* the slack keeps every bucket within the mode's memory bound */
    PROP(slack <= B / 16 && (slack == 0 || (scatter && B + slack <= (largest > flat / 8 ? largest : flat / 8))),
         "slack %llu for B %llu", (unsigned long long)slack, (unsigned long long)B);
    zero__bucket_plan plan;
    PROP(zero__bucket_plan_build(&plan, l, pm, B, scatter) == ZERO_OK, "plan build failed");
    if (!ok) {
        free(pm);
        zero__layout_free(&L);
        return 0;
    }
    /* tiling per group, reverse order, size bound */
    uint64_t *covered = calloc(flat ? flat : 1, sizeof *covered); /* bucket index + 1 per element */
    for (uint32_t k = 0; k < plan.nb && ok; ++k) {
        const zero__bplan_bucket *bk = &plan.b[k];
        const zero_layout_group *grp = &l->groups[bk->group];
        PROP(bk->lo < bk->hi, "bucket %u empty", k);
        /* B, or B + slack when a small bucket took the next param (issue 18) */
        PROP(bk->hi - bk->lo <= B + slack, "bucket %u has %llu > %llu + %llu elements", k,
             (unsigned long long)(bk->hi - bk->lo), (unsigned long long)B, (unsigned long long)slack);
        PROP(bk->lo >= grp->flat_begin && bk->hi <= grp->flat_begin + grp->numel, "bucket %u crosses its group", k);
        if (striped) { /* the point of round-robin: a bucket is a whole stripe, every rank an equal block */
            PROP(bk->lo == grp->flat_begin && bk->hi == grp->flat_begin + grp->numel,
                 "round-robin bucket %u is not its whole stripe", k);
            for (uint32_t r = 0; r < N && ok; ++r) {
                uint64_t blo, bn, bpos;
                zero__bucket_plan_block(l, bk, r, &blo, &bn, &bpos);
                PROP(bn * N == bk->hi - bk->lo, "round-robin bucket %u: rank %u's block %llu of %llu", k, r,
                     (unsigned long long)bn, (unsigned long long)(bk->hi - bk->lo));
            }
        }
        if (k > 0 && plan.b[k - 1].group == bk->group)
            PROP(plan.b[k - 1].lo == bk->hi, "bucket %u does not continue bucket %u downwards", k, k - 1);
        /* launch order is backward's: reverse flat order inside a param
         * group, across its stripes too (a stripe launched before the ones
         * above it would wait for all of backward and hold every slot) */
        if (k > 0 && l->groups[plan.b[k - 1].group].group_id == grp->group_id)
            PROP(plan.b[k - 1].lo >= bk->hi, "bucket %u [%llu, %llu) launches after bucket %u below it", k,
                 (unsigned long long)bk->lo, (unsigned long long)bk->hi, k - 1);
        if (k == 0 || plan.b[k - 1].group != bk->group)
            PROP(bk->hi == grp->flat_begin + grp->numel, "group %u's first bucket does not start at its top", bk->group);
        for (uint64_t x = bk->lo; x < bk->hi && ok; ++x) {
            PROP(covered[x] == 0, "element %llu in buckets %llu and %u", (unsigned long long)x,
                 (unsigned long long)covered[x] - 1, k);
            covered[x] = k + 1;
        }
    }
    /* the tail: the bucket launched last is small (at most B/4, or one
     * param: never split for it) when its group needs several buckets */
    if (plan.nb > 1 && !striped) {
        const zero__bplan_bucket *lb = &plan.b[plan.nb - 1];
        const zero_layout_group *lgrp = &l->groups[lb->group];
        uint32_t with_elems = 0; /* params with elements in it (zero-size ones ride along) */
        for (uint32_t i = 0; i < m->n; ++i)
            if (m->p[i].numel && pm[i].offset >= lb->lo && pm[i].offset < lb->hi) ++with_elems;
        if (lgrp->numel > B && with_elems > 1)
            PROP((lb->hi - lb->lo) <= B / 4, "last bucket [%llu, %llu) of %u params exceeds B/4 = %llu",
                 (unsigned long long)lb->lo, (unsigned long long)lb->hi, with_elems, (unsigned long long)(B / 4));
    }
    for (uint32_t g = 0; g < l->ngroups && ok; ++g) {
        const zero_layout_group *grp = &l->groups[g];
        if (grp->nparams == 0) continue;
        for (uint64_t x = grp->flat_begin; x < grp->flat_begin + grp->numel && ok; ++x)
            PROP(covered[x] != 0, "element %llu of group %u in no bucket", (unsigned long long)x, g);
    }
    /* params: exactly their buckets; nparts */
    uint32_t *parts = calloc(plan.nb ? plan.nb : 1, sizeof *parts);
    for (uint32_t i = 0; i < m->n && ok; ++i) {
        /* a zero-element param alone in its group has no bucket (the group
         * has no elements); the engine then has nothing to count for it */
        uint32_t gi = 0;
        for (uint32_t g = 0; g < l->ngroups; ++g)
            for (uint32_t j = 0; j < l->groups[g].nparams; ++j)
                if (l->param_order[l->groups[g].first_param + j] == i) gi = g;
        if (l->groups[gi].numel == 0) {
            PROP(pm[i].numel == 0 && pm[i].nbuckets == 0, "param %u in an empty group has buckets", i);
            continue;
        }
        const uint32_t f = pm[i].first_bucket, nbk = pm[i].nbuckets;
        PROP(nbk >= 1 && f + nbk <= plan.nb, "param %u: buckets %u+%u of %u", i, f, nbk, plan.nb);
        if (scatter) PROP(nbk == 1, "SCATTER split param %u over %u buckets", i, nbk);
        for (uint64_t x = pm[i].offset; x < pm[i].offset + pm[i].numel && ok; ++x)
            PROP(covered[x] - 1 >= f && covered[x] - 1 < f + nbk, "param %u element %llu in bucket %llu, not %u..%u", i,
                 (unsigned long long)x, (unsigned long long)covered[x] - 1, f, f + nbk - 1);
        for (uint32_t k = f; k < f + nbk && k < plan.nb; ++k) parts[k]++;
    }
    for (uint32_t k = 0; k < plan.nb && ok; ++k)
        PROP(parts[k] == plan.b[k].nparts, "bucket %u: nparts %u, %u params inside", k, plan.b[k].nparts, parts[k]);
    /* blocks: tile each bucket in rank order; each element reduced once into its owner's partition */
    uint8_t *hit = calloc((size_t)N * (l->part_numel ? l->part_numel : 1), 1);
    for (uint32_t k = 0; k < plan.nb && ok; ++k) {
        const zero__bplan_bucket *bk = &plan.b[k];
        uint64_t next = bk->lo, sum = 0;
        for (uint32_t r = 0; r < N && ok; ++r) {
            uint64_t lo, n, pos;
            zero__bucket_plan_block(l, bk, r, &lo, &n, &pos);
            sum += n;
            if (n == 0) continue;
            PROP(lo == next, "bucket %u block %u starts at %llu, not %llu", k, r, (unsigned long long)lo,
                 (unsigned long long)next);
            next = lo + n;
            for (uint64_t x = lo; x < lo + n && ok; ++x) {
                uint64_t opos = 0, owner = oracle_owner(l, x, &opos); /* 0: gcc -Os cannot see every path sets it */
                PROP(owner == r, "element %llu reduced by rank %u, owned by %llu", (unsigned long long)x, r,
                     (unsigned long long)owner);
                PROP(opos == pos + (x - lo), "element %llu lands at %llu, belongs at %llu", (unsigned long long)x,
                     (unsigned long long)(pos + (x - lo)), (unsigned long long)opos);
                PROP(opos < l->part_numel, "partition position %llu out of range", (unsigned long long)opos);
                if (ok) {
                    PROP(hit[(size_t)r * l->part_numel + opos] == 0, "partition %u position %llu reduced twice", r,
                         (unsigned long long)opos);
                    hit[(size_t)r * l->part_numel + opos] = 1;
                }
            }
        }
        PROP(sum == bk->hi - bk->lo, "bucket %u blocks sum to %llu of %llu", k, (unsigned long long)sum,
             (unsigned long long)(bk->hi - bk->lo));
    }
    /* every position of every rank's partition (of groups that have params) reduced */
    for (uint32_t g = 0; g < l->ngroups && ok; ++g) {
        const zero_layout_group *grp = &l->groups[g];
        if (grp->nparams == 0) continue;
        for (uint32_t r = 0; r < N && ok; ++r)
            for (uint64_t q = 0; q < grp->part_numel && ok; ++q)
                PROP(hit[(size_t)r * l->part_numel + grp->part_offset + q], "rank %u partition position %llu never reduced",
                     r, (unsigned long long)(grp->part_offset + q));
    }
#undef PROP
    free(hit);
    free(parts);
    free(covered);
    zero__bucket_plan_free(&plan);
    free(pm);
    zero__layout_free(&L);
    return ok;
}

int main(void) {
    static const uint32_t extra_n[] = {48, 64, 100};
    static const uint64_t aligns[] = {1, 4, 16};
    int bad = 0;
    check_small_buckets_merge();
    check_set_size();
    for (size_t mi = 0; mi < sizeof MODELS / sizeof MODELS[0]; ++mi) {
        for (uint32_t ni = 1; ni <= 33 + 3; ++ni) {
            const uint32_t N = ni <= 33 ? ni : extra_n[ni - 34];
            for (size_t ai = 0; ai < 3; ++ai) {
                /* requests: DeepSpeed's default (0 = whole model here), tiny,
                 * around a partition, around a param, and huge */
                const uint64_t reqs[] = {0, 1, 2, 3, 7, 50, 64, 100, 333, 1000, 3000, 5000, 500000000ull};
                for (size_t ri = 0; ri < sizeof reqs / sizeof reqs[0]; ++ri)
                    for (int scatter = 0; scatter <= 1; ++scatter)
                        for (int mixed = 0; mixed <= 1; ++mixed)
                            for (int striped = 0; striped <= 1; ++striped)
                                if (!check_one(&MODELS[mi], N, aligns[ai], reqs[ri], scatter, mixed, striped) &&
                                    ++bad > 20)
                                    goto done;
            }
        }
    }
done:
    (void)failures_before;
    printf("bucket plan: %ld combinations checked, %d broken\n", combos, bad);
    CHECK(combos > 10000, "sweep too small (%ld)", combos);
    return check_finish();
}
