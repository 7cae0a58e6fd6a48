/* zero_gather / zero_release for stage 3: agreement, on-demand and
 * prefetched all-gathers, reuse-distance keeping, poisoning.
 *
 * One host gather call goes:
 *   1. record the request and follow the trace (local): a request that
 *      differs from the recorded order switches this micro-step to
 *      on-demand gathering (one warning per engine);
 *   2. if it needs any collective (a requested param is not resident, or
 *      prefetch wants to issue): agree first — one small I64 MAX all-reduce
 *      proves every rank asked for the same params in the same order so far
 *      holding the same live buffers (else ZERO_ERR_MISMATCH on every rank
 *      naming the params; a rank that never arrives gives ZERO_ERR_TIMEOUT
 *      instead of a hang).  Otherwise the check waits for the next
 *      agreement, at the latest zero_step's;
 *   3. issue the all-gathers of the requested params that have no fresh
 *      buffer, then prefetch the next trace entries within the budgets;
 *   4. wait for the requested ones only; prefetches keep flying while the
 *      host computes.
 * Each param's all-gather has per-rank counts = its intersection with each
 * rank's share, so the pieces land concatenated as the full tensor. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stage3.h"
#include "stage3_offload.h"

/* ---- agreement ----------------------------------------------------------- */

enum { A_START = 0, A_END, A_HASH, A_LIVE, A_CALL, A_IDX0, A_NIDX = 6, A_NV = A_IDX0 + A_NIDX };

/* A_END and A_CALL carry the rank in their low bits: the MAX all-reduce
 * then gives the largest value and the highest rank holding it, the MIN
 * (the negated half) the smallest and the lowest rank holding it, so a
 * message can name two ranks that differ. */
#define RANK_BITS 20
#define RANK_MASK ((INT64_C(1) << RANK_BITS) - 1)
static int64_t with_rank(int64_t v, int rank) { return v * (RANK_MASK + 1) + (rank & RANK_MASK); }

/* The call an agreement runs in (A_CALL), and its name. */
static int64_t call_code(const char *where) {
    return !strcmp(where, "zero_gather") ? 1 : !strcmp(where, "zero_step") ? 2 : !strcmp(where, "zero_set_phase") ? 3 : 0;
}
static const char *call_name(int64_t code) {
    static const char *const n[4] = {"another call", "zero_gather", "zero_step", "zero_set_phase"};
    return code >= 0 && code < 4 ? n[code] : n[0];
}

/* Wait for the agreement's request.  The comm backend bounds every wait
 * (ZERO_COMM_TIMEOUT / comm_timeout, of which ZERO_STAGE3_TIMEOUT_S is now
 * an alias) and backs off instead of spinning; a peer that never joins
 * gives ZERO_ERR_TIMEOUT, reworded here to say what was being agreed (the
 * engine is only good for destroying afterwards, as after any collective
 * failure). */
static zero_status wait_bounded(zero__s3 *s, zero_comm_req *req, const char *what) {
    zero_status st = s->svc->wait(req);
    if (st == ZERO_ERR_TIMEOUT)
        return s->svc->error(s->c, ZERO_ERR_TIMEOUT,
                             "stage3: %s: no answer from every rank within the comm timeout (a rank stopped "
                             "gathering, or called zero_step/another collective instead; ZERO_COMM_TIMEOUT or the "
                             "config's comm_timeout sets the limit)",
                             what);
    return st;
}

static const char *pname(zero__s3 *s, int64_t idx) {
    if (idx < 0 || idx >= (int64_t)s->nparams) return "(nothing)";
    return s->params[idx].info->name;
}

/* Ranks that gathered different NUMBERS of params (the same params as far
 * as compared): name both counts and ranks, what each rank was doing, and
 * the likely cause.  A rank that ran one micro-step fewer (an uneven data
 * split, a rank that left its loop early) gathers what comes after its
 * loop (a final gather of everything, a phase change, zero_step) while
 * the others are still in the loop's gathers, and that is what this
 * looks like from inside the agreement. */
static zero_status count_mismatch(zero__s3 *s, const char *where, const int64_t *v, size_t first_extra) {
#define HI(k) (v[(k)])
#define LO(k) (-v[A_NV + (k)])
    const zero__s3_trace *rec = &s->record;
    const long long nhi = (long long)(HI(A_END) >> RANK_BITS), nlo = (long long)(LO(A_END) >> RANK_BITS);
    const int rhi = (int)(HI(A_END) & RANK_MASK), rlo = (int)(LO(A_END) & RANK_MASK);
    const int64_t chi = HI(A_CALL) >> RANK_BITS, clo = LO(A_CALL) >> RANK_BITS;
    char calls[160] = "";
    if (chi != clo)
        snprintf(calls, sizeof calls, "; rank %d is in %s while rank %d is in %s", (int)(HI(A_CALL) & RANK_MASK),
                 call_name(chi), (int)(LO(A_CALL) & RANK_MASK), call_name(clo));
    char extra[192] = "";
    if (first_extra != (size_t)-1)
        snprintf(extra, sizeof extra, " (the same params up to position %zu, where rank %d gathers '%s' and rank %d "
                 "nothing)", first_extra, rhi, pname(s, HI(A_IDX0 + (first_extra - s->verified))), rlo);
    return s->svc->error(
        s->c, ZERO_ERR_MISMATCH,
        "%s: ranks gathered different numbers of params in micro-step %llu: rank %d has gathered %lld so far, rank %d "
        "%lld%s "
        "(this rank %zu, the last '%s'%s). Most likely the ranks ran different numbers of micro-steps (a rank with "
        "fewer batches, or one that left its training loop early, is already past its last zero_step): every rank "
        "must run the same number of micro-steps (one zero_step each) per optimizer step, with the same gathers "
        "in each",
        where, (unsigned long long)s->micro_steps, rhi, nhi, rlo, nlo, extra, rec->len,
        pname(s, rec->len ? (int64_t)rec->idx[rec->len - 1] : -1), calls);
#undef HI
#undef LO
}

zero_status zero__s3_agree(zero__s3 *s, const char *where) {
    if (s->nranks <= 1) return ZERO_OK;
    const zero__s3_trace *rec = &s->record;
    int64_t v[2 * A_NV];
    v[A_START] = (int64_t)s->verified;
    v[A_END] = with_rank((int64_t)rec->len, s->rank);
    v[A_HASH] = (int64_t)(s->req_hash >> 1);
    v[A_LIVE] = (int64_t)(s->live_hash >> 1);
    v[A_CALL] = with_rank(call_code(where), s->rank);
    for (size_t i = 0; i < A_NIDX; i++)
        v[A_IDX0 + i] = s->verified + i < rec->len ? (int64_t)rec->idx[s->verified + i] : -1;
    for (size_t i = 0; i < A_NV; i++) v[A_NV + i] = -v[i];
    zero_comm_req *req = NULL;
    s->n_agreements++;
    zero_status st = s->svc->iallreduce(s->gcomm, v, 2 * A_NV, ZERO_DTYPE_I64, ZERO_OP_MAX, &req);
    if (st == ZERO_OK) st = wait_bounded(s, req, "agreeing on the gather order");
    if (st != ZERO_OK) return st;
#define HI(k) (v[(k)])
#define LO(k) (-v[A_NV + (k)])
    const unsigned long long ms = (unsigned long long)s->micro_steps;
    for (size_t i = 0; i < A_NIDX; i++)
        if (HI(A_IDX0 + i) != LO(A_IDX0 + i)) {
            size_t at = s->verified + i;
            /* some rank has nothing at this position: its list is shorter */
            if (LO(A_IDX0 + i) < 0) return count_mismatch(s, where, v, at);
            return s->svc->error(s->c, ZERO_ERR_MISMATCH,
                                 "%s: ranks gather different params at gather position %zu of micro-step %llu: "
                                 "'%s' on some ranks and '%s' on others (this rank: '%s'); every rank must gather "
                                 "the same params in the same order",
                                 where, at, ms, pname(s, LO(A_IDX0 + i)), pname(s, HI(A_IDX0 + i)),
                                 pname(s, at < rec->len ? (int64_t)rec->idx[at] : -1));
        }
    if ((HI(A_END) >> RANK_BITS) != (LO(A_END) >> RANK_BITS) || HI(A_START) != LO(A_START))
        return count_mismatch(s, where, v, (size_t)-1);
    if (HI(A_HASH) != LO(A_HASH))
        return s->svc->error(s->c, ZERO_ERR_MISMATCH,
                             "%s: ranks gather different params somewhere in gather positions %zu..%zu of "
                             "micro-step %llu (beyond the first %d compared one by one)",
                             where, s->verified, rec->len, ms, A_NIDX);
    if (HI(A_LIVE) != LO(A_LIVE))
        return s->svc->error(s->c, ZERO_ERR_MISMATCH,
                             "%s: ranks hold different sets of gathered params in micro-step %llu (a zero_release "
                             "differs between ranks)",
                             where, ms);
#undef HI
#undef LO
    s->verified = rec->len;
    return ZERO_OK;
}

/* ---- buffers ------------------------------------------------------------- */

static uint64_t live_term(uint32_t idx) { return ((uint64_t)idx + 1) * 0x9e3779b97f4a7c15ull; }

void zero__s3_drop_buffer(zero__s3 *s, zero__s3_param *p) {
    if (!p->buf || p->persistent) return;
    if (p->req) { /* never hand back memory a collective still writes */
        s->svc->wait(p->req);
        p->req = NULL;
    }
    zero__s3_pool_put(s, p->buf, p->buf_cap);
    s->live_hash -= live_term(p->info->index);
    p->buf = NULL;
    p->buf_cap = 0;
    p->fresh = 0;
}

/* Make sure an all-gather of p into a buffer is issued (or done).  Returns
 * ZERO_OK with *issued set, or ZERO_ERR_OUT_OF_MEMORY when no buffer fits
 * (`demand` 0: a prefetch that must stop; the caller turns that into a
 * non-error). */
static zero_status issue(zero__s3 *s, zero__s3_param *p, int demand) {
    if (p->buf && p->fresh) return ZERO_OK;
    size_t bytes = (size_t)p->info->numel * s->esize;
    if (!p->buf) {
        size_t cap = 0;
        void *b = zero__s3_pool_get(s, bytes, demand, &cap);
        if (!b)
            return demand ? s->svc->error(s->c, ZERO_ERR_OUT_OF_MEMORY,
                                          "stage3: no memory for the gather buffer of '%s' (%zu bytes)",
                                          p->info->name, bytes)
                          : ZERO_ERR_OUT_OF_MEMORY;
        p->buf = b;
        p->buf_cap = cap;
        s->live_hash += live_term(p->info->index);
    }
    const char *send = (const char *)s->shard + (size_t)p->part_lo * s->esize;
    int slot = -1;
    if (s->off_param_nvme && !(send = zero__s3_pwin_piece(s, p, &slot))) /* from the file (error set) */
        return s->off->send_err != ZERO_OK ? s->off->send_err : ZERO_ERR_IO;
    zero_status st = s->svc->iallgatherv(s->gcomm, send, p->buf, p->counts, s->dtype, &p->req);
    if (st != ZERO_OK) p->req = NULL;
    if (s->off_param_nvme) zero__s3_pwin_sent(s, slot, p); /* the slot is busy until p->req is waited for */
    if (st != ZERO_OK) return st;
    p->fresh = 1;
    return ZERO_OK;
}

/* Prefetch the trace entries after the current position, in order, while
 * they fit both budgets.  Stops at the first that does not fit, so the
 * issue order is the trace order on every rank. */
#define PREFETCH_WALK 1024 /* trace entries looked at per call: bounds the cost on long traces */

/* Would prefetch issue anything now?  Mirrors prefetch()'s first decision
 * (budget and pool limit) so that a call with nothing to fetch needs no
 * agreement.  Prefetch refills only below half its budget (low-water mark),
 * which also makes most calls free of communication. */
static int prefetch_wanted(const zero__s3 *s) {
    const zero__s3_trace *t = &s->trace;
    if (!s->on_track || !s->prefetch_numel || s->prefetch_outstanding * 2 > s->prefetch_numel) return 0;
    for (size_t k = s->pos, w = 0; k < t->len && w < PREFETCH_WALK; k++, w++) {
        const zero__s3_param *p = &s->params[t->idx[k]];
        if (p->buf && p->fresh) continue;
        if (s->prefetch_outstanding + p->info->numel > s->prefetch_numel) return 0;
        return p->buf || zero__s3_pool_could_get(s, (size_t)p->info->numel * s->esize);
    }
    return 0;
}

/* Batch the all-gathers issued between these two calls (services 1.5,
 * comm_group_start/end): on NCCL one launch for the whole prefetch window
 * instead of one per parameter; on MPI nothing changes.  A core older than
 * 1.5 has no groups: each all-gather then launches alone.  The end is
 * called on every path, after errors too, and its error kept only when
 * nothing failed before. */
static zero_status group_open(zero__s3 *s) {
    return ZERO_SERVICES_HAS(s->svc, comm_group_end) ? s->svc->comm_group_start(s->gcomm) : ZERO_OK;
}
static zero_status group_close(zero__s3 *s, zero_status st) {
    zero_status e = ZERO_SERVICES_HAS(s->svc, comm_group_end) ? s->svc->comm_group_end(s->gcomm) : ZERO_OK;
    return st != ZERO_OK ? st : e;
}

static zero_status prefetch_walk(zero__s3 *s);
static zero_status prefetch(zero__s3 *s) {
    if (!prefetch_wanted(s)) return ZERO_OK;
    zero_status st = group_open(s);
    if (st != ZERO_OK) return st;
    return group_close(s, prefetch_walk(s));
}

static zero_status prefetch_walk(zero__s3 *s) {
    const zero__s3_trace *t = &s->trace;
    size_t walked = 0;
    for (size_t k = s->pos; k < t->len && walked < PREFETCH_WALK; k++, walked++) {
        zero__s3_param *p = &s->params[t->idx[k]];
        if (p->buf && p->fresh) continue;
        uint64_t numel = p->info->numel;
        if (s->prefetch_outstanding + numel > s->prefetch_numel) break;
        zero_status st = issue(s, p, 0);
        if (st == ZERO_ERR_OUT_OF_MEMORY) break; /* max_live reached: try again at the next gather */
        if (st != ZERO_OK) return st;
        p->prefetched = 1;
        s->prefetch_outstanding += numel;
    }
    return ZERO_OK;
}

static void unmark_prefetched(zero__s3 *s, zero__s3_param *p) {
    if (!p->prefetched) return;
    p->prefetched = 0;
    s->prefetch_outstanding -= p->info->numel;
}

/* The host left the recorded order: finish the prefetches (every rank
 * issued them) and drop the ones nobody holds; gather on demand from now
 * on.  Results stay exact; only overlap is lost. */
static zero_status diverge(zero__s3 *s, uint32_t got) {
    const zero__s3_trace *t = &s->trace;
    const char *expected = s->pos < t->len ? s->params[t->idx[s->pos]].info->name : "(end of the recorded order)";
    if (!s->warned_divergence && zero__s3_order_matters(s)) {
        s->warned_divergence = 1;
        s->svc->log(s->c, ZERO_LOG_WARN,
                    "stage3: gather order differs from the recorded one at position %zu of micro-step %llu "
                    "(expected '%s', got '%s'): gathering on demand for the rest of this step and re-recording "
                    "(warned once)",
                    s->pos, (unsigned long long)s->micro_steps, expected, s->params[got].info->name);
    } else {
        s->svc->log(s->c, ZERO_LOG_DEBUG, "stage3: gather order differs%s at position %zu of phase '%s' ('%s' vs '%s')",
                    s->warned_divergence ? " again" : "", s->pos, zero__s3_phase_name(s), expected,
                    s->params[got].info->name);
    }
    s->on_track = 0;
    zero_status first = ZERO_OK;
    for (uint32_t i = 0; i < s->nparams; i++) {
        zero__s3_param *p = &s->params[i];
        if (!p->prefetched) continue;
        unmark_prefetched(s, p);
        if (p->req) {
            zero_status st = s->svc->wait(p->req);
            p->req = NULL;
            if (first == ZERO_OK) first = st;
        }
        if (!p->holds) zero__s3_drop_buffer(s, p);
    }
    return first;
}

zero_status zero__s3_gather(void *state, zero_param_info *const *params, size_t n, void **ptrs) {
    zero__s3 *s = state;
    if (!n) return ZERO_OK;
    if (!s->shard && !s->off_param_nvme && s->L->part_numel)
        return s->svc->error(s->c, ZERO_ERR_STATE, "stage3: zero_gather before the model state exists");
    zero_status st = ZERO_OK;
    /* Local bookkeeping first (no communication): record, follow the trace.
     * Leaving the trace only completes prefetches every rank issued. */
    for (size_t i = 0; i < n; i++) {
        uint32_t idx = params[i]->index;
        if (zero__s3_trace_push(&s->record, idx) != 0)
            return s->svc->error(s->c, ZERO_ERR_OUT_OF_MEMORY, "stage3: out of memory recording the gather order");
        s->req_hash = (s->req_hash ^ idx) * 1099511628211ull;
        if (s->on_track && (s->pos >= s->trace.len || s->trace.idx[s->pos] != idx)) {
            st = diverge(s, idx);
            if (st != ZERO_OK) return st;
        }
        s->params[idx].last_pos = s->pos;
        s->pos++;
    }
    /* Consume prefetches first, so that the budget they free is available
     * to this call's own prefetch decision. */
    for (size_t i = 0; i < n; i++) {
        zero__s3_param *p = params[i]->plugin_data;
        s->n_gathers++;
        if (p->prefetched) s->n_prefetched++;
        else if (p->buf && p->fresh) s->n_resident++;
        else s->n_demand++;
        unmark_prefetched(s, p);
    }
    /* Agree before any collective; a call that needs none defers it. */
    int need = prefetch_wanted(s);
    for (size_t i = 0; i < n && !need; i++) {
        const zero__s3_param *p = params[i]->plugin_data;
        need = !(p->buf && p->fresh);
    }
    if (need && (st = zero__s3_agree(s, "zero_gather")) != ZERO_OK) return st;
    /* Hold first: a later on-demand issue in this call may evict kept
     * buffers, and must not evict one the host is about to receive. */
    for (size_t i = 0; i < n; i++) ((zero__s3_param *)params[i]->plugin_data)->holds++;
    /* the on-demand all-gathers and the prefetch behind them: one launch */
    if (need) st = group_open(s);
    int grouped = need && st == ZERO_OK;
    for (size_t i = 0; i < n && st == ZERO_OK; i++) st = issue(s, params[i]->plugin_data, 1);
    if (st == ZERO_OK && s->on_track && s->prefetch_numel) st = prefetch(s);
    if (grouped) st = group_close(s, st);
    if (st == ZERO_OK) zero__s3_pwin_readahead(s); /* offload_param nvme: the next pieces, while the host computes */
    for (size_t i = 0; i < n; i++) {
        zero__s3_param *p = params[i]->plugin_data;
        if (p->req) {
            zero_status w = s->svc->wait(p->req);
            p->req = NULL;
            if (st == ZERO_OK) st = w;
        }
        ptrs[i] = p->buf;
    }
    if (st != ZERO_OK)
        for (size_t i = 0; i < n; i++) ((zero__s3_param *)params[i]->plugin_data)->holds--;
    return st;
}

/* Is a change of gather order worth a warning?  In the "train" phase (the
 * default) the order is normally the same every micro-step, and a change
 * costs the prefetch of the rest of the step.  Other phases (eval,
 * generate, a host's gather of everything for a checkpoint) have orders
 * that legitimately vary (a generated sequence's length, a partial pass):
 * there it is only a DEBUG line.  (Issue 34 item 7.) */
int zero__s3_order_matters(const zero__s3 *s) { return strcmp(zero__s3_phase_name(s), "train") == 0; }

/* Keep a released param if the recorded order uses it again within
 * stage3_max_reuse_distance elements (e.g. the last layer: forward, then
 * backward at once).  Only on track: otherwise the future is unknown. */
static int keep_for_reuse(const zero__s3 *s, const zero__s3_param *p) {
    const zero__s3_trace *t = &s->trace;
    if (!s->on_track || !t->valid || p->last_pos >= t->len) return 0;
    int64_t nx = t->next[p->last_pos];
    if (nx < 0) return 0;
    uint64_t between = t->prefix[nx] - t->prefix[p->last_pos + 1];
    return between <= s->max_reuse;
}

zero_status zero__s3_release(void *state, zero_param_info *const *params, size_t n) {
    zero__s3 *s = state;
    for (size_t i = 0; i < n; i++) {
        zero__s3_param *p = params[i]->plugin_data;
        if (p->holds <= 0)
            return s->svc->error(s->c, ZERO_ERR_STATE, "zero_release('%s') without a matching zero_gather",
                                 p->info->name);
        if (--p->holds > 0 || p->persistent) continue;
        if (keep_for_reuse(s, p)) continue;
        zero__s3_drop_buffer(s, p);
    }
    return ZERO_OK;
}

zero_status zero__s3_wait_all(zero__s3 *s) {
    zero_status first = ZERO_OK;
    for (uint32_t i = 0; i < s->nparams; i++) {
        zero__s3_param *p = &s->params[i];
        if (!p->req) continue;
        zero_status st = s->svc->wait(p->req);
        p->req = NULL;
        if (first == ZERO_OK) first = st;
    }
    return first;
}

zero_status zero__s3_settle(zero__s3 *s) {
    zero_status st = zero__s3_wait_all(s);
    for (uint32_t i = 0; i < s->nparams; i++) {
        zero__s3_param *p = &s->params[i];
        p->holds = 0;
        p->prefetched = 0;
        zero__s3_drop_buffer(s, p);
    }
    s->prefetch_outstanding = 0;
    /* A step that left the recorded order (or gathered fewer/more params)
     * teaches the new order; a step that matched keeps the trace, and so
     * does one that gathered nothing (a phase left right after a step, or
     * entered and left again: nothing was learnt). */
    int matched = s->on_track && s->trace.valid && s->pos == s->trace.len;
    if (!matched && s->pos > 0) {
        if (s->on_track && s->trace.valid && !s->warned_divergence && zero__s3_order_matters(s)) {
            s->warned_divergence = 1;
            s->svc->log(s->c, ZERO_LOG_WARN,
                        "stage3: micro-step %llu gathered %zu params in phase '%s', its recorded order has %zu: "
                        "re-recording (warned once; a host that evaluates or generates between training steps "
                        "names that phase with zero_set_phase)",
                        (unsigned long long)s->micro_steps, s->pos, zero__s3_phase_name(s), s->trace.len);
        } else if (s->on_track && s->trace.valid) {
            s->svc->log(s->c, ZERO_LOG_DEBUG, "stage3: %zu params gathered in phase '%s', its recorded order has %zu: "
                        "re-recording", s->pos, zero__s3_phase_name(s), s->trace.len);
        }
        zero__s3_trace_swap(&s->trace, &s->record);
        if (zero__s3_trace_finish(&s->trace, s) != 0)
            s->svc->log(s->c, ZERO_LOG_WARN, "stage3: out of memory building the gather trace; prefetch disabled");
    }
    zero__s3_trace_clear(&s->record);
    s->pos = 0;
    s->verified = 0;
    s->req_hash = ZERO__S3_FNV_OFFSET;
    s->on_track = s->trace.valid;
    return st;
}

zero_status zero__s3_end_micro_step(zero__s3 *s) {
    zero_status st = zero__s3_settle(s);
    s->micro_steps++;
    return st;
}

zero_status zero__s3_prefetch_ahead(zero__s3 *s) {
    zero_status st = s->on_track && s->prefetch_numel ? prefetch(s) : ZERO_OK;
    if (st == ZERO_OK) zero__s3_pwin_readahead(s);
    return st;
}

void zero__s3_mark_stale(zero__s3 *s) {
    for (uint32_t i = 0; i < s->nparams; i++)
        if (s->params[i].persistent && !s->params[i].alias) s->params[i].fresh = 0;
}
