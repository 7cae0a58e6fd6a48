/* Mixed precision, loss scaling, clipping and optimizers through every stage
 * plugin (issue 7), one mpirun per N running every configuration:
 *  A. bf16 and fp16 models: stage1, stage2, stage3 and stage1-pp equal the
 *     stage0 run of the same precision (relative L2 <= 1e-5 after 30 steps)
 *     and each run repeated is bitwise identical;
 *  B. clipping: the reported norm and the step taken equal the ones computed
 *     here in fp64 from the full, unpartitioned gradient (every stage);
 *  C. fp16 overflow injection: an Inf/NaN in ONE rank's gradient makes every
 *     rank skip, and the loss scale follows DeepSpeed's hysteresis rules
 *     (the sequence is written out below); reaching min_loss_scale is
 *     ZERO_ERR_LOSS_SCALE on every rank;
 *  D. Lion, Adagrad and LAMB end to end: stages agree with stage0 and the
 *     first step equals the documented update computed here (LAMB: trust
 *     ratios of params that straddle rank partitions);
 *  E. memory of a bf16 model with Adam (K = 12: fp32 master + m + v): the
 *     per-rank bytes by tag and tier follow ZeRO's table (offload: the K
 *     bytes in the host tier), e.g. stage 3 holds
 *     (2 + 2 + 12) Psi / N (2-byte shard and gradient partition, 4-byte
 *     master, 8 bytes of states) plus the persistent small params;
 *  F. bf16/fp16 checkpoints of every stage resume bitwise;
 *  G. fp16 on the wire with fp32 accumulation (communication_data_type,
 *     issue 14): pre-divided by the world by default, it skips exactly the
 *     fp32 wire's steps where the raw sum (gradient_predivide_factor 1)
 *     overflows; every plugin bitwise stage0.
 * Usage: test_precision [steps] */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/mpi_check.h"
#include "prec_host.h"

static int rank_ = 0, world_ = 1;

typedef struct stage_def {
    const char *plugin;
    int stage;
    const char *zero_extra; /* extra zero_optimization members */
} stage_def;
static const stage_def STAGES[] = {{"stage0", 0, NULL},
                                   {"stage1", 1, NULL},
                                   {"stage2", 2, NULL},
                                   {"stage3", 3, NULL},
                                   {"stage1-pp", 1, NULL},
                                   {"offload", 2, "\"offload_optimizer\": {\"device\": \"cpu\"}"}};
enum { NSTAGES = sizeof STAGES / sizeof STAGES[0] };

/* cfg run by STAGES[i] (plugin, stage number, extra zero_optimization keys). */
static prec_cfg on_stage(prec_cfg cfg, int i) {
    cfg.plugin = STAGES[i].plugin;
    cfg.stage = STAGES[i].stage;
    cfg.zero_extra_json = STAGES[i].zero_extra;
    return cfg;
}

static int ran(const prec_out *o, const char *label) {
    CHECK(o->status == ZERO_OK, "N=%d %s failed: %s", world_, label, o->error);
    return o->status == ZERO_OK;
}

/* Every stage but stage0 run with cfg ends within relative L2 tol of ref
 * (stage0's run of cfg); messages start "N=<world> <label> <plugin>"; with
 * print, rank 0 prints each distance. */
static void others_match_stage0(const prec_cfg *cfg, const prec_out *ref, const char *label, double tol, int print) {
    for (int i = 1; i < NSTAGES; i++) {
        prec_cfg ci = on_stage(*cfg, i);
        prec_out o;
        prec_run(&ci, &o);
        if (ran(&o, ci.plugin)) {
            double d = prec_rel_l2(o.params, ref->params, o.numel);
            if (print && rank_ == 0) printf("N=%d %s %-10s vs stage0: rel L2 %.2e\n", world_, label, ci.plugin, d);
            CHECK(d <= tol, "N=%d %s %s vs stage0: rel L2 %.2e", world_, label, ci.plugin, d);
        }
        prec_free(&o);
    }
}

static const char *dtname(zero_dtype dt) { return dt == ZERO_DTYPE_BF16 ? "bf16" : dt == ZERO_DTYPE_F16 ? "fp16" : "fp32"; }

/* A. every stage == stage0 of the same precision, BITWISE, and bitwise
 * repeatable.  At gas 1 every stage forms the same fp32 sums and rounds
 * once; with gradient accumulation every plugin reduces each micro-step and
 * adds the reduced values into a partition accumulator in stage 2's order
 * (docs/determinism.md), so gas 2 is bitwise too.  (tol_partitioned, for
 * the stage >= 2 rows, is the relative L2 bound printed on failure; the
 * check is memcmp.) */
static void mixed_equivalence(zero_dtype dt, int steps, int gas, double tol_partitioned) {
    prec_out ref;
    prec_cfg c = prec_default_cfg();
    c.dtype = dt;
    c.steps = steps;
    c.gas = gas;
    prec_run(&c, &ref);
    if (!ran(&ref, "stage0 reference")) return;
    for (int i = 0; i < NSTAGES; i++) {
        prec_cfg ci = on_stage(c, i);
        prec_out a, b;
        prec_run(&ci, &a);
        prec_run(&ci, &b);
        char label[96];
        snprintf(label, sizeof label, "%s gas%d %s", dtname(dt), gas, ci.plugin);
        const double tol = STAGES[i].stage >= 2 ? tol_partitioned : 1e-5;
        if (ran(&a, label) && ran(&b, label)) {
            double d = prec_rel_l2(a.params, ref.params, a.numel);
            int same = memcmp(a.params, b.params, a.numel * sizeof(float)) == 0;
            if (rank_ == 0) printf("N=%d %-20s vs stage0: rel L2 %.3e, repeat %s\n", world_, label, d,
                                   same ? "bitwise identical" : "DIFFERENT");
            CHECK(d <= tol, "N=%d %s vs stage0: rel L2 %.3e > %.0e", world_, label, d, tol);
            CHECK(memcmp(a.params, ref.params, a.numel * sizeof(float)) == 0,
                  "N=%d %s: not bitwise equal to stage0 (rel L2 %.3e)", world_, label, d);
            CHECK(same, "N=%d %s: repeated run not bitwise identical", world_, label);
            /* the run trained: params moved away from the initial values */
            CHECK(fabs((double)a.params[10] - prec_init(1, 10 - prec_param_numel(0))) > 1e-3,
                  "N=%d %s: params did not move", world_, label);
            int taken = 0;
            for (int s = 0; s < a.nsteps; s++) taken += a.taken[s];
            CHECK_EQ_INT(taken, steps);
        }
        prec_free(&a);
        prec_free(&b);
    }
    prec_free(&ref);
}

/* A'. prescale_gradients / gradient_predivide_factor (DeepSpeed's factors
 * around the fp32 reduction of 16-bit gradients): with either key every
 * stage still equals stage0 of the same config, and the result is the same
 * mean gradient as without them up to 16-bit rounding of the differently
 * scaled fp32 sums. */
static void reduction_factors(void) {
    static const char *extra[2] = {"\"prescale_gradients\": true", "\"gradient_predivide_factor\": 2.0"};
    prec_cfg c = prec_default_cfg();
    c.dtype = ZERO_DTYPE_BF16;
    c.gas = 1;
    c.steps = 10;
    prec_out plain;
    prec_run(&c, &plain);
    if (!ran(&plain, "bf16 stage0")) return;
    for (int k = 0; k < 2; k++) {
        prec_cfg ck = c;
        ck.extra_json = extra[k];
        prec_out ref;
        prec_run(&ck, &ref);
        if (ran(&ref, extra[k])) {
            double d0 = prec_rel_l2(ref.params, plain.params, ref.numel);
            if (rank_ == 0) printf("N=%d bf16 stage0 with %s vs without: rel L2 %.2e\n", world_, extra[k], d0);
            CHECK(d0 <= 5e-3, "N=%d %s changes the trained params by %.2e (same mean gradient expected)", world_,
                  extra[k], d0);
            others_match_stage0(&ck, &ref, extra[k], 1e-5, 0);
        }
        prec_free(&ref);
    }
    prec_free(&plain);
}

/* Full-batch mean gradient of step 1 in fp64 (params at their fp32 init). */
static double *full_gradient(int mb, int gas) {
    size_t total = prec_total_numel();
    double *g = calloc(total, sizeof *g);
    uint64_t nsamples = (uint64_t)world_ * mb * gas;
    for (uint64_t smp = 0; smp < nsamples; smp++) {
        size_t off = 0;
        for (int i = 0; i < PREC_NPARAMS; i++)
            for (size_t k = 0; k < prec_param_numel(i); k++, off++) {
                double w = (double)(float)prec_init(i, k);
                g[off] += prec_sample_a(smp, i, k) * (w - prec_sample_t(smp, i, k));
            }
    }
    for (size_t k = 0; k < total; k++) g[k] /= (double)nsamples;
    return g;
}

/* B. clipping coefficient == the one from the unpartitioned gradient */
static void clipping(void) {
    const double clip = 0.05, lr = 0.1;
    size_t total = prec_total_numel();
    prec_cfg c = prec_default_cfg();
    c.steps = 1;
    c.optimizer_json = "{\"type\": \"SGD\", \"params\": {\"lr\": 0.1}}";
    c.extra_json = "\"gradient_clipping\": 0.05";
    double *g = full_gradient(c.mb, c.gas);
    double sq = 0;
    for (size_t k = 0; k < total; k++) sq += g[k] * g[k];
    const double norm = sqrt(sq), coef = clip / (norm + 1e-6);
    CHECK(coef < 0.5, "clipping test must clip (norm %.3f)", norm);
    for (int i = 0; i < NSTAGES; i++) {
        prec_cfg ci = on_stage(c, i);
        prec_out o;
        prec_run(&ci, &o);
        if (ran(&o, ci.plugin)) {
            double rn = fabs(o.norm[0] - norm) / norm;
            /* the step taken: w1 - w0 == -lr * coef * g, elementwise */
            double d = 0, r = 0;
            size_t off = 0;
            for (int p = 0; p < PREC_NPARAMS; p++)
                for (size_t k = 0; k < prec_param_numel(p); k++, off++) {
                    double step = (double)o.params_step1[off] - (double)(float)prec_init(p, k);
                    double want = -lr * coef * g[off];
                    d += (step - want) * (step - want);
                    r += want * want;
                }
            double coef_seen = coef * (1.0 + 0.0); /* recovered below from the step */
            double num = 0, den = 0;
            off = 0;
            for (int p = 0; p < PREC_NPARAMS; p++)
                for (size_t k = 0; k < prec_param_numel(p); k++, off++) {
                    double step = (double)o.params_step1[off] - (double)(float)prec_init(p, k);
                    num += step * (-lr * g[off]);
                    den += (lr * g[off]) * (lr * g[off]);
                }
            coef_seen = num / den; /* least-squares coefficient of the step on -lr*g */
            if (rank_ == 0)
                printf("N=%d clip %-10s norm %.9g (fp64 full %.9g, rel %.1e) coef %.9g (expected %.9g) step rel L2 %.1e\n",
                       world_, ci.plugin, o.norm[0], norm, rn, coef_seen, coef, sqrt(d / r));
            CHECK(rn <= 1e-6, "N=%d %s: norm %.9g vs %.9g from the full gradient", world_, ci.plugin, o.norm[0], norm);
            CHECK(fabs(coef_seen - coef) / coef <= 1e-5, "N=%d %s: clip coefficient %.9g, expected %.9g", world_,
                  ci.plugin, coef_seen, coef);
            CHECK(sqrt(d / r) <= 3e-4, "N=%d %s: step differs from -lr*coef*g (rel L2 %.2e)", world_, ci.plugin,
                  sqrt(d / r));
        }
        prec_free(&o);
    }
    free(g);
}

/* C. overflow injection with DeepSpeed's dynamic loss scaler.
 * Config: initial_scale_power 8 (256), hysteresis 2, loss_scale_window 3,
 * consecutive_hysteresis false.  Overflows at steps 2, 3, 4, 8, 10.  By the
 * rules (cur_iter counts every boundary step; a clean step doubles the scale
 * when (cur_iter - last_overflow_iter) % window == 0, the first overflow
 * after a reset of hysteresis only decrements it, later ones halve):
 *   step  0   1   2   3   4   5   6   7   8   9  10  11  12  13
 *   ovf   -   -   x   x   x   -   -   -   x   -   x   -   -   -
 *   scale 256 256 256 128 64  64  64  128 128 128 64  64  64  128
 * (step 2: hysteresis 2 -> 1, scale kept; 3: halve; 4: hysteresis is not
 * reset by overflows, halve again; 7: 7-4 = 3, double and reset hysteresis
 * to 2; 8: 2 -> 1, kept; 10: halve; 13: 13-10 = 3, double). */
static void overflow_injection(void) {
    static const int ovf[14] = {0, 0, 1, 1, 1, 0, 0, 0, 1, 0, 1, 0, 0, 0};
    static const double scale[14] = {256, 256, 256, 128, 64, 64, 64, 128, 128, 128, 64, 64, 64, 128};
    for (int i = 0; i < NSTAGES; i++) {
        prec_cfg c = on_stage(prec_default_cfg(), i);
        c.dtype = ZERO_DTYPE_F16;
        c.steps = 14;
        c.fp16_json = "{\"enabled\": true, \"loss_scale\": 0, \"initial_scale_power\": 8, \"loss_scale_window\": 3, "
                      "\"hysteresis\": 2, \"min_loss_scale\": 1}";
        c.inject_mask = (1u << 2) | (1u << 3) | (1u << 4) | (1u << 8) | (1u << 10);
        prec_out o;
        prec_run(&c, &o);
        if (ran(&o, c.plugin)) {
            int ok = o.nsteps == 14, taken = 0;
            for (int s = 0; s < o.nsteps && s < 14; s++) {
                ok &= o.overflow[s] == ovf[s] && o.taken[s] == !ovf[s] && o.scale[s] == scale[s];
                ok &= o.scale_before[s] == (s ? scale[s - 1] : 256.0);
                ok &= ovf[s] ? o.norm[s] == -1.0 : o.norm[s] > 0;
                taken += o.taken[s];
            }
            if (rank_ == 0 || !ok) {
                printf("N=%d rank %d overflow %-10s scales:", world_, rank_, c.plugin);
                for (int s = 0; s < o.nsteps; s++) printf(" %g%s", o.scale[s], o.overflow[s] ? "x" : "");
                printf("\n");
            }
            CHECK(ok, "N=%d rank %d %s: overflow/scale sequence differs from DeepSpeed's rules", world_, rank_,
                  c.plugin);
            CHECK_EQ_INT(taken, 9);
        }
        prec_free(&o);
        /* consecutive_hysteresis: every clean step resets the hysteresis, so
         * only consecutive overflows halve.  hysteresis 2, window 3,
         * overflows at 2, 4, 5:
         *   step  0   1   2   3   4   5   6   7   8   9
         *   scale 256 256 256 256 256 128 128 128 256 256
         * (4: reset by the clean step 3, 2 -> 1 only; 5: halve; 8: 8-5 = 3,
         * double).  Without consecutive_hysteresis step 4 would halve. */
        {
            static const double cscale[10] = {256, 256, 256, 256, 256, 128, 128, 128, 256, 256};
            prec_cfg cc = c;
            cc.fp16_json = "{\"enabled\": true, \"initial_scale_power\": 8, \"loss_scale_window\": 3, "
                           "\"hysteresis\": 2, \"consecutive_hysteresis\": true}";
            cc.inject_mask = (1u << 2) | (1u << 4) | (1u << 5);
            cc.steps = 10;
            prec_run(&cc, &o);
            if (ran(&o, cc.plugin)) {
                int ok = o.nsteps == 10;
                for (int s = 0; s < o.nsteps && s < 10; s++)
                    ok &= o.scale[s] == cscale[s] && o.overflow[s] == (int)((cc.inject_mask >> s) & 1u);
                CHECK(ok, "N=%d rank %d %s: consecutive_hysteresis sequence differs from DeepSpeed's rules", world_,
                      rank_, cc.plugin);
            }
            prec_free(&o);
        }
        /* static scale (loss_scale > 0): overflows skip the step, the scale
         * never moves, and repeated overflows are not an error */
        c.fp16_json = "{\"enabled\": true, \"loss_scale\": 128}";
        c.inject_mask = (1u << 1) | (1u << 2) | (1u << 3);
        c.steps = 6;
        prec_run(&c, &o);
        if (ran(&o, c.plugin)) {
            int ok = o.nsteps == 6;
            for (int s = 0; s < o.nsteps; s++)
                ok &= o.scale[s] == 128.0 && o.scale_before[s] == 128.0 && o.overflow[s] == (s >= 1 && s <= 3) &&
                      o.taken[s] == !(s >= 1 && s <= 3) && o.step_status[s] == ZERO_OK;
            CHECK(ok, "N=%d rank %d %s: static loss scale 128 moved or overflows were not skipped", world_, rank_,
                  c.plugin);
        }
        prec_free(&o);
        /* min_loss_scale reached: scale 2 -> 1 on the first overflow, the
         * second one at the minimum is an error on every rank */
        c.fp16_json = "{\"enabled\": true, \"initial_scale_power\": 1, \"hysteresis\": 1, \"min_loss_scale\": 1}";
        c.inject_mask = 3;
        c.steps = 4;
        prec_run(&c, &o);
        CHECK(o.status == ZERO_OK, "N=%d %s min-scale run: %s", world_, c.plugin, o.error);
        CHECK(o.nsteps == 2 && o.step_status[0] == ZERO_OK && o.step_status[1] == ZERO_ERR_LOSS_SCALE,
              "N=%d rank %d %s: expected ZERO_ERR_LOSS_SCALE at the second overflow (nsteps %d, status %d)", world_,
              rank_, c.plugin, o.nsteps, (int)o.step_status[1]);
        CHECK(o.scale[0] == 1.0, "N=%d %s: scale after the first overflow %g, expected 1", world_, c.plugin,
              o.scale[0]);
        prec_free(&o);
    }
}

/* G. (issue 14) fp16 on the wire with fp32 accumulation
 * (communication_data_type "fp16").  A sum of N fp16 gradients can reach N
 * times the largest one, which the loss scaler keeps below 65504 only for
 * one rank's; libzero pre-divides by the world size by default, so every
 * partial sum of the ring stays within one rank's range: the run skips
 * exactly the steps the fp32 wire skips.  gradient_predivide_factor 1
 * (DeepSpeed's default factor) sums raw fp16 values: at a loss scale where
 * one rank's gradient fits fp16 but N of them do not, the wire overflows,
 * and the step is skipped (found by every stage alike).  Every plugin on
 * the fp16 wire is bitwise stage0. */
static int skips(const prec_out *o) {
    int n = 0;
    for (int s = 0; s < o->nsteps; s++) n += o->overflow[s];
    return n;
}

static void fp16_wire(void) {
    if (world_ < 2) return;
    /* scale powers measured on this host's model: at `tight` one rank's
     * scaled gradient fits fp16 and the raw sum of N does not (N = 2 needs
     * one doubling more); at 16 even one rank's overflows on some steps */
    const int tight = world_ == 2 ? 15 : 14, powers[2] = {tight, 16};
    static char fp16[160];
    for (int pi = 0; pi < 2; pi++) {
        prec_cfg c = prec_default_cfg();
        c.dtype = ZERO_DTYPE_F16;
        c.steps = 6;
        c.gas = 1;
        snprintf(fp16, sizeof fp16, "{\"enabled\": true, \"initial_scale_power\": %d, \"hysteresis\": 1}",
                 powers[pi]);
        c.fp16_json = fp16;
        prec_out o32, o1, o16[NSTAGES];
        c = on_stage(c, 2); /* stage2 for the fp32-wire and predivide-1 references */
        prec_run(&c, &o32);
        c.extra_json = "\"communication_data_type\": \"fp16\", \"gradient_predivide_factor\": 1.0";
        prec_run(&c, &o1);
        c.extra_json = "\"communication_data_type\": \"fp16\"";
        for (int i = 0; i < NSTAGES; i++) {
            prec_cfg ci = on_stage(c, i);
            prec_run(&ci, &o16[i]);
        }
        if (ran(&o32, "fp32 wire") && ran(&o1, "fp16 wire predivide 1") && ran(&o16[0], "fp16 wire stage0")) {
            if (rank_ == 0)
                printf("N=%d fp16 wire, scale 2^%d: skipped steps: fp32 wire %d, fp16 wire %d, fp16 wire with "
                       "gradient_predivide_factor 1: %d\n",
                       world_, powers[pi], skips(&o32), skips(&o16[0]), skips(&o1));
            int same = o16[0].nsteps == o32.nsteps;
            for (int st = 0; same && st < o32.nsteps; st++) same = o16[0].overflow[st] == o32.overflow[st];
            CHECK(same, "N=%d 2^%d: the fp16 wire (pre-divided by the world) skips other steps than the fp32 wire",
                  world_, powers[pi]);
            if (pi == 0)
                CHECK(skips(&o32) == 0 && skips(&o1) > 0,
                      "N=%d 2^%d: expected the raw fp16 sum (predivide 1) to overflow where one rank's gradient "
                      "does not (skips: fp32 wire %d, predivide 1 %d)",
                      world_, powers[pi], skips(&o32), skips(&o1));
            for (int i = 1; i < NSTAGES; i++) {
                if (!ran(&o16[i], STAGES[i].plugin)) continue;
                int eq = o16[i].nsteps == o16[0].nsteps && o16[i].numel == o16[0].numel &&
                         memcmp(o16[i].params, o16[0].params, o16[0].numel * sizeof(float)) == 0;
                for (int st = 0; eq && st < o16[0].nsteps; st++) eq = o16[i].overflow[st] == o16[0].overflow[st];
                CHECK(eq, "N=%d 2^%d fp16 wire: %s differs from stage0 (params or skipped steps)", world_,
                      powers[pi], STAGES[i].plugin);
            }
        }
        prec_free(&o32);
        prec_free(&o1);
        for (int i = 0; i < NSTAGES; i++) prec_free(&o16[i]);
    }
}

/* D. Lion and Adagrad through the engine */
static void optimizers(int steps) {
    static const char *types[2] = {"{\"type\": \"Lion\", \"params\": {\"lr\": 0.001, \"weight_decay\": 0.1}}",
                                   "{\"type\": \"Adagrad\", \"params\": {\"lr\": 0.01}}"};
    prec_cfg c0 = prec_default_cfg();
    double *g = full_gradient(c0.mb, c0.gas);
    for (int t = 0; t < 2; t++) {
        prec_cfg c = c0;
        c.steps = steps;
        c.optimizer_json = types[t];
        prec_out ref;
        prec_run(&c, &ref);
        if (!ran(&ref, t ? "Adagrad stage0" : "Lion stage0")) continue;
        /* first step against the documented update */
        double d = 0, r = 0;
        size_t off = 0;
        for (int p = 0; p < PREC_NPARAMS; p++)
            for (size_t k = 0; k < prec_param_numel(p); k++, off++) {
                double w0 = (double)(float)prec_init(p, k), gk = g[off], want;
                if (t == 0) /* Lion, m = 0: w*(1 - lr*wd) - lr*sign((1-beta1)*g) */
                    want = w0 * (1.0 - 0.001 * 0.1) - 0.001 * (gk > 0 ? 1.0 : -1.0) - w0;
                else /* Adagrad, sum = g^2: -lr * g / (|g| + 1e-10) */
                    want = -0.01 * gk / (fabs(gk) + 1e-10);
                double step = (double)ref.params_step1[off] - w0;
                d += (step - want) * (step - want);
                r += want * want;
            }
        if (rank_ == 0) printf("N=%d %s first step vs formula: rel L2 %.2e\n", world_, t ? "Adagrad" : "Lion", sqrt(d / r));
        CHECK(sqrt(d / r) <= 1e-4, "N=%d %s: first step differs from the formula (rel L2 %.2e)", world_,
              t ? "Adagrad" : "Lion", sqrt(d / r));
        others_match_stage0(&c, &ref, t ? "Adagrad" : "Lion", 1e-6, 1);
        prec_free(&ref);
    }
    free(g);
}

/* E. bytes per tag and tier (this rank) of a bf16 AdamW model, with
 * gradients accumulated in fp32 (the default: gb = 4 bytes per gradient
 * element) or in bf16 (data_types.grad_accum_dtype "bf16": gb = 2). */
static void memory_formulas_gb(uint64_t gb) {
    for (int i = 0; i < NSTAGES; i++) {
        prec_cfg c = on_stage(prec_default_cfg(), i);
        /* the ZeRO table: accumulation 1 (with accumulation > 1 stage 0/1
         * keep stage 2's partition accumulator, docs/precision.md) */
        c.gas = 1;
        c.dtype = ZERO_DTYPE_BF16;
        if (gb == 2) c.extra_json = "\"data_types\": {\"grad_accum_dtype\": \"bf16\"}";
        c.steps = 2;
        prec_out o;
        prec_run(&c, &o);
        if (!ran(&o, c.plugin)) continue;
        const uint64_t *m = o.mem.current[ZERO_TIER_DEVICE], *h = o.mem.current[ZERO_TIER_HOST];
        const int off = STAGES[i].zero_extra != NULL; /* offload: master, states and a gradient copy on the host */
        const uint64_t P = m[ZERO_MEM_PARAMS], G = m[ZERO_MEM_GRADS];
        const uint64_t M = m[ZERO_MEM_MASTER] + h[ZERO_MEM_MASTER], S = m[ZERO_MEM_OPTIM] + h[ZERO_MEM_OPTIM];
        const uint64_t N = (uint64_t)world_, psi = prec_total_numel();
        if (rank_ == 0)
            printf("N=%d bf16 (grads %d bytes) memory %-10s params %llu grads %llu master %llu optim %llu bytes (Psi %llu)\n", world_,
                   (int)gb, c.plugin, (unsigned long long)P, (unsigned long long)G, (unsigned long long)M,
                   (unsigned long long)S, (unsigned long long)psi);
        /* part = M / 4 elements (the fp32 master of this rank's partition),
         * flat = part * N (the padded flat space) */
        const uint64_t part = M / 4, flat = STAGES[i].stage == 0 ? part : part * N; /* stage 0: nothing partitioned */
        CHECK(S == 8 * part, "N=%d %s: optimizer states %llu != 8 bytes x partition", world_, c.plugin,
              (unsigned long long)S);
        CHECK(flat >= psi && flat <= psi + 64 * N * 4, "N=%d %s: padded flat %llu for Psi %llu", world_, c.plugin,
              (unsigned long long)flat, (unsigned long long)psi);
        if (STAGES[i].stage == 0) { /* 2 + 2 + 12: everything full */
            CHECK(P == 2 * flat && G == gb * flat, "N=%d stage0: params %llu grads %llu, expected 2 x %llu", world_,
                  (unsigned long long)P, (unsigned long long)G, (unsigned long long)flat);
        } else if (STAGES[i].stage == 1) { /* 2 + 2 + 12/N */
            CHECK(P == 2 * flat && G == gb * flat, "N=%d %s: params/grads not 2 and gb bytes x Psi", world_, c.plugin);
        } else if (off) { /* device: 2 + 2/N; host: 12/N + the 2/N landing copy of the gradient */
            CHECK(P == 2 * flat && G == gb * part && h[ZERO_MEM_GRADS] == gb * part && m[ZERO_MEM_MASTER] == 0 &&
                      m[ZERO_MEM_OPTIM] == 0,
                  "N=%d offload: device params %llu grads %llu, host grads %llu", world_, (unsigned long long)P,
                  (unsigned long long)G, (unsigned long long)h[ZERO_MEM_GRADS]);
        } else if (STAGES[i].stage == 2) { /* 2 + (2 + 12)/N */
            CHECK(P == 2 * flat && G == gb * part, "N=%d stage2: params %llu grads %llu, expected %llu and %llu",
                  world_, (unsigned long long)P, (unsigned long long)G, (unsigned long long)(2 * flat),
                  (unsigned long long)(gb * part));
        } else { /* (2 + 2 + 12)/N, plus persistent params below the threshold (p0, p3, p5: 72 elements) */
            CHECK(G == gb * part && P >= 2 * part && P <= 2 * part + 2 * 72,
                  "N=%d stage3: params %llu grads %llu, expected 2 x %llu (+ <= 144 persistent)", world_,
                  (unsigned long long)P, (unsigned long long)G, (unsigned long long)part);
            CHECK(P + G + M + S <= (14 + gb) * part + 2 * 72, "N=%d stage3: %llu bytes > (2+gb+12) Psi/N", world_,
                  (unsigned long long)(P + G + M + S));
        }
        prec_free(&o);
    }
}

static void memory_formulas(void) {
    memory_formulas_gb(4);
    memory_formulas_gb(2);
}

/* LAMB: per-parameter trust ratios over parameters that straddle ranks.
 * First step from the formula (m = (1-b1) g, v = (1-b2) g^2, so with bias
 * correction u = g / (|g| + eps) + wd * w; trust = clamp(||w|| / ||u||,
 * 0.01, 10) over the whole parameter; w -= lr * trust * u), then every stage
 * == stage0 after 10 steps. */
static void lamb(void) {
    const double lr = 0.01, wd = 0.01, eps = 1e-6;
    prec_cfg c = prec_default_cfg();
    c.optimizer_json = "{\"type\": \"Lamb\", \"params\": {\"lr\": 0.01, \"weight_decay\": 0.01, \"eps\": 1e-6}}";
    double *g = full_gradient(c.mb, c.gas);
    c.steps = 10;
    prec_out ref;
    prec_run(&c, &ref);
    if (ran(&ref, "Lamb stage0")) {
        double d = 0, r = 0;
        size_t off = 0;
        for (int p = 0; p < PREC_NPARAMS; p++) {
            size_t n = prec_param_numel(p);
            double wsq = 0, usq = 0;
            for (size_t k = 0; k < n; k++) {
                double w0 = (double)(float)prec_init(p, k), gk = g[off + k];
                double u = gk / (fabs(gk) + eps) + wd * w0;
                wsq += w0 * w0;
                usq += u * u;
            }
            double trust = (wsq > 0 && usq > 0) ? sqrt(wsq) / sqrt(usq) : 1.0;
            trust = trust < 0.01 ? 0.01 : trust > 10 ? 10 : trust;
            for (size_t k = 0; k < n; k++, off++) {
                double w0 = (double)(float)prec_init(p, k), gk = g[off];
                double want = -lr * trust * (gk / (fabs(gk) + eps) + wd * w0);
                double step = (double)ref.params_step1[off] - w0;
                d += (step - want) * (step - want);
                r += want * want;
            }
        }
        if (rank_ == 0) printf("N=%d Lamb first step vs formula: rel L2 %.2e\n", world_, sqrt(d / r));
        CHECK(sqrt(d / r) <= 1e-4, "N=%d Lamb: first step differs from the formula (rel L2 %.2e)", world_, sqrt(d / r));
        others_match_stage0(&c, &ref, "Lamb", 1e-6, 1);
    }
    prec_free(&ref);
    free(g);
}

/* F. 16-bit checkpoints: save after 4 steps, load into a fresh engine and
 * train 4 more == 8 uninterrupted steps, bitwise (the fp32 master, the
 * optimizer states and the loss scaler survive the round trip). */
static void checkpoints(void) {
    static const zero_dtype dts[2] = {ZERO_DTYPE_BF16, ZERO_DTYPE_F16};
    char dir[256];
    for (int d = 0; d < 2; d++)
        for (int i = 0; i < NSTAGES; i++) {
            snprintf(dir, sizeof dir, "prec-ckpt-np%d-%s-%s", world_, dtname(dts[d]), STAGES[i].plugin);
            prec_cfg c = on_stage(prec_default_cfg(), i);
            c.dtype = dts[d];
            c.steps = 8;
            c.ckpt_dir = dir;
            prec_out whole, resumed;
            c.save_at = 4;
            prec_run(&c, &whole);
            c.save_at = 0;
            c.load_at = 4;
            prec_run(&c, &resumed);
            char label[96];
            snprintf(label, sizeof label, "%s %s checkpoint", dtname(dts[d]), c.plugin);
            if (ran(&whole, label) && ran(&resumed, label)) {
                int same = memcmp(whole.params, resumed.params, whole.numel * sizeof(float)) == 0;
                if (rank_ == 0) printf("N=%d %-28s resume %s\n", world_, label, same ? "bitwise identical" : "DIFFERENT");
                CHECK(same, "N=%d %s: resumed run differs (rel L2 %.2e)", world_, label,
                      prec_rel_l2(resumed.params, whole.params, whole.numel));
                CHECK(resumed.scale[7] == whole.scale[7], "N=%d %s: loss scale %g after resume, %g without", world_,
                      label, resumed.scale[7], whole.scale[7]);
            }
            prec_free(&whole);
            prec_free(&resumed);
        }
}

int main(int argc, char **argv) {
    check_mpi_init(&argc, &argv, &rank_, &world_);
    int steps = argc > 1 ? atoi(argv[1]) : 30;
    mixed_equivalence(ZERO_DTYPE_BF16, steps, 1, 1e-5);
    mixed_equivalence(ZERO_DTYPE_F16, steps, 1, 1e-5);
    mixed_equivalence(ZERO_DTYPE_BF16, steps, 2, 5e-3); /* bf16: 8-bit mantissa, ulp 2^-8 */
    mixed_equivalence(ZERO_DTYPE_F16, steps, 2, 1e-3);  /* fp16: 11-bit mantissa */
    reduction_factors();
    clipping();
    overflow_injection();
    optimizers(10);
    lamb();
    memory_formulas();
    checkpoints();
    fp16_wire();
    int rc = check_finish();
    MPI_Finalize();
    return rc;
}
