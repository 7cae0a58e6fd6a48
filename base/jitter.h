/* ZERO_DEBUG_JITTER: timing perturbation at the engine's hand-off points,
 * so that races between ranks, hook threads and the comm progress thread
 * show up on any machine instead of only on the one whose timing happens to
 * expose them (issue 13 needed N >= 9 on a 2-core box to show a buffer
 * reuse race in the ring reduce-scatter).
 *
 * Off unless the environment sets ZERO_DEBUG_JITTER to a positive number of
 * microseconds M (read once per process).  Then every call to zero__jitter
 * does, at random: nothing (1/2), sched_yield (1/4), or a sleep of 1..M us
 * (1/4).  ZERO_DEBUG_JITTER_SEED=S makes the choices repeatable per thread
 * (seeded from S, the pid and the thread's order of first use); by default
 * they differ on every run.  Results must never depend on it: it only moves
 * when things happen, never what is computed (docs/determinism.md).
 *
 * Off, a call costs one relaxed atomic load.  Thread-safe; may be called
 * with locks held (a sleep under a lock is part of the perturbation). */
#ifndef ZERO_BASE_JITTER_H
#define ZERO_BASE_JITTER_H

/* Hand-off points, for the statistics only (which sites were perturbed). */
typedef enum zero__jitter_site {
    ZERO_JITTER_HOOK = 0,     /* a gradient hook before it takes the bucket lock */
    ZERO_JITTER_LAUNCH,       /* a bucket's collective about to be issued */
    ZERO_JITTER_COMPLETE,     /* a bucket's collective about to be waited / post-processed */
    ZERO_JITTER_SLOT,         /* a staging slot handed to a bucket */
    ZERO_JITTER_RING_POST,    /* a ring message about to be posted */
    ZERO_JITTER_RING_RECV,    /* a received ring chunk about to be summed */
    ZERO_JITTER_PROGRESS,     /* the progress thread / a waiter between polls */
    ZERO_JITTER_NSITES
} zero__jitter_site;

/* 1 when ZERO_DEBUG_JITTER is on in this process. */
int zero__jitter_enabled(void);
/* Maybe yield or sleep (see above); a no-op when off. */
void zero__jitter(zero__jitter_site site);
/* Perturbations done at `site` so far in this process (tests). */
unsigned long long zero__jitter_count(zero__jitter_site site);
#endif
