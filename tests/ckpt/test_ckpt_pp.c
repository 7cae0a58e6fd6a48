/* stage1-pp checkpoints reshard across data-parallel sizes (same pipeline
 * split), one mpirun of 6 ranks, on test_pp_engine's tiny two-stage model
 * (gradients written by the test: param j of stage s, element i, step t,
 * micro-batch m gets a small dyadic value, the same on every DP rank, so
 * the mean gradient is the same at any DP size):
 *
 *  1. 2 stages x DP 2 (ranks 0-3) train 2 steps (AdamW, 2 micro-batches)
 *     and save, with (1.8) a client state that every rank of both stages
 *     gets back from each load below, the converted checkpoint's too;
 *     each stage's parameters are kept aside;
 *  2. the checkpoint is loaded by 2 x 1 (ranks 0-1) and 2 x 3 (ranks 0-5):
 *     right after the load each stage's parameters are bitwise the saved
 *     ones; 2 more steps are then compared with an uninterrupted 4-step run
 *     at the loading size: bitwise at 2 x 1 (every sum and the 1/(D*M)
 *     scaling are exact there), relative L2 <= 1e-6 allowed at 2 x 3 (the
 *     uninterrupted run scales by float(1/6) in its first 2 steps, the
 *     saver by 1/4; measured: bitwise too);
 *  3. the same checkpoint loaded with another pipeline split (1 stage)
 *     whose stage holds only stage 0's parameters is ZERO_ERR_MISMATCH
 *     naming a parameter no stage registered (1.10: another split loads,
 *     by name, when the stages together register every parameter once:
 *     test_ckpt_resplit.c);
 *  4. a 2 x 2 save inside an accumulation window (after micro-batch 0 of 2)
 *     resumes bitwise at 2 x 2 (the window's gradient is in the checkpoint)
 *     and is refused at 2 x 1 (gradients in flight are not resharded).
 *  5. offline: `zero-ckpt convert` of the 2 x 2 checkpoint to DP 3 (the
 *     pipeline split kept) verifies, and, marked "reshardable": 0 (so only
 *     the native path can load it), loads at 2 x 3 with the same checks as
 *     2.; converting it to stage2 is refused (no pipeline support).
 *  6. (1.9) a weights-only load (zero_load_options.weights_only) of the
 *     2 x 2 checkpoint at 2 x 3 after a step of its own: each stage's
 *     parameters are the saved ones, the step state 0, and 2 steps later
 *     they are those of a 2 x 3 run whose stages registered the saved
 *     values (relative L2 <= 1e-6 as in 2.; measured bitwise);
 * Usage: test_ckpt_pp DIR ZERO_CKPT   (under mpirun -np 6) */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_check.h"
#include "host_util.h"
#include "zero.h"

enum { P = 2, NPAR = 2, M = 2, SAVE_AT = 2, STEPS = 4 };
static int g_rank, g_size;

static uint64_t numel_of(int s, int j) { return j == 0 ? (uint64_t)(37 + 11 * s) : (uint64_t)(5 + s); }
static float grad_value(int t, int m, int s, int j, uint64_t i) {
    return (float)((int)((i * 7 + (uint64_t)j * 3 + (uint64_t)s * 5 + (uint64_t)t * 2 + (uint64_t)m) % 9) - 4) /
           16.0f;
}

typedef struct tiny {
    zero_engine *e;
    zero_param *p[NPAR];
    int stage;
} tiny;

/* init: NULL, or per pipeline stage the concatenated initial values (p0 then p1). */
static int tiny_make(tiny *T, MPI_Comm comm, int stages, float *const *init) {
    char cfg[512], err[1024] = "";
    snprintf(cfg, sizeof cfg,
             "{\"train_micro_batch_size_per_gpu\": 1, \"gradient_accumulation_steps\": %d, \"gradient_clipping\": 0,"
             " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01}},"
             " \"zero_optimization\": {\"stage\": 1, \"reduce_bucket_size\": 16}, \"pipeline\": {\"stages\": %d}}",
             M, stages);
    zero_engine_options o = ZERO_ENGINE_OPTIONS_INIT;
    o.config_json = cfg;
    o.comm_kind = ZERO_COMM_MPI;
    o.comm = &comm;
    o.plugin = "stage1-pp";
    zero_status s = zero_engine_create(&o, &T->e, err, sizeof err);
    CHECK(s == ZERO_OK, "create: %s", err);
    if (s != ZERO_OK) return -1;
    T->stage = zero_pipeline_stage(T->e);
    float *inits[NPAR];
    for (int j = 0; j < NPAR; j++) {
        uint64_t n = numel_of(T->stage, j);
        inits[j] = calloc(n, sizeof(float));
        for (uint64_t i = 0; i < n; i++)
            inits[j][i] = init ? init[T->stage][(j ? numel_of(T->stage, 0) : 0) + i] : (float)(0.01 * (double)i - 0.1 * j);
        char name[32];
        snprintf(name, sizeof name, "stage%d.p%d", T->stage, j);
        zero_param_desc d = ZERO_PARAM_DESC_INIT;
        d.name = name;
        d.data = inits[j];
        d.numel = n;
        CHECK_EQ_INT(zero_register_param(T->e, &d, &T->p[j]), ZERO_OK);
    }
    s = zero_params_done(T->e);
    CHECK(s == ZERO_OK, "params_done: %s", zero_last_error(T->e));
    for (int j = 0; j < NPAR; j++) free(inits[j]);
    return s == ZERO_OK ? 0 : -1;
}

/* Micro-batches [m0, m1) of step t. */
static void micro(tiny *T, int t, int m0, int m1, zero_step_result *res) {
    for (int m = m0; m < m1; m++) {
        for (int j = NPAR - 1; j >= 0; j--) {
            void *buf;
            CHECK_EQ_INT(zero_grad_buffer(T->e, T->p[j], &buf), ZERO_OK);
            float *g = buf;
            for (uint64_t i = 0; i < numel_of(T->stage, j); i++) g[i] += grad_value(t, m, T->stage, j, i) * (1 + m);
            CHECK_EQ_INT(zero_on_grad_ready(T->e, T->p[j], NULL), ZERO_OK);
        }
        CHECK_EQ_INT(zero_step(T->e, NULL, res), ZERO_OK);
    }
}

static void train(tiny *T, int t0, int t1) {
    for (int t = t0; t < t1; t++) {
        zero_step_result res = ZERO_STEP_RESULT_INIT;
        for (int m = 0; m < M; m++) {
            for (int j = NPAR - 1; j >= 0; j--) {
                void *buf;
                CHECK_EQ_INT(zero_grad_buffer(T->e, T->p[j], &buf), ZERO_OK);
                float *g = buf;
                for (uint64_t i = 0; i < numel_of(T->stage, j); i++) g[i] += grad_value(t, m, T->stage, j, i);
                CHECK_EQ_INT(zero_on_grad_ready(T->e, T->p[j], NULL), ZERO_OK);
            }
            CHECK_EQ_INT(zero_step(T->e, NULL, &res), ZERO_OK);
        }
        CHECK_EQ_INT(res.taken, 1);
    }
}

/* This stage's parameters, concatenated (caller frees). */
static float *snap(tiny *T, size_t *n) {
    void *ptrs[NPAR];
    *n = numel_of(T->stage, 0) + numel_of(T->stage, 1);
    float *out = malloc(*n * sizeof(float));
    CHECK_EQ_INT(zero_gather(T->e, T->p, NPAR, ptrs), ZERO_OK);
    memcpy(out, ptrs[0], numel_of(T->stage, 0) * sizeof(float));
    memcpy(out + numel_of(T->stage, 0), ptrs[1], numel_of(T->stage, 1) * sizeof(float));
    CHECK_EQ_INT(zero_release(T->e, T->p, NPAR), ZERO_OK);
    return out;
}

static double rel_l2(const float *a, const float *b, size_t n) {
    double d = 0, r = 0;
    for (size_t i = 0; i < n; i++) {
        d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        r += (double)b[i] * b[i];
    }
    return r > 0 ? sqrt(d / r) : sqrt(d);
}

static const char PP_CLIENT[] = "pipeline client state: step 6";

static void save_2x2(const char *root, float **saved, size_t *nsaved) {
    MPI_Comm c = check_mpi_first(4);
    float *mine = NULL;
    size_t n = 0;
    int stage = -1;
    if (c != MPI_COMM_NULL) {
        tiny T = {0};
        if (tiny_make(&T, c, P, NULL) == 0) {
            train(&T, 0, SAVE_AT);
            mine = snap(&T, &n);
            stage = T.stage;
            /* (1.8) with a client state: global rank 0 writes it, every stage's ranks get it back */
            zero_save_options o = ZERO_SAVE_OPTIONS_INIT;
            o.client_state = PP_CLIENT;
            o.client_state_bytes = sizeof PP_CLIENT;
            zero_status s = zero_save_ex(T.e, root, &o);
            CHECK(s == ZERO_OK, "2x2 save: %s", zero_last_error(T.e));
        }
        if (T.e) zero_engine_destroy(T.e);
        MPI_Comm_free(&c);
    }
    /* each stage's saved parameters to every rank (from ranks 0 and 2) */
    for (int s = 0; s < P; s++) {
        int from = s * 2;
        unsigned long long len = g_rank == from ? (unsigned long long)n : 0;
        MPI_Bcast(&len, 1, MPI_UNSIGNED_LONG_LONG, from, MPI_COMM_WORLD);
        nsaved[s] = (size_t)len;
        saved[s] = malloc(len * sizeof(float) + 1);
        if (g_rank == from && stage == s) memcpy(saved[s], mine, len * sizeof(float));
        MPI_Bcast(saved[s], (int)len, MPI_FLOAT, from, MPI_COMM_WORLD);
    }
    free(mine);
}

static void resume_case(const char *root, int dp, float **saved, const size_t *nsaved) {
    MPI_Comm c = check_mpi_first(P * dp);
    if (c != MPI_COMM_NULL) {
        tiny U = {0}, R = {0};
        size_t nu = 0, nl = 0, nr = 0;
        float *u = NULL, *l = NULL, *r = NULL;
        if (tiny_make(&U, c, P, NULL) == 0) {
            train(&U, 0, STEPS);
            u = snap(&U, &nu);
        }
        if (tiny_make(&R, c, P, NULL) == 0) {
            zero_status s = zero_load(R.e, root);
            CHECK(s == ZERO_OK, "2x2 -> 2x%d load: %s", dp, zero_last_error(R.e));
            const void *cs = NULL;
            uint64_t cn = 0;
            CHECK(zero_client_state(R.e, &cs, &cn) == ZERO_OK && cn == sizeof PP_CLIENT &&
                      !memcmp(cs, PP_CLIENT, sizeof PP_CLIENT),
                  "2x2 -> 2x%d: rank %d (stage %d): the client state did not come back (%llu bytes)", dp, g_rank,
                  R.stage, (unsigned long long)cn);
            l = snap(&R, &nl);
            CHECK(nl == nsaved[R.stage] && !memcmp(l, saved[R.stage], nl * sizeof(float)),
                  "2x2 -> 2x%d: rank %d (stage %d): parameters after the load differ from the saved ones", dp, g_rank,
                  R.stage);
            train(&R, SAVE_AT, STEPS);
            r = snap(&R, &nr);
        }
        if (u && r && nu == nr) {
            double d = rel_l2(r, u, nu), dmax = d;
            MPI_Allreduce(&d, &dmax, 1, MPI_DOUBLE, MPI_MAX, c);
            if (dp == 1) CHECK(dmax == 0, "2x2 -> 2x1: resumed differs from the uninterrupted 2x1 run: rel L2 %.3e", dmax);
            else CHECK(dmax <= 1e-6, "2x2 -> 2x%d: rel L2 %.3e > 1e-6", dp, dmax);
            if (g_rank == 0)
                printf("stage1-pp 2x2 -> 2x%d: loaded parameters == saved (bitwise); after %d more steps vs the "
                       "uninterrupted 2x%d run: rel L2 %.3e%s\n",
                       dp, STEPS - SAVE_AT, dp, dmax, dmax == 0 ? " (bitwise)" : "");
        }
        free(u), free(l), free(r);
        if (U.e) zero_engine_destroy(U.e);
        if (R.e) zero_engine_destroy(R.e);
        MPI_Comm_free(&c);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

/* Case 6: a weights-only load at 2 x dp, against a run from the saved values. */
static void weights_only_case(const char *root, int dp, float **saved, const size_t *nsaved) {
    MPI_Comm c = check_mpi_first(P * dp);
    if (c != MPI_COMM_NULL) {
        tiny W = {0}, F = {0};
        size_t nw = 0, nf = 0;
        float *w = NULL, *f = NULL;
        if (tiny_make(&W, c, P, NULL) == 0) {
            train(&W, 0, 1); /* a step of its own: its states and counters must go */
            zero_load_options o = ZERO_LOAD_OPTIONS_INIT;
            o.weights_only = 1;
            zero_status s = zero_load_ex(W.e, root, &o);
            CHECK(s == ZERO_OK, "2x2 -> 2x%d weights-only load: %s", dp, zero_last_error(W.e));
            zero_engine_info in = ZERO_ENGINE_INFO_INIT;
            CHECK(zero_engine_info_get(W.e, &in) == ZERO_OK && in.global_step == 0 && in.micro_step == 0,
                  "2x2 -> 2x%d weights only: rank %d: step %llu after the load", dp, g_rank,
                  (unsigned long long)in.global_step);
            w = snap(&W, &nw);
            CHECK(nw == nsaved[W.stage] && !memcmp(w, saved[W.stage], nw * sizeof(float)),
                  "2x2 -> 2x%d weights only: rank %d (stage %d): parameters differ from the saved ones", dp, g_rank,
                  W.stage);
            free(w);
            train(&W, 0, 2);
            w = snap(&W, &nw);
        }
        if (tiny_make(&F, c, P, saved) == 0) {
            train(&F, 0, 2);
            f = snap(&F, &nf);
        }
        if (w && f && nw == nf) {
            double d = rel_l2(w, f, nw), dmax = d;
            MPI_Allreduce(&d, &dmax, 1, MPI_DOUBLE, MPI_MAX, c);
            CHECK(dmax <= 1e-6, "2x2 -> 2x%d weights only: 2 steps later rel L2 %.3e from a run that registered the "
                  "saved values", dp, dmax);
            if (g_rank == 0)
                printf("stage1-pp 2x2 -> 2x%d weights only: loaded == saved, step 0; 2 steps later vs a run from the "
                       "saved values: rel L2 %.3e%s\n", dp, dmax, dmax == 0 ? " (bitwise)" : "");
        }
        free(w), free(f);
        if (W.e) zero_engine_destroy(W.e);
        if (F.e) zero_engine_destroy(F.e);
        MPI_Comm_free(&c);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

/* Inside an accumulation window: the window's gradient is in the
 * checkpoint (stage1-pp.grads), so 2 x 2 resumes bitwise; another DP size
 * refuses it (gradients in flight are not resharded). */
static void mid_window(const char *root) {
    MPI_Comm c = check_mpi_first(4);
    if (c != MPI_COMM_NULL) {
        tiny A = {0}, B = {0};
        size_t na = 0, nb = 0;
        float *a = NULL, *b = NULL;
        zero_step_result res = ZERO_STEP_RESULT_INIT;
        if (tiny_make(&A, c, P, NULL) == 0) {
            train(&A, 0, 1);
            micro(&A, 1, 0, 1, &res);
            CHECK(res.boundary == 0, "micro-batch 0 of 2 is not a boundary");
            zero_status s = zero_save(A.e, root);
            CHECK(s == ZERO_OK, "mid-window save: %s", zero_last_error(A.e));
            micro(&A, 1, 1, M, &res);
            train(&A, 2, 3);
            a = snap(&A, &na);
        }
        if (tiny_make(&B, c, P, NULL) == 0) {
            zero_status s = zero_load(B.e, root);
            CHECK(s == ZERO_OK, "mid-window load: %s", zero_last_error(B.e));
            micro(&B, 1, 1, M, &res);
            CHECK(res.taken == 1, "the resumed window's boundary step was not taken");
            train(&B, 2, 3);
            b = snap(&B, &nb);
        }
        CHECK(a && b && na == nb && !memcmp(a, b, na * sizeof(float)),
              "rank %d: resumed inside the window differs from the uninterrupted run", g_rank);
        if (g_rank == 0 && a && b) printf("stage1-pp 2x2 saved inside a window, resumed: bitwise\n");
        free(a), free(b);
        if (A.e) zero_engine_destroy(A.e);
        if (B.e) zero_engine_destroy(B.e);
        MPI_Comm_free(&c);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    c = check_mpi_first(2);
    if (c != MPI_COMM_NULL) {
        tiny T = {0};
        if (tiny_make(&T, c, P, NULL) == 0) {
            zero_status s = zero_load(T.e, root);
            const char *msg = zero_last_error(T.e);
            CHECK(s == ZERO_ERR_UNSUPPORTED && strstr(msg, "middle of an accumulation window"),
                  "mid-window 2x2 loaded at 2x1: %s (%s)", zero_status_string(s), msg);
            if (g_rank == 0) printf("mid-window at another DP size: %s\n", msg);
        }
        if (T.e) zero_engine_destroy(T.e);
        MPI_Comm_free(&c);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

static void other_split(const char *root) {
    MPI_Comm c = check_mpi_first(2);
    if (c != MPI_COMM_NULL) {
        tiny T = {0};
        if (tiny_make(&T, c, 1, NULL) == 0) {
            zero_status s = zero_load(T.e, root);
            const char *msg = zero_last_error(T.e);
            CHECK(s == ZERO_ERR_MISMATCH && strstr(msg, "parameter 'stage1.p0' (pipeline stage 1 of 2) is registered by 0 "
                                                       "of this run's 1 pipeline stages"),
                  "2x2 loaded with 1 pipeline stage: %s (%s)", zero_status_string(s), msg);
            if (g_rank == 0) printf("another pipeline split: %s\n", msg);
        }
        if (T.e) zero_engine_destroy(T.e);
        MPI_Comm_free(&c);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

int main(int argc, char **argv) {
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    if (argc != 3 || g_size != 6) {
        if (g_rank == 0) fprintf(stderr, "usage: mpirun -np 6 test_ckpt_pp DIR ZERO_CKPT\n");
        MPI_Finalize();
        return 2;
    }
    const char *root = argv[1];
    if (g_rank == 0) th_remove_dir(root);
    MPI_Barrier(MPI_COMM_WORLD);
    float *saved[P] = {0};
    size_t nsaved[P] = {0};
    save_2x2(root, saved, nsaved);
    resume_case(root, 1, saved, nsaved);
    resume_case(root, 3, saved, nsaved);
    weights_only_case(root, 3, saved, nsaved);
    other_split(root);
    char conv[600];
    snprintf(conv, sizeof conv, "%s-x3", root);
    if (g_rank == 0) {
        char cmd[3000];
        th_remove_dir(conv);
        snprintf(cmd, sizeof cmd, "'%s' convert '%s' '%s' --ranks 3 && '%s' verify '%s' && "
                 "sed -i 's/\"reshardable\": 1,/\"reshardable\": 0,/' '%s'/step-2/manifest.json && "
                 "\"$CKPT_RESEAL\" '%s'/step-2/manifest.json", /* its own checksum, after the deliberate edit */
                 argv[2], root, conv, argv[2], conv, conv, conv);
        CHECK(system(cmd) == 0, "%s", cmd);
        snprintf(cmd, sizeof cmd, "'%s' convert '%s' '%s-bad' --ranks 3 --plugin stage2 2>&1 | "
                 "grep -q \"plugin 'stage2' cannot run with pipeline parallelism\"", argv[2], root, root);
        CHECK(system(cmd) == 0, "converting a pipeline checkpoint to stage2 is not refused by name");
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (g_rank == 0) printf("offline: zero-ckpt convert 2x2 -> 2x3, loaded natively:\n");
    resume_case(conv, 3, saved, nsaved);
    char mid[600];
    snprintf(mid, sizeof mid, "%s-mid", root);
    if (g_rank == 0) th_remove_dir(mid);
    MPI_Barrier(MPI_COMM_WORLD);
    mid_window(mid);
    for (int s = 0; s < P; s++) free(saved[s]);
    MPI_Barrier(MPI_COMM_WORLD);
    if (g_rank == 0) th_remove_dir(root), th_remove_dir(mid), th_remove_dir(conv);
    int fails = check_failures_, all = 0;
    MPI_Allreduce(&fails, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Finalize();
    return all ? 1 : 0;
}
