/* LAMB's two passes with per-parameter trust ratios across partitions
 * (partition_lamb.c); collective over the engine's data-parallel group.
 * Called by the partitioned step (partition_step.c) for ZERO_OPTIM_LAMB. */
#ifndef ZERO_CORE_PARTITION_LAMB_H
#define ZERO_CORE_PARTITION_LAMB_H
#include "zero_plugin.h"

struct zero_engine;
zero_status zero__lamb_part_step(struct zero_engine *e, const zero_part_step *ps, float grad_mul);
#endif
