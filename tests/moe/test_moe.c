/* Mixture-of-experts parameter groups (ABI 1.3, issue 22), through the
 * public ABI only, as a host would use them.
 *
 * The model: two dense params (group 0) and E = 2 experts of two params
 * each (group 1, an expert group).  Rank r holds expert r % 2, so its
 * expert-data-parallel group is the ranks of the same parity (color r % 2,
 * size N / 2) and its expert-parallel group -- the ranks that exchange
 * tokens -- is {2*(r/2), 2*(r/2)+1}.  A "token exchange" is emulated: the
 * holder of expert e computes the expert's gradient for the tokens of its
 * expert-parallel group, so the expert-DP sum holds every rank's tokens
 * once.  Each rank's loss is a quadratic (w - t_src)^2 * a_src / 2.
 *
 * The oracle: one process (ZERO_COMM_SELF, stage0, every expert a plain
 * dense param) fed the mean gradient over all N sources.  Checked for
 * stage0 (1.13), stage1, stage2, offload and stage3 (stage-1 and stage-2 partitioning), fp32 and
 * bf16, with gradient accumulation and active clipping (a wrong expert norm
 * -- counted N/2 times, or not at all -- changes the clip coefficient and
 * every parameter): final parameters and every boundary's grad norm.
 * The tiled step: with 16-bit gradients and max_group_size the peak fp32
 * temporary is one tile (<= max_group_size x 4 bytes), reported against
 * the whole-partition upcast.  Misuse: a tensor in two groups, group
 * tables that differ, unequal expert-DP groups, different experts inside
 * one expert-DP group, a plugin without ZERO_PLUGIN_CAP_EXPERT_GROUPS
 * (the kit's template): a named error on every rank.
 * (libzero 1.12) Stage 3 too: each expert's pieces all-gathered over its
 * expert-DP group (N = 2: groups of one rank, the shard itself), gathering
 * for real (nothing persistent, a budget of about two params, prefetch),
 * fp32 and bf16, 16-bit gradients with tiles, offload_optimizer and
 * offload_param cpu, and a save and load of the same world. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"
#include "check.h"
#include "host_util.h"
#include "zero.h"

enum { NDENSE = 2, NEXP = 2, EXPERTS = 2, MAXN = 300 };
static const uint64_t dense_n[NDENSE] = {300, 77};
static const uint64_t exp_n[NEXP] = {130, 61};
static int rank_, world_;


/* ---- engines ------------------------------------------------------------ */
/* An engine over MPI_COMM_WORLD (plugin NULL: the config's stage), or NULL
 * after a failed CHECK. */
static zero_engine *open_world(const char *json, const char *plugin) {
    zero_engine *e = NULL;
    char err[600] = "";
    if (th_engine_create(json, plugin, 0, NULL, NULL, &e, err, sizeof err) != ZERO_OK) CHECK(0, "%s", err);
    return e;
}
/* Param group 1 is the expert group; its expert-DP group is the ranks
 * holding the same expert (rank % EXPERTS). */
static void join_experts(zero_engine *e) {
    zero_group_desc g = ZERO_GROUP_DESC_INIT;
    g.group = 1;
    g.expert_color = rank_ % EXPERTS;
    CHECK_EQ_INT(zero_set_group(e, &g), ZERO_OK);
}

/* ---- the model ----------------------------------------------------------- */
/* pid: 0, 1 dense; 2 + 2e + k expert e's k-th param. */
static uint64_t numel_of(int pid) { return pid < NDENSE ? dense_n[pid] : exp_n[(pid - NDENSE) % NEXP]; }
static float init_of(int pid, uint64_t i) { return 0.5f * cosf(0.11f * (float)i + (float)pid); }
/* d/dw of source src's loss for micro-batch m at element i */
static float contrib(int pid, int src, int m, float w, uint64_t i) {
    float t = sinf(0.37f * (float)i + 1.3f * (float)src + 0.7f * (float)pid) + 0.1f * (float)m;
    return (w - t) * (0.5f + 0.25f * (float)src);
}

typedef struct run_cfg {
    const char *plugin; /* stage0, stage1, stage2, offload, stage3 */
    int stage;          /* zero_optimization.stage (offload: 1 or 2 partitioning) */
    int bf16;
    int accum16;        /* data_types.grad_accum_dtype bf16: 16-bit gradients, the step upcasts tiles */
    int max_group;      /* moe.max_group_size, 0 = unset */
    int ckpt;           /* also save and load (same world) */
    const char *extra;  /* more zero_optimization keys (",\"key\": ..."), NULL: none */
    const char *optim;  /* optimizer.type, NULL: AdamW */
} run_cfg;

/* stage 3 gathering for real: nothing persistent, a budget of about two
 * params, prefetch along the recorded order */
#define S3_GATHER ", \"stage3_param_persistence_threshold\": 0, \"stage3_max_live_parameters\": 700," \
                  " \"stage3_prefetch_bucket_size\": 400, \"stage3_max_reuse_distance\": 0"
#define S3_OFFLOAD_OPT ", \"offload_optimizer\": {\"device\": \"cpu\"}"
#define S3_OFFLOAD_PARAM ", \"offload_param\": {\"device\": \"cpu\"}"

static void config(char *buf, size_t n, const run_cfg *c, int stage) {
    char moe[64] = "";
    if (c->max_group) snprintf(moe, sizeof moe, ", \"moe\": {\"max_group_size\": %d}", c->max_group);
    snprintf(buf, n,
             "{\"train_micro_batch_size_per_gpu\": 1, \"gradient_accumulation_steps\": 2,"
             " \"gradient_clipping\": 0.05,"
             " \"optimizer\": {\"type\": \"%s\", \"params\": {\"lr\": 0.01, \"weight_decay\": 0.01}},"
             " \"zero_optimization\": {\"stage\": %d, \"reduce_bucket_size\": 96%s}%s%s%s}",
             c->optim ? c->optim : "AdamW", stage, c->extra && stage ? c->extra : "", c->bf16 ? ", \"bf16\": {\"enabled\": true}" : "",
             c->accum16 ? ", \"data_types\": {\"grad_accum_dtype\": \"bf16\"}" : "", moe);
}

typedef struct model {
    zero_engine *e;
    int np;
    int pid[NDENSE + NEXP * EXPERTS];
    zero_param *h[NDENSE + NEXP * EXPERTS];
    int bf16;
} model;

static float read_el(const model *m, const void *ptr, uint64_t i) {
    return m->bf16 ? th_from_bf16(((const uint16_t *)ptr)[i]) : ((const float *)ptr)[i];
}

static zero_status make(model *m, const run_cfg *c, int reference) {
    memset(m, 0, sizeof *m);
    m->bf16 = c->bf16;
    char json[768];
    config(json, sizeof json, c, reference ? 0 : c->stage);
    char err[600] = "";
    zero_status s = th_engine_create(json, reference ? "stage0" : c->plugin, reference, NULL, NULL, &m->e, err,
                                     sizeof err);
    CHECK(s == ZERO_OK, "create %s: %s", reference ? "reference" : c->plugin, err);
    if (s != ZERO_OK) return s;
    const int noexp = getenv("MOE_TEST_NOEXPERT") != NULL; /* debugging: the harness without expert groups */
    if (!reference && !noexp) join_experts(m->e);
    /* initial values are read at zero_params_done: one buffer per param */
    static float initf[NDENSE + NEXP * EXPERTS][MAXN];
    static uint16_t inith[NDENSE + NEXP * EXPERTS][MAXN];
    for (int pid = 0; pid < NDENSE + NEXP * EXPERTS; pid++) {
        const int expert = pid < NDENSE ? -1 : (pid - NDENSE) / NEXP;
        if (!reference && !noexp && expert >= 0 && expert != rank_ % EXPERTS) continue; /* not held here */
        char name[32];
        if (expert < 0)
            snprintf(name, sizeof name, "dense%d", pid);
        else
            snprintf(name, sizeof name, "expert%d.w%d", expert, (pid - NDENSE) % NEXP);
        for (uint64_t i = 0; i < numel_of(pid); i++) {
            initf[pid][i] = init_of(pid, i);
            inith[pid][i] = th_to_bf16(initf[pid][i]);
        }
        zero_param_desc d = ZERO_PARAM_DESC_INIT;
        d.name = name;
        d.data = c->bf16 ? (const void *)inith[pid] : (const void *)initf[pid];
        d.numel = numel_of(pid);
        d.dtype = c->bf16 ? ZERO_DTYPE_BF16 : ZERO_DTYPE_F32;
        d.group = expert >= 0 && !reference ? 1 : 0;
        s = zero_register_param(m->e, &d, &m->h[m->np]);
        CHECK(s == ZERO_OK, "register %s: %s", name, zero_last_error(m->e));
        m->pid[m->np++] = pid;
    }
    s = zero_params_done(m->e);
    CHECK(s == ZERO_OK, "params_done (%s): %s", reference ? "reference" : c->plugin, zero_last_error(m->e));
    return s;
}

/* One micro-batch: every held param's gradient added, reported, stepped. */
static zero_status micro(model *m, int reference, int mb, zero_step_result *res) {
    static float g[MAXN];
    for (int k = 0; k < m->np; k++) {
        const int pid = m->pid[k];
        const uint64_t n = numel_of(pid);
        void *w = NULL, *buf = NULL;
        zero_status s = zero_gather(m->e, &m->h[k], 1, &w);
        if (s != ZERO_OK) return s;
        /* sources whose tokens this rank's copy of the param sees */
        int lo, hi;
        if (reference) {
            lo = 0, hi = world_;
        } else if (pid < NDENSE || getenv("MOE_TEST_NOEXPERT")) {
            lo = rank_, hi = rank_ + 1;
        } else {
            lo = EXPERTS * (rank_ / EXPERTS), hi = lo + EXPERTS; /* the expert-parallel group's tokens */
        }
        for (uint64_t i = 0; i < n; i++) {
            float acc = 0.0f;
            for (int src = lo; src < hi; src++) acc += contrib(pid, src, mb, read_el(m, w, i), i);
            g[i] = reference ? acc / (float)world_ : acc; /* the oracle sees the mean over all N sources */
        }
        zero_release(m->e, &m->h[k], 1);
        if ((s = zero_grad_buffer(m->e, m->h[k], &buf)) != ZERO_OK) return s;
        for (uint64_t i = 0; i < n; i++) {
            if (m->bf16) {
                uint16_t *b = buf;
                b[i] = th_to_bf16(th_from_bf16(b[i]) + g[i]);
            } else {
                ((float *)buf)[i] += g[i];
            }
        }
        if ((s = zero_on_grad_ready(m->e, m->h[k], NULL)) != ZERO_OK) return s;
    }
    return zero_step(m->e, NULL, res);
}

/* Save d, load it into a fresh engine of the same world: every param this
 * rank holds comes back bitwise (each rank's own experts included, though
 * the manifest names rank 0's). */
static void check_ckpt(const run_cfg *c, model *d) {
    char dir[64] = "/tmp/zero-moe-XXXXXX";
    if (rank_ == 0 && !mkdtemp(dir)) dir[0] = 0;
    MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);
    if (!dir[0]) {
        CHECK(0, "mkdtemp failed");
        return;
    }
    CHECK(zero_save(d->e, dir) == ZERO_OK, "save: %s", zero_last_error(d->e));
    model l;
    memset(&l, 0, sizeof l);
    if (make(&l, c, 0) == ZERO_OK) {
        zero_status s = zero_load(l.e, dir);
        CHECK(s == ZERO_OK, "%s: load with expert groups: %s", c->plugin, zero_last_error(l.e));
        for (int k = 0; s == ZERO_OK && k < d->np; k++) {
            void *pa, *pb;
            if (zero_gather(d->e, &d->h[k], 1, &pa) != ZERO_OK || zero_gather(l.e, &l.h[k], 1, &pb) != ZERO_OK) {
                CHECK(0, "gather failed");
                break;
            }
            CHECK(memcmp(pa, pb, numel_of(d->pid[k]) * (c->bf16 ? 2 : 4)) == 0, "%s: param pid %d differs after load",
                  c->plugin, d->pid[k]);
            zero_release(d->e, &d->h[k], 1);
            zero_release(l.e, &l.h[k], 1);
        }
    }
    if (l.e) zero_engine_destroy(l.e);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank_ == 0) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        CHECK(system(cmd) == 0, "cleanup of %s", dir);
    }
}

static void run_one(const run_cfg *c) {
    model d, r;
    memset(&d, 0, sizeof d);
    memset(&r, 0, sizeof r);
    if (make(&d, c, 0) != ZERO_OK || make(&r, c, 1) != ZERO_OK) {
        if (d.e) zero_engine_destroy(d.e);
        if (r.e) zero_engine_destroy(r.e);
        return;
    }
    const double ntol = c->bf16 ? 3e-2 : 1e-5;
    int boundaries = 0, clipped = 0;
    for (int mb = 0; mb < 8; mb++) {
        zero_step_result a = ZERO_STEP_RESULT_INIT, b = ZERO_STEP_RESULT_INIT;
        zero_status sa = micro(&d, 0, mb, &a);
        CHECK(sa == ZERO_OK, "%s step: %s", c->plugin, zero_last_error(d.e));
        zero_status sb = micro(&r, 1, mb, &b);
        CHECK(sb == ZERO_OK, "reference step: %s", zero_last_error(r.e));
        if (sa != ZERO_OK || sb != ZERO_OK) break;
        CHECK_EQ_INT(a.boundary, b.boundary);
        if (a.boundary) {
            boundaries++;
            if (getenv("MOE_TEST_VERBOSE") && rank_ == 0)
                printf("boundary %d: norm %.9g vs %.9g\n", boundaries, a.grad_norm, b.grad_norm);
            clipped += b.grad_norm > 0.05;
            CHECK(fabs(a.grad_norm - b.grad_norm) <= ntol * b.grad_norm,
                  "%s stage %d bf16 %d: grad norm %.9g vs single-process %.9g", c->plugin, c->stage, c->bf16,
                  a.grad_norm, b.grad_norm);
        }
    }
    CHECK_EQ_INT(boundaries, 4);
    /* the checks below gather in another order than training did */
    if (c->stage == 3) CHECK_EQ_INT(zero_set_phase(d.e, "check"), ZERO_OK);
    CHECK(clipped == boundaries, "clipping must be active at every step (%d of %d)", clipped, boundaries);
    /* every param this rank holds equals the oracle's copy of it */
    double worst = 0.0;
    for (int k = 0; k < d.np; k++) {
        int kr = 0;
        while (r.pid[kr] != d.pid[k]) kr++;
        void *pa, *pb;
        if (zero_gather(d.e, &d.h[k], 1, &pa) != ZERO_OK || zero_gather(r.e, &r.h[kr], 1, &pb) != ZERO_OK) {
            CHECK(0, "gather failed");
            break;
        }
        for (uint64_t i = 0; i < numel_of(d.pid[k]); i++) {
            const double x = read_el(&d, pa, i), y = read_el(&r, pb, i);
            /* fp32: rounding of the sums' order; bf16: two ulps of the weight */
            const double tol = c->bf16 ? 2.0 * ldexp(1.0, (int)floor(log2(fabs(y) + 1e-30)) - 7) + 1e-4 : 2e-6;
            if (fabs(x - y) - tol > worst) worst = fabs(x - y) - tol;
            if (fabs(x - y) > tol) {
                CHECK(0, "%s stage %d bf16 %d rank %d: param pid %d [%llu] = %.9g, single process %.9g", c->plugin,
                      c->stage, c->bf16, rank_, d.pid[k], (unsigned long long)i, x, y);
                break;
            }
        }
        zero_release(d.e, &d.h[k], 1);
        zero_release(r.e, &r.h[kr], 1);
    }
    if (c->ckpt) check_ckpt(c, &d);
    /* the tiled step's fp32 temporaries */
    zero_memory_stats ms = ZERO_MEMORY_STATS_INIT;
    CHECK_EQ_INT(zero_memory_stats_get(d.e, &ms), ZERO_OK);
    if (c->accum16) {
        CHECK(ms.step_fp32_peak_bytes > 0, "16-bit gradients: the step upcasts tiles");
        CHECK(ms.step_fp32_peak_bytes <= ms.step_tile_max_numel * 4, "peak %llu > largest tile %llu x 4",
              (unsigned long long)ms.step_fp32_peak_bytes, (unsigned long long)ms.step_tile_max_numel);
        if (c->max_group)
            CHECK(ms.step_tile_max_numel <= (uint64_t)c->max_group, "tile %llu > max_group_size %d",
                  (unsigned long long)ms.step_tile_max_numel, c->max_group);
        CHECK(ms.step_fp32_peak_bytes < ms.step_untiled_numel * 4, "tiling saved nothing: %llu vs %llu",
              (unsigned long long)ms.step_fp32_peak_bytes, (unsigned long long)ms.step_untiled_numel * 4);
        if (rank_ == 0)
            printf("moe %s stage %d max_group_size %d: peak fp32 step temporary %llu bytes (largest tile %llu "
                   "elements) vs %llu bytes for the whole partition upcast at once: %.1f%% saved\n",
                   c->plugin, c->stage, c->max_group, (unsigned long long)ms.step_fp32_peak_bytes,
                   (unsigned long long)ms.step_tile_max_numel, (unsigned long long)ms.step_untiled_numel * 4,
                   100.0 * (1.0 - (double)ms.step_fp32_peak_bytes / (double)(ms.step_untiled_numel * 4)));
    } else {
        CHECK(ms.step_fp32_peak_bytes == 0, "fp32 gradients: nothing to upcast, got %llu bytes",
              (unsigned long long)ms.step_fp32_peak_bytes);
    }
    if (rank_ == 0)
        printf("moe %s stage %d bf16 %d accum16 %d %s N %d: equal to the single-process reference\n", c->plugin,
               c->stage, c->bf16, c->accum16, c->optim ? c->optim : "AdamW", world_);
    zero_engine_destroy(d.e);
    zero_engine_destroy(r.e);
}

/* ---- misuse: a named error on every rank ---------------------------------- */
typedef enum { TWO_GROUPS, HOST_TENSOR, TABLES_DIFFER, UNEQUAL, NAMES_DIFFER, NO_CAP } misuse;

static void expect_error(misuse what, zero_status want, const char *needle) {
    char json[256];
    snprintf(json, sizeof json, "{\"train_micro_batch_size_per_gpu\": 1, \"zero_optimization\": {\"stage\": %d}%s}",
             what == NO_CAP ? 1 : 2, "");
#ifdef ZERO_NO_EXPERTS_PLUGIN
    zero_engine *e = open_world(json, what == NO_CAP ? ZERO_NO_EXPERTS_PLUGIN : NULL);
#else
    zero_engine *e = open_world(json, NULL);
#endif
    if (!e) return;
    zero_group_desc g = ZERO_GROUP_DESC_INIT;
    g.group = 1;
    g.expert_color = rank_ % EXPERTS;
    if (what == UNEQUAL) g.expert_color = rank_ == world_ - 1; /* N-1 ranks against one */
    if (!(what == TABLES_DIFFER && rank_ == 1)) CHECK_EQ_INT(zero_set_group(e, &g), ZERO_OK);
    static float data[64], other[64]; /* initial values: shared freely (they are only copied) */
    zero_param *h;
    zero_param_desc d = ZERO_PARAM_DESC_INIT;
    d.name = "dense";
    d.data = data;
    d.numel = 64;
    CHECK_EQ_INT(zero_register_param(e, &d, &h), ZERO_OK);
    char name[32];
    snprintf(name, sizeof name, "expert%d", what == NAMES_DIFFER && rank_ >= EXPERTS ? 9 : rank_ % EXPERTS);
    d.name = name;
    d.data = other;
    d.numel = 64;
    d.group = 1;
    CHECK_EQ_INT(zero_register_param(e, &d, &h), ZERO_OK);
    if (what == TWO_GROUPS && rank_ == 1) { /* "dense" again, now in the expert group: refused here ... */
        d.name = "dense";
        CHECK_EQ_INT(zero_register_param(e, &d, &h), ZERO_ERR_INVALID_ARGUMENT);
        CHECK_STR_CONTAINS(zero_last_error(e), "two groups");
    }
    if (what == HOST_TENSOR) {
        /* one host-owned tensor behind a dense and an expert param: refused
         * at once since 1.7.5 (any two host-owned params on one tensor) */
        static float mine[64], grad[64];
        d.name = "alias";
        d.flags = ZERO_PARAM_HOST_OWNED;
        d.data = mine;
        d.group = 0;
        CHECK_EQ_INT(zero_register_param(e, &d, &h), ZERO_OK);
        d.name = "alias2";
        d.group = 1;
        CHECK_EQ_INT(zero_register_param(e, &d, &h), ZERO_ERR_INVALID_ARGUMENT);
        CHECK_STR_CONTAINS(zero_last_error(e), "overlaps the one of param 'alias'");
        /* one host gradient buffer behind a dense and an expert param, in
         * groups that differ by rank: refused by every rank at params_done */
        d.flags = 0;
        d.data = other;
        d.grad = grad;
        d.name = "grad_alias";
        d.group = rank_ == 0 ? 1 : 0;
        CHECK_EQ_INT(zero_register_param(e, &d, &h), ZERO_OK);
        d.name = "grad_alias2";
        d.group = rank_ == 0 ? 0 : 1;
        CHECK_EQ_INT(zero_register_param(e, &d, &h), ZERO_OK);
    }
    /* ... and every rank learns it at zero_params_done */
    zero_status s = zero_params_done(e);
    CHECK(s == want, "misuse %d on rank %d: status %d, expected %d (%s)", (int)what, rank_, (int)s, (int)want,
          zero_last_error(e));
    CHECK_STR_CONTAINS(zero_last_error(e), needle);
    zero_engine_destroy(e);
}

/* fp16: an Inf in one rank's expert gradient is every rank's overflow
 * (agreed over the world, not the expert-DP group): the step is skipped
 * everywhere and the loss scale drops. */
static void check_overflow(void) {
    const char *json = "{\"train_micro_batch_size_per_gpu\": 1, \"fp16\": {\"enabled\": true,"
                       " \"initial_scale_power\": 8, \"hysteresis\": 1}, \"zero_optimization\": {\"stage\": 2}}";
    zero_engine *e = open_world(json, NULL);
    if (!e) return;
    join_experts(e);
    static uint16_t zeros[2][32];
    zero_param *h[2];
    zero_param_desc d = ZERO_PARAM_DESC_INIT;
    d.dtype = ZERO_DTYPE_F16;
    d.numel = 32;
    d.name = "dense";
    d.data = zeros[0];
    CHECK_EQ_INT(zero_register_param(e, &d, &h[0]), ZERO_OK);
    d.name = rank_ % EXPERTS ? "expert1" : "expert0";
    d.data = zeros[1];
    d.group = 1;
    CHECK_EQ_INT(zero_register_param(e, &d, &h[1]), ZERO_OK);
    CHECK_EQ_INT(zero_params_done(e), ZERO_OK);
    const double scale0 = zero_loss_scale(e);
    for (int k = 0; k < 2; k++) {
        void *buf;
        CHECK_EQ_INT(zero_grad_buffer(e, h[k], &buf), ZERO_OK);
        if (k == 1 && rank_ == world_ - 1) ((uint16_t *)buf)[5] = 0x7c00; /* +Inf in fp16, one expert rank only */
        CHECK_EQ_INT(zero_on_grad_ready(e, h[k], NULL), ZERO_OK);
    }
    zero_step_result res = ZERO_STEP_RESULT_INIT;
    CHECK_EQ_INT(zero_step(e, NULL, &res), ZERO_OK);
    CHECK(res.overflow == 1 && res.taken == 0, "rank %d: overflow %d taken %d (an expert's Inf on rank %d)", rank_,
          res.overflow, res.taken, world_ - 1);
    CHECK(zero_loss_scale(e) < scale0, "loss scale %g did not drop from %g", zero_loss_scale(e), scale0);
    zero_engine_destroy(e);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &world_);
    if (world_ % EXPERTS != 0) {
        if (rank_ == 0) fprintf(stderr, "test_moe needs an even world size\n");
        MPI_Finalize();
        return 1;
    }
    const int only = argc > 1 ? atoi(argv[1]) : -1; /* run one configuration (debugging) */
    const run_cfg runs[] = {
        {"stage1", 1, 0, 0, 0, 1, NULL, NULL}, {"stage2", 2, 0, 0, 0, 0, NULL, NULL},  {"offload", 2, 0, 0, 0, 1, NULL, NULL}, {"offload", 1, 0, 0, 0, 0, NULL, NULL},
        {"stage1", 1, 1, 0, 0, 0, NULL, NULL}, {"stage2", 2, 1, 0, 0, 0, NULL, NULL},  {"offload", 2, 1, 0, 0, 0, NULL, NULL},
        {"stage2", 2, 1, 1, 0, 0, NULL, NULL}, {"stage2", 2, 1, 1, 40, 0, NULL, NULL}, {"stage1", 1, 1, 1, 40, 0, NULL, NULL}, {"offload", 2, 1, 1, 40, 0, NULL, NULL},
        /* (libzero 1.12) stage 3: each expert's pieces gathered over its expert-DP group */
        {"stage3", 3, 0, 0, 0, 1, S3_GATHER, NULL}, {"stage3", 3, 1, 0, 0, 1, S3_GATHER, NULL}, {"stage3", 3, 0, 0, 0, 0, NULL, NULL},
        {"stage3", 3, 1, 1, 40, 0, S3_GATHER, NULL}, {"stage3", 3, 0, 0, 0, 1, S3_GATHER S3_OFFLOAD_OPT, NULL},
        {"stage3", 3, 1, 0, 0, 1, S3_GATHER S3_OFFLOAD_OPT S3_OFFLOAD_PARAM, NULL},
        /* (libzero 1.12) Lamb: each expert's trust ratio from its norms over its expert-DP group */
        {"stage1", 1, 0, 0, 0, 0, NULL, "Lamb"}, {"stage2", 2, 1, 0, 0, 0, NULL, "Lamb"},
        {"offload", 2, 0, 0, 0, 0, NULL, "Lamb"}, {"stage3", 3, 0, 0, 0, 0, S3_GATHER, "Lamb"},
        /* (libzero 1.13) stage 0: every bucket all-reduced over its own set's communicator (expert-DP for the
         * experts), each expert counted once in the clipping norm and in Lamb's trust ratios */
        {"stage0", 0, 0, 0, 0, 1, NULL, NULL}, {"stage0", 0, 1, 0, 0, 0, NULL, NULL}, {"stage0", 0, 1, 1, 40, 0, NULL, NULL},
        {"stage0", 0, 0, 0, 0, 0, NULL, "Lamb"},
    };
    for (int i = 0; i < (int)(sizeof runs / sizeof runs[0]); i++) {
        if (only >= 0 && only != i) continue;
        run_one(&runs[i]);
    }
    if (only < 0) {
        expect_error(TWO_GROUPS, ZERO_ERR_MISMATCH, "'dense' in group 0 and again in group 1");
        expect_error(HOST_TENSOR, ZERO_ERR_MISMATCH, "one host tensor is registered in two groups");
        expect_error(TABLES_DIFFER, ZERO_ERR_MISMATCH, "different parameter groups");
        if (world_ > EXPERTS) {
            expect_error(UNEQUAL, ZERO_ERR_MISMATCH, "expert groups differ across ranks");
            expect_error(NAMES_DIFFER, ZERO_ERR_MISMATCH, "different experts");
        }
        /* (stage 3 gathers expert groups since libzero 1.12, stage 0 and stage1-pp run them since 1.13,
         * with a pipeline too: tests/pipeline; the kit's template does not declare the capability) */
#ifdef ZERO_NO_EXPERTS_PLUGIN
        expect_error(NO_CAP, ZERO_ERR_UNSUPPORTED, "does not support expert groups");
#endif
        check_overflow();
    }
    int rc = check_finish(), any = 0;
    MPI_Allreduce(&rc, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank_ == 0) printf("test_moe N=%d: %s\n", world_, any ? "FAILED" : "ok");
    MPI_Finalize();
    return any;
}
