/* Transition shim: the plugin kit under the names plugins/stage3 still
 * uses.  plugins/common moved to kit/ (libzero_kit.a, zero_kit.h), which
 * every in-tree plugin links (cmake/ZeroHelpers.cmake, zero_add_plugin);
 * delete this folder once stage3 includes zero_kit.h itself. */
#ifndef ZERO_PLUGIN_GLUE_H
#define ZERO_PLUGIN_GLUE_H
#include "zero_kit.h"

#define zero__grad_dtype_of zero_kit_grad_dtype
#define zero__reduce_every_micro_step zero_kit_reduce_every_micro_step
#define zero__grad_tmp zero_kit_grad_tmp
#define zero__grad_ready zero_kit_grad_ready
#define zero__grad_tmps_free zero_kit_grad_tmps_free
#endif
