/* fp32 <-> bf16 / fp16 conversions: hand-picked edge cases (RNE ties, NaN,
 * Inf, overflow, denormals, negative zero), exhaustive round trips of every
 * 16-bit pattern, and random fp32 inputs against a nearest-value reference
 * computed in double from the decoded 16-bit values.  Then zero__convert
 * and zero__add_into over arrays. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "optim.h"

static float f_of(uint32_t u) { return zero_bits_f32(u); }

#define BF(u32, want) CHECK(zero_f32_to_bf16(f_of(u32)) == (want), "bf16(0x%08x) = 0x%04x, want 0x%04x", \
                            (unsigned)(u32), (unsigned)zero_f32_to_bf16(f_of(u32)), (unsigned)(want))
#define HF(x, want) CHECK(zero_f32_to_f16(x) == (want), "f16(%a) = 0x%04x, want 0x%04x", (double)(x), \
                          (unsigned)zero_f32_to_f16(x), (unsigned)(want))

static int bf16_is_nan(uint16_t h) { return (h & 0x7f80) == 0x7f80 && (h & 0x7f); }
static int f16_is_nan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff); }

static void test_bf16_edges(void) {
    BF(0x3f800000u, 0x3f80);  /* 1.0 */
    BF(0x3f808000u, 0x3f80);  /* tie, even below: down */
    BF(0x3f818000u, 0x3f82);  /* tie, odd below: up */
    BF(0x3f808001u, 0x3f81);  /* above tie: up */
    BF(0x3f807fffu, 0x3f80);  /* below tie: down */
    BF(0x7f800000u, 0x7f80);  /* +Inf */
    BF(0xff800000u, 0xff80);  /* -Inf */
    BF(0x7f7fffffu, 0x7f80);  /* FLT_MAX rounds to Inf */
    BF(0x7f7f7fffu, 0x7f7f);  /* largest that stays finite */
    BF(0x80000000u, 0x8000);  /* -0 */
    BF(0x00000000u, 0x0000);
    BF(0x00000001u, 0x0000);  /* smallest denormal */
    BF(0x00008000u, 0x0000);  /* denormal tie to even */
    BF(0x00018000u, 0x0002);  /* denormal tie, odd: up */
    BF(0x007fffffu, 0x0080);  /* largest denormal rounds to smallest normal */
    BF(0x80008001u, 0x8001);  /* negative denormal */
    CHECK(bf16_is_nan(zero_f32_to_bf16(f_of(0x7fc00000u))), "qNaN stays NaN");
    CHECK(bf16_is_nan(zero_f32_to_bf16(f_of(0x7f800001u))), "sNaN with low payload stays NaN (not Inf)");
    CHECK(bf16_is_nan(zero_f32_to_bf16(f_of(0xffffffffu))), "negative NaN stays NaN");
    CHECK((zero_f32_to_bf16(f_of(0xffc00000u)) & 0x8000) != 0, "NaN keeps its sign");
}

static void test_f16_edges(void) {
    HF(1.0f, 0x3c00);
    HF(-2.0f, 0xc000);
    HF(65504.0f, 0x7bff);          /* largest half */
    HF(65519.99f, 0x7bff);         /* below the midpoint */
    HF(65520.0f, 0x7c00);          /* midpoint ties to even = Inf */
    HF(1e10f, 0x7c00);             /* overflow */
    HF(-1e10f, 0xfc00);
    HF(INFINITY, 0x7c00);
    HF(-INFINITY, 0xfc00);
    HF(-0.0f, 0x8000);
    HF(0.0f, 0x0000);
    HF(0x1p-24f, 0x0001);          /* smallest half subnormal */
    HF(0x1p-25f, 0x0000);          /* tie with zero: even */
    HF(0x1.000002p-25f, 0x0001);   /* just above: up */
    HF(0x1.8p-24f, 0x0002);        /* 1.5 ulp: tie, odd below: up to 2 */
    HF(0x1.4p-23f, 0x0002);        /* 2.5 ulp: tie, even below: down to 2 */
    HF(0x1p-14f, 0x0400);          /* smallest normal */
    HF(0x1.ffcp-15f, 0x0400);      /* 1023.5 ulp: tie rounds to even = smallest normal */
    HF(0x1.ff8p-15f, 0x03ff);      /* largest subnormal, exact */
    HF(0x1.ff4p-15f, 0x03fe);      /* 1022.5 ulp: tie, even below */
    HF(1.0f + 0x1p-11f, 0x3c00);   /* tie, even below */
    HF(1.0f + 3 * 0x1p-11f, 0x3c02); /* tie, odd below */
    HF(1.0f + 0x1p-11f + 0x1p-20f, 0x3c01);
    HF(0x1p-30f, 0x0000);          /* fp32 normal, far below half range */
    HF(f_of(0x00000001u), 0x0000); /* fp32 denormal */
    HF(-0x1p-24f, 0x8001);
    CHECK(f16_is_nan(zero_f32_to_f16(NAN)), "NaN stays NaN");
    CHECK(f16_is_nan(zero_f32_to_f16(f_of(0x7f800001u))), "sNaN with low payload stays NaN");
    CHECK(zero_f32_to_f16(f_of(0x7f800001u)) == 0x7e00, "sNaN is quieted like F16C");
    CHECK((zero_f32_to_f16(f_of(0xffc00000u)) & 0x8000) != 0, "NaN keeps its sign");
}

/* Every 16-bit pattern: decode, encode, get it back (NaNs come back as
 * NaNs, quieted).  The decode is checked against ldexp arithmetic. */
static void test_roundtrip_exhaustive(void) {
    int bad_bf = 0, bad_h = 0, bad_dec = 0;
    for (uint32_t h = 0; h < 65536; ++h) {
        uint16_t b = (uint16_t)h;
        float fb = zero_bf16_to_f32(b);
        uint16_t back = zero_f32_to_bf16(fb);
        if (bf16_is_nan(b) ? !bf16_is_nan(back) : back != b) ++bad_bf;

        float fh = zero_f16_to_f32(b);
        back = zero_f32_to_f16(fh);
        if (f16_is_nan(b) ? !f16_is_nan(back) : back != b) ++bad_h;
        /* independent decode */
        int e = (h >> 10) & 0x1f, m = h & 0x3ff;
        double ref = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
        if (h & 0x8000) ref = -ref;
        if (isnan(ref) ? !isnan(fh) : ((double)fh != ref || !signbit(fh) != !signbit(ref))) ++bad_dec;
    }
    CHECK_EQ_INT(bad_bf, 0);
    CHECK_EQ_INT(bad_h, 0);
    CHECK_EQ_INT(bad_dec, 0);
}

/* Nearest representable value, ties to even, chosen among the two
 * neighbours in double (exact for these magnitudes). */
static uint16_t ref_round(double x, uint16_t lo, uint16_t hi, float (*dec)(uint16_t)) {
    double dl = fabs(x - dec(lo)), dh = fabs(dec(hi) - x);
    if (dl < dh) return lo;
    if (dh < dl) return hi;
    return (lo & 1) ? hi : lo;
}

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static uint32_t rnd32(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 32);
}

static void test_random_vs_reference(void) {
    int bad_bf = 0, bad_h = 0;
    for (int k = 0; k < 400000; ++k) {
        uint32_t u = rnd32();
        float x = f_of(u);
        if (isnan(x)) continue;
        /* bf16: the neighbours are the truncation and the next pattern up */
        if (!isinf(x) && fabsf(x) <= 0x1.fefffep127f) {
            uint16_t t = (uint16_t)(u >> 16);
            if (ref_round(fabs((double)x), t & 0x7fff, (uint16_t)((t & 0x7fff) + 1), zero_bf16_to_f32) !=
                (zero_f32_to_bf16(x) & 0x7fff))
                ++bad_bf;
        }
        /* fp16: put the random input into the half range (2^-26 .. 2^17) */
        uint32_t uh = (u & 0x807fffffu) | ((uint32_t)(101 + (u >> 23) % 43) << 23);
        float y = f_of(uh);
        double ay = fabs((double)y);
        uint16_t want;
        if (ay >= 65520.0) {
            want = 0x7c00;
        } else {
            /* largest half <= ay by search over the monotone positive patterns */
            uint16_t lo = 0, hi = 0x7bff;
            while (lo < hi) {
                uint16_t mid = (uint16_t)((lo + hi + 1) / 2);
                if (zero_f16_to_f32(mid) <= ay)
                    lo = mid;
                else
                    hi = (uint16_t)(mid - 1);
            }
            want = (double)zero_f16_to_f32(lo) == ay ? lo : ref_round(ay, lo, (uint16_t)(lo + 1), zero_f16_to_f32);
        }
        if ((zero_f32_to_f16(y) & 0x7fff) != want || ((zero_f32_to_f16(y) & 0x8000) != 0) != !!signbit(y))
            ++bad_h;
    }
    CHECK_EQ_INT(bad_bf, 0);
    CHECK_EQ_INT(bad_h, 0);
}

static void test_array_ops(void) {
    enum { N = 1003 };
    float src[N], back[N], acc[N];
    uint16_t b[N], h[N], h2[N];
    for (int i = 0; i < N; ++i) src[i] = (float)(i - 500) * 0.37f;
    zero__convert(b, ZERO_DTYPE_BF16, src, ZERO_DTYPE_F32, N);
    zero__convert(h, ZERO_DTYPE_F16, src, ZERO_DTYPE_F32, N);
    int bad = 0;
    for (int i = 0; i < N; ++i) bad += b[i] != zero_f32_to_bf16(src[i]) || h[i] != zero_f32_to_f16(src[i]);
    CHECK_EQ_INT(bad, 0);
    zero__convert(back, ZERO_DTYPE_F32, h, ZERO_DTYPE_F16, N);
    bad = 0;
    for (int i = 0; i < N; ++i) bad += back[i] != zero_f16_to_f32(h[i]);
    CHECK_EQ_INT(bad, 0);
    /* bf16 -> f16 rounds once, from the exact fp32 value */
    zero__convert(h2, ZERO_DTYPE_F16, b, ZERO_DTYPE_BF16, N);
    bad = 0;
    for (int i = 0; i < N; ++i) bad += h2[i] != zero_f32_to_f16(zero_bf16_to_f32(b[i]));
    CHECK_EQ_INT(bad, 0);
    /* same dtype is a copy, in place is a no-op */
    zero__convert(back, ZERO_DTYPE_F32, src, ZERO_DTYPE_F32, N);
    CHECK(memcmp(back, src, sizeof(src)) == 0, "f32 copy");
    zero__convert(back, ZERO_DTYPE_F32, back, ZERO_DTYPE_F32, N);
    CHECK(memcmp(back, src, sizeof(src)) == 0, "in-place copy");
    /* add_into from each dtype */
    for (int i = 0; i < N; ++i) acc[i] = 1.0f;
    zero__add_into(acc, src, ZERO_DTYPE_F32, N);
    zero__add_into(acc, b, ZERO_DTYPE_BF16, N);
    zero__add_into(acc, h, ZERO_DTYPE_F16, N);
    bad = 0;
    for (int i = 0; i < N; ++i) {
        float want = ((1.0f + src[i]) + zero_bf16_to_f32(b[i])) + zero_f16_to_f32(h[i]);
        bad += acc[i] != want;
    }
    CHECK_EQ_INT(bad, 0);
    /* unknown dtype writes nothing */
    float keep = 5.0f;
    zero__add_into(&keep, src, 99, 1);
    zero__convert(&keep, 99, src, ZERO_DTYPE_F32, 1);
    CHECK(keep == 5.0f, "unknown dtype ignored");
}

/* The array routines (whichever SIMD variant is active: ZERO_SIMD) against
 * the per-element functions, bit for bit, NaN payloads included: every
 * 16-bit pattern decoded, and random plus edge fp32 patterns encoded. */
static void test_arrays_bitwise(void) {
    enum { N = 65536 };
    static uint16_t h[N], b16[N], h16[N], ref16[N];
    static float f[N], acc[N], src[N];
    for (uint32_t i = 0; i < N; ++i) h[i] = (uint16_t)i;
    size_t bad = 0;
    zero__convert(f, ZERO_DTYPE_F32, h, ZERO_DTYPE_F16, N);
    for (uint32_t i = 0; i < N; ++i) bad += zero_f32_bits(f[i]) != zero_f32_bits(zero_f16_to_f32(h[i]));
    CHECK(bad == 0, "f16 -> f32 array: %zu mismatches", bad);
    bad = 0;
    zero__convert(f, ZERO_DTYPE_F32, h, ZERO_DTYPE_BF16, N);
    for (uint32_t i = 0; i < N; ++i) bad += zero_f32_bits(f[i]) != zero_f32_bits(zero_bf16_to_f32(h[i]));
    CHECK(bad == 0, "bf16 -> f32 array: %zu mismatches", bad);
    /* add_into from every pattern, onto a mix of values */
    const zero_dtype d16[2] = {ZERO_DTYPE_F16, ZERO_DTYPE_BF16};
    for (int d = 0; d < 2; ++d) {
        for (uint32_t i = 0; i < N; ++i) acc[i] = (float)((int)(i % 7) - 3) * 0.25f;
        zero__add_into(acc, h, d16[d], N);
        bad = 0;
        for (uint32_t i = 0; i < N; ++i) {
            float want = (float)((int)(i % 7) - 3) * 0.25f + (d16[d] == ZERO_DTYPE_F16 ? zero_f16_to_f32(h[i])
                                                                                        : zero_bf16_to_f32(h[i]));
            bad += isnan(want) ? !isnan(acc[i]) : zero_f32_bits(acc[i]) != zero_f32_bits(want);
        }
        CHECK(bad == 0, "add_into from dtype %d: %zu mismatches", (int)d16[d], bad);
    }
    /* encode: random bit patterns with exponents around both 16-bit ranges,
     * exact ties, NaNs (signalling and quiet), Infs, denormals */
    for (uint32_t i = 0; i < N; ++i) {
        uint32_t r = rnd32();
        uint32_t u;
        switch (i % 8) {
        case 0: u = r; break;
        case 1: u = (r & 0x807fffffu) | ((100u + (r >> 8) % 50u) << 23); break; /* fp16 range and edges */
        case 2: u = (r & 0xffff0000u) | 0x8000u; break;                         /* bf16 ties */
        case 3: u = (((r & 0x807fffffu) | ((100u + (r >> 8) % 50u) << 23)) & 0xffffe000u) | 0x1000u; break; /* fp16 ties */
        case 4: u = (r & 0x807fffffu) | 0x7f800000u; break;                     /* Inf / NaN of all kinds */
        case 5: u = r & 0x807fffffu; break;                                     /* denormals */
        case 6: u = 0x33000000u + (r % 64u) * 0x00400000u; break;               /* fp16 subnormal edges */
        default: u = 0x477fe000u + (r % 0x2000u) + (r & 0x80000000u); break;    /* fp16 overflow edge */
        }
        src[i] = zero_bits_f32(u);
    }
    zero__convert(h16, ZERO_DTYPE_F16, src, ZERO_DTYPE_F32, N);
    zero__convert(b16, ZERO_DTYPE_BF16, src, ZERO_DTYPE_F32, N);
    bad = 0;
    for (uint32_t i = 0; i < N; ++i) bad += h16[i] != zero_f32_to_f16(src[i]);
    CHECK(bad == 0, "f32 -> f16 array: %zu mismatches", bad);
    bad = 0;
    for (uint32_t i = 0; i < N; ++i) bad += b16[i] != zero_f32_to_bf16(src[i]);
    CHECK(bad == 0, "f32 -> bf16 array: %zu mismatches", bad);
    /* bf16 -> f16 through the bounded fp32 chunks */
    zero__convert(ref16, ZERO_DTYPE_F16, b16, ZERO_DTYPE_BF16, N);
    bad = 0;
    for (uint32_t i = 0; i < N; ++i) bad += ref16[i] != zero_f32_to_f16(zero_bf16_to_f32(b16[i]));
    CHECK(bad == 0, "bf16 -> f16 array: %zu mismatches", bad);
}

int main(int argc, char **argv) {
    /* optional: force a kernel variant (ZERO_SIMD) for the array routines */
    if (argc > 1) setenv("ZERO_SIMD", argv[1], 1);
    test_arrays_bitwise();
    test_bf16_edges();
    test_f16_edges();
    test_roundtrip_exhaustive();
    test_random_vs_reference();
    test_array_ops();
    return check_finish();
}
