/* The order agreement of the kit's gather engine: one small I64 MAX
 * all-reduce (the same shape wherever it is called, so that agreements
 * from different call sites on diverging ranks still pair up and report)
 * proves that every rank asked for the same params in the same order so
 * far, holding the same live buffers; else ZERO_ERR_MISMATCH naming the
 * params (and the ranks and calls that differ) on every rank, or
 * ZERO_ERR_TIMEOUT when a rank never arrives.  Engine thread only; uses
 * nothing else of the engine. */
#include <stdio.h>
#include <string.h>

#include "gather_internal.h"

/* ---- agreement ----------------------------------------------------------- */

enum { A_START = 0, A_END, A_HASH, A_LIVE, A_CALL, A_IDX0, A_NIDX = 6, A_NV = A_IDX0 + A_NIDX };

/* A_END and A_CALL carry the rank in their low bits: the MAX all-reduce
 * then gives the largest value and the highest rank holding it, the MIN
 * (the negated half) the smallest and the lowest rank holding it, so a
 * message can name two ranks that differ. */
#define RANK_BITS 20
#define RANK_MASK ((INT64_C(1) << RANK_BITS) - 1)
static int64_t with_rank(int64_t v, int rank) { return v * (RANK_MASK + 1) + (rank & RANK_MASK); }

/* The call an agreement runs in (A_CALL), and its name: the host's entry
 * point, so that a message says zero_gather_slices where the host called
 * that (codes are only compared for the message, never for the verdict). */
static const char *const call_names[] = {"another call", "zero_gather", "zero_step", "zero_set_phase",
                                         "zero_gather_slices"};
enum { N_CALLS = sizeof call_names / sizeof call_names[0] };
static int64_t call_code(const char *where) {
    for (int64_t k = 1; k < N_CALLS; k++)
        if (!strcmp(where, call_names[k])) return k;
    return 0;
}
static const char *call_name(int64_t code) { return code >= 0 && code < N_CALLS ? call_names[code] : call_names[0]; }

/* Wait for the agreement's request.  The comm backend bounds every wait
 * (ZERO_COMM_TIMEOUT / comm_timeout, of which ZERO_STAGE3_TIMEOUT_S is now
 * an alias) and backs off instead of spinning; a peer that never joins
 * gives ZERO_ERR_TIMEOUT, reworded here to say what was being agreed (the
 * engine is only good for destroying afterwards, as after any collective
 * failure). */
static zero_status wait_bounded(zero_kit_gather *g, zero_comm_req *req, const char *what) {
    zero_status st = g->svc->wait(req);
    if (st == ZERO_ERR_TIMEOUT)
        return g->svc->error(g->c, ZERO_ERR_TIMEOUT,
                             "%s: %s: no answer from every rank within the comm timeout (a rank stopped "
                             "gathering, or called zero_step/another collective instead; ZERO_COMM_TIMEOUT or the "
                             "config's comm_timeout sets the limit)",
                             g->spec.who, what);
    return st;
}

/* A unit's name (a slice as "name[layer L]"), in a buffer that lives until
 * the end of the enclosing full expression's block: one per use, so a
 * message can name several units. */
#define pname(g, idx) zero_kit__unit_name((g), (idx), (char[ZERO_KIT__UNIT_NAME]){0}, ZERO_KIT__UNIT_NAME)

/* Ranks that gathered different NUMBERS of params (the same params as far
 * as compared): name both counts and ranks, what each rank was doing, and
 * the likely cause.  A rank that ran one micro-step fewer (an uneven data
 * split, a rank that left its loop early) gathers what comes after its
 * loop (a final gather of everything, a phase change, zero_step) while
 * the others are still in the loop's gathers, and that is what this
 * looks like from inside the agreement. */
static zero_status count_mismatch(zero_kit_gather *g, const char *where, const int64_t *v, size_t first_extra) {
#define HI(k) (v[(k)])
#define LO(k) (-v[A_NV + (k)])
    const zero_kit__trace *rec = &g->record;
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
                 "nothing)", first_extra, rhi, pname(g, HI(A_IDX0 + (first_extra - g->verified))), rlo);
    return g->svc->error(
        g->c, ZERO_ERR_MISMATCH,
        "%s: ranks gathered different numbers of params in micro-step %llu: rank %d has gathered %lld so far, rank %d "
        "%lld%s "
        "(this rank %zu, the last '%s'%s). Most likely the ranks ran different numbers of micro-steps (a rank with "
        "fewer batches, or one that left its training loop early, is already past its last zero_step): every rank "
        "must run the same number of micro-steps (one zero_step each) per optimizer step, with the same gathers "
        "in each",
        where, (unsigned long long)g->micro_steps, rhi, nhi, rlo, nlo, extra, rec->len,
        pname(g, rec->len ? (int64_t)rec->idx[rec->len - 1] : -1), calls);
#undef HI
#undef LO
}

zero_status zero_kit__agree(zero_kit_gather *g, const char *where) {
    if (g->nranks <= 1) return ZERO_OK;
    const zero_kit__trace *rec = &g->record;
    int64_t v[2 * A_NV];
    v[A_START] = (int64_t)g->verified;
    v[A_END] = with_rank((int64_t)rec->len, g->rank);
    v[A_HASH] = (int64_t)(g->req_hash >> 1);
    v[A_LIVE] = (int64_t)(g->live_hash >> 1);
    v[A_CALL] = with_rank(call_code(where), g->rank);
    for (size_t i = 0; i < A_NIDX; i++)
        v[A_IDX0 + i] = g->verified + i < rec->len ? (int64_t)rec->idx[g->verified + i] : -1;
    for (size_t i = 0; i < A_NV; i++) v[A_NV + i] = -v[i];
    zero_comm_req *req = NULL;
    g->n_agreements++;
    zero_status st = g->svc->iallreduce(g->spec.comm, v, 2 * A_NV, ZERO_DTYPE_I64, ZERO_OP_MAX, &req);
    if (st == ZERO_OK) st = wait_bounded(g, req, "agreeing on the gather order");
    if (st != ZERO_OK) return st;
#define HI(k) (v[(k)])
#define LO(k) (-v[A_NV + (k)])
    const unsigned long long ms = (unsigned long long)g->micro_steps;
    for (size_t i = 0; i < A_NIDX; i++)
        if (HI(A_IDX0 + i) != LO(A_IDX0 + i)) {
            size_t at = g->verified + i;
            /* some rank has nothing at this position: its list is shorter */
            if (LO(A_IDX0 + i) < 0) return count_mismatch(g, where, v, at);
            return g->svc->error(g->c, ZERO_ERR_MISMATCH,
                                 "%s: ranks gather different params at gather position %zu of micro-step %llu: "
                                 "'%s' on some ranks and '%s' on others (this rank: '%s'); every rank must gather "
                                 "the same params in the same order",
                                 where, at, ms, pname(g, LO(A_IDX0 + i)), pname(g, HI(A_IDX0 + i)),
                                 pname(g, at < rec->len ? (int64_t)rec->idx[at] : -1));
        }
    if ((HI(A_END) >> RANK_BITS) != (LO(A_END) >> RANK_BITS) || HI(A_START) != LO(A_START))
        return count_mismatch(g, where, v, (size_t)-1);
    if (HI(A_HASH) != LO(A_HASH))
        return g->svc->error(g->c, ZERO_ERR_MISMATCH,
                             "%s: ranks gather different params somewhere in gather positions %zu..%zu of "
                             "micro-step %llu (beyond the first %d compared one by one)",
                             where, g->verified, rec->len, ms, A_NIDX);
    if (HI(A_LIVE) != LO(A_LIVE))
        return g->svc->error(g->c, ZERO_ERR_MISMATCH,
                             "%s: ranks hold different sets of gathered params in micro-step %llu (a zero_release "
                             "differs between ranks)",
                             where, ms);
#undef HI
#undef LO
    g->verified = rec->len;
    return ZERO_OK;
}
