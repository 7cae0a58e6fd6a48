/* (libzero 1.10) A run with fewer experts loads an MoE checkpoint: each
 * rank's experts are found by name, and the experts no rank of the new run
 * holds are not loaded -- said by a warning on global rank 0 naming how
 * many and the first, not silently.  One mpirun of 4 ranks:
 *
 *  1. 4 ranks (stage2, SGD): a dense param and expert "expert<c>.w"/".b"
 *     with color c = rank % 2 (expert-DP groups of 2); 2 steps; saved.
 *  2. ranks 0-1 (stage1) both hold expert 0 only (one expert-DP group of
 *     2): the load succeeds, every rank's params are bitwise the saved
 *     ones of expert 0 (and the dense param), and rank 0 warns that 2
 *     expert parameters are held by no rank, the first 'expert1.w';
 *  3. the same 2 ranks holding expert 0 and expert 1 (color rank): no
 *     warning, each rank bitwise its expert.
 * Usage: test_moe_ckpt_prune DIR   (under mpirun -np 4) */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_check.h"
#include "host_util.h"
#include "zero.h"

enum { ND = 40, NW = 24, NB = 5 };
static int g_rank;
static char warned[2048];

static void log_fn(void *u, zero_log_level lvl, int rank, const char *msg) {
    (void)u;
    (void)rank;
    if (lvl <= ZERO_LOG_WARN && strstr(msg, "held by no rank")) snprintf(warned, sizeof warned, "%s", msg);
}

typedef struct net {
    zero_engine *e;
    zero_param *p[3];
} net;

static uint64_t numel_of(int k) { return k == 0 ? ND : k == 1 ? NW : NB; }

static int make(net *N, MPI_Comm comm, const char *plugin, int color) {
    const char *cfg = "{\"train_micro_batch_size_per_gpu\": 1, \"gradient_clipping\": 0,"
                      " \"optimizer\": {\"type\": \"SGD\", \"params\": {\"lr\": 0.1, \"momentum\": 0.9}},"
                      " \"zero_optimization\": {\"stage\": 2}}";
    char err[1024] = "";
    zero_engine_options o = ZERO_ENGINE_OPTIONS_INIT;
    o.config_json = cfg;
    o.comm_kind = ZERO_COMM_MPI;
    o.comm = &comm;
    o.plugin = plugin;
    o.log_fn = log_fn;
    memset(N, 0, sizeof *N);
    zero_status s = zero_engine_create(&o, &N->e, err, sizeof err);
    CHECK(s == ZERO_OK, "create: %s", err);
    if (s != ZERO_OK) return -1;
    zero_group_desc g = ZERO_GROUP_DESC_INIT;
    g.group = 1;
    g.expert_color = color;
    CHECK_EQ_INT(zero_set_group(N->e, &g), ZERO_OK);
    float *v[3];
    for (int k = 0; k < 3; k++) {
        v[k] = malloc(numel_of(k) * sizeof(float));
        for (uint64_t i = 0; i < numel_of(k); i++) v[k][i] = 0.01f * (float)i + (k ? 0.5f * (float)color : 0.0f);
        char name[32];
        if (k == 0) snprintf(name, sizeof name, "dense.w");
        else snprintf(name, sizeof name, "expert%d.%s", color, k == 1 ? "w" : "b");
        zero_param_desc d = ZERO_PARAM_DESC_INIT;
        d.name = name;
        d.data = v[k];
        d.numel = numel_of(k);
        d.group = k ? 1 : 0;
        CHECK_EQ_INT(zero_register_param(N->e, &d, &N->p[k]), ZERO_OK);
    }
    s = zero_params_done(N->e);
    for (int k = 0; k < 3; k++) free(v[k]);
    CHECK(s == ZERO_OK, "params_done: %s", zero_last_error(N->e));
    return s == ZERO_OK ? 0 : -1;
}

static void step(net *N, int t) {
    for (int k = 2; k >= 0; k--) {
        void *buf;
        CHECK_EQ_INT(zero_grad_buffer(N->e, N->p[k], &buf), ZERO_OK);
        float *g = buf;
        for (uint64_t i = 0; i < numel_of(k); i++) g[i] += (float)((int)((i * 3 + (uint64_t)k + (uint64_t)t) % 7) - 3) / 8.0f;
        CHECK_EQ_INT(zero_on_grad_ready(N->e, N->p[k], NULL), ZERO_OK);
    }
    zero_step_result r = ZERO_STEP_RESULT_INIT;
    CHECK_EQ_INT(zero_step(N->e, NULL, &r), ZERO_OK);
}

/* Params concatenated (caller frees). */
static float *snap(net *N) {
    float *out = malloc((ND + NW + NB) * sizeof *out), *at = out;
    for (int k = 0; k < 3; k++) {
        void *ptr;
        CHECK_EQ_INT(zero_gather(N->e, &N->p[k], 1, &ptr), ZERO_OK);
        memcpy(at, ptr, numel_of(k) * sizeof *at);
        at += numel_of(k);
        CHECK_EQ_INT(zero_release(N->e, &N->p[k], 1), ZERO_OK);
    }
    return out;
}

int main(int argc, char **argv) {
    int size;
    check_mpi_init(&argc, &argv, &g_rank, &size);
    if (argc != 2 || size != 4) {
        if (g_rank == 0) fprintf(stderr, "usage: mpirun -np 4 test_moe_ckpt_prune DIR\n");
        MPI_Finalize();
        return 2;
    }
    const char *dir = argv[1];
    if (g_rank == 0) th_remove_dir(dir);
    MPI_Barrier(MPI_COMM_WORLD);
    /* 1. saved at 4 ranks; every rank's params by color, gathered to all */
    float saved[2][ND + NW + NB];
    net S;
    if (make(&S, MPI_COMM_WORLD, "stage2", g_rank % 2) == 0) {
        step(&S, 0);
        step(&S, 1);
        CHECK(zero_save(S.e, dir) == ZERO_OK, "save: %s", zero_last_error(S.e));
        float *mine = snap(&S), all[4][ND + NW + NB];
        MPI_Allgather(mine, ND + NW + NB, MPI_FLOAT, all, ND + NW + NB, MPI_FLOAT, MPI_COMM_WORLD);
        memcpy(saved[0], all[0], sizeof saved[0]);
        memcpy(saved[1], all[1], sizeof saved[1]);
        free(mine);
    }
    if (S.e) zero_engine_destroy(S.e);
    MPI_Comm two = check_mpi_first(2);
    for (int all_experts = 0; two != MPI_COMM_NULL && all_experts <= 1; all_experts++) {
        const int color = all_experts ? g_rank : 0;
        net N;
        warned[0] = 0;
        if (make(&N, two, "stage1", color) == 0) {
            zero_status s = zero_load(N.e, dir);
            CHECK(s == ZERO_OK, "load (%s): %s", all_experts ? "both experts" : "expert 0 only", zero_last_error(N.e));
            float *got = snap(&N);
            CHECK(memcmp(got, saved[color], sizeof saved[0]) == 0, "rank %d: expert %d's params differ from the saved",
                  g_rank, color);
            free(got);
            if (g_rank == 0 && !all_experts)
                CHECK(strstr(warned, "2 expert parameters of the checkpoint are held by no rank of this run") &&
                          strstr(warned, "the first: 'expert1.w'"),
                      "no warning naming the dropped experts: '%s'", warned);
            if (g_rank == 0 && all_experts) CHECK(!warned[0], "a warning with every expert held: %s", warned);
            if (g_rank == 0) printf("%s: loaded; %s\n", all_experts ? "both experts" : "expert 0 only",
                                    warned[0] ? warned : "no warning");
        }
        if (N.e) zero_engine_destroy(N.e);
    }
    if (two != MPI_COMM_NULL) MPI_Comm_free(&two);
    MPI_Barrier(MPI_COMM_WORLD);
    if (g_rank == 0) th_remove_dir(dir);
    return check_mpi_finish();
}
