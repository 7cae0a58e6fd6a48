/* ZERO_DEBUG_JITTER (contract in jitter.h). */
#include "jitter.h"
#include "env.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static atomic_int g_max_us;           /* 0 = off; valid after g_once */
static atomic_int g_ready;            /* fast path: g_once has run */
static uint64_t g_seed;               /* base seed, written once under g_once */
static int g_seeded;                  /* ZERO_DEBUG_JITTER_SEED given */
static atomic_uint g_threads;         /* order of first use, for per-thread seeds */
static atomic_ullong g_count[ZERO_JITTER_NSITES];
static _Thread_local uint64_t t_rng;  /* 0 = not seeded yet */

static void init_once(void) {
    long us = 0; /* at most 0.1 s (env.c's range): perturb, never stall a run */
    if (zero__env_long("ZERO_DEBUG_JITTER", &us) != 1) us = 0;
    uint64_t seed = 0;
    if (zero__env_u64("ZERO_DEBUG_JITTER_SEED", &seed) == 1) {
        g_seed = seed;
        g_seeded = 1;
    } else {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        g_seed = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32);
    }
    atomic_store(&g_max_us, (int)us);
    atomic_store(&g_ready, 1);
}

int zero__jitter_enabled(void) {
    if (!atomic_load_explicit(&g_ready, memory_order_acquire)) pthread_once(&g_once, init_once);
    return atomic_load_explicit(&g_max_us, memory_order_relaxed) > 0;
}

/* splitmix64: a good stream from any seed, including consecutive ones */
static uint64_t next(void) {
    uint64_t z = (t_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void zero__jitter(zero__jitter_site site) {
    if (!zero__jitter_enabled()) return;
    if (t_rng == 0) {
        uint64_t order = atomic_fetch_add(&g_threads, 1u) + 1u;
        t_rng = g_seed ^ ((uint64_t)getpid() << 20) ^ (order * 0xD1B54A32D192ED03ull);
        if (!g_seeded) t_rng ^= (uint64_t)(uintptr_t)&t_rng; /* another stream per thread and run */
        if (t_rng == 0) t_rng = 1;
    }
    const uint64_t r = next();
    switch (r & 3u) {
    case 0:
    case 1: return;
    case 2: sched_yield(); break;
    default: {
        const int max = atomic_load_explicit(&g_max_us, memory_order_relaxed);
        const long us = 1 + (long)((r >> 2) % (uint64_t)max);
        struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
        while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
        }
        break;
    }
    }
    if ((unsigned)site < ZERO_JITTER_NSITES) atomic_fetch_add_explicit(&g_count[site], 1, memory_order_relaxed);
}

unsigned long long zero__jitter_count(zero__jitter_site site) {
    return (unsigned)site < ZERO_JITTER_NSITES ? atomic_load(&g_count[site]) : 0;
}
