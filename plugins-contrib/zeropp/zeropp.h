/* zeropp plugin internals (shared by the files of plugins-contrib/zeropp only).
 *
 * ZeRO++ (Wang et al. 2023) on top of ZeRO-3's partitioning (each rank owns
 * its world share of the core's layout: parameters, fp32 master, optimizer
 * state, gradient partition), with three switches:
 *  - qwZ  (zero_optimization.zero_quantized_weights): the parameter
 *    all-gather sends int8 blocks with fp32 scales (services
 *    allgather_quantized): ~4x fewer bytes than fp32, ~2x fewer than bf16;
 *  - hpZ  (zero_optimization.zero_hpz_partition_size = P > 1): the first
 *    gather of a parameter after an optimizer step spans the world; each
 *    rank keeps 1/P of the full tensor (a secondary partition inside a
 *    group of P ranks of its node, services comm_split_node), and every
 *    later gather until the next step (backward, later micro-batches)
 *    all-gathers inside that group only;
 *  - qgZ  (zero_optimization.zero_quantized_gradients): hierarchical, as
 *    in the paper (zeropp_qgz.c): a full-precision reduce-scatter inside
 *    the node, then int8 (or int4: zero_quantized_gradients_bits) blocks
 *    in an all-to-all across nodes among the ranks of the same node-local
 *    rank (services reduce_scatter_quantized), the dequantized partial sums
 *    added in fp32 in rank order; zero_quantized_gradients_hierarchical
 *    false: one flat quantized all-to-all over the world.  Without qgZ the
 *    core's bucket engine reduce-scatters exact sums (stage 3's, bitwise
 *    stage0).
 * The fp32 master is never quantized: only what crosses the wire is.
 *
 * Gathers: the plugin kit's gather engine (zero_kit_gather.h) with the
 * world / hpZ-group all-gather as its fetch, so ZeRO++ gets stage 3's
 * recorded order, prefetch, reuse distance, persistence and budget.
 *
 * Built the way a third party builds a plugin: the installed plugin kit
 * (zero_kit.h, libzero_kit.a: create, accounted allocation, the parameter
 * map, gradient hand-in, bucket spec, checkpoint blobs) and ABI headers,
 * services table only.  Threading: the engine's step thread runs everything except
 * grad_buffer / on_grad_ready (concurrent for different params; they touch
 * only that param's slice or temporary, and the thread-safe bucket engine). */
#ifndef ZERO_CONTRIB_ZEROPP_H
#define ZERO_CONTRIB_ZEROPP_H
#include <stddef.h>
#include <stdint.h>

#include "zero_kit.h" /* the glue and the gather engine (zero_kit_gather.h) */

typedef struct zpp_param {
    zero_param_info *info;
    const size_t *counts;          /* N entries: elements of this param in world share j (zpp.pmap's) */
    const uint64_t *part_lo;       /* N entries: where those start in share j's numbering (zpp.pmap's) */
    size_t off_me;                 /* this rank's piece: offset in the param */
    size_t *hcounts;               /* P entries: the param's secondary chunks (hpZ) */
    size_t hoff_me;
    void *sec;                     /* hpZ: this rank's secondary chunk (hcounts[hrank] elements) */
    int sec_valid;                 /* sec holds (or, once the world fetch in flight lands, will hold) the
                                      current values: set by the first fetch after a step */
    int keep_sec;                  /* a world fetch is in flight: copy this rank's chunk into sec when it lands */
    void *grad_tmp;                /* per-param gradient temporary (model dtype) */
} zpp_param;

/* Bytes each kind of gather moved (this rank's view of the counters of the
 * communicators it used), for the log line at destroy and the README. */
typedef struct zpp_counts {
    uint64_t world_gathers, node_gathers;
} zpp_counts;

typedef struct zpp {
    const zero_services *svc;
    zero_core *c;
    const zero_run_config *rc;
    int rank, nranks;
    int qw, qg, qg_bits, P;        /* switches: qwZ, qgZ (bits), hpZ secondary group size (1 = off) */
    uint32_t qw_block, qg_block;   /* elements per quantization scale */
    int qg_ef;                     /* qgZ error feedback (zero_quantized_gradients_error_feedback, default off) */
    int qg_hier;                   /* qgZ: two-level exchange (zero_quantized_gradients_hierarchical, default on) */
    zero_comm *gcomm;              /* private duplicate of the world: parameter all-gathers */
    zero_comm *node;               /* hpZ and qgZ: this rank's node */
    zero_comm *hcomm;              /* hpZ: the P ranks of the secondary partition (inside node) */
    int hrank;
    zero_dtype dtype, gdtype;
    size_t esize, gesize;
    uint64_t part;                 /* world share (layout part_numel) */
    void *pshard;                  /* parameters of the share, model dtype */
    float *master;                 /* == pshard for fp32 models */
    float *state[4];
    uint32_t nstate;
    void *acc;                     /* gradient partition accumulator (gdtype) */
    zero_owned_range *mine;
    uint32_t nmine;
    /* exact path: the core's bucket engine */
    zero_buckets *b;
    int contiguous;
    /* qgZ path: the micro-step's full gradient (fp32, flat) and a share temp */
    float *gflat;
    float *gpart;
    float *ef;                     /* qgZ error feedback: what quantization lost, carried (fp32: what this rank
                                      quantizes, zpp_qgz_ef_numel), or NULL */
    zero_comm *xcomm;              /* qgZ: the cross-node communicator (hierarchical: one rank per node, same
                                      node-local rank) or a duplicate of the world (flat); gradients only */
    int qk, qm;                    /* qgZ: ranks of this rank's node (1 if unknown), nodes (0: unequal) */
    int *qperm;                    /* qgZ hierarchical: N entries, the world rank of node-local rank l and cross
                                      rank x at l*qm + x (the order of the node reduce-scatter's blocks) */
    float *gnode;                  /* qgZ hierarchical, qk > 1: the node's sum of this rank's slice (qm shares) */
    uint64_t qg_reductions;        /* qgZ exchanges done (one per micro-step) */
    zpp_param *params;
    uint32_t nparams;
    zero_kit_pmap pmap;            /* every param's piece in every world share (the kit's) */
    zpp_counts counts;
    zero_kit_gather *gather;       /* the kit's gather engine (zeropp_gather.c): recorded order, prefetch,
                                      reuse distance, persistence, pool and budget */
} zpp;

/* zeropp_gather.c */
/* Create s->gather (params_done, after the share holds the initial values):
 * world (exact or qwZ) / hpZ-group all-gathers as its fetch. */
zero_status zpp_gather_setup(zpp *s);
zero_status zpp_gather(void *state, zero_param_info *const *params, size_t n, void **ptrs);
zero_status zpp_release(void *state, zero_param_info *const *params, size_t n);
zero_status zpp_set_phase(void *state, const char *phase);
/* The parameters changed (step, load, write_params): gathered tensors and
 * secondary chunks are stale; the next fetch of each param spans the world
 * again. */
void zpp_params_changed(zpp *s);

/* zeropp_grads.c */
zero_status zpp_grads_setup(zpp *s);
zero_status zpp_grad_buffer(void *state, zero_param_info *p, void **buf);
zero_status zpp_on_grad_ready(void *state, zero_param_info *p, void *stream);
zero_status zpp_step(void *state, const zero_step_ctx *ctx, zero_step_report *rep);
void zpp_grads_free(zpp *s);

/* zeropp_qgz.c: qgZ's exchange.  setup: the node (unless hpZ made it) and
 * cross-node communicators, the block order, the node slice buffer (M
 * shares of maxpart, the largest group share; hierarchical with k > 1
 * only); collective over the world, params_done.
 * reduce: the micro-step's flat gradient (s->gflat, cleared after) into
 * this rank's share of s->acc (added).  ef_numel: the elements of the
 * error-feedback buffer.  log: this rank's exchange bytes (at destroy).
 * free: what setup made, except s->node.  Engine step thread. */
zero_status zpp_qgz_setup(zpp *s, uint64_t maxpart);
zero_status zpp_qgz_reduce(zpp *s);
size_t zpp_qgz_ef_numel(const zpp *s, uint64_t flat_numel, uint64_t part_numel);
void zpp_qgz_log(zpp *s);
void zpp_qgz_free(zpp *s);

/* zeropp_ckpt.c: the table's save / load (resharding: another world size or
 * plugin; error feedback reset, secondary partition rebuilt) */
zero_status zpp_save(void *state, const char *dir);
zero_status zpp_load(void *state, const char *dir);
/* ... and the table's write_params (zero_params_write): the share and its
 * master; gathered tensors and hpZ secondary chunks refetched over the world */
zero_status zpp_write_params(void *state, zero_param_info *const *params, size_t n, const void *const *values);

/* zeropp_plan.c: the table's plan entry (formulas there and in README.md) */
zero_status zpp_plan(const zero_plan_services *ps);

#endif
