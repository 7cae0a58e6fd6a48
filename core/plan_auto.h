/* "stage": "auto" (or plugin "auto"): pick the plugin from memory plans.
 *
 * At zero_params_done, with the parameter list known, the candidates
 * stage0, stage1, stage2, stage3, offload and stage3+offload (stage3 with
 * the optimizer state and the parameter shard in the host tier) are planned
 * in that order
 * (zero__plan_table) for this world size, and the first whose device-tier
 * plan fits the per-rank budget wins: the lowest stage that fits (the
 * DeepSpeed maintainers' advice), then offload.  The budget is
 * zero_optimization.memory_budget_bytes, else the device's free memory,
 * else the host's available memory; ranks agree on the smallest (one
 * all-reduce), so every rank picks the same plugin.  One INFO line names the
 * choice, its plan, the budget and the runner-up.  Step thread only;
 * collective over the engine's world. */
#ifndef ZERO_CORE_PLAN_AUTO_H
#define ZERO_CORE_PLAN_AUTO_H
#include <stddef.h>

#include "zero.h"

struct zero_engine;

/* Writes the chosen plugin's name to name (len bytes).  Nothing fits:
 * ZERO_ERR_OUT_OF_MEMORY, the engine's last error naming the smallest
 * budget that would fit and with which plugin. */
zero_status zero__auto_pick(struct zero_engine *e, char *name, size_t len);
/* The candidates and zero__auto_stage_of: plan_candidates.h. */
#endif
