/* The candidates of "stage": "auto" (plan_candidates.c), in the order they
 * are tried: read by the auto pick (plan_auto.c) and by zero_plan
 * (plan.c).  A unit of its own so that plan.c does not depend on
 * plan_auto.c, which plans through plan.c (tools/check-loops.py). */
#ifndef ZERO_CORE_PLAN_CANDIDATES_H
#define ZERO_CORE_PLAN_CANDIDATES_H

typedef struct zero__auto_candidate {
    const char *plugin;
    int stage;         /* zero_optimization.stage the plugin runs under (offload: stage-2 partitioning) */
    int offload;       /* stage3 with offload_optimizer and offload_param on the CPU (issue 20) */
    const char *label; /* how messages name the candidate */
} zero__auto_candidate;

#define ZERO__AUTO_NCAND 6
extern const zero__auto_candidate zero__auto_candidates[ZERO__AUTO_NCAND];

/* The zero_optimization.stage a candidate runs under when auto picks it
 * (offload: 2), or -1 for a plugin auto never picks.  zero_plan uses it so
 * that planning a candidate of an "auto" config plans what auto would run. */
int zero__auto_stage_of(const char *plugin);
#endif
