/* Planned staging of a bucket set: the bucket engine's sizing and slot pool
 * replayed without memory or communication (see plan.h).
 *
 * Why a replay and not a formula: the pool's size follows from the bucket
 * extents (largest param extent as a floor, flat/8 as a cap, the budget of
 * what partitioning saves) and from which slot each bucket takes in
 * acquire_slot, so the only exact answer is to run the same decisions.  The
 * functions below mirror core/buckets.c (build_group,
 * staging_budget, acquire_slot, advance); tests/plan compares the result
 * with the accountant's measured peak for every plugin, so a change there
 * that is not made here fails a test instead of drifting silently.
 *
 * Hook order assumed: bucket order (backward produces the last params
 * first, and buckets are built in reverse flat order), one bucket's params
 * finished before the next bucket's first slot is asked for.  Completion is
 * lazy (a reduction is waited for only when its slot is needed or at the
 * flush), as in the engine when no on_block_final callback is set; with one
 * (offload) finished buckets may be reaped earlier and the pool can end
 * smaller than planned, never larger.  SCATTER's double buffer is made at
 * create at its final size (buckets.c zero__buckets_create), so the replay
 * starts from those slots.  zero__plan_ring_scratch_bytes (at the end) is
 * not a replay: the largest single reduction's ring scratch, which the MPI
 * progress engine's scratch budget makes the peak (docs/planner.md). */
#include <limits.h>
#include <stdlib.h>

#include "bucket_plan.h"
#include "env.h"
#include "layout.h"
#include "plan_buckets.h"

typedef struct sim {
    uint64_t *cap;      /* slot capacities (elements) */
    int *busy;          /* slot holds an unfinished bucket */
    uint32_t nslots;
    int *fifo_slot;     /* in-flight buckets' slots, launch order */
    uint32_t fifo_head, fifo_len, fifo_size;
    uint64_t stage_cap, budget, peak;
} sim;

/* Where the extent of param j of group g starts, in flat order, as the
 * engine walks them (the first param absorbs a head gap). */
static uint64_t extent_lo(const zero_layout *L, const uint64_t *off, uint32_t g, uint32_t j) {
    const zero_layout_group *lg = &L->groups[g];
    return j == 0 ? lg->flat_begin : off[L->param_order[lg->first_param + j]];
}

/* The bucket plan's view of the params (as buckets.c fills b->pm): offset,
 * numel, layout group.  malloc'd; NULL when out of memory. */
static zero__bplan_param *plan_params(const zero_layout *L, const uint64_t *param_offset,
                                      const uint64_t *param_numel, uint32_t nparams) {
    zero__bplan_param *pm = calloc(nparams ? nparams : 1, sizeof *pm);
    for (uint32_t i = 0; pm && i < nparams; i++) {
        pm[i].offset = param_offset[i];
        pm[i].numel = param_numel ? param_numel[i] : 0;
        int g = zero__layout_group_of(L, pm[i].offset);
        pm[i].group = g < 0 ? 0 : (uint32_t)g;
    }
    return pm;
}

/* buckets.c build_group, keeping only the bucket sizes (in bucket order). */
static int push(uint64_t **v, uint32_t *n, uint32_t *cap, uint64_t x) {
    if (*n == *cap) {
        uint32_t nc = *cap ? *cap * 2 : 16;
        uint64_t *nv = realloc(*v, nc * sizeof *nv);
        if (!nv) return -1;
        *v = nv;
        *cap = nc;
    }
    (*v)[(*n)++] = x;
    return 0;
}

static int build(const zero_layout *L, const uint64_t *off, const zero_bucket_spec *spec, uint64_t B,
                 const uint8_t *in_set, uint64_t **out, uint32_t *nb) {
    uint32_t cap = 0;
    const uint32_t last = zero__bucket_plan_last_group(L);
    const uint64_t slack = zero__bucket_plan_slack(L, off, B, spec->mode == ZERO_BUCKETS_SCATTER);
    /* bucket_plan.c's order: param groups in order, the layout groups (stripes) of one from the top down */
    for (uint32_t g0 = 0, g1; g0 < L->ngroups; g0 = g1) {
        for (g1 = g0 + 1; g1 < L->ngroups && L->groups[g1].group_id == L->groups[g0].group_id;) g1++;
        for (uint32_t g = g1; g-- > g0;) {
            const zero_layout_group *lg = &L->groups[g];
            if (lg->nparams == 0 || lg->numel == 0) continue;
            if (in_set && !in_set[g]) continue; /* buckets.c keep_own_groups: another set's group */
            const uint32_t tail = g == last ? zero__bucket_plan_tail(L, off, g, B) : 0;
            uint64_t cur_hi = lg->flat_begin + lg->numel, cur_lo = cur_hi;
            uint32_t parts = 0;
            for (uint32_t j = lg->nparams; j-- > 0;) {
                uint64_t lo = extent_lo(L, off, g, j), top = cur_lo;
                if (parts > 0 &&
                    ((cur_hi - lo > B && !zero__bucket_plan_merges(cur_hi - cur_lo, top - lo, B, slack)) ||
                     j + 1 == tail)) {
                    if (push(out, nb, &cap, cur_hi - cur_lo)) return -1;
                    cur_hi = cur_lo;
                    parts = 0;
                }
                if (spec->mode != ZERO_BUCKETS_SCATTER && top - lo > B) {
                    while (top - lo > B) {
                        if (push(out, nb, &cap, B)) return -1;
                        top -= B;
                    }
                    cur_hi = top;
                    cur_lo = lo;
                    parts = 1;
                    continue;
                }
                cur_lo = lo;
                parts++;
            }
            if (parts > 0 && push(out, nb, &cap, cur_hi - cur_lo)) return -1;
        }
    }
    return 0;
}

static void complete_oldest(sim *s) {
    int sl = s->fifo_slot[s->fifo_head];
    s->fifo_head = (s->fifo_head + 1) % s->fifo_size;
    s->fifo_len--;
    if (sl >= 0) s->busy[sl] = 0;
}

/* buckets.c acquire_slot; returns the slot or -1 (no memory). */
static int acquire(sim *s, uint64_t n) {
    for (;;) {
        int fit = -1, small = -1;
        for (uint32_t i = 0; i < s->nslots; i++) {
            if (s->busy[i]) continue;
            if (s->cap[i] >= n) {
                if (fit < 0 || s->cap[i] < s->cap[fit]) fit = (int)i;
            } else if (small < 0 || s->cap[i] > s->cap[small]) {
                small = (int)i;
            }
        }
        if (fit >= 0) {
            s->busy[fit] = 1;
            return fit;
        }
        const uint64_t freed = small >= 0 ? s->cap[small] : 0;
        const int room = s->stage_cap - freed + n <= s->budget && (small >= 0 || s->nslots < 2);
        if (room || s->fifo_len == 0) {
            int i = small;
            if (i < 0) {
                uint64_t *nc = realloc(s->cap, (s->nslots + 1) * sizeof *nc);
                if (nc) s->cap = nc;
                int *nbz = nc ? realloc(s->busy, (s->nslots + 1) * sizeof *nbz) : NULL;
                if (nbz) s->busy = nbz;
                if (!nc || !nbz) return -1;
                i = (int)s->nslots++;
                s->cap[i] = 0;
            }
            s->stage_cap = s->stage_cap - s->cap[i] + n;
            if (s->stage_cap > s->peak) s->peak = s->stage_cap;
            s->cap[i] = n;
            s->busy[i] = 1;
            return i;
        }
        complete_oldest(s);
    }
}

/* buckets.c wire_setup: fp32 gradients over a 16-bit communication dtype */
static int wire16_of(zero_dtype gdt, zero_dtype comm_dtype) {
    return gdt == ZERO_DTYPE_F32 && (comm_dtype == ZERO_DTYPE_BF16 || comm_dtype == ZERO_DTYPE_F16);
}

uint64_t zero__plan_buckets_bytes(const zero_layout *L, const uint64_t *param_offset, const uint64_t *param_numel,
                                  const zero_bucket_spec *spec, int striped, zero_dtype comm_dtype,
                                  const uint8_t *in_set, uint32_t set_world) {
    if (!L || !spec || L->flat_numel == 0) return 0;
    const zero_dtype gdt = spec->grad_dtype; /* complete: plugin_abi.c adopted it */
    const int mixed = gdt != ZERO_DTYPE_F32, wire16 = wire16_of(gdt, comm_dtype);
    if (!zero__bucket_set_exchanges(set_world, mixed, L->world)) return 0; /* world 1 stages nothing */
    if (spec->mode != ZERO_BUCKETS_SCATTER && !mixed && !wire16) return 0; /* fp32 in-place modes allocate nothing */
    const uint64_t es = mixed ? 2 : 4;
    const uint64_t per = (spec->mode == ZERO_BUCKETS_SCATTER ? es : 0) + (mixed ? 4 : 0) + (wire16 ? 2 : 0);

    uint64_t *nb_sz = NULL;
    uint32_t nb = 0;
    /* buckets.c: the set's bucket size (bucket_plan.c, the engine's own function) */
    zero__bplan_param *pm = plan_params(L, param_offset, param_numel, L->nparams);
    if (!pm) return 0;
    const uint64_t B = zero__bucket_plan_size(L, pm, spec->bucket_numel, spec->mode == ZERO_BUCKETS_SCATTER,
                                              mixed || wire16, striped, in_set);
    free(pm);
    if (build(L, param_offset, spec, B, in_set, &nb_sz, &nb) != 0 || nb == 0) {
        free(nb_sz);
        return 0;
    }
    sim s = {0};
    uint64_t slot_cap = 0;
    for (uint32_t k = 0; k < nb; k++)
        if (nb_sz[k] > slot_cap) slot_cap = nb_sz[k];
    if (spec->mode == ZERO_BUCKETS_SCATTER) { /* buckets.c staging_budget: what this set's groups save */
        uint64_t saved = 0;
        for (uint32_t g = 0; g < L->ngroups; g++)
            if (!in_set || in_set[g]) saved += L->groups[g].numel - L->groups[g].part_numel;
        const uint64_t budget = saved * es / (es + (mixed ? 4 : 0) + (wire16 ? 2 : 0));
        s.budget = budget > slot_cap ? budget : slot_cap;
    } else {
        s.budget = UINT64_MAX;
    }
    s.fifo_size = nb;
    s.fifo_slot = calloc(nb, sizeof *s.fifo_slot);
    /* buckets.c zero__buckets_create: SCATTER (world > 1 here) allocates its
     * double buffer at create at its final size, the largest bucket; the
     * second slot only when there are two buckets and it fits the budget */
    if (spec->mode == ZERO_BUCKETS_SCATTER && s.fifo_slot) {
        const uint32_t ns = nb > 1 && 2 * slot_cap <= s.budget ? 2 : 1;
        s.cap = calloc(ns, sizeof *s.cap);
        s.busy = calloc(ns, sizeof *s.busy);
        if (!s.cap || !s.busy) goto out;
        for (uint32_t i = 0; i < ns; i++) s.cap[i] = slot_cap;
        s.nslots = ns;
        s.stage_cap = s.peak = (uint64_t)ns * slot_cap;
    }
    /* SCATTER without overlap reduces each bucket as it fills (advance);
     * everything else completes lazily */
    const int eager = spec->mode == ZERO_BUCKETS_SCATTER && !spec->overlap;
    uint64_t last = UINT64_MAX;
    /* slots only grow, so a few passes reach the steady state */
    for (int pass = 0; s.fifo_slot && pass < 8 && s.peak != last; pass++) {
        last = s.peak;
        for (uint32_t k = 0; k < nb; k++) {
            if (nb_sz[k] == 0) continue; /* nothing to stage or reduce */
            int sl = acquire(&s, nb_sz[k]);
            if (sl < 0) goto out;
            s.fifo_slot[(s.fifo_head + s.fifo_len) % s.fifo_size] = sl;
            s.fifo_len++;
            if (eager)
                while (s.fifo_len) complete_oldest(&s);
        }
        while (s.fifo_len) complete_oldest(&s); /* the flush */
    }
out:;
    const uint64_t bytes = s.peak * per;
    free(s.cap);
    free(s.busy);
    free(s.fifo_slot);
    free(nb_sz);
    return bytes;
}

/* comm_mpi_progress.c: ZERO_COMM_CHUNK_KB (default 512) and
 * ZERO_COMM_WINDOW (default 8), read by the same table (env.c) so that the
 * plan follows the process's settings: a value out of range is the default
 * in both (the plan used to clamp it while the ring used the default). */
static long plan_env_long(const char *name, long def) {
    long v = def;
    return zero__env_long(name, &v) == 1 ? v : def;
}

uint64_t zero__plan_ring_scratch_bytes(const zero_layout *L, const uint64_t *param_offset, const uint64_t *param_numel,
                                       uint32_t nparams, const zero_bucket_spec *spec, int striped,
                                       zero_dtype comm_dtype, const uint8_t *in_set, uint32_t set_world) {
    if (!L || !spec || set_world <= 1 || L->flat_numel == 0) return 0; /* world 1: no ring, no scratch */
    const zero_dtype gdt = spec->grad_dtype; /* complete: plugin_abi.c adopted it */
    const int mixed = gdt != ZERO_DTYPE_F32, scatter = spec->mode == ZERO_BUCKETS_SCATTER;
    const int wire16 = wire16_of(gdt, comm_dtype);
    /* bucket reductions run in fp32, or in the 16-bit wire dtype (buckets.c launch) */
    const uint64_t esz = wire16 ? 2 : 4;
    const uint64_t chunk_bytes = (uint64_t)plan_env_long("ZERO_COMM_CHUNK_KB", 512) * 1024u;
    const uint64_t window = (uint64_t)plan_env_long("ZERO_COMM_WINDOW", 8);
    uint64_t chunk = chunk_bytes / esz ? chunk_bytes / esz : 1;
    if (chunk > (uint64_t)INT_MAX / esz) chunk = (uint64_t)INT_MAX / esz;
    const uint32_t N = set_world;
    const uint64_t nbufs = N - 2 > 2 ? 2 : N - 2; /* forwarding steps - 1, at most 2 buffers */
    /* fp32 ALLREDUCE always reduces in place (iallreducev); the other modes
     * reduce a bucket straight into the partition at a window start (no
     * last-step slots) and in place otherwise: both are counted */
    const int both = !(spec->mode == ZERO_BUCKETS_ALLREDUCE && !mixed);

    zero__bplan_param *pm = plan_params(L, param_offset, param_numel, nparams);
    if (!pm) return 0;
    zero__bucket_plan bp = {0};
    const uint64_t B = zero__bucket_plan_size(L, pm, spec->bucket_numel, scatter, mixed || wire16, striped, in_set);
    uint64_t worst = 0;
    if (zero__bucket_plan_build(&bp, L, pm, B, scatter) == ZERO_OK) {
        for (uint32_t r = 0; r < N; r++) {
            uint64_t sum = 0;
            for (uint32_t k = 0; k < bp.nb; k++) {
                if (in_set && !in_set[bp.b[k].group]) continue; /* another set's reduction */
                uint64_t maxc = 0, mine = 0;
                for (uint32_t q = 0; q < N; q++) {
                    uint64_t lo, n, pos;
                    zero__bucket_plan_block(L, &bp.b[k], q, &lo, &n, &pos);
                    if (n > maxc) maxc = n;
                    if (q == r) mine = n;
                }
                if (!maxc) continue;
                /* rs_setup: in place, the last step lands in min(maxc,
                 * window x chunk) slot elements unless this rank's block is
                 * empty; forwarded partial sums take nbufs x maxc */
                const uint64_t span = window * chunk < maxc ? window * chunk : maxc;
                const uint64_t inplace = nbufs * maxc + (mine ? span : 0);
                /* the progress engine's scratch budget (comm_mpi_progress.c,
                 * issue 14) keeps held + cached scratch at the largest single
                 * reduction's need: the peak is a max, not a sum over the
                 * reductions in flight.  The direct set (recv is the
                 * partition) is nbufs x maxc, never more than in place. */
                const uint64_t need = (inplace > nbufs * maxc ? inplace : nbufs * maxc) * esz;
                if (need > sum) sum = need;
                (void)both;
            }
            if (sum > worst) worst = sum;
        }
        zero__bucket_plan_free(&bp);
    }
    free(pm);
    return worst;
}
