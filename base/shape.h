/* A tensor shape's element count, for what checks a shape against numel
 * (zero_param_desc.shape at registration, a manifest's "shape" at parse).
 * Pure, thread-safe. */
#ifndef ZERO_BASE_SHAPE_H
#define ZERO_BASE_SHAPE_H
#include <stdint.h>

/* The product of shape[0..ndim) into *numel (1 for ndim 0): 0, or -1 when
 * it does not fit 64 bits (*numel then undefined). */
int zero__shape_numel(const uint64_t *shape, uint32_t ndim, uint64_t *numel);
#endif
