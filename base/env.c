/* The environment variables libzero reads (env.h).  Adding a variable: a
 * row here, a row in docs/environment.md (test_env_doc fails without it),
 * and its reader uses zero__env_* so that what is checked is what is read. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "env.h"
#include "log.h"
#include "near_name.h"

extern char **environ;

static const char *const ALLGATHER[] = {"auto", "ring", "direct", "mpi", NULL};
static const char *const ALLREDUCE[] = {"ring", "mpi", NULL};
static const char *const BACKEND[] = {"self", "mpi", NULL};
static const char *const HOST_WRITES[] = {"sampled", "full", "off", NULL};
static const char *const OFFLOAD_SEQ[] = {"0", "1", "alternate", NULL};

#define FLAG(n, r, w) {n, ZERO__ENV_FLAG, r, 0, 1, NULL, w}
#define INT(n, r, lo, hi, w) {n, ZERO__ENV_INT, r, lo, hi, NULL, w}
#define CHOICE(n, r, c, w) {n, ZERO__ENV_CHOICE, r, 0, 0, c, w}
#define KIND(n, k, w) {n, k, 0, 0, 0, NULL, w}

static const zero__env_var TABLE[] = {
    /* the engine */
    KIND("ZERO_PLUGIN", ZERO__ENV_TEXT, "the plugin to load when the host names none"),
    KIND("ZERO_PLUGIN_PATH", ZERO__ENV_TEXT, "directories searched for plugins first"),
    KIND("ZERO_LOG_LEVEL", ZERO__ENV_OWN, "error, warn, info or debug (0..3)"),
    KIND("ZERO_TRACE", ZERO__ENV_TEXT, "file prefix of a Chrome trace per rank"),
    INT("ZERO_TRACE_EVENTS", 0, 16, 1L << 26, "trace events kept per thread"),
    CHOICE("ZERO_CHECK_HOST_WRITES", 1, HOST_WRITES, "how zero_step looks for host writes to parameters"),
    KIND("ZERO_SIMD", ZERO__ENV_OWN, "the CPU kernels' instruction set: scalar, avx2 or avx512"),
    /* communication */
    {"ZERO_COMM_TIMEOUT", ZERO__ENV_SECONDS, 1, 0, 0, NULL, "seconds without progress before a wait fails (0: none)"},
    {"ZERO_NCCL_TIMEOUT_S", ZERO__ENV_SECONDS, 1, 0, 0, NULL, "older name of ZERO_COMM_TIMEOUT"},
    {"ZERO_STAGE3_TIMEOUT_S", ZERO__ENV_SECONDS, 1, 0, 0, NULL, "older name of ZERO_COMM_TIMEOUT"},
    CHOICE("ZERO_COMM_BACKEND", 1, BACKEND, "the communicator when the host passes none"),
    INT("ZERO_RANKS_PER_NODE", 1, 1, 1L << 30, "ranks per node, when the launcher cannot tell"),
    FLAG("ZERO_COMM_SHM", 0, "shared-memory transport between ranks of a node"),
    INT("ZERO_COMM_CHUNK_KB", 0, 4, 1L << 20, "ring chunk size in KiB"),
    INT("ZERO_COMM_WINDOW", 0, 1, 64, "ring chunks in flight"),
    INT("ZERO_COMM_POLL_US", 0, 1, 100000, "progress thread's poll interval in microseconds"),
    INT("ZERO_COMM_SPIN_US", 0, 0, 1000000, "microseconds a wait spins before it sleeps"),
    INT("ZERO_COMM_SCRATCH_CACHE_MB", 0, 0, 1L << 20, "ring scratch kept between collectives, MiB"),
    CHOICE("ZERO_COMM_ALLGATHER", 0, ALLGATHER, "the all-gather algorithm"),
    CHOICE("ZERO_COMM_ALLREDUCE", 0, ALLREDUCE, "the all-reduce algorithm (ring: libzero's, mpi: MPI's)"),
    FLAG("ZERO_COMM_PROGRESS_THREAD", 0, "a progress thread for non-blocking collectives"),
    FLAG("ZERO_BUCKET_HOST_WAIT", 0, "a host wait per bucket on the device path"),
    FLAG("ZERO_CUDA_ALLOC_SYNC", 0, "wait for every device allocation's zero-fill"),
    /* debugging */
    INT("ZERO_DEBUG_JITTER", 0, 0, 100000, "random delays of up to this many microseconds at hand-offs"),
    {"ZERO_DEBUG_JITTER_SEED", ZERO__ENV_U64, 0, 0, 0, NULL, "seed of ZERO_DEBUG_JITTER's choices"},
    FLAG("ZERO_DEBUG_POISON", 0, "fill released stage-3 buffers with NaN"),
    /* plugins */
    CHOICE("ZERO_OFFLOAD_SEQUENTIAL", 0, OFFLOAD_SEQ, "stage 3 offload's tiled step: 1 sequential, 0 pipelined"),
    FLAG("ZERO_ONEBIT_EXACT", 0, "1-bit Adam with the exact momentum average (measurement)"),
    /* test fault hooks */
    KIND("ZERO_CKPT_FAULT", ZERO__ENV_FAULT, "checkpoint fault injection (tests)"),
    KIND("ZERO_CKPT_FAULT_MARKER", ZERO__ENV_FAULT, "file written at a checkpoint fault pause (tests)"),
    KIND("ZERO_NVME_FAULT", ZERO__ENV_FAULT, "NVMe shard fault injection (tests)"),
    /* read by zero.torch and its packaging, not by the library */
    KIND("ZERO_LIBRARY", ZERO__ENV_ELSEWHERE, "zero.torch: the libzero.so to load"),
    KIND("ZERO_USE_SYSTEM_LIBRARY", ZERO__ENV_ELSEWHERE, "zero.torch: prefer an installed libzero"),
    KIND("ZERO_BUNDLE", ZERO__ENV_ELSEWHERE, "Python packaging: bundle the library"),
    KIND("ZERO_BUILD_JOBS", ZERO__ENV_ELSEWHERE, "Python packaging: parallel build jobs"),
    KIND("ZERO_CMAKE_ARGS", ZERO__ENV_ELSEWHERE, "Python packaging: extra CMake arguments"),
};

/* Prefixes of names that are ours but not the library's (test drivers'
 * knobs), never warned about. */
static const char *const OTHER_PREFIXES[] = {"ZERO_TEST_", "ZERO_SWEEP_", NULL};

const zero__env_var *zero__env_table(size_t *n) {
    if (n) *n = sizeof TABLE / sizeof TABLE[0];
    return TABLE;
}

const zero__env_var *zero__env_find(const char *name) {
    if (!name) return NULL;
    for (size_t i = 0; i < sizeof TABLE / sizeof TABLE[0]; i++)
        if (!strcmp(TABLE[i].name, name)) return &TABLE[i];
    return NULL;
}

/* ------------------------------------------------------------- parsing */

static const char *value_of(const char *name) {
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

static int parse_long(const zero__env_var *d, const char *v, long *out) {
    char *end = NULL;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (end == v || *end || errno == ERANGE || x < d->lo || x > d->hi) return -1;
    *out = x;
    return 1;
}

static int parse_u64(const char *v, uint64_t *out) {
    char *end = NULL;
    errno = 0;
    if (!isdigit((unsigned char)v[0])) return -1; /* strtoull takes "-1" */
    unsigned long long x = strtoull(v, &end, 10);
    if (*end || errno == ERANGE) return -1;
    *out = (uint64_t)x;
    return 1;
}

static int parse_seconds(const char *v, double *out) {
    char *end = NULL;
    double x = strtod(v, &end);
    if (end == v || *end || !isfinite(x) || !(x >= 0)) return -1; /* "5m", "inf", "nan", "-1" */
    *out = x;
    return 1;
}

static int parse_choice(const zero__env_var *d, const char *v, const char **out) {
    for (const char *const *c = d->choices; c && *c; c++)
        if (!strcasecmp(*c, v)) {
            *out = *c;
            return 1;
        }
    return -1;
}

static int parse_flag(const char *v, int *out) {
    if (strcmp(v, "0") && strcmp(v, "1")) return -1;
    *out = v[0] == '1';
    return 1;
}

static const zero__env_var *entry(const char *name, zero__env_kind kind, const char **v) {
    const zero__env_var *d = zero__env_find(name);
    *v = d && d->kind == kind ? value_of(name) : NULL;
    return d && d->kind == kind ? d : NULL;
}

int zero__env_flag(const char *name, int *out) {
    const char *v;
    if (!entry(name, ZERO__ENV_FLAG, &v)) return -1;
    return v ? parse_flag(v, out) : 0;
}

int zero__env_long(const char *name, long *out) {
    const char *v;
    const zero__env_var *d = entry(name, ZERO__ENV_INT, &v);
    if (!d) return -1;
    return v ? parse_long(d, v, out) : 0;
}

int zero__env_u64(const char *name, uint64_t *out) {
    const char *v;
    if (!entry(name, ZERO__ENV_U64, &v)) return -1;
    return v ? parse_u64(v, out) : 0;
}

int zero__env_seconds(const char *name, double *out) {
    const char *v;
    if (!entry(name, ZERO__ENV_SECONDS, &v)) return -1;
    return v ? parse_seconds(v, out) : 0;
}

int zero__env_choice(const char *name, const char **out) {
    const char *v;
    const zero__env_var *d = entry(name, ZERO__ENV_CHOICE, &v);
    if (!d) return -1;
    return v ? parse_choice(d, v, out) : 0;
}

/* ------------------------------------------------------------- checking */

/* What a valid value looks like, for the messages. */
static void expected(const zero__env_var *d, char *buf, size_t len) {
    buf[0] = '\0';
    switch (d->kind) {
    case ZERO__ENV_FLAG: snprintf(buf, len, "0 or 1"); break;
    case ZERO__ENV_INT: snprintf(buf, len, "an integer in %ld..%ld", d->lo, d->hi); break;
    case ZERO__ENV_U64: snprintf(buf, len, "an unsigned decimal integer"); break;
    case ZERO__ENV_SECONDS: snprintf(buf, len, "a number of seconds >= 0, without a unit (0: no limit)"); break;
    case ZERO__ENV_CHOICE:
        zero__appendf(buf, len, "one of");
        for (const char *const *c = d->choices; *c; c++) zero__appendf(buf, len, "%s %s", c == d->choices ? "" : ",", *c);
        break;
    default: break;
    }
}

static int valid(const zero__env_var *d, const char *v) {
    long l;
    uint64_t u;
    double s;
    const char *c;
    int f;
    switch (d->kind) {
    case ZERO__ENV_FLAG: return parse_flag(v, &f) == 1;
    case ZERO__ENV_INT: return parse_long(d, v, &l) == 1;
    case ZERO__ENV_U64: return parse_u64(v, &u) == 1;
    case ZERO__ENV_SECONDS: return parse_seconds(v, &s) == 1;
    case ZERO__ENV_CHOICE: return parse_choice(d, v, &c) == 1;
    default: return 1;
    }
}

/* Every "_"-separated word of name after ZERO_ is a word of cand. */
static int words_inside(const char *name, const char *cand) {
    const char *w = name + 5;
    int words = 0;
    while (*w) {
        size_t k = strcspn(w, "_");
        if (k) {
            int found = 0;
            for (const char *c = cand + 5; *c;) {
                size_t ck = strcspn(c, "_");
                if (ck == k && !strncmp(c, w, k)) found = 1;
                c += ck;
                if (*c) c++;
            }
            if (!found) return 0;
            words++;
        }
        w += k;
        if (*w) w++;
    }
    return words > 0;
}

const char *zero__env_suggest(const char *name) {
    if (!name || strncmp(name, "ZERO_", 5) || zero__env_find(name)) return NULL;
    const char *best = NULL; /* within 2 edits: every ZERO_ name is longer than 5 */
    for (size_t i = 0; i < sizeof TABLE / sizeof TABLE[0]; i++) best = zero__nearer(name, TABLE[i].name, best);
    if (best) return best;
    for (size_t i = 0; i < sizeof TABLE / sizeof TABLE[0]; i++)
        if (words_inside(name, TABLE[i].name)) return TABLE[i].name;
    return NULL;
}

static int other_prefix(const char *name) {
    for (const char *const *p = OTHER_PREFIXES; *p; p++)
        if (!strncmp(name, *p, strlen(*p))) return 1;
    return 0;
}

zero_status zero__env_check(void (*warn)(void *user, const char *line), void *user, char *msg, size_t len) {
    char line[512], exp[160];
    int refused = 0;
    if (msg && len) msg[0] = '\0';
    for (size_t i = 0; i < sizeof TABLE / sizeof TABLE[0]; i++) {
        const zero__env_var *d = &TABLE[i];
        const char *v = value_of(d->name);
        if (!v) continue;
        if (d->kind == ZERO__ENV_FAULT) {
            snprintf(line, sizeof line, "%s=\"%s\" is set: %s is active, and its failures are on purpose", d->name,
                     v, d->what);
            if (warn) warn(user, line);
            continue;
        }
        if (valid(d, v)) continue;
        expected(d, exp, sizeof exp);
        if (d->refuse) {
            if (msg && len)
                zero__appendf(msg, len, "%s%s=\"%s\": expected %s (%s)", refused ? "; " : "", d->name, v, exp,
                              d->what);
            refused++;
        } else {
            snprintf(line, sizeof line, "%s=\"%s\" not understood: expected %s; the default is used", d->name, v,
                     exp);
            if (warn) warn(user, line);
        }
    }
    for (char **ep = environ; ep && *ep; ep++) {
        const char *kv = *ep, *eq = strchr(kv, '=');
        if (strncmp(kv, "ZERO_", 5) || !eq || (size_t)(eq - kv) >= 128) continue;
        char name[128];
        memcpy(name, kv, (size_t)(eq - kv));
        name[eq - kv] = '\0';
        if (zero__env_find(name) || other_prefix(name)) continue;
        const char *near = zero__env_suggest(name);
        if (!near) continue; /* a name of the host's own */
        snprintf(line, sizeof line, "%s is not a variable libzero reads: did you mean %s? (docs/environment.md)",
                 name, near);
        if (warn) warn(user, line);
    }
    if (!refused) return ZERO_OK;
    if (msg && len)
        zero__appendf(msg, len, "; unset %s or fix %s (docs/environment.md)", refused > 1 ? "them" : "it",
                      refused > 1 ? "their values" : "its value");
    return ZERO_ERR_CONFIG;
}
