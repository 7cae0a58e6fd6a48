/* bench_gpu_sumsq: what the bitwise order of libzero's GPU sum of squares
 * costs, and which way of computing that same order is fastest (issue 35).
 *
 * The order (kernels/cpu/optim.h, zero__sumsq_f32): blocks of
 * ZERO_CUDA_SUMSQ_BLOCK elements, each summed in 32 fp64 lanes (element k in
 * lane k % 32, in order) folded by zero_sumsq_fold, the block sums combined
 * by a tree of fan-in 64 (groups summed left to right, level by level).
 * Variants timed here against a device-to-device copy of the same bytes
 * (ratio = copy time / kernel time, median of 21 interleaved runs):
 *   lib      libzero's zero_cuda_sumsq (the reference: every ordered
 *            variant must give its bits, checked on every case)
 *   fused    the same lanes/fold/first level, and the last CUDA block to
 *            finish runs the remaining levels (one launch instead of two)
 *   wide16   fused, and 16-bit inputs read 8 lanes per 16-byte load (4
 *            threads per sum block instead of 8)
 *   stream   wide16 with cache-streaming loads (__ldcs)
 *   unordered  the price of the order: a grid-stride fp64 sum with 16-byte
 *            loads, warp shuffles and one block per SM x 8: deterministic
 *            for a given GPU, not the CPU's bits (relative difference shown)
 * Not a test: prints RESULT lines and exits 0; without a GPU it says so.
 *   bench_gpu_sumsq [elements (default 64M)] */
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "optim_math.h"
#include "zero_cuda_kernels.h"

#define CK(call)                                                                                     \
    do {                                                                                             \
        cudaError_t e_ = (call);                                                                     \
        if (e_ != cudaSuccess) {                                                                     \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(1);                                                                                 \
        }                                                                                            \
    } while (0)

enum { REPS = 21, BLOCK = 1024, LANES = ZERO_SUMSQ_LANES, FANIN = 64, ROW = LANES + 1 };
enum { DT_F32 = 0, DT_BF16 = 1, DT_F16 = 2 };

__device__ __forceinline__ float to_f32(uint16_t h, int dt) {
    return dt == DT_BF16 ? zero_bf16_to_f32(h) : __half2float(__ushort_as_half(h));
}
template <bool STREAM, typename T> __device__ __forceinline__ T ld(const T *p) {
    if (STREAM) return __ldcs(p);
    return *p;
}

/* LPT lanes per thread (4: fp32 16-byte / 16-bit 8-byte loads; 8: 16-bit
 * 16-byte loads), in order within each lane. */
template <int LPT, bool STREAM>
__device__ __forceinline__ void lanes_of(const void *__restrict__ x, int dt, uint64_t n, uint64_t b, int k0,
                                         double *acc) {
    const uint64_t lo = b * BLOCK;
    const uint64_t len = n - lo < BLOCK ? n - lo : BLOCK;
    uint64_t k = (uint64_t)k0;
    if (dt == DT_F32) {
        const float *__restrict__ p = (const float *)x + lo;
#pragma unroll 8
        for (; k + 4 <= len; k += LANES) {
            const float4 v = ld<STREAM>((const float4 *)(p + k));
            const double d0 = v.x, d1 = v.y, d2 = v.z, d3 = v.w;
            acc[0] += d0 * d0, acc[1] += d1 * d1, acc[2] += d2 * d2, acc[3] += d3 * d3;
        }
        for (int e = 0; e < 4 && k + (uint64_t)e < len; ++e) {
            const double d = p[k + (uint64_t)e];
            acc[e] += d * d;
        }
    } else if (LPT == 4) {
        const uint16_t *__restrict__ p = (const uint16_t *)x + lo;
#pragma unroll 8
        for (; k + 4 <= len; k += LANES) {
            const uint2 v = ld<STREAM>((const uint2 *)(p + k));
            const uint16_t h[4] = {(uint16_t)(v.x & 0xffffu), (uint16_t)(v.x >> 16), (uint16_t)(v.y & 0xffffu),
                                   (uint16_t)(v.y >> 16)};
            for (int e = 0; e < 4; ++e) {
                const double d = to_f32(h[e], dt);
                acc[e] += d * d;
            }
        }
        for (int e = 0; e < 4 && k + (uint64_t)e < len; ++e) {
            const double d = to_f32(p[k + (uint64_t)e], dt);
            acc[e] += d * d;
        }
    } else {
        const uint16_t *__restrict__ p = (const uint16_t *)x + lo;
#pragma unroll 8
        for (; k + 8 <= len; k += LANES) {
            const uint4 v = ld<STREAM>((const uint4 *)(p + k));
            const uint32_t w[4] = {v.x, v.y, v.z, v.w};
            for (int e = 0; e < 8; ++e) {
                const double d = to_f32((uint16_t)(e % 2 ? w[e / 2] >> 16 : w[e / 2] & 0xffffu), dt);
                acc[e] += d * d;
            }
        }
        for (int e = 0; e < 8 && k + (uint64_t)e < len; ++e) {
            const double d = to_f32(p[k + (uint64_t)e], dt);
            acc[e] += d * d;
        }
    }
}

/* One CUDA block per tree group (64 sum blocks): lanes -> fold -> the
 * group's left-to-right sum into lvl[g]; then the last block to finish runs
 * the remaining levels (each group of 64 left to right) into *out. */
template <int LPT, bool STREAM>
__global__ void k_fused(const void *__restrict__ x, int dt, uint64_t n, double *lvl, double *lvl2,
                        unsigned *done, double *out) {
    __shared__ double lane[FANIN * ROW];
    __shared__ double bsum[FANIN];
    __shared__ int last;
    const int per_block = LANES / LPT; /* threads per sum block */
    const uint64_t nblocks = (n + BLOCK - 1) / BLOCK;
    const uint64_t first = (uint64_t)blockIdx.x * FANIN;
    const uint64_t count = nblocks - first < FANIN ? nblocks - first : FANIN;
    {
        const uint64_t j = threadIdx.x / per_block;
        const int k0 = (int)(threadIdx.x % per_block) * LPT;
        double acc[LPT];
        for (int e = 0; e < LPT; ++e) acc[e] = 0.0;
        if (j < count) lanes_of<LPT, STREAM>(x, dt, n, first + j, k0, acc);
        for (int e = 0; e < LPT; ++e) lane[j * ROW + k0 + e] = acc[e];
    }
    __syncthreads();
    if (threadIdx.x < count) {
        double a[LANES];
#pragma unroll
        for (int l = 0; l < LANES; ++l) a[l] = lane[threadIdx.x * ROW + l];
        bsum[threadIdx.x] = zero_sumsq_fold(a);
    }
    __syncthreads();
    const uint64_t groups = gridDim.x;
    if (threadIdx.x == 0) {
        double acc = bsum[0];
        for (uint64_t k = 1; k < count; ++k) acc += bsum[k];
        if (groups == 1) {
            *out = acc;
            last = 0;
        } else {
            lvl[blockIdx.x] = acc;
            __threadfence();
            last = atomicAdd(done, 1u) == groups - 1;
        }
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    /* the remaining levels, as zero_cuda_k_sumsq_finish */
    double *a = lvl, *b = lvl2;
    uint64_t m = groups;
    while (m > 1) {
        const uint64_t g2 = (m + FANIN - 1) / FANIN;
        double *dst = g2 == 1 ? out : b;
        for (uint64_t g = threadIdx.x; g < g2; g += blockDim.x) {
            const uint64_t k0 = g * FANIN;
            const uint64_t len = m - k0 < FANIN ? m - k0 : FANIN;
            double acc = __ldcg(&a[k0]);
            for (uint64_t k = 1; k < len; ++k) acc += __ldcg(&a[k0 + k]);
            dst[g] = acc;
        }
        __syncthreads();
        b = a, a = dst, m = g2;
    }
    if (threadIdx.x == 0) *done = 0; /* ready for the next launch */
}

/* The price of the order: a plain grid-stride fp64 sum (16-byte loads),
 * warp shuffles, one value per block, the last block sums those. */
__global__ void k_unordered(const void *__restrict__ x, int dt, uint64_t n, double *part, unsigned *done,
                            double *out) {
    __shared__ double warp_sum[32];
    __shared__ int last;
    double acc = 0.0;
    const uint64_t tid = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (uint64_t)gridDim.x * blockDim.x;
    if (dt == DT_F32) {
        const float4 *p = (const float4 *)x;
        for (uint64_t i = tid; i < n / 4; i += stride) {
            const float4 v = __ldcs(p + i);
            acc += (double)v.x * v.x + (double)v.y * v.y + (double)v.z * v.z + (double)v.w * v.w;
        }
        for (uint64_t i = n / 4 * 4 + tid; i < n; i += stride) acc += (double)((const float *)x)[i] * ((const float *)x)[i];
    } else {
        const uint4 *p = (const uint4 *)x;
        for (uint64_t i = tid; i < n / 8; i += stride) {
            const uint4 v = __ldcs(p + i);
            const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
            for (int e = 0; e < 8; ++e) {
                const double d = to_f32((uint16_t)(e % 2 ? w[e / 2] >> 16 : w[e / 2] & 0xffffu), dt);
                acc += d * d;
            }
        }
        for (uint64_t i = n / 8 * 8 + tid; i < n; i += stride) {
            const double d = to_f32(((const uint16_t *)x)[i], dt);
            acc += d * d;
        }
    }
    for (int o = 16; o > 0; o /= 2) acc += __shfl_down_sync(0xffffffffu, acc, o);
    if (threadIdx.x % 32 == 0) warp_sum[threadIdx.x / 32] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
        double s = 0.0;
        for (unsigned w = 0; w < blockDim.x / 32; ++w) s += warp_sum[w];
        part[blockIdx.x] = s;
        __threadfence();
        last = atomicAdd(done, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (last && threadIdx.x == 0) {
        __threadfence();
        double s = 0.0;
        for (unsigned g = 0; g < gridDim.x; ++g) s += __ldcg(&part[g]);
        *out = s;
        *done = 0;
    }
}

static cudaEvent_t ev0, ev1;
static void *copy_src, *copy_dst;

struct Case {
    const char *name;
    int variant; /* 0 lib, 1 fused, 2 wide16, 3 stream, 4 unordered */
};

static void *g_x;
static int g_dt;
static uint64_t g_n;
static double *g_scratch, *g_out;
static unsigned *g_done;
static int g_sms;

static zero_dtype zdt(int dt) { return dt == DT_F32 ? ZERO_DTYPE_F32 : dt == DT_BF16 ? ZERO_DTYPE_BF16 : ZERO_DTYPE_F16; }

static void launch(int variant) {
    const uint64_t m = (g_n + BLOCK - 1) / BLOCK, groups = (m + FANIN - 1) / FANIN;
    switch (variant) {
    case 0:
        zero_cuda_sumsq(g_x, zdt(g_dt), g_n, g_scratch, g_out, NULL);
        break;
    case 1:
        k_fused<4, false><<<(unsigned)groups, FANIN * LANES / 4>>>(g_x, g_dt, g_n, g_scratch, g_scratch + groups, g_done, g_out);
        break;
    case 2:
        if (g_dt == DT_F32)
            k_fused<4, false><<<(unsigned)groups, FANIN * LANES / 4>>>(g_x, g_dt, g_n, g_scratch, g_scratch + groups, g_done, g_out);
        else
            k_fused<8, false><<<(unsigned)groups, FANIN * LANES / 8>>>(g_x, g_dt, g_n, g_scratch, g_scratch + groups, g_done, g_out);
        break;
    case 3:
        if (g_dt == DT_F32)
            k_fused<4, true><<<(unsigned)groups, FANIN * LANES / 4>>>(g_x, g_dt, g_n, g_scratch, g_scratch + groups, g_done, g_out);
        else
            k_fused<8, true><<<(unsigned)groups, FANIN * LANES / 8>>>(g_x, g_dt, g_n, g_scratch, g_scratch + groups, g_done, g_out);
        break;
    default:
        k_unordered<<<(unsigned)(g_sms * 8), 256>>>(g_x, g_dt, g_n, g_scratch, g_done, g_out);
    }
}

static float time_ms(int variant, size_t copy_bytes) {
    float ms = 0;
    cudaEventRecord(ev0, 0);
    if (variant < 0)
        cudaMemcpyAsync(copy_dst, copy_src, copy_bytes, cudaMemcpyDeviceToDevice, 0);
    else
        launch(variant);
    cudaEventRecord(ev1, 0);
    cudaEventSynchronize(ev1);
    cudaEventElapsedTime(&ms, ev0, ev1);
    return ms;
}

static double result(int variant) {
    double r = 0;
    launch(variant);
    CK(cudaGetLastError());
    CK(cudaMemcpy(&r, g_out, sizeof r, cudaMemcpyDeviceToHost));
    return r;
}

int main(int argc, char **argv) {
    uint64_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : (uint64_t)64 << 20;
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("SKIPPED: no CUDA device (%s)\n", cudaGetErrorString(cudaGetLastError()));
        return 0;
    }
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    g_sms = prop.multiProcessorCount;
    printf("bench_gpu_sumsq: %s, %d SMs; %llu elements; median of %d; ratio = D2D copy of the same bytes / kernel\n",
           prop.name, g_sms, (unsigned long long)n, REPS);
    CK(cudaEventCreate(&ev0));
    CK(cudaEventCreate(&ev1));
    const uint64_t n_alloc = n + 4099; /* the odd sizes below */
    std::vector<float> h(n_alloc);
    uint64_t st = 88172645463325252ull;
    for (uint64_t i = 0; i < n_alloc; ++i) { /* xorshift: values in (-1, 1), some large ones */
        st ^= st << 13, st ^= st >> 7, st ^= st << 17;
        h[i] = (float)((double)(st >> 11) / 9007199254740992.0 * 2.0 - 1.0) * ((i % 997) ? 1.0f : 300.0f);
    }
    std::vector<uint16_t> hb(n_alloc), hf(n_alloc);
    for (uint64_t i = 0; i < n_alloc; ++i) {
        uint32_t u;
        memcpy(&u, &h[i], 4);
        hb[i] = (uint16_t)(u >> 16);
        hf[i] = __half_as_ushort(__float2half(h[i]));
    }
    void *x32, *x16b, *x16f;
    CK(cudaMalloc(&x32, n_alloc * 4));
    CK(cudaMalloc(&x16b, n_alloc * 2));
    CK(cudaMalloc(&x16f, n_alloc * 2));
    CK(cudaMemcpy(x32, h.data(), n_alloc * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(x16b, hb.data(), n_alloc * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(x16f, hf.data(), n_alloc * 2, cudaMemcpyHostToDevice));
    CK(cudaMalloc((void **)&g_scratch, (zero_cuda_sumsq_scratch(n_alloc) + (size_t)g_sms * 8 + 64) * sizeof(double)));
    CK(cudaMalloc((void **)&g_out, sizeof(double)));
    CK(cudaMalloc((void **)&g_done, sizeof(unsigned)));
    CK(cudaMemset(g_done, 0, sizeof(unsigned)));
    CK(cudaMalloc(&copy_src, n_alloc * 4));
    CK(cudaMalloc(&copy_dst, n_alloc * 4));

    const char *names[] = {"lib", "fused", "wide16", "stream", "unordered"};
    const char *dtn[] = {"fp32", "bf16", "fp16"};
    void *xs[] = {x32, x16b, x16f};
    /* bitwise checks at several sizes (one group, ragged blocks, several levels) */
    const uint64_t sizes[] = {1, 1023, 1024 * 64, 1024 * 64 + 1, 1000003, n, n + 4099};
    int all_equal = 1;
    for (int dt = 0; dt < 3; ++dt)
        for (uint64_t s : sizes) {
            g_x = xs[dt], g_dt = dt, g_n = s;
            const double ref = result(0);
            for (int v = 1; v <= 3; ++v) {
                const double got = result(v);
                if (memcmp(&got, &ref, sizeof got) != 0) {
                    all_equal = 0;
                    printf("MISMATCH %s %s n=%llu: %.17g vs lib %.17g\n", names[v], dtn[dt], (unsigned long long)s,
                           got, ref);
                }
            }
        }
    printf("ordered variants bitwise equal to libzero's kernel at %zu sizes x 3 dtypes: %s\n",
           sizeof sizes / sizeof *sizes, all_equal ? "yes" : "NO");
    for (int dt = 0; dt < 3; ++dt) {
        g_x = xs[dt], g_dt = dt, g_n = n;
        const size_t bytes = n * (dt == DT_F32 ? 4 : 2);
        const double ref = result(0);
        for (int v = 0; v < 5; ++v) {
            time_ms(v, 0), time_ms(-1, bytes / 2); /* warm */
            double r[REPS], ms[REPS];
            for (int i = 0; i < REPS; ++i) {
                const float c = time_ms(-1, bytes / 2), o = time_ms(v, 0);
                r[i] = o > 0 ? c / o : 0;
                ms[i] = o;
            }
            std::sort(r, r + REPS);
            std::sort(ms, ms + REPS);
            const double got = result(v);
            char extra[96] = "";
            if (v == 4) snprintf(extra, sizeof extra, "  (not the CPU's order: relative difference %.2e)", fabs(got - ref) / ref);
            printf("RESULT sumsq %-4s %-9s ratio %.3f (min %.3f max %.3f)  kernel %.3f ms  %.0f GB/s%s\n", dtn[dt],
                   names[v], r[REPS / 2], r[0], r[REPS - 1], ms[REPS / 2], (double)bytes / (ms[REPS / 2] * 1e-3) / 1e9,
                   extra);
        }
    }
    CK(cudaDeviceSynchronize());
    return 0;
}
