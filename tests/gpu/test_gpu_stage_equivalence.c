/* ZeRO stage equivalence on GPUs, built from the GPU path's pieces: NCCL
 * collectives (backends/comm/comm_nccl.c) and the fused CUDA optimizer
 * kernel (kernels/cuda).  For several AdamW steps on a bf16 model with fp32
 * master weights:
 *   stage 0: all-reduce the full gradient, every rank steps everything;
 *   stage 1/2: reduce-scatter the gradient to owners (equal and unequal
 *     partitions), each rank steps its own partition, all-gather the new
 *     bf16 parameters;
 * and the CPU reference (kernels/cpu) on the exact gradient sum.  Gradients
 * are multiples of 1/64, so every sum is exact in any reduction order and
 * all three must agree bitwise on every rank.
 *   test_gpu_stage_equivalence mpi      under mpirun (np 1: NCCL world size 1)
 *   test_gpu_stage_equivalence threads  one thread per GPU present */
#include "gpu_nccl_driver.h"
#include "optim.h"
#include "zero_cuda_kernels.h"

enum { NUMEL = 100003, STEPS = 3 };

/* Deterministic gradient of rank r at step t, element i: a multiple of 1/64. */
static float grad_of(int r, int t, size_t i) {
    uint32_t h = (uint32_t)(i * 2654435761u) ^ (uint32_t)(r * 40503 + t * 977);
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    return (float)((int)(h % 513) - 256) / 64.0f;
}
static float init_of(size_t i) { return (float)((int)(i % 2001) - 1000) / 1000.0f; }

typedef struct run_out {
    uint16_t *params; /* bf16, NUMEL */
} run_out;

static void wait_ok(zero_comm_req *q, zero_status s, const char *what) {
    TCHECK(s == ZERO_OK, "%s failed (%d)", what, (int)s);
    if (s == ZERO_OK) TCHECK(zero__comm_wait(q) == ZERO_OK, "%s wait", what);
}

/* partitioned: 0 = stage 0; 1 = equal partitions; 2 = unequal partitions. */
static void run(zero_comm *m, int partitioned, uint16_t *params_out) {
    const int W = m->size, r = m->rank;
    size_t counts[64], off[65] = {0};
    for (int b = 0; b < W; ++b) {
        if (partitioned == 2) counts[b] = NUMEL / W + (b == 0 ? NUMEL % W : 0);
        else counts[b] = (NUMEL + W - 1) / W; /* padded: equal blocks */
        off[b + 1] = off[b] + counts[b];
    }
    const size_t padded = partitioned == 2 ? (size_t)NUMEL : off[W];
    const size_t lo = partitioned ? off[r] : 0, n = partitioned ? counts[r] : (size_t)NUMEL;
    float *h = calloc(padded, 4);
    for (size_t i = 0; i < NUMEL; ++i) h[i] = init_of(i);
    float *master = gpu_upload(h + lo, (n ? n : 1) * 4);
    float *mom = NULL, *var = NULL;
    CUDA_OK(cudaMalloc((void **)&mom, (n ? n : 1) * 4));
    CUDA_OK(cudaMalloc((void **)&var, (n ? n : 1) * 4));
    CUDA_OK(cudaMemset(mom, 0, (n ? n : 1) * 4));
    CUDA_OK(cudaMemset(var, 0, (n ? n : 1) * 4));
    uint16_t *dparams;
    CUDA_OK(cudaMalloc((void **)&dparams, padded * 2));
    CUDA_OK(cudaMemset(dparams, 0, padded * 2));
    float *grad = NULL, *part = NULL;
    CUDA_OK(cudaMalloc((void **)&grad, padded * 4));
    CUDA_OK(cudaMalloc((void **)&part, (n ? n : 1) * 4));
    for (int t = 1; t <= STEPS; ++t) {
        memset(h, 0, padded * 4);
        for (size_t i = 0; i < NUMEL; ++i) h[i] = grad_of(r, t, i);
        CUDA_OK(cudaMemcpy(grad, h, padded * 4, cudaMemcpyHostToDevice));
        /* The comm stream is non-blocking: it is not ordered after the legacy
         * stream's memsets and pageable copy (whose DMA may still be in flight
         * when cudaMemcpy returns).  Without this the first H200 run read stale
         * gradients in 3-21 % of the elements. */
        CUDA_OK(cudaDeviceSynchronize());
        zero_comm_req *q = NULL;
        const float *g = grad;
        if (!partitioned) {
            { zero_status st_ = m->ops->iallreduce(m, grad, NUMEL, ZERO_DTYPE_F32, ZERO_OP_SUM, &q); wait_ok(q, st_, "iallreduce"); }
        } else {
            { zero_status st_ = m->ops->ireduce_scatterv(m, grad, part, counts, ZERO_DTYPE_F32, &q); wait_ok(q, st_, "ireduce_scatterv"); }
            g = part;
        }
        /* On the comm's stream: ordered after the reduction and before the
         * all-gather without any host synchronisation. */
        zero_optim_scalars s = zero__optim_scalars(ZERO_OPTIM_ADAMW, 1e-2, 0.9, 0.999, 1e-8, 0.1, 0, 0, 1, (uint64_t)t);
        zero_cuda_mt_tensor ts = {master, mom, var, g, dparams + lo, n};
        TCHECK(zero_cuda_optim_step(ZERO_OPTIM_ADAMW, &s, &ts, 1, ZERO_DTYPE_F32, ZERO_DTYPE_BF16, 1.0f / (float)W, NULL,
                                    zero__comm_nccl_stream(m)) == ZERO_OK,
               "optim_step");
        if (partitioned)
            { zero_status st_ = m->ops->iallgatherv(m, dparams + lo, dparams, counts, ZERO_DTYPE_BF16, &q); wait_ok(q, st_, "iallgatherv"); }
        CUDA_OK(cudaDeviceSynchronize());
    }
    gpu_download(params_out, dparams, (size_t)NUMEL * 2);
    cudaFree(master), cudaFree(mom), cudaFree(var), cudaFree(dparams), cudaFree(grad), cudaFree(part), free(h);
}

/* CPU reference: exact gradient sums, zero__optim_step on the whole model. */
static void reference(int W, uint16_t *out) {
    float *p = malloc(NUMEL * 4), *mo = calloc(NUMEL, 4), *va = calloc(NUMEL, 4), *g = malloc(NUMEL * 4);
    for (size_t i = 0; i < NUMEL; ++i) p[i] = init_of(i);
    for (int t = 1; t <= STEPS; ++t) {
        for (size_t i = 0; i < NUMEL; ++i) {
            float sum = 0;
            for (int r = 0; r < W; ++r) sum += grad_of(r, t, i);
            g[i] = sum;
        }
        zero_optim_scalars s = zero__optim_scalars(ZERO_OPTIM_ADAMW, 1e-2, 0.9, 0.999, 1e-8, 0.1, 0, 0, 1, (uint64_t)t);
        float *st[2] = {mo, va};
        zero__optim_step(ZERO_OPTIM_ADAMW, &s, p, st, g, 1.0f / (float)W, out, ZERO_DTYPE_BF16, NUMEL);
    }
    free(p), free(mo), free(va), free(g);
}

static void equivalence(zero_comm *m) {
    CUDA_OK(cudaSetDevice(zero__comm_nccl_device(m)));
    uint16_t *ref = malloc(NUMEL * 2), *got = malloc(NUMEL * 2);
    reference(m->size, ref);
    const char *names[3] = {"stage 0 (allreduce)", "stage 1/2 (equal partitions)", "stage 1/2 (unequal partitions)"};
    for (int v = 0; v < 3; ++v) {
        run(m, v, got);
        size_t bad = 0;
        for (size_t i = 0; i < NUMEL; ++i) bad += got[i] != ref[i];
        TCHECK(bad == 0, "rank %d/%d %s: %zu of %d bf16 params differ from the CPU reference", m->rank, m->size, names[v],
               bad, NUMEL);
    }
    free(ref), free(got);
}

static void body(zero_comm *m, int from_mpi) {
    (void)from_mpi;
    equivalence(m);
}

int main(int argc, char **argv) {
    return gpu_nccl_main(argc, argv, "gpu_stage_equivalence", "stage equivalence", body);
}
