/* What the partitioned step (partition_step.c) and its LAMB pass
 * (partition_lamb.c) both read of a zero_part_step.  A contract header (no
 * .c of its own), so that partition_step.c calls partition_lamb.c and
 * partition_lamb.c depends on nothing of partition_step.c
 * (tools/check-loops.py). */
#ifndef ZERO_CORE_PART_STEP_ARGS_H
#define ZERO_CORE_PART_STEP_ARGS_H
#include <stddef.h>
#include "zero_plugin.h"

/* The dtype of ps->grad.  ps is complete: plugin_abi.c gave a 1.0
 * caller's struct its default (the model dtype). */
static inline zero_dtype zero__ps_grad_dtype(const zero_part_step *ps) { return ps->grad_dtype; }
#endif
