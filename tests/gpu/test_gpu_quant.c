/* (issue 33) Block quantization on a real GPU against the host path,
 * bitwise: the same checks as tests/cuda_shim/test_shim_quant.c (which runs
 * the kernel bodies on the CPU), here through nvcc's code.
 *  - kernels: zero_cuda_quantize's scales and data bytes == zero__quantize's,
 *    dequantize (into F32/BF16/F16), dequantize_add and the error-feedback
 *    residual == the host loops; F32/BF16/F16 inputs, int8 and int4, block
 *    sizes 1, 3, 7, 256, 1000, odd n, Inf/NaN and all-zero blocks, one run
 *    with more groups than the grid;
 *  - the services on a device_kind CUDA engine (world size 1, the staging
 *    layer over the single-process communicator): allgather_quantized and
 *    reduce_scatter_quantized (with error feedback) on cudaMalloc'd buffers
 *    == the same calls on host buffers.
 * Without a GPU: prints why and exits 77 (ctest: Skipped). */
#include <math.h>

#include "gpu_common.h"
#include "engine.h"
#include "optim.h"
#include "quant.h"
#include "quant_math.h"
#include "zero.h"
#include "zero_cuda_kernels.h"

static size_t dsz(zero_dtype dt) { return dt == ZERO_DTYPE_F32 ? 4 : 2; }

static float *make_input(size_t n, size_t block) {
    float *x = malloc((n ? n : 1) * 4);
    for (size_t lo = 0; lo < n; lo += block) {
        const size_t hi = lo + block < n ? lo + block : n;
        const uint32_t kind = gpu_rnd() % 8;
        const float mag = powf(10.0f, gpu_rndf(-6.0f, 3.0f));
        for (size_t i = lo; i < hi; i++) x[i] = kind == 0 ? 0.0f : mag * gpu_rndf(-1.0f, 1.0f);
        if (kind == 1) x[lo + gpu_rnd() % (hi - lo)] = gpu_rnd() % 2 ? INFINITY : -INFINITY;
        if (kind == 2) x[lo + gpu_rnd() % (hi - lo)] = NAN;
    }
    return x;
}

static int g_cases;

static void check_kernels(size_t n, zero_dtype dt, int bits, size_t block) {
    float *xf = make_input(n, block);
    void *x = xf;
    if (dt != ZERO_DTYPE_F32) {
        x = malloc((n ? n : 1) * 2);
        zero__convert(x, dt, xf, ZERO_DTYPE_F32, n);
        zero__convert(xf, ZERO_DTYPE_F32, x, dt, n);
    }
    const size_t qb = zero__quant_bytes(n, bits, block);
    const size_t used = zero_quant_nblocks(n, block) * 4 + zero_quant_data_bytes(n, bits);
    uint8_t *host = malloc(qb), *got = malloc(qb);
    zero__quantize(host, x, dt, n, bits, block);
    void *dx = gpu_upload(x, n * dsz(dt)), *dq = NULL;
    CUDA_OK(cudaMalloc(&dq, qb));
    CHECK_EQ_INT(zero_cuda_quantize(dq, dx, dt, n, bits, block, NULL), ZERO_OK);
    gpu_download(got, dq, used);
    CHECK(memcmp(host, got, used) == 0, "quantize n=%zu dt %d int%d block %zu: GPU != host", n, (int)dt, bits, block);
    /* dequantize the host's bytes on the GPU: the inputs are then equal */
    CUDA_OK(cudaMemcpy(dq, host, used, cudaMemcpyHostToDevice));
    void *dout = NULL;
    CUDA_OK(cudaMalloc(&dout, (n ? n : 1) * 4));
    float *a = malloc((n ? n : 1) * 4), *b = malloc((n ? n : 1) * 4);
    for (int odt = 0; odt < 3; ++odt) {
        zero__dequantize(a, odt, host, n, bits, block);
        CHECK_EQ_INT(zero_cuda_dequantize(dout, odt, dq, n, bits, block, NULL), ZERO_OK);
        gpu_download(b, dout, n * dsz(odt));
        CHECK(memcmp(a, b, n * dsz(odt)) == 0, "dequantize n=%zu int%d block %zu into dt %d: GPU != host", n, bits,
              block, odt);
    }
    for (size_t i = 0; i < n; i++) a[i] = gpu_rndf(-1, 1);
    CUDA_OK(cudaMemcpy(dout, a, n * 4, cudaMemcpyHostToDevice));
    zero__dequantize_add(a, host, n, bits, block);
    CHECK_EQ_INT(zero_cuda_dequantize_add(dout, dq, n, bits, block, NULL), ZERO_OK);
    gpu_download(b, dout, n * 4);
    CHECK(memcmp(a, b, n * 4) == 0, "dequantize_add n=%zu int%d block %zu: GPU != host", n, bits, block);
    if (dt == ZERO_DTYPE_F32) {
        float tmp[256];
        for (size_t lo = 0; lo < n; lo += 256) {
            const size_t k = n - lo < 256 ? n - lo : 256;
            zero__dequantize_range(tmp, host, n, lo, k, bits, block);
            for (size_t i = 0; i < k; i++) a[lo + i] = zero_quant_sub(xf[lo + i], tmp[i]);
        }
        CHECK_EQ_INT(zero_cuda_quant_residual(dout, dx, dq, n, bits, block, NULL), ZERO_OK);
        gpu_download(b, dout, n * 4);
        CHECK(memcmp(a, b, n * 4) == 0, "residual n=%zu int%d block %zu: GPU != host", n, bits, block);
    }
    cudaFree(dx), cudaFree(dq), cudaFree(dout);
    free(a), free(b), free(host), free(got);
    if (x != xf) free(x);
    free(xf);
    ++g_cases;
}

/* The services on a CUDA engine: device buffers == host buffers. */
static void check_services(void) {
    zero_engine_options o = ZERO_ENGINE_OPTIONS_INIT;
    o.config_json = "{\"train_micro_batch_size_per_gpu\": 1, \"zero_optimization\": {\"stage\": 0}}";
    o.comm_kind = ZERO_COMM_SELF;
    o.device_kind = ZERO_DEVICE_CUDA;
    zero_engine *e = NULL;
    char err[512] = "";
    zero_status s = zero_engine_create(&o, &e, err, sizeof err);
    CHECK(s == ZERO_OK, "create: %s", err);
    if (s != ZERO_OK) return;
    const size_t n = 100003;
    size_t counts[1] = {n};
    for (int bits = 8; bits >= 4; bits -= 4)
        for (int dt = 0; dt < 3; ++dt) {
            float *xf = make_input(n, 256);
            void *h = xf;
            if (dt != ZERO_DTYPE_F32) {
                h = malloc(n * 2);
                zero__convert(h, dt, xf, ZERO_DTYPE_F32, n);
            }
            void *d = gpu_upload(h, n * dsz(dt)), *back = malloc(n * 4);
            zero_quant_spec q = {0};
            q.bits = bits;
            CHECK_EQ_INT(zero__allgather_quantized(e->world, h, counts, dt, &q), ZERO_OK);
            CHECK_EQ_INT(zero__allgather_quantized(e->world, d, counts, dt, &q), ZERO_OK);
            gpu_download(back, d, n * dsz(dt));
            CHECK(memcmp(back, h, n * dsz(dt)) == 0, "allgather_quantized int%d dt %d: device != host", bits, dt);
            /* reduce-scatter with error feedback, two rounds (finite data) */
            for (size_t i = 0; i < n; i++) xf[i] = isfinite(xf[i]) ? xf[i] : 1.0f;
            if (h != xf) zero__convert(h, dt, xf, ZERO_DTYPE_F32, n);
            CUDA_OK(cudaMemcpy(d, h, n * dsz(dt), cudaMemcpyHostToDevice));
            float *efh = calloc(n, 4), *efback = malloc(n * 4);
            float *efd = gpu_upload(efh, n * 4);
            void *rh = malloc(n * 4), *rd = NULL;
            CUDA_OK(cudaMalloc(&rd, n * 4));
            for (int round = 0; round < 2; ++round) {
                q.error_feedback = efh;
                CHECK_EQ_INT(zero__reduce_scatter_quantized(e->world, h, rh, counts, dt, &q), ZERO_OK);
                q.error_feedback = efd;
                CHECK_EQ_INT(zero__reduce_scatter_quantized(e->world, d, rd, counts, dt, &q), ZERO_OK);
                gpu_download(back, rd, n * dsz(dt));
                gpu_download(efback, efd, n * 4);
                CHECK(memcmp(back, rh, n * dsz(dt)) == 0, "reduce_scatter_quantized int%d dt %d round %d: device != host",
                      bits, dt, round);
                CHECK(memcmp(efback, efh, n * 4) == 0, "error feedback int%d dt %d round %d: device != host", bits, dt,
                      round);
            }
            cudaFree(d), cudaFree(efd), cudaFree(rd);
            free(back), free(efh), free(efback), free(rh);
            if (h != xf) free(h);
            free(xf);
        }
    zero_engine_destroy(e);
}

int main(void) {
    if (gpu_count_or_skip("gpu_quant") == 0) return GPU_SKIP;
    CUDA_OK(cudaSetDevice(0));
    const size_t blocks[] = {1, 3, 7, 256, 1000};
    const size_t ns[] = {1, 5, 257, 4097, 100003};
    for (size_t bi = 0; bi < 5; ++bi)
        for (size_t ni = 0; ni < 5; ++ni)
            for (int bits = 8; bits >= 4; bits -= 4)
                for (int dt = 0; dt < 3; ++dt) check_kernels(ns[ni], (zero_dtype)dt, bits, blocks[bi]);
    check_kernels((size_t)3 << 20, ZERO_DTYPE_BF16, 4, 1); /* 1.5M groups: more than the grid */
    check_services();
    printf("gpu_quant: %d kernel cases compared with the host path\n", g_cases);
    return check_finish();
}
