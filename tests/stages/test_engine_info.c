/* zero_engine_info_get (ABI 1.7): the step state and batch geometry a host
 * reads between steps, one mpirun of W ranks, for stage 0, 2 and 3:
 *
 *  - right after zero_params_done: the stage, step 0, micro-step 0, the
 *    config's accumulation steps (3) and micro batch (2), the train batch
 *    size libzero derived (2 x 3 x W), loss scale 1;
 *  - after each of 9 micro-steps: micro_step counts 1, 2, 0 (a boundary
 *    exactly when the previous read said micro_step + 1 == accumulation
 *    steps), global_step equals zero_step_result.global_step, and the lr
 *    read before each step is the one it used (zero_step_result.lr), which
 *    the WarmupLR schedule moves;
 *  - a window whose last micro-step has an Inf gradient on the last rank:
 *    the step is skipped, skipped_steps 1, global_step unchanged;
 *  - after zero_load into a fresh engine (another stage): the saver's
 *    global and skipped steps and lr, before any step;
 *  - (1.8) zero_step_args with reserved0 set on the last rank at a
 *    boundary: ZERO_ERR_INVALID_ARGUMENT there and ZERO_ERR_STATE naming
 *    it on the others, all within seconds (before, the others waited in
 *    the step's collectives until the communication timeout), the window
 *    held; the retry with good arguments steps;
 *  - (1.7) zero_broadcast delivers the last rank's 1001 bytes to every
 *    rank; 0 bytes is nothing; NULL or a root outside the group refused;
 *  - a 1.6-era caller with a struct cut after micro_step gets those
 *    fields and nothing written past its struct_size; NULL or a
 *    struct_size of 0 is ZERO_ERR_INVALID_ARGUMENT.
 * Usage: test_engine_info DIR   (under mpirun -np W) */
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/host_util.h"
#include "../common/mpi_check.h"

static int rank_, world_;

enum { NUMEL = 301, GAS = 3, MB = 2 };
static const double LR = 0.01, WARM = 4;

static char *config(int stage) {
    static char buf[1024];
    snprintf(buf, sizeof buf,
             "{\"train_micro_batch_size_per_gpu\": %d, \"gradient_accumulation_steps\": %d, "
             "\"zero_optimization\": {\"stage\": %d}, \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": %g}}, "
             "\"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_min_lr\": 0, \"warmup_max_lr\": %g, "
             "\"warmup_num_steps\": %g, \"warmup_type\": \"linear\"}}}",
             MB, GAS, stage, LR, LR, WARM);
    return buf;
}

static zero_engine_info info(zero_engine *e) {
    zero_engine_info i = ZERO_ENGINE_INFO_INIT;
    CHECK_EQ_INT(zero_engine_info_get(e, &i), ZERO_OK);
    return i;
}

static zero_engine *open_engine(const char *plugin, int stage, float *w, zero_param **h) {
    zero_engine *e = NULL;
    char err[1024];
    zero_status s = th_engine_create(config(stage), plugin, 0, NULL, NULL, &e, err, sizeof err);
    CHECK(s == ZERO_OK, "%s: %s", plugin, err);
    if (s != ZERO_OK) return NULL;
    zero_param_desc d = ZERO_PARAM_DESC_INIT;
    d.name = "w";
    d.data = w;
    d.numel = NUMEL;
    CHECK_EQ_INT(zero_register_param(e, &d, h), ZERO_OK);
    CHECK_EQ_INT(zero_params_done(e), ZERO_OK);
    return e;
}

/* One micro-step; an Inf in the gradient on the last rank when `inf`. */
static zero_step_result micro(zero_engine *e, zero_param *h, int m, int inf) {
    void *g = NULL;
    CHECK_EQ_INT(zero_grad_buffer(e, h, &g), ZERO_OK);
    for (int k = 0; g && k < NUMEL; k++) ((float *)g)[k] = (float)th_u11((uint64_t)m * 1000 + (uint64_t)k);
    if (g && inf && rank_ == world_ - 1) ((float *)g)[7] = INFINITY;
    CHECK_EQ_INT(zero_on_grad_ready(e, h, NULL), ZERO_OK);
    zero_step_args a = ZERO_STEP_ARGS_INIT;
    zero_step_result r = ZERO_STEP_RESULT_INIT;
    CHECK(zero_step(e, &a, &r) == ZERO_OK, "step: %s", zero_last_error(e));
    return r;
}

static void run(const char *plugin, int stage, const char *dir, const char *loader, int load_stage) {
    float w[NUMEL];
    for (int k = 0; k < NUMEL; k++) w[k] = (float)th_u11(77000 + (uint64_t)k);
    zero_param *h = NULL;
    zero_engine *e = open_engine(plugin, stage, w, &h);
    if (!e) return;
    zero_engine_info i = info(e);
    CHECK(i.struct_size == sizeof i, "%s: struct_size %u", plugin, i.struct_size);
    CHECK(i.stage == stage && i.global_step == 0 && i.skipped_steps == 0 && i.micro_step == 0,
          "%s: initial stage %d step %llu skipped %llu micro %u", plugin, i.stage, (unsigned long long)i.global_step,
          (unsigned long long)i.skipped_steps, i.micro_step);
    CHECK(i.gradient_accumulation_steps == GAS && i.train_micro_batch_size_per_gpu == MB &&
              i.train_batch_size == (uint64_t)MB * GAS * (uint64_t)world_,
          "%s: batch geometry gas %u micro %llu train %llu (W=%d)", plugin, i.gradient_accumulation_steps,
          (unsigned long long)i.train_micro_batch_size_per_gpu, (unsigned long long)i.train_batch_size, world_);
    CHECK(i.loss_scale == 1.0, "%s: loss scale %g", plugin, i.loss_scale);
    double lo = i.lr, hi = i.lr;
    for (int m = 0; m < 3 * GAS; m++) {
        const int boundary_expected = i.micro_step + 1 == i.gradient_accumulation_steps;
        const double lr_next = i.lr;
        zero_step_result r = micro(e, h, m, 0);
        /* the lr the info announced is the one the step used (zero_step_result.lr: group 0, no override) */
        CHECK(r.lr == lr_next, "%s m=%d: the step used lr %g, the info before it said %g", plugin, m, r.lr, lr_next);
        i = info(e);
        lo = fmin(lo, i.lr), hi = fmax(hi, i.lr);
        CHECK(r.boundary == boundary_expected, "%s m=%d: boundary %d, info said %d", plugin, m, r.boundary,
              boundary_expected);
        CHECK(i.micro_step == (uint32_t)((m + 1) % GAS), "%s m=%d: micro_step %u", plugin, m, i.micro_step);
        CHECK(i.global_step == r.global_step && i.global_step == (uint64_t)((m + 1) / GAS),
              "%s m=%d: global_step %llu, result %llu", plugin, m, (unsigned long long)i.global_step,
              (unsigned long long)r.global_step);
    }
    CHECK(hi > lo && hi <= LR, "%s: the warm-up lr did not move (%g .. %g)", plugin, lo, hi);
    /* a skipped step */
    for (int m = 0; m < GAS; m++) micro(e, h, 100 + m, m == GAS - 1);
    i = info(e);
    CHECK(i.skipped_steps == 1 && i.global_step == 3 && i.micro_step == 0,
          "%s: after the overflow: skipped %llu, step %llu, micro %u", plugin, (unsigned long long)i.skipped_steps,
          (unsigned long long)i.global_step, i.micro_step);
    /* an older caller's shorter struct, and refusals */
    struct {
        zero_engine_info head;
        unsigned char guard[16];
    } old;
    memset(&old, 0xAB, sizeof old);
    old.head.struct_size = (uint32_t)offsetof(zero_engine_info, gradient_accumulation_steps);
    CHECK_EQ_INT(zero_engine_info_get(e, &old.head), ZERO_OK);
    CHECK(old.head.global_step == 3 && old.head.micro_step == 0 && old.head.struct_size ==
          offsetof(zero_engine_info, gradient_accumulation_steps), "%s: the shorter struct's fields", plugin);
    const unsigned char *tail = (const unsigned char *)&old.head + offsetof(zero_engine_info, gradient_accumulation_steps);
    int untouched = 1;
    for (size_t k = 0; k < sizeof old - offsetof(zero_engine_info, gradient_accumulation_steps); k++)
        untouched &= tail[k] == 0xAB;
    CHECK(untouched, "%s: bytes written past struct_size", plugin);
    zero_engine_info z = ZERO_ENGINE_INFO_INIT;
    z.struct_size = 0;
    CHECK_EQ_INT(zero_engine_info_get(e, &z), ZERO_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(zero_engine_info_get(e, NULL), ZERO_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(zero_engine_info_get(NULL, &z), ZERO_ERR_INVALID_ARGUMENT);
    /* (1.8) one rank's bad zero_step_args at a boundary: refused on every
     * rank at once (agreed with the window), the window held; the retry
     * with good arguments steps */
    for (int m = 0; m < GAS - 1; m++) micro(e, h, 200 + m, 0);
    void *g = NULL;
    CHECK_EQ_INT(zero_grad_buffer(e, h, &g), ZERO_OK);
    for (int k = 0; g && k < NUMEL; k++) ((float *)g)[k] = (float)th_u11(300000 + (uint64_t)k);
    CHECK_EQ_INT(zero_on_grad_ready(e, h, NULL), ZERO_OK);
    zero_step_args bad = ZERO_STEP_ARGS_INIT;
    bad.reserved0 = rank_ == world_ - 1 ? 1u : 0u;
    const double t0 = MPI_Wtime();
    zero_status st = zero_step(e, &bad, NULL);
    const char *msg = zero_last_error(e);
    if (rank_ == world_ - 1)
        CHECK(st == ZERO_ERR_INVALID_ARGUMENT && strstr(msg, "reserved0 is 1"), "%s: the refusing rank: %s (%s)", plugin,
              zero_status_string(st), msg);
    else
        CHECK(st == ZERO_ERR_STATE && strstr(msg, "another rank refused its zero_step_args"),
              "%s: rank %d: %s (%s)", plugin, rank_, zero_status_string(st), msg);
    CHECK(MPI_Wtime() - t0 < 20, "%s: rank %d: the refusal took %.1f s", plugin, rank_, MPI_Wtime() - t0);
    i = info(e);
    CHECK(i.global_step == 3 && i.micro_step == GAS - 1, "%s: after the refusal: step %llu micro %u", plugin,
          (unsigned long long)i.global_step, i.micro_step);
    zero_step_args good = ZERO_STEP_ARGS_INIT;
    zero_step_result r = ZERO_STEP_RESULT_INIT;
    CHECK(zero_step(e, &good, &r) == ZERO_OK && r.boundary && r.taken, "%s: the retry: %s", plugin,
          zero_last_error(e));
    i = info(e);
    CHECK(i.global_step == 4 && i.micro_step == 0, "%s: after the retry: step %llu micro %u", plugin,
          (unsigned long long)i.global_step, i.micro_step);
    /* (1.7) zero_broadcast: host bytes from the last rank to every rank */
    {
        unsigned char b[1001];
        for (int k = 0; k < (int)sizeof b; k++) b[k] = rank_ == world_ - 1 ? (unsigned char)(k * 7 + 3) : 0;
        CHECK_EQ_INT(zero_broadcast(e, b, sizeof b, world_ - 1), ZERO_OK);
        int same = 1;
        for (int k = 0; k < (int)sizeof b; k++) same &= b[k] == (unsigned char)(k * 7 + 3);
        CHECK(same, "%s: rank %d: zero_broadcast did not deliver the root's bytes", plugin, rank_);
        CHECK_EQ_INT(zero_broadcast(e, NULL, 0, 0), ZERO_OK); /* nothing: no collective */
        CHECK_EQ_INT(zero_broadcast(e, NULL, 4, 0), ZERO_ERR_INVALID_ARGUMENT);
        CHECK_EQ_INT(zero_broadcast(e, b, 4, world_), ZERO_ERR_INVALID_ARGUMENT);
    }
    const zero_engine_info saved = i;
    CHECK(zero_save(e, dir) == ZERO_OK, "%s: save: %s", plugin, zero_last_error(e));
    zero_engine_destroy(e);

    /* a fresh engine of another stage, before any step */
    zero_param *h2 = NULL;
    zero_engine *f = open_engine(loader, load_stage, w, &h2);
    if (!f) return;
    CHECK(zero_load(f, dir) == ZERO_OK, "%s <- %s: load: %s", loader, plugin, zero_last_error(f));
    i = info(f);
    CHECK(i.global_step == saved.global_step && i.skipped_steps == saved.skipped_steps && i.micro_step == 0 &&
              i.lr == saved.lr && i.stage == load_stage,
          "%s <- %s: after the load: step %llu skipped %llu lr %g stage %d (saved %llu %llu %g)", loader, plugin,
          (unsigned long long)i.global_step, (unsigned long long)i.skipped_steps, i.lr, i.stage,
          (unsigned long long)saved.global_step, (unsigned long long)saved.skipped_steps, saved.lr);
    zero_engine_destroy(f);
}

int main(int argc, char **argv) {
    check_mpi_init(&argc, &argv, &rank_, &world_);
    if (argc < 2) {
        if (rank_ == 0) fprintf(stderr, "usage: test_engine_info DIR\n");
        MPI_Finalize();
        return 2;
    }
    char dir[2048];
    const char *plugins[3] = {"stage0", "stage2", "stage3"};
    const int stages[3] = {0, 2, 3};
    for (int p = 0; p < 3; p++) {
        snprintf(dir, sizeof dir, "%s/%s", argv[1], plugins[p]);
        if (rank_ == 0) th_remove_dir(dir);
        MPI_Barrier(MPI_COMM_WORLD);
        run(plugins[p], stages[p], dir, plugins[(p + 1) % 3], stages[(p + 1) % 3]);
    }
    if (rank_ == 0 && !check_failures_) th_remove_dir(argv[1]);
    return check_mpi_finish();
}
