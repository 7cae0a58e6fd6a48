/* Partition layout unit tests: hand-computed layouts for the tricky shapes,
 * then a brute-force per-element oracle over many random layouts. */
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "layout.h"

/* Owner rank of flat element x, computed element-by-element from the group
 * table (the oracle for zero__layout_owned). */
static int oracle_owner(const zero_layout *l, uint64_t x, uint64_t *part_pos) {
    for (uint32_t g = 0; g < l->ngroups; ++g) {
        const zero_layout_group *grp = &l->groups[g];
        if (x >= grp->flat_begin && x < grp->flat_begin + grp->numel) {
            uint64_t off = x - grp->flat_begin;
            int r = (int)(off / grp->part_numel);
            *part_pos = grp->part_offset + off % grp->part_numel;
            return r;
        }
    }
    return -1;
}

static void test_single_group_straddling(void) {
    /* world 4, align 4: sizes 10, 3, 7 -> offsets 0, 12, 16; used 23; padded to 32 */
    zero__layout_input in[3] = {{10, 0}, {3, 0}, {7, 0}};
    zero__layout L;
    CHECK_EQ_INT(zero__layout_build(&L, in, 3, 4, 1, 4), 0);
    const zero_layout *l = &L.view;
    CHECK_EQ_INT(l->struct_size, sizeof(zero_layout));
    CHECK_EQ_INT(l->world, 4);
    CHECK_EQ_INT(l->rank, 1);
    CHECK_EQ_INT(l->ngroups, 1);
    CHECK_EQ_INT(l->nparams, 3);
    CHECK_EQ_INT(L.param_offset[0], 0);
    CHECK_EQ_INT(L.param_offset[1], 12);
    CHECK_EQ_INT(L.param_offset[2], 16);
    CHECK_EQ_INT(l->groups[0].used, 23);
    CHECK_EQ_INT(l->groups[0].numel, 32);
    CHECK_EQ_INT(l->groups[0].part_numel, 8);
    CHECK_EQ_INT(l->flat_numel, 32);
    CHECK_EQ_INT(l->part_numel, 8);
    /* param 0 = [0,10) straddles ranks 0 and 1 */
    zero_owned_range r[4];
    CHECK_EQ_INT(zero__layout_owned(l, 0, 0, 10, r, 4), 1);
    CHECK(r[0].flat_lo == 0 && r[0].flat_hi == 8 && r[0].part_lo == 0, "rank0 piece");
    CHECK_EQ_INT(zero__layout_owned(l, 1, 0, 10, r, 4), 1);
    CHECK(r[0].flat_lo == 8 && r[0].flat_hi == 10 && r[0].part_lo == 0, "rank1 piece");
    CHECK_EQ_INT(zero__layout_owned(l, 2, 0, 10, r, 4), 0);
    /* param 2 = [16,23) is all rank 2's, ending inside the padding */
    CHECK_EQ_INT(zero__layout_owned(l, 2, 16, 23, r, 4), 1);
    CHECK(r[0].flat_lo == 16 && r[0].flat_hi == 23 && r[0].part_lo == 0, "rank2 piece");
    CHECK_EQ_INT(zero__layout_owned(l, 3, 16, 23, r, 4), 0);
    /* empty and reversed ranges, bad rank */
    CHECK_EQ_INT(zero__layout_owned(l, 0, 5, 5, r, 4), 0);
    CHECK_EQ_INT(zero__layout_owned(l, 0, 6, 5, r, 4), 0);
    CHECK_EQ_INT(zero__layout_owned(l, 4, 0, 32, r, 4), 0);
    zero__layout_free(&L);
}

static void test_world_larger_than_numel(void) {
    zero__layout_input in[1] = {{3, 7}};
    zero__layout L;
    CHECK_EQ_INT(zero__layout_build(&L, in, 1, 8, 7, 1), 0);
    const zero_layout *l = &L.view;
    CHECK_EQ_INT(l->groups[0].numel, 8);
    CHECK_EQ_INT(l->groups[0].part_numel, 1);
    CHECK_EQ_INT(l->groups[0].group_id, 7);
    zero_owned_range r[2];
    for (uint32_t rank = 0; rank < 8; ++rank)
        CHECK_EQ_INT(zero__layout_owned(l, rank, 0, 3, r, 2), rank < 3 ? 1 : 0);
    /* ranks past the data still own a padding element each: equal shares */
    CHECK_EQ_INT(zero__layout_owned(l, 7, 0, 8, r, 2), 1);
    CHECK(r[0].flat_lo == 7 && r[0].part_lo == 0, "padding share");
    zero__layout_free(&L);
}

static void test_interleaved_groups(void) {
    /* groups 0,1,0,1,2 sizes 5,6,7,8,9; world 3, align 2 (quantum 6) */
    zero__layout_input in[5] = {{5, 0}, {6, 1}, {7, 0}, {8, 1}, {9, 2}};
    zero__layout L;
    CHECK_EQ_INT(zero__layout_build(&L, in, 5, 3, 0, 2), 0);
    const zero_layout *l = &L.view;
    CHECK_EQ_INT(l->ngroups, 3);
    const uint64_t want_off[5] = {0, 18, 6, 24, 36};
    for (int i = 0; i < 5; ++i) CHECK(L.param_offset[i] == want_off[i], "param %d offset %llu", i,
                                       (unsigned long long)L.param_offset[i]);
    const uint32_t want_order[5] = {0, 2, 1, 3, 4};
    for (int i = 0; i < 5; ++i) CHECK_EQ_INT(l->param_order[i], want_order[i]);
    const uint64_t fb[3] = {0, 18, 36}, num[3] = {18, 18, 12}, used[3] = {13, 14, 9};
    const uint64_t pn[3] = {6, 6, 4}, po[3] = {0, 6, 12}, fp[3] = {0, 2, 4}, np[3] = {2, 2, 1};
    for (int g = 0; g < 3; ++g) {
        CHECK_EQ_INT(l->groups[g].flat_begin, fb[g]);
        CHECK_EQ_INT(l->groups[g].numel, num[g]);
        CHECK_EQ_INT(l->groups[g].used, used[g]);
        CHECK_EQ_INT(l->groups[g].part_numel, pn[g]);
        CHECK_EQ_INT(l->groups[g].part_offset, po[g]);
        CHECK_EQ_INT(l->groups[g].first_param, fp[g]);
        CHECK_EQ_INT(l->groups[g].nparams, np[g]);
        CHECK_EQ_INT(l->groups[g].group_id, g);
    }
    CHECK_EQ_INT(l->flat_numel, 48);
    CHECK_EQ_INT(l->part_numel, 16);
    /* a range across all groups gives one piece per group */
    zero_owned_range r[3];
    CHECK_EQ_INT(zero__layout_owned(l, 1, 0, 48, r, 3), 3);
    CHECK(r[0].flat_lo == 6 && r[0].flat_hi == 12 && r[0].part_lo == 0, "g0 piece");
    CHECK(r[1].flat_lo == 24 && r[1].flat_hi == 30 && r[1].part_lo == 6, "g1 piece");
    CHECK(r[2].flat_lo == 40 && r[2].flat_hi == 44 && r[2].part_lo == 12, "g2 piece");
    /* cap truncates */
    CHECK_EQ_INT(zero__layout_owned(l, 1, 0, 48, r, 2), 2);
    /* group_of at the boundaries */
    CHECK_EQ_INT(zero__layout_group_of(l, 0), 0);
    CHECK_EQ_INT(zero__layout_group_of(l, 17), 0);
    CHECK_EQ_INT(zero__layout_group_of(l, 18), 1);
    CHECK_EQ_INT(zero__layout_group_of(l, 35), 1);
    CHECK_EQ_INT(zero__layout_group_of(l, 36), 2);
    CHECK_EQ_INT(zero__layout_group_of(l, 47), 2);
    CHECK_EQ_INT(zero__layout_group_of(l, 48), -1);
    zero__layout_free(&L);
}

static void test_tiny_and_empty(void) {
    /* 9 one-element params with align 4: each starts on its own 4-aligned slot */
    zero__layout_input in[11];
    for (int i = 0; i < 9; ++i) in[i] = (zero__layout_input){1, 0};
    /* a group made only of zero-size params, then a real one after it */
    in[9] = (zero__layout_input){0, 5};
    in[10] = (zero__layout_input){2, 6};
    zero__layout L;
    CHECK_EQ_INT(zero__layout_build(&L, in, 11, 2, 0, 4), 0);
    const zero_layout *l = &L.view;
    for (int i = 0; i < 9; ++i) CHECK_EQ_INT(L.param_offset[i], 4 * i);
    CHECK_EQ_INT(l->groups[0].used, 33);
    CHECK_EQ_INT(l->groups[0].numel, 40);
    CHECK_EQ_INT(l->groups[1].numel, 0);
    CHECK_EQ_INT(l->groups[1].part_numel, 0);
    CHECK_EQ_INT(l->groups[2].flat_begin, 40);
    CHECK_EQ_INT(l->groups[2].numel, 8);
    /* the empty group never contains anything */
    CHECK_EQ_INT(zero__layout_group_of(l, 40), 2);
    CHECK_EQ_INT(zero__layout_group_of(l, 39), 0);
    zero__layout_free(&L);

    /* no params at all */
    CHECK_EQ_INT(zero__layout_build(&L, NULL, 0, 4, 3, 8), 0);
    CHECK_EQ_INT(L.view.flat_numel, 0);
    CHECK_EQ_INT(L.view.ngroups, 0);
    CHECK_EQ_INT(zero__layout_group_of(&L.view, 0), -1);
    zero__layout_free(&L);
}

static void test_bad_input(void) {
    zero__layout_input in[1] = {{4, 0}};
    zero__layout L;
    CHECK_EQ_INT(zero__layout_build(&L, in, 1, 0, 0, 1), -1);  /* world 0 */
    CHECK_EQ_INT(zero__layout_build(&L, in, 1, 2, 2, 1), -1);  /* rank >= world */
    CHECK_EQ_INT(zero__layout_build(&L, in, 1, 2, 0, 3), -1);  /* align not a power of two */
    CHECK_EQ_INT(zero__layout_build(&L, in, 1, 2, 0, 0), -1);  /* align 0 */
    zero__layout_input huge[2] = {{UINT64_MAX - 10, 0}, {100, 0}};
    CHECK_EQ_INT(zero__layout_build(&L, huge, 2, 2, 0, 16), -1); /* overflow */
    zero__layout_free(&L); /* safe after a failed build */
}

/* Random layouts checked element by element against the oracle. */
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(uint64_t n) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state % n;
}

static void test_random_against_oracle(void) {
    int bad = 0;
    for (int trial = 0; trial < 300 && bad < 5; ++trial) {
        uint32_t np = (uint32_t)rnd(12);
        zero__layout_input in[12];
        for (uint32_t i = 0; i < np; ++i) {
            in[i].numel = rnd(4) == 0 ? rnd(3) : rnd(100);
            in[i].group = (int32_t)rnd(3) * 10;
        }
        uint32_t world = 1 + (uint32_t)rnd(7);
        uint64_t align = 1ull << rnd(4);
        zero__layout L;
        /* a third of the trials with stripes (round_robin_gradients): every
         * property below still holds, group by layout group */
        const int striped = rnd(3) == 0;
        const uint64_t req = rnd(200);
        if (zero__layout_build_run(&L, in, np, world, (uint32_t)rnd(world), align, striped, req) != 0) {
            CHECK(0, "build failed in trial %d", trial);
            ++bad;
            continue;
        }
        const zero_layout *l = &L.view;
        /* params: aligned, inside their group's used range, no overlaps */
        for (uint32_t k = 0; k < np; ++k) {
            uint32_t i = l->param_order[k];
            int g = zero__layout_group_of(l, L.param_offset[i]);
            if (in[i].numel > 0) {
                if (g < 0 || l->groups[g].group_id != in[i].group) ++bad;
                if (g >= 0 && L.param_offset[i] + in[i].numel > l->groups[g].flat_begin + l->groups[g].used) ++bad;
            }
            if (L.param_offset[i] % align) ++bad;
            if (k > 0) {
                uint32_t j = l->param_order[k - 1];
                if (L.param_offset[j] + in[j].numel > L.param_offset[i]) ++bad;
                /* registration order within a group */
                if (in[j].group == in[i].group && j > i) ++bad;
            }
        }
        uint64_t sum_part = 0;
        for (uint32_t g = 0; g < l->ngroups; ++g) {
            if (l->groups[g].numel % (world * align)) ++bad;
            if (l->groups[g].part_numel * world != l->groups[g].numel) ++bad;
            if (l->groups[g].part_offset != sum_part) ++bad;
            sum_part += l->groups[g].part_numel;
        }
        if (sum_part != l->part_numel) ++bad;
        /* owned ranges of a random window, every rank, vs the element oracle */
        if (l->flat_numel > 0) {
            uint64_t lo = rnd(l->flat_numel), hi = lo + 1 + rnd(l->flat_numel - lo);
            uint64_t covered = 0;
            for (uint32_t rank = 0; rank < world; ++rank) {
                zero_owned_range r[16];
                uint32_t n = zero__layout_owned(l, rank, lo, hi, r, 16);
                if (n > l->ngroups) ++bad;
                for (uint32_t k = 0; k < n; ++k) {
                    for (uint64_t x = r[k].flat_lo; x < r[k].flat_hi; ++x) {
                        uint64_t pp = 0;
                        if (x < lo || x >= hi) ++bad;
                        if (oracle_owner(l, x, &pp) != (int)rank) ++bad;
                        if (pp != r[k].part_lo + (x - r[k].flat_lo)) ++bad;
                    }
                    covered += r[k].flat_hi - r[k].flat_lo;
                }
            }
            if (covered != hi - lo) ++bad; /* every element owned by exactly one rank */
        }
        CHECK(bad == 0, "trial %d: %d mismatches (np=%u world=%u align=%llu)", trial, bad, np, world,
              (unsigned long long)align);
        zero__layout_free(&L);
    }
}

/* Stripes (round_robin_gradients): runs of whole params of one param group,
 * cut from the top at most `stripe` aligned elements (one param larger is a
 * stripe of its own), the same runs at every world size, each a layout group
 * shared equally. */
static void test_stripes(void) {
    /* group 0: 10, 3, 7, 5, 20; group 1: 6, 6; align 4 -> aligned 12, 4, 8, 8, 20 | 8, 8 */
    zero__layout_input in[7] = {{10, 0}, {3, 0}, {6, 1}, {7, 0}, {5, 0}, {6, 1}, {20, 0}};
    const uint64_t T = zero__layout_stripe_numel(in, 7, 4, 16);
    CHECK_EQ_INT(T, 20); /* the request 16 < largest aligned param (20): floor; flat/8 = 68/8 = 8 */
    CHECK_EQ_INT(zero__layout_stripe_numel(in, 7, 4, 0), 20);
    uint8_t st[7];
    zero__layout_mark_stripes(in, 7, 4, 16, st);
    /* group 0 from the top: 20 alone (> 16); 8+8 = 16; 4 then 12 would be 16: 4+12 = 16 fits */
    const uint8_t want[7] = {0, 0, 0, 1, 0, 0, 1};
    for (int i = 0; i < 7; ++i) CHECK(st[i] == want[i], "stripe start of param %d: %d, want %d", i, st[i], want[i]);
    uint32_t first_ng = 0;
    for (uint32_t world = 1; world <= 9; ++world) {
        zero__layout L;
        CHECK_EQ_INT(zero__layout_build_run(&L, in, 7, world, 0, 4, 1, 16), 0);
        const zero_layout *l = &L.view;
        if (world == 1) first_ng = l->ngroups;
        CHECK_EQ_INT(l->ngroups, first_ng); /* the same stripes at every world size */
        /* the run's stripe is 20 (floor): from the top 20 | 8+8+4 = 20 | 12 */
        CHECK_EQ_INT(l->ngroups, 4);        /* {10} {3,7,5} {20} | {6,6} */
        CHECK_EQ_INT(l->groups[0].nparams, 1);
        CHECK_EQ_INT(l->groups[1].nparams, 3);
        CHECK_EQ_INT(l->groups[2].nparams, 1);
        CHECK_EQ_INT(l->groups[3].group_id, 1);
        for (uint32_t g = 0; g < l->ngroups; ++g) {
            CHECK_EQ_INT(l->groups[g].numel % (world * 4), 0);
            CHECK_EQ_INT(l->groups[g].part_numel * world, l->groups[g].numel);
        }
        /* every rank owns a piece of every stripe: one owned range per group */
        zero_owned_range r[8];
        for (uint32_t rank = 0; rank < world; ++rank)
            CHECK_EQ_INT(zero__layout_owned(l, rank, 0, l->flat_numel, r, 8), l->ngroups);
        zero__layout_free(&L);
    }
    /* the tail: the lowest params of the last param group form a stripe of
     * at most stripe/4 (at least one param), launched last */
    zero__layout_input eight[8];
    for (int i = 0; i < 8; ++i) eight[i] = (zero__layout_input){4, 0};
    uint8_t st8[8];
    zero__layout_mark_stripes(eight, 8, 4, 8, st8);
    const uint8_t want8[8] = {0, 1, 1, 0, 1, 0, 1, 0}; /* {p0} {p1} {p2,p3} {p4,p5} {p6,p7} */
    for (int i = 0; i < 8; ++i) CHECK(st8[i] == want8[i], "tail: stripe start of param %d: %d, want %d", i, st8[i], want8[i]);
    /* stripe 0 (round_robin off): the contiguous layout */
    zero__layout_mark_stripes(in, 7, 4, 0, st);
    for (int i = 0; i < 7; ++i) CHECK_EQ_INT(st[i], 0);
}

int main(void) {
    test_stripes();
    test_single_group_straddling();
    test_world_larger_than_numel();
    test_interleaved_groups();
    test_tiny_and_empty();
    test_bad_input();
    test_random_against_oracle();
    return check_finish();
}
