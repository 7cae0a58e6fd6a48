/* (libzero 1.10) A checkpoint loads with another pipeline split: the
 * layers move between stages and each stage finds its parameters by name
 * in whichever of the saver's stages held them.  One mpirun of 6 ranks.
 *
 * The model: L = 6 layers, each a weight and a bias ("layer<l>.w",
 * "layer<l>.b", sizes that divide nothing); S stages hold consecutive
 * layers ([s L / S, (s + 1) L / S)).  stage1-pp, AdamW, 2 micro-batches,
 * no clipping; gradients are small dyadic values set by the test from
 * (layer, tensor, element, step, micro-batch), the same on every rank, so
 * a layer's update does not depend on which stage holds it.
 *
 *  1. 2 stages x DP 2 (ranks 0-3) train 2 steps and save.
 *  2. 3 stages x DP 2 (ranks 0-5) load it: each rank's parameters are
 *     bitwise those of a 3 x 2 run that trained the same 2 steps, and after
 *     2 more steps those of a 3 x 2 run of 4 steps (the optimizer states
 *     moved with their layers).
 *  3. plugin stage1 without a pipeline (1 stage) at DP 3 (ranks 0-2): the
 *     same against 1 x 3 runs (relative L2 <= 1e-6 allowed after the steps:
 *     the saver scaled by 1/4, DP 3 scales by float(1/6); measured bitwise).
 *  4. a weights-only load (zero_load_ex) at 3 x 2: the parameters bitwise,
 *     the step count 0; a 1-stage save at DP 2 loads at 2 stages x DP 3
 *     (the other way).
 *  5. refused on every rank, naming the parameter: 3 stages whose last
 *     stage leaves layer 5 out, and 3 stages where two stages both
 *     register layer 2 (ZERO_ERR_MISMATCH); a checkpoint saved inside an
 *     accumulation window (gradients in flight are not resharded).
 * Usage: test_ckpt_resplit DIR   (under mpirun -np 6) */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_check.h"
#include "host_util.h"
#include "zero.h"

enum { L = 6, M = 2 };
static int g_rank, g_size;

static uint64_t numel_of(int l, int j) { return j == 0 ? (uint64_t)(23 + 7 * l) : (uint64_t)(3 + l); }
static float grad_value(int t, int m, int l, int j, uint64_t i) {
    return (float)((int)((i * 5 + (uint64_t)j * 3 + (uint64_t)l * 7 + (uint64_t)t * 2 + (uint64_t)m) % 9) - 4) / 16.0f;
}
static float init_value(int l, int j, uint64_t i) { return (float)(0.01 * (double)i - 0.05 * j + 0.02 * l); }

/* Which layers a stage holds; bad: 1 = the last stage leaves layer L-1 out,
 * 2 = stage 0 also registers layer 2 (the middle stage's first). */
typedef struct net {
    zero_engine *e;
    zero_param *p[2 * L];
    int np, lo, hi, stage;
} net;

static int make(net *N, MPI_Comm comm, int stages, const char *plugin, int bad) {
    char cfg[512], pipe[64] = "", err[1024] = "";
    if (stages > 1) snprintf(pipe, sizeof pipe, ", \"pipeline\": {\"stages\": %d}", stages);
    snprintf(cfg, sizeof cfg,
             "{\"train_micro_batch_size_per_gpu\": 1, \"gradient_accumulation_steps\": %d, \"gradient_clipping\": 0,"
             " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01}},"
             " \"zero_optimization\": {\"stage\": 1, \"reduce_bucket_size\": 16}%s}",
             M, pipe);
    zero_engine_options o = ZERO_ENGINE_OPTIONS_INIT;
    o.config_json = cfg;
    o.comm_kind = ZERO_COMM_MPI;
    o.comm = &comm;
    o.plugin = plugin;
    memset(N, 0, sizeof *N);
    zero_status s = zero_engine_create(&o, &N->e, err, sizeof err);
    CHECK(s == ZERO_OK, "create (%d stages, %s): %s", stages, plugin, err);
    if (s != ZERO_OK) return -1;
    N->stage = stages > 1 ? zero_pipeline_stage(N->e) : 0;
    N->lo = N->stage * L / stages;
    N->hi = (N->stage + 1) * L / stages;
    if (bad == 1 && N->stage == stages - 1) N->hi--;
    int extra = bad == 2 && N->stage == 0 ? 2 : -1;
    float *vals[2 * L + 2]; /* initial values are read at zero_params_done: kept until then */
    int nv = 0;
    for (int l = N->lo; l <= N->hi; l++) {
        int layer = l < N->hi ? l : extra;
        if (layer < 0) continue;
        for (int j = 0; j < 2; j++) {
            uint64_t n = numel_of(layer, j);
            float *v = vals[nv++] = malloc(n * sizeof *v);
            for (uint64_t i = 0; i < n; i++) v[i] = init_value(layer, j, i);
            char name[32];
            snprintf(name, sizeof name, "layer%d.%s", layer, j ? "b" : "w");
            zero_param_desc d = ZERO_PARAM_DESC_INIT;
            d.name = name;
            d.data = v;
            d.numel = n;
            CHECK_EQ_INT(zero_register_param(N->e, &d, &N->p[N->np]), ZERO_OK);
            N->np++;
        }
    }
    s = zero_params_done(N->e);
    for (int k = 0; k < nv; k++) free(vals[k]);
    CHECK(s == ZERO_OK, "params_done: %s", zero_last_error(N->e));
    return s == ZERO_OK ? 0 : -1;
}

/* The layer of param k of this rank (registration order: w, b per layer;
 * case 5's duplicated layer 2 last). */
static int layer_of(const net *N, int k) {
    int l = N->lo + k / 2;
    return l < N->hi ? l : 2;
}

static void train(net *N, int t0, int t1, int m_stop) {
    for (int t = t0; t < t1; t++)
        for (int m = 0; m < M && !(t == t1 - 1 && m == m_stop); m++) {
            for (int k = N->np - 1; k >= 0; k--) {
                void *buf;
                CHECK_EQ_INT(zero_grad_buffer(N->e, N->p[k], &buf), ZERO_OK);
                float *g = buf;
                const int l = layer_of(N, k), j = k % 2;
                for (uint64_t i = 0; i < numel_of(l, j); i++) g[i] += grad_value(t, m, l, j, i);
                CHECK_EQ_INT(zero_on_grad_ready(N->e, N->p[k], NULL), ZERO_OK);
            }
            zero_step_result r = ZERO_STEP_RESULT_INIT;
            CHECK_EQ_INT(zero_step(N->e, NULL, &r), ZERO_OK);
        }
}

/* This rank's parameters, concatenated (caller frees). */
static float *snap(net *N, size_t *n) {
    *n = 0;
    for (int k = 0; k < N->np; k++) *n += numel_of(layer_of(N, k), k % 2);
    float *out = malloc(*n * sizeof *out), *at = out;
    for (int k = 0; k < N->np; k++) {
        void *ptr;
        CHECK_EQ_INT(zero_gather(N->e, &N->p[k], 1, &ptr), ZERO_OK);
        const size_t c = numel_of(layer_of(N, k), k % 2);
        memcpy(at, ptr, c * sizeof *at);
        at += c;
        CHECK_EQ_INT(zero_release(N->e, &N->p[k], 1), ZERO_OK);
    }
    return out;
}

/* Reference: `steps` steps at this split from the start. */
static float *reference(MPI_Comm c, int stages, const char *plugin, int steps, size_t *n) {
    net R;
    if (make(&R, c, stages, plugin, 0) != 0) return NULL;
    train(&R, 0, steps, -1);
    float *v = snap(&R, n);
    zero_engine_destroy(R.e);
    return v;
}

static void save(const char *dir, int stages, const char *plugin, int dp, int steps, int m_stop) {
    MPI_Comm c = check_mpi_first(stages * dp);
    if (c != MPI_COMM_NULL) {
        net N;
        if (make(&N, c, stages, plugin, 0) == 0) {
            train(&N, 0, steps, m_stop);
            zero_status s = zero_save(N.e, dir);
            CHECK(s == ZERO_OK, "save %dx%d: %s", stages, dp, zero_last_error(N.e));
        }
        if (N.e) zero_engine_destroy(N.e);
        MPI_Comm_free(&c);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

/* Load `dir` (saved at step `at`) at stages x dp, compare with references
 * at that split, train 2 more steps, compare again. */
static void resplit(const char *dir, int at, int stages, const char *plugin, int dp, double tol) {
    MPI_Comm c = check_mpi_first(stages * dp);
    if (c != MPI_COMM_NULL) {
        size_t n0 = 0, n1 = 0, n = 0;
        float *ref0 = reference(c, stages, plugin, at, &n0), *ref1 = reference(c, stages, plugin, at + 2, &n1);
        net N;
        if (ref0 && ref1 && make(&N, c, stages, plugin, 0) == 0) {
            zero_status s = zero_load(N.e, dir);
            CHECK(s == ZERO_OK, "load at %dx%d (%s): %s", stages, dp, plugin, zero_last_error(N.e));
            float *got = snap(&N, &n);
            CHECK(n == n0 && memcmp(got, ref0, n * sizeof *got) == 0,
                  "%dx%d rank %d: the loaded parameters differ from a run at this split (rel L2 %.3g)", stages, dp,
                  g_rank, n == n0 ? th_rel_l2(got, ref0, n) : -1.0);
            free(got);
            train(&N, at, at + 2, -1);
            got = snap(&N, &n);
            const double d = n == n1 ? th_rel_l2(got, ref1, n) : 1.0;
            CHECK(d <= tol, "%dx%d rank %d: 2 steps after the load, rel L2 %.3g from an uninterrupted run (> %.0e)",
                  stages, dp, g_rank, d, tol);
            if (g_rank == 0)
                printf("%d stages x DP %d (%s): loaded bitwise, 2 steps later rel L2 %.3g%s\n", stages, dp, plugin, d,
                       d == 0 ? " (bitwise)" : "");
            free(got);
        }
        if (N.e) zero_engine_destroy(N.e);
        free(ref0);
        free(ref1);
        MPI_Comm_free(&c);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

/* A weights-only load (zero_load_ex) at stages x dp: the parameters are
 * those of a run at this split trained `at` steps, the step count 0. */
static void weights_only(const char *dir, int at, int stages, int dp) {
    MPI_Comm c = check_mpi_first(stages * dp);
    if (c != MPI_COMM_NULL) {
        size_t n0 = 0, n = 0;
        float *ref0 = reference(c, stages, "stage1-pp", at, &n0);
        net N;
        if (ref0 && make(&N, c, stages, "stage1-pp", 0) == 0) {
            zero_load_options lo = ZERO_LOAD_OPTIONS_INIT;
            lo.weights_only = 1;
            zero_status s = zero_load_ex(N.e, dir, &lo);
            CHECK(s == ZERO_OK, "weights-only load at %dx%d: %s", stages, dp, zero_last_error(N.e));
            zero_engine_info info = ZERO_ENGINE_INFO_INIT;
            CHECK_EQ_INT(zero_engine_info_get(N.e, &info), ZERO_OK);
            CHECK(info.global_step == 0, "weights only at %dx%d: step %llu, expected 0", stages, dp,
                  (unsigned long long)info.global_step);
            float *got = snap(&N, &n);
            CHECK(n == n0 && memcmp(got, ref0, n * sizeof *got) == 0,
                  "%dx%d rank %d: the weights-only parameters differ from a run at this split", stages, dp, g_rank);
            if (g_rank == 0) printf("%d stages x DP %d: weights only, bitwise, step 0\n", stages, dp);
            free(got);
        }
        if (N.e) zero_engine_destroy(N.e);
        free(ref0);
        MPI_Comm_free(&c);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

static void refused(const char *dir, int stages, int dp, int bad, const char *needle, const char *what) {
    MPI_Comm c = check_mpi_first(stages * dp);
    if (c != MPI_COMM_NULL) {
        net N;
        if (make(&N, c, stages, "stage1-pp", bad) == 0) {
            zero_status s = zero_load(N.e, dir);
            const char *msg = zero_last_error(N.e);
            CHECK(s != ZERO_OK && strstr(msg, needle), "%s: %s (%s), expected '%s'", what, zero_status_string(s), msg,
                  needle);
            if (g_rank == 0) printf("refused, %s: %s\n", what, msg);
        }
        if (N.e) zero_engine_destroy(N.e);
        MPI_Comm_free(&c);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

int main(int argc, char **argv) {
    check_mpi_init(&argc, &argv, &g_rank, &g_size);
    if (argc != 2 || g_size != 6) {
        if (g_rank == 0) fprintf(stderr, "usage: mpirun -np 6 test_ckpt_resplit DIR\n");
        MPI_Finalize();
        return 2;
    }
    char a[600], b[600], mid[600];
    snprintf(a, sizeof a, "%s/2x2", argv[1]);
    snprintf(b, sizeof b, "%s/1x2", argv[1]);
    snprintf(mid, sizeof mid, "%s/mid", argv[1]);
    if (g_rank == 0) th_remove_dir(argv[1]);
    MPI_Barrier(MPI_COMM_WORLD);
    save(a, 2, "stage1-pp", 2, 2, -1);
    resplit(a, 2, 3, "stage1-pp", 2, 0.0);
    resplit(a, 2, 1, "stage1", 3, 1e-6);
    weights_only(a, 2, 3, 2);
    save(b, 1, "stage1", 2, 2, -1);
    resplit(b, 2, 2, "stage1-pp", 3, 1e-6);
    refused(a, 3, 2, 1, "parameter 'layer5.w' (pipeline stage 1 of 2) is registered by 0 of this run's 3 pipeline stages",
            "layer 5 on no stage");
    refused(a, 3, 2, 2, "parameter 'layer2.w' (pipeline stage 0 of 2) is registered by 2 of this run's 3 pipeline stages",
            "layer 2 on two stages");
    save(mid, 2, "stage1-pp", 2, 2, 1); /* stopped after micro-batch 0 of step 1's window */
    refused(mid, 3, 2, 0, "saved in the middle of an accumulation window", "a mid-window checkpoint");
    MPI_Barrier(MPI_COMM_WORLD);
    if (g_rank == 0) th_remove_dir(argv[1]);
    return check_mpi_finish();
}
