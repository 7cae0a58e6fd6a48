/* What stage 3 (and the bucket engine) tell the user (issue 34 items 7, 11).
 * Usage (under mpirun -np N, N >= 2):
 *   test_stage3_messages quiet
 *     A C host that registers a stacked tensor (zero_register_stacked) and
 *     two plain params, trains with stage 3 and DEFAULT stage-3 keys,
 *     evaluates and "generates" (zero_set_phase, other and varying gather
 *     orders) between steps: not one WARN line, and the implicit gather cap
 *     (what partitioning saves: on this model smaller than the stack) is
 *     reported once per engine at DEBUG level.  The same with
 *     stage3_max_live_parameters given as 1e9 explicitly.  Then the key set
 *     below the stack's size: exactly one WARN, in elements, naming the key
 *     and the user's value.  Each stage-3 run ends bitwise equal to stage0's.
 *   test_stage3_messages uneven
 *     The last rank stops one micro-step before the others (gas 1 and 2),
 *     then gathers everything as a host does at the end: ZERO_ERR_MISMATCH
 *     on every rank, saying the ranks gathered different NUMBERS of params
 *     and that every rank must run the same number of micro-steps (before:
 *     "ranks gather different params at gather position 2 ... '(nothing)'").
 *   test_stage3_messages twice
 *     Backward twice without zero_step (a host's second hook round): stage 2
 *     and 3 refuse zero_grad_buffer naming the parameter (before: "param
 *     3"), stage 0 refuses zero_on_grad_ready naming it. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "host_util.h"
#include "s3_host.h"

static int rank_ = 0, world_ = 1;

/* ---- quiet ---------------------------------------------------------------- */

typedef struct logs {
    int warn, cap_notes;
    char first_warn[512];
} logs;

static void log_cb(void *user, zero_log_level lvl, int rank, const char *msg) {
    logs *l = user;
    if (lvl <= ZERO_LOG_WARN) {
        if (!l->warn) snprintf(l->first_warn, sizeof l->first_warn, "%s", msg);
        if (lvl == ZERO_LOG_WARN) l->warn++;
        fprintf(stderr, "[zero rank %d] %s: %s\n", rank, lvl == ZERO_LOG_ERROR ? "ERROR" : "WARN", msg);
    } else if (lvl == ZERO_LOG_DEBUG && strstr(msg, "implicit")) {
        l->cap_notes++;
    }
}

enum { Q_L = 4, Q_SLICE = 1024, Q_EMBED = 256, Q_HEAD = 512, Q_STEPS = 6, Q_GAS = 2 };
#define Q_TOTAL (Q_EMBED + Q_L * Q_SLICE + Q_HEAD)

/* The host's gradient: a function of the step, the element and the value it
 * was given by zero_gather (so a wrong gather would show). */
static float q_grad(int micro, size_t k, float v) {
    return (float)sin(0.37 * (micro + 1) + 0.013 * (double)k) + 0.1f * v;
}

static void add_grad(float *buf, const float *val, size_t n, size_t off, int micro) {
    for (size_t k = 0; k < n && buf; k++) buf[k] += q_grad(micro, off + k, val[k]);
}

/* Gather, copy out (copy[i]: numel[i] floats), release: n params. */
static zero_status use(zero_engine *e, zero_param **h, uint32_t n, float **copy, const size_t *numel) {
    void *p[3];
    zero_status s = zero_gather(e, h, n, p);
    if (s != ZERO_OK) return s;
    for (uint32_t i = 0; i < n && copy; i++) memcpy(copy[i], p[i], numel[i] * sizeof(float));
    return zero_release(e, h, n);
}

/* One training run; final params into out (Q_TOTAL floats).  Returns 1 if
 * every call succeeded. */
static int q_train(const char *plugin, const char *extra_keys, logs *lg, float *out) {
    char cfg[768];
    snprintf(cfg, sizeof cfg,
             "{\"train_micro_batch_size_per_gpu\": 1, \"gradient_accumulation_steps\": %d,"
             " \"gradient_clipping\": 1.0,"
             " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01, \"weight_decay\": 0.01}},"
             " \"zero_optimization\": {\"stage\": 3%s%s}}",
             Q_GAS, extra_keys[0] ? ", " : "", extra_keys);
    zero_engine *e = NULL;
    char msg[1024];
    memset(lg, 0, sizeof *lg);
    zero_status s = th_engine_create(cfg, plugin, 0, log_cb, lg, &e, msg, sizeof msg);
    CHECK(s == ZERO_OK, "%s: %s", plugin, msg);
    if (s != ZERO_OK) return 0;
    static float init[Q_TOTAL];
    for (int k = 0; k < Q_TOTAL; k++) init[k] = 0.02f * (float)((k * 7) % 41) - 0.4f;
    zero_param *h[3];
    zero_param_desc d = ZERO_PARAM_DESC_INIT;
    d.name = "embed";
    d.data = init;
    d.numel = Q_EMBED;
    CHECK_EQ_INT(zero_register_param(e, &d, &h[0]), ZERO_OK);
    d.name = "blocks";
    d.data = init + Q_EMBED;
    d.numel = Q_L * Q_SLICE;
    CHECK_EQ_INT(zero_register_stacked(e, &d, Q_L, &h[1]), ZERO_OK);
    d.name = "head";
    d.data = init + Q_EMBED + Q_L * Q_SLICE;
    d.numel = Q_HEAD;
    CHECK_EQ_INT(zero_register_param(e, &d, &h[2]), ZERO_OK);
    int ok = (s = zero_params_done(e)) == ZERO_OK;
    CHECK(ok, "%s: zero_params_done: %s", plugin, zero_last_error(e));
    static float emb[Q_EMBED], blk[Q_L * Q_SLICE], head[Q_HEAD];
    static const size_t n_emb = Q_EMBED, n_head = Q_HEAD, n_all[3] = {Q_EMBED, Q_L * Q_SLICE, Q_HEAD};
    for (int micro = 0; ok && micro < Q_STEPS * Q_GAS; micro++) {
        /* forward: embed, the stack, head */
        ok = use(e, &h[0], 1, NULL, NULL) == ZERO_OK && use(e, &h[1], 1, NULL, NULL) == ZERO_OK && use(e, &h[2], 1, NULL, NULL) == ZERO_OK;
        /* backward: head, the stack slice by slice (last layer first), embed */
        void *p = NULL, *buf = NULL;
        float *cp[1];
        cp[0] = head;
        ok = ok && use(e, &h[2], 1, cp, &n_head) == ZERO_OK && zero_grad_buffer(e, h[2], &buf) == ZERO_OK;
        if (ok) add_grad(buf, head, Q_HEAD, Q_EMBED + Q_L * Q_SLICE, micro);
        ok = ok && zero_on_grad_ready(e, h[2], NULL) == ZERO_OK;
        ok = ok && zero_gather(e, &h[1], 1, &p) == ZERO_OK;
        if (ok) memcpy(blk, p, sizeof blk);
        for (int l = Q_L - 1; ok && l >= 0; l--) {
            ok = zero_slice_grad_buffer(e, h[1], (uint32_t)l, &buf) == ZERO_OK;
            if (ok) add_grad(buf, blk + (size_t)l * Q_SLICE, Q_SLICE, Q_EMBED + (size_t)l * Q_SLICE, micro);
            ok = ok && zero_on_slice_ready(e, h[1], (uint32_t)l, NULL) == ZERO_OK;
        }
        ok = ok && zero_release(e, &h[1], 1) == ZERO_OK;
        cp[0] = emb;
        ok = ok && use(e, &h[0], 1, cp, &n_emb) == ZERO_OK && zero_grad_buffer(e, h[0], &buf) == ZERO_OK;
        if (ok) add_grad(buf, emb, Q_EMBED, 0, micro);
        ok = ok && zero_on_grad_ready(e, h[0], NULL) == ZERO_OK;
        zero_step_result r = ZERO_STEP_RESULT_INIT;
        ok = ok && zero_step(e, NULL, &r) == ZERO_OK;
        if (ok && micro % Q_GAS == Q_GAS - 1) {
            /* evaluation: forward only, everything at once */
            ok = zero_set_phase(e, "eval") == ZERO_OK && use(e, h, 3, NULL, NULL) == ZERO_OK;
            /* generation: a varying number of passes over the stack and head */
            ok = ok && zero_set_phase(e, "generate") == ZERO_OK && use(e, &h[0], 1, NULL, NULL) == ZERO_OK;
            for (int t = 0; ok && t <= micro % 3; t++)
                ok = use(e, &h[1], 1, NULL, NULL) == ZERO_OK && use(e, &h[2], 1, NULL, NULL) == ZERO_OK;
            ok = ok && zero_set_phase(e, "train") == ZERO_OK;
        }
        CHECK(ok, "%s: micro-step %d: %s", plugin, micro, zero_last_error(e));
    }
    float *cp3[3] = {out, out + Q_EMBED, out + Q_EMBED + Q_L * Q_SLICE};
    if (ok) {
        ok = zero_set_phase(e, "final") == ZERO_OK && use(e, h, 3, cp3, n_all) == ZERO_OK;
        CHECK(ok, "%s: final gather: %s", plugin, zero_last_error(e));
    }
    zero_engine_destroy(e);
    return ok;
}

static void quiet(void) {
    /* DEBUG lines reach the callback (counted, not printed) */
    setenv("ZERO_LOG_LEVEL", "debug", 1);
    static float ref[Q_TOTAL], got[Q_TOTAL];
    logs lg;
    int ok0 = q_train("stage0", "", &lg, ref);
    CHECK(lg.warn == 0, "stage0: %d WARN lines, the first: %s", lg.warn, lg.first_warn);
    /* default keys, and the default given explicitly */
    const char *const keys[2] = {"", "\"stage3_max_live_parameters\": 1e9"};
    for (int k = 0; k < 2; k++) {
        int ok = q_train("stage3", keys[k], &lg, got);
        CHECK(lg.warn == 0, "stage3 {%s}: %d WARN lines, the first: %s", keys[k], lg.warn, lg.first_warn);
        /* the stack (4096 elements) is above what partitioning saves at N = 2, 3 */
        CHECK(lg.cap_notes == 1, "stage3 {%s}: the implicit cap was noted %d times at DEBUG (want once)", keys[k],
              lg.cap_notes);
        CHECK(ok && ok0 && memcmp(ref, got, sizeof ref) == 0, "stage3 {%s}: not bitwise stage0", keys[k]);
        if (rank_ == 0) printf("N=%d stage3 {%s}: %d WARN, implicit cap noted %d time(s) at DEBUG, %s\n", world_,
                               keys[k], lg.warn, lg.cap_notes,
                               memcmp(ref, got, sizeof ref) == 0 ? "bitwise stage0" : "DIFFERENT");
    }
    /* a limit the user set, below the stack's size: one warning, in elements */
    int ok = q_train("stage3", "\"stage3_max_live_parameters\": 1000", &lg, got);
    CHECK(lg.warn == 1, "max_live 1000: %d WARN lines (want 1), the first: %s", lg.warn, lg.first_warn);
    CHECK_STR_CONTAINS(lg.first_warn, "stage3_max_live_parameters");
    CHECK_STR_CONTAINS(lg.first_warn, "1000");
    CHECK_STR_CONTAINS(lg.first_warn, "elements");
    CHECK(strstr(lg.first_warn, "bytes") == NULL, "in bytes: %s", lg.first_warn);
    CHECK(ok && memcmp(ref, got, sizeof ref) == 0, "max_live 1000: not bitwise stage0");
    if (rank_ == 0) printf("N=%d stage3 max_live 1000: %s\n", world_, lg.first_warn);
}

/* ---- uneven --------------------------------------------------------------- */

static void uneven(void) {
    setenv("ZERO_STAGE3_TIMEOUT_S", "30", 1);
    for (int gas = 1; gas <= 2; gas++) {
        s3_cfg c = s3_default_cfg();
        c.steps = 3;
        c.gas = gas;
        c.short_rank = world_ - 1;
        s3_out o;
        s3_run(&c, &o);
        CHECK(o.status == ZERO_ERR_MISMATCH, "gas %d: %s (%s), expected ZERO_ERR_MISMATCH", gas,
              zero_status_string(o.status), o.error);
        CHECK_STR_CONTAINS(o.error, "different numbers of params");
        CHECK_STR_CONTAINS(o.error, "same number of micro-steps");
        /* who: the rank that stopped early gathers everything at once */
        char who[64];
        snprintf(who, sizeof who, "rank %d", world_ - 1);
        CHECK_STR_CONTAINS(o.error, who);
        CHECK(strstr(o.error, "(nothing)") == NULL, "%s", o.error);
        if (rank_ == 0) printf("N=%d gas %d, rank %d one micro-step short: %s\n", world_, gas, world_ - 1, o.error);
        int failed = o.status == ZERO_ERR_MISMATCH, all = 0;
        MPI_Allreduce(&failed, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        CHECK(all == 1, "gas %d: not every rank reported the mismatch", gas);
        s3_out_free(&o);
    }
}

/* ---- twice ---------------------------------------------------------------- */

static void twice(void) {
    const char *const plugins[3] = {"stage0", "stage2", "stage3"};
    for (int k = 0; k < 3; k++) {
        char cfg[256];
        snprintf(cfg, sizeof cfg,
                 "{\"train_micro_batch_size_per_gpu\": 1, \"optimizer\": {\"type\": \"SGD\", \"params\": {\"lr\": 0.1}},"
                 " \"zero_optimization\": {\"stage\": %c}}",
                 plugins[k][5]);
        zero_engine *e = NULL;
        char msg[1024];
        zero_status s = th_engine_create(cfg, plugins[k], 0, NULL, NULL, &e, msg, sizeof msg);
        CHECK(s == ZERO_OK, "%s: %s", plugins[k], msg);
        if (s != ZERO_OK) continue;
        static float w[64], b[8];
        zero_param *h[2];
        zero_param_desc d = ZERO_PARAM_DESC_INIT;
        d.name = "layer.weight";
        d.data = w;
        d.numel = 64;
        CHECK_EQ_INT(zero_register_param(e, &d, &h[0]), ZERO_OK);
        d.name = "layer.bias";
        d.data = b;
        d.numel = 8;
        CHECK_EQ_INT(zero_register_param(e, &d, &h[1]), ZERO_OK);
        CHECK_EQ_INT(zero_params_done(e), ZERO_OK);
        zero_status bad = ZERO_OK;
        for (int round = 0; round < 2 && bad == ZERO_OK; round++) /* backward twice: bias, then weight */
            for (int i = 1; i >= 0 && bad == ZERO_OK; i--) {
                void *buf = NULL;
                if ((bad = zero_grad_buffer(e, h[i], &buf)) != ZERO_OK) break;
                ((float *)buf)[0] += 1.0f;
                bad = zero_on_grad_ready(e, h[i], NULL);
            }
        const char *m = zero_last_error(e);
        CHECK(bad == ZERO_ERR_STATE || bad == ZERO_ERR_DUPLICATE, "%s: backward twice gave %s (%s)", plugins[k],
              zero_status_string(bad), m);
        CHECK_STR_CONTAINS(m, "layer.bias");
        CHECK(strstr(m, "param 1 ") == NULL || strstr(m, "'layer.bias' (param 1)") != NULL, "%s", m);
        if (rank_ == 0) printf("N=%d %s, backward twice: %s: %s\n", world_, plugins[k], zero_status_string(bad), m);
        zero_engine_destroy(e);
    }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &world_);
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "quiet")) quiet();
    else if (!strcmp(mode, "uneven")) uneven();
    else if (!strcmp(mode, "twice")) twice();
    else CHECK(0, "usage: test_stage3_messages quiet|uneven|twice (got '%s')", mode);
    int rc = check_finish();
    MPI_Finalize();
    return rc;
}
