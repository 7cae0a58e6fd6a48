/* stage3's plan (ABI 1.2 table entry `plan`): what params_done allocates
 * (shard, master, gradient partition, optimizer states, persistent gather
 * buffers, bucket staging) and the peak of the gather-buffer pool, found by
 * replaying the pool's decisions for the canonical host.
 *
 * Why a replay: the pool's high-water mark follows from which buffer each
 * gather reuses (best fit within 2x), what prefetch fetches ahead
 * (stage3_prefetch_bucket_size, refilled below half), what a release keeps
 * for reuse (stage3_max_reuse_distance) and the max_live limit; no closed
 * formula gives it.  The replay below mirrors the kit's gather engine
 * (kit/gather_engine.c, kit/gather_pool.c) decision for decision (without
 * memory or communication);
 * tests/plan checks it against the accountant's measured peak.
 *
 * Canonical host (docs/planner.md): every micro-step gathers each param
 * alone in registration order and releases it (forward), then the same in
 * reverse order (backward), then zero_step; boundaries every
 * gradient_accumulation_steps micro-steps.  A host that holds several
 * params at once needs more, up to stage3_max_live_parameters.
 * Pure; thread-safe. */
#include <stdlib.h>
#include <string.h>

#include "stage3.h"
#include "stage3_tiers.h"

#define PLAN_PREFETCH_WALK 1024 /* kit/gather_engine.c PREFETCH_WALK */
#define PLAN_MICRO_STEPS 8      /* the pool only grows; a few windows reach its steady state */

typedef struct sp_param {
    uint64_t numel;
    size_t cap;      /* buffer bytes, 0 = none */
    int has_buf, fresh, holds, prefetched, persistent;
    size_t last_pos;
} sp_param;

typedef struct sp {
    sp_param *p;
    uint32_t n;
    size_t esize;
    size_t *cache;   /* cached buffer capacities */
    size_t ncache, cache_cap;
    uint64_t allocated, cached, persistent, limit, acct_persistent, peak;
    uint32_t *trace; /* fwd + bwd order */
    size_t len;
    int64_t *next;
    uint64_t *prefix;
    int on_track;
    size_t pos;
    uint64_t outstanding, prefetch_numel, max_reuse;
} sp;

static void put(sp *s, size_t cap) { /* zero_kit__pool_put */
    if (s->ncache == s->cache_cap) {
        size_t nc = s->cache_cap ? s->cache_cap * 2 : 16;
        size_t *v = realloc(s->cache, nc * sizeof *v);
        if (!v) { /* cannot cache: freed, as the pool does */
            s->allocated -= cap;
            return;
        }
        s->cache = v;
        s->cache_cap = nc;
    }
    s->cache[s->ncache++] = cap;
    s->cached += cap;
}

static void free_cached(sp *s, size_t i) {
    s->allocated -= s->cache[i];
    s->cached -= s->cache[i];
    s->cache[i] = s->cache[--s->ncache];
}

static int free_largest(sp *s) {
    if (!s->ncache) return 0;
    size_t best = 0;
    for (size_t i = 1; i < s->ncache; i++)
        if (s->cache[i] > s->cache[best]) best = i;
    free_cached(s, best);
    return 1;
}

static void drop(sp *s, sp_param *p) { /* zero_kit__drop_buffer */
    if (!p->has_buf || p->persistent) return;
    put(s, p->cap);
    p->has_buf = 0;
    p->cap = 0;
    p->fresh = 0;
}

/* kit/gather_pool.c next_use / victim / evict_kept: of the released
 * (kept) buffers used again after `horizon`, the one used again the latest
 * among those large enough to make the room alone, else the largest; ties
 * by index.  It goes to the cache, where best_fit takes it. */
static size_t next_use(const sp *s, const sp_param *p) {
    if (!s->on_track || p->last_pos >= s->len || s->next[p->last_pos] < 0) return SIZE_MAX;
    return (size_t)s->next[p->last_pos];
}

static int evictable(const sp_param *p) { return p->has_buf && !p->persistent && !p->holds && !p->prefetched; }

static int evict_kept(sp *s, size_t horizon, uint64_t short_by) {
    uint32_t best = UINT32_MAX;
    size_t best_next = 0, best_cap = 0;
    int best_big = 0;
    for (uint32_t i = 0; i < s->n; i++) { /* index order: ties go to the lower index */
        const sp_param *p = &s->p[i];
        if (!evictable(p)) continue;
        const size_t nx = next_use(s, p);
        const int big = p->cap >= short_by;
        if (nx <= horizon) continue;
        int better = best == UINT32_MAX || big > best_big;
        if (!better && big == best_big)
            better = (!big && p->cap != best_cap) ? p->cap > best_cap : nx > best_next;
        if (better) {
            best = i;
            best_next = nx;
            best_cap = p->cap;
            best_big = big;
        }
    }
    if (best == UINT32_MAX) return 0;
    drop(s, &s->p[best]);
    return 1;
}

static int fits(const sp *s, size_t b) { return s->allocated + s->persistent + b <= s->limit; }

static size_t best_fit(const sp *s, size_t b) {
    size_t best = (size_t)-1;
    for (size_t i = 0; i < s->ncache; i++)
        if (s->cache[i] >= b && s->cache[i] / 2 <= b && (best == (size_t)-1 || s->cache[i] < s->cache[best]))
            best = i;
    return best;
}

static int could_get(const sp *s, size_t b, size_t horizon) {
    if (best_fit(s, b) != (size_t)-1) return 1;
    uint64_t need = s->allocated - s->cached + s->persistent + b;
    for (uint32_t i = 0; i < s->n && need > s->limit; i++) {
        const sp_param *p = &s->p[i];
        if (evictable(p) && next_use(s, p) > horizon) {
            if (p->cap >= b && p->cap / 2 <= b) return 1;
            need -= p->cap < need ? p->cap : need;
        }
    }
    return need <= s->limit;
}

/* zero_kit__pool_get: the capacity taken, or 0 when a prefetch must stop. */
static size_t get(sp *s, size_t b, int demand, size_t horizon) {
    if (!demand && !could_get(s, b, horizon)) return 0;
    for (;;) {
        size_t best = best_fit(s, b);
        if (best != (size_t)-1) {
            size_t cap = s->cache[best];
            s->cached -= cap;
            s->cache[best] = s->cache[--s->ncache];
            return cap;
        }
        if (fits(s, b)) break;
        if (free_largest(s)) continue;
        if (evict_kept(s, demand ? 0 : horizon, s->allocated + s->persistent + b - s->limit)) continue;
        if (!demand) return 0;
        break;
    }
    s->allocated += b;
    /* the accountant records max(bytes, 1) */
    uint64_t live = s->acct_persistent + s->allocated;
    if (live > s->peak) s->peak = live;
    return b ? b : 1;
}

static int issue(sp *s, sp_param *p, int demand, size_t horizon) {
    if (p->has_buf && p->fresh) return 1;
    if (!p->has_buf) {
        size_t cap = get(s, (size_t)p->numel * s->esize, demand, horizon);
        if (!cap) return 0;
        p->cap = cap;
        p->has_buf = 1;
    }
    p->fresh = 1;
    return 1;
}

static void unmark(sp *s, sp_param *p) {
    if (!p->prefetched) return;
    p->prefetched = 0;
    s->outstanding -= p->numel;
}

static int prefetch_wanted(const sp *s) {
    if (!s->on_track || !s->prefetch_numel || s->outstanding * 2 > s->prefetch_numel) return 0;
    for (size_t k = s->pos, w = 0; k < s->len && w < PLAN_PREFETCH_WALK; k++, w++) {
        const sp_param *p = &s->p[s->trace[k]];
        if (p->has_buf && p->fresh) continue;
        if (s->outstanding + p->numel > s->prefetch_numel) return 0;
        return p->has_buf || could_get(s, (size_t)p->numel * s->esize, k);
    }
    return 0;
}

static void prefetch(sp *s) {
    if (!s->on_track || !s->prefetch_numel || !prefetch_wanted(s)) return;
    for (size_t k = s->pos, w = 0; k < s->len && w < PLAN_PREFETCH_WALK; k++, w++) {
        sp_param *p = &s->p[s->trace[k]];
        if (p->has_buf && p->fresh) continue;
        if (s->outstanding + p->numel > s->prefetch_numel) break;
        if (!issue(s, p, 0, k)) break;
        p->prefetched = 1;
        s->outstanding += p->numel;
    }
}

static void gather(sp *s, uint32_t i) {
    sp_param *p = &s->p[i];
    p->last_pos = s->pos++;
    unmark(s, p);
    p->holds++;
    issue(s, p, 1, 0);
    prefetch(s);
}

static void release(sp *s, uint32_t i) {
    sp_param *p = &s->p[i];
    if (--p->holds > 0 || p->persistent) return;
    if (s->on_track && p->last_pos < s->len && s->next[p->last_pos] >= 0 &&
        s->prefix[s->next[p->last_pos]] - s->prefix[p->last_pos + 1] <= s->max_reuse)
        return; /* kept for reuse */
    drop(s, p);
}

static void settle(sp *s) { /* the engine's settle: every micro-step follows the trace once it exists */
    for (uint32_t i = 0; i < s->n; i++) {
        s->p[i].holds = 0;
        s->p[i].prefetched = 0;
        drop(s, &s->p[i]);
    }
    s->outstanding = 0;
    s->pos = 0;
    s->on_track = 1;
}

/* Peak bytes of gather buffers (persistent + pool) for the canonical host. */
static uint64_t gather_peak(const zero_plan_services *ps, size_t esize, int off_param) {
    zero_core *c = ps->core;
    const zero_run_config *rc = ps->config(c);
    sp s = {0};
    s.n = ps->nparams(c);
    s.esize = esize;
    s.limit = (uint64_t)(rc->stage3_max_live_parameters > 0 ? rc->stage3_max_live_parameters : 0) * esize;
    s.prefetch_numel = rc->stage3_prefetch_bucket_size > 0 ? (uint64_t)rc->stage3_prefetch_bucket_size : 0;
    s.max_reuse = rc->stage3_max_reuse_distance > 0 ? (uint64_t)rc->stage3_max_reuse_distance : 0;
    const uint64_t persist_below =
        rc->stage3_param_persistence_threshold > 0 ? (uint64_t)rc->stage3_param_persistence_threshold : 0;
    const zero_layout *L = ps->layout(c);
    uint64_t peak = 0;
    /* World 1: every gather aliases the shard (stage3_plugin.c setup_param):
     * no gather buffer, persistent or pooled, is ever allocated. */
    if (L->world <= 1 && !off_param) return 0; /* (offload_param: the host-tier shard is gathered from) */
    /* stage3_plugin.c s3_params_done: the budget is capped at what sharding
     * saves, prefetch clamped to it, persistence leaves room for two of the
     * largest params */
    {
        const uint64_t saved = (L->flat_numel - (off_param ? 0 : L->part_numel)) * (uint64_t)esize;
        if (s.limit > saved) s.limit = saved;
        if (s.prefetch_numel * esize > s.limit) s.prefetch_numel = s.limit / esize;
    }
    uint64_t largest_bytes = 0;
    for (uint32_t i = 0; i < s.n; i++)
        if ((uint64_t)ps->param(c, i)->numel * esize > largest_bytes)
            largest_bytes = (uint64_t)ps->param(c, i)->numel * esize;
    s.p = calloc(s.n ? s.n : 1, sizeof *s.p);
    s.len = (size_t)s.n * 2;
    s.trace = calloc(s.len ? s.len : 1, sizeof *s.trace);
    s.next = calloc(s.len ? s.len : 1, sizeof *s.next);
    s.prefix = calloc(s.len + 1, sizeof *s.prefix);
    if (!s.p || !s.trace || !s.next || !s.prefix) goto out;
    for (uint32_t i = 0; i < s.n; i++) {
        sp_param *p = &s.p[i];
        p->numel = ps->param(c, i)->numel;
        size_t b = (size_t)p->numel * esize;
        /* params_done (setup_param): a permanent buffer, in registration
         * order, while the budget still leaves room for two largest params */
        if (p->numel < persist_below && s.persistent + b + 2 * largest_bytes <= s.limit) {
            p->persistent = p->has_buf = p->fresh = 1;
            p->cap = b;
            s.persistent += b;
            s.acct_persistent += b ? b : 1;
        }
        s.trace[i] = i;
        s.trace[s.len - 1 - i] = i;
    }
    /* kit/gather_order.c trace_finish: each position's next use of its param
     * (the backward half mirrors the forward one) */
    for (size_t k = 0; k < s.len; k++) {
        s.next[k] = k < s.n ? (int64_t)(s.len - 1 - k) : -1;
        s.prefix[k + 1] = s.prefix[k] + s.p[s.trace[k]].numel;
    }
    s.peak = s.acct_persistent;
    const int64_t gas = rc->grad_accum_steps > 0 ? rc->grad_accum_steps : 1;
    /* micro-step 0 records the order (no prefetch, nothing kept) */
    for (int m = 0; m < PLAN_MICRO_STEPS; m++) {
        for (size_t k = 0; k < s.len; k++) {
            gather(&s, s.trace[k]);
            release(&s, s.trace[k]);
        }
        settle(&s);
        if ((m + 1) % gas == 0) /* boundary step: persistent buffers go stale */
            for (uint32_t i = 0; i < s.n; i++)
                if (s.p[i].persistent) s.p[i].fresh = 0;
        prefetch(&s); /* zero_kit_gather_prefetch_ahead */
    }
    peak = s.peak;
out:
    free(s.p);
    free(s.trace);
    free(s.next);
    free(s.prefix);
    free(s.cache);
    return peak;
}

/* stage3_offload.c zero__s3_off_configure, without an engine. */
static void plan_offload(const zero_plan_services *ps, int *opt, int *param, int *param_nvme) {
    const zero_run_config *rc = ps->config(ps->core);
    const char *od = NULL, *pd = NULL;
    *opt = *param = *param_nvme = 0;
    if (rc->stage != 3) return;
    if (ps->cfg_string(ps->core, "zero_optimization.offload_optimizer.device", &od) != 1) od = NULL;
    if (ps->cfg_string(ps->core, "zero_optimization.offload_param.device", &pd) != 1) pd = NULL;
    *param = pd && (strcmp(pd, "cpu") == 0 || strcmp(pd, "nvme") == 0);
    *param_nvme = pd && strcmp(pd, "nvme") == 0;
    const int want = rc->offload_optimizer || (od && (strcmp(od, "cpu") == 0 || strcmp(od, "nvme") == 0));
    if (want || *param) *opt = od && strcmp(od, "nvme") == 0 ? ZERO__S3_OFF_NVME : ZERO__S3_OFF_CPU;
}

zero_status zero__s3_plan(const zero_plan_services *ps) {
    zero_core *c = ps->core;
    const zero_run_config *rc = ps->config(c);
    const uint64_t part = ps->layout(c)->part_numel;
    const size_t es = zero__s3_dtype_size(rc->model_dtype);
    const zero_dtype gdt = rc->struct_size >= offsetof(zero_run_config, grad_accum_dtype) + sizeof(zero_dtype)
                               ? rc->grad_accum_dtype
                               : rc->model_dtype;
    /* alloc_tagged records at least one byte per block */
    const uint64_t one = part ? 0 : 1;
    /* s3_params_done's tiers (stage3_tiers.h): offload puts master,
     * states and gradients (offload_param: the shard too) in the host tier */
    int opt, oparam, pnvme;
    plan_offload(ps, &opt, &oparam, &pnvme);
    const zero_mem_tier st = opt ? ZERO_TIER_HOST : ZERO_TIER_DEVICE;
    const int nvme = opt == ZERO__S3_OFF_NVME;
    const int own_master = rc->model_dtype == ZERO_DTYPE_F32 && (opt != 0) == oparam && !nvme && !pnvme;
    if (!pnvme) ps->add(c, oparam ? ZERO_TIER_HOST : ZERO_TIER_DEVICE, ZERO_MEM_PARAMS, part * es + one);
    if (!own_master && !nvme) ps->add(c, st, ZERO_MEM_MASTER, part * 4 + one);
    ps->add(c, st, ZERO_MEM_GRADS, part * zero__s3_dtype_size(gdt) + one);
    uint64_t tile = rc->sub_group_size > 0 ? (uint64_t)rc->sub_group_size : part;
    if (tile > part) tile = part;
    if (tile == 0) tile = 1;
    if (nvme) { /* zero__s3_off_init: three aligned tile sets of master + states (written, stepped, read) */
        const uint64_t tb = (tile * 4 + ZERO__S3_NVME_ALIGN - 1) / ZERO__S3_NVME_ALIGN * ZERO__S3_NVME_ALIGN;
        ps->add(c, ZERO_TIER_HOST, ZERO_MEM_OPTIM, 3 * ((1 + ps->optim_state_count(c)) * tb + ZERO__S3_NVME_ALIGN));
    } else {
        ps->add(c, st, ZERO_MEM_OPTIM, (uint64_t)ps->optim_state_count(c) * (part * 4 + one));
    }
    if (opt && !oparam) ps->add(c, ZERO_TIER_HOST, ZERO_MEM_PARAMS, 2 * tile * es); /* copy-out staging */
    if (pnvme) { /* stage3_pwin.c: aligned staging tiles and the buffer_count window (pieces bounded by
                  * min(numel, part): an upper bound, the plan has no per-rank pieces) */
        int64_t count = 5;
        if (ps->cfg_int(c, "zero_optimization.offload_param.buffer_count", &count) != 1 || count < 2) count = 5;
        if (count > 64) count = 64;
        uint64_t piece = 0;
        for (uint32_t i = 0, n = ps->nparams(c); i < n; i++) {
            uint64_t k = ps->param(c, i)->numel < part ? ps->param(c, i)->numel : part;
            if (k > piece) piece = k;
        }
        const uint64_t A = ZERO__S3_NVME_ALIGN;
        ps->add(c, ZERO_TIER_HOST, ZERO_MEM_PARAMS,
                2 * ((tile * es + A - 1) / A * A + 2 * A) + (uint64_t)count * ((piece * es + A - 1) / A * A + 2 * A));
    }
    ps->add(c, ZERO_TIER_DEVICE, ZERO_MEM_GATHER, gather_peak(ps, es, oparam));
    zero_bucket_spec spec = {0};
    spec.struct_size = sizeof spec;
    spec.mode = ZERO_BUCKETS_SCATTER;
    spec.bucket_numel = rc->reduce_bucket_size > 0 ? (uint64_t)rc->reduce_bucket_size : 0;
    spec.overlap = rc->overlap_comm;
    spec.grad_dtype = gdt;
    spec.reduce_every_micro_step = 1;
    ps->add(c, ZERO_TIER_DEVICE, ZERO_MEM_BUCKETS, ps->buckets_bytes(c, &spec));
    if (!(gdt == rc->model_dtype && rc->contiguous_gradients)) { /* per-param temporaries, one at a time */
        uint64_t largest = 0;
        for (uint32_t i = 0, n = ps->nparams(c); i < n; i++)
            if (ps->param(c, i)->numel > largest) largest = ps->param(c, i)->numel;
        ps->add(c, ZERO_TIER_DEVICE, ZERO_MEM_GRADS, largest * es);
    }
    return ZERO_OK;
}
