/* Shape element counts (base/shape.h). */
#include "shape.h"

int zero__shape_numel(const uint64_t *shape, uint32_t ndim, uint64_t *numel) {
    uint64_t prod = 1;
    int over = 0;
    for (uint32_t k = 0; k < ndim; k++) {
        if (shape[k] && prod > UINT64_MAX / shape[k]) over = 1; /* a later 0 would hide it: keep the flag */
        prod *= shape[k];
    }
    *numel = prod;
    return over ? -1 : 0;
}
