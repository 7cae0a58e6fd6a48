/* How libzero waits for its peers: one policy for every blocking wait of
 * the comm backends (MPI requests and blocking collectives, NCCL events),
 * so that a wait is both cheap on the CPU and bounded in time.
 *
 * CPU (issue 18, "waiting costs no core"): a waiter first spins with
 * sched_yield() for ZERO_COMM_SPIN_US (default 2000 us: a peer that is about
 * to arrive costs no sleep, and a yield hands the core to any rank sharing
 * it), then sleeps between polls for 1 % of the silence so far, at least
 * 20 us and at most 1 ms: the back-off adds at most ~1 % to any wait (a peer
 * a few milliseconds behind is answered within 20-50 us, as before), and a
 * rank whose peer is stalled for 100 ms or more polls ~1000 times a second
 * instead of spinning a core.  Any progress resets the back-off.
 *
 * Time (issue 17, ZERO_COMM_TIMEOUT): a wait gives up when nothing it can
 * observe has moved for the limit (0 = wait forever).  Progress, not the
 * wait's total length, is measured, so a large transfer that keeps moving is
 * never cut off.  The limit itself comes from zero__comm_timeout_resolve.
 *
 * A zero__waiter lives on the waiting thread's stack; the functions are
 * thread-safe (no shared state). */
#ifndef ZERO_BACKENDS_COMM_WAIT_H
#define ZERO_BACKENDS_COMM_WAIT_H

/* Default of ZERO_COMM_TIMEOUT / the config key comm_timeout, seconds:
 * DeepSpeed's and torch.distributed's default process-group timeout (30
 * minutes), so a DeepSpeed user's slow-but-legal steps (first-step
 * compilation, a large checkpoint on a slow file system) never trip it,
 * while a job whose peer is gone ends instead of hanging for ever. */
#define ZERO_COMM_TIMEOUT_DEFAULT_S 1800.0
/* Longest sleep between two polls of a waiting thread. */
#define ZERO_COMM_WAIT_MAX_SLEEP_US 1000u

typedef struct zero__waiter {
    double start;      /* when the wait began */
    double last_move;  /* last time something moved (start at first) */
    double limit;      /* seconds without progress before giving up; 0 = none */
    unsigned sleep_us; /* shortest sleep once the spin phase is over */
    unsigned spin_us;  /* length of the spin phase */
} zero__waiter;

/* Start a wait with a no-progress limit of `limit_s` seconds (<= 0: none). */
void zero__waiter_start(zero__waiter *w, double limit_s);
/* Something moved: restart the spin phase and the no-progress clock. */
void zero__waiter_moved(zero__waiter *w);
/* Nothing moved in the last poll: yield or sleep per the policy above.
 * Returns 1 once the limit has passed without progress (the caller gives
 * up), else 0.  Call it without locks held that the peer-side needs. */
int zero__waiter_pause(zero__waiter *w);
/* Seconds since the last progress (for error texts). */
double zero__waiter_idle(const zero__waiter *w);

/* The wait limit in seconds, 0 = none.  Precedence: $ZERO_COMM_TIMEOUT;
 * the older variables it replaces, $ZERO_NCCL_TIMEOUT_S then
 * $ZERO_STAGE3_TIMEOUT_S (aliases); the config key comm_timeout when
 * cfg_set; else ZERO_COMM_TIMEOUT_DEFAULT_S.  A variable that is not a
 * number >= 0 counts as unset here (engine creation refuses it: base/env.c).
 * `source` (may be NULL) receives where the value came from, for the log. */
double zero__comm_timeout_resolve(int cfg_set, double cfg_value, const char **source);
#endif
