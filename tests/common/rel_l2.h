/* Relative L2 difference |a - b| / |b| in fp64 (|a - b| when b is all
 * zeros).  Header-only so that tests linking the core statically (zero_static)
 * and test hosts linking libzero.so use the same definition.  Pure; reads n
 * floats of each. */
#ifndef ZERO_TESTS_REL_L2_H
#define ZERO_TESTS_REL_L2_H
#include <math.h>
#include <stddef.h>

static inline double th_rel_l2(const float *a, const float *b, size_t n) {
    double d = 0, r = 0;
    for (size_t i = 0; i < n; i++) {
        double x = (double)a[i] - (double)b[i];
        d += x * x;
        r += (double)b[i] * (double)b[i];
    }
    return r > 0 ? sqrt(d / r) : sqrt(d);
}
#endif
