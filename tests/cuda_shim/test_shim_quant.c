/* The quantization kernels' bodies (kernels/cuda/zero_cuda_quant_bodies.h,
 * launched through zero_cuda_quant_launchers.h as shipped), run on the CPU
 * under the launch shim, against the host path (core/quant.c) and against
 * an independent reference: the host code of libzero 1.6.0 before its math
 * moved to kernels/cpu/quant_math.h (isfinite, fabsf, lrintf), written out
 * here.  Bitwise: the scales and data bytes of every quantization, every
 * dequantized value (F32, BF16, F16), dequantize_add's sums and error
 * feedback's residuals.  Inputs: random magnitudes per block, both signs,
 * Inf and NaN blocks, all-zero blocks, odd n not a multiple of the block,
 * odd block sizes (int4 bytes straddling two blocks), one element, more
 * groups than the kernel's grid (grid-stride), and 16-bit dtypes.  Blocks
 * whose max|x| is below qmax / FLT_MAX (inv overflows to Inf) are checked
 * against the documented rule (0 -> code 0, +-max -> +-qmax) instead of the
 * old code, whose x86 lrintf gave LONG_MIN there. */
#include "cuda_shim.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "zero_cuda_quant_launchers.h"
#include "check.h"
#include "optim.h"
#include "quant.h"

static uint64_t rng = 0x853c49e6748fea9bull;
static uint32_t rnd32(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}
static float rndf(float lo, float hi) { return lo + (hi - lo) * (float)(rnd32() & 0xffffff) / 16777216.0f; }
static size_t dt_size(zero_dtype dt) { return dt == ZERO_DTYPE_F32 ? 4 : 2; }

/* ---- the 1.6.0 host code, verbatim in its arithmetic (F32 input) ---- */
static void ref_quantize(uint8_t *dst, const float *x, size_t n, int bits, size_t block) {
    const size_t nb = (n + block - 1) / block;
    float *scales = (float *)dst;
    uint8_t *data = dst + nb * sizeof(float);
    const float qmax = bits == 8 ? 127.0f : 7.0f;
    memset(data, 0, bits == 8 ? n : (n + 1) / 2);
    for (size_t b = 0; b < nb; b++) {
        const size_t lo = b * block, hi = lo + block < n ? lo + block : n;
        float maxabs = 0.0f;
        int finite = 1;
        for (size_t i = lo; i < hi; i++) {
            if (!isfinite(x[i])) finite = 0;
            else if (fabsf(x[i]) > maxabs) maxabs = fabsf(x[i]);
        }
        scales[b] = finite ? maxabs / qmax : NAN;
        const float inv = finite && maxabs > 0.0f ? qmax / maxabs : 0.0f;
        for (size_t e = lo; e < hi && finite; e++) {
            long q = lrintf(x[e] * inv);
            if (q > (long)qmax) q = (long)qmax;
            if (q < -(long)qmax) q = -(long)qmax;
            if (bits == 8) data[e] = (uint8_t)(int8_t)q;
            else data[e / 2] |= (uint8_t)(e % 2 ? (q & 0xF) << 4 : (q & 0xF));
        }
    }
}

/* n values of block-varying magnitude (1e-6..1e3); some blocks all zero,
 * some holding an Inf or a NaN (when `bad`). */
static float *make_input(size_t n, size_t block, int bad) {
    float *x = malloc((n ? n : 1) * sizeof *x);
    for (size_t lo = 0; lo < n; lo += block) {
        const size_t hi = lo + block < n ? lo + block : n;
        const uint32_t kind = rnd32() % 8;
        const float mag = powf(10.0f, rndf(-6.0f, 3.0f));
        for (size_t i = lo; i < hi; i++) x[i] = kind == 0 ? 0.0f : mag * rndf(-1.0f, 1.0f);
        if (bad && kind == 1) x[lo + rnd32() % (hi - lo)] = rnd32() % 2 ? INFINITY : -INFINITY;
        if (bad && kind == 2) x[lo + rnd32() % (hi - lo)] = NAN;
        if (kind == 3) x[lo + rnd32() % (hi - lo)] = -mag; /* exact max at -mag: code -qmax */
    }
    return x;
}

static int g_cases = 0;

/* One case: n elements of dt, bits, block. */
static void check_case(size_t n, zero_dtype dt, int bits, size_t block, int bad) {
    float *xf = make_input(n, block, bad);
    void *x = xf;
    if (dt != ZERO_DTYPE_F32) { /* the 16-bit input; the reference sees its exact fp32 values */
        x = malloc((n ? n : 1) * 2);
        zero__convert(x, dt, xf, ZERO_DTYPE_F32, n);
        zero__convert(xf, ZERO_DTYPE_F32, x, dt, n);
    }
    const size_t qb = zero__quant_bytes(n, bits, block);
    const size_t used = zero_quant_nblocks(n, block) * 4 + zero_quant_data_bytes(n, bits);
    uint8_t *host = malloc(qb), *shim = malloc(qb), *ref = malloc(qb);
    memset(host, 0xA5, qb), memset(shim, 0x5A, qb), memset(ref, 0xA5, qb); /* every used byte must be written */
    zero__quantize(host, x, dt, n, bits, block);
    CHECK_EQ_INT(zero_cuda_quantize(shim, x, dt, n, bits, block, NULL), ZERO_OK);
    ref_quantize(ref, xf, n, bits, block);
    CHECK(memcmp(host, shim, used) == 0, "quantize n=%zu dt %d int%d block %zu: shim kernel != host path", n, (int)dt,
          bits, block);
    CHECK(memcmp(host, ref, used) == 0, "quantize n=%zu dt %d int%d block %zu: host path != 1.6.0 code", n, (int)dt,
          bits, block);

    /* dequantize into every dtype, dequantize_add, residual */
    for (int odt = 0; odt < 3; ++odt) {
        void *a = malloc((n ? n : 1) * 4), *b = malloc((n ? n : 1) * 4);
        memset(a, 0x11, n * 4), memset(b, 0x22, n * 4);
        zero__dequantize(a, odt, host, n, bits, block);
        CHECK_EQ_INT(zero_cuda_dequantize(b, odt, host, n, bits, block, NULL), ZERO_OK);
        CHECK(memcmp(a, b, n * dt_size(odt)) == 0, "dequantize n=%zu int%d block %zu into dt %d differs", n, bits, block,
              odt);
        free(a), free(b);
    }
    float *acc_h = malloc((n ? n : 1) * 4), *acc_s = malloc((n ? n : 1) * 4);
    for (size_t i = 0; i < n; i++) acc_h[i] = acc_s[i] = rndf(-1.0f, 1.0f);
    zero__dequantize_add(acc_h, host, n, bits, block);
    CHECK_EQ_INT(zero_cuda_dequantize_add(acc_s, host, n, bits, block, NULL), ZERO_OK);
    CHECK(memcmp(acc_h, acc_s, n * 4) == 0, "dequantize_add n=%zu int%d block %zu differs", n, bits, block);
    /* residual: the host loop of reduce_scatter_quantized (x - dq, in slices) */
    if (dt == ZERO_DTYPE_F32) {
        float tmp[256];
        for (size_t lo = 0; lo < n; lo += 256) {
            const size_t k = n - lo < 256 ? n - lo : 256;
            zero__dequantize_range(tmp, host, n, lo, k, bits, block);
            for (size_t i = 0; i < k; i++) acc_h[lo + i] = zero_quant_sub(xf[lo + i], tmp[i]);
        }
        CHECK_EQ_INT(zero_cuda_quant_residual(acc_s, xf, host, n, bits, block, NULL), ZERO_OK);
        CHECK(memcmp(acc_h, acc_s, n * 4) == 0, "residual n=%zu int%d block %zu differs", n, bits, block);
    }
    free(acc_h), free(acc_s);
    free(host), free(shim), free(ref);
    if (x != xf) free(x);
    free(xf);
    ++g_cases;
}

/* max|x| below qmax / FLT_MAX: inv is Inf; the documented codes. */
static void check_tiny_block(void) {
    for (int bits = 8; bits >= 4; bits -= 4) {
        const float t = 1e-38f; /* a normal float; 127 / 1e-38 overflows */
        float x[5] = {0.0f, t, -t, t / 4, -0.0f};
        uint8_t q[64], s[64];
        memset(s, 0x77, sizeof s);
        zero__quantize(q, x, ZERO_DTYPE_F32, 5, bits, 5);
        CHECK_EQ_INT(zero_cuda_quantize(s, x, ZERO_DTYPE_F32, 5, bits, 5, NULL), ZERO_OK);
        CHECK(memcmp(q, s, 4 + zero_quant_data_bytes(5, bits)) == 0, "int%d tiny block: shim != host", bits);
        const int qmax = bits == 8 ? 127 : 7;
        const int want[5] = {0, qmax, -qmax, qmax, 0};
        for (int i = 0; i < 5; i++)
            CHECK(zero_quant_code_at(q + 4, (size_t)i, bits) == want[i], "int%d tiny block: element %d code %d, want %d",
                  bits, i, zero_quant_code_at(q + 4, (size_t)i, bits), want[i]);
    }
}

int main(void) {
    const size_t blocks[] = {1, 2, 3, 7, 64, 255, 256, 1000};
    const size_t ns[] = {1, 2, 5, 255, 256, 257, 1001, 4097, 20011};
    for (size_t bi = 0; bi < sizeof blocks / sizeof *blocks; ++bi)
        for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ++ni)
            for (int bits = 8; bits >= 4; bits -= 4)
                for (int dt = 0; dt < 3; ++dt) check_case(ns[ni], (zero_dtype)dt, bits, blocks[bi], ni % 2);
    /* more groups than the grid (65535 CUDA blocks): the group stride */
    check_case(70001, ZERO_DTYPE_F32, 8, 1, 1);
    check_case(140003, ZERO_DTYPE_BF16, 4, 1, 1);
    check_tiny_block();
    /* argument checks: nothing launched */
    uint8_t q[16];
    float f[1] = {1.0f};
    CHECK_EQ_INT(zero_cuda_quantize(q, f, ZERO_DTYPE_F32, 1, 5, 1, NULL), ZERO_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(zero_cuda_quantize(q, f, ZERO_DTYPE_F32, 1, 8, 0, NULL), ZERO_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(zero_cuda_dequantize(f, ZERO_DTYPE_U8, q, 1, 8, 1, NULL), ZERO_ERR_INVALID_ARGUMENT);
    printf("shim quant: %d cases compared with the host path and the 1.6.0 code\n", g_cases);
    return check_finish();
}
