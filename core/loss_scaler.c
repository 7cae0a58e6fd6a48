/* See loss_scaler.h.  Mirrors DeepSpeed's DynamicLossScaler.update_scale:
 *
 *   if overflow:
 *       if delayed_shift == 1 or cur_hysteresis == 1:
 *           if cur_scale == min_scale and raise_error_at_min_scale: raise
 *           cur_scale = max(cur_scale / 2, min_scale)
 *       else:
 *           cur_hysteresis -= 1
 *       last_overflow_iter = cur_iter
 *   else:
 *       if consecutive_hysteresis: cur_hysteresis = delayed_shift
 *       if (cur_iter - last_overflow_iter) % scale_window == 0:
 *           if not consecutive_hysteresis: cur_hysteresis = delayed_shift
 *           cur_scale *= 2
 *   cur_iter += 1
 */
#include <math.h>
#include "loss_scaler.h"

void zero__scaler_init(zero__scaler *s, int enabled, double static_scale, int initial_scale_power,
                       int window, int hysteresis, int consecutive_hysteresis, double min_scale) {
    s->dynamic = enabled && static_scale <= 0.0;
    s->scale = !enabled ? 1.0 : (static_scale > 0.0 ? static_scale : ldexp(1.0, initial_scale_power));
    s->min_scale = min_scale > 0 ? min_scale : 1.0;
    s->window = window > 0 ? window : 1000;
    s->delayed_shift = hysteresis > 0 ? hysteresis : 1;
    s->cur_hysteresis = s->delayed_shift;
    s->consecutive_hysteresis = consecutive_hysteresis;
    s->cur_iter = 0;
    s->last_overflow_iter = -1;
}

int zero__scaler_update(zero__scaler *s, int overflow) {
    int at_min = 0;
    if (!s->dynamic) return 0;
    if (overflow) {
        if (s->delayed_shift == 1 || s->cur_hysteresis == 1) {
            if (s->scale <= s->min_scale) at_min = 1;
            s->scale = fmax(s->scale / 2.0, s->min_scale);
        } else {
            s->cur_hysteresis -= 1;
        }
        s->last_overflow_iter = s->cur_iter;
    } else {
        if (s->consecutive_hysteresis) s->cur_hysteresis = s->delayed_shift;
        if ((s->cur_iter - s->last_overflow_iter) % s->window == 0) {
            if (!s->consecutive_hysteresis) s->cur_hysteresis = s->delayed_shift;
            s->scale *= 2.0;
        }
    }
    s->cur_iter += 1;
    return at_min;
}
