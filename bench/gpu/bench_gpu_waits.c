/* bench_gpu_waits: where the host blocks on libzero's GPU path, before and
 * after issue 35, in one run (one rank per GPU):
 *
 *   1. allocation (zero_cuda_alloc, the CUDA device backend): host time per
 *      allocation of --alloc-kb KiB, --allocs in a row on an idle stream,
 *      and one allocation behind a --spin-us kernel queued on libzero's
 *      stream; "before" is ZERO_CUDA_ALLOC_SYNC=1 (a zero-fill plus a
 *      stream synchronisation per allocation; the default again, see
 *      backends/device/cuda/device_cuda.h), "after" ZERO_CUDA_ALLOC_SYNC=0
 *      (the fill is queued, nothing waits).
 *   2. a stage-2 step through the public ABI on a CUDA engine (comm AUTO:
 *      NCCL under mpirun), --params fp32 params of --numel elements, a
 *      synthetic backward (a --layer-us kernel per param on the host's
 *      compute stream, then its gradient), reduce_bucket_size --bucket:
 *      median step time and host waits per step (the device's waits:
 *      synchronisations, synchronous copies, fence and fill waits; plus the
 *      NCCL communicator's), and the host waits of zero_params_done.
 *      Variants: overlap_comm off before (ZERO_CUDA_ALLOC_SYNC=1 and
 *      ZERO_BUCKET_HOST_WAIT=1) and after, overlap_comm on, and the same
 *      off/off pair with gradients in host memory (zero_param_desc.grad:
 *      each zero_on_grad_ready stages the gradient through a temporary
 *      device block, which no longer gets a zero-fill it would overwrite).
 *
 * At NCCL world size 1 the bucket engine has nothing to reduce, so overlap
 * off and on make the same waits there: item 3 of issue 35 (no host wait
 * per bucket with overlap_comm off) shows only with two or more GPUs
 * (mpirun -np <GPUs>); the run says so.  On CPU, tests/device's
 * device_dispatch checks the counts (one wait per flush, whatever the
 * bucket count).
 *
 *   mpirun -np <GPUs> bench_gpu_waits [--allocs 1000] [--alloc-kb 256] [--spin-us 2000]
 *                                     [--params 32] [--numel 1048576] [--bucket 4000000]
 *                                     [--layer-us 200] [--steps 21]
 *
 * Without a GPU it prints SKIPPED and exits 0.  Not a test. */
#include <cuda_runtime_api.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_gpu_check.h"
#include "bench_timing.h"
#include "comm.h"
#include "device.h"
#include "device_cuda.h"
#include "engine.h"
#include "zero.h"

void zero_bench_spin(long long cycles, void *stream); /* bench_gpu_spin.cu */

static int rank, world;
static double cycles_per_us = 1000.0;

static struct {
    int allocs, alloc_kb, params, steps;
    double spin_us, layer_us;
    long numel, bucket;
} A = {1000, 256, 32, 21, 2000.0, 200.0, 1L << 20, 4000000};

static void set_env(const char *k, int on) {
    if (on)
        setenv(k, "1", 1);
    else
        unsetenv(k);
}

static long long cycles(double us) { return (long long)(us * cycles_per_us); }

/* ---- 1. allocation ------------------------------------------------------- */

static void alloc_part(void) {
    const size_t bytes = (size_t)A.alloc_kb << 10;
    for (int before = 1; before >= 0; before--) {
        setenv("ZERO_CUDA_ALLOC_SYNC", before ? "1" : "0", 1); /* 0 is the default (since 2026-11-28) */
        zero_cuda_device_options o = ZERO_CUDA_DEVICE_OPTIONS_INIT;
        o.ordinal = -1; /* local rank % GPUs */
        o.device_arena_bytes = bytes * (size_t)(A.allocs + 2) + ((size_t)1 << 20); /* no growth while timing */
        zero_cuda_device *d = NULL;
        char err[256] = "";
        zero_status st = zero_cuda_device_open(&o, &d, err, sizeof err);
        unsetenv("ZERO_CUDA_ALLOC_SYNC");
        if (st != ZERO_OK) {
            fprintf(stderr, "rank %d: zero_cuda_device_open: %s\n", rank, err);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        void *comm = zero_cuda_comm_stream(d);
        void **blk = calloc((size_t)A.allocs, sizeof *blk);
        zero_cuda_free(d, zero_cuda_alloc(d, ZERO_TIER_DEVICE, bytes)); /* warm-up */
        zero_cuda_comm_sync(d);
        zero_cuda_device_stats s0, s1;
        zero_cuda_device_stats_get(d, &s0);
        double t0 = bench_now_s();
        for (int i = 0; i < A.allocs; i++) blk[i] = zero_cuda_alloc(d, ZERO_TIER_DEVICE, bytes);
        double t_row = bench_now_s() - t0;
        zero_cuda_device_stats_get(d, &s1);
        zero_cuda_comm_sync(d);
        for (int i = 0; i < A.allocs; i++) {
            if (!blk[i]) {
                fprintf(stderr, "rank %d: allocation %d failed: %s\n", rank, i, zero_cuda_device_error(d));
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
            zero_cuda_free(d, blk[i]);
        }
        /* one allocation behind a kernel on libzero's stream (a collective
         * or an optimizer pass in a real run) */
        enum { R = 11 };
        double behind[R];
        for (int r = 0; r < R; r++) {
            zero_bench_spin(cycles(A.spin_us), comm);
            double t = bench_now_s();
            void *p = zero_cuda_alloc(d, ZERO_TIER_DEVICE, bytes);
            behind[r] = bench_now_s() - t;
            zero_cuda_comm_sync(d);
            zero_cuda_free(d, p);
        }
        bench_sort(behind, R);
        double row_max = 0, behind_max = 0, row = t_row / A.allocs, bh = behind[R / 2];
        MPI_Allreduce(&row, &row_max, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        MPI_Allreduce(&bh, &behind_max, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        if (rank == 0)
            printf("RESULT alloc %s: %.2f us per %d KiB allocation (%d in a row), %.1f us for one behind a %.0f us "
                   "kernel on libzero's stream (median of %d), %.2f host waits per allocation\n",
                   before ? "before (ZERO_CUDA_ALLOC_SYNC=1)" : "after (ZERO_CUDA_ALLOC_SYNC=0)", row_max * 1e6, A.alloc_kb, A.allocs,
                   behind_max * 1e6, A.spin_us, R, (double)(s1.host_waits - s0.host_waits) / A.allocs);
        free(blk);
        zero_cuda_device_close(d);
    }
}

/* ---- 2. a stage-2 step --------------------------------------------------- */

typedef struct variant {
    const char *name;
    int before, overlap, host_grads;
} variant;

/* Host waits so far: the device's and the world communicator's. */
static unsigned long long waits_of(zero_engine *e) {
    zero__comm_counters c;
    zero__comm_counters_get(e->world, &c);
    return (unsigned long long)zero__dev_host_waits(e->dev) + (unsigned long long)c.host_waits;
}

static void step_variant(const variant *v, cudaStream_t compute, float *host_init, float **host_grads) {
    char json[512];
    snprintf(json, sizeof json,
             "{\"train_micro_batch_size_per_gpu\": 1, \"gradient_accumulation_steps\": 1,"
             " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.0001}},"
             " \"zero_optimization\": {\"stage\": 2, \"reduce_bucket_size\": %ld, \"overlap_comm\": %s}}",
             A.bucket, v->overlap ? "true" : "false");
    /* read when the device is opened (create) and when the bucket sets are
     * made (params_done) */
    setenv("ZERO_CUDA_ALLOC_SYNC", v->before ? "1" : "0", 1); /* 0 is the default (since 2026-11-28) */
    set_env("ZERO_BUCKET_HOST_WAIT", v->before);
    zero_engine_options o = ZERO_ENGINE_OPTIONS_INIT;
    o.config_json = json;
    o.device_kind = ZERO_DEVICE_CUDA;
    o.stream = compute;
    o.comm_kind = ZERO_COMM_AUTO;
    o.plugin = "stage2";
    zero_engine *e = NULL;
    char err[512] = "";
    if (zero_engine_create(&o, &e, err, sizeof err) != ZERO_OK) {
        fprintf(stderr, "rank %d: create: %s\n", rank, err);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    zero_param **h = calloc((size_t)A.params, sizeof *h);
    for (int p = 0; p < A.params; p++) {
        char name[32];
        snprintf(name, sizeof name, "w%d", p);
        zero_param_desc d = ZERO_PARAM_DESC_INIT;
        d.name = name;
        d.data = host_init;
        d.numel = (uint64_t)A.numel;
        d.dtype = ZERO_DTYPE_F32;
        if (v->host_grads) d.grad = host_grads[p];
        if (zero_register_param(e, &d, &h[p]) != ZERO_OK) {
            fprintf(stderr, "rank %d: register: %s\n", rank, zero_last_error(e));
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
    unsigned long long w0 = waits_of(e);
    double t0 = bench_now_s();
    if (zero_params_done(e) != ZERO_OK) {
        fprintf(stderr, "rank %d: params_done: %s\n", rank, zero_last_error(e));
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    double t_pd = bench_now_s() - t0;
    unsigned long long w_pd = waits_of(e) - w0;
    unsetenv("ZERO_CUDA_ALLOC_SYNC");
    unsetenv("ZERO_BUCKET_HOST_WAIT");
    const size_t bytes = (size_t)A.numel * sizeof(float);
    const int warm = 3;
    double *t = calloc((size_t)A.steps, sizeof *t);
    unsigned long long wsum = 0;
    for (int s = 0; s < warm + A.steps; s++) {
        MPI_Barrier(MPI_COMM_WORLD);
        unsigned long long ws = waits_of(e);
        double ts = bench_now_s();
        for (int p = A.params - 1; p >= 0; p--) { /* backward, last layer first */
            zero_bench_spin(cycles(A.layer_us), compute);
            void *buf = NULL;
            if (zero_grad_buffer(e, h[p], &buf) != ZERO_OK) {
                fprintf(stderr, "rank %d: grad_buffer: %s\n", rank, zero_last_error(e));
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
            if (v->host_grads)
                memset(buf, 0, bytes); /* the host's gradient, in host memory */
            else
                CK(cudaMemsetAsync(buf, 0, bytes, compute)); /* a "+= 0" kernel on the compute stream */
            if (zero_on_grad_ready(e, h[p], compute) != ZERO_OK) {
                fprintf(stderr, "rank %d: on_grad_ready: %s\n", rank, zero_last_error(e));
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
        }
        zero_step_args a = ZERO_STEP_ARGS_INIT;
        a.stream = compute;
        zero_step_result r = ZERO_STEP_RESULT_INIT;
        if (zero_step(e, &a, &r) != ZERO_OK) {
            fprintf(stderr, "rank %d: step: %s\n", rank, zero_last_error(e));
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        CK(cudaStreamSynchronize(compute));
        double dt = bench_now_s() - ts, mx = 0;
        MPI_Allreduce(&dt, &mx, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        if (s >= warm) {
            t[s - warm] = mx;
            wsum += waits_of(e) - ws;
        }
    }
    bench_sort(t, (size_t)A.steps);
    double pd_max = 0;
    MPI_Allreduce(&t_pd, &pd_max, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0)
        printf("RESULT step %s: %.2f ms per step (median of %d, slowest rank), %.1f host waits per step (rank 0); "
               "params_done %.1f ms, %llu host waits\n",
               v->name, t[A.steps / 2] * 1e3, A.steps, (double)wsum / A.steps, pd_max * 1e3, w_pd);
    free(t);
    free(h);
    zero_engine_destroy(e);
}

static void step_part(void) {
    static const variant V[] = {
        {"stage2 device grads, overlap_comm off, before (ZERO_CUDA_ALLOC_SYNC=1 ZERO_BUCKET_HOST_WAIT=1)", 1, 0, 0},
        {"stage2 device grads, overlap_comm off, after", 0, 0, 0},
        {"stage2 device grads, overlap_comm on", 0, 1, 0},
        {"stage2 host grads, overlap_comm off, before (ZERO_CUDA_ALLOC_SYNC=1 ZERO_BUCKET_HOST_WAIT=1)", 1, 0, 1},
        {"stage2 host grads, overlap_comm off, after", 0, 0, 1},
    };
    cudaStream_t compute;
    CK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
    float *init = calloc((size_t)A.numel, sizeof(float));
    float **hg = calloc((size_t)A.params, sizeof *hg);
    for (int p = 0; p < A.params; p++) hg[p] = calloc((size_t)A.numel, sizeof(float));
    if (rank == 0 && world == 1)
        printf("NOTE NCCL world size 1: no bucket is reduced (nothing to exchange), so overlap_comm off and on wait "
               "alike here; issue 35's per-bucket wait shows with mpirun -np <GPUs> on two or more GPUs\n");
    for (size_t i = 0; i < sizeof V / sizeof V[0]; i++) step_variant(&V[i], compute, init, hg);
    for (int p = 0; p < A.params; p++) free(hg[p]);
    free(hg);
    free(init);
    CK(cudaStreamDestroy(compute));
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--allocs")) A.allocs = atoi(v);
        else if (!strcmp(k, "--alloc-kb")) A.alloc_kb = atoi(v);
        else if (!strcmp(k, "--spin-us")) A.spin_us = atof(v);
        else if (!strcmp(k, "--params")) A.params = atoi(v);
        else if (!strcmp(k, "--numel")) A.numel = atol(v);
        else if (!strcmp(k, "--bucket")) A.bucket = atol(v);
        else if (!strcmp(k, "--layer-us")) A.layer_us = atof(v);
        else if (!strcmp(k, "--steps")) A.steps = atoi(v);
        else {
            if (rank == 0) fprintf(stderr, "unknown option %s\n", k);
            MPI_Finalize();
            return 2;
        }
    }
    if (A.allocs < 1 || A.alloc_kb < 1 || A.params < 1 || A.numel < 1 || A.steps < 1) {
        if (rank == 0) fprintf(stderr, "bench_gpu_waits: counts must be positive\n");
        MPI_Finalize();
        return 2;
    }
    char why[256] = "";
    int ngpu = zero_cuda_device_count(why, sizeof why), any = 0;
    MPI_Allreduce(&ngpu, &any, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (any == 0) {
        if (rank == 0) printf("SKIPPED bench_gpu_waits: no usable GPU (%s)\n", why);
        MPI_Finalize();
        return 0;
    }
    int khz = 0;
    CK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
    if (khz > 0) cycles_per_us = khz / 1000.0;
    if (rank == 0)
        printf("bench_gpu_waits: %d rank(s), %d GPU(s) on rank 0; host waits = the host blocking on libzero's stream "
               "or an NCCL event\n",
               world, ngpu);
    alloc_part();
    step_part();
    MPI_Finalize();
    return 0;
}
