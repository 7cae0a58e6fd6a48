/* The stage plugins through the public ABI on an NCCL communicator the host
 * made itself (comm_kind ZERO_COMM_NCCL, comm = &ncclComm_t), one rank per
 * GPU, under mpirun (np 1: NCCL world size 1).  For stage0..stage3:
 *  - the NCCL run gives bitwise the parameters of the same run on MPI
 *    (gradients are multiples of 1/64, so every reduction is exact in any
 *    order, and clipping is off so no norm enters the update);
 *  - every stage matches stage0 within fp32 rounding (DESIGN.md section 9).
 * Parameters live in host memory (device_kind CPU): the NCCL backend stages
 * them through device scratch.  This is what a host gets today with its
 * ncclComm_t; device-resident parameters need the engine's CUDA wiring. */
#include "gpu_engine_fixture.h"
#include "zero.h"

static int rank_ = 0, world_ = 1, ordinal_ = 0;

/* Train and return the final parameters (all params concatenated), or NULL. */
static float *run(int stage, int use_nccl, ncclComm_t *nc, size_t *total) {
    char json[512];
    snprintf(json, sizeof json,
             "{\"train_micro_batch_size_per_gpu\": 1, \"gradient_accumulation_steps\": %d,"
             " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01, \"weight_decay\": 0.1}},"
             " \"zero_optimization\": {\"stage\": %d, \"reduce_bucket_size\": 400, \"overlap_comm\": true}}",
             GAS, stage);
    char plugin[16];
    snprintf(plugin, sizeof plugin, "stage%d", stage);
    MPI_Comm mc = MPI_COMM_WORLD;
    zero_engine_options o = ZERO_ENGINE_OPTIONS_INIT;
    o.config_json = json;
    o.plugin = plugin;
    o.comm_kind = use_nccl ? ZERO_COMM_NCCL : ZERO_COMM_MPI;
    o.comm = use_nccl ? (void *)nc : (void *)&mc;
    zero_engine *e = NULL;
    char err[512] = "";
    zero_status s = zero_engine_create(&o, &e, err, sizeof err);
    CHECK(s == ZERO_OK, "%s on %s: zero_engine_create: %s", plugin, use_nccl ? "NCCL" : "MPI", err);
    if (s != ZERO_OK) return NULL;
    CHECK(zero_world_size(e) == world_ && zero_rank(e) == rank_, "engine rank/size");
    zero_param *h[NP];
    float *inits[NP] = {0};
    *total = 0;
    for (int p = 0; p < NP; ++p) {
        float *init = inits[p] = malloc(sizes[p] * 4);
        for (size_t i = 0; i < sizes[p]; ++i) init[i] = exact_init(p, i);
        char name[16];
        snprintf(name, sizeof name, "p%d", p);
        zero_param_desc d = ZERO_PARAM_DESC_INIT;
        d.name = name;
        d.data = init;
        d.numel = sizes[p];
        s = zero_register_param(e, &d, &h[p]);
        CHECK(s == ZERO_OK, "register %s: %s", name, zero_last_error(e));
        *total += sizes[p];
        if (s != ZERO_OK) break;
    }
    float *out = NULL;
    if (s == ZERO_OK) s = zero_params_done(e); /* reads the initial values */
    for (int p = 0; p < NP; ++p) free(inits[p]);
    CHECK(s == ZERO_OK, "params_done: %s", zero_last_error(e));
    for (int gm = 0; gm < STEPS * GAS && s == ZERO_OK; ++gm) {
        void *ptrs[NP];
        if ((s = zero_gather(e, h, NP, ptrs)) != ZERO_OK) break; /* forward would read them */
        zero_release(e, h, NP);
        for (int p = NP - 1; p >= 0 && s == ZERO_OK; --p) { /* backward: last layer first */
            void *buf = NULL;
            if ((s = zero_grad_buffer(e, h[p], &buf)) != ZERO_OK) break;
            float *g = buf;
            for (size_t i = 0; i < sizes[p]; ++i) g[i] += exact_grad(rank_, gm, p, i);
            s = zero_on_grad_ready(e, h[p], NULL);
        }
        zero_step_result res = ZERO_STEP_RESULT_INIT;
        if (s == ZERO_OK) s = zero_step(e, NULL, &res);
    }
    CHECK(s == ZERO_OK, "%s on %s: training: %s", plugin, use_nccl ? "NCCL" : "MPI", zero_last_error(e));
    if (s == ZERO_OK) {
        void *ptrs[NP];
        if (zero_gather(e, h, NP, ptrs) == ZERO_OK) {
            out = malloc(*total * 4);
            size_t off = 0;
            for (int p = 0; p < NP; ++p) memcpy(out + off, ptrs[p], sizes[p] * 4), off += sizes[p];
            zero_release(e, h, NP);
        }
    }
    zero_engine_destroy(e);
    return out;
}

int main(int argc, char **argv) {
    /* The host's own NCCL setup, as a trainer would do it. */
    ncclComm_t nc;
    ncclResult_t nr;
    if (gpu_engine_setup(&argc, &argv, "gpu_engine_stages", &rank_, &world_, &ordinal_, &nc, &nr) == GPU_SKIP)
        return GPU_SKIP;
    if (nr == ncclSuccess) {
        float *ref = NULL;
        size_t total = 0;
        for (int stage = 0; stage <= 3; ++stage) {
            float *on_mpi = run(stage, 0, &nc, &total);
            float *on_nccl = run(stage, 1, &nc, &total);
            if (on_mpi && on_nccl) {
                CHECK(memcmp(on_mpi, on_nccl, total * 4) == 0, "stage%d: NCCL and MPI runs differ (world %d)", stage, world_);
                if (stage == 0) {
                    size_t off = 0, moved = 0; /* training really happened */
                    for (int p = 0; p < NP; ++p)
                        for (size_t i = 0; i < sizes[p]; ++i)
                            moved += on_nccl[off++] != exact_init(p, i);
                    CHECK(moved > total / 2, "stage0: only %zu of %zu params moved", moved, total);
                    ref = on_nccl;
                    on_nccl = NULL;
                } else if (ref) {
                    double rel = th_rel_l2(on_nccl, ref, total);
                    CHECK(rel <= 1e-6, "stage%d vs stage0 on NCCL: relative L2 %.3e", stage, rel);
                    if (rank_ == 0) printf("world %d stage%d on NCCL: == MPI bitwise, vs stage0 rel L2 %.2e\n", world_, stage, rel);
                }
            }
            free(on_mpi);
            free(on_nccl);
        }
        free(ref);
        ncclCommDestroy(nc);
    }
    int rc = check_finish();
    MPI_Finalize();
    return rc;
}
