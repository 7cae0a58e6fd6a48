/* The CUDA kernels on a real GPU against the CPU kernels (kernels/cpu),
 * bitwise: the same check as the shim test, but through nvcc's code. */
#include <math.h>

#include "gpu_common.h"
#include "optim.h"
#include "zero_cuda_kernels.h"

static size_t dsz(zero_dtype dt) { return dt == ZERO_DTYPE_F32 ? 4 : 2; }

static void *rand_host(zero_dtype dt, size_t n, float lo, float hi) {
    float *f = malloc((n ? n : 1) * 4);
    for (size_t i = 0; i < n; ++i) f[i] = gpu_rndf(lo, hi);
    if (dt == ZERO_DTYPE_F32) return f;
    void *o = malloc((n ? n : 1) * 2);
    zero__convert(o, dt, f, ZERO_DTYPE_F32, n);
    free(f);
    return o;
}

static void check_optim(zero_optim_kind kind, double momentum, zero_dtype gdt, zero_dtype odt) {
    enum { NT = 20 };
    size_t sizes[NT] = {0, 1, 16384, 16385, 300000, 5};
    for (int k = 6; k < NT; ++k) sizes[k] = 1 + gpu_rnd() % 20000;
    uint32_t nst = zero__optim_state_count(kind, momentum);
    zero_optim_scalars s = zero__optim_scalars(kind, 1e-3, 0.9, 0.999, 1e-8, 0.01, momentum, 0, 1, 2);
    zero_cuda_mt_tensor ts[NT];
    float *hm[NT], *hs0[NT], *hs1[NT], *hg[NT];
    void *hgrad[NT], *hout[NT];
    for (int k = 0; k < NT; ++k) {
        size_t n = sizes[k];
        hm[k] = rand_host(ZERO_DTYPE_F32, n, -1, 1);
        hs0[k] = rand_host(ZERO_DTYPE_F32, n, 0, 0.1f);
        hs1[k] = rand_host(ZERO_DTYPE_F32, n, 0, 0.01f);
        hgrad[k] = rand_host(gdt, n, -2, 2);
        hg[k] = malloc((n ? n : 1) * 4);
        zero__convert(hg[k], ZERO_DTYPE_F32, hgrad[k], gdt, n);
        hout[k] = calloc(n ? n : 1, 4);
        ts[k] = (zero_cuda_mt_tensor){gpu_upload(hm[k], n * 4), nst >= 1 ? gpu_upload(hs0[k], n * 4) : NULL,
                                      nst >= 2 ? gpu_upload(hs1[k], n * 4) : NULL, gpu_upload(hgrad[k], n * dsz(gdt)),
                                      gpu_upload(hout[k], n * dsz(odt)), n};
    }
    CHECK_EQ_INT(zero_cuda_optim_step(kind, &s, ts, NT, gdt, odt, 0.5f, NULL, NULL), ZERO_OK);
    int bad = 0;
    for (int k = 0; k < NT; ++k) {
        size_t n = sizes[k];
        float *st[2] = {hs0[k], hs1[k]};
        zero__optim_step(kind, &s, hm[k], st, hg[k], 0.5f, hout[k], odt, n);
        float *m = malloc((n ? n : 1) * 4), *s0 = malloc((n ? n : 1) * 4), *s1 = malloc((n ? n : 1) * 4);
        void *o = malloc((n ? n : 1) * 4);
        gpu_download(m, ts[k].master, n * 4);
        gpu_download(o, ts[k].out, n * dsz(odt));
        bad += memcmp(m, hm[k], n * 4) != 0;
        bad += memcmp(o, hout[k], n * dsz(odt)) != 0;
        if (nst >= 1) gpu_download(s0, ts[k].state0, n * 4), bad += memcmp(s0, hs0[k], n * 4) != 0;
        if (nst >= 2) gpu_download(s1, ts[k].state1, n * 4), bad += memcmp(s1, hs1[k], n * 4) != 0;
        free(m), free(s0), free(s1), free(o);
        cudaFree(ts[k].master), cudaFree(ts[k].state0), cudaFree(ts[k].state1), cudaFree((void *)ts[k].grad), cudaFree(ts[k].out);
        free(hm[k]), free(hs0[k]), free(hs1[k]), free(hg[k]), free(hgrad[k]), free(hout[k]);
    }
    CHECK(bad == 0, "kind %d grad dt %d out dt %d: %d arrays differ from the CPU", (int)kind, (int)gdt, (int)odt, bad);
}

static void check_reductions(void) {
    const size_t ns[] = {0, 1, 4097, 1000003};
    for (size_t t = 0; t < 4; ++t)
        for (int dt = 0; dt < 3; ++dt) {
            size_t n = ns[t];
            void *x = rand_host(dt, n, -3, 3);
            float *xf = malloc((n ? n : 1) * 4);
            zero__convert(xf, ZERO_DTYPE_F32, x, dt, n);
            void *dx = gpu_upload(x, n * dsz(dt));
            double *scratch, *out, got;
            CUDA_OK(cudaMalloc((void **)&scratch, zero_cuda_sumsq_scratch(n) * sizeof(double)));
            CUDA_OK(cudaMalloc((void **)&out, sizeof(double)));
            CHECK_EQ_INT(zero_cuda_sumsq(dx, dt, n, scratch, out, NULL), ZERO_OK);
            gpu_download(&got, out, sizeof got);
            double ref = zero__sumsq_f32(xf, n);
            CHECK(memcmp(&got, &ref, 8) == 0, "sumsq n=%zu dt %d: %.17g vs %.17g", n, dt, got, ref);
            /* misaligned for the vector loads (one element in): the fused
             * kernel's element path, same lane order, same bits */
            for (size_t skip = 1; n > 8 && skip <= 3; skip += 2) {
                CHECK_EQ_INT(zero_cuda_sumsq((char *)dx + skip * dsz(dt), dt, n - skip, scratch, out, NULL), ZERO_OK);
                gpu_download(&got, out, sizeof got);
                ref = zero__sumsq_f32(xf + skip, n - skip);
                CHECK(memcmp(&got, &ref, 8) == 0, "misaligned (+%zu) sumsq n=%zu dt %d: %.17g vs %.17g", skip, n - skip,
                      dt, got, ref);
            }
            int32_t *flag, hf = -1;
            CUDA_OK(cudaMalloc((void **)&flag, 4));
            CHECK_EQ_INT(zero_cuda_nonfinite(dx, dt, n, flag, NULL), ZERO_OK);
            gpu_download(&hf, flag, 4);
            CHECK(hf == 0, "clean array flagged");
            if (n) {
                float inf = INFINITY;
                char tmp[4];
                zero__convert(tmp, dt, &inf, ZERO_DTYPE_F32, 1);
                CUDA_OK(cudaMemcpy((char *)dx + (n / 2) * dsz(dt), tmp, dsz(dt), cudaMemcpyHostToDevice));
                CHECK_EQ_INT(zero_cuda_nonfinite(dx, dt, n, flag, NULL), ZERO_OK);
                gpu_download(&hf, flag, 4);
                CHECK(hf == 1, "Inf not found (n=%zu dt %d)", n, dt);
            }
            /* convert to every dtype, compare with the CPU */
            for (int dd = 0; dd < 3; ++dd) {
                void *dy, *hy = malloc((n ? n : 1) * 4), *ry = malloc((n ? n : 1) * 4);
                CUDA_OK(cudaMalloc(&dy, (n ? n : 1) * 4));
                CHECK_EQ_INT(zero_cuda_convert(dy, dd, dx, dt, n, NULL), ZERO_OK);
                gpu_download(hy, dy, n * dsz(dd));
                float inf = INFINITY;
                if (n) { /* the host copy must carry the same Inf */
                    zero__convert((char *)x + (n / 2) * dsz(dt), dt, &inf, ZERO_DTYPE_F32, 1);
                }
                zero__convert(ry, dd, x, dt, n);
                CHECK(memcmp(hy, ry, n * dsz(dd)) == 0, "convert %d -> %d differs", dt, dd);
                cudaFree(dy), free(hy), free(ry);
            }
            cudaFree(dx), cudaFree(scratch), cudaFree(out), cudaFree(flag), free(x), free(xf);
        }
}

int main(void) {
    if (gpu_count_or_skip("gpu_kernels") == 0) return GPU_SKIP;
    CUDA_OK(cudaSetDevice(0));
    const zero_dtype dts[] = {ZERO_DTYPE_F32, ZERO_DTYPE_BF16, ZERO_DTYPE_F16};
    const zero_optim_kind kinds[] = {ZERO_OPTIM_ADAMW, ZERO_OPTIM_ADAM, ZERO_OPTIM_LION, ZERO_OPTIM_ADAGRAD, ZERO_OPTIM_SGD};
    for (int k = 0; k < 5; ++k)
        for (int g = 0; g < 3; ++g)
            for (int o = 0; o < 3; ++o) check_optim(kinds[k], kinds[k] == ZERO_OPTIM_SGD ? 0.9 : 0.0, dts[g], dts[o]);
    check_reductions();
    return check_finish();
}
