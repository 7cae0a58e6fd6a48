/* Learning-rate schedules with DeepSpeed's parameters and defaults
 * (deepspeed/runtime/lr_schedules.py), pure over a parsed config so that
 * the parser can prove them and the config fuzzer can sweep them
 * (tests/fuzz/fuzz_config.c); core/sched.c hands them to the engine.
 *
 * Which lr a step uses.  DeepSpeed's engine calls lr_scheduler.step() AFTER
 * each optimizer step that was taken (not after a step skipped on fp16
 * overflow), and each scheduler's constructor (last_batch_iteration = -1)
 * puts its starting lr into the optimizer.  So optimizer step t (1-based)
 * runs with the scheduler at last_batch_iteration = t - 2, and step 1 with
 * the constructor's value:
 *   WarmupLR, WarmupDecayLR: get_lr() at -1 is warmup_min_lr; at i >= 0
 *     min + (max - min) * gamma(i), gamma = log(i + 1) / log(W) (log) or
 *     i / W (linear) while i < W = max(2, warmup_num_steps), then 1
 *     (WarmupLR) or max(0, (total - i) / max(1, total - W)) (WarmupDecayLR).
 *     Hence steps 1 and 2 both run at warmup_min_lr.
 *   WarmupCosineLR: ratio of the optimizer's lr; warmup_min_ratio +
 *     gamma(i) * (1 - warmup_min_ratio) while i < W, then
 *     max(0, cos_min_ratio + (1 - cos_min_ratio) * (1 + cos(pi * (i - W + 1)
 *     / (total - W))) / 2).  Step 1 takes the ratio at i = 0 (the warm-up's
 *     start, warmup_min_ratio, for both warm-up types).
 *   LRRangeTest: min_lr * (1 + step_rate * (i + 1) / step_size) (floored
 *     with staircase); the constructor sets min_lr, which is the same
 *     formula at i = -1: step t uses interval (t - 1) / step_size.
 *   OneCycle (lr part): triangular cycle evaluated at batch i + 1 while
 *     i < total = first + second step size, the constructor sets
 *     cycle_min_lr (the cycle at 0): step t uses the cycle at t - 1; after
 *     the cycle min_lr / (1 + decay_lr_rate * (i - total + 1) /
 *     decay_step_size), or min_lr when decay_step_size or decay_lr_rate is 0.
 * scheduler.params.last_batch_iteration = k >= 0 (a resumed schedule):
 * the constructor sets nothing, so step 1 runs at optimizer.params.lr (and
 * its betas), and step t at last_batch_iteration k + t - 1.
 * zero_step_result.lr reports the lr the step just taken used.
 *
 * OneCycle also cycles momentum (cycle_momentum, default true) for
 * optimizers with betas (Adam, AdamW, Lion, Lamb; DeepSpeed disables it for
 * the others): beta1 = cycle_max_mom - (cycle_max_mom - cycle_min_mom) *
 * scale over the cycle, cycle_max_mom * (1 + decay_mom_rate * interval)
 * after it (cycle_max_mom when decay_step_size or decay_mom_rate is 0), and
 * the constructor's cycle_min_mom for step 1; DeepSpeed pairs it with a
 * fixed beta2 of 0.99 (its min_moms / max_moms tuples), and so does this.
 *
 * The range proof (zero__cfg_check_schedule, run by zero__config_parse):
 * over its whole domain (t = 1 .. 2^64 - 1, any last_batch_iteration) each
 * schedule's lr lies in [0, sup] with sup below: WarmupLR / WarmupDecayLR
 * and OneCycle between their min and max lr (gamma and the cycle's scale
 * lie in [0, 1], the decays only divide by 1 + a rate >= 0), WarmupCosineLR
 * at most the base lr times max(1, warmup_min_ratio, cos_min_ratio),
 * LRRangeTest growing linearly to its value at the last step; the
 * denominators are W >= 2, max(1, ...), total > 0 (cycle_first_step_size
 * >= 1) and lr_range_test_step_size >= 1.  So every value is finite and
 * >= 0 once the parameters are (the parser's readers) and sup fits a
 * 32-bit float (checked here), as does sup * weight_decay, the decoupled
 * decay's product (and sup * max_coeff, Lamb's largest step factor).  OneCycle's momentum stays in [cycle_min_mom,
 * cycle_max_mom] within [0, 1) over the cycle; its decay after the cycle
 * grows without bound, so it reaches 1 at some step whenever it is on:
 * refused. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "config_internal.h"

static double param(const zero__config *c, const char *key, double dflt) {
    char path[128];
    double v;
    int64_t iv;
    snprintf(path, sizeof path, "scheduler.params.%s", key);
    if (zero__config_double(c, path, &v) == 1) return v;
    if (zero__config_int(c, path, &iv) == 1) return (double)iv;
    return dflt;
}

static const char *sparam(const zero__config *c, const char *key, const char *dflt) {
    char path[128];
    const char *v;
    snprintf(path, sizeof path, "scheduler.params.%s", key);
    return zero__config_string(c, path, &v) == 1 ? v : dflt;
}

/* Warm-up fraction in [0,1] at iteration it (log or linear). */
static double warmup_gamma(double it, double warmup_steps, const char *type) {
    if (warmup_steps < 2) warmup_steps = 2; /* DeepSpeed: max(2, warmup_num_steps) */
    if (it >= warmup_steps) return 1.0;
    if (type && strcasecmp(type, "linear") == 0) return it / warmup_steps;
    return log(it + 1.0) / log(warmup_steps);
}

/* OneCycle's triangular scale in [0, 1] at batch b of a cycle of `total`
 * steps whose first `s1` rise (s1 >= 1, so ratio > 0). */
static double cycle_scale(double b, double s1, double total) {
    double x = 1. + b / total - floor(1 + b / total);
    double ratio = s1 / total;
    return x <= ratio ? x / ratio : (x - 1) / (ratio - 1);
}

/* DeepSpeed's cycle_momentum applies only to optimizers with betas. */
static int cycles_momentum(const zero__config *c) {
    int cycle = 1;
    zero__config_bool(c, "scheduler.params.cycle_momentum", &cycle);
    return cycle && c->run.optim != ZERO_OPTIM_SGD && c->run.optim != ZERO_OPTIM_ADAGRAD;
}

double zero__config_sched_lr(const zero__config *c, uint64_t t) {
    const char *type = (c ? c->scheduler : NULL);
    double base = c->run.lr;
    if (!type) return base;
    /* the scheduler's last_batch_iteration while step t runs (see above);
     * scheduler.params.last_batch_iteration = k >= 0 resumes a schedule: the
     * constructor then leaves the optimizer's lr alone for step 1 and step t
     * runs at k + t - 1 */
    const double start = param(c, "last_batch_iteration", -1);
    if (start >= 0 && t <= 1) return base;
    double it = start + (double)t - 1.0;
    if (strcasecmp(type, "WarmupLR") == 0 || strcasecmp(type, "WarmupDecayLR") == 0) {
        double lo = param(c, "warmup_min_lr", 0.0), hi = param(c, "warmup_max_lr", 0.001);
        double w = param(c, "warmup_num_steps", 1000);
        const char *wt = sparam(c, "warmup_type", "log");
        if (w < 2) w = 2; /* DeepSpeed: max(2, warmup_num_steps) */
        if (it < 0) return lo; /* constructor: get_lr() before the first step() is min_lr */
        if (it < w || strcasecmp(type, "WarmupLR") == 0) return lo + (hi - lo) * warmup_gamma(it, w, wt);
        double total = param(c, "total_num_steps", 0);
        double g = (total - it) / fmax(1.0, total - w);
        return lo + (hi - lo) * fmax(0.0, g);
    }
    if (strcasecmp(type, "WarmupCosineLR") == 0) {
        double total = param(c, "total_num_steps", 0);
        double wmin = param(c, "warmup_min_ratio", 0.0), cmin = param(c, "cos_min_ratio", 0.0001);
        double w = param(c, "warmup_num_steps", 1000);
        const char *wt = sparam(c, "warmup_type", "log");
        if (w < 2) w = 2;
        if (it < 0) it = 0;
        double ratio;
        if (it < w) {
            ratio = wmin + warmup_gamma(it, w, wt) * (1.0 - wmin);
        } else {
            double real_last = it - w + 1, real_total = total - w;
            ratio = (1 + cos(M_PI * real_last / (real_total > 0 ? real_total : 1))) / 2;
            ratio = fmax(0.0, cmin + (1.0 - cmin) * ratio);
        }
        return base * ratio;
    }
    if (strcasecmp(type, "LRRangeTest") == 0) {
        double lo = param(c, "lr_range_test_min_lr", 1e-3), ss = param(c, "lr_range_test_step_size", 2000);
        double rate = param(c, "lr_range_test_step_rate", 1.0);
        int stair = 0;
        zero__config_bool(c, "scheduler.params.lr_range_test_staircase", &stair);
        double interval = (it + 1) / ss;
        if (stair) interval = floor(interval);
        return lo * (1 + rate * interval);
    }
    if (strcasecmp(type, "OneCycle") == 0) {
        double lo = param(c, "cycle_min_lr", 0.0), hi = param(c, "cycle_max_lr", 0.0);
        double s1 = param(c, "cycle_first_step_size", 2000);
        double s2 = param(c, "cycle_second_step_size", s1);
        double decay_rate = param(c, "decay_lr_rate", 0.0), decay_ss = param(c, "decay_step_size", 0);
        double total = s1 + s2;
        if (it < total) /* _get_scale_factor: last_batch_iteration + 1 (0 for the constructor's min) */
            return lo + (hi - lo) * cycle_scale(it + 1, s1, total);
        if (decay_ss == 0 || decay_rate == 0) return lo; /* skip_lr_decay */
        double decay_interval = (it - total + 1) / decay_ss;
        return lo / (1 + decay_rate * decay_interval);
    }
    return base;
}

void zero__config_sched_betas(const zero__config *c, uint64_t t, double *beta1, double *beta2) {
    const zero_run_config *rc = &c->run;
    const char *type = (c ? c->scheduler : NULL);
    *beta1 = rc->beta1;
    *beta2 = rc->beta2;
    if (!type || strcasecmp(type, "OneCycle") != 0 || !cycles_momentum(c)) return; /* no betas cycled */
    double lo = param(c, "cycle_min_mom", 0.8), hi = param(c, "cycle_max_mom", 0.9);
    double s1 = param(c, "cycle_first_step_size", 2000);
    double s2 = param(c, "cycle_second_step_size", s1);
    double rate = param(c, "decay_mom_rate", 0.0), decay_ss = param(c, "decay_step_size", 0);
    const double start = param(c, "last_batch_iteration", -1);
    if (start >= 0 && t <= 1) return; /* resumed: the constructor sets nothing */
    double total = s1 + s2, it = start + (double)t - 1.0;
    *beta2 = 0.99;
    if (it < 0) {
        *beta1 = lo; /* constructor: min_moms */
    } else if (it < total) {
        *beta1 = hi - (hi - lo) * cycle_scale(it + 1, s1, total);
    } else if (decay_ss == 0 || rate == 0) {
        *beta1 = hi; /* skip_mom_decay: max_moms */
    } else {
        *beta1 = hi * (1 + rate * (it - total + 1) / decay_ss);
    }
}

/* ---- the range proof ------------------------------------------------------ */

/* The last_batch_iteration of the last step a run can take (t = 2^64 - 1). */
static double last_iteration(double start) { return start + 18446744073709551616.0; }

/* Fail naming `key` when the schedule's largest lr does not fit fp32. */
static int lr_fits(zero__cfg_ctx *ctx, const char *key, double key_value, double sup, const char *how) {
    if (sup <= ZERO__CFG_FLT_MAX) return 0;
    return zero__cfg_fail(ctx, "scheduler.params.%s: got %g; with %s, the lr reaches %g, above %g (the "
                               "largest 32-bit float: the optimizer computes in fp32); expected a smaller value",
                          key, key_value, how, sup, ZERO__CFG_FLT_MAX);
}

/* Largest lr of the schedule over its whole domain (see the proof above),
 * or -1 with ctx's error set when it does not fit a 32-bit float. */
static double schedule_sup(zero__cfg_ctx *ctx, const zero__config *c) {
    const char *type = (c ? c->scheduler : NULL);
    const double base = c->run.lr;
    if (!type) return base;
    const double start = param(c, "last_batch_iteration", -1);
    double sup = start >= 0 ? base : 0.0; /* a resumed schedule's step 1 runs at optimizer.params.lr */
    char how[192];
    if (strcasecmp(type, "WarmupLR") == 0 || strcasecmp(type, "WarmupDecayLR") == 0)
        return fmax(sup, fmax(param(c, "warmup_min_lr", 0.0), param(c, "warmup_max_lr", 0.001)));
    if (strcasecmp(type, "OneCycle") == 0)
        return fmax(sup, fmax(param(c, "cycle_min_lr", 0.0), param(c, "cycle_max_lr", 0.0)));
    if (strcasecmp(type, "WarmupCosineLR") == 0) {
        double wmin = param(c, "warmup_min_ratio", 0.0), cmin = param(c, "cos_min_ratio", 0.0001);
        const char *key = wmin >= cmin ? "warmup_min_ratio" : "cos_min_ratio";
        double r = fmax(1.0, fmax(wmin, cmin));
        snprintf(how, sizeof how, "optimizer.params.lr %g", base);
        if (lr_fits(ctx, key, fmax(wmin, cmin), base * r, how) < 0) return -1;
        return fmax(sup, base * r);
    }
    if (strcasecmp(type, "LRRangeTest") == 0) {
        double lo = param(c, "lr_range_test_min_lr", 1e-3), ss = param(c, "lr_range_test_step_size", 2000);
        double rate = param(c, "lr_range_test_step_rate", 1.0);
        double top = lo * (1 + rate * (last_iteration(start) + 1) / ss);
        snprintf(how, sizeof how, "lr_range_test_min_lr %g and lr_range_test_step_size %g, by step 2^64", lo, ss);
        if (lr_fits(ctx, "lr_range_test_step_rate", rate, top, how) < 0) return -1;
        return fmax(sup, top);
    }
    return base;
}

int zero__cfg_check_schedule(zero__cfg_ctx *ctx, const zero__config *c) {
    const zero_run_config *rc = &c->run;
    double sup = schedule_sup(ctx, c);
    if (sup < 0) return -1;
    /* The decoupled decay multiplies the weights by 1 - lr * weight_decay,
     * computed in double and rounded to fp32 (zero__optim_scalars): the
     * product of the two fp32 values (exact in double) must be finite in
     * fp32 too. */
    if ((double)(float)sup * (double)(float)rc->weight_decay > ZERO__CFG_FLT_MAX)
        return zero__cfg_fail(ctx, "optimizer.params.weight_decay: got %g, which times the largest lr of the run "
                                   "(%g%s%s) overflows a 32-bit float; expected a smaller value",
                              rc->weight_decay, sup, c->scheduler ? ", scheduler " : "",
                              c->scheduler ? c->scheduler : "");
    /* Lamb steps by lr * trust ratio, the ratio clamped to at most max_coeff */
    double max_coeff = 10.0;
    if (rc->optim == ZERO_OPTIM_LAMB && zero__config_double(c, "optimizer.params.max_coeff", &max_coeff) >= 0 &&
        sup * max_coeff > ZERO__CFG_FLT_MAX)
        return zero__cfg_fail(ctx, "optimizer.params.max_coeff: got %g, which times the largest lr of the run (%g) "
                                   "overflows a 32-bit float (Lamb steps by lr * trust ratio); expected a smaller "
                                   "value",
                              max_coeff, sup);
    const char *type = (c ? c->scheduler : NULL);
    if (type && strcasecmp(type, "OneCycle") == 0 && cycles_momentum(c)) {
        double rate = param(c, "decay_mom_rate", 0.0), decay_ss = param(c, "decay_step_size", 0);
        double hi = param(c, "cycle_max_mom", 0.9);
        if (rate > 0 && decay_ss > 0 && hi > 0) {
            /* beta1 = hi * (1 + rate * k / decay_ss) reaches 1 at k below */
            double s1 = param(c, "cycle_first_step_size", 2000), s2 = param(c, "cycle_second_step_size", s1);
            double start = param(c, "last_batch_iteration", -1);
            double k = ceil((1.0 / hi - 1.0) * decay_ss / rate);
            double step = fmax(1.0, k + s1 + s2 - start);
            return zero__cfg_fail(ctx, "scheduler.params.decay_mom_rate: got %g with cycle_max_mom %g and "
                                       "decay_step_size %g: after the cycle OneCycle's momentum (beta1) grows as "
                                       "cycle_max_mom * (1 + decay_mom_rate * interval), reaching 1 by step %.0f, "
                                       "where Adam-type optimizers diverge; expected 0 (or cycle_momentum false)",
                                  rate, hi, decay_ss, step);
        }
    }
    return 0;
}
