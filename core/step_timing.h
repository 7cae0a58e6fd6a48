/* Where the time of a step goes (ABI 1.3 zero_step_timing_get, the
 * wall_clock_breakdown log line).
 *
 * zero_step opens a span on its thread; a core service that the plugin
 * calls DIRECTLY from its step (span depth 1 on the step thread) adds its
 * wall time to one phase.  A service nested in another (part_step's
 * optim_step calls, boundary_step's grad_norm) is inside the outer one's
 * span and is not counted twice, and services called from hook threads or
 * outside zero_step are not phases at all.  The host-facing hooks
 * (zero_grad_buffer, zero_on_grad_ready, the slice forms) and zero_gather /
 * zero_release are timed as outer spans of their own on whatever thread
 * calls them, summed with atomics.
 *
 * Thread-safety: begin/end are per-thread (thread-local depth); the phase
 * sums are written only by the step thread; the hook and fetch sums are
 * atomic.  Internal to the core. */
#ifndef ZERO_CORE_STEP_TIMING_H
#define ZERO_CORE_STEP_TIMING_H
#include <stdatomic.h>
#include <stdint.h>

#include "zero.h"

struct zero_engine;

typedef enum {
    ZERO__PH_EXPOSED = 0, /* waiting for reductions launched during backward */
    ZERO__PH_REDUCE,      /* the rest of buckets_flush */
    ZERO__PH_NORM,
    ZERO__PH_OPTIM,
    ZERO__PH_GATHER,
    ZERO__PH_COPY,
    ZERO__PH_N
} zero__phase;

/* Hook-side sums (outside zero_step), nanoseconds. */
typedef enum { ZERO__OUT_HOOK = 0, ZERO__OUT_FETCH, ZERO__OUT_N } zero__outside;

typedef struct zero__timing {
    double cur[ZERO__PH_N];   /* the zero_step in progress */
    double step_t0;
    zero_step_timing last, total;
    atomic_uint_fast64_t out_ns[ZERO__OUT_N]; /* since the previous zero_step returned */
    zero_step_timing printed; /* `total` when the last log line was written */
} zero__timing;

/* A timed region: t0 < 0 means "not counted" (nested, or not a phase). */
typedef struct zero__span {
    double t0;
} zero__span;

double zero__now_s(void);

/* zero_step's own span: begin at its top, end before it returns. */
void zero__timing_step_begin(struct zero_engine *e);
void zero__timing_step_end(struct zero_engine *e);

/* A service of phase `ph`: counted when called directly from the step. */
zero__span zero__phase_begin(const struct zero_engine *e);
void zero__phase_end(struct zero_engine *e, zero__span s, zero__phase ph);
/* Move `seconds` of an already counted phase `from` to `to` (the flush is
 * timed whole as REDUCE; the bucket engine tells how much of it was the
 * wait for reductions launched during backward). */
void zero__phase_move(struct zero_engine *e, zero__phase from, zero__phase to, double seconds);

/* A host-facing call outside zero_step (hooks, gather/release). */
zero__span zero__outside_begin(void);
void zero__outside_end(struct zero_engine *e, zero__span s, zero__outside which);

/* With wall_clock_breakdown: the log line every steps_per_print optimizer
 * steps (global rank 0).  Called by zero_step after the step was counted. */
void zero__timing_log(struct zero_engine *e, int taken);
#endif
