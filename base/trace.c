/* Timeline tracer (see trace.h): per-thread rings of fixed-size records,
 * lanes for spans that cross threads, and the Chrome trace-event writer. */
#include "trace.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

atomic_int zero__trace_on;
_Thread_local zero__trace_ctx zero__trace_tctx = {-1, 0};

#define DEFAULT_EVENTS 65536u
#define LANES 256 /* per kind; the last one is the overflow lane */
#define LANE_TID_COMM 1000
#define LANE_TID_BUCKET 2000

enum { PH_X = 0, PH_I = 1 };

typedef struct rec {
    uint64_t t0, t1;
    const char *name, *cat, *k1, *k2;
    double v1, v2;
    int32_t tid; /* thread tid, or a lane's */
    int32_t ph;
} rec;

typedef struct ring {
    struct ring *next;
    rec *r;
    uint64_t head; /* records ever written; the ring holds the last min(head, cap) */
    int tid;
    const char *name;
} ring;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int refs;
static atomic_ullong gen = 1; /* bumped at every start: rings of an earlier session are stale */
static char *prefix;
static int rank_, world_;
static size_t cap;
static ring *rings;
static int next_tid = 1;
static uint8_t lane_busy[3][LANES];
static uint64_t lane_overflow;
static atomic_ullong gather_calls;

static _Thread_local ring *tl_ring;
static _Thread_local uint64_t tl_gen;
static _Thread_local const char *tl_name;

uint64_t zero__trace_clock(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t t = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    return t ? t : 1;
}

void zero__trace_thread_name(const char *name) {
    tl_name = name;
    if (tl_ring && tl_gen == gen) tl_ring->name = name;
}

/* The calling thread's ring of this session (made on its first record). */
static ring *my_ring(void) {
    if (tl_ring && tl_gen == gen) return tl_ring;
    pthread_mutex_lock(&mu);
    ring *g = NULL;
    if (refs > 0 && (g = calloc(1, sizeof *g)) != NULL) {
        g->r = malloc(cap * sizeof *g->r);
        if (!g->r) {
            free(g);
            g = NULL;
        } else {
            g->tid = next_tid++;
            g->name = tl_name;
            g->next = rings;
            rings = g;
        }
    }
    uint64_t gn = gen;
    pthread_mutex_unlock(&mu);
    if (g) {
        tl_ring = g;
        tl_gen = gn;
    }
    return g;
}

static void put(int ph, const char *name, const char *cat, uint64_t t0, uint64_t t1, int tid, const char *k1,
                double v1, const char *k2, double v2) {
    ring *g = my_ring();
    if (!g) return;
    rec *x = &g->r[g->head % cap];
    x->t0 = t0;
    x->t1 = t1;
    x->name = name;
    x->cat = cat;
    x->k1 = k1;
    x->v1 = v1;
    x->k2 = k2;
    x->v2 = v2;
    x->tid = tid < 0 ? g->tid : tid;
    x->ph = ph;
    g->head++;
}

static int lane_tid(int kind, int lane) {
    return (kind == ZERO__LANE_COMM ? LANE_TID_COMM : LANE_TID_BUCKET) + lane;
}

void zero__trace_complete(const char *name, const char *cat, uint64_t t0, uint64_t t1, int lane_kind, int lane,
                          const char *k1, double v1, const char *k2, double v2) {
    if (!t0 || !ZERO__TRACE_ON()) return;
    if (t1 < t0) t1 = t0;
    put(PH_X, name, cat, t0, t1, lane_kind == ZERO__LANE_NONE || lane < 0 ? -1 : lane_tid(lane_kind, lane), k1, v1,
        k2, v2);
}

void zero__trace_instant(const char *name, const char *cat, const char *k1, double v1, const char *k2, double v2) {
    uint64_t t = zero__trace_clock();
    put(PH_I, name, cat, t, t, -1, k1, v1, k2, v2);
}

void zero__trace_scope_close(zero__trace_scope *s) {
    zero__trace_complete(s->name, s->cat, s->t0, zero__trace_clock(), ZERO__LANE_NONE, -1, s->k1, s->v1, s->k2, s->v2);
}

int zero__trace_lane_take(int kind) {
    pthread_mutex_lock(&mu);
    int l = 0;
    while (l < LANES - 1 && lane_busy[kind][l]) l++;
    if (l == LANES - 1) lane_overflow++;
    else lane_busy[kind][l] = 1;
    pthread_mutex_unlock(&mu);
    return l;
}

void zero__trace_lane_give(int kind, int lane) {
    if (lane < 0 || lane >= LANES - 1) return;
    pthread_mutex_lock(&mu);
    lane_busy[kind][lane] = 0;
    pthread_mutex_unlock(&mu);
}

/* ---- collectives --------------------------------------------------------- */

void zero__trace_op_issued(zero__trace_op *op, uint64_t t0, const char *name, double bytes) {
    if (!t0 || !op) return;
    op->t0 = t0;
    op->name = name;
    op->bytes = bytes;
    op->bucket = zero__trace_tctx.bucket;
    op->gather = zero__trace_tctx.gather;
    op->lane = zero__trace_lane_take(ZERO__LANE_COMM);
}

void zero__trace_op_finished(zero__trace_op *op) {
    if (!op || !op->t0) return;
    uint64_t end = op->t_done ? op->t_done : zero__trace_clock();
    const char *name = op->name;
    /* an all-gather that one zero_gather call (or zero_step's look-ahead,
     * outside any) issued and another call (or none) waits for was a
     * stage-3 prefetch: it was issued before the host asked for it */
    if ((op->gather || zero__trace_tctx.gather) && op->gather != zero__trace_tctx.gather && name &&
        strcmp(name, "allgather") == 0)
        name = "allgather (prefetch)";
    if (op->bucket >= 0)
        zero__trace_complete(name, "comm", op->t0, end, ZERO__LANE_COMM, op->lane, "bytes", op->bytes, "bucket",
                             (double)op->bucket);
    else if (op->gather)
        zero__trace_complete(name, "comm", op->t0, end, ZERO__LANE_COMM, op->lane, "bytes", op->bytes, "gather_call",
                             (double)op->gather);
    else
        zero__trace_complete(name, "comm", op->t0, end, ZERO__LANE_COMM, op->lane, "bytes", op->bytes, NULL, 0);
    zero__trace_lane_give(ZERO__LANE_COMM, op->lane);
    op->t0 = 0;
}

/* ---- buckets ------------------------------------------------------------- */

void zero__trace_bucket_fill(zero__trace_bucket *tb, int64_t k, int first) {
    (void)k;
    if (!first || tb->fill_lane) return;
    tb->t_fill = zero__trace_clock();
    tb->fill_lane = zero__trace_lane_take(ZERO__LANE_BUCKET) + 1;
}

zero__trace_bscope zero__trace_bucket_open(zero__trace_bucket *tb, int64_t k, double bytes, int complete) {
    zero__trace_bscope s;
    memset(&s, 0, sizeof s);
    s.span = zero__trace_scope_open(complete ? "bucket.complete" : "bucket.launch", "bucket", "bucket", (double)k,
                                    complete ? NULL : "bytes", bytes);
    s.tb = tb;
    s.k = k;
    s.complete = complete;
    s.prev_bucket = zero__trace_tctx.bucket;
    if (complete) return s;
    zero__trace_tctx.bucket = k;
    tb->bytes = bytes;
    tb->t_launch = s.span.t0;
    if (tb->fill_lane) { /* the bucket filled from its first gradient until now */
        zero__trace_complete("bucket.fill", "bucket", tb->t_fill, s.span.t0, ZERO__LANE_BUCKET, tb->fill_lane - 1,
                             "bucket", (double)k, NULL, 0);
        zero__trace_lane_give(ZERO__LANE_BUCKET, tb->fill_lane - 1);
        tb->fill_lane = 0;
    }
    return s;
}

void zero__trace_bucket_inflight(zero__trace_bucket *tb) {
    if (!tb->flight_lane) tb->flight_lane = zero__trace_lane_take(ZERO__LANE_BUCKET) + 1;
}

void zero__trace_bucket_close(zero__trace_bscope *s) {
    zero__trace_bucket *tb = s->tb;
    uint64_t now = zero__trace_clock();
    if (s->complete && tb->flight_lane) { /* in flight from launch to now (its completion) */
        zero__trace_complete("bucket.inflight", "bucket", tb->t_launch, now, ZERO__LANE_BUCKET, tb->flight_lane - 1,
                             "bucket", (double)s->k, "bytes", tb->bytes);
        zero__trace_lane_give(ZERO__LANE_BUCKET, tb->flight_lane - 1);
        tb->flight_lane = 0;
    }
    zero__trace_tctx.bucket = s->prev_bucket;
    zero__trace_complete(s->span.name, s->span.cat, s->span.t0, now, ZERO__LANE_NONE, -1, s->span.k1, s->span.v1,
                         s->span.k2, s->span.v2);
}

/* ---- zero_gather ---------------------------------------------------------- */

zero__trace_gscope zero__trace_gather_open(double n, double first_index) {
    zero__trace_gscope s;
    s.span = zero__trace_scope_open("zero_gather", "stage3", "params", n, "first_param", first_index);
    s.prev = zero__trace_tctx.gather;
    zero__trace_tctx.gather = atomic_fetch_add(&gather_calls, 1) + 1;
    return s;
}

void zero__trace_gather_close(zero__trace_gscope *s) {
    zero__trace_tctx.gather = s->prev;
    zero__trace_scope_close(&s->span);
}

/* ---- start, stop, write ------------------------------------------------- */

int zero__trace_start(const char *pfx, int rank, int world, size_t events_per_thread) {
    pthread_mutex_lock(&mu);
    if (refs++ > 0) {
        pthread_mutex_unlock(&mu);
        return 0;
    }
    prefix = strdup(pfx ? pfx : "zero-trace");
    if (!prefix) {
        refs = 0;
        pthread_mutex_unlock(&mu);
        return -1;
    }
    rank_ = rank;
    world_ = world;
    cap = events_per_thread ? events_per_thread : DEFAULT_EVENTS;
    gen++;
    next_tid = 1;
    memset(lane_busy, 0, sizeof lane_busy);
    lane_overflow = 0;
    atomic_store(&zero__trace_on, 1);
    pthread_mutex_unlock(&mu);
    return 0;
}

static void jstr(FILE *f, const char *s) {
    fputc('"', f);
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

static void jnum(FILE *f, double v) {
    if (v != v || v > 1e300 || v < -1e300) fputs("null", f); /* JSON has no NaN/inf */
    else fprintf(f, "%.17g", v);
}

static void thread_meta(FILE *f, int *first, int tid, const char *name, int n) {
    fprintf(f, "%s\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":", *first ? "" : ",",
            rank_, tid);
    if (n >= 0) {
        char buf[64];
        snprintf(buf, sizeof buf, "%s %d", name, n);
        jstr(f, buf);
    } else {
        jstr(f, name);
    }
    fputs("}}", f);
    *first = 0;
}

static int write_file(char *err, size_t err_len) {
    size_t n = strlen(prefix) + 32;
    char *path = malloc(n), *tmp = malloc(n + 8);
    if (!path || !tmp) {
        free(path);
        free(tmp);
        snprintf(err, err_len, "trace: out of memory");
        return -1;
    }
    snprintf(path, n, "%s.rank%d.json", prefix, rank_);
    snprintf(tmp, n + 8, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        snprintf(err, err_len, "trace: cannot write %s: %s", tmp, strerror(errno));
        free(path);
        free(tmp);
        return -1;
    }
    uint64_t dropped = 0;
    uint8_t used[3][LANES];
    memset(used, 0, sizeof used);
    fputs("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[", f);
    int first = 1;
    fprintf(f, "\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"rank %d\"}}", rank_,
            rank_);
    fprintf(f, ",\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"sort_index\":%d}}",
            rank_, rank_);
    first = 0;
    for (ring *g = rings; g; g = g->next) {
        thread_meta(f, &first, g->tid, g->name ? g->name : "thread", g->name ? -1 : g->tid);
        uint64_t m = g->head < cap ? g->head : cap;
        dropped += g->head - m;
        for (uint64_t i = g->head - m; i < g->head; i++) {
            const rec *x = &g->r[i % cap];
            if (x->tid >= LANE_TID_BUCKET && x->tid < LANE_TID_BUCKET + LANES) used[ZERO__LANE_BUCKET][x->tid - LANE_TID_BUCKET] = 1;
            else if (x->tid >= LANE_TID_COMM && x->tid < LANE_TID_COMM + LANES) used[ZERO__LANE_COMM][x->tid - LANE_TID_COMM] = 1;
            fputs(",\n{\"name\":", f);
            jstr(f, x->name);
            fputs(",\"cat\":", f);
            jstr(f, x->cat ? x->cat : "zero");
            /* microseconds, ns resolution */
            fprintf(f, ",\"ph\":\"%s\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f", x->ph == PH_X ? "X" : "i", rank_, (int)x->tid,
                    (double)x->t0 / 1000.0);
            if (x->ph == PH_X) fprintf(f, ",\"dur\":%.3f", (double)(x->t1 - x->t0) / 1000.0);
            else fputs(",\"s\":\"t\"", f);
            fputs(",\"args\":{", f);
            if (x->k1) {
                jstr(f, x->k1);
                fputc(':', f);
                jnum(f, x->v1);
            }
            if (x->k2) {
                fputs(x->k1 ? "," : "", f);
                jstr(f, x->k2);
                fputc(':', f);
                jnum(f, x->v2);
            }
            fputs("}}", f);
        }
    }
    for (int l = 0; l < LANES; l++) {
        if (used[ZERO__LANE_COMM][l]) thread_meta(f, &first, LANE_TID_COMM + l, "comm lane", l);
        if (used[ZERO__LANE_BUCKET][l]) thread_meta(f, &first, LANE_TID_BUCKET + l, "bucket lane", l);
    }
    fprintf(f,
            "\n],\"otherData\":{\"rank\":%d,\"world_size\":%d,\"events_per_thread\":%zu,\"dropped_events\":%llu,"
            "\"lane_overflows\":%llu,\"clock\":\"CLOCK_MONOTONIC\"}}\n",
            rank_, world_, cap, (unsigned long long)dropped, (unsigned long long)lane_overflow);
    int bad = ferror(f);
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path) != 0) {
        snprintf(err, err_len, "trace: cannot write %s: %s", path, strerror(errno));
        remove(tmp);
        free(path);
        free(tmp);
        return -1;
    }
    free(path);
    free(tmp);
    return 0;
}

int zero__trace_stop(char *err, size_t err_len) {
    pthread_mutex_lock(&mu);
    if (refs == 0 || --refs > 0) {
        pthread_mutex_unlock(&mu);
        return 0;
    }
    atomic_store(&zero__trace_on, 0);
    int rc = write_file(err, err_len);
    while (rings) {
        ring *g = rings;
        rings = g->next;
        free(g->r);
        free(g);
    }
    gen++;
    free(prefix);
    prefix = NULL;
    pthread_mutex_unlock(&mu);
    return rc;
}

/* Interned names: a list that lives as long as the process (records keep
 * the pointers until the trace is written), one copy per distinct text. */
typedef struct interned {
    struct interned *next;
    char text[];
} interned;
static interned *interned_head;
static pthread_mutex_t intern_mu = PTHREAD_MUTEX_INITIALIZER;

const char *zero__trace_intern(const char *s) {
    if (!s) return NULL;
    pthread_mutex_lock(&intern_mu);
    interned *it = interned_head;
    while (it && strcmp(it->text, s) != 0) it = it->next;
    if (!it) {
        size_t n = strlen(s) + 1;
        it = malloc(sizeof *it + n);
        if (it) {
            memcpy(it->text, s, n);
            it->next = interned_head;
            interned_head = it;
        }
    }
    pthread_mutex_unlock(&intern_mu);
    return it ? it->text : NULL;
}
