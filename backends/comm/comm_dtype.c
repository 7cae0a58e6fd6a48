/* Element sizes of the comm dtypes: used by every backend and by the core,
 * so it lives apart from the factory (comm.c) that the backends must not
 * depend on (comm_backend.h). */
#include "comm_backend.h"

size_t zero__dtype_size(zero_dtype dt) {
    switch (dt) {
    case ZERO_DTYPE_F32: return 4;
    case ZERO_DTYPE_BF16: return 2;
    case ZERO_DTYPE_F16: return 2;
    case ZERO_DTYPE_F64: return 8;
    case ZERO_DTYPE_I64: return 8;
    case ZERO_DTYPE_U64: return 8;
    case ZERO_DTYPE_U8: return 1;
    default: return 0;
    }
}
