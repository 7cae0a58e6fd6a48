/* Missing and non-finite gradients agreed across ranks (issue 31), for
 * stage0/1/2/3 and offload, gradient_accumulation_steps 1 and 2, on 2 or 3
 * ranks:
 *  - a param reported on some ranks and not on others: ZERO_ERR_STATE on
 *    every rank naming the param, how many ranks lacked it and which; no
 *    weight moves (bytes compared), the window is dropped, and training
 *    goes on bitwise as if the refused micro-steps had never happened;
 *  - zero_step with no gradient at all, and zero_step called twice:
 *    ZERO_ERR_STATE on every rank at the window's boundary (the verdicts
 *    are agreed there), no weight moves, training goes on;
 *  - zero_optimization.find_unused_parameters: the missing gradient counts
 *    as zero on every rank (bitwise the run that reports zeros), a step
 *    without gradients is skipped (ZERO_OK, taken = 0, no weight moves);
 *  - a NaN in one rank's gradient: the step is skipped on every rank and
 *    every rank's zero_last_error names the same rank(s) and the param.
 * With the argument "pipeline" (an even world): stage1-pp over 2 pipeline
 * stages, the misses on stage 1 only; every rank of both stages refuses (or
 * skips) alike, the other stage saying that another stage refused.
 * The ctest timeout turns a hang (ranks in different collectives) into a
 * failure. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/mpi_check.h"
#include "host_util.h"

static int rank_ = 0, world_ = 1;
/* `pipeline` mode: stage1-pp over 2 pipeline stages x world/2 DP ranks
 * (global rank = stage * D + dp_rank); stage 1's DP rank >= 1 misses. */
static int pp_ = 0, stage_ = 0, dp_rank_ = 0, dp_ = 1;

enum { NP = 4, WINDOWS = 3 };
static const char *const names_[NP] = {"alpha", "beta", "gamma", "delta"};
static const size_t numel_[NP] = {1, 7, 1000, 333};
static size_t total_ = 1 + 7 + 1000 + 333;

typedef struct run {
    const char *plugin;
    int gas, find_unused;
    zero_engine *e;
    zero_param *h[NP];
    int skip_warnings, beta_warnings; /* WARN lines: a skipped step, 'beta' counted as zero */
} run;

static void log_cb(void *user, zero_log_level lvl, int rank, const char *msg) {
    run *r = user;
    (void)rank;
    if (lvl != ZERO_LOG_WARN) return;
    if (strstr(msg, "step skipped") && strstr(msg, "find_unused_parameters")) r->skip_warnings++;
    if (strstr(msg, "'beta' missing on") && strstr(msg, "count as zero")) r->beta_warnings++;
}

static int start(run *r, const char *plugin, int gas, int find_unused) {
    memset(r, 0, sizeof *r);
    r->plugin = plugin;
    r->gas = gas;
    r->find_unused = find_unused;
    const int offload = strcmp(plugin, "offload") == 0, stage = pp_ ? 1 : offload ? 2 : plugin[5] - '0';
    char json[1024], err[1024] = "";
    snprintf(json, sizeof json,
             "{\"train_micro_batch_size_per_gpu\": 1, \"gradient_accumulation_steps\": %d,"
             " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01, \"weight_decay\": 0.01}},"
             " \"zero_optimization\": {\"stage\": %d, \"reduce_bucket_size\": 300, \"overlap_comm\": true%s%s}%s}",
             gas, stage, offload ? ", \"offload_optimizer\": {\"device\": \"cpu\"}" : "",
             find_unused ? ", \"find_unused_parameters\": true" : "", pp_ ? ", \"pipeline\": {\"stages\": 2}" : "");
    zero_status s = th_engine_create(json, plugin, 0, log_cb, r, &r->e, err, sizeof err);
    CHECK(s == ZERO_OK, "%s: engine create: %s", plugin, err);
    if (s != ZERO_OK) return 0;
    float *init[NP]; /* read at zero_params_done */
    for (int i = 0; i < NP; i++) {
        init[i] = malloc(numel_[i] * sizeof *init[i]);
        for (size_t j = 0; j < numel_[i]; j++) init[i][j] = 0.1f * cosf(0.7f * (float)j + (float)i);
        zero_param_desc d = ZERO_PARAM_DESC_INIT;
        d.name = names_[i];
        d.data = init[i];
        d.numel = numel_[i];
        s = zero_register_param(r->e, &d, &r->h[i]);
        CHECK_EQ_INT(s, ZERO_OK);
    }
    s = zero_params_done(r->e);
    for (int i = 0; i < NP; i++) free(init[i]);
    CHECK(s == ZERO_OK, "%s: params_done: %s", plugin, zero_last_error(r->e));
    return s == ZERO_OK;
}

static float *snap(run *r) {
    float *p = malloc(total_ * sizeof *p);
    zero_status s = th_gather_all_f32(r->e, r->h, NP, numel_, p);
    CHECK(s == ZERO_OK, "%s: gather: %s", r->plugin, zero_last_error(r->e));
    return p;
}

/* One micro-batch's backward: every param's gradient (a function of the
 * seed and the rank), last param first; `skip` (>= 0) is left out, `zeros`
 * (>= 0) is reported without adding anything, `nan` (>= 0) gets a NaN. */
static zero_status backward(run *r, int seed, int skip, int zeros, int nan) {
    void *ptrs[NP];
    zero_status s = zero_gather(r->e, r->h, NP, ptrs);
    if (s == ZERO_OK) s = zero_release(r->e, r->h, NP);
    for (int i = NP - 1; i >= 0 && s == ZERO_OK; i--) {
        if (i == skip) continue;
        void *g = NULL;
        if ((s = zero_grad_buffer(r->e, r->h[i], &g)) != ZERO_OK) break;
        float *gf = g;
        if (i != zeros)
            for (size_t j = 0; j < numel_[i]; j++)
                gf[j] += 0.01f * sinf(0.37f * (float)j + 1.3f * (float)seed + 0.5f * (float)rank_ + (float)i);
        if (i == nan) gf[3] = NAN;
        s = zero_on_grad_ready(r->e, r->h[i], NULL);
    }
    CHECK(s == ZERO_OK, "%s: backward: %s", r->plugin, zero_last_error(r->e));
    return s;
}

static zero_status step(run *r, zero_step_result *res) {
    zero_step_result tmp = ZERO_STEP_RESULT_INIT;
    *res = tmp;
    return zero_step(r->e, NULL, res);
}

/* Window w of the reference schedule: micro-batch seeds 10 w + m. */
static void window(run *r, int w) {
    for (int m = 0; m < r->gas; m++) {
        zero_step_result res;
        if (backward(r, 10 * w + m, -1, -1, -1) != ZERO_OK) return;
        zero_status s = step(r, &res);
        CHECK(s == ZERO_OK && res.boundary == (m == r->gas - 1) && (m < r->gas - 1 || res.taken == 1),
              "%s gas %d: window %d micro %d: %s taken %u (%s)", r->plugin, r->gas, w, m, zero_status_string(s),
              res.taken, zero_last_error(r->e));
    }
}

/* The ranks that leave a param out: every rank but 0 (rank 1 of 2, ranks 1..8 of 9); with a
 * pipeline, DP rank 1.. of stage 1. */
static int lacks(void) { return pp_ ? stage_ == 1 && dp_rank_ >= 1 : rank_ >= 1; }

static void expect_refused(run *r, zero_status s, const char *what, const char *want, const float *before) {
    CHECK(s == ZERO_ERR_STATE, "%s gas %d, %s: got %s (%s)", r->plugin, r->gas, what, zero_status_string(s),
          zero_last_error(r->e));
    CHECK_STR_CONTAINS(zero_last_error(r->e), want);
    float *after = snap(r);
    CHECK(memcmp(before, after, total_ * sizeof *after) == 0, "%s gas %d, %s: a weight moved", r->plugin, r->gas,
          what);
    free(after);
}

static void same_params(run *r, const float *ref, const char *what) {
    float *p = snap(r);
    size_t first = total_;
    for (size_t i = 0; i < total_ && first == total_; i++)
        if (memcmp(&p[i], &ref[i], sizeof *p)) first = i;
    CHECK(first == total_, "%s gas %d, %s: final params differ from the reference (first at %zu: %.9g vs %.9g)",
          r->plugin, r->gas, what, first, first < total_ ? p[first] : 0.0, first < total_ ? ref[first] : 0.0);
    free(p);
}

static void finish(run *r) {
    zero_engine_destroy(r->e);
    r->e = NULL;
}

/* A zero_step without any gradient: agreed at the window's boundary, so
 * with gas > 1 the call itself returns ZERO_OK (boundary 0) and the window
 * ends, seeds `seed`.., at the next boundary; returns that boundary's
 * status. */
static zero_status empty_window(run *r, int seed, zero_step_result *res) {
    zero_status s = step(r, res);
    if (r->gas == 1) return s;
    CHECK(s == ZERO_OK && res->boundary == 0, "%s gas %d: an empty micro-step inside the window: %s (%s)", r->plugin,
          r->gas, zero_status_string(s), zero_last_error(r->e));
    for (int m = 1; m < r->gas; m++) {
        backward(r, seed + m, -1, -1, -1);
        s = step(r, res);
        if (m < r->gas - 1) CHECK_EQ_INT(s, ZERO_OK);
    }
    return s;
}

/* The default: refusals, and the run goes on as if they never happened. */
static void refusals(const char *plugin, int gas, const float *ref) {
    run r;
    if (!start(&r, plugin, gas, 0)) return;
    window(&r, 0);
    float *before = snap(&r);
    /* a window whose last micro-batch misses 'beta' on some ranks */
    zero_step_result res;
    for (int m = 0; m < gas - 1; m++) {
        backward(&r, 99, -1, -1, -1);
        CHECK_EQ_INT(step(&r, &res), ZERO_OK);
    }
    backward(&r, 98, lacks() ? 1 : -1, -1, -1);
    char want[128], span[32];
    snprintf(span, sizeof span, dp_ > 2 ? "1..%d" : "1", dp_ - 1); /* ranks 1..dp-1 leave it out */
    snprintf(want, sizeof want, "'beta' missing on %d of %d ranks (rank%s %s)", dp_ - 1, dp_, dp_ > 2 ? "s" : "", span);
    if (pp_ && stage_ == 0) snprintf(want, sizeof want, "another pipeline stage refused");
    expect_refused(&r, step(&r, &res), "beta missing on some ranks", want, before);
    /* no gradient at all in the window's first micro-step */
    expect_refused(&r, empty_window(&r, 70, &res), "zero_step without gradients",
                   "no rank reported a gradient in micro-step 0", before);
    if (gas > 1) { /* ... and in its last one: a second zero_step */
        backward(&r, 97, -1, -1, -1);
        CHECK_EQ_INT(step(&r, &res), ZERO_OK);
        expect_refused(&r, step(&r, &res), "a second zero_step mid-window", "in micro-step 1", before);
    }
    window(&r, 1);
    /* zero_step twice after a boundary */
    float *mid = snap(&r);
    expect_refused(&r, empty_window(&r, 80, &res), "zero_step twice", "a second zero_step", mid);
    window(&r, 2);
    same_params(&r, ref, "after the refused micro-steps");
    free(before);
    free(mid);
    finish(&r);
}

/* find_unused_parameters: zeros where a gradient is missing, a skipped
 * step where none arrived; `ref` reports zeros for 'beta' instead. */
static void allowed(const char *plugin, int gas, int zeros_instead, float **out) {
    run r;
    if (!start(&r, plugin, gas, 1)) return;
    window(&r, 0);
    /* a window with an empty micro-step: skipped, nothing moves */
    float *before = snap(&r);
    zero_step_result res;
    zero_status s = empty_window(&r, 30, &res);
    CHECK(s == ZERO_OK && res.boundary == 1 && res.taken == 0 && res.overflow == 0, "%s gas %d, find_unused: a "
          "window with an empty micro-step: %s boundary %u taken %u (%s)", plugin, gas, zero_status_string(s),
          res.boundary, res.taken, zero_last_error(r.e));
    float *after = snap(&r);
    CHECK(memcmp(before, after, total_ * sizeof *after) == 0, "%s gas %d: a skipped step moved a weight", plugin,
          gas);
    free(before);
    free(after);
    for (int m = 0; m < gas; m++) {
        const int last = m == gas - 1;
        backward(&r, 10 + m, last && lacks() && !zeros_instead ? 1 : -1, last && lacks() && zeros_instead ? 1 : -1,
                 -1);
        s = step(&r, &res);
        CHECK(s == ZERO_OK && (!last || res.taken == 1), "%s gas %d, find_unused: %s (%s)", plugin, gas,
              zero_status_string(s), zero_last_error(r.e));
    }
    CHECK(r.skip_warnings == 1, "%s gas %d: %d warnings for one skipped step", plugin, gas, r.skip_warnings);
    const int beta_warns = !zeros_instead && (!pp_ || stage_ == 1); /* only the DP group where it happened */
    CHECK(r.beta_warnings == beta_warns, "%s gas %d: %d warnings naming 'beta' (zeros reported: %d)", plugin, gas,
          r.beta_warnings, zeros_instead);
    window(&r, 2);
    *out = snap(&r);
    finish(&r);
}

/* A NaN in one rank's gradient: skipped everywhere, the same text naming
 * the rank(s) and 'gamma' on every rank. */
static void nonfinite(const char *plugin, int gas) {
    run r;
    if (!start(&r, plugin, gas, 0)) return;
    window(&r, 0);
    zero_step_result res;
    for (int m = 0; m < gas; m++) {
        backward(&r, 10 + m, -1, -1, m == gas - 1 && rank_ == world_ - 1 ? 2 : -1);
        CHECK_EQ_INT(step(&r, &res), ZERO_OK);
    }
    CHECK(res.overflow == 1 && res.taken == 0, "%s gas %d: NaN: overflow %u taken %u", plugin, gas, res.overflow,
          res.taken);
    const char *msg = zero_last_error(r.e);
    CHECK_STR_CONTAINS(msg, "non-finite gradient (Inf/NaN) found on rank");
    CHECK_STR_CONTAINS(msg, "'gamma'");
    /* the same text on every rank, after the "rank R: " prefix */
    const char *body = strstr(msg, ": ");
    char mine[1024] = "", first[1024] = "";
    snprintf(mine, sizeof mine, "%s", body ? body : msg);
    memcpy(first, mine, sizeof first);
    MPI_Bcast(first, (int)sizeof first, MPI_CHAR, 0, MPI_COMM_WORLD);
    CHECK(strcmp(first, mine) == 0, "%s: rank %d says '%s', rank 0 '%s'", plugin, rank_, mine, first);
    if (rank_ == 0 && gas == 1) printf("%s: %s\n", plugin, msg);
    window(&r, 2); /* the next window is taken */
    finish(&r);
}

int main(int argc, char **argv) {
    check_mpi_init(&argc, &argv, &rank_, &world_);
    if (world_ < 2) {
        printf("needs at least 2 ranks\n");
        return check_mpi_finish();
    }
    const char *all[] = {"stage0", "stage1", "stage2", "stage3", "offload"}, *pipe[] = {"stage1-pp"};
    pp_ = argc > 1 && strcmp(argv[1], "pipeline") == 0;
    const char *const *plugins = pp_ ? pipe : all;
    const size_t nplugins = pp_ ? 1 : sizeof all / sizeof all[0];
    dp_ = pp_ ? world_ / 2 : world_;
    stage_ = pp_ ? rank_ / dp_ : 0;
    dp_rank_ = pp_ ? rank_ % dp_ : rank_;
    if (pp_ && world_ % 2) {
        printf("pipeline mode needs an even world\n");
        return check_mpi_finish();
    }
    for (size_t p = 0; p < nplugins; p++)
        for (int gas = 1; gas <= 2; gas++) {
            run r;
            if (!start(&r, plugins[p], gas, 0)) continue;
            for (int w = 0; w < WINDOWS; w++) window(&r, w);
            float *ref = snap(&r);
            finish(&r);
            refusals(plugins[p], gas, ref);
            free(ref);
            float *zeroed = NULL, *skipped = NULL;
            allowed(plugins[p], gas, 1, &zeroed);
            allowed(plugins[p], gas, 0, &skipped);
            if (zeroed && skipped)
                CHECK(memcmp(zeroed, skipped, total_ * sizeof *zeroed) == 0,
                      "%s gas %d: with find_unused_parameters a missing gradient is not a zero one", plugins[p], gas);
            free(zeroed);
            free(skipped);
            nonfinite(plugins[p], gas);
        }
    return check_mpi_finish();
}
