/* stage3 plugin internals: shared by the files of plugins/stage3 only.
 *
 * ZeRO-3: each rank keeps only its share of the flat parameter space (in the
 * model dtype), its fp32 master (mixed precision only; for fp32 the shard is
 * its own master), its optimizer-state share and its gradient partition.
 * Full tensors exist only between zero_gather and zero_release, in buffers
 * from a pool bounded by stage3_max_live_parameters.
 *
 * Everything here runs on the host's single "engine" thread (gather,
 * release, step, save/load, destroy), except grad_buffer/on_grad_ready,
 * which touch only the (thread-safe) bucket engine and per-param temporaries.
 * No function here is thread-safe beyond that contract.
 *
 * Collective discipline (why prefetch cannot hang): every collective this
 * plugin issues outside zero_step is issued from zero_gather, after a tiny
 * agreement all-reduce has proved that every rank asked for the same params
 * in the same order so far, with the same set of live buffers.  Issue
 * decisions depend only on that agreed state and on the recorded trace
 * (itself built from agreed requests), so every rank issues the same
 * collectives in the same order.  A gather that needs no communication (all
 * params resident, nothing to prefetch) defers its verification to the next
 * agreement, at the latest the one zero_step always makes: divergence is
 * still reported on every rank, just one call later, and never after a data
 * collective was issued on unverified requests.  zero_release never
 * communicates. */
#ifndef ZERO_PLUGIN_STAGE3_H
#define ZERO_PLUGIN_STAGE3_H
#include <stddef.h>
#include <stdint.h>

#include "zero_plugin.h"

/* Per-param state, hung off zero_param_info.plugin_data.  Owned by the
 * plugin; lives from params_done to destroy. */
typedef struct zero__s3_param {
    zero_param_info *info;
    size_t *counts;        /* world entries: elements of this param each rank owns (all-gather blocks) */
    uint64_t part_lo;      /* where this rank's piece starts in the shard (valid if counts[rank] > 0) */
    uint64_t piece_off;    /* ... and where it starts in the param (elements), for the NVMe shard's init */
    void *buf;             /* full-tensor gather buffer, or NULL (released) */
    size_t buf_cap;        /* bytes of buf */
    zero_comm_req *req;    /* in-flight all-gather into buf, or NULL */
    int fresh;             /* buf holds (or will hold once req completes) the current values */
    int holds;             /* host gathers not yet released */
    int persistent;        /* numel < stage3_param_persistence_threshold: buf is permanent */
    int alias;             /* world 1: buf points into the shard (which IS the full tensor); nothing allocated,
                              never stale, never freed (docs/memory.md) */
    int prefetched;        /* issued by prefetch and not yet consumed by a host gather */
    size_t last_pos;       /* trace position of the latest host gather of this param */
    void *grad_tmp;        /* contiguous_gradients off: per-param gradient temporary */
} zero__s3_param;

/* A gather order: param indices in request order, with what prefetch and
 * the reuse-distance rule need precomputed. */
typedef struct zero__s3_trace {
    uint32_t *idx;
    size_t len, cap;
    int64_t *next;         /* next position of the same param, -1 if none (built by finish) */
    uint64_t *prefix;      /* prefix[k] = numel of idx[0..k) (len + 1 entries) */
    int valid;             /* finished and usable for prefetch */
} zero__s3_trace;

/* Free gather buffers kept for reuse. */
typedef struct zero__s3_pool {
    void **bufs;
    size_t *caps;
    size_t n, cap;
    uint64_t allocated;    /* bytes of non-persistent gather buffers (in use + cached) */
    uint64_t cached;       /* bytes of those that sit in the cache */
    uint64_t persistent;   /* bytes of persistent-param buffers */
    uint64_t limit;        /* stage3_max_live_parameters in bytes, capped by what stage 3 saves over stage 2
                              ((flat - part) model-dtype elements; docs/memory.md) */
    uint64_t user_limit;   /* stage3_max_live_parameters in bytes when the config sets it, else UINT64_MAX:
                              only exceeding this warns; exceeding the implicit cap is a DEBUG note (issue 34) */
    int warned_over;       /* the user's limit: warned once */
    int noted_cap;         /* the implicit cap: noted once at DEBUG */
} zero__s3_pool;

/* A phase's recorded gather order, kept while another phase runs.  More
 * distinct phases than this is misuse (a new name per batch?). */
#define ZERO__S3_MAX_PHASES 64
/* (see above) */
typedef struct zero__s3_phase {
    char name[64];
    zero__s3_trace trace;  /* empty for the active phase: its order is zero__s3.trace */
} zero__s3_phase;

typedef struct zero__s3 {
    const zero_services *svc;
    zero_core *c;
    const zero_run_config *rc;
    const zero_layout *L;
    zero_comm *world;      /* norm/overflow all-reduce (the bucket engine also uses world) */
    zero_comm *gcomm;      /* private duplicate of world for agreements and param all-gathers: the host may
                              fire grad hooks (bucket collectives on world) from other threads while this
                              thread gathers, and collectives on one communicator must be issued in the same
                              order on every rank */
    int rank, nranks;
    zero_dtype dtype;      /* model dtype: shard and gather buffers */
    size_t esize;
    zero_dtype gdtype;     /* gradient partition: fp32 (grad_accum_dtype fp32) or the model dtype */
    size_t gesize;

    /* model state, part_numel elements each */
    void *shard;           /* params, model dtype (ZERO_MEM_PARAMS) */
    float *master;         /* fp32 master: == shard for fp32 models, else ZERO_MEM_MASTER */
    void *grads;           /* gradient partition, gdtype (ZERO_MEM_GRADS) */
    float *state[4];       /* optimizer state (ZERO_MEM_OPTIM) */
    uint32_t nstate;
    zero_owned_range *owned;
    uint32_t nowned;
    zero_buckets *b;
    int contiguous;

    zero__s3_param *params;
    uint32_t nparams;
    zero__s3_pool pool;

    /* gather order bookkeeping for the current micro-step */
    zero__s3_trace trace;  /* the recorded order prefetch follows */
    zero__s3_trace record; /* what this micro-step actually gathered */
    size_t pos;            /* params gathered so far this micro-step */
    size_t verified;       /* record[0..verified) is proved identical on every rank */
    uint64_t req_hash;     /* FNV-1a over record[0..pos) */
    int on_track;          /* trace valid and every request so far matched it */
    int warned_divergence;
    uint64_t prefetch_outstanding; /* elements prefetched, not yet consumed */
    uint64_t live_hash;    /* sum over params holding a non-persistent buffer (agreement) */
    zero__s3_phase *phases; /* every phase named so far; [0] is "train" (stage3_phase.c) */
    uint32_t nphases, cur_phase;

    /* knobs */
    uint64_t prefetch_numel, max_reuse, persist_below;
    uint64_t largest_bytes; /* the largest param's full tensor, bytes (persistence leaves room for it) */
    int poison;
    uint64_t micro_steps;  /* micro-steps done (for messages) */
    /* how host gathers were served (logged at INFO on destroy) */
    uint64_t n_gathers, n_prefetched, n_resident, n_demand;
    uint64_t n_agreements; /* order agreements (all-reduces) made, zero_step's included */

    /* offload (stage3_offload.h): zero_optimization.stage 3 with
     * offload_optimizer / offload_param */
    int off_opt;           /* ZERO__S3_OFF_NONE / _CPU / _NVME: where master and states live */
    int off_param;         /* the owned shard lives in the host tier (or, with off_param_nvme, a file) */
    int off_param_nvme;    /* offload_param.device "nvme": s->shard is NULL, the shard is in off->pfile */
    const char *param_nvme_path; /* offload_param.nvme_path (config-owned) */
    const char *nvme_path; /* offload_optimizer.nvme_path (config-owned) */
    struct zero__s3_off *off; /* the tiled step's buffers, worker, NVMe file; NULL without offload */
} zero__s3;

/* ---- pool (stage3_pool.c) ---------------------------------------------- */
/* Take a buffer of at least `bytes` for a non-persistent param.  Cached
 * buffers are reused (best fit, at most twice the size); a new allocation
 * first frees cached ones to stay under the max_live limit.  If it still
 * does not fit: with `demand` 0 (prefetch) return NULL; with `demand` 1 (the
 * host is waiting) evict kept (released-but-reusable) buffers and, as a
 * last resort, exceed the limit: one warning when that passes a
 * stage3_max_live_parameters the config set, one DEBUG note when it passes
 * only the implicit cap (what partitioning saves). */
void *zero__s3_pool_get(zero__s3 *s, size_t bytes, int demand, size_t *cap_out);
/* Would zero__s3_pool_get(s, bytes, 0, ...) succeed?  (Same rule, no
 * side effect: lets a gather skip the agreement when prefetch cannot
 * proceed anyway.) */
int zero__s3_pool_could_get(const zero__s3 *s, size_t bytes);
/* Return a buffer to the cache (poisoned first when poisoning is on). */
void zero__s3_pool_put(zero__s3 *s, void *buf, size_t cap);
/* Free every cached buffer. */
void zero__s3_pool_drain(zero__s3 *s);
/* Fill `bytes` of a model-dtype buffer with NaN. */
void zero__s3_poison(zero__s3 *s, void *buf, size_t bytes);

/* ---- trace (stage3_trace.c) -------------------------------------------- */
int zero__s3_trace_push(zero__s3_trace *t, uint32_t idx);
/* Build next[] and prefix[] and mark valid; returns 0 or -1 (no memory). */
int zero__s3_trace_finish(zero__s3_trace *t, const zero__s3 *s);
void zero__s3_trace_clear(zero__s3_trace *t); /* len = 0, invalid; keeps memory */
void zero__s3_trace_free(zero__s3_trace *t);
void zero__s3_trace_swap(zero__s3_trace *a, zero__s3_trace *b);

/* ---- gathers (stage3_gather.c) ----------------------------------------- */
zero_status zero__s3_gather(void *state, zero_param_info *const *params, size_t n, void **ptrs);
zero_status zero__s3_release(void *state, zero_param_info *const *params, size_t n);
/* Complete every in-flight all-gather (collectives already issued on all
 * ranks).  Returns the first error. */
zero_status zero__s3_wait_all(zero__s3 *s);
/* End of micro-step: wait, drop every non-persistent buffer (host-held ones
 * too: pointers are valid only until zero_step), settle the trace. */
zero_status zero__s3_end_micro_step(zero__s3 *s);
/* The same without counting a micro-step (a phase change). */
zero_status zero__s3_settle(zero__s3 *s);
/* Start prefetching the first entries of the recorded order for the next
 * micro-step (end of zero_step: every rank has just agreed and settled, so
 * the state that drives issue decisions is identical).  No-op off track. */
zero_status zero__s3_prefetch_ahead(zero__s3 *s);
/* Parameters changed (step taken, checkpoint loaded): persistent buffers
 * must be refreshed before their next use. */
void zero__s3_mark_stale(zero__s3 *s);
/* Give a non-persistent param's buffer back to the pool. */
void zero__s3_drop_buffer(zero__s3 *s, zero__s3_param *p);

/* Cross-rank agreement on everything gathered this micro-step that is not
 * yet verified, and on the live buffer set (one small I64 MAX all-reduce,
 * the same shape wherever it is called, so that agreements from different
 * call sites on diverging ranks still pair up and report).  `where` names
 * the entry point in messages.  ZERO_ERR_MISMATCH names the params. */
zero_status zero__s3_agree(zero__s3 *s, const char *where);

/* ---- phases (stage3_phase.c) ------------------------------------------ */
/* The plugin table's set_phase: verify and settle the phase being left
 * (collective: one agreement), park its order, make `phase`'s order (empty
 * the first time) the one gathers follow.  ZERO_ERR_STATE while a gathered
 * param is still held. */
zero_status zero__s3_set_phase(void *state, const char *phase);
const char *zero__s3_phase_name(const zero__s3 *s);
/* 1 in the "train" phase: only there does a changed gather order warn
 * (stage3_gather.c); elsewhere it is a DEBUG line. */
int zero__s3_order_matters(const zero__s3 *s);
void zero__s3_phases_free(zero__s3 *s);

/* ---- step (stage3_step.c) ---------------------------------------------- */
zero_status zero__s3_step(void *state, const zero_step_ctx *ctx, zero_step_report *rep);
/* What the core's boundary_step and ckpt_shard services need: the owned
 * ranges of the partition-indexed shard, master, states and gradient
 * partition.  Pure; borrows s (the result points into it). */
zero_part_step zero__s3_part_step(const zero__s3 *s);

/* ---- plan (stage3_plan.c) ---------------------------------------------- */
/* The table's plan entry (ABI 1.2): model state, persistent buffers, the
 * gather pool replayed for the canonical host, bucket staging. */
zero_status zero__s3_plan(const zero_plan_services *ps);

#define ZERO__S3_FNV_OFFSET 1469598103934665603ull

static inline size_t zero__s3_dtype_size(zero_dtype dt) { return dt == ZERO_DTYPE_F32 ? 4 : 2; }
#endif
