// The CUDA kernels of libzero: bodies and launchers are shared headers
// (compiled here for the GPU, and for the host under tests/cuda_shim).
// One translation unit keeps nvcc's per-file overhead (x3 architectures)
// to a single compile on CI's two cores.
#include <cuda_runtime.h>
#include <string.h>

#include "zero_cuda_kernels.h"
#include "zero_cuda_launchers.h"
#include "zero_cuda_quant_launchers.h"
#include "zero_cuda_print_launchers.h"
