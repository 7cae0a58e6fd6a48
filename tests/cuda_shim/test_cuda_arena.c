/* The device arena allocator (backends/device/cuda/cuda_arena.c) on host
 * memory: it never dereferences the memory it manages, so malloc'd regions
 * stand in for cudaMalloc'd ones. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_arena.h"
#include "check.h"

static uint64_t rng = 12345;
static uint32_t rnd(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng >> 33);
}

typedef struct live {
    uintptr_t p;
    size_t n;
} live;

static void test_basic(void) {
    CHECK(zero_cuda_arena_create(0) == NULL, "align 0 accepted");
    CHECK(zero_cuda_arena_create(48) == NULL, "non power of two accepted");
    zero_cuda_arena *a = zero_cuda_arena_create(256);
    CHECK(zero_cuda_arena_alloc(a, 16) == NULL, "allocation without a region");
    char *mem = malloc(1 << 20);
    CHECK_EQ_INT(zero_cuda_arena_add_region(a, mem + 3, (1 << 20) - 3), 0); /* misaligned base is aligned up */
    CHECK_EQ_INT(zero_cuda_arena_add_region(a, mem + 4096, 4096), -1);      /* overlap refused */
    void *p = zero_cuda_arena_alloc(a, 1);
    CHECK(p && ((uintptr_t)p % 256) == 0, "block %p not 256-aligned", p);
    CHECK_EQ_INT(zero_cuda_arena_block_size(a, p), 256);
    CHECK(zero_cuda_arena_owns(a, p), "own block not owned");
    int x;
    CHECK(!zero_cuda_arena_owns(a, &x), "stack address owned");
    CHECK_EQ_INT(zero_cuda_arena_free(a, &x), -1);
    CHECK_EQ_INT(zero_cuda_arena_free(a, (char *)p + 256), -1); /* not a block start */
    CHECK_EQ_INT(zero_cuda_arena_free(a, p), 0);
    CHECK_EQ_INT(zero_cuda_arena_free(a, p), -1); /* double free detected */
    CHECK_EQ_INT(zero_cuda_arena_free(a, NULL), 0);
    zero_cuda_arena_stats s;
    zero_cuda_arena_stats_get(a, &s);
    CHECK_EQ_INT(s.used, 0);
    CHECK_EQ_INT(s.peak_used, 256);
    CHECK(s.largest_free >= (1 << 20) - 512, "free space not coalesced back: %zu", s.largest_free);
    CHECK(zero_cuda_arena_alloc(a, (size_t)2 << 20) == NULL, "allocation larger than the arena");
    zero_cuda_arena_destroy(a);
    free(mem);
}

/* Best fit: a small request goes to the smallest hole, keeping the big one. */
static void test_best_fit(void) {
    zero_cuda_arena *a = zero_cuda_arena_create(256);
    char *mem = aligned_alloc(256, 64 * 256);
    zero_cuda_arena_add_region(a, mem, 64 * 256);
    void *b[6];
    size_t sz[6] = {8, 1, 8, 2, 8, 37}; /* in 256-byte units; fills the region exactly */
    for (int i = 0; i < 6; ++i) b[i] = zero_cuda_arena_alloc(a, sz[i] * 256);
    CHECK(zero_cuda_arena_alloc(a, 1) == NULL, "region should be full");
    zero_cuda_arena_free(a, b[1]); /* hole of 1 */
    zero_cuda_arena_free(a, b[3]); /* hole of 2 */
    zero_cuda_arena_free(a, b[5]); /* hole of 37 at the end */
    void *p = zero_cuda_arena_alloc(a, 2 * 256);
    CHECK(p == b[3], "2-unit request not placed in the 2-unit hole");
    void *q = zero_cuda_arena_alloc(a, 256);
    CHECK(q == b[1], "1-unit request not placed in the 1-unit hole");
    zero_cuda_arena_stats s;
    zero_cuda_arena_stats_get(a, &s);
    CHECK_EQ_INT(s.largest_free, 37 * 256);
    zero_cuda_arena_destroy(a);
    free(mem);
}

/* Random alloc/free against a shadow list: blocks never overlap, stay in
 * their regions, and everything coalesces back (per region) at the end. */
static void test_random(void) {
    zero_cuda_arena *a = zero_cuda_arena_create(256);
    enum { R = 3, RB = 1 << 18 };
    char *regions[R];
    for (int r = 0; r < R; ++r) {
        regions[r] = malloc(RB);
        CHECK_EQ_INT(zero_cuda_arena_add_region(a, regions[r], RB), 0);
    }
    live lv[512];
    int nlive = 0, overlaps = 0, outside = 0, fails = 0;
    for (int it = 0; it < 20000; ++it) {
        if (nlive < 512 && (rnd() % 3 != 0 || nlive == 0)) {
            size_t n = 1 + rnd() % 9000;
            void *p = zero_cuda_arena_alloc(a, n);
            if (!p) {
                ++fails;
                continue;
            }
            uintptr_t q = (uintptr_t)p;
            int in = 0;
            for (int r = 0; r < R; ++r)
                if (q >= (uintptr_t)regions[r] && q + n <= (uintptr_t)regions[r] + RB) in = 1;
            outside += !in;
            for (int j = 0; j < nlive; ++j)
                if (q < lv[j].p + lv[j].n && lv[j].p < q + n) ++overlaps;
            lv[nlive++] = (live){q, n};
        } else {
            int j = (int)(rnd() % (uint32_t)nlive);
            CHECK_EQ_INT(zero_cuda_arena_free(a, (void *)lv[j].p), 0);
            lv[j] = lv[--nlive];
        }
    }
    CHECK_EQ_INT(overlaps, 0);
    CHECK_EQ_INT(outside, 0);
    CHECK(fails < 20000, "every allocation failed");
    for (int j = 0; j < nlive; ++j) zero_cuda_arena_free(a, (void *)lv[j].p);
    zero_cuda_arena_stats s;
    zero_cuda_arena_stats_get(a, &s);
    CHECK_EQ_INT(s.used, 0);
    CHECK_EQ_INT(s.live_blocks, 0);
    CHECK_EQ_INT(s.regions, R);
    CHECK(s.largest_free <= RB && s.largest_free >= RB - 256, "regions did not coalesce to whole (%zu)", s.largest_free);
    /* Three free regions, none merged with another: three region-sized blocks fit. */
    void *p[R];
    for (int r = 0; r < R; ++r) p[r] = zero_cuda_arena_alloc(a, s.largest_free - 256);
    for (int r = 0; r < R; ++r) CHECK(p[r] != NULL, "region %d not whole again", r);
    zero_cuda_arena_destroy(a);
    for (int r = 0; r < R; ++r) free(regions[r]);
}

int main(void) {
    test_basic();
    test_best_fit();
    test_random();
    return check_finish();
}
