/* Memory planner (zero_plan, "stage": "auto"): what a plugin would allocate
 * per rank for a model, without an engine.
 *
 * A planning context (zero__plan_ctx) owns a parsed config, a layout built
 * for rank 0 of `world` ranks and a zero_param_info per parameter; the
 * plugin's `plan` table entry reads them through a zero_plan_services_v1
 * table and records its allocations with add().  Contexts are independent:
 * planning is thread-safe as long as each thread uses its own.  Nothing
 * here communicates or allocates through an accountant. */
#ifndef ZERO_CORE_PLAN_H
#define ZERO_CORE_PLAN_H
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "loader.h"
#include "zero_plugin.h"

/* (1.9) A plan's expert groups (zero_plan_request.expert_groups): n param
 * group ids and the size of each one's partition communicator.  Borrowed. */
typedef struct zero__plan_experts {
    uint32_t n;
    const int32_t *groups;
    const uint32_t *sizes;
} zero__plan_experts;

/* Plan `table` (already loaded) for `nparams` tensors of `numels`
 * (groups may be NULL) over `world` ranks under config `cfg` (borrowed; its
 * grad dtypes must already be resolved for this plugin).  ex: the expert
 * groups (NULL or n 0: every group dense); checked here as
 * zero_params_done checks them (sizes dividing world, the plugin's
 * ZERO_PLUGIN_CAP_EXPERT_GROUPS, the optimizer, round_robin_gradients,
 * 16-bit accumulation over groups of one), so "stage": "auto" skips a
 * candidate the engine would refuse.  Fills *out (struct_size honoured,
 * plugin name set).  Errors go to err. */
zero_status zero__plan_table(const zero_plugin_table *table, const zero__config *cfg, uint32_t world,
                             const uint64_t *numels, const int32_t *groups, uint32_t nparams,
                             const zero__plan_experts *ex, zero_memory_plan *out, char *err, size_t err_len);

/* Does this table have a plan entry a 1.2 core may call? */
int zero__plan_supported(const zero_plugin_table *table);

/* Bucket staging and ring scratch bytes: plan_buckets.h. */

/* Bare-count expansion (zero_plan_request.total_params): tensors of at most
 * ZERO_PLAN_TENSOR_NUMEL elements.  Returns a malloc'd array (*n entries)
 * or NULL on failure. */
uint64_t *zero__plan_split_count(uint64_t total, uint32_t *n);
#endif
