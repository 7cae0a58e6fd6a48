/* Ranks start from one model (1.7.3, core/params_values.c), under mpirun:
 *  - a host that registers different initial values on different ranks (a
 *    per-rank seed before building the model) gets rank 0's values on every
 *    rank for those params, with every plugin (stage0/1/2/3, offload): what
 *    zero_gather gives after zero_params_done, bitwise, and a host-owned
 *    array is rewritten with them; params that agree keep their values;
 *  - rank 0 logs one warning naming how many params differed and the first
 *    one; no other rank warns, and no rank warns when everything agrees;
 *  - expert groups (stage2 and, since 1.12, stage3; even world sizes): ranks of different
 *    expert-data-parallel groups keep their own experts (no warning); ranks
 *    of one expert-DP group that differ take that group's first rank's.
 *  - a rank without the host memory to take rank 0's values (its address
 *    space capped with RLIMIT_AS around zero_params_done; skipped under a
 *    sanitizer, whose shadow memory the cap would break) fails every rank
 *    at once with a message: ZERO_ERR_OUT_OF_MEMORY there, ZERO_ERR_COMM
 *    naming it elsewhere (it crashed MPI before the buffers were agreed).
 * Before 1.7.3 stage 0 trained one diverged model per rank and the
 * partitioning stages a patchwork of every rank's initial partition. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "../common/host_util.h"
#include "../common/mpi_check.h"
#include "../common/sanitizer_env.h"

static int rank_ = 0, world_ = 1;

enum { N_SAME = 24, N_DIFF = 37, N_HOST = 19 };

typedef struct logbook {
    int warns;         /* initial-values warnings */
    char text[600];    /* the last one */
} logbook;

static void on_log(void *user, zero_log_level level, int rank, const char *msg) {
    (void)rank;
    logbook *b = user;
    if (level == ZERO_LOG_WARN && strstr(msg, "initial values")) {
        b->warns++;
        snprintf(b->text, sizeof b->text, "%s", msg);
    }
}

/* Value k of param `pid` as rank `r` initialises it; `differ`: the value
 * depends on r. */
static float init_value(int pid, int k, int r, int differ) {
    return (float)th_u11(((uint64_t)pid << 40) ^ ((uint64_t)(differ ? r + 1 : 0) << 20) ^ (uint64_t)k);
}

static zero_param *reg(zero_engine *e, const char *name, float *data, uint64_t n, uint32_t flags, int32_t group) {
    zero_param_desc d = ZERO_PARAM_DESC_INIT;
    d.name = name;
    d.data = data;
    d.numel = n;
    d.flags = flags;
    d.group = group;
    zero_param *p = NULL;
    zero_status s = zero_register_param(e, &d, &p);
    CHECK(s == ZERO_OK, "register %s: %s", name, zero_last_error(e));
    return p;
}

static int equal_to(const float *got, int pid, uint64_t n, int r, int differ) {
    for (uint64_t k = 0; k < n; k++)
        if (memcmp(&got[k], &(float){init_value(pid, (int)k, r, differ)}, sizeof(float))) return 0;
    return 1;
}

/* One engine: same / differs (if `differ`) / host-owned differs
 * (below stage 3).  Checks the values after zero_params_done and the log. */
static void dense_case(const char *plugin, int stage, int differ) {
    char cfg[400], err[600] = "";
    snprintf(cfg, sizeof cfg,
             "{\"train_micro_batch_size_per_gpu\": 1, \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": "
             "0.001}}, \"zero_optimization\": {\"stage\": %d%s}}",
             stage, strcmp(plugin, "offload") ? "" : ", \"offload_optimizer\": {\"device\": \"cpu\"}");
    logbook book = {0};
    zero_engine *e = NULL;
    if (th_engine_create(cfg, plugin, 0, on_log, &book, &e, err, sizeof err) != ZERO_OK) {
        CHECK(0, "%s: %s", plugin, err);
        return;
    }
    float same[N_SAME], diff[N_DIFF], host[N_HOST];
    for (int k = 0; k < N_SAME; k++) same[k] = init_value(0, k, rank_, 0);
    for (int k = 0; k < N_DIFF; k++) diff[k] = init_value(1, k, rank_, differ);
    for (int k = 0; k < N_HOST; k++) host[k] = init_value(3, k, rank_, differ);
    const int owned = stage < 3;
    zero_param *p[2] = {reg(e, "same", same, N_SAME, 0, 0), reg(e, "differs", diff, N_DIFF, 0, 0)};
    if (owned) reg(e, "host_owned", host, N_HOST, ZERO_PARAM_HOST_OWNED, 0);
    zero_status s = zero_params_done(e);
    CHECK(s == ZERO_OK, "%s params_done: %s", plugin, zero_last_error(e));
    if (s == ZERO_OK) {
        const size_t numel[2] = {N_SAME, N_DIFF};
        float got[N_SAME + N_DIFF];
        CHECK_EQ_INT(th_gather_all_f32(e, p, 2, numel, got), ZERO_OK);
        CHECK(equal_to(got, 0, N_SAME, rank_, 0), "%s: 'same' changed", plugin);
        CHECK(equal_to(got + N_SAME, 1, N_DIFF, 0, differ), "%s rank %d: 'differs' is not rank 0's initial values",
              plugin, rank_);
        if (owned)
            CHECK(equal_to(host, 3, N_HOST, 0, differ), "%s rank %d: the host-owned array is not rank 0's values",
                  plugin, rank_);
    }
    zero_engine_destroy(e);
    if (!differ || world_ == 1) {
        CHECK(book.warns == 0, "%s rank %d: warned although every rank agreed: %s", plugin, rank_, book.text);
    } else if (rank_ == 0) {
        CHECK(book.warns == 1, "%s: rank 0 warned %d times", plugin, book.warns);
        CHECK_STR_CONTAINS(book.text, owned ? "2 of 3 parameters" : "1 of 2 parameters");
        CHECK_STR_CONTAINS(book.text, "(first: 'differs')");
        CHECK_STR_CONTAINS(book.text, "seed every rank the same");
    } else {
        CHECK(book.warns == 0, "%s rank %d: only rank 0 warns, got: %s", plugin, rank_, book.text);
    }
}

/* stage2 / stage3 with an expert group (param group 1, color rank % 2):
 * expert values depend on the color, or (`within`) on the rank.  Stage 3
 * keeps nothing gathered (persistence 0): its gather assembles the pieces
 * of the expert-DP group's ranks. */
static void expert_case(const char *plugin, int within) {
    const int s3 = !strcmp(plugin, "stage3");
    char cfg[400];
    snprintf(cfg, sizeof cfg,
             "{\"train_micro_batch_size_per_gpu\": 1, \"optimizer\": {\"type\": \"AdamW\", \"params\": "
             "{\"lr\": 0.001}}, \"zero_optimization\": {\"stage\": %d%s}}",
             s3 ? 3 : 2, s3 ? ", \"stage3_param_persistence_threshold\": 0" : "");
    logbook book = {0};
    zero_engine *e = NULL;
    char err[600] = "";
    if (th_engine_create(cfg, plugin, 0, on_log, &book, &e, err, sizeof err) != ZERO_OK) {
        CHECK(0, "experts: %s", err);
        return;
    }
    zero_group_desc g = ZERO_GROUP_DESC_INIT;
    g.group = 1;
    g.expert_color = rank_ % 2;
    CHECK_EQ_INT(zero_set_group(e, &g), ZERO_OK);
    const int color = rank_ % 2;
    float dense[N_SAME], expert[N_DIFF];
    for (int k = 0; k < N_SAME; k++) dense[k] = init_value(0, k, 0, 0);
    /* an expert's values: its color's (one expert per color), or this rank's */
    for (int k = 0; k < N_DIFF; k++) expert[k] = init_value(5, k, within ? rank_ : color, 1);
    zero_param *p[2] = {reg(e, "dense", dense, N_SAME, 0, 0), reg(e, "expert", expert, N_DIFF, 0, 1)};
    zero_status s = zero_params_done(e);
    CHECK(s == ZERO_OK, "experts params_done: %s", zero_last_error(e));
    if (s == ZERO_OK) {
        const size_t numel[2] = {N_SAME, N_DIFF};
        float got[N_SAME + N_DIFF];
        CHECK_EQ_INT(th_gather_all_f32(e, p, 2, numel, got), ZERO_OK);
        CHECK(equal_to(got, 0, N_SAME, 0, 0), "experts: the dense param changed");
        /* the expert-DP group of `color` is ranks color, color + 2, ...: its first rank is `color` */
        CHECK(equal_to(got + N_SAME, 5, N_DIFF, color, 1), "experts%s rank %d: not the expert of its group's first rank",
              within ? " (differing within)" : "", rank_);
    }
    zero_engine_destroy(e);
    if (!within) {
        CHECK(book.warns == 0, "experts rank %d: warned about different experts: %s", rank_, book.text);
    } else if (rank_ < 2) { /* rank 0 of each expert-DP group */
        CHECK(book.warns == 1, "experts rank %d: warned %d times", rank_, book.warns);
        CHECK_STR_CONTAINS(book.text, "of expert group 1");
        CHECK_STR_CONTAINS(book.text, "'expert'");
    } else {
        CHECK(book.warns == 0, "experts rank %d: warned: %s", rank_, book.text);
    }
}

/* The last rank cannot allocate the 64 MiB host buffer for rank 0's values. */
static void oom_case(void) {
#ifdef UNDER_SANITIZER
    if (rank_ == 0) printf("out-of-memory case skipped: RLIMIT_AS would break the sanitizer's shadow memory\n");
#else
    const char *cfg = "{\"train_micro_batch_size_per_gpu\": 1, \"zero_optimization\": {\"stage\": 2}}";
    zero_engine *e = NULL;
    char err[600] = "";
    if (th_engine_create(cfg, "stage2", 0, NULL, NULL, &e, err, sizeof err) != ZERO_OK) {
        CHECK(0, "oom: %s", err);
        return;
    }
    const size_t n = (size_t)16 << 20;
    float *w = malloc(n * sizeof *w);
    CHECK(w != NULL, "oom: test buffer");
    if (!w) return;
    for (size_t k = 0; k < n; k++) w[k] = (float)rank_;
    reg(e, "big", w, n, 0, 0);
    const int capped = rank_ == world_ - 1;
    struct rlimit old;
    const int cap = capped && th_address_space_cap((size_t)16 << 20, &old);
    zero_status s = zero_params_done(e);
    if (cap) th_address_space_restore(&old);
    const char *msg = zero_last_error(e);
    if (capped) {
        CHECK(s == ZERO_ERR_OUT_OF_MEMORY, "oom: the capped rank got %s: %s", zero_status_string(s), msg);
        CHECK_STR_CONTAINS(msg, "no host memory");
    } else {
        CHECK(s == ZERO_ERR_COMM, "oom: rank %d got %s: %s", rank_, zero_status_string(s), msg);
        CHECK_STR_CONTAINS(msg, "another rank has no host memory");
    }
    zero_engine_destroy(e);
    free(w);
#endif
}

int main(int argc, char **argv) {
    check_mpi_init(&argc, &argv, &rank_, &world_);
    static const struct {
        const char *plugin;
        int stage;
    } runs[] = {{"stage0", 0}, {"stage1", 1}, {"stage2", 2}, {"stage3", 3}, {"offload", 2}};
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        dense_case(runs[i].plugin, runs[i].stage, 1);
        dense_case(runs[i].plugin, runs[i].stage, 0);
    }
    if (world_ % 2 == 0 && world_ >= 4) { /* expert-DP groups of two or more */
        for (int s3 = 0; s3 <= 1; s3++) {
            expert_case(s3 ? "stage3" : "stage2", 0);
            expert_case(s3 ? "stage3" : "stage2", 1);
        }
    }
    if (world_ > 1) oom_case();
    return check_mpi_finish();
}
