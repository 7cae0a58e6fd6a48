/* bench_gpu_kernels: libzero's CUDA kernels against the memory bound, in one
 * run on one GPU.  The bound is cudaMemcpyAsync device-to-device moving the
 * same DRAM traffic (bytes read + bytes written) as the kernel; each case
 * prints the median over REPS interleaved repetitions of
 *     ratio = copy time / kernel time     (1.0 = at copy bandwidth)
 * Goals (issue 24): fused AdamW >= 0.9, sum of squares and non-finite check
 * likewise.  Not a test: it prints figures and exits 0; without a GPU it
 * says so and exits 0.
 *   bench_gpu_kernels [elements (default 64M)] */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_timing.h"
#include "optim.h"
#include "zero_cuda_kernels.h"

enum { REPS = 21 };

#define CK(call)                                                                                     \
    do {                                                                                             \
        cudaError_t e_ = (call);                                                                     \
        if (e_ != cudaSuccess) {                                                                     \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            return 1;                                                                                \
        }                                                                                            \
    } while (0)

static cudaEvent_t ev0, ev1;
static void *copy_src, *copy_dst;

static size_t dsz(zero_dtype dt) { return dt == ZERO_DTYPE_F32 ? 4 : 2; }
static const char *dname(zero_dtype dt) {
    return dt == ZERO_DTYPE_F32 ? "fp32" : dt == ZERO_DTYPE_BF16 ? "bf16" : "fp16";
}

typedef int (*op_fn)(void *ctx);

/* Milliseconds of one op, event-timed on the legacy stream. */
static float time_op(op_fn f, void *ctx) {
    float ms = 0;
    cudaEventRecord(ev0, 0);
    if (f(ctx) != 0) return -1;
    cudaEventRecord(ev1, 0);
    cudaEventSynchronize(ev1);
    cudaEventElapsedTime(&ms, ev0, ev1);
    return ms;
}

typedef struct copy_ctx { size_t bytes; } copy_ctx;
static int do_copy(void *p) {
    copy_ctx *c = p;
    return cudaMemcpyAsync(copy_dst, copy_src, c->bytes, cudaMemcpyDeviceToDevice, 0) != cudaSuccess;
}

/* Median ratio bound/op over REPS interleaved pairs; traffic = bytes read +
 * written by the op.  Prints one RESULT line. */
static void measure(const char *name, op_fn f, void *ctx, double traffic) {
    copy_ctx cc = {(size_t)(traffic / 2)}; /* a copy reads and writes its bytes */
    double r[REPS], op_ms[REPS];
    time_op(f, ctx), time_op(do_copy, &cc); /* warm */
    for (int i = 0; i < REPS; ++i) {
        float c = time_op(do_copy, &cc), o = time_op(f, ctx);
        r[i] = o > 0 ? c / o : 0;
        op_ms[i] = o;
    }
    bench_sort(r, REPS);
    bench_sort(op_ms, REPS);
    printf("RESULT %-34s ratio %.3f (min %.3f max %.3f)  kernel %.3f ms  %.0f GB/s\n", name, r[REPS / 2], r[0],
           r[REPS - 1], op_ms[REPS / 2], traffic / (op_ms[REPS / 2] * 1e-3) / 1e9);
}

/* (1.13) The host-write check's fingerprints of k tensors sharing n fp32
 * elements (full: every byte; sampled: the lines the check reads). */
typedef struct print_ctx {
    const void **x;
    uint64_t *bytes;
    size_t k;
    int full;
    uint64_t *scratch, *out;
} print_ctx;
static int do_prints(void *p) {
    print_ctx *c = p;
    return zero_cuda_prints(c->x, c->bytes, NULL, c->k, c->full, c->scratch, c->out, 0, 0) != ZERO_OK;
}

typedef struct optim_ctx {
    zero_cuda_mt_tensor *ts;
    size_t nt;
    zero_dtype gdt, odt;
    zero_optim_scalars s;
} optim_ctx;
static int do_optim(void *p) {
    optim_ctx *c = p;
    return zero_cuda_optim_step(ZERO_OPTIM_ADAMW, &c->s, c->ts, c->nt, c->gdt, c->odt, 0.5f, NULL, NULL) != ZERO_OK;
}

typedef struct red_ctx {
    const void *x;
    zero_dtype dt;
    size_t n;
    double *scratch, *out;
    int32_t *flag;
    int nonfinite;
} red_ctx;
static int do_red(void *p) {
    red_ctx *c = p;
    return (c->nonfinite ? zero_cuda_nonfinite(c->x, c->dt, c->n, c->flag, NULL)
                         : zero_cuda_sumsq(c->x, c->dt, c->n, c->scratch, c->out, NULL)) != ZERO_OK;
}

int main(int argc, char **argv) {
    size_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : (size_t)64 << 20;
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("SKIPPED: no CUDA device (%s)\n", cudaGetErrorString(cudaGetLastError()));
        return 0;
    }
    struct cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("bench_gpu_kernels: %s, %d SMs; %zu elements per case; median of %d; ratio = D2D copy of the same "
           "traffic / kernel\n", prop.name, prop.multiProcessorCount, n, REPS);
    CK(cudaEventCreate(&ev0));
    CK(cudaEventCreate(&ev1));
    float *master, *m, *v;
    void *grad, *out;
    CK(cudaMalloc((void **)&master, n * 4));
    CK(cudaMalloc((void **)&m, n * 4));
    CK(cudaMalloc((void **)&v, n * 4));
    CK(cudaMalloc(&grad, n * 4));
    CK(cudaMalloc(&out, n * 4));
    CK(cudaMalloc(&copy_src, n * 16));
    CK(cudaMalloc(&copy_dst, n * 16));
    CK(cudaMemset(master, 0, n * 4));
    CK(cudaMemset(m, 0, n * 4));
    CK(cudaMemset(v, 0, n * 4));
    CK(cudaMemset(grad, 0, n * 4)); /* zeros are finite in every dtype */
    CK(cudaMemset(copy_src, 0, n * 16));
    zero_optim_scalars s = zero__optim_scalars(ZERO_OPTIM_ADAMW, 1e-3, 0.9, 0.999, 1e-8, 0.01, 0, 0, 1, 1);

    /* Fused AdamW: one tensor of n, and 512 tensors sharing n (a model's
     * many parameters in one call). */
    const zero_dtype dts[3] = {ZERO_DTYPE_F32, ZERO_DTYPE_BF16, ZERO_DTYPE_F16};
    enum { MANY = 512 };
    zero_cuda_mt_tensor *many = calloc(MANY, sizeof *many);
    for (int k = 0; k < 3; ++k) {
        zero_dtype dt = dts[k];
        /* fp32 model: the master is the parameter (no copy-out); 16-bit:
         * 16-bit gradient in, 16-bit weight out. */
        void *o = dt == ZERO_DTYPE_F32 ? NULL : out;
        double traffic = (double)n * (12 + 12 + dsz(dt) + (o ? dsz(dt) : 0));
        zero_cuda_mt_tensor one = {master, m, v, grad, o, n};
        optim_ctx c = {&one, 1, dt, dt, s};
        char name[64];
        snprintf(name, sizeof name, "adamw %s params, 1 tensor", dname(dt));
        measure(name, do_optim, &c, traffic);
        size_t each = n / MANY;
        for (int t = 0; t < MANY; ++t)
            many[t] = (zero_cuda_mt_tensor){master + t * each, m + t * each, v + t * each,
                                            (char *)grad + t * each * dsz(dt),
                                            o ? (char *)o + t * each * dsz(dt) : NULL, each};
        optim_ctx cm = {many, MANY, dt, dt, s};
        snprintf(name, sizeof name, "adamw %s params, %d tensors", dname(dt), MANY);
        measure(name, do_optim, &cm, (double)each * MANY / n * traffic);
    }
    /* Reductions over a gradient: read-only (traffic = n * size). */
    double *scratch, *res;
    int32_t *flag;
    CK(cudaMalloc((void **)&scratch, zero_cuda_sumsq_scratch(n) * sizeof(double)));
    CK(cudaMalloc((void **)&res, sizeof(double)));
    CK(cudaMalloc((void **)&flag, sizeof(int32_t)));
    for (int k = 0; k < 3; ++k) {
        for (int nf = 0; nf < 2; ++nf) {
            red_ctx c = {grad, dts[k], n, scratch, res, flag, nf};
            char name[64];
            snprintf(name, sizeof name, "%s %s", nf ? "nonfinite" : "sumsq", dname(dts[k]));
            measure(name, do_red, &c, (double)n * dsz(dts[k]));
        }
    }
    /* (1.13) The device host-write check: full reads every byte once (ratio
     * against a copy of the same bytes read); sampled reads one 64-byte line
     * in 64 -- its time is reported against the fp32 AdamW step of the same
     * tensors (what it adds to a boundary, twice: after the step and at the
     * next check). */
    {
        uint64_t *pscratch, *pout;
        CK(cudaMalloc((void **)&pscratch, zero_cuda_prints_scratch() * sizeof(uint64_t)));
        CK(cudaMalloc((void **)&pout, MANY * sizeof(uint64_t)));
        const void *px[MANY];
        uint64_t pb[MANY];
        for (int kk = 0; kk < 2; ++kk) {
            const size_t k = kk ? MANY : 1, each = n / k;
            for (size_t t = 0; t < k; ++t) px[t] = master + t * each, pb[t] = each * 4;
            print_ctx full = {px, pb, k, 1, pscratch, pout}, samp = {px, pb, k, 0, pscratch, pout};
            char name[64];
            snprintf(name, sizeof name, "prints full fp32, %zu tensor%s", k, k > 1 ? "s" : "");
            measure(name, do_prints, &full, 2.0 * (double)n * 4); /* the copy of n*4 bytes: same bytes read */
            zero_cuda_mt_tensor one = {master, m, v, grad, NULL, n};
            optim_ctx c = {&one, 1, ZERO_DTYPE_F32, ZERO_DTYPE_F32, s};
            double fr[REPS];
            time_op(do_prints, &samp), time_op(do_optim, &c);
            for (int i = 0; i < REPS; ++i) {
                const float a = time_op(do_prints, &samp), o = time_op(do_optim, &c);
                fr[i] = o > 0 ? a / o : 0;
            }
            bench_sort(fr, REPS);
            printf("RESULT prints sampled fp32, %zu tensor%s: %.4f of an fp32 AdamW step of the same elements "
                   "(min %.4f max %.4f)\n", k, k > 1 ? "s" : "", fr[REPS / 2], fr[0], fr[REPS - 1]);
        }
        CK(cudaFree(pscratch));
        CK(cudaFree(pout));
    }
    CK(cudaDeviceSynchronize());
    printf("load average %.2f (host; the GPU was not shared)\n", bench_loadavg1());
    return 0;
}
