/* The engine's learning-rate schedule: DeepSpeed's schedules, whose
 * formulas, step convention and range proof live with the config
 * (core/config_sched.c, pure over the parsed config so that the parser can
 * refuse a schedule that leaves fp32's range and the config fuzzer can sweep
 * it).  zero_step_result.lr reports the lr the step just taken used.  And
 * the step state a run starts from (engine creation; a weights-only load). */
#include "engine.h"

void zero__engine_steps_init(struct zero_engine *e) {
    const zero_run_config *rc = e->rc;
    e->global_step = 0;
    e->skipped_steps = 0;
    e->micro_step = 0;
    zero__scaler_init(&e->scaler, rc->model_dtype == ZERO_DTYPE_F16, rc->fp16_loss_scale, rc->fp16_initial_scale_power,
                      rc->fp16_loss_scale_window, rc->fp16_hysteresis, rc->fp16_consecutive_hysteresis,
                      rc->fp16_min_loss_scale);
    e->lr = zero__schedule_lr(e, 1);
}

double zero__schedule_lr(const struct zero_engine *e, uint64_t t) { return zero__config_sched_lr(e->cfg, t); }

void zero__schedule_betas(const struct zero_engine *e, uint64_t t, double *beta1, double *beta2) {
    zero__config_sched_betas(e->cfg, t, beta1, beta2);
}
