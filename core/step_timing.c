/* See step_timing.h. */
#include <string.h>
#include <time.h>

#include "engine.h"
#include "step_timing.h"

/* The engine whose zero_step runs on this thread (NULL: none), and how many
 * timed spans are open on this thread. */
static _Thread_local const struct zero_engine *tl_step_engine;
static _Thread_local int tl_depth;

double zero__now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void zero__timing_step_begin(struct zero_engine *e) {
    zero__timing *t = &e->timing;
    memset(t->cur, 0, sizeof t->cur);
    tl_step_engine = e;
    tl_depth = 1;
    t->step_t0 = zero__now_s();
}

static void add_into(zero_step_timing *dst, const zero_step_timing *src) {
    dst->micro_steps += src->micro_steps;
    dst->step_seconds += src->step_seconds;
    dst->exposed_comm_seconds += src->exposed_comm_seconds;
    dst->reduce_seconds += src->reduce_seconds;
    dst->norm_seconds += src->norm_seconds;
    dst->optimizer_seconds += src->optimizer_seconds;
    dst->gather_seconds += src->gather_seconds;
    dst->copy_seconds += src->copy_seconds;
    dst->hook_seconds += src->hook_seconds;
    dst->fetch_seconds += src->fetch_seconds;
}

void zero__timing_step_end(struct zero_engine *e) {
    zero__timing *t = &e->timing;
    const double dt = zero__now_s() - t->step_t0;
    tl_step_engine = NULL;
    tl_depth = 0;
    zero_step_timing l = ZERO_STEP_TIMING_INIT;
    l.micro_steps = 1;
    l.step_seconds = dt;
    l.exposed_comm_seconds = t->cur[ZERO__PH_EXPOSED];
    l.reduce_seconds = t->cur[ZERO__PH_REDUCE];
    l.norm_seconds = t->cur[ZERO__PH_NORM];
    l.optimizer_seconds = t->cur[ZERO__PH_OPTIM];
    l.gather_seconds = t->cur[ZERO__PH_GATHER];
    l.copy_seconds = t->cur[ZERO__PH_COPY];
    l.hook_seconds = 1e-9 * (double)atomic_exchange(&t->out_ns[ZERO__OUT_HOOK], 0);
    l.fetch_seconds = 1e-9 * (double)atomic_exchange(&t->out_ns[ZERO__OUT_FETCH], 0);
    t->last = l;
    if (t->total.struct_size == 0) {
        zero_step_timing z = ZERO_STEP_TIMING_INIT;
        t->total = z;
        t->printed = z;
    }
    add_into(&t->total, &l);
}

zero__span zero__phase_begin(const struct zero_engine *e) {
    zero__span s = {-1.0};
    if (tl_step_engine == e && tl_depth == 1) s.t0 = zero__now_s();
    tl_depth++;
    return s;
}

void zero__phase_end(struct zero_engine *e, zero__span s, zero__phase ph) {
    tl_depth--;
    if (s.t0 >= 0.0 && ph < ZERO__PH_N) e->timing.cur[ph] += zero__now_s() - s.t0;
}

void zero__phase_move(struct zero_engine *e, zero__phase from, zero__phase to, double seconds) {
    if (tl_step_engine != e || tl_depth != 1 || seconds <= 0.0) return;
    if (seconds > e->timing.cur[from]) seconds = e->timing.cur[from];
    e->timing.cur[from] -= seconds;
    e->timing.cur[to] += seconds;
}

zero__span zero__outside_begin(void) {
    zero__span s = {tl_depth == 0 ? zero__now_s() : -1.0};
    tl_depth++;
    return s;
}

void zero__outside_end(struct zero_engine *e, zero__span s, zero__outside which) {
    tl_depth--;
    if (s.t0 < 0.0 || !e) return;
    double dt = zero__now_s() - s.t0;
    atomic_fetch_add(&e->timing.out_ns[which], (uint_fast64_t)(dt * 1e9));
}

void zero__timing_log(struct zero_engine *e, int taken) {
    if (!e->rc->wall_clock_breakdown || !taken) return;
    const int global_rank = e->pp_stages > 1 ? e->pp_stage * e->world_size + e->rank : e->rank;
    const uint64_t spp = e->rc->steps_per_print > 0 ? (uint64_t)e->rc->steps_per_print : 10;
    if (global_rank != 0 || e->global_step % spp != 0) return;
    zero__timing *t = &e->timing;
    const zero_step_timing *a = &t->total, *b = &t->printed;
    const uint64_t n = a->micro_steps - b->micro_steps;
    if (!n) return;
    const double k = 1e3 / (double)n; /* mean milliseconds per micro-step */
    const double step = (a->step_seconds - b->step_seconds) * k;
    const double ph[ZERO__PH_N] = {
        (a->exposed_comm_seconds - b->exposed_comm_seconds) * k, (a->reduce_seconds - b->reduce_seconds) * k,
        (a->norm_seconds - b->norm_seconds) * k,                 (a->optimizer_seconds - b->optimizer_seconds) * k,
        (a->gather_seconds - b->gather_seconds) * k,             (a->copy_seconds - b->copy_seconds) * k};
    double other = step;
    for (int i = 0; i < ZERO__PH_N; i++) other -= ph[i];
    zero__log_forced(e, ZERO_LOG_INFO,
                     "wall_clock_breakdown step %llu (ms, mean of %llu micro-steps): zero_step %.3f = exposed_comm "
                     "%.3f + reduce %.3f + norm %.3f + optimizer %.3f + gather %.3f + copy %.3f + other %.3f | "
                     "outside zero_step: hooks %.3f, gather/release %.3f",
                     (unsigned long long)e->global_step, (unsigned long long)n, step, ph[0], ph[1], ph[2], ph[3],
                     ph[4], ph[5], other, (a->hook_seconds - b->hook_seconds) * k,
                     (a->fetch_seconds - b->fetch_seconds) * k);
    t->printed = t->total;
}
