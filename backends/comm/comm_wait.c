/* The wait policy of comm_wait.h: spin briefly, then back off to 1 ms
 * sleeps; give up after the no-progress limit. */
#include "comm_wait.h"
#include "env.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <time.h>

#include "comm_internal.h"

static unsigned spin_us_default(void) {
    /* Read once per wait: getenv is cheap next to a wait, and tests and
     * benchmarks can change it between engines. */
    long v = 2000;
    return zero__env_long("ZERO_COMM_SPIN_US", &v) == 1 ? (unsigned)v : 2000u;
}

void zero__waiter_start(zero__waiter *w, double limit_s) {
    w->start = w->last_move = zero__comm_now();
    w->limit = limit_s > 0 ? limit_s : 0;
    w->sleep_us = 20;
    w->spin_us = spin_us_default();
}

void zero__waiter_moved(zero__waiter *w) {
    w->last_move = zero__comm_now();
    w->sleep_us = 20;
}

double zero__waiter_idle(const zero__waiter *w) { return zero__comm_now() - w->last_move; }

int zero__waiter_pause(zero__waiter *w) {
    double idle = zero__comm_now() - w->last_move;
    if (w->limit > 0 && idle > w->limit) return 1;
    if (idle * 1e6 < (double)w->spin_us) {
        sched_yield();
        return 0;
    }
    /* Sleep for 1 % of the silence so far, between 20 us and 1 ms: the
     * back-off never adds more than ~1 % to a wait (a peer a few
     * milliseconds behind is answered within 20-50 us, as before), while a
     * peer silent for 100 ms or more is polled only 1000 times a second. */
    double us_d = (idle * 1e6 - (double)w->spin_us) / 100.0;
    unsigned us = us_d < (double)w->sleep_us ? w->sleep_us
                  : us_d > (double)ZERO_COMM_WAIT_MAX_SLEEP_US ? ZERO_COMM_WAIT_MAX_SLEEP_US
                                                               : (unsigned)us_d;
    struct timespec ts = {0, (long)us * 1000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
    return 0;
}

/* A bad value ("5m", "abc") is refused at engine creation (env.c); here it
 * counts as unset, so that the next name in the order decides. */
static int env_seconds(const char *name, double *out) { return zero__env_seconds(name, out) == 1; }

double zero__comm_timeout_resolve(int cfg_set, double cfg_value, const char **source) {
    static const char *const vars[] = {"ZERO_COMM_TIMEOUT", "ZERO_NCCL_TIMEOUT_S", "ZERO_STAGE3_TIMEOUT_S"};
    double v = 0;
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; ++i)
        if (env_seconds(vars[i], &v)) {
            if (source) *source = vars[i];
            return v;
        }
    if (cfg_set && cfg_value >= 0) {
        if (source) *source = "config comm_timeout";
        return cfg_value;
    }
    if (source) *source = "default";
    return ZERO_COMM_TIMEOUT_DEFAULT_S;
}
