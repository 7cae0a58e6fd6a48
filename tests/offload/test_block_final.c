/* White-box test of the bucket engine's on_block_final callback
 * (zero_bucket_spec, appended for offload), run with 1, 2 and 4 ranks:
 *  - at every reducing micro-step the reported blocks tile this rank's
 *    partition exactly once, each block is this rank's share of the flat
 *    range it names (part_lo as the layout maps it), and reports come in
 *    bucket order (each group's buckets from the top of the group down);
 *  - the values are final when reported: a snapshot taken inside the
 *    callback equals the reduced sum after buckets_flush;
 *  - an accumulate-only micro-step (in-place modes, gas 2) reports nothing;
 *  - SCATTER with several buckets and 2 ranks or more reports blocks
 *    before buckets_flush (during "backward"), which is the point;
 *  - a spec whose struct_size ends before the new fields is never called
 *    (plugin_abi.c adopts it through the buckets_create service).
 * The engine comes from the public API (stage0 plugin, so the core has a
 * layout); the bucket sets are created directly with the test's buffers. */
#include <mpi.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "../common/bucket_fixture.h"
#include "../common/mpi_check.h"

static int rank_ = 0, world_ = 1;
static const uint64_t sizes[6] = {1, 7, 1000, 33, 333, 250};
#define NP 6

typedef struct rec {
    const zero_layout *L;
    int mode;
    const float *flat, *part; /* where the engine puts the sums */
    float *snap;              /* part_numel: values seen inside the callback */
    int *hits;                /* part_numel: how often each element was reported */
    int in_flush;
    uint32_t calls, early_calls, order_bad, range_bad;
    uint64_t last_group, last_flat_lo;
    int first;
} rec;

static int group_of(const zero_layout *L, uint64_t flat) {
    for (uint32_t g = 0; g < L->ngroups; g++)
        if (flat >= L->groups[g].flat_begin && flat < L->groups[g].flat_begin + L->groups[g].numel) return (int)g;
    return -1;
}

static void on_final(void *user, const zero_owned_range *blk) {
    rec *r = user;
    r->calls++;
    if (!r->in_flush) r->early_calls++;
    const zero_layout *L = r->L;
    int g = group_of(L, blk->flat_lo);
    if (g < 0 || blk->flat_hi <= blk->flat_lo) {
        r->range_bad++;
        return;
    }
    const zero_layout_group *lg = &L->groups[g];
    uint64_t own_lo = lg->flat_begin + (uint64_t)L->rank * lg->part_numel;
    if (blk->flat_lo < own_lo || blk->flat_hi > own_lo + lg->part_numel ||
        blk->part_lo != lg->part_offset + (blk->flat_lo - own_lo))
        r->range_bad++;
    /* bucket order: groups ascending, inside a group from the top down */
    if (!r->first && ((uint64_t)g < r->last_group || ((uint64_t)g == r->last_group && blk->flat_lo >= r->last_flat_lo)))
        r->order_bad++;
    r->first = 0;
    r->last_group = (uint64_t)g;
    r->last_flat_lo = blk->flat_lo;
    for (uint64_t i = 0; i < blk->flat_hi - blk->flat_lo && blk->part_lo + i < L->part_numel; i++) {
        float v = r->mode == ZERO_BUCKETS_SCATTER ? r->part[blk->part_lo + i] : r->flat[blk->flat_lo + i];
        r->snap[blk->part_lo + i] = v;
        r->hits[blk->part_lo + i]++;
    }
}

static struct zero_engine *make_engine(int gas) { return bucket_fixture_engine(gas, sizes, NP); }

static float grad_of(int r, int i, uint64_t k) { return bucket_fixture_grad(r, i, k); }

/* One micro-step of hooks in backward order; flush; checks. */
static void micro_step(struct zero_engine *e, zero_buckets *b, rec *r, int reducing, const char *what) {
    const zero_layout *L = &e->layout.view;
    memset(r->hits, 0, L->part_numel * sizeof(int));
    r->calls = r->early_calls = r->order_bad = r->range_bad = 0;
    r->first = 1;
    r->in_flush = 0;
    for (int n = NP - 1; n >= 0; n--) {
        void *slot = NULL;
        CHECK_EQ_INT(zero__buckets_grad_slot(b, (uint32_t)n, &slot), ZERO_OK);
        for (uint64_t k = 0; k < sizes[n]; k++) ((float *)slot)[k] += grad_of(rank_, n, k);
        CHECK_EQ_INT(zero__buckets_ready(b, (uint32_t)n, NULL, ZERO_DTYPE_F32), ZERO_OK);
    }
    r->in_flush = 1;
    CHECK_EQ_INT(zero__buckets_flush(b), ZERO_OK);
    if (!reducing) {
        CHECK(r->calls == 0, "%s: %u reports on an accumulate-only micro-step", what, r->calls);
        return;
    }
    CHECK(r->range_bad == 0, "%s: %u blocks outside this rank's share or with a wrong part_lo", what, r->range_bad);
    CHECK(r->order_bad == 0, "%s: %u reports out of bucket order", what, r->order_bad);
    uint64_t once = 0, stale = 0;
    for (uint64_t i = 0; i < L->part_numel; i++) once += r->hits[i] == 1;
    CHECK(once == L->part_numel, "%s: %llu of %llu partition elements reported exactly once", what,
          (unsigned long long)once, (unsigned long long)L->part_numel);
    /* final when reported: the snapshot equals what the buffers hold now */
    for (uint32_t g = 0; g < L->ngroups; g++) {
        const zero_layout_group *lg = &L->groups[g];
        for (uint64_t i = 0; i < lg->part_numel; i++) {
            uint64_t pi = lg->part_offset + i, fi = lg->flat_begin + (uint64_t)L->rank * lg->part_numel + i;
            float now = r->mode == ZERO_BUCKETS_SCATTER ? r->part[pi] : r->flat[fi];
            stale += memcmp(&now, &r->snap[pi], sizeof now) != 0;
        }
    }
    CHECK(stale == 0, "%s: %llu elements changed after they were reported final", what, (unsigned long long)stale);
}

static void run_mode(int mode, int overlap, int gas, int short_spec) {
    struct zero_engine *e = make_engine(gas);
    if (!e) return;
    const zero_layout *L = &e->layout.view;
    zero_core *c = zero__core_of(e);
    float *flat = calloc(L->flat_numel, sizeof(float)), *part = calloc(L->part_numel + 1, sizeof(float));
    rec r;
    memset(&r, 0, sizeof r);
    r.L = L;
    r.mode = mode;
    r.flat = flat;
    r.part = part;
    r.snap = calloc(L->part_numel + 1, sizeof(float));
    r.hits = calloc(L->part_numel + 1, sizeof(int));
    zero_bucket_spec s = bucket_fixture_spec((zero_bucket_mode)mode, 300, overlap, flat, part);
    if (short_spec) s.struct_size = (uint32_t)offsetof(zero_bucket_spec, on_block_final);
    s.on_block_final = on_final; /* present in memory even when struct_size says it is not */
    s.on_block_final_user = &r;
    zero_buckets *b = NULL;
    char what[128];
    snprintf(what, sizeof what, "N=%d mode %d overlap %d gas %d%s", world_, mode, overlap, gas,
             short_spec ? " (old struct_size)" : "");
    /* through the services entry a plugin calls: it adopts older layouts */
    CHECK_EQ_INT(e->svc.buckets_create(c, &s, &b), ZERO_OK);
    uint32_t early_total = 0;
    for (int m = 0; b && m < 2 * gas; m++) {
        int reducing = mode == ZERO_BUCKETS_SCATTER || (m % gas) == gas - 1;
        e->micro_step = (uint32_t)(m % gas); /* what the core's zero_step would have set */
        if (short_spec) {
            micro_step(e, b, &r, 0, what); /* never called: checks calls == 0 */
        } else {
            micro_step(e, b, &r, reducing, what);
            early_total += r.early_calls;
        }
        memset(flat, 0, L->flat_numel * sizeof(float)); /* the plugin clears after its step */
        memset(part, 0, L->part_numel * sizeof(float));
    }
    if (!short_spec && mode == ZERO_BUCKETS_SCATTER && overlap && world_ > 1)
        CHECK(early_total > 0, "%s: no block was reported before buckets_flush", what);
    if (rank_ == 0)
        printf("%-44s %u buckets, %u blocks reported before flush\n", what, b ? zero__buckets_count(b) : 0,
               early_total);
    zero__buckets_destroy(b);
    e->micro_step = 0;
    zero_engine_destroy((zero_engine *)e);
    free(flat);
    free(part);
    free(r.snap);
    free(r.hits);
}

int main(int argc, char **argv) {
    check_mpi_init(&argc, &argv, &rank_, &world_);
    const int modes[3] = {ZERO_BUCKETS_ALLREDUCE, ZERO_BUCKETS_SCATTER_INPLACE, ZERO_BUCKETS_SCATTER};
    for (int m = 0; m < 3; m++)
        for (int ov = 0; ov <= 1; ov++)
            for (int gas = 1; gas <= 2; gas++) run_mode(modes[m], ov, gas, 0);
    run_mode(ZERO_BUCKETS_SCATTER, 1, 1, 1);
    return check_mpi_finish();
}
