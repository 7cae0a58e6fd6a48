/* The plan equals what libzero allocates: for every built-in plugin, on the
 * demo model's seven tensors and on the same tensors 100x larger, the
 * accountant's peak bytes per tier and category after three optimizer
 * steps (gradient_accumulation_steps 2) must be within 1 % of zero_plan's
 * figures for the same config and world size; for `other` (the MPI ring
 * scratch, timing-dependent) the plan must be at least the measured peak.
 *
 * The host is the canonical one the plan assumes (docs/planner.md): each
 * micro-step gathers every param alone in registration order and releases
 * it, then walks backward in reverse order: gather, add a gradient into
 * zero_grad_buffer, zero_on_grad_ready, release.  Gradients are a small
 * deterministic pattern; what is checked is memory, not numbers.
 * Run under mpirun with N = 1..4 (one process per rank).
 *
 * `test_plan_measured --contrib` checks the outside plugins instead (MiCS
 * and ZeRO++ from plugins-contrib, found on ZERO_PLUGIN_PATH) the same
 * way: each shard size that divides N (1, 2, 3, N), fp32 and bf16; ZeRO++
 * with no switch, each switch alone, qgZ with error feedback, all three,
 * all three in bf16.
 *
 * `test_plan_measured --experts` (1.9) checks expert groups: the demo's
 * tensors dense (group 0) and two expert tensors (group 1, whose sizes do
 * not divide the ranks) that each expert-data-parallel group of d ranks
 * holds (color rank % (N / d)), for every d that divides N, with stage0
 * (1.13), stage1, stage2, offload, stage3 and stage3 with offload_optimizer
 * (1.12), planned with zero_plan_request.expert_groups; a dense plan of the
 * same model would give the experts' states N ranks to share.  A plugin
 * without ZERO_PLUGIN_CAP_EXPERT_GROUPS (the kit's template) is refused by
 * zero_plan as by zero_params_done (tests/moe/test_moe.c). */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "zero.h"

/* The demo's tensors (examples/demo/model.h: ctx 8, embed 24, hidden
 * 256-256, vocab 256), registration order; `scale` multiplies each. */
static const uint64_t demo_numel[7] = {256 * 24, 8 * 24 * 256, 256, 256 * 256, 256, 256 * 256, 256};

static char nvme_dir[256] = "/tmp";
/* zero_optimization.round_robin_gradients: the planner must build the
 * engine's striped layout and one bucket per stripe (issue 18) */
static int round_robin_;
/* communication_data_type bf16 with the default fp32 accumulation (issue
 * 14): the buckets carry 16-bit wire arrays and the ring scratch halves */
static int wire16_;
/* --contrib: what the outside plugins add to stage 3's keys, and bf16 */
static const char *contrib_zo_;
static int bf16_;
/* (1.12) data_types.grad_accum_dtype bf16 (with bf16_): 16-bit gradients */
static int accum16_;
/* --experts: the expert-data-parallel size (0: no expert group) */
static uint32_t expert_dp_;
static const uint64_t expert_numel[2] = {24 * 256 + 5, 256 * 24 + 3};

static const char *config_for(const char *plugin, uint64_t scale) {
    /* the demo's configs (examples/configs); stage3's pool settings scale
     * with the model, as a user would scale them */
    static char buf[2048], s3[512];
    const char *zo;
    snprintf(s3, sizeof s3,
             "\"stage\": 3, \"reduce_bucket_size\": %llu, \"overlap_comm\": true, \"contiguous_gradients\": true, "
             "\"stage3_param_persistence_threshold\": %llu, \"stage3_prefetch_bucket_size\": %llu, "
             "\"stage3_max_live_parameters\": %llu",
             50000ull * scale, 1000ull * scale, 70000ull * scale, 150000ull * scale);
    static char s3off[1024];
    static char s3c[1024];
    if (!strcmp(plugin, "stage3"))
        zo = s3;
    else if (contrib_zo_) { /* mics, zeropp: stage 3's keys and theirs */
        snprintf(s3c, sizeof s3c, "%s, %s", s3, contrib_zo_);
        zo = s3c;
    }
    else if (!strncmp(plugin, "stage3-", 7)) { /* issue 20: stage 3 with offload (tiles of 30000 elements) */
        snprintf(s3off, sizeof s3off, "%s, \"sub_group_size\": 30000, \"offload_optimizer\": %s%s", s3,
                 !strcmp(plugin, "stage3-nvme") ? "{\"device\": \"nvme\", \"nvme_path\": \"" : "{\"device\": \"cpu\"}",
                 !strcmp(plugin, "stage3-nvme") ? nvme_dir : "");
        if (!strcmp(plugin, "stage3-nvme")) strcat(s3off, "\"}");
        if (strcmp(plugin, "stage3-offload")) strcat(s3off, ", \"offload_param\": {\"device\": \"cpu\"}");
        zo = s3off;
    }
    else if (!strcmp(plugin, "offload")) /* no overlap: finished buckets are reaped by timing otherwise */
        zo = "\"stage\": 2, \"reduce_bucket_size\": 50000, \"overlap_comm\": false, \"contiguous_gradients\": true, "
             "\"offload_optimizer\": {\"device\": \"cpu\"}";
    else
        zo = "\"stage\": 0, \"reduce_bucket_size\": 50000, \"overlap_comm\": true, \"contiguous_gradients\": true";
    snprintf(buf, sizeof buf,
             "{\"train_micro_batch_size_per_gpu\": 8, \"gradient_accumulation_steps\": 2, \"gradient_clipping\": 1.0, "
             "\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.003, \"weight_decay\": 0.01}}, "
             "%s%s%s\"zero_optimization\": {%s%s}}",
             wire16_ ? "\"communication_data_type\": \"bf16\", " : "", bf16_ ? "\"bf16\": {\"enabled\": true}, " : "",
             accum16_ ? "\"data_types\": {\"grad_accum_dtype\": \"bf16\"}, " : "", zo,
             round_robin_ ? ", \"round_robin_gradients\": true" : "");
    return buf;
}

static int run_one(const char *plugin, uint64_t scale, int rank, int world) {
    const char *cfg = config_for(plugin, scale);
    const int np = expert_dp_ ? 9 : 7;
    uint64_t numel[9];
    int32_t group[9] = {0};
    for (int i = 0; i < 7; i++) numel[i] = demo_numel[i] * scale;
    for (int i = 7; i < np; i++) {
        numel[i] = expert_numel[i - 7] * scale;
        group[i] = 1;
    }
    const int32_t xgroup = 1;
    const uint32_t xsize = expert_dp_;

    zero_plan_request rq = ZERO_PLAN_REQUEST_INIT;
    rq.config_json = cfg;
    const char *real = !strncmp(plugin, "stage3-", 7) ? "stage3" : plugin; /* the offload variants */
    rq.plugin = real;
    rq.world_size = (uint32_t)world;
    rq.nparams = (uint32_t)np;
    rq.numels = numel;
    if (expert_dp_) {
        rq.groups = group;
        rq.nexpert_groups = 1;
        rq.expert_groups = &xgroup;
        rq.expert_dp_sizes = &xsize;
    }
    zero_memory_plan plan = ZERO_MEMORY_PLAN_INIT;
    char err[1024];
    zero_status s = zero_plan(&rq, &plan, err, sizeof err);
    CHECK(s == ZERO_OK, "zero_plan(%s): %s", plugin, err);
    if (s != ZERO_OK) return 1;

    MPI_Comm comm = MPI_COMM_WORLD;
    zero_engine_options o = ZERO_ENGINE_OPTIONS_INIT;
    o.config_json = cfg;
    o.plugin = real;
    o.comm_kind = ZERO_COMM_MPI;
    o.comm = &comm;
    zero_engine *e = NULL;
    s = zero_engine_create(&o, &e, err, sizeof err);
    CHECK(s == ZERO_OK, "create %s: %s", plugin, err);
    if (s != ZERO_OK) return 1;
    if (expert_dp_) { /* group 1: the experts of this rank's expert-DP group */
        zero_group_desc gd = ZERO_GROUP_DESC_INIT;
        gd.group = 1;
        gd.expert_color = rank % (world / (int)expert_dp_);
        s = zero_set_group(e, &gd);
        CHECK(s == ZERO_OK, "set_group: %s", zero_last_error(e));
    }
    zero_param *p[9];
    float *inits[9];
    uint16_t *inits16[9] = {NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    for (int i = 0; i < np; i++) { /* read at zero_params_done: kept until then */
        float *init = inits[i] = calloc(numel[i], sizeof *init);
        for (uint64_t k = 0; k < numel[i]; k++) init[k] = 0.01f * (float)((k * 7 + (uint64_t)i) % 13) - 0.06f;
        char name[48];
        if (i < 7) snprintf(name, sizeof name, "t%d", i);
        else snprintf(name, sizeof name, "expert%d.w%d", rank % (world / (int)expert_dp_), i - 7);
        zero_param_desc d = ZERO_PARAM_DESC_INIT;
        d.name = name;
        d.data = init;
        d.numel = numel[i];
        d.group = group[i];
        uint16_t *b16 = NULL;
        if (bf16_) { /* the model in bf16 (the top half of each fp32 value) */
            b16 = calloc(numel[i] ? numel[i] : 1, sizeof *b16);
            for (uint64_t k = 0; b16 && k < numel[i]; k++) {
                uint32_t u;
                memcpy(&u, &init[k], 4);
                b16[k] = (uint16_t)(u >> 16);
            }
            d.data = inits16[i] = b16;
            d.dtype = ZERO_DTYPE_BF16;
        }
        s = zero_register_param(e, &d, &p[i]);
        CHECK(s == ZERO_OK, "register: %s", zero_last_error(e));
    }
    s = zero_params_done(e);
    for (int i = 0; i < np; i++) free(inits[i]), free(inits16[i]);
    CHECK(s == ZERO_OK, "params_done: %s", zero_last_error(e));
    for (int m = 0; s == ZERO_OK && m < 6; m++) {
        void *w;
        for (int i = 0; i < np && s == ZERO_OK; i++) {
            if ((s = zero_gather(e, &p[i], 1, &w)) == ZERO_OK) s = zero_release(e, &p[i], 1);
        }
        for (int i = np - 1; i >= 0 && s == ZERO_OK; i--) {
            void *g;
            if ((s = zero_gather(e, &p[i], 1, &w)) != ZERO_OK) break;
            if ((s = zero_grad_buffer(e, p[i], &g)) != ZERO_OK) break;
            if (bf16_) /* bf16 buffers: small values written, not added (memory is what is checked) */
                for (uint64_t k = 0; k < numel[i]; k += 97) ((uint16_t *)g)[k] = (uint16_t)(0x3a80 + rank);
            else
                for (uint64_t k = 0; k < numel[i]; k += 97) ((float *)g)[k] += 1e-3f * (float)(rank + 1);
            if ((s = zero_on_grad_ready(e, p[i], NULL)) != ZERO_OK) break;
            s = zero_release(e, &p[i], 1);
        }
        zero_step_result r = ZERO_STEP_RESULT_INIT;
        if (s == ZERO_OK) s = zero_step(e, NULL, &r);
    }
    CHECK(s == ZERO_OK, "%s training: %s", plugin, zero_last_error(e));
    zero_memory_stats ms = ZERO_MEMORY_STATS_INIT;
    zero_memory_stats_get(e, &ms);
    int bad = 0;
    for (int t = 0; t < ZERO_NTIERS; t++)
        for (int g = 0; g < ZERO_MEM_NTAGS; g++) {
            double want = (double)ms.peak[t][g], got = (double)plan.bytes[t][g];
            double diff = want > got ? want - got : got - want;
            /* `other` is the MPI ring scratch, whose peak depends on how
             * many reductions overlap (and on the scratch cache): the plan
             * is its upper bound (docs/planner.md); every other category
             * is exact */
            int ok = g == ZERO_MEM_OTHER ? got >= want : diff <= 0.01 * want || (want == 0 && got == 0);
            CHECK(ok, "%s %s%s N=%d x%llu rank %d tier %d %s: plan %.0f measured %.0f", plugin,
                  contrib_zo_ ? contrib_zo_ : "", bf16_ ? " bf16" : "", world,
                  (unsigned long long)scale, rank, t, zero_mem_tag_name(g), got, want);
            bad |= !ok;
        }
    if (rank == 0 && expert_dp_)
        printf("experts d=%u ", expert_dp_);
    if (rank == 0)
        printf("%-8s%s%s%s N=%d x%-3llu device plan %12llu measured %12llu | host plan %12llu measured %12llu %s\n", plugin,
               round_robin_ ? " rr" : wire16_ ? " w16" : "", bf16_ ? (accum16_ ? " bf16/16 " : " bf16 ") : " ", contrib_zo_ ? contrib_zo_ : "", world, (unsigned long long)scale, (unsigned long long)plan.total[0],
               (unsigned long long)ms.peak_total[0], (unsigned long long)plan.total[1],
               (unsigned long long)ms.peak_total[1], bad ? "MISMATCH" : "ok");
    zero_engine_destroy(e);
    return bad;
}

/* --contrib: MiCS at every shard size that divides N (1, 2, 3, N) and
 * ZeRO++'s switches, fp32 and bf16, on the demo's tensors (x1) and, for one
 * configuration each, 100x larger. */
static void run_contrib(int rank, int world) {
    static char shard[4][64];
    int sizes[4] = {1, 2, 3, world}, ns = 0;
    for (int k = 0; k < 4; k++) {
        int dup = 0;
        for (int q = 0; q < k; q++) dup |= sizes[q] == sizes[k];
        if (dup || world % sizes[k] != 0) continue;
        snprintf(shard[ns++], sizeof shard[0], "\"mics_shard_size\": %d", sizes[k]);
    }
    for (int k = 0; k < ns; k++)
        for (bf16_ = 0; bf16_ <= 1; bf16_++) {
            contrib_zo_ = shard[k];
            run_one("mics", 1, rank, world);
            if (k == ns - 1 && !bf16_) run_one("mics", 100, rank, world);
        }
    static char hpz[64];
    snprintf(hpz, sizeof hpz, "\"zero_hpz_partition_size\": %d", world % 2 == 0 ? 2 : world);
    static char all[256];
    snprintf(all, sizeof all, "\"zero_quantized_weights\": true, \"zero_quantized_gradients\": true, %s", hpz);
    const char *zpp[] = {"\"zero_quantized_weights\": false",
                         "\"zero_quantized_weights\": true",
                         "\"zero_quantized_gradients\": true",
                         "\"zero_quantized_gradients\": true, \"zero_quantized_gradients_error_feedback\": true, "
                         "\"zero_quantized_gradients_bits\": 4",
                         hpz,
                         all};
    bf16_ = 0;
    for (size_t k = 0; k < sizeof zpp / sizeof *zpp; k++) {
        contrib_zo_ = zpp[k];
        run_one("zeropp", 1, rank, world);
    }
    contrib_zo_ = all;
    run_one("zeropp", 100, rank, world);
    bf16_ = 1;
    run_one("zeropp", 1, rank, world);
    contrib_zo_ = hpz;
    run_one("zeropp", 1, rank, world);
    bf16_ = 0;
    contrib_zo_ = NULL;
}

/* --experts: every expert-DP size d that divides N, stage1 / stage2 /
 * offload / stage3 (1.12) (fp32, bf16 at the largest d, 100x at d = N / 2
 * or 1), stage3 with offload_optimizer (fp32), stage0 (1.13; fp32, and
 * 16-bit gradients at d = 1) and stage1-pp (1.13, fp32); the kit's template (no
 * ZERO_PLUGIN_CAP_EXPERT_GROUPS) refused by the plan with the engine's
 * status. */
static void run_experts(int rank, int world) {
    static const char *ok[] = {"stage1", "stage2", "offload", "stage3", "stage3-offload"};
    const size_t nok = sizeof ok / sizeof ok[0], nbig = nok - 1; /* stage3-offload: fp32 at scale 1 (CI time) */
    for (uint32_t d = 1; d <= (uint32_t)world; d++) {
        if (world % d) continue;
        expert_dp_ = d;
        for (size_t k = 0; k < nok; k++) run_one(ok[k], 1, rank, world);
        run_one("stage0", 1, rank, world); /* (1.13) replicated: every expert whole on its holders */
        run_one("stage1-pp", 1, rank, world); /* (1.13) stage 1's layout, reduced once per window */
        if (d == (uint32_t)world) {
            bf16_ = 1;
            for (size_t k = 0; k < nbig; k++) run_one(ok[k], 1, rank, world);
            bf16_ = 0;
        }
        if (d == (world % 2 ? 1u : (uint32_t)world / 2))
            for (size_t k = 0; k < nbig; k++) run_one(ok[k], 100, rank, world);
        if (d == 1 && world > 1) { /* (1.12) 16-bit gradients over expert groups of one rank: the set still
                                      stages and runs its one-rank reduction (bucket_plan.h) */
            bf16_ = accum16_ = 1;
            for (size_t k = 0; k < nbig; k++) run_one(ok[k], 1, rank, world);
            run_one("stage0", 1, rank, world);
            bf16_ = accum16_ = 0;
        }
    }
    /* the refusals agree: plan and engine */
    expert_dp_ = (uint32_t)world;
#ifdef ZERO_NO_EXPERTS_PLUGIN
    static const char *no[] = {ZERO_NO_EXPERTS_PLUGIN};
#else
    static const char *no[] = {NULL};
#endif
    for (size_t k = 0; no[0] && k < sizeof no / sizeof no[0]; k++) {
        const int32_t xg = 1;
        const uint32_t xs = (uint32_t)world;
        uint64_t numel[9];
        int32_t group[9] = {0, 0, 0, 0, 0, 0, 0, 1, 1};
        for (int i = 0; i < 7; i++) numel[i] = demo_numel[i];
        numel[7] = expert_numel[0];
        numel[8] = expert_numel[1];
        zero_plan_request rq = ZERO_PLAN_REQUEST_INIT;
        rq.config_json = config_for(no[k], 1);
        rq.plugin = no[k];
        rq.world_size = (uint32_t)world;
        rq.nparams = 9;
        rq.numels = numel;
        rq.groups = group;
        rq.nexpert_groups = 1;
        rq.expert_groups = &xg;
        rq.expert_dp_sizes = &xs;
        zero_memory_plan plan = ZERO_MEMORY_PLAN_INIT;
        char err[1024] = "";
        zero_status s = zero_plan(&rq, &plan, err, sizeof err);
        CHECK(s == ZERO_ERR_UNSUPPORTED && strstr(err, "expert group") && strstr(err, "template-dp"),
              "zero_plan(%s) with an expert group: %s '%s', expected ZERO_ERR_UNSUPPORTED naming it", no[k],
              zero_status_string(s), err);
        rq.nexpert_groups = 0; /* the same model dense: planned */
        CHECK(zero_plan(&rq, &plan, err, sizeof err) == ZERO_OK, "zero_plan(%s) dense: %s", no[k], err);
    }
    expert_dp_ = 0;
}

int main(int argc, char **argv) {
    int prov;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &prov);
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    static const char *plugins[] = {"stage0",         "stage1", "stage2", "stage3", "offload", "stage1-pp",
                                    "stage3-offload", "stage3-offload-param", "stage3-nvme"};
    if (argc > 1 && !strcmp(argv[1], "--experts")) {
        run_experts(rank, world);
        int rc = check_finish(), any = 0;
        MPI_Allreduce(&rc, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        MPI_Finalize();
        return any;
    }
    if (argc > 1 && !strcmp(argv[1], "--contrib")) {
        run_contrib(rank, world);
        int rc = check_finish(), any = 0;
        MPI_Allreduce(&rc, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        MPI_Finalize();
        return any;
    }
    const char *tmp = getenv("TMPDIR");
    snprintf(nvme_dir, sizeof nvme_dir, "%s", tmp && *tmp ? tmp : "/tmp");
    const uint64_t scales[] = {1, 100};
    for (round_robin_ = 0; round_robin_ <= 1; round_robin_++)
        for (size_t si = 0; si < (round_robin_ ? 1u : 2u); si++) /* round-robin: the small model (5 stripes) */
            for (size_t pi = 0; pi < sizeof plugins / sizeof *plugins; pi++)
                run_one(plugins[pi], scales[si], rank, world);
    round_robin_ = 0;
    wire16_ = 1; /* the small model, the plugins with a 16-bit wire of their own */
    for (size_t pi = 0; pi < 6; pi++) run_one(plugins[pi], 1, rank, world);
    int rc = check_finish();
    int any = 0;
    MPI_Allreduce(&rc, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return any;
}
