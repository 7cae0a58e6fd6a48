/* The optimizer over one flat range (the optim_step service): split at
 * layout-group boundaries so that each piece gets its group's lr, betas and
 * weight decay (scheduler, zero_set_group, zero_set_hparams), for the step
 * about to be taken (global_step + 1); host arrays run the fused CPU pass,
 * device arrays the CUDA kernel.  Lamb is refused (its trust ratio needs
 * whole parameters: part_step).  r is borrowed for the call and complete
 * (plugin_abi.c adopts a plugin's older layouts).  Timed as zero_step's
 * `optim` phase.  Step thread, or a plugin's workers on disjoint ranges. */
#ifndef ZERO_CORE_OPTIM_RANGE_H
#define ZERO_CORE_OPTIM_RANGE_H
#include "zero_plugin.h"

zero_status zero__optim_range_step(zero_core *c, const zero_opt_range *r);
#endif
