/* The engine's learning-rate schedule: DeepSpeed's schedules, whose
 * formulas, step convention and range proof live with the config
 * (core/config_sched.c, pure over the parsed config so that the parser can
 * refuse a schedule that leaves fp32's range and the config fuzzer can sweep
 * it).  zero_step_result.lr reports the lr the step just taken used. */
#include "engine.h"

double zero__schedule_lr(const struct zero_engine *e, uint64_t t) { return zero__config_sched_lr(e->cfg, t); }

void zero__schedule_betas(const struct zero_engine *e, uint64_t t, double *beta1, double *beta2) {
    zero__config_sched_betas(e->cfg, t, beta1, beta2);
}
