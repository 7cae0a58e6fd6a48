/* Learning-rate schedules with DeepSpeed's parameters and defaults
 * (deepspeed/runtime/lr_schedules.py).
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
 * fixed beta2 of 0.99 (its min_moms / max_moms tuples), and so does this. */
#include <math.h>
#include <string.h>
#include <strings.h>

#include "engine.h"

static double param(const struct zero_engine *e, const char *key, double dflt) {
    char path[128];
    double v;
    int64_t iv;
    strcpy(path, "scheduler.params.");
    strncat(path, key, sizeof path - strlen(path) - 1);
    if (zero__config_double(e->cfg, path, &v) == 1) return v;
    if (zero__config_int(e->cfg, path, &iv) == 1) return (double)iv;
    return dflt;
}

static const char *sparam(const struct zero_engine *e, const char *key, const char *dflt) {
    char path[128];
    const char *v;
    strcpy(path, "scheduler.params.");
    strncat(path, key, sizeof path - strlen(path) - 1);
    return zero__config_string(e->cfg, path, &v) == 1 ? v : dflt;
}

/* Warm-up fraction in [0,1] at iteration it (log or linear). */
static double warmup_gamma(double it, double warmup_steps, const char *type) {
    if (warmup_steps < 2) warmup_steps = 2; /* DeepSpeed: max(2, warmup_num_steps) */
    if (it >= warmup_steps) return 1.0;
    if (type && strcasecmp(type, "linear") == 0) return it / warmup_steps;
    return log(it + 1.0) / log(warmup_steps);
}

double zero__schedule_lr(const struct zero_engine *e, uint64_t t) {
    const char *type = zero__config_scheduler(e->cfg);
    double base = e->rc->lr;
    if (!type) return base;
    /* the scheduler's last_batch_iteration while step t runs (see above);
     * scheduler.params.last_batch_iteration = k >= 0 resumes a schedule: the
     * constructor then leaves the optimizer's lr alone for step 1 and step t
     * runs at k + t - 1 */
    const double start = param(e, "last_batch_iteration", -1);
    if (start >= 0 && t <= 1) return base;
    double it = start + (double)t - 1.0;
    if (strcasecmp(type, "WarmupLR") == 0 || strcasecmp(type, "WarmupDecayLR") == 0) {
        double lo = param(e, "warmup_min_lr", 0.0), hi = param(e, "warmup_max_lr", 0.001);
        double w = param(e, "warmup_num_steps", 1000);
        const char *wt = sparam(e, "warmup_type", "log");
        if (w < 2) w = 2; /* DeepSpeed: max(2, warmup_num_steps) */
        if (it < 0) return lo; /* constructor: get_lr() before the first step() is min_lr */
        if (it < w || strcasecmp(type, "WarmupLR") == 0) return lo + (hi - lo) * warmup_gamma(it, w, wt);
        double total = param(e, "total_num_steps", 0);
        double g = (total - it) / fmax(1.0, total - w);
        return lo + (hi - lo) * fmax(0.0, g);
    }
    if (strcasecmp(type, "WarmupCosineLR") == 0) {
        double total = param(e, "total_num_steps", 0);
        double wmin = param(e, "warmup_min_ratio", 0.0), cmin = param(e, "cos_min_ratio", 0.0001);
        double w = param(e, "warmup_num_steps", 1000);
        const char *wt = sparam(e, "warmup_type", "log");
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
        double lo = param(e, "lr_range_test_min_lr", 1e-3), ss = param(e, "lr_range_test_step_size", 2000);
        double rate = param(e, "lr_range_test_step_rate", 1.0);
        int stair = 0;
        zero__config_bool(e->cfg, "scheduler.params.lr_range_test_staircase", &stair);
        double interval = (it + 1) / ss;
        if (stair) interval = floor(interval);
        return lo * (1 + rate * interval);
    }
    if (strcasecmp(type, "OneCycle") == 0) {
        double lo = param(e, "cycle_min_lr", 0.0), hi = param(e, "cycle_max_lr", 0.0);
        double s1 = param(e, "cycle_first_step_size", 2000);
        double s2 = param(e, "cycle_second_step_size", s1);
        double decay_rate = param(e, "decay_lr_rate", 0.0), decay_ss = param(e, "decay_step_size", 0);
        double total = s1 + s2;
        if (it < total) {
            double b = it + 1; /* _get_scale_factor: last_batch_iteration + 1 (0 for the constructor's min) */
            double cycle = floor(1 + b / total);
            double x = 1. + b / total - cycle;
            double ratio = s1 / total;
            double scale = x <= ratio ? x / ratio : (x - 1) / (ratio - 1);
            return lo + (hi - lo) * scale;
        }
        if (decay_ss == 0 || decay_rate == 0) return lo; /* skip_lr_decay */
        double decay_interval = (it - total + 1) / decay_ss;
        return lo / (1 + decay_rate * decay_interval);
    }
    return base;
}

void zero__schedule_betas(const struct zero_engine *e, uint64_t t, double *beta1, double *beta2) {
    const zero_run_config *rc = e->rc;
    const char *type = zero__config_scheduler(e->cfg);
    *beta1 = rc->beta1;
    *beta2 = rc->beta2;
    if (!type || strcasecmp(type, "OneCycle") != 0) return;
    int cycle = 1;
    zero__config_bool(e->cfg, "scheduler.params.cycle_momentum", &cycle);
    if (!cycle || rc->optim == ZERO_OPTIM_SGD || rc->optim == ZERO_OPTIM_ADAGRAD) return; /* no betas */
    double lo = param(e, "cycle_min_mom", 0.8), hi = param(e, "cycle_max_mom", 0.9);
    double s1 = param(e, "cycle_first_step_size", 2000);
    double s2 = param(e, "cycle_second_step_size", s1);
    double rate = param(e, "decay_mom_rate", 0.0), decay_ss = param(e, "decay_step_size", 0);
    const double start = param(e, "last_batch_iteration", -1);
    if (start >= 0 && t <= 1) return; /* resumed: the constructor sets nothing */
    double total = s1 + s2, it = start + (double)t - 1.0;
    *beta2 = 0.99;
    if (it < 0) {
        *beta1 = lo; /* constructor: min_moms */
    } else if (it < total) {
        double b = it + 1, x = 1. + b / total - floor(1 + b / total), ratio = s1 / total;
        double scale = x <= ratio ? x / ratio : (x - 1) / (ratio - 1);
        *beta1 = hi - (hi - lo) * scale;
    } else if (decay_ss == 0 || rate == 0) {
        *beta1 = hi; /* skip_mom_decay: max_moms */
    } else {
        *beta1 = hi * (1 + rate * (it - total + 1) / decay_ss);
    }
}
