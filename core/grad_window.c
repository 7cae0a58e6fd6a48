/* (issue 31) Missing gradients, agreed across ranks (docs/reliability.md).
 *
 * Each zero_step first delivers every gradient this rank was not given as
 * zeros, BEFORE any collective: with overlap_comm a rank holding all its
 * gradients has issued every bucket collective by now, so one still missing
 * some must issue them too, or the two call collectives in different orders
 * (erroneous MPI: MPI_ERR_TRUNCATE with Open MPI's libnbc, a hang or garbage
 * with NCCL).  What was missing is recorded for the accumulation window
 * (e->gwin) and agreed once, at the window's boundary: a micro-step inside
 * the window runs no collective of its own (a pipeline's stages call
 * zero_step at different times in a 1F1B schedule, and a per-micro-step
 * world collective would serialise them), and the boundary pays ONE
 * all-reduce (MAX of the local missing count, over every pipeline stage)
 * when nothing is missing anywhere.  Otherwise the data-parallel group
 * compares, per param, in how many and which micro-steps it was missing,
 * and every rank reaches the same verdict:
 *  - missing on every rank in the same micro-steps (an unused parameter):
 *    zeros and a warning, as DeepSpeed's ignore_unused_parameters; an error
 *    with strict_grads;
 *  - missing on some ranks only: an error (DDP's rule: the mean would
 *    silently count zeros for the ranks without it), unless
 *    zero_optimization.find_unused_parameters allows it (zeros, a warning);
 *  - a micro-step in which no rank reported anything (zero_step without a
 *    backward, or a second zero_step): an error, or with
 *    find_unused_parameters a skipped step.
 * A refused or skipped window is dropped through the plugin's overflow path
 * (drop_window): no weight moves, every collective is matched, and the
 * engine goes on with the next micro-batch. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "grad_window.h"


enum { MG_NAMED = 4 };                    /* params named in a message */
#define MG_SIG_MASK 0x3fffffffffffffffull /* signatures stay negatable as int64 */

/* This rank's missing gradients in the current window (e->gwin). */
struct zero__grad_window {
    uint64_t window;     /* global_step + skipped_steps when recorded */
    uint32_t last_micro; /* micro-step of the latest record */
    uint32_t nparams, gas;
    uint64_t total;      /* (param, micro-step) pairs missing */
    int64_t *miss;       /* per param: {micro-steps missing, signature of which} */
    uint8_t *empty;      /* per micro-step: nothing arrived on this rank */
};

void zero__grad_window_free(struct zero_engine *e) {
    if (!e->gwin) return;
    free(e->gwin->miss);
    free(e->gwin->empty);
    free(e->gwin);
    e->gwin = NULL;
}

static void gwin_clear(zero__grad_window *w) {
    w->total = 0;
    w->last_micro = 0;
    memset(w->miss, 0, (size_t)w->nparams * 2 * sizeof *w->miss);
    memset(w->empty, 0, w->gas);
}

/* The record for this micro-step's window: allocated at the first missing
 * gradient, cleared when a new window began without passing a boundary
 * here (a zero_load). */
static zero__grad_window *gwin_at(zero_engine *e) {
    const uint32_t gas = (uint32_t)e->rc->grad_accum_steps;
    const uint64_t window = e->global_step + e->skipped_steps;
    zero__grad_window *w = e->gwin;
    if (!w) {
        w = calloc(1, sizeof *w);
        if (!w) return NULL;
        w->nparams = e->nparams;
        w->gas = gas;
        w->miss = calloc((size_t)(e->nparams ? e->nparams : 1) * 2, sizeof *w->miss);
        w->empty = calloc(gas ? gas : 1, 1);
        e->gwin = w;
        if (!w->miss || !w->empty) {
            zero__grad_window_free(e);
            return NULL;
        }
        w->window = window;
    }
    if (w->total && (w->window != window || e->micro_step < w->last_micro)) gwin_clear(w);
    w->window = window;
    w->last_micro = e->micro_step;
    return w;
}

/* Which micro-steps a param missed, order-free: a sum of mixed indices. */
static uint64_t micro_sig(uint32_t m) {
    uint64_t z = (uint64_t)m + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Deliver zeros for every param not reported in this micro-step (a
 * stacked param with some slices counts as reported: its other slices are
 * zero) and, with `record`, record them in the window.  Returns the first
 * failure. */
static zero_status deliver_missing(zero_engine *e, int record) {
    uint32_t missing = 0;
    zero_status first = ZERO_OK;
    zero__grad_window *w = NULL;
    for (uint32_t i = 0; i < e->nparams; i++) {
        struct zero_param *p = e->params[i];
        if (atomic_load(&p->ready)) continue;
        unsigned got = p->stack_layers ? atomic_load(&p->slices_ready) : 0;
        zero_status s;
        if (got) { /* (1.1) a stack with some slices: the others were never added, i.e. zero */
            if (record) /* (zero_load discards them: nothing to say) */
                zero__log(e, ZERO_LOG_WARN, "stacked param '%s': %u of %u slices reported in micro-step %u; the "
                          "other slices count as zero", p->name, got, p->stack_layers, e->micro_step);
            atomic_store(&p->ready, 1);
            s = e->plugin.table->on_grad_ready(e->pstate, &p->info, NULL);
        } else {
            if (record && !w && !(w = gwin_at(e))) {
                if (first == ZERO_OK) first = zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "zero_step: out of memory");
            } else if (record) {
                w->miss[2 * i]++;
                w->miss[2 * i + 1] = (int64_t)(((uint64_t)w->miss[2 * i + 1] + micro_sig(e->micro_step)) & MG_SIG_MASK);
            }
            missing++;
            /* delivered now: a zero_step retried without a new backward
             * (after a refused hyper-parameter) must not deliver it twice */
            atomic_store(&p->ready, 1);
            p->info.grad_is_zero = 1;
            s = e->plugin.table->on_grad_ready(e->pstate, &p->info, NULL);
            p->info.grad_is_zero = 0;
        }
        if (s != ZERO_OK && first == ZERO_OK) first = s;
    }
    if (w) {
        w->total += missing;
        if (missing == e->nparams && e->micro_step < w->gas) w->empty[e->micro_step] = 1;
    }
    return first;
}

/* The first MG_NAMED params marked in `pick`: "'name' missing on k of W
 * ranks (ranks a..b)", the ranks being those that missed it in some
 * micro-step: one MAX and one SUM all-reduce over the data-parallel group. */
static zero_status name_ranks(zero_engine *e, const uint8_t *pick, char *out, size_t len) {
    int64_t v[2 * MG_NAMED], cnt[MG_NAMED];
    uint32_t idx[MG_NAMED], k = 0;
    for (uint32_t i = 0; i < e->nparams && k < MG_NAMED; i++)
        if (pick[i]) idx[k++] = i;
    for (uint32_t j = 0; j < k; j++) {
        const int lacks = e->gwin && e->gwin->miss[2 * idx[j]] > 0;
        v[2 * j] = lacks ? -(int64_t)e->rank : INT64_MIN; /* MAX: -(first rank) */
        v[2 * j + 1] = lacks ? e->rank : -1;               /* MAX: last rank */
        cnt[j] = lacks;
    }
    zero_status s = zero__allreduce(e->world, v, 2 * (size_t)k, ZERO_DTYPE_I64, ZERO_OP_MAX);
    if (s == ZERO_OK) s = zero__allreduce(e->world, cnt, k, ZERO_DTYPE_I64, ZERO_OP_SUM);
    if (s != ZERO_OK) return s;
    size_t off = 0;
    out[0] = '\0';
    for (uint32_t j = 0; j < k && off < len; j++) {
        const long long lo = -v[2 * j], hi = v[2 * j + 1], c = cnt[j];
        off += (size_t)snprintf(out + off, len - off, "%s'%s' missing on %lld of %d ranks (rank%s %lld", j ? "; " : "",
                                e->params[idx[j]]->name, c, e->world_size, c > 1 ? "s" : "", lo);
        if (off < len && c > 1) off += (size_t)snprintf(out + off, len - off, "%s%lld", c == hi - lo + 1 ? ".." : ", ..., ", hi);
        if (off < len) off += (size_t)snprintf(out + off, len - off, ")");
    }
    return ZERO_OK;
}

/* "'a', 'b' and n more" of the params marked in `pick`. */
static void list_params(const zero_engine *e, const uint8_t *pick, char *out, size_t len) {
    size_t off = 0;
    uint32_t n = 0;
    out[0] = '\0';
    for (uint32_t i = 0; i < e->nparams; i++) {
        if (!pick[i]) continue;
        if (++n <= MG_NAMED && off < len)
            off += (size_t)snprintf(out + off, len - off, "%s'%s'", n > 1 ? ", " : "", e->params[i]->name);
    }
    if (n > MG_NAMED && off < len) snprintf(out + off, len - off, " and %u more", n - MG_NAMED);
}

/* The slow path, at the boundary: per param, the most and fewest
 * micro-steps missed and the signatures of which, and per micro-step
 * whether it was empty on every rank -- one MAX all-reduce over the
 * data-parallel group -- then the verdict, the same on every rank of it. */
static zero_status judge_window(zero_engine *e, int *verdict, char *why, size_t len) {
    const uint32_t n = e->nparams, gas = (uint32_t)e->rc->grad_accum_steps;
    const zero__grad_window *w = e->gwin;
    const size_t nv = (size_t)n * 4 + gas;
    int64_t *v = calloc(nv ? nv : 1, sizeof *v);
    uint8_t *odd = calloc(n ? n : 1, 1), *unused = calloc(n ? n : 1, 1);
    zero_status s = v && odd && unused ? ZERO_OK : zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "zero_step: out of memory");
    for (uint32_t i = 0; s == ZERO_OK && i < n; i++) {
        const int64_t c = w ? w->miss[2 * i] : 0, g = w ? w->miss[2 * i + 1] : 0;
        v[4 * i] = c, v[4 * i + 1] = -c, v[4 * i + 2] = g, v[4 * i + 3] = -g;
    }
    for (uint32_t m = 0; s == ZERO_OK && m < gas; m++) v[4 * (size_t)n + m] = -(int64_t)(w && w->empty[m]);
    if (s == ZERO_OK) s = zero__allreduce(e->world, v, nv, ZERO_DTYPE_I64, ZERO_OP_MAX);
    uint32_t n_odd = 0, n_unused = 0, empty_m = gas;
    for (uint32_t i = 0; s == ZERO_OK && i < n; i++) {
        const int same = v[4 * i] == -v[4 * i + 1] && v[4 * i + 2] == -v[4 * i + 3];
        if (!same) odd[i] = 1, n_odd++;
        else if (v[4 * i] > 0) unused[i] = 1, n_unused++;
    }
    for (uint32_t m = 0; s == ZERO_OK && m < gas && empty_m == gas; m++)
        if (v[4 * (size_t)n + m] == -1) empty_m = m; /* no rank reported anything in micro-step m */
    const int find_unused = zero__config_find_unused(e->cfg), strict = e->rc->strict_grads;
    const unsigned long long step = (unsigned long long)e->global_step + 1;
    char names[600] = "";
    if (s != ZERO_OK) {
        /* the agreement failed: already the engine's error */
    } else if (empty_m < gas) {
        *verdict = find_unused && !strict ? MG_SKIP : MG_REFUSE;
        snprintf(why, len, "zero_step without any gradient: no rank reported a gradient in micro-step %u of step %llu "
                 "(a zero_step without a backward, or a second zero_step after the last one); no weight moved%s",
                 empty_m, step,
                 *verdict == MG_SKIP ? " (step skipped: zero_optimization.find_unused_parameters is set)"
                 : strict ? " (zero_optimization.strict_grads is set)"
                          : "; with zero_optimization.find_unused_parameters it is a skipped step");
    } else if (n_odd && (!find_unused || strict)) {
        *verdict = MG_REFUSE;
        s = name_ranks(e, odd, names, sizeof names);
        snprintf(why, len, "zero_step: gradients arrived on some ranks and not on others in the accumulation window "
                 "of step %llu: %s%s; no weight moved and the window is dropped (%s)", step, names,
                 n_odd > MG_NAMED ? " (and more)" : "",
                 strict ? "zero_optimization.strict_grads is set"
                        : "report every parameter on every rank, or set zero_optimization.find_unused_parameters "
                          "to count a missing gradient as zero, as torch DDP's find_unused_parameters does");
    } else if (strict) {
        *verdict = MG_REFUSE;
        list_params(e, unused, names, sizeof names);
        snprintf(why, len, "zero_step: gradients never arrived for %u param(s) on any rank (%s) in the accumulation "
                 "window of step %llu, and zero_optimization.strict_grads is set; no weight moved", n_unused, names,
                 step);
    } else {
        /* allowed: zeros were delivered; say so, every rank alike */
        if (n_odd && (s = name_ranks(e, odd, names, sizeof names)) == ZERO_OK)
            zero__log(e, ZERO_LOG_WARN, "gradients missing on some ranks in the accumulation window of step %llu count "
                      "as zero (zero_optimization.find_unused_parameters): %s%s", step, names,
                      n_odd > MG_NAMED ? " (and more)" : "");
        for (uint32_t i = 0; i < n; i++)
            if (unused[i])
                zero__log(e, ZERO_LOG_WARN, "gradient of '%s' never arrived (on any rank) in %lld of the %u "
                          "micro-step(s) of step %llu; treating it as zero", e->params[i]->name,
                          (long long)v[4 * i], gas, step);
    }
    free(v);
    free(odd);
    free(unused);
    return s;
}

zero_status zero__grads_settle(zero_engine *e, int hp_refused, int host_written, int args_refused, int *verdict,
                               char *why, size_t len) {
    *verdict = MG_PROCEED;
    zero_status local = deliver_missing(e, 1);
    if (e->micro_step + 1 < (uint32_t)e->rc->grad_accum_steps) return local; /* agreed at the boundary */
    /* bit 63: a rank failed delivering (every rank stops, none hangs);
     * bit 62: a rank refused the step's hyper-parameters (hparams.c), bit
     * 61: a rank found a host-owned tensor written by its host
     * (host_owned.c); bit 60 (1.8): a rank refused its zero_step_args:
     * the others must hear of any of them before they enter the plugin's
     * collectives */
    const uint64_t FAILED = (uint64_t)1 << 63, HP = (uint64_t)1 << 62, HW = (uint64_t)1 << 61, AR = (uint64_t)1 << 60;
    uint64_t any = (e->gwin ? e->gwin->total : 0) | (local != ZERO_OK ? FAILED : 0) | (hp_refused ? HP : 0) |
                   (host_written ? HW : 0) | (args_refused ? AR : 0);
    /* over every pipeline stage too: a refusal must reach ranks that are
     * about to meet this one in a world-wide collective */
    zero_status s = zero__allreduce(e->global, &any, 1, ZERO_DTYPE_U64, ZERO_OP_MAX);
    if (s == ZERO_OK && any & FAILED)
        s = local != ZERO_OK ? local
                             : zero__error(e, ZERO_ERR_STATE, "zero_step: another rank failed to deliver a missing "
                                           "gradient; this micro-step is abandoned");
    if (s == ZERO_OK && any & (HP | HW | AR)) {
        /* the window is kept as it is (its missing-gradient record too):
         * the host fixes the value and calls zero_step again */
        *verdict = MG_HOLD;
        if (any & AR)
            snprintf(why, len, "zero_step: another rank refused its zero_step_args (a field of a newer header set, or "
                     "reserved0 not 0: see its message); no weight moved, the window is kept for a retry");
        else if (any & HP)
            snprintf(why, len, "zero_step: another rank refused the hyper-parameters of step %llu (a non-finite or "
                     "out-of-range lr, weight decay, beta or eps: see its message); no weight moved, the window is "
                     "kept for a retry", (unsigned long long)e->global_step + 1);
        else
            snprintf(why, len, "zero_step: another rank found a parameter written by its host after "
                     "zero_params_done (see its message); no weight moved, the window is kept");
        return ZERO_OK;
    }
    any &= ~(FAILED | HP | HW | AR);
    if (s == ZERO_OK && any) s = judge_window(e, verdict, why, len);
    if (s == ZERO_OK && any && e->global != e->world) { /* a pipeline: every stage takes the strictest verdict */
        uint64_t v = (uint64_t)*verdict;
        if ((s = zero__allreduce(e->global, &v, 1, ZERO_DTYPE_U64, ZERO_OP_MAX)) == ZERO_OK && (int)v != *verdict)
            snprintf(why, len, "zero_step: another pipeline stage %s its window (see its ranks' messages); no "
                     "weight moved", v == MG_REFUSE ? "refused" : "skipped");
        *verdict = (int)v;
    }
    if (e->gwin) gwin_clear(e->gwin); /* the window is settled, whatever the verdict */
    return s;
}


zero_status zero__grads_fill_unrecorded(zero_engine *e) { return deliver_missing(e, 0); }

void zero__grad_window_drop(zero_engine *e) {
    if (e->gwin) gwin_clear(e->gwin);
}

uint32_t zero__grads_reported(const zero_engine *e, const char **first) {
    uint32_t n = 0;
    if (first) *first = NULL;
    for (uint32_t i = 0; i < e->nparams; i++) {
        const struct zero_param *p = e->params[i];
        if (!atomic_load(&p->ready) && !(p->stack_layers && atomic_load(&p->slices_ready))) continue;
        if (!n++ && first) *first = p->name;
    }
    return n;
}
