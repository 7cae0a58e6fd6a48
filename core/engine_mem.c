/* Engine-level memory and kernel calls (core/engine_mem.h). */
#include "engine_mem.h"

#include <math.h>

#include "device.h"
#include "engine.h"
#include "log.h"
#include "step_timing.h"

#define E(c) zero__engine_of(c)

/* With a device (e->dev) a buffer the
 * host cannot dereference goes to the device backend, everything else to
 * the CPU code as before (backends/device/device.c).  The void/double
 * services report a device failure as the engine's last error and an error
 * log line (sumsq answers NaN, nonfinite 1, so a failed norm pass reads as
 * an overflow and the step is skipped rather than taken on garbage). */
void zero__engine_dev_failed(struct zero_engine *e, zero_status st, const char *what) {
    zero__error(e, st, "%s on the %s device failed: %s", what, e->dev ? e->dev->ops->name : "host",
                zero__dev_error(e->dev));
    zero__log(e, ZERO_LOG_ERROR, "%s", e->last_error);
}

void zero__engine_copy(zero_core *c, void *d, const void *s, size_t b) {
    zero__span sp = zero__phase_begin(E(c)); /* (1.3) copies inside zero_step: the copy phase */
    zero_status st = zero__dev_copy(E(c)->dev, d, s, b);
    zero__phase_end(E(c), sp, ZERO__PH_COPY);
    if (st != ZERO_OK) zero__engine_dev_failed(E(c), st, "mem_copy");
}
zero_status zero__engine_set(zero_core *c, void *d, int v, size_t b) {
    zero__span sp = zero__phase_begin(E(c));
    zero_status st = zero__dev_memset(E(c)->dev, d, v, b);
    zero__phase_end(E(c), sp, ZERO__PH_COPY);
    if (st != ZERO_OK) zero__engine_dev_failed(E(c), st, "mem_set");
    return st;
}

/* Mixed-precision variants convert in bounded tiles (fp32 temporaries stay
 * small); device buffers run the CUDA kernels in the same summation order. */
double zero__engine_sumsq(zero_core *c, const void *x, zero_dtype dt, size_t n) {
    double acc = 0.0;
    zero_status st = zero__dev_sumsq(E(c)->dev, x, dt, n, &acc);
    if (st != ZERO_OK) {
        zero__engine_dev_failed(E(c), st, "sumsq");
        return (double)NAN;
    }
    return acc;
}
int zero__engine_nonfinite(zero_core *c, const void *x, zero_dtype dt, size_t n) {
    int any = 0;
    zero_status st = zero__dev_nonfinite(E(c)->dev, x, dt, n, &any);
    if (st != ZERO_OK) {
        zero__engine_dev_failed(E(c), st, "nonfinite");
        return 1;
    }
    return any;
}
void zero__engine_convert(zero_core *c, void *d, zero_dtype dd, const void *s, zero_dtype sd, size_t n) {
    zero__span sp = zero__phase_begin(E(c));
    zero_status st = zero__dev_convert(E(c)->dev, d, dd, s, sd, n);
    zero__phase_end(E(c), sp, ZERO__PH_COPY);
    if (st != ZERO_OK) zero__engine_dev_failed(E(c), st, "convert");
}
void zero__engine_add_into(zero_core *c, float *d, const void *s, zero_dtype sd, size_t n) {
    zero__span sp = zero__phase_begin(E(c));
    zero_status st = zero__dev_add_into(E(c)->dev, d, ZERO_DTYPE_F32, s, sd, n);
    zero__phase_end(E(c), sp, ZERO__PH_COPY);
    if (st != ZERO_OK) zero__engine_dev_failed(E(c), st, "add_into");
}

