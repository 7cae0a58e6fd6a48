/* The gather engine's internals, shared by kit/gather_*.c only (not
 * installed).  A contract header: the files that use it depend on each
 * other one way only:
 *   gather_order.c   traces and phase names        (uses nothing)
 *   gather_pool.c    buffers: pool, budget, drop    (uses nothing)
 *   gather_agree.c   the order agreement            (uses nothing)
 *   gather_engine.c  gather/release/settle/prefetch/phases/create
 *                                                   (uses the three above)
 *   gather_plan.c    the pool's peak, replayed for a plan (uses nothing:
 *                    only ZERO_KIT__PREFETCH_WALK)
 * Threads: the engine thread only (zero_kit_gather.h). */
#ifndef ZERO_KIT_GATHER_INTERNAL_H
#define ZERO_KIT_GATHER_INTERNAL_H
#include <stddef.h>
#include <stdint.h>

#include "zero_kit_gather.h"

/* Trace entries prefetch looks at per call: bounds the cost on long
 * traces (gather_engine.c; gather_plan.c replays the same walk). */
#define ZERO_KIT__PREFETCH_WALK 1024

/* Per-param state.  Owned by the engine, create to destroy. */
/* A unit is what one fetch assembles: a whole param (units 0..nwhole, the
 * param's index) or (1.7) one slice of a stacked param (units nwhole..,
 * stack_layers per stacked param, in registration order). */
typedef struct zero_kit__gp {
    const zero_param_info *info; /* the param (a slice's stacked param) */
    uint64_t numel;        /* elements of the unit: info->numel, or a slice's */
    uint64_t offset;       /* where the unit starts in the param (elements): 0, or layer * numel */
    uint32_t unit;         /* its index in g->params */
    uint32_t layer;        /* a slice's layer; UINT32_MAX for a whole param */
    void *buf;             /* full-tensor buffer, or NULL (released) */
    size_t buf_cap;        /* bytes of buf */
    zero_comm_req *req;    /* in-flight fetch into buf, or NULL */
    int landing;           /* a fetch was issued and its landed callback is still due */
    int fresh;             /* buf holds (or will hold once req completes) the current values */
    int holds;             /* host gathers not yet released */
    int persistent;        /* numel < persistence threshold: buf is permanent */
    int alias;             /* buf is the strategy's memory (ops.alias): never fetched, stale or freed */
    int prefetched;        /* issued by prefetch and not yet consumed by a host gather */
    size_t last_pos;       /* trace position of the latest host gather of this param */
    int kept;              /* released but kept for reuse: evictable */
    int listed;            /* in g->kept (entries go stale when kept ends; victim() prunes) */
    int ended;             /* still held by the host when zero_step / zero_load ended every gather */
} zero_kit__gp;

/* A gather order: param indices in request order, with what prefetch and
 * the reuse-distance rule need precomputed. */
typedef struct zero_kit__trace {
    uint32_t *idx;
    size_t len, cap;
    int64_t *next;         /* next position of the same param, -1 if none (built by finish) */
    uint64_t *prefix;      /* prefix[k] = numel of idx[0..k) (len + 1 entries) */
    int valid;             /* finished and usable for prefetch */
} zero_kit__trace;

/* Free gather buffers kept for reuse, and the budget. */
typedef struct zero_kit__pool {
    void **bufs;
    size_t *caps;
    size_t n, cap;
    uint64_t allocated;    /* bytes of non-persistent gather buffers (in use + cached) */
    uint64_t cached;       /* bytes of those that sit in the cache */
    uint64_t persistent;   /* bytes of persistent-param buffers */
    uint64_t limit;        /* the budget: min(limit_bytes, cap_bytes) */
    uint64_t user_limit;   /* the limit the config set (UINT64_MAX: none): only exceeding it warns */
    int warned_over;       /* the user's limit: warned once */
    int noted_cap;         /* the implicit cap: noted once at DEBUG */
} zero_kit__pool;

/* A phase's recorded order, kept while another phase runs. */
#define ZERO_KIT__MAX_PHASES 64
typedef struct zero_kit__phase {
    char name[64];
    zero_kit__trace trace; /* empty for the active phase: its order is g->trace */
} zero_kit__phase;

struct zero_kit_gather {
    const zero_services *svc;
    zero_core *c;
    zero_kit_gather_spec spec;
    int rank, nranks;      /* in spec.comm */
    size_t esize;
    zero_kit__gp *params;  /* every unit */
    uint32_t nparams;      /* units: whole params, then slices */
    uint32_t nwhole;       /* registered params (svc->nparams) */
    uint32_t *slice_base;  /* per param: its first slice unit, or UINT32_MAX when not stacked */
    zero_kit__pool pool;

    zero_kit__trace trace;  /* the recorded order prefetch follows */
    zero_kit__trace record; /* what this micro-step actually gathered */
    size_t pos;             /* params gathered so far this micro-step */
    size_t verified;        /* record[0..verified) is proved identical on every rank */
    uint64_t req_hash;      /* FNV-1a over record[0..pos) */
    int on_track;           /* trace valid and every request so far matched it */
    int warned_divergence;
    uint64_t prefetch_outstanding; /* elements prefetched, not yet consumed */
    uint32_t *kept;         /* params with kept set (and possibly stale entries: kept 0), any order */
    size_t n_kept, kept_cap;
    uint64_t live_hash;     /* sum over params holding a non-persistent buffer (agreement) */
    zero_kit__phase *phases; /* every phase named so far; [0] is "train" */
    uint32_t nphases, cur_phase;

    uint64_t prefetch_numel, max_reuse, persist_below;
    uint64_t largest_bytes;
    uint64_t micro_steps;
    uint64_t n_gathers, n_prefetched, n_resident, n_demand, n_agreements;
};

#define ZERO_KIT__FNV_OFFSET 1469598103934665603ull

/* A param's term in live_hash (the agreement's live buffer set). */
static inline uint64_t zero_kit__live_term(uint32_t idx) { return ((uint64_t)idx + 1) * 0x9e3779b97f4a7c15ull; }

/* ---- gather_order.c ------------------------------------------------------ */
int zero_kit__trace_push(zero_kit__trace *t, uint32_t idx);
/* Build next[] and prefix[] and mark valid; 0 or -1 (no memory). */
int zero_kit__trace_finish(zero_kit__trace *t, const zero_kit__gp *params, uint32_t nparams);
void zero_kit__trace_clear(zero_kit__trace *t); /* len = 0, invalid; keeps memory */
void zero_kit__trace_free(zero_kit__trace *t);
void zero_kit__trace_swap(zero_kit__trace *a, zero_kit__trace *b);
/* A unit's name for messages: the param's name, or "name[layer L]" for a
 * slice of a stacked param (so a mismatch names the layer, not only the
 * stack); "(nothing)" for an index out of range.  Written into buf (len
 * bytes, ZERO_KIT__UNIT_NAME is enough for names up to 127 characters);
 * returns buf. */
#define ZERO_KIT__UNIT_NAME 160
const char *zero_kit__unit_name(const zero_kit_gather *g, int64_t idx, char *buf, size_t len);
/* Phase table: the active phase's name ("train" before any), lookup/add,
 * free. */
const char *zero_kit__phase_name(const zero_kit_gather *g);
int zero_kit__phase_find_or_add(zero_kit_gather *g, const char *phase, uint32_t *at);
void zero_kit__phases_free(zero_kit_gather *g);

/* ---- gather_pool.c ------------------------------------------------------- */
/* Take a buffer of at least `bytes` for a non-persistent param (best fit
 * within 2x from the cache; a new allocation first frees cached ones to
 * stay in the budget, then evicts kept buffers whose next use in the
 * recorded order comes after trace position `horizon`, the farthest
 * first).  If it still does not fit: `demand` 0 (prefetch) gives NULL;
 * `demand` 1 (horizon ignored: any kept buffer goes) exceeds the budget
 * (warned once past a user limit, noted once past the implicit cap). */
void *zero_kit__pool_get(zero_kit_gather *g, size_t bytes, int demand, size_t horizon, size_t *cap_out);
/* Would zero_kit__pool_get(g, bytes, 0, horizon, ...) succeed?  No side
 * effect. */
int zero_kit__pool_could_get(const zero_kit_gather *g, size_t bytes, size_t horizon);
/* Keep p's released buffer for reuse (evictable by pool_get); 0, or -1
 * when the list cannot grow (the caller drops the buffer instead). */
int zero_kit__keep(zero_kit_gather *g, zero_kit__gp *p);
void zero_kit__pool_put(zero_kit_gather *g, void *buf, size_t cap);
void zero_kit__pool_drain(zero_kit_gather *g);
/* Wait for p's in-flight fetch (landed runs); the request's or landed's
 * status.  No-op without one. */
zero_status zero_kit__finish_fetch(zero_kit_gather *g, zero_kit__gp *p);
/* Give a non-persistent param's buffer back to the pool (its fetch
 * finished first). */
void zero_kit__drop_buffer(zero_kit_gather *g, zero_kit__gp *p);

/* ---- gather_agree.c ------------------------------------------------------ */
/* Cross-rank agreement on record[verified..len) and the live buffer set
 * (one I64 MAX all-reduce of a fixed shape); sets verified on success. */
zero_status zero_kit__agree(zero_kit_gather *g, const char *where);
#endif
