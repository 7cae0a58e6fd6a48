/* The candidates of "stage": "auto" (contract in plan_candidates.h). */
#include "plan_candidates.h"

#include <string.h>

const zero__auto_candidate zero__auto_candidates[ZERO__AUTO_NCAND] = {
    {"stage0", 0, 0, "stage0"}, {"stage1", 1, 0, "stage1"},   {"stage2", 2, 0, "stage2"},
    {"stage3", 3, 0, "stage3"}, {"offload", 2, 0, "offload"}, {"stage3", 3, 1, "stage3+offload"}};

int zero__auto_stage_of(const char *plugin) {
    for (int c = 0; plugin && c < ZERO__AUTO_NCAND; c++)
        if (strcmp(plugin, zero__auto_candidates[c].plugin) == 0) return zero__auto_candidates[c].stage;
    return -1;
}
