/* The plugin kit's gather engine: ZeRO-3's "gather before use, release
 * after" for any strategy that partitions parameters.
 *
 * A strategy (stage 3, MiCS, ZeRO++, yours) says HOW one parameter's full
 * tensor is assembled -- the fetch callback: a plain all-gather over a
 * communicator for stage 3, a hierarchical one inside a shard group for
 * MiCS, a quantized or secondary-partition one for ZeRO++ -- and the engine
 * does everything around it that makes stage 3 fast:
 *   - the recorded gather order, one per phase (zero_set_phase: "train",
 *     "eval", ...), re-recorded when the host's order changes;
 *   - prefetch along that order, stage3_prefetch_bucket_size elements ahead
 *     (refilled below half), batched into one launch per call where the
 *     services offer comm_group_start/end;
 *   - reuse distance: a released param that the order uses again within
 *     stage3_max_reuse_distance elements keeps its buffer;
 *   - persistence: params under stage3_param_persistence_threshold elements
 *     stay gathered for good (refreshed once after each optimizer step);
 *   - the gather-buffer pool (ZERO_MEM_GATHER, best fit within 2x) and its
 *     byte budget (stage3_max_live_parameters, capped by what the strategy
 *     says partitioning saves), evicting kept buffers before exceeding it;
 *   - the collective discipline that keeps prefetch from hanging: every
 *     collective the engine (or a fetch) issues is issued from a host
 *     gather after a small agreement all-reduce has proved that every rank
 *     asked for the same params in the same order holding the same buffers
 *     (else ZERO_ERR_MISMATCH naming the params on every rank), and issue
 *     decisions depend only on that agreed state;
 *   - blocking and asynchronous fetches alike: a fetch that hands back a
 *     request is waited for only when the host needs that param; one that
 *     completes at once (a quantized all-gather) still gets the order,
 *     reuse, persistence and budget, and prefetch moves it out of the
 *     host's critical path into fewer, earlier calls.
 *
 * Layering: kit/ sits between the core and the plugins.  This header
 * includes only the ABI header; the engine reaches the core only through
 * the services table it is given, so it links into a plugin built against
 * an installed libzero (find_package(zero) -> zero::kit).
 *
 * Threads: an engine belongs to the thread that runs the plugin table's
 * gather / release / step / set_phase / save / load / destroy (the core's
 * engine thread).  No function here is thread-safe; none may be called from
 * grad_buffer / on_grad_ready (the host's backward threads), and callbacks
 * are called only from inside these functions, on that thread.
 *
 * Params: the engine serves every registered param (svc->nparams), by
 * index; it uses zero_param_info's index, name and numel and, while
 * zero_kit_gather_create runs, init_data.  It never touches plugin_data or
 * data: they stay the strategy's. */
#ifndef ZERO_KIT_GATHER_H
#define ZERO_KIT_GATHER_H
#include <stddef.h>
#include <stdint.h>

#include "zero_plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zero_kit_gather zero_kit_gather;

/* How the strategy assembles full tensors.  `ctx` is the spec's ctx. */
/* Every op's `idx` is a unit: a param's index (< svc->nparams), or (1.7)
 * one slice of a stacked param, a unit past them -- only for a strategy
 * that calls zero_kit_gather_get_slices; zero_kit_gather_unit says which. */
typedef struct zero_kit_gather_ops {
    /* Required.  Start assembling param `idx`'s full tensor (numel elements
     * of the spec's dtype) into `buf`, a buffer the engine owns (device
     * tier, at least numel * esize bytes) and keeps until the param is
     * dropped.  Either set *req to an in-flight request (the engine waits
     * for it, or tests it through zero_kit_gather_test, exactly once; the
     * fetch must not wait for it itself) or leave *req NULL when the tensor
     * is complete on return (a blocking fetch).  Called only after an
     * agreement, in the same order on every rank: a fetch may issue
     * collectives on any communicator whose ranks all run the same host
     * program.  An error is returned from the host's gather as is (report
     * it with svc->error first if it needs a message). */
    zero_status (*fetch)(void *ctx, uint32_t idx, void *buf, zero_comm_req **req);
    /* Optional.  The fetch of `idx` into `buf` has completed (its request
     * waited for, or at once after a blocking fetch): finish the tensor
     * (MiCS reorders member-major pieces into flat order here) and free
     * what the fetch held.  Called exactly once per successful fetch, even
     * when the buffer is dropped unused.  `wait_st` is the request's
     * status; an error returned here is the gather's error. */
    zero_status (*landed)(void *ctx, uint32_t idx, void *buf, zero_status wait_st);
    /* Optional.  `idx`'s buffer is about to go back to the pool (released
     * and not kept, evicted, or dropped at the end of a micro-step): the
     * release / write-back point for a strategy that keeps a copy of what
     * it gathered (nothing in-tree writes gathered tensors back).  Not
     * called for persistent or alias params, nor for the buffers
     * zero_kit_gather_destroy frees. */
    void (*dropped)(void *ctx, uint32_t idx, void *buf);
    /* Optional.  Called after every host gather's fetches were issued (and
     * after zero_kit_gather_prefetch_ahead): a strategy that stages the
     * fetches' send side (stage 3's NVMe parameter window) reads ahead
     * here, with zero_kit_gather_upcoming telling what comes next. */
    void (*after_issue)(void *ctx);
    /* Optional.  Asked once per param by zero_kit_gather_create: a
     * non-NULL pointer makes that memory the param's full tensor for good
     * (world 1: the shard IS the full model): never fetched, never stale,
     * never freed by the engine. */
    void *(*alias)(void *ctx, uint32_t idx);
} zero_kit_gather_ops;

/* What zero_kit_gather_create needs.  Fill it with
 * zero_kit_gather_spec_from_config, then set comm, ops, ctx and the cap. */
typedef struct zero_kit_gather_spec {
    size_t struct_size;          /* sizeof(zero_kit_gather_spec) */
    const char *who;             /* message prefix ("stage3", "mics"; NULL: "gather"); borrowed, must
                                    outlive the engine */
    zero_comm *comm;             /* agreements: the ranks that must gather in lockstep; borrowed.  A
                                    communicator of the strategy's own (a duplicate of the world, say):
                                    the host may fire grad hooks (bucket collectives on the world) from
                                    other threads while the engine thread agrees */
    zero_comm *group_comm;       /* fetches issued in one call are batched between comm_group_start/end on
                                    this communicator (one NCCL launch); NULL: no batching.  Only when every
                                    fetch issues its collectives on this communicator: NCCL's group belongs to
                                    the thread, and a collective on another communicator inside it would
                                    record its completion before the group's end launched it (stage 3 with
                                    expert groups passes NULL) */
    zero_dtype dtype;            /* dtype of the full tensors (the model dtype) */
    uint64_t prefetch_numel;     /* stage3_prefetch_bucket_size: elements fetched ahead (0: no prefetch) */
    uint64_t max_reuse;          /* stage3_max_reuse_distance, elements */
    uint64_t persist_below;      /* stage3_param_persistence_threshold: params under it stay gathered */
    uint64_t limit_bytes;        /* stage3_max_live_parameters in bytes (live + cached + persistent) */
    uint64_t user_limit_bytes;   /* the same when the config sets the key, else UINT64_MAX: only exceeding
                                    this one warns */
    uint64_t cap_bytes;          /* what partitioning saves over holding every full tensor: the budget is
                                    min(limit_bytes, cap_bytes) (UINT64_MAX: no cap) */
    int poison;                  /* fill buffers going back to the pool with NaN (debug aid) */
    int gathers_world;           /* 1 when the fetch moves data between ranks (comm size > 1): the
                                    budget note about a param larger than the budget is skipped otherwise */
    zero_kit_gather_ops ops;
    void *ctx;                   /* passed to every op; borrowed */
} zero_kit_gather_spec;

/* Fill `spec` from the run config the services give: struct_size, dtype,
 * who (the literal "stage3"), stage 3's keys (stage3_prefetch_bucket_size,
 * stage3_max_reuse_distance, stage3_param_persistence_threshold,
 * stage3_max_live_parameters and whether the JSON sets it, under its
 * zero_optimization. name or the unprefixed one), no cap, no comm, no ops.
 * ZERO_DEBUG_POISON=1/0 in the environment sets poison (default
 * `poison_default`).  Any thread; pure but for the config lookups. */
void zero_kit_gather_spec_from_config(const zero_services *svc, zero_dtype dtype, int poison_default,
                                      zero_kit_gather_spec *spec);

/* Create an engine over every registered param (call from params_done,
 * after svc->param(c, i)->init_data is final).  Decides persistence in
 * registration order (numel < persist_below while persistent bytes plus two
 * of the largest params fit the budget: the same choice on every rank),
 * allocates those buffers and copies init_data into them (a param without
 * init_data gets zeros).  The spec is copied; the pointers in it are
 * borrowed.  *out owns its buffers until zero_kit_gather_destroy. */
zero_status zero_kit_gather_create(const zero_services *svc, const zero_kit_gather_spec *spec, zero_kit_gather **out);

/* Free everything the engine allocated; waits for in-flight fetches first
 * (landed is called for them).  Logs one INFO line of how gathers were
 * served when any were.  NULL is a no-op. */
void zero_kit_gather_destroy(zero_kit_gather *g);

/* ---- the host's calls (the plugin table's gather / release / set_phase) -- */

/* The table's gather: record the request, agree with the other ranks when
 * a collective is needed, fetch what is not resident, prefetch along the
 * recorded order, wait for the requested params only, and hand out their
 * full tensors in ptrs[0..n) (engine-owned; valid until the matching
 * release and at most until zero_kit_gather_end_micro_step).  Each param
 * is held once per call (release it as many times). */
zero_status zero_kit_gather_get(zero_kit_gather *g, zero_param_info *const *params, size_t n, void **ptrs);
/* The table's release: a param whose last hold goes keeps its buffer when
 * persistent or reused within the reuse distance, else returns it to the
 * pool.  Never communicates.  ZERO_ERR_STATE without a matching gather. */
zero_status zero_kit_gather_release(zero_kit_gather *g, zero_param_info *const *params, size_t n);
/* (1.7) The table's gather_slices / release_slices: slices of stacked
 * params (zero_param_info.stack_layers) as units of their own -- a stacked
 * param with L layers has L slice units next to its whole-param unit,
 * recorded in the same per-phase order, prefetched, kept by reuse
 * distance, pooled and budgeted like params (never persistent).  A stack
 * that is persistent or an alias serves its slices from its full tensor
 * instead (no fetch).  ptrs[i]: the slice's numel / layers elements,
 * engine-owned, valid like zero_kit_gather_get's.  A ref to a non-stacked
 * param or a layer out of range is ZERO_ERR_INVALID_ARGUMENT. */
zero_status zero_kit_gather_get_slices(zero_kit_gather *g, const zero_slice_ref *refs, size_t n, void **ptrs);
zero_status zero_kit_gather_release_slices(zero_kit_gather *g, const zero_slice_ref *refs, size_t n);
/* (1.7) What unit `unit` (the idx every op receives) is: returns 0 for a
 * whole param (*param = unit, *layer = UINT32_MAX, *offset 0, *numel the
 * param's), 1 for a slice (its param, layer, offset in the param and numel,
 * all in elements).  Any out pointer may be NULL.  Pure. */
int zero_kit_gather_unit(const zero_kit_gather *g, uint32_t unit, uint32_t *param, uint32_t *layer,
                         uint64_t *offset, uint64_t *numel);
/* The table's set_phase: verify what the phase being left gathered (one
 * agreement: collective), settle, park its order and follow `phase`'s
 * (recorded afresh the first time).  ZERO_ERR_STATE while a param is held;
 * ZERO_ERR_INVALID_ARGUMENT past 64 phases.  `phase` is copied. */
zero_status zero_kit_gather_set_phase(zero_kit_gather *g, const char *phase);
/* The active phase's name (engine-owned; "train" until set_phase). */
const char *zero_kit_gather_phase(const zero_kit_gather *g);

/* ---- the strategy's step ------------------------------------------------ */

/* Verify every gather no earlier agreement covered (collective: call it on
 * every rank at the same point, zero_step's start; `where` names the call
 * in messages: "zero_step").  ZERO_ERR_MISMATCH / ZERO_ERR_TIMEOUT name
 * what differs. */
zero_status zero_kit_gather_agree(zero_kit_gather *g, const char *where);
/* End of a micro-step (after zero_kit_gather_agree): wait for every fetch,
 * drop every non-persistent buffer (held ones too: pointers are valid only
 * until zero_step), learn the order when it changed, count the micro-step.
 * Local. */
zero_status zero_kit_gather_end_micro_step(zero_kit_gather *g);
/* The parameters changed (optimizer step, checkpoint load): persistent
 * buffers are refetched at their next use.  Local. */
void zero_kit_gather_mark_stale(zero_kit_gather *g);
/* Start fetching the first entries of the recorded order for the next
 * micro-step.  Call only where every rank has just agreed and settled (the
 * end of zero_step), since it issues fetches without a new agreement. */
zero_status zero_kit_gather_prefetch_ahead(zero_kit_gather *g);
/* The start of a gathering strategy's zero_step, in the order every rank
 * must keep: zero_kit_gather_agree(g, "zero_step") (collective), then
 * zero_kit_gather_end_micro_step, then reduce(user) -- the strategy's
 * gradient reduction (buckets_flush, or its own), collective, so it runs
 * also after a local settling error -- and, between boundaries
 * (boundary 0), zero_kit_gather_prefetch_ahead.  Returns the first error;
 * *go_on = 1 when the caller continues with the boundary's norm, step and
 * re-gather (boundary and no error), else 0.  Step thread. */
zero_status zero_kit_gather_step_begin(zero_kit_gather *g, int boundary, zero_status (*reduce)(void *user),
                                       void *user, int *go_on);
/* Wait for every in-flight fetch (issued on every rank already); returns
 * the first error.  The table's sync.  Local. */
zero_status zero_kit_gather_wait_all(zero_kit_gather *g);
/* Wait, then forget every hold and prefetch and drop every non-persistent
 * buffer (a checkpoint load is about to change the values; follow with
 * zero_kit_gather_mark_stale).  Local. */
zero_status zero_kit_gather_drop_all(zero_kit_gather *g);

/* ---- for fetch-side staging (stage 3's NVMe parameter window) ----------- */

/* Up to `max` param indices of the recorded order from the current
 * position on, skipping resident ones (fresh buffers); 0 off the recorded
 * order.  Writes idx[0..returned). */
size_t zero_kit_gather_upcoming(const zero_kit_gather *g, uint32_t *idx, size_t max);
/* 1 when `idx` holds (or will hold once its request completes) current
 * values. */
int zero_kit_gather_resident(const zero_kit_gather *g, uint32_t idx);
/* The in-flight request of `idx`'s fetch, or NULL: an identity to compare,
 * never to wait on directly. */
const zero_comm_req *zero_kit_gather_pending(const zero_kit_gather *g, uint32_t idx);
/* Test (`wait_for` 0) or wait for (1) `idx`'s in-flight fetch; when it
 * completes, landed runs and *done is 1.  A failed request's status is
 * returned here (and not again).  No-op (*done 1) when none is in flight. */
zero_status zero_kit_gather_complete(zero_kit_gather *g, uint32_t idx, int wait_for, int *done);

/* ---- numbers ------------------------------------------------------------- */
typedef struct zero_kit_gather_stats {
    uint64_t gathers, prefetched, resident, demand; /* host gathers, and how each was served */
    uint64_t agreements;                            /* order agreements made */
    uint64_t micro_steps;
    uint64_t persistent_bytes, pool_bytes, budget_bytes; /* persistent buffers; pooled (live + cached); budget */
} zero_kit_gather_stats;
void zero_kit_gather_get_stats(const zero_kit_gather *g, zero_kit_gather_stats *out);

/* ---- planning (the plugin table's plan entry) --------------------------- */

/* Peak ZERO_MEM_GATHER bytes (device tier) of an engine created with the
 * run's stage3_* keys (as zero_kit_gather_spec_from_config reads them) and
 * cap_bytes (the spec's cap; UINT64_MAX: none), full tensors of `esize`
 * bytes per element, for the canonical host of docs/planner.md: each
 * micro-step gathers every param alone in registration order and releases
 * it, then the same in reverse order, then zero_step.  It replays the
 * engine's own decisions (persistence, best-fit pool, prefetch, reuse
 * distance, eviction) without allocating.  `staging` nonzero: each fetch
 * also allocates numel * esize ZERO_MEM_GATHER bytes of its own from its
 * issue until it lands (MiCS's member-major receive buffer).  A strategy
 * whose engine aliases every param (ops.alias: world 1 for stage 3) has
 * no gather buffers and does not call this (one that aliases some: the
 * _aliased variant below).  Records nothing: pass the
 * result to ps->add.  Pure; thread-safe. */
uint64_t zero_kit_gather_plan_peak(const zero_plan_services *ps, size_t esize, uint64_t cap_bytes, int staging);
/* (libzero 1.12) The same for an engine whose ops.alias gives some params
 * their own memory (stage 3: an expert group partitioned over one rank):
 * alias[i] nonzero for those (ps->nparams entries, borrowed; NULL: none).
 * They hold no gather buffer and never go stale, as in the engine. */
uint64_t zero_kit_gather_plan_peak_aliased(const zero_plan_services *ps, size_t esize, uint64_t cap_bytes, int staging,
                                           const uint8_t *alias);

#ifdef __cplusplus
}
#endif
#endif
