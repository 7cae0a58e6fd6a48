/* White-box tests of the bucket engine (core/buckets.c), run with 1 and 2
 * ranks.  The engine comes from the public API (stage0 plugin, so the core
 * has a layout); the bucket sets under test are created directly through
 * zero__buckets_create with the test's own buffers.
 *  - sizes: a param larger than bucket_numel is split in in-place modes and
 *    never in SCATTER mode; DeepSpeed's 5e8 default is clamped to the model
 *    (in-place) or to max(model/8, largest param) (SCATTER), so staging is
 *    at most a quarter of the model;
 *  - sums: ALLREDUCE gives the sum everywhere, SCATTER_INPLACE in the owned
 *    ranges, SCATTER adds the owned part into the partition (twice = 2x);
 *  - hooks fired in forward order (the worst case: the first bucket to
 *    launch completes last) grow the slot pool instead of deadlocking, and
 *    give the same sums;
 *  - an accumulate-only micro-step (gas 2, not the boundary) communicates
 *    nothing in in-place modes. */
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "../common/bucket_fixture.h"
#include "../common/mpi_check.h"

static int rank_ = 0, world_ = 1;
static const uint64_t sizes[5] = {1, 7, 1000, 33, 333};
#define NP 5

static struct zero_engine *make_engine(int gas) { return bucket_fixture_engine(gas, sizes, NP); }

static float grad_of(int r, int i, uint64_t k) { return bucket_fixture_grad(r, i, k); }
static float sum_of(int i, uint64_t k) {
    float s = 0;
    for (int r = 0; r < world_; r++) s += grad_of(r, i, k);
    return s;
}

static void fire_all(zero_buckets *b, int forward, int via_src) {
    for (int n = 0; n < NP; n++) {
        int i = forward ? n : NP - 1 - n;
        if (via_src) {
            float *g = malloc(sizes[i] * sizeof(float));
            for (uint64_t k = 0; k < sizes[i]; k++) g[k] = grad_of(rank_, i, k);
            CHECK_EQ_INT(zero__buckets_ready(b, (uint32_t)i, g, ZERO_DTYPE_F32), ZERO_OK);
            free(g);
        } else {
            void *slot = NULL;
            CHECK_EQ_INT(zero__buckets_grad_slot(b, (uint32_t)i, &slot), ZERO_OK);
            float *f = slot;
            for (uint64_t k = 0; k < sizes[i]; k++) f[k] += grad_of(rank_, i, k);
            CHECK_EQ_INT(zero__buckets_ready(b, (uint32_t)i, NULL, ZERO_DTYPE_F32), ZERO_OK);
        }
    }
}

static zero_bucket_spec spec_of(zero_bucket_mode mode, uint64_t bucket, int overlap, void *flat, void *part) {
    return bucket_fixture_spec(mode, bucket, overlap, flat, part);
}

static void test_sizes(struct zero_engine *e) {
    const zero_layout *L = &e->layout.view;
    zero_core *c = zero__core_of(e);
    float *flat = calloc(L->flat_numel, sizeof(float)), *part = calloc(L->part_numel, sizeof(float));
    zero_buckets *b = NULL;
    zero_bucket_spec s = spec_of(ZERO_BUCKETS_ALLREDUCE, 100, 1, flat, part);
    CHECK_EQ_INT(zero__buckets_create(c, &s, &b), ZERO_OK);
    /* the 1000-element param alone needs 10 buckets of 100 */
    CHECK(zero__buckets_count(b) >= 12, "ALLREDUCE with 100-element buckets: %u buckets", zero__buckets_count(b));
    CHECK_EQ_INT(zero__buckets_numel(b), 100);
    CHECK_EQ_INT(zero__buckets_staging_bytes(b), 0);
    zero__buckets_destroy(b);

    s = spec_of(ZERO_BUCKETS_ALLREDUCE, 500000000, 1, flat, part);
    CHECK_EQ_INT(zero__buckets_create(c, &s, &b), ZERO_OK);
    CHECK_EQ_INT(zero__buckets_numel(b), L->flat_numel);
    CHECK_EQ_INT(zero__buckets_count(b), L->ngroups); /* one bucket per group */
    zero__buckets_destroy(b);

    s = spec_of(ZERO_BUCKETS_SCATTER, 500000000, 1, flat, part);
    CHECK_EQ_INT(zero__buckets_create(c, &s, &b), ZERO_OK);
    uint64_t want = L->flat_numel / 8;
    if (want < 1008) want = 1008; /* the 1000-element param's extent (next param 16-aligned) */
    CHECK(zero__buckets_numel(b) >= 1000 && zero__buckets_numel(b) <= want,
          "SCATTER bucket %llu, expected max(flat/8, largest extent) <= %llu",
          (unsigned long long)zero__buckets_numel(b), (unsigned long long)want);
    zero__buckets_destroy(b);

    s = spec_of(ZERO_BUCKETS_SCATTER, 0, 1, NULL, NULL);
    CHECK(zero__buckets_create(c, &s, &b) == ZERO_ERR_INVALID_ARGUMENT, "SCATTER without a partition accepted");
    free(flat);
    free(part);
}

static void check_owned_sums(struct zero_engine *e, const float *flat, const float *part, zero_bucket_mode mode,
                             float times, const char *what) {
    const zero_layout *L = &e->layout.view;
    int bad = 0;
    for (uint32_t i = 0; i < NP && !bad; i++) {
        uint64_t off = e->params[i]->info.flat_offset;
        for (uint64_t k = 0; k < sizes[i] && !bad; k++) {
            uint64_t x = off + k;
            int g = zero__layout_group_of(L, x);
            const zero_layout_group *lg = &L->groups[g];
            uint64_t own_lo = lg->flat_begin + (uint64_t)L->rank * lg->part_numel;
            int owned = x >= own_lo && x < own_lo + lg->part_numel;
            float got;
            if (mode == ZERO_BUCKETS_ALLREDUCE) got = flat[x];
            else if (!owned) continue;
            else if (mode == ZERO_BUCKETS_SCATTER_INPLACE) got = flat[x];
            else got = part[lg->part_offset + (x - own_lo)];
            float want = times * sum_of((int)i, k);
            if (got != want) {
                bad = 1;
                CHECK(0, "%s: param %u elem %llu: %g != %g", what, i, (unsigned long long)k, got, want);
            }
        }
    }
    CHECK(!bad, "%s", what);
}

static void test_sums(struct zero_engine *e, zero_bucket_mode mode, int overlap, int forward, int via_src) {
    const zero_layout *L = &e->layout.view;
    float *flat = calloc(L->flat_numel, sizeof(float)), *part = calloc(L->part_numel, sizeof(float));
    zero_buckets *b = NULL;
    zero_bucket_spec s = spec_of(mode, 200, overlap, flat, part);
    CHECK_EQ_INT(zero__buckets_create(zero__core_of(e), &s, &b), ZERO_OK);
    if (!b) return;
    char what[128];
    snprintf(what, sizeof what, "mode %d overlap %d %s order%s", (int)mode, overlap, forward ? "forward" : "backward",
             via_src ? " (host src)" : "");
    fire_all(b, forward, via_src);
    CHECK_EQ_INT(zero__buckets_flush(b), ZERO_OK);
    check_owned_sums(e, flat, part, mode, 1.0f, what);
    if (mode == ZERO_BUCKETS_SCATTER) {
        fire_all(b, forward, via_src); /* accumulates into the partition */
        CHECK_EQ_INT(zero__buckets_flush(b), ZERO_OK);
        check_owned_sums(e, flat, part, mode, 2.0f, what);
        uint64_t slot_bytes = zero__buckets_numel(b) * 4; /* upper bound of one slot */
        if (world_ > 1 && !forward)
            CHECK(zero__buckets_staging_bytes(b) <= 2 * slot_bytes, "%s: %llu staging bytes, expected 2 slots", what,
                  (unsigned long long)zero__buckets_staging_bytes(b));
        if (world_ > 1 && forward && overlap)
            CHECK(zero__buckets_staging_bytes(b) > 2 * 4 * 200,
                  "%s: forward order should have grown the pool (%llu bytes)", what,
                  (unsigned long long)zero__buckets_staging_bytes(b));
        if (world_ == 1) CHECK_EQ_INT(zero__buckets_staging_bytes(b), 0); /* slot = partition */
    }
    CHECK_EQ_INT(zero__buckets_passes(b), mode == ZERO_BUCKETS_SCATTER ? 2 : 1);
    zero__buckets_destroy(b);
    free(flat);
    free(part);
}

/* gas 2: the first micro-step only accumulates (no pass, no comm). */
static void test_accumulate_only(void) {
    struct zero_engine *e = make_engine(2);
    if (!e) return;
    const zero_layout *L = &e->layout.view;
    float *flat = calloc(L->flat_numel, sizeof(float));
    zero_buckets *b = NULL;
    zero_bucket_spec s = spec_of(ZERO_BUCKETS_SCATTER_INPLACE, 200, 1, flat, NULL);
    CHECK_EQ_INT(zero__buckets_create(zero__core_of(e), &s, &b), ZERO_OK);
    if (b) {
        zero__comm_counters before, after;
        zero__comm_counters_get(e->world, &before);
        fire_all(b, 0, 0);
        CHECK_EQ_INT(zero__buckets_flush(b), ZERO_OK);
        zero__comm_counters_get(e->world, &after);
        CHECK_EQ_INT(zero__buckets_passes(b), 0);
        CHECK_EQ_INT(after.reduce_scatter_calls, before.reduce_scatter_calls);
        CHECK_EQ_INT(flat[e->params[2]->info.flat_offset], grad_of(rank_, 2, 0)); /* local, unreduced */
        zero__buckets_destroy(b);
    }
    free(flat);
    zero_engine_destroy(e);
}

int main(int argc, char **argv) {
    check_mpi_init(&argc, &argv, &rank_, &world_);
    struct zero_engine *e = make_engine(1);
    if (e) {
        test_sizes(e);
        for (int mode = 0; mode < 3; mode++)
            for (int overlap = 0; overlap <= 1; overlap++)
                for (int forward = 0; forward <= 1; forward++) test_sums(e, (zero_bucket_mode)mode, overlap, forward, 0);
        test_sums(e, ZERO_BUCKETS_SCATTER, 1, 0, 1);
        test_sums(e, ZERO_BUCKETS_ALLREDUCE, 1, 1, 1);
        zero_engine_destroy(e);
    }
    test_accumulate_only();
    return check_mpi_finish();
}
