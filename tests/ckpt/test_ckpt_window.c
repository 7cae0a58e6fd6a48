/* zero_load and zero_save inside an accumulation window
 * (gradient_accumulation_steps 2): the recovery a host reaches for after a
 * bad micro-batch, a backward cut short or a refused step.  Every plugin,
 * under mpirun (N = 3 and 5).
 *
 * Reference: 3 windows (6 micro-steps), zero_save, 3 more windows: the
 * final parameters F.  Then, each from a fresh engine that ran the same 3
 * windows and saved:
 *  - "window": a micro-step of other gradients (zero_step, not a
 *    boundary), then zero_load and the same last 3 windows: bitwise F.
 *  - "backward": half a backward (half the params reported, no zero_step),
 *    zero_load: bitwise F.  Before 1.7.5 the reported params were refused
 *    as ZERO_ERR_DUPLICATE in the next backward and their partial sums
 *    trained on: every value differed.
 *  - "uneven backward": the same with 0, 1 or 2 params reported by rank
 *    (a bucket reduction in flight on some ranks only): bitwise F, and no
 *    hang.
 *  - "held step": the boundary micro-step refused (a host write found,
 *    the window held), then zero_load: bitwise F; a zero_step straight
 *    after the load, without a backward, has its window refused instead
 *    of training on the gradients computed before the load.
 *  - "load twice": bitwise F.
 * And zero_save after half a backward (on one rank only) is refused on
 * every rank, naming it, with nothing written; the save after the
 * micro-step's zero_step succeeds.
 * Usage: test_ckpt_window DIR   (under mpirun) */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/check.h"
#include "../common/host_util.h"
#include "../common/mpi_check.h"

enum { NP = 4, WINDOWS = 3, GAS = 2 };
static const size_t NUMEL[NP] = {1000, 37, 513, 2};
static int rank_, world_;

typedef struct {
    zero_engine *e;
    zero_param *h[NP];
    float *data[NP];
} run;

static const char *json_for(const char *plugin, char *buf, size_t len) {
    const int stage = !strcmp(plugin, "stage0") ? 0 : !strcmp(plugin, "stage1") ? 1 : !strcmp(plugin, "stage3") ? 3 : 2;
    snprintf(buf, len,
             "{\"train_micro_batch_size_per_gpu\": 1, \"gradient_accumulation_steps\": %d, "
             "\"gradient_clipping\": 1.0, \"zero_optimization\": {\"stage\": %d, \"reduce_bucket_size\": 600%s}, "
             "\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01, \"weight_decay\": 0.01}}}",
             GAS, stage, !strcmp(plugin, "offload") ? ", \"offload_optimizer\": {\"device\": \"cpu\"}" : "");
    return buf;
}

static int open_run(run *r, const char *plugin) {
    memset(r, 0, sizeof *r);
    char json[1024], err[1024];
    zero_status s = th_engine_create(json_for(plugin, json, sizeof json), plugin, 0, NULL, NULL, &r->e, err, sizeof err);
    CHECK(s == ZERO_OK, "%s: %s", plugin, err);
    if (s != ZERO_OK) return 0;
    for (int p = 0; p < NP; p++) {
        r->data[p] = malloc(NUMEL[p] * sizeof(float));
        for (size_t i = 0; i < NUMEL[p]; i++) r->data[p][i] = (float)(0.5 * th_u11(((uint64_t)p << 32) | i));
        zero_param_desc d = ZERO_PARAM_DESC_INIT;
        char name[16];
        snprintf(name, sizeof name, "p%d", p);
        d.name = name;
        d.data = r->data[p];
        d.numel = NUMEL[p];
        CHECK_EQ_INT(zero_register_param(r->e, &d, &r->h[p]), ZERO_OK);
    }
    CHECK(zero_params_done(r->e) == ZERO_OK, "%s: params_done: %s", plugin, zero_last_error(r->e));
    return 1;
}

static void close_run(run *r) {
    zero_engine_destroy(r->e);
    for (int p = 0; p < NP; p++) free(r->data[p]);
}

/* Micro-step t's gradients for params [from, to): added into libzero's
 * buffers and reported. */
static void backward(run *r, uint64_t t, int from, int to) {
    for (int p = from; p < to; p++) {
        void *buf = NULL;
        CHECK_EQ_INT(zero_grad_buffer(r->e, r->h[p], &buf), ZERO_OK);
        float *g = buf;
        for (size_t i = 0; g && i < NUMEL[p]; i++)
            g[i] += (float)(0.1 * th_u11((t << 48) ^ ((uint64_t)rank_ << 40) ^ ((uint64_t)p << 32) ^ i));
        CHECK_EQ_INT(zero_on_grad_ready(r->e, r->h[p], NULL), ZERO_OK);
    }
}

static zero_status step(run *r) {
    zero_step_result res = ZERO_STEP_RESULT_INIT;
    return zero_step(r->e, NULL, &res);
}

static void micro(run *r, uint64_t t, const char *what) {
    backward(r, t, 0, NP);
    zero_status s = step(r);
    CHECK(s == ZERO_OK, "%s: micro-step %llu: %s", what, (unsigned long long)t, zero_last_error(r->e));
}

static size_t total(void) {
    size_t n = 0;
    for (int p = 0; p < NP; p++) n += NUMEL[p];
    return n;
}

/* The boundary micro-step t refused and held: the last rank writes p0
 * through zero_gather's pointer (libzero's copy; not at stage 3, whose
 * gathered copy is checked at zero_release and not held). */
static void held_step(run *r, uint64_t t, const char *what) {
    backward(r, t, 0, NP);
    void *ptr = NULL;
    CHECK_EQ_INT(zero_gather(r->e, &r->h[0], 1, &ptr), ZERO_OK);
    if (ptr && rank_ == world_ - 1) memset(ptr, 0x3c, NUMEL[0] * sizeof(float));
    CHECK_EQ_INT(zero_release(r->e, &r->h[0], 1), ZERO_OK);
    zero_status s = step(r);
    CHECK(s == ZERO_ERR_STATE, "%s: the step after the write gave %s", what, zero_status_string(s));
}

enum { C_WINDOW, C_BACKWARD, C_UNEVEN, C_HELD, C_TWICE, NCASES };
static const char *const CASE[NCASES] = {"window", "backward", "uneven backward", "held step", "load twice"};

static void one_case(const char *plugin, int c, const char *dir, const float *ref) {
    char what[160];
    snprintf(what, sizeof what, "%s, N = %d, load after a %s", plugin, world_, CASE[c]);
    const size_t n = total();
    run r;
    if (!open_run(&r, plugin)) return;
    for (uint64_t t = 0; t < WINDOWS * GAS; t++) micro(&r, t, what);
    if (c == C_WINDOW) micro(&r, 1000, what);            /* a whole micro-step of other gradients */
    if (c == C_BACKWARD) backward(&r, 1000, 0, NP / 2);  /* half a backward */
    /* 0, 1 or 2 params by rank: a rank further ahead may wait inside a hook
     * for the bucket reductions the others have not started (as in any
     * backward), which is the host's hang, not the load's */
    if (c == C_UNEVEN) backward(&r, 1000, 0, rank_ % 3);
    if (c == C_HELD) {
        micro(&r, WINDOWS * GAS, what);
        held_step(&r, WINDOWS * GAS + 1, what);
    }
    zero_status s = zero_load(r.e, dir);
    CHECK(s == ZERO_OK, "%s: zero_load: %s", what, zero_last_error(r.e));
    if (c == C_TWICE) CHECK(zero_load(r.e, dir) == ZERO_OK, "%s: second zero_load: %s", what, zero_last_error(r.e));
    uint64_t t = WINDOWS * GAS;
    if (c == C_HELD) {
        /* no backward after the load: that micro-step is empty, and its
         * window is refused at the boundary instead of stepping on the
         * gradients computed before the load (before 1.7.5 the held
         * micro-step's ready marks outlived the load and it trained on);
         * the window is dropped, nothing moves */
        CHECK(step(&r) == ZERO_OK, "%s: an empty micro-step 0: %s", what, zero_last_error(r.e));
        backward(&r, 2000, 0, NP);
        s = step(&r);
        CHECK(s == ZERO_ERR_STATE && strstr(zero_last_error(r.e), "zero_step without any gradient"),
              "%s: a window with an empty micro-step after the load gave %s: %s", what, zero_status_string(s),
              zero_last_error(r.e));
    }
    for (; t < 2 * WINDOWS * GAS; t++) micro(&r, t, what);
    float *got = calloc(n, sizeof *got);
    CHECK_EQ_INT(th_gather_all_f32(r.e, r.h, NP, NUMEL, got), ZERO_OK);
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (memcmp(&got[i], &ref[i], sizeof(float)) && !bad++) first = i;
    CHECK(bad == 0, "%s: %zu of %zu values differ from the run without the load (first at %zu: %.9g vs %.9g)", what,
          bad, n, first, (double)got[first], (double)ref[first]);
    if (rank_ == 0) printf("%-56s %s\n", what, bad ? "DIFFERS" : "bitwise the run without it");
    free(got);
    close_run(&r);
}

static void one_plugin(const char *root, const char *plugin) {
    char dir[512], mid[512], what[160];
    snprintf(dir, sizeof dir, "%s/%s", root, plugin);
    snprintf(mid, sizeof mid, "%s/%s-mid", root, plugin);
    snprintf(what, sizeof what, "%s, N = %d", plugin, world_);
    float *ref = calloc(total(), sizeof *ref);
    run r;
    if (!open_run(&r, plugin)) goto out;
    for (uint64_t t = 0; t < WINDOWS * GAS; t++) micro(&r, t, what);
    CHECK(zero_save(r.e, dir) == ZERO_OK, "%s: save: %s", what, zero_last_error(r.e));
    /* a save while the last rank is half-way through its backward: refused on every rank */
    const uint64_t t0 = WINDOWS * GAS;
    backward(&r, t0, 0, rank_ == world_ - 1 ? NP / 2 : 0);
    zero_status s = zero_save(r.e, mid);
    char want[96];
    snprintf(want, sizeof want, "rank %d has reported gradients since the last zero_step", world_ - 1);
    CHECK(s == ZERO_ERR_STATE && (rank_ == world_ - 1 ? strstr(zero_last_error(r.e), "zero_save in the middle of a "
                                                                 "micro-step: 2 of 4 params ('p0' first)")
                                                      : strstr(zero_last_error(r.e), want)),
          "%s: zero_save mid-backward gave %s: %s", what, zero_status_string(s), zero_last_error(r.e));
    if (rank_ == 0) {
        char latest[600];
        th_ckpt_latest(mid, latest, sizeof latest);
        CHECK(latest[0] == 0, "%s: the refused save wrote %s", what, latest);
    }
    backward(&r, t0, rank_ == world_ - 1 ? NP / 2 : 0, NP);
    CHECK(step(&r) == ZERO_OK, "%s: the micro-step after the refused save: %s", what, zero_last_error(r.e));
    CHECK(zero_save(r.e, mid) == ZERO_OK, "%s: the save after zero_step: %s", what, zero_last_error(r.e));
    for (uint64_t t = t0 + 1; t < 2 * WINDOWS * GAS; t++) micro(&r, t, what);
    CHECK_EQ_INT(th_gather_all_f32(r.e, r.h, NP, NUMEL, ref), ZERO_OK);
    close_run(&r);
    for (int c = 0; c < NCASES; c++)
        if (c != C_HELD || strcmp(plugin, "stage3")) one_case(plugin, c, dir, ref);
out:
    free(ref);
}

int main(int argc, char **argv) {
    check_mpi_init(&argc, &argv, &rank_, &world_);
    char root[256];
    snprintf(root, sizeof root, "%s/ckpt-window-XXXXXX", argc > 1 ? argv[1] : "/tmp");
    th_mkdtemp_bcast(root, sizeof root);
    CHECK(root[0] != 0, "no temporary directory");
    static const char *const plugins[] = {"stage0", "stage1", "stage2", "stage3", "offload"};
    for (size_t i = 0; root[0] && i < sizeof plugins / sizeof *plugins; i++) one_plugin(root, plugins[i]);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank_ == 0 && root[0]) th_remove_dir(root);
    return check_mpi_finish();
}
