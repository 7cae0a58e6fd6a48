/* Stage-3 phases: one recorded gather order per phase the host names with
 * zero_set_phase ("train", "eval", "generate", ...).  Hosts evaluate and
 * generate with other orders than they train with (the demo's validation
 * pass gathers embed, the layers and out, forward only); with one trace,
 * every eval pass looked like a divergence, was warned about, and threw the
 * training order (and its prefetch) away until the next step re-recorded
 * it.  Each phase now keeps its own trace and prefetches from it; the
 * active phase's trace is s->trace (so gather/prefetch code is unchanged),
 * the others are parked in s->phases.
 *
 * Collective discipline: a phase change verifies the unverified gathers of
 * the phase being left with the same agreement zero_step makes, so ranks
 * that diverged (one evaluating, one training) fail with both orders named
 * before any rank switches; what follows depends only on agreed state. */
#include <stdlib.h>
#include <string.h>

#include "stage3.h"

#define MAX_PHASES ZERO__S3_MAX_PHASES

const char *zero__s3_phase_name(const zero__s3 *s) {
    return s->phases && s->cur_phase < s->nphases ? s->phases[s->cur_phase].name : "train";
}

static int find_or_add(zero__s3 *s, const char *phase, uint32_t *at) {
    for (uint32_t i = 0; i < s->nphases; i++)
        if (strcmp(s->phases[i].name, phase) == 0) {
            *at = i;
            return 0;
        }
    if (s->nphases >= MAX_PHASES) return -1;
    memset(&s->phases[s->nphases], 0, sizeof s->phases[0]);
    strncpy(s->phases[s->nphases].name, phase, sizeof s->phases[0].name - 1);
    *at = s->nphases++;
    return 0;
}

zero_status zero__s3_set_phase(void *state, const char *phase) {
    zero__s3 *s = state;
    if (!s->phases) return s->svc->error(s->c, ZERO_ERR_STATE, "zero_set_phase before zero_params_done");
    if (strcmp(phase, zero__s3_phase_name(s)) == 0) return ZERO_OK; /* no change, nothing to verify */
    for (uint32_t i = 0; i < s->nparams; i++)
        if (s->params[i].holds > 0)
            return s->svc->error(s->c, ZERO_ERR_STATE,
                                 "zero_set_phase('%s'): param '%s' is still gathered; release every param first",
                                 phase, s->params[i].info->name);
    uint32_t next;
    if (find_or_add(s, phase, &next) != 0)
        return s->svc->error(s->c, ZERO_ERR_INVALID_ARGUMENT,
                             "zero_set_phase('%s'): more than %d distinct phases", phase, MAX_PHASES);
    /* Collective: every rank agrees on what the phase being left gathered. */
    zero_status ag = zero__s3_agree(s, "zero_set_phase");
    zero_status st = zero__s3_settle(s);
    if (ag != ZERO_OK) return ag;
    if (st != ZERO_OK) return st;
    /* Park the active order; bring in the next phase's (empty the first time). */
    zero__s3_trace_swap(&s->trace, &s->phases[s->cur_phase].trace);
    zero__s3_trace_swap(&s->trace, &s->phases[next].trace);
    s->cur_phase = next;
    s->on_track = s->trace.valid;
    return ZERO_OK;
}

void zero__s3_phases_free(zero__s3 *s) {
    for (uint32_t i = 0; s->phases && i < s->nphases; i++) zero__s3_trace_free(&s->phases[i].trace);
    free(s->phases);
    s->phases = NULL;
    s->nphases = 0;
}
