/* Timeline tracer: Chrome trace-event JSON, one file per rank
 * (docs/trace.md).  Started by ZERO_TRACE=prefix or the config's
 * "trace": {"path": ...}; every rank writes <prefix>.rank<R>.json when its
 * last tracing engine is destroyed.  tools/trace-merge joins the files.
 *
 * Cost when off: every trace point is one predictable branch on
 * zero__trace_on (a relaxed atomic load, a plain load on x86).
 *
 * Bounded when on: each thread that emits owns a ring of
 * `events_per_thread` records (default 65,536 x 64 bytes = 4 MiB per
 * thread); when it wraps the oldest records of that thread are overwritten
 * and counted in otherData.dropped_events.  Every record is a complete
 * ("X") or instant ("i") event, so a wrapped ring never leaves a begin
 * without its end.
 *
 * Threads: a thread's events carry its own tid (named by
 * zero__trace_thread_name: "host", "progress", "optim worker", else
 * "thread N").  Spans that start on one thread and end on another (a
 * collective in flight, a bucket filling or in flight) go on "lanes":
 * pseudo-threads "comm lane i" / "bucket lane i", each holding spans that
 * never overlap (a lane is taken at the start and given back at the end),
 * so every track nests.
 *
 * Names, categories and argument keys must be string literals (or live as
 * long as the process): records keep the pointers.  Thread-safe: rings are
 * per thread; lanes and the thread list take one mutex. */
#ifndef ZERO_BASE_TRACE_H
#define ZERO_BASE_TRACE_H
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

extern atomic_int zero__trace_on;

#ifdef ZERO_TRACE_COMPILED_OUT /* bench/trace's baseline: every trace point folds away */
#define ZERO__TRACE_ON() 0
#else
#define ZERO__TRACE_ON() __builtin_expect(atomic_load_explicit(&zero__trace_on, memory_order_relaxed), 0)
#endif

/* Monotonic nanoseconds (CLOCK_MONOTONIC: comparable across the ranks of
 * one machine).  Never 0. */
uint64_t zero__trace_clock(void);
/* zero__trace_clock() when tracing, else 0 (the "not traced" marker). */
static inline uint64_t zero__trace_now(void) { return ZERO__TRACE_ON() ? zero__trace_clock() : 0; }

/* Start (or join) the process's tracer.  prefix: files are
 * <prefix>.rank<rank>.json.  events_per_thread 0 = default.  Reference
 * counted: the first call fixes prefix, rank and size; each start needs one
 * zero__trace_stop.  Returns 0, or -1 (out of memory; tracing stays off). */
int zero__trace_start(const char *prefix, int rank, int world, size_t events_per_thread);
/* Drop one reference; the last one turns tracing off and writes the file.
 * Call when no other thread emits any more (after the comm's progress
 * thread is joined).  Returns 0, or -1 if the file could not be written
 * (err receives why). */
int zero__trace_stop(char *err, size_t err_len);

/* Name the calling thread's track (a literal).  Cheap; may be called
 * whether or not tracing is on. */
void zero__trace_thread_name(const char *name);

/* Record a complete event [t0, t1) on the calling thread (lane < 0) or on
 * lane `lane` of kind `lane_kind`.  Up to two numeric arguments (key NULL =
 * absent).  No-op when t0 is 0. */
enum { ZERO__LANE_NONE = 0, ZERO__LANE_COMM = 1, ZERO__LANE_BUCKET = 2 };
void zero__trace_complete(const char *name, const char *cat, uint64_t t0, uint64_t t1, int lane_kind, int lane,
                          const char *k1, double v1, const char *k2, double v2);
/* A copy of s that lives as long as the process, one per distinct text
 * (for names that come from a plugin, which may be unloaded before the
 * trace is written); NULL when out of memory.  Thread-safe. */
const char *zero__trace_intern(const char *s);
/* An instant event on the calling thread. */
void zero__trace_instant(const char *name, const char *cat, const char *k1, double v1, const char *k2, double v2);
/* Lanes: take the lowest free lane of a kind (always succeeds; past the
 * last lane, spans share the overflow lane and are counted); give it back. */
int zero__trace_lane_take(int kind);
void zero__trace_lane_give(int kind, int lane);

/* ---- scopes: a span from here to the end of the enclosing block --------- */
typedef struct zero__trace_scope {
    uint64_t t0; /* 0: not traced */
    const char *name, *cat, *k1, *k2;
    double v1, v2;
} zero__trace_scope;

static inline zero__trace_scope zero__trace_scope_open(const char *name, const char *cat, const char *k1, double v1,
                                                       const char *k2, double v2) {
    zero__trace_scope s = {zero__trace_clock(), name, cat, k1, k2, v1, v2};
    return s;
}
void zero__trace_scope_close(zero__trace_scope *s);
static inline void zero__trace_scope_end(zero__trace_scope *s) {
    if (__builtin_expect(s->t0 != 0, 0)) zero__trace_scope_close(s);
}
#define ZERO__TRACE_CAT2(a, b) a##b
#define ZERO__TRACE_CAT(a, b) ZERO__TRACE_CAT2(a, b)
/* ZERO_TRACE_SCOPE("zero_step", "step", "step", n, NULL, 0); */
#define ZERO_TRACE_SCOPE(name, cat, k1, v1, k2, v2)                                                         \
    __attribute__((cleanup(zero__trace_scope_end), unused)) zero__trace_scope ZERO__TRACE_CAT(zero__tsc_, __LINE__) = \
        ZERO__TRACE_ON() ? zero__trace_scope_open(name, cat, k1, (double)(v1), k2, (double)(v2))             \
                         : (zero__trace_scope){0, 0, 0, 0, 0, 0, 0}
#define ZERO_TRACE_INSTANT(name, cat, k1, v1, k2, v2) \
    do { if (ZERO__TRACE_ON()) zero__trace_instant(name, cat, k1, (double)(v1), k2, (double)(v2)); } while (0)

/* ---- context a collective picks up at issue ------------------------------ */
/* Which bucket issues the collective (-1 none) and which zero_gather call
 * (0 none): set by the bucket and gather scopes, read by the comm layer. */
typedef struct zero__trace_ctx {
    int64_t bucket;
    uint64_t gather;
} zero__trace_ctx;
extern _Thread_local zero__trace_ctx zero__trace_tctx;

/* ---- collectives in flight (kept in every request header) ---------------- */
typedef struct zero__trace_op {
    uint64_t t0;      /* issue; 0: not traced */
    uint64_t t_done;  /* when the backend saw it finish (0: unknown, use the wait's end) */
    const char *name;
    double bytes;
    int64_t bucket;
    uint64_t gather;  /* zero_gather call that issued it (0 none) */
    int lane;
    int backend_emits; /* the backend records it itself before freeing the request */
} zero__trace_op;
/* The comm layer: after a successful issue (t0 from zero__trace_now()
 * before it). */
void zero__trace_op_issued(zero__trace_op *op, uint64_t t0, const char *name, double bytes);
/* Record the op's span on its lane and give the lane back (end = t_done,
 * else now).  No-op unless issued while tracing. */
void zero__trace_op_finished(zero__trace_op *op);
/* The backend saw it finish. */
/* t_done is written by the thread that sees the op finish (the progress
 * thread) while the waiting thread may snapshot the header: both go through
 * relaxed atomics (the value is a timestamp; nothing else is published). */
static inline void zero__trace_op_done(zero__trace_op *op) {
    if (ZERO__TRACE_ON() && !__atomic_load_n(&op->t_done, __ATOMIC_RELAXED))
        __atomic_store_n(&op->t_done, zero__trace_clock(), __ATOMIC_RELAXED);
}
/* A copy of a request's trace header that may be taken while the backend
 * still runs the op (the wait or test that follows frees the request). */
static inline zero__trace_op zero__trace_op_snapshot(const zero__trace_op *op) {
    zero__trace_op t;
    t.t0 = op->t0;
    t.t_done = __atomic_load_n(&op->t_done, __ATOMIC_RELAXED);
    t.name = op->name;
    t.bytes = op->bytes;
    t.bucket = op->bucket;
    t.gather = op->gather;
    t.lane = op->lane;
    t.backend_emits = op->backend_emits;
    return t;
}

/* ---- buckets ------------------------------------------------------------- */
typedef struct zero__trace_bucket {
    uint64_t t_fill, t_launch;
    int fill_lane, flight_lane; /* lane + 1; 0 = none */
    double bytes;
} zero__trace_bucket;
/* first: this is the bucket's first gradient of the pass. */
void zero__trace_bucket_fill(zero__trace_bucket *tb, int64_t k, int first);
/* Scope of launch(): ends the fill span, marks the launch, and makes the
 * collectives issued inside it carry bucket k. */
typedef struct zero__trace_bscope {
    zero__trace_scope span;
    zero__trace_bucket *tb;
    int64_t k;
    int64_t prev_bucket;
    int complete; /* 1: complete_oldest's scope (ends the in-flight span) */
} zero__trace_bscope;
zero__trace_bscope zero__trace_bucket_open(zero__trace_bucket *tb, int64_t k, double bytes, int complete);
void zero__trace_bucket_close(zero__trace_bscope *s);
static inline void zero__trace_bucket_end(zero__trace_bscope *s) {
    if (__builtin_expect(s->span.t0 != 0, 0)) zero__trace_bucket_close(s);
}
/* The bucket's collective is in flight from its launch on (call at the
 * point where it joins the in-flight FIFO). */
void zero__trace_bucket_inflight(zero__trace_bucket *tb);
#define ZERO_TRACE_BUCKET_FILL(tb, k, first) \
    do { if (ZERO__TRACE_ON()) zero__trace_bucket_fill(tb, k, first); } while (0)
#define ZERO_TRACE_BUCKET_INFLIGHT(tb) \
    do { if (ZERO__TRACE_ON()) zero__trace_bucket_inflight(tb); } while (0)
#define ZERO__TRACE_BSCOPE(tb, k, bytes, complete)                                                             \
    __attribute__((cleanup(zero__trace_bucket_end), unused)) zero__trace_bscope ZERO__TRACE_CAT(zero__tbs_, __LINE__) = \
        ZERO__TRACE_ON() ? zero__trace_bucket_open(tb, k, (double)(bytes), complete) : (zero__trace_bscope){{0}, 0, 0, 0, 0}
#define ZERO_TRACE_BUCKET_LAUNCH(tb, k, bytes) ZERO__TRACE_BSCOPE(tb, k, bytes, 0)
#define ZERO_TRACE_BUCKET_COMPLETE(tb, k) ZERO__TRACE_BSCOPE(tb, k, 0, 1)

/* ---- zero_gather: collectives issued inside carry this call's number ---- */
typedef struct zero__trace_gscope {
    zero__trace_scope span;
    uint64_t prev;
} zero__trace_gscope;
zero__trace_gscope zero__trace_gather_open(double n, double first_index);
void zero__trace_gather_close(zero__trace_gscope *s);
static inline void zero__trace_gather_end(zero__trace_gscope *s) {
    if (__builtin_expect(s->span.t0 != 0, 0)) zero__trace_gather_close(s);
}
#define ZERO_TRACE_GATHER(n, first)                                                                            \
    __attribute__((cleanup(zero__trace_gather_end), unused)) zero__trace_gscope ZERO__TRACE_CAT(zero__tgs_, __LINE__) = \
        ZERO__TRACE_ON() ? zero__trace_gather_open((double)(n), (double)(first)) : (zero__trace_gscope){{0}, 0}
#endif
