/* Device-resident training through the public ABI: engines created with
 * device_kind = ZERO_DEVICE_CUDA, one rank per GPU under mpirun (np 1: one
 * GPU, NCCL world size 1).  Parameters, gradients and optimizer state live
 * in device memory (the CUDA arenas); collectives run on NCCL; the
 * optimizer, norms and the bucket engine's adds run as CUDA kernels.
 *
 * Registration (ABI decision, docs/gpu.md): zero_param_desc.device says where
 * `data` (and `grad`) live.  Here even params come from cudaMalloc'd device
 * memory and odd ones from host memory: both are read once at
 * zero_params_done through the device copy.  zero_gather and
 * zero_grad_buffer hand out device pointers.
 *
 * For stage0..stage3 and offload, with the communicator made by libzero
 * (ZERO_COMM_AUTO: NCCL over MPI) and with the host's own ncclComm_t:
 *  - the run equals the same stage on a CPU engine over MPI BITWISE
 *    (gradients are multiples of 1/64, so every reduction order gives the
 *    same sums; the CUDA kernels are built with --fmad=false and add the
 *    norm in the CPU's order);
 *  - every stage matches stage0 within fp32 rounding (DESIGN.md section 9);
 *  - gathered parameters and gradient buffers are device pointers, and the
 *    device tier of zero_memory_stats holds the model states;
 *  - (1.10) a zero_params_write of p1 after the first window (from device
 *    memory on the GPU) is part of every run, so it is compared too;
 *  - (1.13) a host write of p3 through zero_gather's pointer after the
 *    first window is refused at the next boundary on every rank, on the
 *    CPU engine and on the GPU (fingerprints taken by the device).
 * Without a usable GPU the program prints why and exits 77 (Skipped). */
#include "gpu_engine_fixture.h"
#include "zero.h"

static int rank_ = 0, world_ = 1, ordinal_ = 0;

static int is_device_ptr(const void *p) {
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return a.type == cudaMemoryTypeDevice;
}

enum { ON_CPU = 0, ON_GPU_AUTO = 1, ON_GPU_HOST_NCCL = 2 };

/* Train; returns the final parameters (host copy, all params concatenated). */
/* write_host (1.13): after the first window rank 0's host writes p3[0]
 * through the pointer zero_gather handed out (a kernel would; here a
 * cudaMemcpy on the GPU), before releasing it: the second boundary's
 * zero_step must fail with ZERO_ERR_STATE on every rank (the host-write
 * check: on the GPU, fingerprints taken by the device), and no output is
 * returned. */
static float *run(const char *plugin, int stage, int mode, ncclComm_t *nc, size_t *total, int write_host) {
    char json[640];
    snprintf(json, sizeof json,
             "{\"train_micro_batch_size_per_gpu\": 1, \"gradient_accumulation_steps\": %d,"
             " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01, \"weight_decay\": 0.1}},"
             " \"zero_optimization\": {\"stage\": %d, \"reduce_bucket_size\": 400, \"overlap_comm\": true%s}}",
             GAS, stage,
             strcmp(plugin, "offload") == 0 ? ", \"offload_optimizer\": {\"device\": \"cpu\", \"pin_memory\": true}"
                                            : "");
    MPI_Comm mc = MPI_COMM_WORLD;
    zero_engine_options o = ZERO_ENGINE_OPTIONS_INIT;
    o.config_json = json;
    o.plugin = plugin;
    o.device_kind = mode == ON_CPU ? ZERO_DEVICE_CPU : ZERO_DEVICE_CUDA;
    o.device_index = ordinal_;
    o.comm_kind = mode == ON_CPU ? ZERO_COMM_MPI : mode == ON_GPU_AUTO ? ZERO_COMM_AUTO : ZERO_COMM_NCCL;
    o.comm = mode == ON_CPU ? (void *)&mc : mode == ON_GPU_HOST_NCCL ? (void *)nc : NULL;
    const char *where = mode == ON_CPU ? "CPU/MPI" : mode == ON_GPU_AUTO ? "CUDA/NCCL(auto)" : "CUDA/host ncclComm";
    zero_engine *e = NULL;
    char err[512] = "";
    zero_status s = zero_engine_create(&o, &e, err, sizeof err);
    CHECK(s == ZERO_OK, "%s on %s: zero_engine_create: %s", plugin, where, err);
    if (s != ZERO_OK) return NULL;
    zero_param *h[NP];
    void *dev_init[NP] = {0};
    float *host_init[NP] = {0};
    *total = 0;
    for (int p = 0; p < NP && s == ZERO_OK; ++p) {
        float *init = host_init[p] = malloc(sizes[p] * 4);
        for (size_t i = 0; i < sizes[p]; ++i) init[i] = exact_init(p, i);
        char name[16];
        snprintf(name, sizeof name, "p%d", p);
        zero_param_desc d = ZERO_PARAM_DESC_INIT;
        d.name = name;
        d.numel = sizes[p];
        d.data = init;
        if (mode != ON_CPU && p % 2 == 0) { /* from device memory */
            dev_init[p] = gpu_upload(init, sizes[p] * 4);
            d.data = dev_init[p];
            d.device = ZERO_DEVICE_CUDA;
        }
        s = zero_register_param(e, &d, &h[p]);
        CHECK(s == ZERO_OK, "%s on %s: register %s: %s", plugin, where, name, zero_last_error(e));
        *total += sizes[p];
    }
    if (s == ZERO_OK) s = zero_params_done(e);
    CHECK(s == ZERO_OK, "%s on %s: params_done: %s", plugin, where, zero_last_error(e));
    for (int p = 0; p < NP; ++p) {
        free(host_init[p]);
        if (dev_init[p]) CUDA_OK(cudaFree(dev_init[p]));
    }
    float *tmp = malloc(1000 * 4);
    for (int gm = 0; gm < STEPS * GAS && s == ZERO_OK; ++gm) {
        if (gm == GAS) { /* (1.10) after the first window: p1 from the last rank, from device memory on the GPU */
            for (size_t i = 0; i < sizes[1]; ++i) tmp[i] = 0.125f * (float)(i % 17) - 1.0f;
            void *dv = mode != ON_CPU ? gpu_upload(tmp, sizes[1] * 4) : NULL;
            const void *val = dv ? dv : tmp;
            s = zero_params_write(e, &h[1], rank_ == world_ - 1 ? &val : NULL, 1, world_ - 1);
            CHECK(s == ZERO_OK, "%s on %s: zero_params_write: %s", plugin, where, zero_last_error(e));
            if (dv) CUDA_OK(cudaFree(dv));
        }
        void *ptrs[NP];
        if ((s = zero_gather(e, h, NP, ptrs)) != ZERO_OK) break; /* forward would read them */
        if (mode != ON_CPU)
            for (int p = 0; p < NP; ++p) CHECK(is_device_ptr(ptrs[p]), "%s: gathered p%d is not device memory", plugin, p);
        if (write_host && gm == GAS && rank_ == 0) {
            const float v = 42.0f;
            if (mode == ON_CPU) memcpy(ptrs[3], &v, sizeof v);
            else CUDA_OK(cudaMemcpy(ptrs[3], &v, sizeof v, cudaMemcpyHostToDevice));
        }
        zero_release(e, h, NP);
        for (int p = NP - 1; p >= 0 && s == ZERO_OK; --p) { /* backward: last layer first */
            void *buf = NULL;
            if ((s = zero_grad_buffer(e, h[p], &buf)) != ZERO_OK) break;
            if (mode == ON_CPU) {
                float *g = buf;
                for (size_t i = 0; i < sizes[p]; ++i) g[i] += exact_grad(rank_, gm, p, i);
            } else { /* a backward kernel would add in place; the test goes through the host */
                CHECK(is_device_ptr(buf), "%s: grad buffer of p%d is not device memory", plugin, p);
                gpu_download(tmp, buf, sizes[p] * 4);
                for (size_t i = 0; i < sizes[p]; ++i) tmp[i] += exact_grad(rank_, gm, p, i);
                CUDA_OK(cudaMemcpy(buf, tmp, sizes[p] * 4, cudaMemcpyHostToDevice));
            }
            s = zero_on_grad_ready(e, h[p], NULL);
        }
        zero_step_result res = ZERO_STEP_RESULT_INIT;
        if (s == ZERO_OK) s = zero_step(e, NULL, &res);
        if (write_host && gm == 2 * GAS - 1) {
            CHECK(s == ZERO_ERR_STATE, "%s on %s: the host wrote p3 through zero_gather's pointer: the boundary's "
                  "zero_step returned %s (%s), expected ZERO_ERR_STATE",
                  plugin, where, zero_status_string(s), zero_last_error(e));
            if (rank_ == 0 && s == ZERO_ERR_STATE) CHECK_STR_CONTAINS(zero_last_error(e), "'p3'");
            if (rank_ == 0 && s == ZERO_ERR_STATE)
                printf("world %d %s on %s: a host write through zero_gather's pointer refused at the boundary\n", world_,
                       plugin, where);
            free(tmp);
            zero_engine_destroy(e);
            return NULL;
        }
    }
    free(tmp);
    CHECK(s == ZERO_OK, "%s on %s: training: %s", plugin, where, zero_last_error(e));
    if (mode != ON_CPU) {
        zero_memory_stats ms = ZERO_MEMORY_STATS_INIT;
        zero_memory_stats_get(e, &ms);
        CHECK(ms.current_total[ZERO_TIER_DEVICE] >= *total * 4 / (size_t)(stage == 3 ? world_ : 1),
              "%s on %s: only %llu bytes in the device tier", plugin, where,
              (unsigned long long)ms.current_total[ZERO_TIER_DEVICE]);
    }
    float *out = NULL;
    if (s == ZERO_OK) {
        void *ptrs[NP];
        if (zero_gather(e, h, NP, ptrs) == ZERO_OK) {
            out = malloc(*total * 4);
            size_t off = 0;
            for (int p = 0; p < NP; ++p) {
                if (mode == ON_CPU)
                    memcpy(out + off, ptrs[p], sizes[p] * 4);
                else
                    gpu_download(out + off, ptrs[p], sizes[p] * 4);
                off += sizes[p];
            }
            zero_release(e, h, NP);
        }
    }
    zero_engine_destroy(e);
    return out;
}

int main(int argc, char **argv) {
    ncclComm_t nc;
    ncclResult_t nr;
    if (gpu_engine_setup(&argc, &argv, "gpu_engine_device", &rank_, &world_, &ordinal_, &nc, &nr) == GPU_SKIP)
        return GPU_SKIP;
    static const struct { const char *plugin; int stage; } runs[] = {
        {"stage0", 0}, {"stage1", 1}, {"stage2", 2}, {"stage3", 3}, {"offload", 2}};
    float *ref = NULL;
    size_t total = 0;
    for (size_t r = 0; r < sizeof runs / sizeof runs[0] && nr == ncclSuccess; ++r) {
        float *cpu = run(runs[r].plugin, runs[r].stage, ON_CPU, &nc, &total, 0);
        for (int mode = ON_GPU_AUTO; mode <= ON_GPU_HOST_NCCL; ++mode) {
            float *gpu = run(runs[r].plugin, runs[r].stage, mode, &nc, &total, 0);
            if (cpu && gpu) {
                CHECK(memcmp(cpu, gpu, total * 4) == 0, "%s: CUDA engine (%s) differs from the CPU engine (world %d)",
                      runs[r].plugin, mode == ON_GPU_AUTO ? "auto NCCL" : "host ncclComm", world_);
                double rel = ref ? th_rel_l2(gpu, ref, total) : 0.0;
                CHECK(rel <= 1e-6, "%s on the GPU vs stage0: relative L2 %.3e", runs[r].plugin, rel);
                if (rank_ == 0)
                    printf("world %d %s on CUDA (%s): == CPU engine bitwise, vs stage0 rel L2 %.2e\n", world_,
                           runs[r].plugin, mode == ON_GPU_AUTO ? "auto NCCL" : "host ncclComm", rel);
            }
            free(gpu);
        }
        /* (1.13) the host-write check on the GPU, as on the CPU engine */
        free(run(runs[r].plugin, runs[r].stage, ON_CPU, &nc, &total, 1));
        free(run(runs[r].plugin, runs[r].stage, ON_GPU_AUTO, &nc, &total, 1));
        if (!ref && cpu) {
            ref = cpu;
            cpu = NULL;
        }
        free(cpu);
    }
    free(ref);
    if (nr == ncclSuccess) ncclCommDestroy(nc);
    int rc = check_finish();
    MPI_Finalize();
    return rc;
}
