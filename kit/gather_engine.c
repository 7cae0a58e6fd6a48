/* The kit's gather engine: host gathers and releases, prefetch along the
 * recorded order, reuse distance, settling a micro-step, phases, and the
 * engine's life (zero_kit_gather.h).
 *
 * One host gather call goes:
 *   1. record the request and follow the trace (local): a request that
 *      differs from the recorded order switches this micro-step to
 *      on-demand gathering (one warning per engine, in the "train" phase);
 *   2. if it needs any collective (a requested param is not resident, or
 *      prefetch wants to fetch): agree first (gather_agree.c).  Otherwise
 *      the check waits for the next agreement, at the latest zero_step's;
 *   3. fetch the requested params that have no fresh buffer, then prefetch
 *      the next trace entries within the budgets;
 *   4. wait for the requested ones only; prefetches keep flying while the
 *      host computes.
 * Engine thread only.  Uses gather_order.c, gather_pool.c and
 * gather_agree.c; none of them uses this file. */
#include <stdlib.h>
#include <string.h>

#include "gather_internal.h"

static uint64_t nonneg(int64_t v) { return v > 0 ? (uint64_t)v : 0; }
static size_t dtype_size(zero_dtype dt) { return dt == ZERO_DTYPE_F32 ? 4 : 2; }

/* ---- fetching ------------------------------------------------------------ */

/* Make sure a fetch of p into a buffer is issued (or done).  ZERO_OK, or
 * ZERO_ERR_OUT_OF_MEMORY when no buffer fits (`demand` 0: a prefetch that
 * must stop; the caller turns that into a non-error). */
static zero_status issue(zero_kit_gather *g, zero_kit__gp *p, int demand, size_t horizon) {
    if (p->buf && p->fresh) return ZERO_OK;
    size_t bytes = (size_t)p->numel * g->esize;
    if (!p->buf) {
        size_t cap = 0;
        void *b = zero_kit__pool_get(g, bytes, demand, horizon, &cap);
        if (!b)
            return demand ? g->svc->error(g->c, ZERO_ERR_OUT_OF_MEMORY,
                                          "%s: no memory for the gather buffer of '%s' (%zu bytes)", g->spec.who,
                                          zero_kit__unit_name(g, p->unit, (char[ZERO_KIT__UNIT_NAME]){0},
                                                              ZERO_KIT__UNIT_NAME),
                                          bytes)
                          : ZERO_ERR_OUT_OF_MEMORY;
        p->buf = b;
        p->buf_cap = cap;
        g->live_hash += zero_kit__live_term(p->unit);
    }
    zero_comm_req *req = NULL;
    zero_status st = g->spec.ops.fetch(g->spec.ctx, p->unit, p->buf, &req);
    if (st != ZERO_OK) return st;
    p->req = req;
    p->landing = 1;
    p->fresh = 1;
    if (!req) return zero_kit__finish_fetch(g, p); /* a blocking fetch: complete now */
    return ZERO_OK;
}

/* Prefetch the trace entries after the current position, in order, while
 * they fit both budgets.  Stops at the first that does not fit, so the
 * issue order is the trace order on every rank. */

/* Would prefetch issue anything now?  Mirrors prefetch()'s first decision
 * (budget and pool limit) so that a call with nothing to fetch needs no
 * agreement.  Prefetch refills only below half its budget (low-water mark),
 * which also makes most calls free of communication. */
static int prefetch_wanted(const zero_kit_gather *g) {
    const zero_kit__trace *t = &g->trace;
    if (!g->on_track || !g->prefetch_numel || g->prefetch_outstanding * 2 > g->prefetch_numel) return 0;
    for (size_t k = g->pos, w = 0; k < t->len && w < ZERO_KIT__PREFETCH_WALK; k++, w++) {
        const zero_kit__gp *p = &g->params[t->idx[k]];
        if (p->buf && p->fresh) continue;
        if (g->prefetch_outstanding + p->numel > g->prefetch_numel) return 0;
        return p->buf || zero_kit__pool_could_get(g, (size_t)p->numel * g->esize, k);
    }
    return 0;
}

/* Batch the fetches issued between these two calls (comm_group_start/end):
 * on NCCL one launch for the whole prefetch window instead of one per
 * parameter; on MPI nothing changes.  The end is called on every path,
 * after errors too, and its error kept only when nothing failed before. */
static zero_status group_open(zero_kit_gather *g) {
    return g->spec.group_comm ? g->svc->comm_group_start(g->spec.group_comm) : ZERO_OK;
}
static zero_status group_close(zero_kit_gather *g, zero_status st) {
    zero_status e = g->spec.group_comm ? g->svc->comm_group_end(g->spec.group_comm) : ZERO_OK;
    return st != ZERO_OK ? st : e;
}

static zero_status prefetch_walk(zero_kit_gather *g) {
    const zero_kit__trace *t = &g->trace;
    size_t walked = 0;
    for (size_t k = g->pos; k < t->len && walked < ZERO_KIT__PREFETCH_WALK; k++, walked++) {
        zero_kit__gp *p = &g->params[t->idx[k]];
        if (p->buf && p->fresh) continue;
        uint64_t numel = p->numel;
        if (g->prefetch_outstanding + numel > g->prefetch_numel) break;
        zero_status st = issue(g, p, 0, k);
        if (st == ZERO_ERR_OUT_OF_MEMORY) break; /* the budget is reached: try again at the next gather */
        if (st != ZERO_OK) return st;
        p->prefetched = 1;
        g->prefetch_outstanding += numel;
    }
    return ZERO_OK;
}

static zero_status prefetch(zero_kit_gather *g) {
    if (!prefetch_wanted(g)) return ZERO_OK;
    zero_status st = group_open(g);
    if (st != ZERO_OK) return st;
    return group_close(g, prefetch_walk(g));
}

static void unmark_prefetched(zero_kit_gather *g, zero_kit__gp *p) {
    if (!p->prefetched) return;
    p->prefetched = 0;
    g->prefetch_outstanding -= p->numel;
}

static void after_issue(zero_kit_gather *g) {
    if (g->spec.ops.after_issue) g->spec.ops.after_issue(g->spec.ctx);
}

/* Is a change of gather order worth a warning?  In the "train" phase (the
 * default) the order is normally the same every micro-step, and a change
 * costs the prefetch of the rest of the step.  Other phases (eval,
 * generate, a host's gather of everything for a checkpoint) have orders
 * that legitimately vary (a generated sequence's length, a partial pass):
 * there it is only a DEBUG line.  (Issue 34 item 7.) */
static int order_matters(const zero_kit_gather *g) { return strcmp(zero_kit__phase_name(g), "train") == 0; }

/* The host left the recorded order: finish the prefetches (every rank
 * issued them) and drop the ones nobody holds; gather on demand from now
 * on.  Results stay exact; only overlap is lost. */
static zero_status diverge(zero_kit_gather *g, uint32_t got) {
    const zero_kit__trace *t = &g->trace;
    char exp_buf[ZERO_KIT__UNIT_NAME], got_buf[ZERO_KIT__UNIT_NAME];
    const char *expected = g->pos < t->len ? zero_kit__unit_name(g, t->idx[g->pos], exp_buf, sizeof exp_buf)
                                           : "(end of the recorded order)";
    const char *got_name = zero_kit__unit_name(g, got, got_buf, sizeof got_buf);
    if (!g->warned_divergence && order_matters(g)) {
        g->warned_divergence = 1;
        g->svc->log(g->c, ZERO_LOG_WARN,
                    "%s: gather order differs from the recorded one at position %zu of micro-step %llu "
                    "(expected '%s', got '%s'): gathering on demand for the rest of this step and re-recording "
                    "(warned once)",
                    g->spec.who, g->pos, (unsigned long long)g->micro_steps, expected, got_name);
    } else {
        g->svc->log(g->c, ZERO_LOG_DEBUG, "%s: gather order differs%s at position %zu of phase '%s' ('%s' vs '%s')",
                    g->spec.who, g->warned_divergence ? " again" : "", g->pos, zero_kit__phase_name(g), expected,
                    got_name);
    }
    g->on_track = 0;
    zero_status first = ZERO_OK;
    for (uint32_t i = 0; i < g->nparams; i++) {
        zero_kit__gp *p = &g->params[i];
        if (!p->prefetched) continue;
        unmark_prefetched(g, p);
        zero_status st = zero_kit__finish_fetch(g, p);
        if (first == ZERO_OK) first = st;
        if (!p->holds) zero_kit__drop_buffer(g, p);
    }
    return first;
}

/* ---- the host's calls ---------------------------------------------------- */

/* `where`: the host's call, for the agreement's messages (zero_gather or
 * zero_gather_slices). */
static zero_status get_units(zero_kit_gather *g, const uint32_t *units, size_t n, void **ptrs, const char *where) {
    if (!n) return ZERO_OK;
    zero_status st = ZERO_OK;
    /* Local bookkeeping first (no communication): record, follow the trace.
     * Leaving the trace only completes prefetches every rank issued. */
    for (size_t i = 0; i < n; i++) {
        uint32_t idx = units[i];
        if (zero_kit__trace_push(&g->record, idx) != 0)
            return g->svc->error(g->c, ZERO_ERR_OUT_OF_MEMORY, "%s: out of memory recording the gather order",
                                 g->spec.who);
        g->req_hash = (g->req_hash ^ idx) * 1099511628211ull;
        if (g->on_track && (g->pos >= g->trace.len || g->trace.idx[g->pos] != idx)) {
            st = diverge(g, idx);
            if (st != ZERO_OK) return st;
        }
        g->params[idx].last_pos = g->pos;
        g->pos++;
    }
    /* Consume prefetches first, so that the budget they free is available
     * to this call's own prefetch decision. */
    for (size_t i = 0; i < n; i++) {
        zero_kit__gp *p = &g->params[units[i]];
        g->n_gathers++;
        if (p->prefetched) g->n_prefetched++;
        else if (p->buf && p->fresh) g->n_resident++;
        else g->n_demand++;
        unmark_prefetched(g, p);
    }
    /* Agree before any collective; a call that needs none defers it. */
    int need = prefetch_wanted(g);
    for (size_t i = 0; i < n && !need; i++) {
        const zero_kit__gp *p = &g->params[units[i]];
        need = !(p->buf && p->fresh);
    }
    if (need && (st = zero_kit__agree(g, where)) != ZERO_OK) return st;
    /* Hold first: a later on-demand issue in this call may evict kept
     * buffers, and must not evict one the host is about to receive. */
    for (size_t i = 0; i < n; i++) {
        zero_kit__gp *p = &g->params[units[i]];
        p->holds++;
        p->ended = 0;
        p->kept = 0; /* in use again: no longer evictable */
    }
    /* the on-demand fetches and the prefetch behind them: one launch */
    if (need) st = group_open(g);
    int grouped = need && st == ZERO_OK;
    for (size_t i = 0; i < n && st == ZERO_OK; i++) st = issue(g, &g->params[units[i]], 1, 0);
    if (st == ZERO_OK && g->on_track && g->prefetch_numel) st = prefetch(g);
    if (grouped) st = group_close(g, st);
    if (st == ZERO_OK) after_issue(g); /* e.g. the next pieces of an NVMe window, while the host computes */
    for (size_t i = 0; i < n; i++) {
        zero_kit__gp *p = &g->params[units[i]];
        zero_status w = zero_kit__finish_fetch(g, p);
        if (st == ZERO_OK) st = w;
        ptrs[i] = p->buf;
    }
    if (st != ZERO_OK)
        for (size_t i = 0; i < n; i++) g->params[units[i]].holds--;
    return st;
}

/* Keep a released param if the recorded order uses it again within
 * stage3_max_reuse_distance elements (e.g. the last layer: forward, then
 * backward at once).  Only on track: otherwise the future is unknown. */
static int keep_for_reuse(const zero_kit_gather *g, const zero_kit__gp *p) {
    const zero_kit__trace *t = &g->trace;
    if (!g->on_track || !t->valid || p->last_pos >= t->len) return 0;
    int64_t nx = t->next[p->last_pos];
    if (nx < 0) return 0;
    uint64_t between = t->prefix[nx] - t->prefix[p->last_pos + 1];
    return between <= g->max_reuse;
}

static zero_status release_units(zero_kit_gather *g, const uint32_t *units, size_t n) {
    for (size_t i = 0; i < n; i++) {
        zero_kit__gp *p = &g->params[units[i]];
        if (p->holds <= 0 && p->ended) /* (1.7.5) the host read the pointer past the step, most likely */
            return g->svc->error(g->c, ZERO_ERR_STATE,
                                 "%s('%s'): its gather already ended at zero_step (or zero_load), which ends every "
                                 "gather: the pointer zero_gather gave held the weights from before the step; "
                                 "gather again after each zero_step",
                                 p->layer == UINT32_MAX ? "zero_release" : "zero_release_slices", p->info->name);
        if (p->holds <= 0)
            return p->layer == UINT32_MAX
                       ? g->svc->error(g->c, ZERO_ERR_STATE, "zero_release('%s') without a matching zero_gather",
                                       p->info->name)
                       : g->svc->error(g->c, ZERO_ERR_STATE,
                                       "zero_release_slices('%s', layer %u) without a matching zero_gather_slices",
                                       p->info->name, p->layer);
        if (--p->holds > 0 || p->persistent) continue;
        if (keep_for_reuse(g, p) && zero_kit__keep(g, p) == 0) continue;
        zero_kit__drop_buffer(g, p);
    }
    return ZERO_OK;
}

/* The host's units: a whole param is its own unit; a slice is its slice
 * unit, or -- when the stack is persistent or an alias (gathered for good)
 * -- the whole param's unit with the slice's offset.  units[] is the
 * caller's (n entries); off[] gets the element offset to add (or NULL). */
static zero_status slice_units(zero_kit_gather *g, const zero_slice_ref *refs, size_t n, uint32_t *units,
                               uint64_t *off) {
    for (size_t i = 0; i < n; i++) {
        const zero_param_info *info = refs[i].param;
        uint32_t base = info->index < g->nwhole ? g->slice_base[info->index] : UINT32_MAX;
        if (base == UINT32_MAX || refs[i].layer >= info->stack_layers)
            return g->svc->error(g->c, ZERO_ERR_INVALID_ARGUMENT, "%s: '%s' has no slice %u", g->spec.who,
                                 info->name, refs[i].layer);
        const zero_kit__gp *whole = &g->params[info->index];
        const zero_kit__gp *p = &g->params[base + refs[i].layer];
        const int via_whole = whole->persistent || whole->alias;
        units[i] = via_whole ? info->index : p->unit;
        if (off) off[i] = via_whole ? p->offset : 0;
    }
    return ZERO_OK;
}

/* Unit and offset arrays for one host call: the caller's stack arrays
 * (UNITS_ON_STACK entries) for the usual few params of a layer, so the
 * per-layer gather and release allocate nothing; heap beyond that.
 * free_units() frees what came from the heap. */
#define UNITS_ON_STACK 32
static zero_status with_units(zero_kit_gather *g, size_t n, uint32_t *stack_units, uint64_t *stack_off,
                              uint32_t **units, uint64_t **off) {
    if (n <= UNITS_ON_STACK) {
        *units = stack_units;
        if (off) *off = stack_off;
        return ZERO_OK;
    }
    *units = malloc(n * sizeof **units);
    if (off) *off = malloc(n * sizeof **off);
    if (*units && (!off || *off)) return ZERO_OK;
    free(*units);
    if (off) free(*off);
    return g->svc->error(g->c, ZERO_ERR_OUT_OF_MEMORY, "%s: out of memory", g->spec.who);
}

static void free_units(size_t n, uint32_t *units, uint64_t *off) {
    if (n <= UNITS_ON_STACK) return;
    free(units);
    free(off);
}

zero_status zero_kit_gather_get(zero_kit_gather *g, zero_param_info *const *params, size_t n, void **ptrs) {
    if (!n) return ZERO_OK;
    uint32_t su[UNITS_ON_STACK], *units;
    zero_status st = with_units(g, n, su, NULL, &units, NULL);
    if (st != ZERO_OK) return st;
    for (size_t i = 0; i < n; i++) units[i] = params[i]->index;
    st = get_units(g, units, n, ptrs, "zero_gather");
    free_units(n, units, NULL);
    return st;
}

zero_status zero_kit_gather_release(zero_kit_gather *g, zero_param_info *const *params, size_t n) {
    if (!n) return ZERO_OK;
    uint32_t su[UNITS_ON_STACK], *units;
    zero_status st = with_units(g, n, su, NULL, &units, NULL);
    if (st != ZERO_OK) return st;
    for (size_t i = 0; i < n; i++) units[i] = params[i]->index;
    st = release_units(g, units, n);
    free_units(n, units, NULL);
    return st;
}

zero_status zero_kit_gather_get_slices(zero_kit_gather *g, const zero_slice_ref *refs, size_t n, void **ptrs) {
    if (!n) return ZERO_OK;
    uint32_t su[UNITS_ON_STACK], *units;
    uint64_t so[UNITS_ON_STACK], *off;
    zero_status st = with_units(g, n, su, so, &units, &off);
    if (st != ZERO_OK) return st;
    st = slice_units(g, refs, n, units, off);
    if (st == ZERO_OK) st = get_units(g, units, n, ptrs, "zero_gather_slices");
    for (size_t i = 0; st == ZERO_OK && i < n; i++) ptrs[i] = (char *)ptrs[i] + (size_t)off[i] * g->esize;
    free_units(n, units, off);
    return st;
}

zero_status zero_kit_gather_release_slices(zero_kit_gather *g, const zero_slice_ref *refs, size_t n) {
    if (!n) return ZERO_OK;
    uint32_t su[UNITS_ON_STACK], *units;
    zero_status st = with_units(g, n, su, NULL, &units, NULL);
    if (st != ZERO_OK) return st;
    st = slice_units(g, refs, n, units, NULL);
    if (st == ZERO_OK) st = release_units(g, units, n);
    free_units(n, units, NULL);
    return st;
}

int zero_kit_gather_unit(const zero_kit_gather *g, uint32_t unit, uint32_t *param, uint32_t *layer,
                         uint64_t *offset, uint64_t *numel) {
    const zero_kit__gp *p = &g->params[unit];
    if (param) *param = p->info->index;
    if (layer) *layer = p->layer;
    if (offset) *offset = p->offset;
    if (numel) *numel = p->numel;
    return p->layer != UINT32_MAX;
}

zero_status zero_kit_gather_wait_all(zero_kit_gather *g) {
    zero_status first = ZERO_OK;
    for (uint32_t i = 0; g && i < g->nparams; i++) {
        zero_status st = zero_kit__finish_fetch(g, &g->params[i]);
        if (first == ZERO_OK) first = st;
    }
    return first;
}

zero_status zero_kit_gather_drop_all(zero_kit_gather *g) {
    zero_status st = zero_kit_gather_wait_all(g);
    for (uint32_t i = 0; i < g->nparams; i++) {
        zero_kit__gp *p = &g->params[i];
        p->ended = p->holds > 0; /* a later zero_release of it is told why it holds nothing */
        p->holds = 0;
        p->prefetched = 0;
        zero_kit__drop_buffer(g, p);
    }
    g->prefetch_outstanding = 0;
    for (size_t k = 0; k < g->n_kept; k++) g->params[g->kept[k]].listed = 0;
    g->n_kept = 0;
    return st;
}

/* Wait, drop every non-persistent buffer, learn the order when it changed
 * (a phase change settles too, without counting a micro-step). */
static zero_status settle(zero_kit_gather *g) {
    zero_status st = zero_kit_gather_drop_all(g);
    /* A step that left the recorded order (or gathered fewer/more params)
     * teaches the new order; a step that matched keeps the trace, and so
     * does one that gathered nothing (a phase left right after a step, or
     * entered and left again: nothing was learnt). */
    int matched = g->on_track && g->trace.valid && g->pos == g->trace.len;
    if (!matched && g->pos > 0) {
        if (g->on_track && g->trace.valid && !g->warned_divergence && order_matters(g)) {
            g->warned_divergence = 1;
            g->svc->log(g->c, ZERO_LOG_WARN,
                        "%s: micro-step %llu gathered %zu params in phase '%s', its recorded order has %zu: "
                        "re-recording (warned once; a host that evaluates or generates between training steps "
                        "names that phase with zero_set_phase)",
                        g->spec.who, (unsigned long long)g->micro_steps, g->pos, zero_kit__phase_name(g),
                        g->trace.len);
        } else if (g->on_track && g->trace.valid) {
            g->svc->log(g->c, ZERO_LOG_DEBUG,
                        "%s: %zu params gathered in phase '%s', its recorded order has %zu: re-recording",
                        g->spec.who, g->pos, zero_kit__phase_name(g), g->trace.len);
        }
        zero_kit__trace_swap(&g->trace, &g->record);
        if (zero_kit__trace_finish(&g->trace, g->params, g->nparams) != 0)
            g->svc->log(g->c, ZERO_LOG_WARN, "%s: out of memory building the gather trace; prefetch disabled",
                        g->spec.who);
    }
    zero_kit__trace_clear(&g->record);
    g->pos = 0;
    g->verified = 0;
    g->req_hash = ZERO_KIT__FNV_OFFSET;
    g->on_track = g->trace.valid;
    return st;
}

zero_status zero_kit_gather_agree(zero_kit_gather *g, const char *where) { return zero_kit__agree(g, where); }

zero_status zero_kit_gather_end_micro_step(zero_kit_gather *g) {
    zero_status st = settle(g);
    g->micro_steps++;
    return st;
}

zero_status zero_kit_gather_prefetch_ahead(zero_kit_gather *g) {
    zero_status st = g->on_track && g->prefetch_numel ? prefetch(g) : ZERO_OK;
    if (st == ZERO_OK) after_issue(g);
    return st;
}

zero_status zero_kit_gather_step_begin(zero_kit_gather *g, int boundary, zero_status (*reduce)(void *user),
                                       void *user, int *go_on) {
    *go_on = 0;
    zero_status ag = zero_kit_gather_agree(g, "zero_step");
    zero_status st = zero_kit_gather_end_micro_step(g);
    if (ag != ZERO_OK) return ag; /* every rank fails here: nobody enters the reduction alone */
    zero_status red = reduce(user); /* collective: even after a local settling error */
    if (st == ZERO_OK) st = red;
    if (st != ZERO_OK) return st;
    if (!boundary) return zero_kit_gather_prefetch_ahead(g); /* params unchanged: fetch the first ones now */
    *go_on = 1;
    return ZERO_OK;
}

void zero_kit_gather_mark_stale(zero_kit_gather *g) {
    for (uint32_t i = 0; i < g->nparams; i++)
        if (g->params[i].persistent && !g->params[i].alias) g->params[i].fresh = 0;
}

/* ---- phases -------------------------------------------------------------- */

/* One recorded order per phase the host names ("train", "eval",
 * "generate", ...): hosts evaluate and generate with other orders than they
 * train with, and one trace would make every eval pass look like a
 * divergence and throw the training order away.  The active phase's order
 * is g->trace; the others are parked in g->phases.  A phase change verifies
 * the unverified gathers of the phase being left with the same agreement
 * zero_step makes, so ranks that diverged (one evaluating, one training)
 * fail with both orders named before any rank switches. */
zero_status zero_kit_gather_set_phase(zero_kit_gather *g, const char *phase) {
    if (strcmp(phase, zero_kit__phase_name(g)) == 0) return ZERO_OK; /* no change, nothing to verify */
    for (uint32_t i = 0; i < g->nparams; i++)
        if (g->params[i].holds > 0)
            return g->svc->error(g->c, ZERO_ERR_STATE,
                                 "zero_set_phase('%s'): param '%s' is still gathered; release every param first",
                                 phase, zero_kit__unit_name(g, i, (char[ZERO_KIT__UNIT_NAME]){0}, ZERO_KIT__UNIT_NAME));
    uint32_t next;
    if (zero_kit__phase_find_or_add(g, phase, &next) != 0)
        return g->svc->error(g->c, ZERO_ERR_INVALID_ARGUMENT, "zero_set_phase('%s'): more than %d distinct phases",
                             phase, ZERO_KIT__MAX_PHASES);
    /* Collective: every rank agrees on what the phase being left gathered. */
    zero_status ag = zero_kit__agree(g, "zero_set_phase");
    zero_status st = settle(g);
    if (ag != ZERO_OK) return ag;
    if (st != ZERO_OK) return st;
    /* Park the active order; bring in the next phase's (empty the first time). */
    zero_kit__trace_swap(&g->trace, &g->phases[g->cur_phase].trace);
    zero_kit__trace_swap(&g->trace, &g->phases[next].trace);
    g->cur_phase = next;
    g->on_track = g->trace.valid;
    return ZERO_OK;
}

const char *zero_kit_gather_phase(const zero_kit_gather *g) { return zero_kit__phase_name(g); }

/* ---- for fetch-side staging ----------------------------------------------- */

size_t zero_kit_gather_upcoming(const zero_kit_gather *g, uint32_t *idx, size_t max) {
    const zero_kit__trace *t = &g->trace;
    size_t n = 0;
    if (!g->on_track || !t->valid) return 0;
    for (size_t k = g->pos, w = 0; k < t->len && w < max && n < max; k++, w++) {
        const zero_kit__gp *p = &g->params[t->idx[k]];
        if (p->buf && p->fresh) continue;
        if (t->idx[k] >= g->nwhole) continue; /* slices: fetched from the shard (no window) */
        idx[n++] = t->idx[k];
    }
    return n;
}

int zero_kit_gather_resident(const zero_kit_gather *g, uint32_t idx) {
    return g->params[idx].buf && g->params[idx].fresh;
}

const zero_comm_req *zero_kit_gather_pending(const zero_kit_gather *g, uint32_t idx) { return g->params[idx].req; }

zero_status zero_kit_gather_complete(zero_kit_gather *g, uint32_t idx, int wait_for, int *done) {
    zero_kit__gp *p = &g->params[idx];
    *done = 1;
    if (!p->req) return ZERO_OK;
    if (!wait_for) {
        int d = 0;
        zero_status st = g->svc->test(p->req, &d);
        if (!d && st == ZERO_OK) {
            *done = 0;
            return ZERO_OK;
        }
        p->req = NULL; /* freed by the test (done, or failed) */
        zero_status l = zero_kit__finish_fetch(g, p);
        return st != ZERO_OK ? st : l;
    }
    return zero_kit__finish_fetch(g, p);
}

void zero_kit_gather_get_stats(const zero_kit_gather *g, zero_kit_gather_stats *out) {
    memset(out, 0, sizeof *out);
    out->gathers = g->n_gathers;
    out->prefetched = g->n_prefetched;
    out->resident = g->n_resident;
    out->demand = g->n_demand;
    out->agreements = g->n_agreements;
    out->micro_steps = g->micro_steps;
    out->persistent_bytes = g->pool.persistent;
    out->pool_bytes = g->pool.allocated;
    out->budget_bytes = g->pool.limit;
}

/* ---- life ---------------------------------------------------------------- */

void zero_kit_gather_spec_from_config(const zero_services *svc, zero_dtype dtype, int poison_default,
                                      zero_kit_gather_spec *spec) {
    const zero_run_config *rc = svc->config(svc->core);
    memset(spec, 0, sizeof *spec);
    spec->struct_size = sizeof *spec;
    spec->who = "stage3";
    spec->dtype = dtype;
    const uint64_t es = dtype_size(dtype);
    spec->prefetch_numel = nonneg(rc->stage3_prefetch_bucket_size);
    spec->persist_below = nonneg(rc->stage3_param_persistence_threshold);
    spec->max_reuse = nonneg(rc->stage3_max_reuse_distance);
    spec->limit_bytes = nonneg(rc->stage3_max_live_parameters) * es;
    /* Did the user set the limit?  (The typed config has DeepSpeed's
     * default, 1e9, either way; the lookups see the JSON as written.)  Only
     * a limit the user set is warned about; the cap is implicit. */
    int64_t v = 0;
    const int set = svc->cfg_int(svc->core, "zero_optimization.stage3_max_live_parameters", &v) != 0 ||
                    svc->cfg_int(svc->core, "zero_optimization.max_live_parameters", &v) != 0;
    spec->user_limit_bytes = set ? spec->limit_bytes : UINT64_MAX;
    spec->cap_bytes = UINT64_MAX;
    spec->poison = poison_default;
    const char *env = getenv("ZERO_DEBUG_POISON");
    /* "0" or "1" (libzero warns about anything else at engine creation) */
    if (env && (!strcmp(env, "0") || !strcmp(env, "1"))) spec->poison = env[0] == '1';
}

/* A param larger than the budget: warned (once, in elements; the pool then
 * does not warn again) when it is larger than the limit the user set; a
 * DEBUG note when only the implicit cap (what partitioning saves) is
 * smaller, as on any small model at default keys.  (Persistent params never
 * exceed the budget: they are admitted within it.) */
static void note_largest(zero_kit_gather *g) {
    uint32_t largest = 0;
    /* a stacked param counts by its slice: a host that stacks gathers layer
     * by layer (one that gathers the whole stack over the limit is warned by
     * the pool when it does) */
#define UNIT_NUMEL(i) (g->params[i].info->stack_layers ? g->params[i].numel / g->params[i].info->stack_layers \
                                                       : g->params[i].numel)
    for (uint32_t i = 1; i < g->nwhole; i++)
        if (UNIT_NUMEL(i) > UNIT_NUMEL(largest)) largest = i;
    if (!g->spec.gathers_world || !g->nwhole || UNIT_NUMEL(largest) * g->esize <= g->pool.limit) return;
    const unsigned long long big = (unsigned long long)UNIT_NUMEL(largest);
#undef UNIT_NUMEL
    if (big * g->esize > g->pool.user_limit) {
        g->pool.warned_over = 1;
        g->svc->log(g->c, ZERO_LOG_WARN,
                    "%s: stage3_max_live_parameters (%llu elements) is smaller than param '%s' (%llu "
                    "elements): its gathers will exceed the limit (warned once)",
                    g->spec.who, (unsigned long long)(g->pool.user_limit / g->esize),
                    zero_kit__unit_name(g, largest, (char[ZERO_KIT__UNIT_NAME]){0}, ZERO_KIT__UNIT_NAME), big);
    } else {
        g->pool.noted_cap = 1;
        g->svc->log(g->c, ZERO_LOG_DEBUG,
                    "%s: the implicit gather cap (what partitioning saves over stage 2: %llu elements) is "
                    "smaller than param '%s' (%llu elements): stage 3 holds more than stage 2 while it is "
                    "gathered (noted once)",
                    g->spec.who, (unsigned long long)(g->pool.limit / g->esize),
                    zero_kit__unit_name(g, largest, (char[ZERO_KIT__UNIT_NAME]){0}, ZERO_KIT__UNIT_NAME), big);
    }
}

/* Small params stay gathered for good: their first copy comes straight
 * from the host's values, later ones from a fetch after a step.
 * Persistent buffers come out of the budget and leave room for demand
 * gathers of two of the largest params (a layer's weight and whatever the
 * host holds with it), in registration order (the same choice on every
 * rank), so that persistence never makes the strategy hold more than the
 * budget allows. */
static zero_status setup_param(zero_kit_gather *g, uint32_t i) {
    zero_kit__gp *p = &g->params[i];
    const zero_param_info *info = p->info;
    void *alias = g->spec.ops.alias ? g->spec.ops.alias(g->spec.ctx, i) : NULL;
    if (alias) {
        p->buf = alias;
        p->buf_cap = (size_t)info->numel * g->esize;
        p->persistent = p->alias = p->fresh = 1;
        return ZERO_OK;
    }
    size_t bytes = (size_t)info->numel * g->esize;
    if (info->numel < g->persist_below && g->pool.persistent + bytes + 2 * g->largest_bytes <= g->pool.limit) {
        p->buf = g->svc->mem_alloc(g->c, ZERO_TIER_DEVICE, ZERO_MEM_GATHER, bytes ? bytes : 1);
        if (!p->buf) return g->svc->error(g->c, ZERO_ERR_OUT_OF_MEMORY, "%s: out of memory", g->spec.who);
        p->buf_cap = bytes;
        p->persistent = 1;
        g->pool.persistent += bytes;
        if (info->init_data) g->svc->mem_copy(g->c, p->buf, info->init_data, bytes);
        p->fresh = 1;
    }
    return ZERO_OK;
}

zero_status zero_kit_gather_create(const zero_services *svc, const zero_kit_gather_spec *spec, zero_kit_gather **out) {
    *out = NULL;
    if (!spec || spec->struct_size < sizeof *spec || !spec->comm || !spec->ops.fetch)
        return svc->error(svc->core, ZERO_ERR_INVALID_ARGUMENT,
                          "zero_kit_gather_create: the spec needs struct_size, comm and ops.fetch");
    const char *who = spec->who ? spec->who : "gather";
    zero_kit_gather *g = calloc(1, sizeof *g);
    if (!g) return svc->error(svc->core, ZERO_ERR_OUT_OF_MEMORY, "%s: out of memory", who);
    g->svc = svc;
    g->c = svc->core;
    g->spec = *spec;
    g->spec.who = who;
    g->esize = dtype_size(spec->dtype);
    g->rank = svc->comm_rank(spec->comm);
    g->nranks = svc->comm_size(spec->comm);
    g->req_hash = ZERO_KIT__FNV_OFFSET;
    g->prefetch_numel = spec->prefetch_numel;
    g->max_reuse = spec->max_reuse;
    g->persist_below = spec->persist_below;
    g->pool.limit = spec->limit_bytes < spec->cap_bytes ? spec->limit_bytes : spec->cap_bytes;
    g->pool.user_limit = spec->user_limit_bytes;
    if (g->prefetch_numel * g->esize > g->pool.limit) g->prefetch_numel = g->pool.limit / g->esize;
    g->nwhole = svc->nparams(g->c);
    g->slice_base = malloc((g->nwhole ? g->nwhole : 1) * sizeof *g->slice_base);
    uint64_t nunits = g->nwhole;
    for (uint32_t i = 0; g->slice_base && i < g->nwhole; i++) {
        const zero_param_info *info = svc->param(g->c, i);
        g->slice_base[i] = info->stack_layers ? (uint32_t)nunits : UINT32_MAX;
        nunits += info->stack_layers;
    }
    if (nunits > UINT32_MAX - 1) nunits = 0; /* cannot happen with real models; fails below */
    g->nparams = (uint32_t)nunits;
    g->params = g->slice_base && nunits ? calloc(nunits, sizeof *g->params) : NULL;
    if (!g->nwhole && g->slice_base) g->params = calloc(1, sizeof *g->params);
    /* phase 0 is "train", the phase every engine starts in */
    g->phases = calloc(ZERO_KIT__MAX_PHASES, sizeof *g->phases);
    if (!g->params || !g->phases) {
        zero_kit_gather_destroy(g);
        return svc->error(svc->core, ZERO_ERR_OUT_OF_MEMORY, "%s: out of memory", who);
    }
    strcpy(g->phases[0].name, "train");
    g->nphases = 1;
    for (uint32_t i = 0; i < g->nwhole; i++) {
        zero_kit__gp *p = &g->params[i];
        p->info = svc->param(g->c, i);
        p->numel = p->info->numel;
        p->unit = i;
        p->layer = UINT32_MAX;
        const uint64_t b = p->numel * (uint64_t)g->esize;
        if (b > g->largest_bytes) g->largest_bytes = b;
        for (uint32_t l = 0; l < p->info->stack_layers; l++) { /* the slices: never persistent */
            zero_kit__gp *q = &g->params[g->slice_base[i] + l];
            q->info = p->info;
            q->numel = p->info->numel / p->info->stack_layers;
            q->offset = (uint64_t)l * q->numel;
            q->unit = g->slice_base[i] + l;
            q->layer = l;
        }
    }
    for (uint32_t i = 0; i < g->nwhole; i++) {
        zero_status st = setup_param(g, i);
        if (st != ZERO_OK) {
            zero_kit_gather_destroy(g);
            return st;
        }
    }
    note_largest(g);
    *out = g;
    return ZERO_OK;
}

void zero_kit_gather_destroy(zero_kit_gather *g) {
    if (!g) return;
    if (g->params) zero_kit_gather_wait_all(g);
    if (g->n_gathers)
        g->svc->log(g->c, ZERO_LOG_INFO,
                    "%s: %llu param gathers: %llu prefetched, %llu already resident (kept/persistent), %llu on "
                    "demand; %llu order agreements over %llu micro-steps",
                    g->spec.who, (unsigned long long)g->n_gathers, (unsigned long long)g->n_prefetched,
                    (unsigned long long)g->n_resident, (unsigned long long)g->n_demand,
                    (unsigned long long)g->n_agreements, (unsigned long long)g->micro_steps);
    for (uint32_t i = 0; g->params && i < g->nparams; i++) {
        zero_kit__gp *p = &g->params[i];
        if (p->buf && !p->alias) g->svc->mem_free(g->c, p->buf);
    }
    zero_kit__pool_drain(g);
    free(g->kept);
    zero_kit__trace_free(&g->trace);
    zero_kit__trace_free(&g->record);
    zero_kit__phases_free(g);
    free(g->params);
    free(g->slice_base);
    free(g);
}
