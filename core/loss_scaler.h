/* fp16 dynamic loss scaling with DeepSpeed's semantics
 * (deepspeed/runtime/fp16/loss_scaler.py, DynamicLossScaler.update_scale).
 * Pure state machine; not thread-safe (one per engine). */
#ifndef ZERO_CORE_LOSS_SCALER_H
#define ZERO_CORE_LOSS_SCALER_H
#include <stdint.h>

typedef struct zero__scaler {
    int dynamic;            /* 0: static scale (fp16.loss_scale > 0) or not fp16 */
    double scale;
    double min_scale;
    int window;             /* loss_scale_window */
    int delayed_shift;      /* hysteresis */
    int cur_hysteresis;
    int consecutive_hysteresis;
    int64_t cur_iter;
    int64_t last_overflow_iter;
} zero__scaler;

/* enabled: fp16 on; static_scale > 0 selects a static scale. */
void zero__scaler_init(zero__scaler *s, int enabled, double static_scale, int initial_scale_power,
                       int window, int hysteresis, int consecutive_hysteresis, double min_scale);
/* Record the outcome of one boundary step.  Returns 1 if an overflow
 * happened while the scale was already at min_scale (DeepSpeed raises
 * there: "Current loss scale already at minimum"), else 0. */
int zero__scaler_update(zero__scaler *s, int overflow);
#endif
