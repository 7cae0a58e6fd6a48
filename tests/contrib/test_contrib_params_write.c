/* zero_params_write (1.10) with the contrib plugins (plugins-contrib: mics,
 * zeropp, onebit, built against the installed libzero by contrib.build and
 * found on ZERO_PLUGIN_PATH), under mpirun, fp32 and bf16 -- the contrib
 * counterpart of tests/stages/test_params_write.c, on its model (six
 * params whose sizes straddle every partition) with four more, and an
 * eleventh that is a ZERO_PARAM_HOST_OWNED array where the plugin keeps
 * full copies and a plain param where it partitions them:
 *  - a run trains 2 steps, goes through the refused calls (nothing
 *    written, the verdict agreed on every rank), writes three params and
 *    the eleventh from the last rank (the others pass a NULL `values`) and
 *    trains 2 more.  Right after the write zero_gather shows the new values
 *    bitwise on every rank and every other param unchanged bitwise, twice
 *    in a row (with stage3_max_reuse_distance 0 the second gather of a
 *    large param is a fresh fetch: ZeRO++'s hpZ secondary chunk, MiCS's
 *    replicated blocks; the small ones are persistent: refetched after the
 *    write), and one step later the written params are near the written
 *    values, not the old ones (the fp32 master was written too);
 *  - bitwise: MiCS at every shard size that divides N (1: N replicas of
 *    every share) and ZeRO++ exact and with hpZ end where stage 0 with the
 *    same write ends; 1-bit Adam in its warm-up ends where stage 0's AdamW
 *    without bias correction does;
 *  - writing every param's current values changes nothing (fp32): MiCS
 *    with replicas, ZeRO++ with hpZ, 1-bit Adam in its compressed phase end
 *    bitwise where the same run without the write ends;
 *  - ZeRO++ with qwZ (alone with hpZ, and with qgZ and hpZ): the gathers
 *    after the write are the written values quantized (within the int8
 *    bound of abi/zero_plugin.h), the same bits in both gathers, the others
 *    unchanged bitwise; 1-bit Adam written in its compressed phase shows
 *    the values and trains on from them.
 * With --template (tests/kit): examples/plugin-template's template-dp
 * instead, bitwise stage 0 with the same write, and the identity write. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host_util.h"
#include "params_write_host.h"
#include "mpi_check.h"

static int rank_ = 0, world_ = 1;

/* tests/stages' six params, and four of 500 elements: with them the
 * gathering plugins' budget (what partitioning saves, at N >= 3) holds
 * the params under the persistence threshold besides two of the largest,
 * so those stay gathered and are refreshed after the write */
enum { NP = 10, STEPS = 2 };
static const uint64_t SIZES[NP] = {1, 7, 31, 217, 899, 13, 500, 500, 500, 500};
static const char *NAMES[NP] = {"gain", "w_a", "b_a", "w_b", "w_c", "b_c", "w_d", "w_e", "w_f", "w_g"};
/* what the write writes: gain, w_b and b_c (and the host-owned param) */
static const int WRITTEN[3] = {0, 3, 5};
enum { HOST_N = 45 };

/* The optimizer a run uses. */
enum { OPT_ADAMW, OPT_ADAMW_NO_BC /* 1-bit Adam's warm-up, exactly */, OPT_ONEBIT };

typedef struct run_spec {
    const char *plugin;
    char zo[200]; /* more zero_optimization keys ("" for none) */
    int stage;
    int bf16;
    int write;    /* 0: none, 1: new values, 2: every param's current values */
    int refusals; /* exercise the refused calls on the way */
    int opt;      /* OPT_* */
    int freeze;   /* OneBitAdam's freeze_step */
    int quant;    /* qwZ: gathered values are the written ones quantized */
} run_spec;

static size_t esize(const run_spec *r) { return r->bf16 ? 2 : 4; }
/* The plugin keeps no full copy of a param (no host-owned params there). */
static int partitions(const run_spec *r) { return r->stage == 3; }

static float get(const run_spec *r, const void *a, uint64_t k) { return pw_get(r->bf16, a, k); }
static void put(const run_spec *r, void *a, uint64_t k, float v) { pw_put(r->bf16, a, k, v); }

/* Values of param `pid`: salt 0 the initial values, > 0 a write's. */
static float value(int pid, uint64_t k, int salt) {
    return (float)(0.5 * th_u11(((uint64_t)pid << 40) ^ ((uint64_t)salt << 32) ^ k));
}

typedef struct model {
    zero_engine *e;
    zero_param *p[NP];
    zero_param *host; /* host-owned below partitioning, a plain param else */
    void *init[NP];
    void *host_data;
} model;

static zero_status gather_raw(const run_spec *r, zero_engine *e, zero_param *p, uint64_t n, void *dst) {
    return pw_gather_raw(e, p, n, esize(r), dst);
}

/* Every param's values, one after another (the host-owned one last). */
static size_t total_numel(void) {
    size_t t = HOST_N;
    for (int i = 0; i < NP; i++) t += SIZES[i];
    return t;
}
static size_t offset_of(const run_spec *r, int pid) { /* pid NP: the host-owned one */
    size_t off = 0;
    for (int i = 0; i < pid && i < NP; i++) off += SIZES[i] * esize(r);
    return off;
}
static void snapshot(const run_spec *r, model *m, unsigned char *out) {
    for (int i = 0; i < NP; i++) CHECK_EQ_INT(gather_raw(r, m->e, m->p[i], SIZES[i], out + offset_of(r, i)), ZERO_OK);
    CHECK_EQ_INT(gather_raw(r, m->e, m->host, HOST_N, out + offset_of(r, NP)), ZERO_OK);
}

static int build(const run_spec *r, model *m) {
    char cfg[900], opt[300], err[600] = "";
    if (r->opt == OPT_ONEBIT)
        snprintf(opt, sizeof opt,
                 "{\"type\": \"OneBitAdam\", \"params\": {\"lr\": 0.01, \"betas\": [0.9, 0.99], \"weight_decay\": "
                 "0.1, \"freeze_step\": %d}}",
                 r->freeze);
    else
        snprintf(opt, sizeof opt,
                 "{\"type\": \"AdamW\", \"params\": {\"lr\": 0.01, \"betas\": [0.9, 0.99], \"weight_decay\": 0.1%s}}",
                 r->opt == OPT_ADAMW_NO_BC ? ", \"bias_correction\": false" : "");
    snprintf(cfg, sizeof cfg,
             "{\"train_micro_batch_size_per_gpu\": 1, \"optimizer\": %s, \"bf16\": {\"enabled\": %s}, "
             "\"zero_optimization\": {\"stage\": %d, \"reduce_bucket_size\": 300, \"allgather_bucket_size\": 300%s%s}}",
             opt, r->bf16 ? "true" : "false", r->stage, r->zo[0] ? ", " : "", r->zo);
    memset(m, 0, sizeof *m);
    if (th_engine_create(cfg, r->plugin, 0, NULL, NULL, &m->e, err, sizeof err) != ZERO_OK) {
        CHECK(0, "%s: %s", r->plugin, err);
        return 0;
    }
    for (int i = 0; i < NP; i++) {
        m->init[i] = malloc(SIZES[i] * esize(r));
        for (uint64_t k = 0; k < SIZES[i]; k++) put(r, m->init[i], k, value(i, k, 0));
        zero_param_desc d = ZERO_PARAM_DESC_INIT;
        d.name = NAMES[i];
        d.data = m->init[i];
        d.numel = SIZES[i];
        d.dtype = r->bf16 ? ZERO_DTYPE_BF16 : ZERO_DTYPE_F32;
        CHECK_EQ_INT(zero_register_param(m->e, &d, &m->p[i]), ZERO_OK);
    }
    m->host_data = malloc(HOST_N * esize(r));
    for (uint64_t k = 0; k < HOST_N; k++) put(r, m->host_data, k, value(9, k, 0));
    zero_param_desc d = ZERO_PARAM_DESC_INIT;
    d.name = "host_owned";
    d.data = m->host_data;
    d.numel = HOST_N;
    d.dtype = r->bf16 ? ZERO_DTYPE_BF16 : ZERO_DTYPE_F32;
    d.flags = partitions(r) ? 0 : ZERO_PARAM_HOST_OWNED;
    CHECK_EQ_INT(zero_register_param(m->e, &d, &m->host), ZERO_OK);
    zero_status s = zero_params_done(m->e);
    CHECK(s == ZERO_OK, "%s params_done: %s", r->plugin, zero_last_error(m->e));
    return s == ZERO_OK;
}

static void destroy(model *m) {
    zero_engine_destroy(m->e);
    for (int i = 0; i < NP; i++) free(m->init[i]);
    free(m->host_data);
}

/* One micro-step's gradients of every param (params_write_host.h). */
static void backward(const run_spec *r, model *m, int step) {
    zero_param *all[NP + 1];
    uint64_t n[NP + 1];
    for (int i = 0; i < NP; i++) all[i] = m->p[i], n[i] = SIZES[i];
    all[NP] = m->host, n[NP] = HOST_N;
    pw_backward(m->e, all, n, NP + 1, r->bf16, step, rank_);
}

static void train(const run_spec *r, model *m, int from, int steps) {
    for (int t = from; t < from + steps; t++) {
        backward(r, m, t);
        zero_step_result res = ZERO_STEP_RESULT_INIT;
        zero_status s = zero_step(m->e, NULL, &res);
        CHECK(s == ZERO_OK, "%s step %d: %s", r->plugin, t, zero_last_error(m->e));
    }
}

static int root_of(void) { return world_ - 1; }
static int is_root(void) { return rank_ == world_ - 1; }

static void expect_refused(const run_spec *r, model *m, zero_param *const *ps, const void *const *vals, size_t n,
                           int root, zero_status want, const char *text, const char *what) {
    const size_t bytes = total_numel() * 4;
    unsigned char *before = calloc(1, bytes), *after = calloc(1, bytes);
    snapshot(r, m, before);
    zero_status s = zero_params_write(m->e, ps, vals, n, root);
    const char *msg = zero_last_error(m->e);
    CHECK(s == want, "%s %s: got %s, want %s: %s", r->plugin, what, zero_status_string(s), zero_status_string(want),
          msg);
    if (text) CHECK(strstr(msg, text) != NULL, "%s %s: the message lacks '%s': %s", r->plugin, what, text, msg);
    snapshot(r, m, after);
    CHECK(!memcmp(before, after, bytes), "%s %s: values changed by a refused call", r->plugin, what);
    free(before);
    free(after);
}

/* The refused calls, between windows (and one inside). */
static void refusals(const run_spec *r, model *m, void *const *vals) {
    zero_param *w[3] = {m->p[WRITTEN[0]], m->p[WRITTEN[1]], m->p[WRITTEN[2]]};
    const void *const *mine = is_root() ? (const void *const *)vals : NULL;
    expect_refused(r, m, w, mine, 3, world_, ZERO_ERR_INVALID_ARGUMENT, "not a place", "root out of range");
    zero_param *twice[2] = {w[1], w[1]};
    expect_refused(r, m, twice, mine, 2, root_of(), ZERO_ERR_INVALID_ARGUMENT, "given twice", "a param twice");
    if (world_ > 1) /* rank 0 leaves b_c out */
        expect_refused(r, m, w, mine, rank_ == 0 ? 2 : 3, root_of(), ZERO_ERR_MISMATCH, "different parameters",
                       "different lists");
    if (partitions(r)) {
        void *ptr = NULL;
        CHECK_EQ_INT(zero_gather(m->e, &w[1], 1, &ptr), ZERO_OK);
        expect_refused(r, m, w, mine, 3, root_of(), ZERO_ERR_STATE, "gathered and not released", "a held gather");
        CHECK_EQ_INT(zero_release(m->e, &w[1], 1), ZERO_OK);
    }
    backward(r, m, 100); /* inside the window */
    expect_refused(r, m, w, mine, 3, root_of(), ZERO_ERR_STATE, "accumulation window", "inside a window");
    zero_step_result res = ZERO_STEP_RESULT_INIT;
    CHECK_EQ_INT(zero_step(m->e, NULL, &res), ZERO_OK);
}

/* Right after the write: the written params hold vals (bitwise, or within
 * qwZ's bound), the others what `before` holds, bitwise. */
static void check_written(const run_spec *r, const unsigned char *got, const unsigned char *before, void *const *vals,
                          const char *when) {
    /* int8 blocks: max|block| / 254 of |values| <= 0.5, one fp32 rounding, one bf16 rounding */
    const double tol = 0.5 / 254.0 * 1.001 + (r->bf16 ? 0.5 * 0x1p-8 : 1e-6);
    for (int i = 0; i <= NP; i++) {
        const uint64_t n = i < NP ? SIZES[i] : HOST_N;
        const size_t off = offset_of(r, i), b = (size_t)n * esize(r);
        const char *name = i < NP ? NAMES[i] : "host_owned";
        int wi = i == NP ? 3 : -1;
        for (int q = 0; q < 3; q++)
            if (WRITTEN[q] == i) wi = q;
        if (wi < 0) {
            CHECK(!memcmp(got + off, before + off, b), "%s%s rank %d %s: '%s' changed without being written",
                  r->plugin, r->bf16 ? " bf16" : "", rank_, when, name);
        } else if (!r->quant) {
            CHECK(!memcmp(got + off, vals[wi], b), "%s%s rank %d %s: '%s' is not the written values", r->plugin,
                  r->bf16 ? " bf16" : "", rank_, when, name);
        } else {
            double worst = 0;
            for (uint64_t k = 0; k < n; k++) {
                const double d = fabs((double)get(r, got + off, k) - (double)get(r, vals[wi], k));
                if (!(d <= worst)) worst = d;
            }
            CHECK(worst <= tol, "%s%s rank %d %s: '%s' is %g from the written values (qwZ bound %g)", r->plugin,
                  r->bf16 ? " bf16" : "", rank_, when, name, worst, tol);
        }
    }
}

/* One step after the write the written params are near the written values
 * (an fp32 master left behind would have put the old ones back). */
static void check_drift(const run_spec *r, const unsigned char *now, const unsigned char *old, void *const *vals) {
    uint64_t closer = 0, total = 0;
    for (int q = 0; q < 4; q++) {
        const int pid = q < 3 ? WRITTEN[q] : NP;
        const uint64_t n = q < 3 ? SIZES[pid] : HOST_N;
        const size_t off = offset_of(r, pid);
        for (uint64_t k = 0; k < n; k++, total++) {
            const float x = get(r, now + off, k);
            closer += fabsf(x - get(r, vals[q], k)) < fabsf(x - get(r, old + off, k));
        }
    }
    CHECK(closer * 4 >= total * 3, "%s%s rank %d: one step after the write only %llu of %llu written elements are "
          "nearer the written values than the old ones", r->plugin, r->bf16 ? " bf16" : "", rank_,
          (unsigned long long)closer, (unsigned long long)total);
}

/* One run; returns the final values (every param, malloc'd) or NULL. */
static unsigned char *run(const run_spec *r) {
    model m;
    if (!build(r, &m)) {
        if (m.e) destroy(&m);
        return NULL;
    }
    train(r, &m, 0, STEPS);
    const size_t bytes = total_numel() * 4;
    unsigned char *before = calloc(1, bytes), *after = calloc(1, bytes), *again = calloc(1, bytes);
    void *vals[4] = {0};
    zero_param *w[4] = {m.p[WRITTEN[0]], m.p[WRITTEN[1]], m.p[WRITTEN[2]], m.host};
    const uint64_t wn[4] = {SIZES[WRITTEN[0]], SIZES[WRITTEN[1]], SIZES[WRITTEN[2]], HOST_N};
    for (size_t i = 0; i < 4; i++) {
        vals[i] = malloc(wn[i] * esize(r));
        const int pid = i < 3 ? WRITTEN[i] : 9;
        for (uint64_t k = 0; k < wn[i]; k++) put(r, vals[i], k, value(pid, k, 7));
    }
    if (r->refusals) refusals(r, &m, vals);
    snapshot(r, &m, before);
    if (r->write == 2) { /* every param's current values, written back */
        zero_param *all[NP + 1];
        void *cur[NP + 1];
        for (int i = 0; i < NP; i++) all[i] = m.p[i], cur[i] = before + offset_of(r, i);
        all[NP] = m.host, cur[NP] = before + offset_of(r, NP);
        zero_status s = zero_params_write(m.e, all, is_root() ? (const void *const *)cur : NULL, NP + 1, root_of());
        CHECK(s == ZERO_OK, "%s write current: %s", r->plugin, zero_last_error(m.e));
    } else if (r->write == 1) {
        zero_status s = zero_params_write(m.e, w, is_root() ? (const void *const *)vals : NULL, 4, root_of());
        CHECK(s == ZERO_OK, "%s%s write: %s", r->plugin, r->bf16 ? " bf16" : "", zero_last_error(m.e));
        snapshot(r, &m, after);
        check_written(r, after, before, vals, "after the write");
        snapshot(r, &m, again); /* fresh fetches of the large params (reuse distance 0) */
        CHECK(!memcmp(after, again, total_numel() * esize(r)), "%s%s rank %d: a second gather after the write "
              "shows other values", r->plugin, r->bf16 ? " bf16" : "", rank_);
        if (!partitions(r))
            CHECK(!memcmp(m.host_data, vals[3], HOST_N * esize(r)),
                  "%s rank %d: the host-owned array was not written", r->plugin, rank_);
    }
    train(r, &m, STEPS, 1);
    if (r->write == 1) {
        snapshot(r, &m, after);
        check_drift(r, after, before, vals);
    }
    train(r, &m, STEPS + 1, 1);
    unsigned char *final = calloc(1, bytes);
    snapshot(r, &m, final);
    for (size_t i = 0; i < 4; i++) free(vals[i]);
    free(before);
    free(after);
    free(again);
    destroy(&m);
    return final;
}

static void compare(const char *what, const run_spec *r, const unsigned char *got, const unsigned char *want) {
    const size_t bytes = total_numel() * esize(r);
    CHECK(got && want && !memcmp(got, want, bytes), "%s%s (%s) rank %d: %s", r->plugin, r->bf16 ? " bf16" : "",
          r->zo, rank_, what);
}

static run_spec spec(const char *plugin, int stage, int bf16, int opt, const char *zo) {
    run_spec r;
    memset(&r, 0, sizeof r);
    r.plugin = plugin;
    r.stage = stage;
    r.bf16 = bf16;
    r.opt = opt;
    r.write = 1;
    r.refusals = 1;
    snprintf(r.zo, sizeof r.zo, "%s", zo ? zo : "");
    return r;
}

/* stage 3's keys for the gathering plugins: params under 100 elements
 * persistent, every released buffer back to the pool (a fresh fetch at
 * each gather of the others) */
#define GATHER_KEYS "\"stage3_param_persistence_threshold\": 100, \"stage3_max_reuse_distance\": 0"

/* Writing every param's current values is no write at all: r run
 * without a write and with one end bitwise equal. */
static void identity_case(run_spec r) {
    r.refusals = 0;
    r.write = 0;
    unsigned char *plain = run(&r);
    r.write = 2;
    unsigned char *same = run(&r);
    compare("writing the current values changed the run", &r, same, plain);
    free(plain);
    free(same);
}

/* --template (tests/kit): examples/plugin-template's template-dp, written
 * and trained on, bitwise stage 0 with the same write (fp32, bf16), and
 * writing the current values changes nothing (fp32). */
static void template_cases(void) {
    for (int bf16 = 0; bf16 <= 1; bf16++) {
        run_spec ref = spec("stage0", 0, bf16, OPT_ADAMW, NULL), r = spec("template-dp", 0, bf16, OPT_ADAMW, NULL);
        unsigned char *want = run(&ref), *got = run(&r);
        compare("written and trained on: not stage 0's values", &r, got, want);
        free(got);
        free(want);
    }
    identity_case(spec("template-dp", 0, 0, OPT_ADAMW, NULL));
}

int main(int argc, char **argv) {
    check_mpi_init(&argc, &argv, &rank_, &world_);
    if (argc > 1 && !strcmp(argv[1], "--template")) {
        template_cases();
        return check_mpi_finish();
    }
    int hpz = world_; /* hpZ group: the smallest divisor > 1 of N */
    for (int d = world_; d >= 2; d--)
        if (world_ % d == 0) hpz = d;
    char zo[200];
    /* 1. written and trained on: bitwise stage 0 with the same write */
    for (int bf16 = 0; bf16 <= 1; bf16++) {
        run_spec ref = spec("stage0", 0, bf16, OPT_ADAMW, NULL);
        unsigned char *want = run(&ref);
        for (int S = 1; S <= world_; S++) {
            if (world_ % S) continue;
            snprintf(zo, sizeof zo, "\"mics_shard_size\": %d, " GATHER_KEYS, S);
            run_spec r = spec("mics", 3, bf16, OPT_ADAMW, zo);
            unsigned char *got = run(&r);
            compare("written and trained on: not stage 0's values", &r, got, want);
            free(got);
        }
        for (int P = 1; P <= (world_ > 1 ? 2 : 1); P++) {
            snprintf(zo, sizeof zo, "\"zero_hpz_partition_size\": %d, " GATHER_KEYS, P == 1 ? 1 : hpz);
            run_spec r = spec("zeropp", 3, bf16, OPT_ADAMW, zo);
            unsigned char *got = run(&r);
            compare("written and trained on: not stage 0's values", &r, got, want);
            free(got);
        }
        free(want);
        /* 1-bit Adam's warm-up is stage 0's AdamW without bias correction */
        ref = spec("stage0", 0, bf16, OPT_ADAMW_NO_BC, NULL);
        want = run(&ref);
        run_spec ob = spec("onebit", 0, bf16, OPT_ONEBIT, NULL);
        ob.freeze = 1000;
        unsigned char *got = run(&ob);
        compare("written and trained on in the warm-up: not stage 0's values", &ob, got, want);
        free(got);
        free(want);
    }
    /* 2. writing the current values is no write at all (fp32) */
    {
        run_spec cases[3];
        snprintf(zo, sizeof zo, "\"mics_shard_size\": 1, " GATHER_KEYS); /* N replicas of every share */
        cases[0] = spec("mics", 3, 0, OPT_ADAMW, zo);
        snprintf(zo, sizeof zo, "\"zero_hpz_partition_size\": %d, " GATHER_KEYS, hpz);
        cases[1] = spec("zeropp", 3, 0, OPT_ADAMW, zo);
        cases[2] = spec("onebit", 0, 0, OPT_ONEBIT, NULL);
        cases[2].freeze = 1; /* written in the compressed phase */
        for (int i = 0; i < 3; i++) identity_case(cases[i]);
    }
    /* 3. no bitwise reference: ZeRO++ with qwZ, 1-bit Adam compressed (the checks inside run) */
    for (int bf16 = 0; bf16 <= 1; bf16++) {
        run_spec cases[3];
        snprintf(zo, sizeof zo, "\"zero_quantized_weights\": true, \"zero_hpz_partition_size\": %d, " GATHER_KEYS,
                 hpz);
        cases[0] = spec("zeropp", 3, bf16, OPT_ADAMW, zo);
        snprintf(zo, sizeof zo,
                 "\"zero_quantized_weights\": true, \"zero_quantized_gradients\": true, \"zero_hpz_partition_size\": "
                 "%d, " GATHER_KEYS,
                 hpz);
        cases[1] = spec("zeropp", 3, bf16, OPT_ADAMW, zo);
        cases[0].quant = cases[1].quant = 1;
        cases[2] = spec("onebit", 0, bf16, OPT_ONEBIT, NULL);
        cases[2].freeze = 1;
        for (int i = 0; i < 3; i++) free(run(&cases[i]));
    }
    return check_mpi_finish();
}
