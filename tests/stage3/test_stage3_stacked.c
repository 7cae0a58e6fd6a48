/* (ABI 1.6, issue 34 item 8) Stacked tensors gathered layer by layer.
 *
 * A host that keeps each kind of weight for all its layers in one array
 * (W: 7 x d x d, b: 7 x d, registered with zero_register_stacked) and a
 * non-stacked head V, running a residual tanh network layer by layer:
 * forward gathers slice l of W and b (zero_gather_slices), backward again
 * in reverse, adds slice gradients (zero_slice_grad_buffer) and reports
 * them (zero_on_slice_ready).  The same host with zero_gather of the whole
 * stacks ("whole") is the reference.
 *
 * Checks, on every world size it runs at (3 and 5 do not divide the stack):
 *  - stage 0, 1, 2 and 3: the slice host trains bitwise like the whole
 *    host of the same stage (one host code path on every stage);
 *  - stage 3 vs stage 0: relative L2 <= 1e-6 (the reductions differ in
 *    order, as in stage3_equiv: not bitwise);
 *  - stage 3 with slice gathers: the gather peak (ZERO_MEM_GATHER, device
 *    tier) is at most 3 slices of W and b plus the persistent head, well
 *    under one whole stack, while the whole host's peak holds the stacks;
 *  - default stage 3 keys: no WARN line;
 *  - bad arguments: a non-stacked param, a layer out of range,
 *    ZERO_ERR_INVALID_ARGUMENT;
 *  - ranks gathering different layers: ZERO_ERR_MISMATCH naming both
 *    slices by layer;
 *  - rank 0 in zero_gather_slices while the others leave the phase
 *    (zero_set_phase): ZERO_ERR_MISMATCH on every rank naming both calls
 *    as the host made them ("zero_gather_slices", not "zero_gather");
 *  - (1.12) the stacks in an expert group spanning every rank: stage 3
 *    (slices and whole, under a 3-slice budget and default keys) bitwise
 *    stage 2 with the same groups, within 1e-6 of the dense runs.
 * Usage: test_stage3_stacked [steps]   (under mpirun -np N) */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "host_util.h"

/* D = 128: the weight stack (114688 elements) is over the default
 * stage3_param_persistence_threshold (1e5), so stage 3 gathers it */
enum { L = 7, D = 128, DOUT = 3, MB = 2 };

static int rank_, world_ = 1;
static int experts_; /* (1.12) the stacks in an expert group (param group 1) */

typedef struct out {
    zero_status status;
    char error[1024];
    float p[L * D * D + L * D + DOUT * D];
    uint64_t gather_peak;
    int warnings;
    double loss;
} out;

static void log_cb(void *user, zero_log_level lvl, int rank, const char *msg) {
    out *o = user;
    if (lvl == ZERO_LOG_WARN) {
        o->warnings++;
        fprintf(stderr, "[zero rank %d] WARN: %s\n", rank, msg);
    }
}

#define TRY(call, what)                                                                              \
    do {                                                                                             \
        zero_status s_ = (call);                                                                     \
        if (s_ != ZERO_OK) {                                                                         \
            o->status = s_;                                                                          \
            snprintf(o->error, sizeof o->error, "%s: %s", what, zero_last_error(e));                 \
            goto done;                                                                               \
        }                                                                                            \
    } while (0)

/* slices: 1 gathers slices, 0 whole stacks; max_live > 0 sets
 * stage3_max_live_parameters (elements), else default keys.  Returns
 * through *o. */
static void run(const char *plugin, int slices, int steps, long long max_live, out *o) {
    memset(o, 0, sizeof *o);
    int stage = plugin[5] - '0';
    char json[512], extra[96] = "";
    if (max_live > 0) snprintf(extra, sizeof extra, ", \"stage3_max_live_parameters\": %lld", max_live);
    snprintf(json, sizeof json,
             "{\"train_micro_batch_size_per_gpu\": %d, \"gradient_accumulation_steps\": 2,"
             " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.003, \"weight_decay\": 0.01}},"
             " \"zero_optimization\": {\"stage\": %d%s}}",
             MB, stage, extra);
    zero_engine *e = NULL;
    zero_status st = th_engine_create(json, plugin, 0, log_cb, o, &e, o->error, sizeof o->error);
    if (st != ZERO_OK) {
        o->status = st;
        return;
    }
    if (experts_) { /* every rank one color: the expert-DP group is every rank, on its own communicator */
        zero_group_desc g = ZERO_GROUP_DESC_INIT;
        g.group = 1;
        g.expert_color = 0;
        TRY(zero_set_group(e, &g), "zero_set_group");
    }
    zero_param *W = NULL, *B = NULL, *V = NULL;
    static float iw[L * D * D], ib[L * D], iv[DOUT * D];
    for (size_t k = 0; k < L * D * D; k++) iw[k] = (float)(th_u11((1ull << 32) + k) / sqrt((double)D));
    for (size_t k = 0; k < L * D; k++) ib[k] = (float)(0.01 * th_u11((2ull << 32) + k));
    for (size_t k = 0; k < DOUT * D; k++) iv[k] = (float)(th_u11((3ull << 32) + k) / sqrt((double)D));
    zero_param_desc d = ZERO_PARAM_DESC_INIT;
    d.name = "blocks.weight";
    d.data = iw;
    d.numel = L * D * D;
    d.group = experts_;
    TRY(zero_register_stacked(e, &d, L, &W), "zero_register_stacked(W)");
    d.name = "blocks.bias";
    d.data = ib;
    d.numel = L * D;
    TRY(zero_register_stacked(e, &d, L, &B), "zero_register_stacked(b)");
    d.group = 0;
    d.name = "head.weight";
    d.data = iv;
    d.numel = DOUT * D;
    TRY(zero_register_param(e, &d, &V), "zero_register_param(V)");
    TRY(zero_params_done(e), "zero_params_done");

    { /* bad arguments are refused before anything is gathered */
        void *p = NULL;
        uint32_t l0 = 0, l7 = L;
        zero_param *bad[1] = {V}, *w1[1] = {W};
        CHECK(zero_gather_slices(e, bad, &l0, 1, &p) == ZERO_ERR_INVALID_ARGUMENT, "%s: non-stacked accepted", plugin);
        CHECK(zero_gather_slices(e, w1, &l7, 1, &p) == ZERO_ERR_INVALID_ARGUMENT, "%s: layer 7 accepted", plugin);
        CHECK(zero_release_slices(e, w1, &l7, 1) == ZERO_ERR_INVALID_ARGUMENT, "%s: release layer 7", plugin);
    }

    static float h[L + 1][MB][D], z[L][MB][D], dh[MB][D], dz[MB][D];
    float x[MB][D], t[MB][DOUT], y[MB][DOUT];
    for (int gm = 0; gm < 2 * steps; gm++) {
        for (int s = 0; s < MB; s++) {
            uint64_t g = (uint64_t)gm * (uint64_t)(world_ * MB) + (uint64_t)(rank_ * MB + s);
            for (int i = 0; i < D; i++) x[s][i] = (float)th_u11((g << 16) + (uint64_t)i);
            for (int j = 0; j < DOUT; j++) t[s][j] = (float)tanh(x[s][j] + 0.5 * x[s][j + 3]);
            memcpy(h[0][s], x[s], sizeof x[s]);
        }
        zero_param *wb[2] = {W, B};
        void *ptr[2];
        for (uint32_t l = 0; l < L; l++) { /* forward, layer by layer */
            uint32_t ll[2] = {l, l};
            if (slices) TRY(zero_gather_slices(e, wb, ll, 2, ptr), "zero_gather_slices (forward)");
            else TRY(zero_gather(e, wb, 2, ptr), "zero_gather (forward)");
            const float *w = (const float *)ptr[0] + (slices ? 0 : (size_t)l * D * D);
            const float *b = (const float *)ptr[1] + (slices ? 0 : (size_t)l * D);
            for (int s = 0; s < MB; s++)
                for (int i = 0; i < D; i++) {
                    float a = b[i];
                    for (int k = 0; k < D; k++) a += w[i * D + k] * h[l][s][k];
                    z[l][s][i] = a;
                    h[l + 1][s][i] = h[l][s][i] + tanhf(a);
                }
            if (slices) TRY(zero_release_slices(e, wb, ll, 2), "zero_release_slices (forward)");
            else TRY(zero_release(e, wb, 2), "zero_release (forward)");
        }
        void *pv, *gv, *gw, *gb;
        TRY(zero_gather(e, &V, 1, &pv), "zero_gather(V)");
        const float *v = pv;
        double loss = 0;
        TRY(zero_grad_buffer(e, V, &gv), "zero_grad_buffer(V)");
        for (int s = 0; s < MB; s++) {
            for (int j = 0; j < DOUT; j++) {
                float a = 0;
                for (int k = 0; k < D; k++) a += v[j * D + k] * h[L][s][k];
                y[s][j] = a - t[s][j];
                loss += 0.5 * y[s][j] * y[s][j] / MB;
            }
            for (int k = 0; k < D; k++) {
                float a = 0;
                for (int j = 0; j < DOUT; j++) {
                    ((float *)gv)[j * D + k] += y[s][j] * h[L][s][k] / MB;
                    a += v[j * D + k] * y[s][j] / MB;
                }
                dh[s][k] = a;
            }
        }
        o->loss = loss;
        TRY(zero_release(e, &V, 1), "zero_release(V)");
        TRY(zero_on_grad_ready(e, V, NULL), "zero_on_grad_ready(V)");
        for (int l = L - 1; l >= 0; l--) { /* backward, in reverse */
            uint32_t ll[2] = {(uint32_t)l, (uint32_t)l};
            if (slices) TRY(zero_gather_slices(e, wb, ll, 2, ptr), "zero_gather_slices (backward)");
            else TRY(zero_gather(e, wb, 2, ptr), "zero_gather (backward)");
            const float *w = (const float *)ptr[0] + (slices ? 0 : (size_t)l * D * D);
            TRY(zero_slice_grad_buffer(e, W, (uint32_t)l, &gw), "zero_slice_grad_buffer(W)");
            TRY(zero_slice_grad_buffer(e, B, (uint32_t)l, &gb), "zero_slice_grad_buffer(b)");
            for (int s = 0; s < MB; s++) {
                for (int i = 0; i < D; i++) {
                    float th = tanhf(z[l][s][i]);
                    dz[s][i] = dh[s][i] * (1.0f - th * th);
                    ((float *)gb)[i] += dz[s][i];
                    for (int k = 0; k < D; k++) ((float *)gw)[i * D + k] += dz[s][i] * h[l][s][k];
                }
                for (int k = 0; k < D; k++) {
                    float a = dh[s][k];
                    for (int i = 0; i < D; i++) a += w[i * D + k] * dz[s][i];
                    dh[s][k] = a;
                }
            }
            if (slices) TRY(zero_release_slices(e, wb, ll, 2), "zero_release_slices (backward)");
            else TRY(zero_release(e, wb, 2), "zero_release (backward)");
            TRY(zero_on_slice_ready(e, W, (uint32_t)l, NULL), "zero_on_slice_ready(W)");
            TRY(zero_on_slice_ready(e, B, (uint32_t)l, NULL), "zero_on_slice_ready(b)");
        }
        zero_step_result res = ZERO_STEP_RESULT_INIT;
        TRY(zero_step(e, NULL, &res), "zero_step");
    }
    {
        zero_memory_stats m = ZERO_MEMORY_STATS_INIT;
        zero_memory_stats_get(e, &m);
        o->gather_peak = m.peak[ZERO_TIER_DEVICE][ZERO_MEM_GATHER];
        TRY(zero_set_phase(e, "final"), "zero_set_phase"); /* another order: not the training one */
        zero_param *all[3] = {W, B, V};
        size_t numel[3] = {L * D * D, L * D, DOUT * D};
        if (!slices) TRY(th_gather_all_f32(e, all, 3, numel, o->p), "final gather");
        for (uint32_t l = 0; slices && l < L; l++) { /* the slice host reads its result by slices too */
            zero_param *wb[2] = {W, B};
            uint32_t ll[2] = {l, l};
            void *ptr[2];
            TRY(zero_gather_slices(e, wb, ll, 2, ptr), "final zero_gather_slices");
            memcpy(o->p + (size_t)l * D * D, ptr[0], D * D * sizeof(float));
            memcpy(o->p + (size_t)L * D * D + (size_t)l * D, ptr[1], D * sizeof(float));
            TRY(zero_release_slices(e, wb, ll, 2), "final zero_release_slices");
        }
        if (slices) TRY(th_gather_all_f32(e, &V, 1, &numel[2], o->p + L * D * D + L * D), "final gather(V)");
    }
done:
    zero_engine_destroy(e);
}

static double rel_l2(const float *a, const float *b, size_t n) { return th_rel_l2(a, b, n); }

/* A stage 3 engine holding one stack, "blocks.weight" (L x D x D), its
 * params done, for the mismatch cases below; NULL (and a failed CHECK)
 * when it cannot be made. */
static zero_engine *stack_engine(const char *who, zero_param **W) {
    char json[256], err[512] = "";
    snprintf(json, sizeof json,
             "{\"train_micro_batch_size_per_gpu\": %d, \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": "
             "0.003}}, \"zero_optimization\": {\"stage\": 3}}",
             MB);
    zero_engine *e = NULL;
    zero_status st = th_engine_create(json, "stage3", 0, NULL, NULL, &e, err, sizeof err);
    CHECK(st == ZERO_OK, "%s: engine: %s", who, err);
    if (st != ZERO_OK) return NULL;
    static float iw[L * D * D];
    zero_param_desc d = ZERO_PARAM_DESC_INIT;
    d.name = "blocks.weight";
    d.data = iw;
    d.numel = L * D * D;
    st = zero_register_stacked(e, &d, L, W);
    if (st == ZERO_OK) st = zero_params_done(e);
    CHECK(st == ZERO_OK, "%s: registering the stack: %s", who, zero_last_error(e));
    if (st == ZERO_OK) return e;
    zero_engine_destroy(e);
    return NULL;
}

/* Ranks that gather different layers of one stack: ZERO_ERR_MISMATCH on
 * every rank, naming both slices by layer ("blocks.weight[layer 1]"), not
 * only the stack they belong to. */
static void diverge(void) {
    zero_param *W = NULL;
    zero_engine *e = stack_engine("diverge", &W);
    if (!e) return;
    uint32_t layer = rank_ == 0 ? 1 : 2;
    void *ptr = NULL;
    /* the first micro-step's gathers are agreed on as they come (the
     * order is being recorded), so the gather itself fails */
    zero_status st = zero_gather_slices(e, &W, &layer, 1, &ptr);
    if (st == ZERO_OK) {
        st = zero_release_slices(e, &W, &layer, 1);
        if (st == ZERO_OK) st = zero_set_phase(e, "after"); /* verifies the gathers of the phase it leaves */
    }
    const char *msg = zero_last_error(e);
    CHECK(st == ZERO_ERR_MISMATCH, "diverging slices: %s (%s)", zero_status_string(st), msg);
    CHECK(strstr(msg, "'blocks.weight[layer 1]'") && strstr(msg, "'blocks.weight[layer 2]'"),
          "the mismatch does not name both layers: %s", msg);
    if (rank_ == 0) printf("diverging slices: %s\n", msg);
    zero_engine_destroy(e);
}

/* Rank 0 gathers a slice while the others change phase: the agreement of
 * rank 0's zero_gather_slices meets theirs of zero_set_phase, and the
 * message names both calls as the host made them. */
static void uneven_calls(void) {
    if (world_ < 2) return;
    zero_param *W = NULL;
    zero_engine *e = stack_engine("uneven_calls", &W);
    if (!e) return;
    zero_status st;
    if (rank_ == 0) {
        uint32_t layer = 0;
        void *ptr = NULL;
        st = zero_gather_slices(e, &W, &layer, 1, &ptr);
        if (st == ZERO_OK) st = zero_release_slices(e, &W, &layer, 1);
    } else {
        st = zero_set_phase(e, "eval");
    }
    const char *msg = zero_last_error(e);
    CHECK(st == ZERO_ERR_MISMATCH, "uneven calls: %s (%s)", zero_status_string(st), msg);
    CHECK(strstr(msg, "rank 0 is in zero_gather_slices") && strstr(msg, "is in zero_set_phase"),
          "the mismatch does not name both calls: %s", msg);
    if (rank_ == 0) printf("uneven calls: %s\n", msg);
    zero_engine_destroy(e);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &world_);
    int steps = argc > 1 ? atoi(argv[1]) : 6;
    const size_t n = L * D * D + L * D + DOUT * D;
    static out ref, a, b, dense[4];
    const char *plugins[] = {"stage0", "stage1", "stage2", "stage3"};
    for (int pi = 0; pi < 4; pi++) {
        run(plugins[pi], 0, steps, -1, &a);
        run(plugins[pi], 1, steps, -1, &b);
        CHECK(a.status == ZERO_OK, "%s whole: %s (%s)", plugins[pi], zero_status_string(a.status), a.error);
        CHECK(b.status == ZERO_OK, "%s slices: %s (%s)", plugins[pi], zero_status_string(b.status), b.error);
        if (a.status != ZERO_OK || b.status != ZERO_OK) break;
        CHECK(memcmp(a.p, b.p, sizeof a.p) == 0, "%s: slice gathers train differently from whole gathers",
              plugins[pi]);
        CHECK(!b.warnings, "%s slices: %d WARN lines", plugins[pi], b.warnings);
        if (pi == 0) ref = a;
        dense[pi] = b;
        double rel = rel_l2(b.p, ref.p, n);
        CHECK(rel <= 1e-6, "%s slices vs stage0: relative L2 %.3g", plugins[pi], rel);
        if (rank_ == 0)
            printf("%s N=%d: slices == whole bitwise, vs stage0 rel L2 %.3g, gather peak whole %llu B slices %llu B, "
                   "loss %.5f\n",
                   plugins[pi], world_, rel, (unsigned long long)a.gather_peak, (unsigned long long)b.gather_peak,
                   b.loss);
    }
    /* Stage 3 under a budget of 3 weight slices: the slice host stays in it
     * (bitwise like the default-key run), the whole host cannot. */
    if (world_ > 1) {
        const long long max_live = 3LL * D * D;
        const uint64_t stack = (uint64_t)L * D * D * sizeof(float);
        run("stage3", 1, steps, max_live, &b);
        run("stage3", 0, steps, max_live, &a);
        CHECK(b.status == ZERO_OK && a.status == ZERO_OK, "stage3 under max_live: %s / %s", b.error, a.error);
        CHECK(memcmp(b.p, ref.p, sizeof b.p) == 0 || rel_l2(b.p, ref.p, n) <= 1e-6, "stage3 under max_live: values");
        CHECK(b.gather_peak <= (uint64_t)max_live * sizeof(float),
              "stage3 slices: gather peak %llu B > stage3_max_live_parameters %llu B", (unsigned long long)b.gather_peak,
              (unsigned long long)max_live * sizeof(float));
        CHECK(b.gather_peak * 2 < stack, "stage3 slices: gather peak %llu B not well under one stack %llu B",
              (unsigned long long)b.gather_peak, (unsigned long long)stack);
        CHECK(!b.warnings, "stage3 slices under max_live: %d WARN lines", b.warnings);
        CHECK(a.gather_peak >= stack, "stage3 whole: gather peak %llu B under the stack %llu B (vacuous test)",
              (unsigned long long)a.gather_peak, (unsigned long long)stack);
        if (rank_ == 0)
            printf("stage3 N=%d, stage3_max_live_parameters %lld: gather peak slices %llu B, whole %llu B (stack %llu "
                   "B)\n",
                   world_, max_live, (unsigned long long)b.gather_peak, (unsigned long long)a.gather_peak,
                   (unsigned long long)stack);
    }
    /* (1.12) The stacks in an expert group whose expert-data-parallel group
     * is every rank: the same partition as dense, reduced and (stage 3)
     * slice-gathered over the expert group's own communicator.  The expert
     * group has a bucket set of its own, so sums group differently from the
     * dense run (bitwise at N = 2 only): within 1e-6 of it, and stage 3
     * (slices and whole, under a 3-slice budget and with default keys)
     * bitwise stage 2 with the same groups. */
    experts_ = 1;
    static out xref;
    for (int pi = 2; pi < 4; pi++)
        for (int slices = 1; slices >= 0; slices--)
            for (int keys = 0; keys < (pi == 3 ? 2 : 1); keys++) {
                run(plugins[pi], slices, steps, pi == 3 && !keys ? 3LL * D * D : -1, &b);
                CHECK(b.status == ZERO_OK, "%s experts: %s (%s)", plugins[pi], zero_status_string(b.status), b.error);
                if (b.status != ZERO_OK) continue;
                if (pi == 2 && slices) xref = b;
                const double rel = rel_l2(b.p, dense[pi].p, n);
                CHECK(rel <= 1e-6, "%s experts (%s): relative L2 %.3g from the dense run", plugins[pi],
                      slices ? "slices" : "whole", rel);
                CHECK(memcmp(b.p, xref.p, sizeof b.p) == 0, "%s experts (%s%s): not bitwise stage2 with the experts",
                      plugins[pi], slices ? "slices" : "whole", keys ? ", default keys" : "");
                /* (whole stacks under the 3-slice budget are over it: warned once, as dense) */
                CHECK(!b.warnings || (pi == 3 && !slices && !keys), "%s experts (%s): %d WARN lines", plugins[pi],
                      slices ? "slices" : "whole", b.warnings);
                if (rank_ == 0)
                    printf("%s N=%d, stacks in an expert group (%s%s): bitwise stage2's, %.3g from the dense run, "
                           "gather peak %llu B\n",
                           plugins[pi], world_, slices ? "slices" : "whole", keys ? ", default keys" : "", rel,
                           (unsigned long long)b.gather_peak);
            }
    experts_ = 0;
    if (world_ > 1) diverge();
    uneven_calls();
    int rc = check_finish();
    MPI_Finalize();
    return rc;
}
