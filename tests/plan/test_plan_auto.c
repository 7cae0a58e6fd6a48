/* "stage": "auto" on the demo model's tensors: with the budget shrinking
 * from stage0's plan to offload's, auto picks stage0, stage1, stage2,
 * stage3, offload, stage3+offload in turn (each budget is exactly that plugin's plan, so
 * the lower stages no longer fit), says so in one INFO line naming the
 * runner-up, trains within the budget, and a budget one byte below the
 * smallest plan fails at zero_params_done naming that plan and plugin.
 * The budgets come from zero_plan (never typed in).  Run with 4 ranks.
 *
 * (1.9) Then with an expert group (two expert tensors, expert-DP groups of
 * 2): a budget of exactly stage1's expert-aware plan picks stage1 and holds;
 * one byte less, which a dense plan of the same model would still call
 * enough for stage1, picks stage2 (below stage1 with experts too) and holds;
 * (1.12) one byte below stage2's plan picks stage3 (its experts gathered
 * over their expert-DP group) and holds; (1.13) a budget of stage0's plan
 * picks stage0, which runs expert groups too, and holds. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "zero.h"

static const uint64_t numel[9] = {256 * 24, 8 * 24 * 256, 256, 256 * 256, 256, 256 * 256, 256,
                                  /* (1.9) the experts (group 1) */ 256 * 96 + 7, 96 * 256 + 1};
static const int32_t groups[9] = {0, 0, 0, 0, 0, 0, 0, 1, 1};
static int experts_; /* register the expert tensors, group 1 with expert-DP groups of 2 */
/* (issue 20: then stage3 with offload_optimizer and offload_param, plugin stage3) */
#define NC 6
static const char *order[NC] = {"stage0", "stage1", "stage2", "stage3", "offload", "stage3+offload"};
static const char *plugin_of(int c) { return c == NC - 1 ? "stage3" : order[c]; }

/* the demo's configs in one: stage3's pool knobs and the offload device
 * only matter to those plugins */
/* reduce_once_per_window: stage 0/1 keep the ZeRO table's full gradient at
 * accumulation 2 (by default they reduce every micro-step into stage 2's
 * partition accumulator, and stage 1 then plans exactly stage 2's bytes:
 * checked in main) */
static int once_per_window = 1;

static void config(char *buf, size_t len, uint64_t budget) {
    snprintf(buf, len,
             "{\"train_micro_batch_size_per_gpu\": 8, \"gradient_accumulation_steps\": 2, "
             "\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.003}}, "
             "\"zero_optimization\": {\"stage\": \"auto\", \"memory_budget_bytes\": %llu, %s"
             "\"reduce_bucket_size\": 50000, \"overlap_comm\": true, \"contiguous_gradients\": true, "
             "\"stage3_param_persistence_threshold\": 1000, \"stage3_prefetch_bucket_size\": 70000, "
             "\"stage3_max_live_parameters\": 150000}}",
             (unsigned long long)budget, once_per_window ? "\"reduce_once_per_window\": true, " : "");
}

static char info[4096];
static void log_fn(void *u, zero_log_level lvl, int rank, const char *msg) {
    (void)u;
    (void)rank;
    if (lvl <= ZERO_LOG_INFO && strstr(msg, "stage auto:")) snprintf(info, sizeof info, "%s", msg);
    else if (lvl <= ZERO_LOG_WARN) fprintf(stderr, "%s\n", msg);
}

/* Create, register, params_done (auto picks), train 2 steps; returns the
 * params_done status, the plugin in *picked, the device peak in *peak. */
static zero_status run(uint64_t budget, char *picked, size_t plen, uint64_t *peak, char *err, size_t elen) {
    char cfg[1024];
    config(cfg, sizeof cfg, budget);
    MPI_Comm comm = MPI_COMM_WORLD;
    zero_engine_options o = ZERO_ENGINE_OPTIONS_INIT;
    o.config_json = cfg;
    o.comm_kind = ZERO_COMM_MPI;
    o.comm = &comm;
    o.log_fn = log_fn;
    zero_engine *e = NULL;
    info[0] = '\0';
    setenv("ZERO_LOG_LEVEL", "info", 1);
    zero_status s = zero_engine_create(&o, &e, err, elen);
    CHECK(s == ZERO_OK, "create: %s", err);
    if (s != ZERO_OK) return s;
    CHECK(strcmp(zero_plugin_name(e), "auto") == 0, "before params_done the plugin is 'auto', got '%s'",
          zero_plugin_name(e));
    const int np = experts_ ? 9 : 7;
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (experts_) {
        zero_group_desc gd = ZERO_GROUP_DESC_INIT;
        gd.group = 1;
        gd.expert_color = rank % (world / 2);
        CHECK(zero_set_group(e, &gd) == ZERO_OK, "set_group: %s", zero_last_error(e));
    }
    zero_param *p[9];
    float *init[9];
    for (int i = 0; i < np; i++) {
        init[i] = calloc(numel[i], sizeof(float));
        char name[32];
        if (i < 7) snprintf(name, sizeof name, "t%d", i);
        else snprintf(name, sizeof name, "expert%d.w%d", rank % (world / 2), i - 7);
        zero_param_desc d = ZERO_PARAM_DESC_INIT;
        d.name = name;
        d.data = init[i];
        d.numel = numel[i];
        d.group = groups[i];
        CHECK(zero_register_param(e, &d, &p[i]) == ZERO_OK, "register: %s", zero_last_error(e));
    }
    s = zero_params_done(e);
    for (int i = 0; i < np; i++) free(init[i]);
    snprintf(picked, plen, "%s", zero_plugin_name(e));
    snprintf(err, elen, "%s", zero_last_error(e));
    for (int m = 0; s == ZERO_OK && m < 4; m++) { /* canonical host: see test_plan_measured.c */
        zero_status t = ZERO_OK;
        void *w, *g;
        for (int i = 0; i < np && t == ZERO_OK; i++)
            if ((t = zero_gather(e, &p[i], 1, &w)) == ZERO_OK) t = zero_release(e, &p[i], 1);
        for (int i = np - 1; i >= 0 && t == ZERO_OK; i--) {
            if ((t = zero_gather(e, &p[i], 1, &w)) != ZERO_OK || (t = zero_grad_buffer(e, p[i], &g)) != ZERO_OK)
                break;
            ((float *)g)[0] += 1e-3f;
            if ((t = zero_on_grad_ready(e, p[i], NULL)) == ZERO_OK) t = zero_release(e, &p[i], 1);
        }
        zero_step_result r = ZERO_STEP_RESULT_INIT;
        if (t == ZERO_OK) t = zero_step(e, NULL, &r);
        CHECK(t == ZERO_OK, "training with %s: %s", picked, zero_last_error(e));
        if (t != ZERO_OK) break;
    }
    zero_memory_stats ms = ZERO_MEMORY_STATS_INIT;
    zero_memory_stats_get(e, &ms);
    *peak = ms.peak_total[ZERO_TIER_DEVICE];
    zero_engine_destroy(e);
    return s;
}

/* Device bytes zero_plan gives plugin for the 9 tensors, with group 1 an
 * expert group of 2 ranks (xp) or dense. */
static uint64_t plan9(const char *plugin, int xp, int world) {
    char cfg[1024], err[1024];
    config(cfg, sizeof cfg, 1);
    const int32_t xg = 1;
    const uint32_t xs = 2;
    zero_plan_request rq = ZERO_PLAN_REQUEST_INIT;
    rq.config_json = cfg;
    rq.plugin = plugin;
    rq.world_size = (uint32_t)world;
    rq.nparams = 9;
    rq.numels = numel;
    rq.groups = groups;
    if (xp) {
        rq.nexpert_groups = 1;
        rq.expert_groups = &xg;
        rq.expert_dp_sizes = &xs;
    }
    zero_memory_plan p = ZERO_MEMORY_PLAN_INIT;
    CHECK(zero_plan(&rq, &p, err, sizeof err) == ZERO_OK, "plan %s (experts %d): %s", plugin, xp, err);
    return p.total[ZERO_TIER_DEVICE];
}

static void experts(void) {
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    experts_ = 1;
    const uint64_t s1 = plan9("stage1", 1, world), s1_dense = plan9("stage1", 0, world);
    /* the premise: the dense plan undercounts (expert states shared by 4 ranks instead of 2) */
    CHECK(s1_dense < s1 - 1, "stage1: dense plan %llu, expert-aware %llu", (unsigned long long)s1_dense,
          (unsigned long long)s1);
    /* (1.10) and stage 2 stays below stage 1 with an expert set beside the
     * dense one (each set's buckets sized from its own groups: sized from
     * the whole model, the expert set's one slot made stage 2 plan and hold
     * 2,522,816 bytes here, more than stage 1) */
    const uint64_t s2 = plan9("stage2", 1, world);
    CHECK(s2 < s1, "experts: stage2 plans %llu, not below stage1's %llu", (unsigned long long)s2,
          (unsigned long long)s1);
    char picked[64], err[2048];
    uint64_t peak = 0;
    /* (1.13) stage 0 runs expert groups: with its plan as the budget it is
     * the first candidate that fits, and holds */
    const uint64_t s0 = plan9("stage0", 1, world);
    CHECK(s0 > s1, "experts: stage0 plans %llu, not above stage1's %llu", (unsigned long long)s0,
          (unsigned long long)s1);
    zero_status s = run(s0, picked, sizeof picked, &peak, err, sizeof err);
    CHECK(s == ZERO_OK && !strcmp(picked, "stage0"), "experts, budget %llu (stage0's plan): %s picked, %s",
          (unsigned long long)s0, picked, err);
    CHECK(peak <= s0, "experts, stage0: device peak %llu over the budget %llu", (unsigned long long)peak,
          (unsigned long long)s0);
    if (rank == 0) printf("experts budget %9llu: %s (peak %llu)\n", (unsigned long long)s0, info, (unsigned long long)peak);
    s = run(s1, picked, sizeof picked, &peak, err, sizeof err);
    CHECK(s == ZERO_OK && !strcmp(picked, "stage1"), "experts, budget %llu (stage1's plan): %s picked, %s",
          (unsigned long long)s1, picked, err);
    CHECK(peak <= s1, "experts, stage1: device peak %llu over the budget %llu", (unsigned long long)peak,
          (unsigned long long)s1);
    if (rank == 0) printf("experts budget %9llu: %s (peak %llu)\n", (unsigned long long)s1, info, (unsigned long long)peak);
    s = run(s1 - 1, picked, sizeof picked, &peak, err, sizeof err);
    CHECK(s == ZERO_OK && !strcmp(picked, "stage2"),
          "experts, budget %llu (1 below stage1's plan, above its dense plan %llu): picked %s, %s",
          (unsigned long long)(s1 - 1), (unsigned long long)s1_dense, picked, err);
    CHECK(peak <= s1 - 1, "experts, %s: device peak %llu over the budget %llu", picked, (unsigned long long)peak,
          (unsigned long long)(s1 - 1));
    if (rank == 0) printf("experts budget %9llu: %s (peak %llu)\n", (unsigned long long)(s1 - 1), info, (unsigned long long)peak);
    /* (1.12) stage 3 runs expert groups: below stage 2's plan it is the
     * next candidate, planned with its experts gathered over their group */
    const uint64_t s3 = plan9("stage3", 1, world);
    CHECK(s3 < s2, "experts: stage3 plans %llu, not below stage2's %llu", (unsigned long long)s3,
          (unsigned long long)s2);
    s = run(s2 - 1, picked, sizeof picked, &peak, err, sizeof err);
    CHECK(s == ZERO_OK && !strcmp(picked, "stage3"), "experts, budget %llu (1 below stage2's plan): picked %s, %s",
          (unsigned long long)(s2 - 1), picked, err);
    CHECK(peak <= s2 - 1, "experts, %s: device peak %llu over the budget %llu", picked, (unsigned long long)peak,
          (unsigned long long)(s2 - 1));
    if (rank == 0) printf("experts budget %9llu: %s (peak %llu)\n", (unsigned long long)(s2 - 1), info, (unsigned long long)peak);
    experts_ = 0;
}

int main(int argc, char **argv) {
    int prov, rank, world;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &prov);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    char cfg[1024], err[2048], picked[64];
    config(cfg, sizeof cfg, 1);
    uint64_t plan[NC];
    char cfg_off[1200]; /* stage3+offload: the same config at stage 3 with both offloads on the CPU */
    {
        const char *at = strstr(cfg, "\"stage\": \"auto\"");
        snprintf(cfg_off, sizeof cfg_off, "%.*s\"stage\": 3, \"offload_optimizer\": {\"device\": \"cpu\"}, "
                 "\"offload_param\": {\"device\": \"cpu\"}%s", (int)(at - cfg), cfg, at + strlen("\"stage\": \"auto\""));
    }
    for (int c = 0; c < NC; c++) {
        zero_plan_request rq = ZERO_PLAN_REQUEST_INIT;
        rq.config_json = c == NC - 1 ? cfg_off : cfg;
        rq.plugin = plugin_of(c);
        rq.world_size = (uint32_t)world;
        rq.nparams = 7;
        rq.numels = numel;
        zero_memory_plan p = ZERO_MEMORY_PLAN_INIT;
        CHECK(zero_plan(&rq, &p, err, sizeof err) == ZERO_OK, "plan %s: %s", order[c], err);
        plan[c] = p.total[ZERO_TIER_DEVICE];
        if (rank == 0) printf("plan %-8s %llu device bytes per rank\n", order[c], (unsigned long long)plan[c]);
    }
    {   /* the default at accumulation 2: stage 1 reduces every micro-step into a partition accumulator,
         * exactly stage 2's buffers; stage 0 adds that accumulator (and staging) to its full gradient */
        once_per_window = 0;
        char cfg0[1024];
        config(cfg0, sizeof cfg0, 1);
        once_per_window = 1;
        uint64_t def[3];
        for (int c = 0; c < 3; c++) {
            zero_plan_request rq = ZERO_PLAN_REQUEST_INIT;
            rq.config_json = cfg0;
            rq.plugin = order[c];
            rq.world_size = (uint32_t)world;
            rq.nparams = 7;
            rq.numels = numel;
            zero_memory_plan p = ZERO_MEMORY_PLAN_INIT;
            CHECK(zero_plan(&rq, &p, err, sizeof err) == ZERO_OK, "plan %s: %s", order[c], err);
            def[c] = p.total[ZERO_TIER_DEVICE];
        }
        CHECK(def[1] == def[2], "default gas 2: stage1 plans %llu, stage2 %llu", (unsigned long long)def[1],
              (unsigned long long)def[2]);
        CHECK(def[0] > plan[0], "default gas 2: stage0 plans %llu, not more than once-per-window's %llu",
              (unsigned long long)def[0], (unsigned long long)plan[0]);
    }
    /* the premise of the test: each plugin in the order plans less device memory than the one before */
    for (int c = 1; c < NC; c++)
        CHECK(plan[c] < plan[c - 1], "%s (%llu) < %s (%llu)", order[c], (unsigned long long)plan[c], order[c - 1],
              (unsigned long long)plan[c - 1]);
    for (int c = 0; c < NC; c++) {
        uint64_t peak = 0;
        zero_status s = run(plan[c], picked, sizeof picked, &peak, err, sizeof err);
        CHECK(s == ZERO_OK, "budget %llu: %s", (unsigned long long)plan[c], err);
        CHECK(strcmp(picked, plugin_of(c)) == 0, "budget %llu: picked %s, expected %s", (unsigned long long)plan[c],
              picked, plugin_of(c));
        CHECK(peak <= plan[c], "%s: device peak %llu over the budget %llu", picked, (unsigned long long)peak,
              (unsigned long long)plan[c]);
        char want[64];
        snprintf(want, sizeof want, "stage auto: %s,", order[c]);
        CHECK(strstr(info, want) != NULL, "\"%s\" lacks \"%s\"", info, want);
        CHECK(strstr(info, "runner-up ") != NULL, "\"%s\" lacks \"%s\"", info, "runner-up ");
        if (c + 1 < NC) CHECK(strstr(info, order[c + 1]) != NULL, "\"%s\" lacks \"%s\"", info, order[c + 1]); /* the next one fits too: it is the runner-up */
        if (rank == 0) printf("budget %9llu: %s\n", (unsigned long long)plan[c], info);
    }
    uint64_t peak = 0;
    zero_status s = run(plan[NC - 1] - 1, picked, sizeof picked, &peak, err, sizeof err);
    CHECK(s == ZERO_ERR_OUT_OF_MEMORY, "budget below every plan: status %d (%s)", (int)s, err);
    char want[128];
    snprintf(want, sizeof want, "the smallest budget that fits is %llu bytes", (unsigned long long)plan[NC - 1]);
    CHECK(strstr(err, want) != NULL, "\"%s\" lacks \"%s\"", err, want);
    CHECK(strstr(err, "with stage3+offload") != NULL, "\"%s\" lacks \"%s\"", err, "with stage3+offload");
    if (rank == 0) printf("budget %9llu: %s\n", (unsigned long long)(plan[NC - 1] - 1), err);
    experts();
    int rc = check_finish(), any = 0;
    MPI_Allreduce(&rc, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return any;
}
