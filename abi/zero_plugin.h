/*
 * libzero plugin ABI — what a partitioning strategy implements and what the
 * core offers it.
 *
 * A plugin is a shared library `libzero-plugin-<name>.so` that exports one
 * symbol, a const table: `zero_plugin_v3` (a zero_plugin_table_v3, this
 * header's revision), or, for plugins built against older headers,
 * `zero_plugin_v2` (1.6) or `zero_plugin_v1` (1.0-1.5).  It includes only installed headers (abi/ and the
 * plugin kit, zero_kit.h).  Everything else in it is hidden.
 *
 * Evolution (the NCCL net-plugin rule, ncclNet_vN): a released table type is
 * never edited.  A change to the services, to the plugin table or to a
 * struct the plugin passes to a service makes a new revision N+1: new
 * types zero_services_vN+1 / zero_plugin_table_vN+1 and the symbol
 * zero_plugin_vN+1.  The core loads the newest revision a plugin exports and
 * adapts older ones once, at load, in one file (core/plugin_abi.c): an old
 * plugin gets the table of its own revision, complete, and nothing else in
 * the core or in a plugin checks versions.  Revision 1 (1.0-1.5) grew by
 * appending behind struct_size; it is kept, frozen, at the end of this file.
 *
 * Threading: the core calls a plugin's functions on one engine from one
 * thread at a time, except on_grad_ready and grad_buffer, which may run
 * concurrently for different params (the host may call from several
 * threads); plugins protect their shared state accordingly.  Every service
 * is thread-safe unless noted.
 */
#ifndef ZERO_PLUGIN_H
#define ZERO_PLUGIN_H

#include "zero.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ZERO_PLUGIN_ABI_MAJOR 1
#define ZERO_PLUGIN_ABI_MINOR 8

#if defined(__GNUC__)
#define ZERO_PLUGIN_EXPORT __attribute__((visibility("default")))
#define ZERO_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define ZERO_PLUGIN_EXPORT
#define ZERO_PRINTF(a, b)
#endif

typedef struct zero_core zero_core;         /* the engine as a plugin sees it */
typedef struct zero_comm zero_comm;         /* a communicator: world or a sub-group */
typedef struct zero_comm_req zero_comm_req; /* an in-flight collective */
typedef struct zero_buckets zero_buckets;   /* a gradient bucket set */

typedef int32_t zero_reduce_op;
enum { ZERO_OP_SUM = 0, ZERO_OP_MAX = 1, ZERO_OP_MIN = 2 };

/* Comm element types: the model dtypes plus ZERO_DTYPE_F64, I64, U64, U8
 * (16..19, defined in zero.h since 1.5 for host communicators). */

/* ------------------------------------------------------------------------ */
/* The parsed run configuration (typed view of ds_config.json).  Owned by     */
/* the core, read-only, valid for the life of the engine.  Append-only.      */
/* ------------------------------------------------------------------------ */
typedef int32_t zero_optim_kind;
enum {
    ZERO_OPTIM_ADAMW = 0, /* decoupled weight decay */
    ZERO_OPTIM_ADAM = 1,  /* L2 weight decay added to the gradient (adam_w_mode false) */
    ZERO_OPTIM_SGD = 2,
    ZERO_OPTIM_LION = 3,
    ZERO_OPTIM_ADAGRAD = 4,
    ZERO_OPTIM_LAMB = 5
};

typedef struct zero_run_config {
    uint32_t struct_size;
    int32_t stage;                   /* zero_optimization.stage (0..3) */
    int64_t train_batch_size;
    int64_t micro_batch_per_gpu;
    int64_t grad_accum_steps;
    double gradient_clipping;        /* 0 = off */
    int32_t prescale_gradients;
    int32_t reserved0;
    double gradient_predivide_factor;
    int32_t steps_per_print;
    int32_t wall_clock_breakdown;
    /* precision */
    zero_dtype model_dtype;          /* F32, BF16 (bf16.enabled) or F16 (fp16.enabled) */
    int32_t fp16_initial_scale_power;/* default 16 */
    double fp16_loss_scale;          /* 0 = dynamic */
    int32_t fp16_loss_scale_window;  /* default 1000 */
    int32_t fp16_hysteresis;         /* default 2 */
    int32_t fp16_consecutive_hysteresis; /* default 0 */
    int32_t reserved1;
    double fp16_min_loss_scale;      /* default 1 */
    /* optimizer */
    zero_optim_kind optim;
    int32_t reserved2;
    double lr, beta1, beta2, eps, weight_decay, momentum;
    int32_t nesterov;
    int32_t bias_correction;         /* default 1 */
    /* zero_optimization */
    int32_t contiguous_gradients;    /* default 1 */
    int32_t reduce_scatter;          /* default 1 */
    int64_t reduce_bucket_size;      /* elements, default 5e8 */
    int64_t allgather_bucket_size;   /* elements, default 5e8 */
    int32_t overlap_comm;            /* default 0 (stage 3: 1) */
    int32_t round_robin_gradients;
    int32_t offload_optimizer;       /* 1 when offload_optimizer.device == "cpu" */
    int32_t offload_pin_memory;
    int64_t stage3_prefetch_bucket_size;      /* default 5e7 */
    int64_t stage3_param_persistence_threshold; /* default 1e5 */
    int64_t stage3_max_live_parameters;       /* default 1e9 */
    int64_t stage3_max_reuse_distance;        /* default 1e9 */
    int64_t sub_group_size;                   /* default 1e9 */
    int32_t strict_grads;            /* zero_optimization.strict_grads: missing grad is an error */
    int32_t pipeline_stages;         /* pipeline.stages, 1 = no pipeline */
    /* ---- appended in 1.1 (read only when struct_size covers them) ---- */
    /* The dtype gradients accumulate in over the window (data_types.
     * grad_accum_dtype) and the dtype of the reduction's payload
     * (communication_data_type), as resolved for the loaded plugin: the
     * configured values (defaults: F32 both) for a plugin with
     * ZERO_PLUGIN_CAP_GRAD_DTYPES, the model dtype for one without (a 1.0
     * plugin keeps its 1.0 behaviour).  With F32 accumulation the plugin keeps
     * fp32 gradient buffers, hands the host model-dtype per-param buffers
     * and reduces fp32 sums (grad_divisor = world * gas) -- the same numbers,
     * and so the same overflow decisions, in every stage.  A 16-bit
     * comm_dtype with F32 accumulation (core after 1.3.0) sends the buckets over
     * the wire in 16 bits, summed in that dtype and widened back into the
     * fp32 sums; the bucket engine does it for every plugin alike.
     * docs/precision.md. */
    zero_dtype grad_accum_dtype;
    zero_dtype comm_dtype;
    /* ---- appended in 1.2 (read only when struct_size covers them) ---- */
    /* zero_optimization.reduce_once_per_window (libzero, default 0).  With
     * gradient_accumulation_steps > 1 and no pipeline, every built-in plugin
     * reduces each micro-step's gradient and adds the reduced values into
     * the window's sum (stage 2's order), so that every plugin is bitwise
     * equal to stage0 (docs/determinism.md).  1: stage 0/1, stage1-pp and
     * offload with stage-1 partitioning sum the micro-steps locally and
     * reduce once per window (the 1.1 behaviour: 1/gas of the gradient
     * traffic, equal to stage 2/3 only to rounding).  A core that predates
     * the field leaves it out of struct_size: read it as 0. */
    int32_t reduce_once_per_window;
    int32_t reserved3;
} zero_run_config;

/* ------------------------------------------------------------------------ */
/* Parameters and layout                                                     */
/* ------------------------------------------------------------------------ */
/* One registered parameter as the plugin sees it.  Owned by the core.  The
 * plugin sets `data` (permanent full-tensor storage, stages < 3) and may use
 * `plugin_data` freely. */
typedef struct zero_param_info {
    uint32_t struct_size;
    uint32_t index;          /* registration order, 0-based */
    const char *name;
    uint64_t numel;
    zero_dtype dtype;
    int32_t group;           /* param group id */
    const void *init_data;   /* host's initial values; valid only during params_done */
    zero_device_kind init_device;
    int32_t grad_is_zero;    /* set by the core at zero_step for a param whose gradient never arrived
                                this micro-step: on_grad_ready must treat it as zero (ignore host_grad) */
    void *host_grad;         /* host-owned gradient buffer or NULL */
    uint64_t flat_offset;    /* element offset in the global flat space (set by the layout) */
    void *data;              /* set by the plugin: persistent full tensor, or NULL (stage 3) */
    void *plugin_data;       /* free for the plugin */
    /* ---- appended in 1.7 (the core's struct: always present for a plugin
     * the loader accepts) ---- */
    uint32_t stack_layers;   /* zero_register_stacked's layers (slices of numel / stack_layers), else 0 */
    uint32_t reserved0;
} zero_param_info;

/* A param group's slice of the global flat space.  Groups are laid end to
 * end; each is padded to a multiple of world * align so that every rank owns
 * an equal, aligned, contiguous range of every group. */
typedef struct zero_layout_group {
    uint64_t flat_begin;  /* first element of the group in the flat space */
    uint64_t numel;       /* padded size (multiple of world * align) */
    uint64_t used;        /* elements covered by params incl. inner alignment padding */
    uint64_t part_numel;  /* numel / world: each rank's share of this group */
    uint64_t part_offset; /* where this group's share starts in a rank's partition buffer */
    uint32_t first_param; /* params [first_param, first_param + nparams) in registration order */
    uint32_t nparams;
    int32_t group_id;
    int32_t reserved0;
} zero_layout_group;

typedef struct zero_layout {
    uint32_t struct_size;
    uint32_t world;
    uint32_t rank;
    uint32_t ngroups;
    uint32_t nparams;
    uint32_t reserved0;
    uint64_t align;          /* elements */
    uint64_t flat_numel;     /* sum of group numel */
    uint64_t part_numel;     /* sum of group part_numel: a rank's partition size */
    const zero_layout_group *groups;
    const uint32_t *param_order; /* param indices sorted by flat offset (groups in order) */
    /* ---- appended in 1.3 (read only when struct_size covers them) ---- */
    /* Expert groups (zero_group_desc.expert_color) are partitioned over
     * their expert-data-parallel group instead of the world: group g is
     * padded to a multiple of group_world[g] * align and this rank owns
     * share group_rank[g] of it (part_numel = numel / group_world[g]).
     * NULL when every group is dense (then group_world[g] = world and
     * group_rank[g] = rank).  svc->group_comm(c, g) is its communicator. */
    const uint32_t *group_world;
    const uint32_t *group_rank;
} zero_layout;

/* A piece of the flat space [flat_lo, flat_hi) mapped onto a rank's
 * partition buffer at part_lo. */
typedef struct zero_owned_range {
    uint64_t flat_lo, flat_hi;
    uint64_t part_lo;
} zero_owned_range;

/* ------------------------------------------------------------------------ */
/* Bucket engine                                                             */
/* ------------------------------------------------------------------------ */
typedef int32_t zero_bucket_mode;
enum {
    /* Gradients accumulate in a full flat fp32 buffer (`flat`); at a
     * reducing micro-step each bucket is all-reduced in place. Stage 0. */
    ZERO_BUCKETS_ALLREDUCE = 0,
    /* Same buffer, but each bucket is reduce-scattered in place: after the
     * flush only this rank's owned ranges of `flat` hold the reduced sum
     * (the rest is dead: with a 16-bit communication_data_type and a
     * pre-factor other than 1 it is left scaled by that factor).
     * Stage 1 (half the traffic of an all-reduce). */
    ZERO_BUCKETS_SCATTER_INPLACE = 1,
    /* Gradients go to bounded staging buckets; each full bucket is
     * reduce-scattered and the owned part ADDED into `partition`
     * (part_numel fp32).  No full gradient ever exists.  Stage 2/3. */
    ZERO_BUCKETS_SCATTER = 2
};

typedef struct zero_bucket_spec {
    uint32_t struct_size;
    zero_bucket_mode mode;
    zero_comm *comm;          /* NULL = world */
    uint64_t bucket_numel;    /* max elements per bucket; clamped to what the model can need */
    int32_t overlap;          /* launch a bucket as soon as it is complete */
    int32_t contiguous;       /* SCATTER: grad_slot hands out the staging slot itself */
    void *flat;               /* ALLREDUCE / SCATTER_INPLACE: flat_numel elements of grad_dtype (plugin-owned) */
    void *partition;          /* SCATTER: part_numel elements of grad_dtype, accumulator (plugin-owned) */
    int32_t reduce_every_micro_step; /* 1: reduce on every micro-step (stage 2/3);
                                        0: only on the accumulation boundary (stage 0/1, pp) */
    zero_dtype grad_dtype;    /* dtype of flat/partition/slots (the model dtype); sums are formed in fp32 */
    /* ---- appended in 1.0 by offload (read only when struct_size covers them) ---- */
    /* Optional: told when this rank's reduced block of a bucket is final for
     * the current reducing micro-step, so a plugin can move it on (offload:
     * copy it to host memory) while backward goes on instead of after
     * buckets_flush.  `block` gives the block's flat range and its offset in
     * the partition buffer (SCATTER: the block has been added into
     * `partition`; SCATTER_INPLACE / ALLREDUCE: `flat` holds the sum there).
     * Called once per bucket with a non-empty block per reducing micro-step,
     * in bucket order, on whichever thread completes the bucket (a hook
     * thread or the step thread inside buckets_flush), under the engine's
     * lock: keep it short (a copy, or enqueue one) and never call the bucket
     * engine from it.  Every call of a micro-step has returned when
     * buckets_flush returns.  `block` is borrowed for the call. */
    void (*on_block_final)(void *user, const zero_owned_range *block);
    void *on_block_final_user;
} zero_bucket_spec;

/* ------------------------------------------------------------------------ */
/* Optimizer step over a partition                                           */
/* ------------------------------------------------------------------------ */
typedef struct zero_opt_range {
    uint32_t struct_size;
    uint32_t reserved0;
    uint64_t flat_lo, flat_hi; /* global flat range: selects per-group hyper-parameters */
    float *master;             /* fp32 weights for the range (updated in place) */
    float *state[4];           /* optimizer state arrays (optim_state_count of them) */
    const void *grad;          /* summed gradient for the range, in grad_dtype */
    void *param_out;           /* optional copy-out of the new weights in model dtype, or NULL */
    zero_dtype param_out_dtype;
    float grad_mul;            /* multiply each gradient by this first (unscale * clip / (world*gas)) */
    zero_dtype grad_dtype;     /* F32 (default), BF16 or F16 */
    int32_t reserved1;
} zero_opt_range;

/* ------------------------------------------------------------------------ */
/* Partitioned step: the arrays a plugin steps at the boundary and how each */
/* is indexed.                                                               */
/* ------------------------------------------------------------------------ */
/* How an array is indexed: by global flat offset (a full flat buffer, e.g.
 * stage 1's gradient or parameters) or by partition offset (a rank's shard:
 * element flat_lo + i of range r is at ranges[r].part_lo + i). */
struct zero_step_ctx;    /* defined with the plugin table below */
struct zero_step_report;
typedef int32_t zero_index_kind;
enum { ZERO_INDEX_FLAT = 0, ZERO_INDEX_PART = 1 };

typedef struct zero_part_step {
    uint32_t struct_size;
    uint32_t nranges;
    const zero_owned_range *ranges; /* what this rank steps (borrowed for the call) */
    /* Norm and overflow: partial sums of squares of `grad` over `ranges` are
     * added over norm_comm, which must hold every summed gradient element
     * exactly once across its ranks (NULL = comm_global: every partition of
     * every pipeline stage).  replicated = 1: every rank of comm_world holds
     * the same ranges and values (stage 0), so only its rank 0 contributes. */
    zero_comm *norm_comm;
    int32_t replicated;
    zero_dtype dtype;               /* model dtype of grad and param_out */
    const void *grad;               /* reduced gradient sum, model dtype */
    zero_index_kind grad_index;
    zero_index_kind master_index;
    float *master;                  /* fp32 master weights, updated in place */
    float *state[4];                /* optimizer states, ZERO_INDEX_PART */
    void *param_out;                /* model-dtype copy-out of the new weights, or NULL (fp32: master is the param) */
    zero_index_kind param_out_index;
    int32_t reserved0;
    /* ---- appended in 1.1 (read only when struct_size covers it) ---- */
    zero_dtype grad_dtype;          /* dtype of `grad`; older callers: `dtype` */
    int32_t reserved1;
} zero_part_step;

/* Outcome of the norm pass (all ranks of norm_comm agree on every field). */
typedef struct zero_grad_norm {
    uint32_t struct_size;
    int32_t overflow;   /* an Inf/NaN in any rank's gradient, or a non-finite sum of squares */
    double norm;        /* L2 norm of the mean, unscaled gradient (pre-clip); -1 on overflow */
    double clip_coef;   /* gradient_clipping / (norm + 1e-6) when norm > clip, else 1 (DeepSpeed's) */
    float grad_mul;     /* clip_coef / (grad_divisor * loss_scale): what optim_step multiplies grads by */
    int32_t reserved0;
} zero_grad_norm;

/* (1.3) Block quantization for the quantized collectives: `bits` 8 or 4,
 * one fp32 scale per `block` elements (0 = 256).  Symmetric
 * round-to-nearest: scale = max|block| / qmax (qmax 127 for int8, 7 for
 * int4), so every element comes back within max|block| / (2 qmax) of its
 * value (plus one fp32 rounding, and one rounding to a 16-bit dtype); a
 * block holding an Inf or NaN comes back all NaN.  On the wire: the scales
 * and the packed values, ceil(n / block) * 4 + n (int8) or ceil(n / 2)
 * (int4) bytes for n elements, rounded up to a multiple of 4. */
typedef struct zero_quant_spec {
    uint32_t struct_size; /* sizeof(zero_quant_spec) */
    int32_t bits;         /* 8 or 4 */
    uint32_t block;       /* elements per scale, 0 = 256 */
    uint32_t reserved0;
    /* reduce_scatter_quantized only: NULL, or sum(counts) fp32 elements
     * owned by the caller (zero at first): added to send before
     * quantization and replaced by what the quantization lost, so the
     * error is carried into the next call instead of lost (error feedback,
     * as in 1-bit Adam): over many calls the sums stay unbiased. */
    float *error_feedback;
} zero_quant_spec;
#define ZERO_QUANT_SPEC_INIT { sizeof(zero_quant_spec), 8, 0, 0, NULL }

/* ------------------------------------------------------------------------ */
/* Services, revision 2 (plugin ABI 1.6): what the core offers a plugin,     */
/* laid out by topic.  The core owns the table and everything it returns     */
/* unless an entry says otherwise; the table is valid from create() until    */
/* destroy() returns, and so is svc->core.  Frozen: a later change is a new  */
/* revision (zero_services_v3), adapted by the core at load; a plugin never  */
/* checks struct_size (the core gives a table of the revision the plugin     */
/* exports, complete).                                                       */
/*                                                                           */
/* Threads, unless an entry says otherwise: "any" = any thread, also         */
/* concurrently; "step" = the thread inside the plugin's create,             */
/* params_done, step, save, load, sync or destroy (one at a time per         */
/* engine).  Collectives must be issued in the same order on every rank of  */
/* the communicator.                                                         */
/* ------------------------------------------------------------------------ */
typedef struct zero_services_v2 {
    uint32_t struct_size; /* sizeof(zero_services_v2) */
    uint32_t abi_version; /* ZERO_ABI_VERSION of the core */
    zero_core *core;      /* pass back to the zero_core* entries */

    /* ---- 1. log and errors ------------------------------------------- */
    /* A line in the engine's log (ZERO_LOG_LEVEL filters).  Any thread. */
    void (*log)(zero_core *c, zero_log_level lvl, const char *fmt, ...) ZERO_PRINTF(3, 4);
    /* Set the engine's last-error text (zero_last_error); returns `s`, for
     * `return svc->error(c, ZERO_ERR_..., "...")`.  Any thread. */
    zero_status (*error)(zero_core *c, zero_status s, const char *fmt, ...) ZERO_PRINTF(3, 4);

    /* ---- 2. configuration -------------------------------------------- */
    /* The parsed run configuration: owned by the core, read-only, valid
     * for the engine's life.  Any thread. */
    const zero_run_config *(*config)(zero_core *c);
    /* Lookup by dotted key path ("zero_optimization.my_plugin_key"): 1 and
     * *out filled if present with that type, 0 if absent, -1 if of another
     * type.  Strings are owned by the core, valid for the engine's life.
     * Any thread. */
    int (*cfg_int)(zero_core *c, const char *path, int64_t *out);
    int (*cfg_double)(zero_core *c, const char *path, double *out);
    int (*cfg_bool)(zero_core *c, const char *path, int *out);
    int (*cfg_string)(zero_core *c, const char *path, const char **out);

    /* ---- 3. parameters and layout ------------------------------------ */
    /* Registered params, in registration order.  param(i) is owned by the
     * core, valid for the engine's life; the plugin sets its data pointer
     * (params_done) and may keep its own pointer in plugin_data.  NULL for
     * i out of range.  Any thread; a param's fields only from the thread
     * the host calls for that param. */
    uint32_t (*nparams)(zero_core *c);
    zero_param_info *(*param)(zero_core *c, uint32_t index);
    /* The flat layout (groups, rank partitions): NULL before params_done,
     * then owned by the core and fixed for the engine's life.  Any thread. */
    const zero_layout *(*layout)(zero_core *c);
    /* Pieces of [flat_lo, flat_hi) owned by `rank` (at most one per group
     * the range touches) into out[0..cap); returns how many.  Any thread.
     * With expert groups (layout->group_world) `rank` is read per group: for
     * this rank's own number, its place in each group's communicator; any
     * other value is taken as a place in that communicator (a group with
     * fewer places is skipped).  So it answers "what do I own" everywhere,
     * but for another rank's pieces of an expert group compute them from
     * the layout (group g's place k owns [flat_begin + k * part_numel,
     * + part_numel) at part_offset): plugins/stage3/stage3_layout.c. */
    uint32_t (*owned_ranges)(zero_core *c, uint32_t rank, uint64_t flat_lo, uint64_t flat_hi,
                             zero_owned_range *out, uint32_t cap);
    /* Is the current micro-step the last of its accumulation window?  Step
     * thread, or a hook thread between zero_step calls. */
    int (*micro_is_boundary)(zero_core *c);
    /* Place every param into `flat` (flat_numel elements of dt, plugin
     * owned): copy its initial values (host or device memory) to its flat
     * offset and set p->data there.  Every param must be registered in dt
     * (else ZERO_ERR_UNSUPPORTED naming it and `who`).  Step thread
     * (params_done). */
    zero_status (*params_place)(zero_core *c, void *flat, zero_dtype dt, const char *who);

    /* ---- 4. memory --------------------------------------------------- */
    /* Accounted (zero_memory_stats, by tier and tag), 64-byte aligned,
     * zero-filled; NULL when out of memory (last error set).  The plugin
     * owns the block until mem_free (NULL: no-op); free every block before
     * destroy returns.  ZERO_TIER_DEVICE blocks on a CUDA engine are device
     * memory: clear and copy them only with mem_set / mem_copy.  Any
     * thread. */
    void *(*mem_alloc)(zero_core *c, zero_mem_tier tier, zero_mem_tag tag, size_t bytes);
    void (*mem_free)(zero_core *c, void *p);
    /* dst[0..bytes) = (unsigned char)value, host or device memory, ordered
     * with the core's other device work; ZERO_ERR_DEVICE if the device
     * failed.  Any thread. */
    zero_status (*mem_set)(zero_core *c, void *dst, int value, size_t bytes);
    /* Copy in any direction (host/device); a device failure is logged and
     * set as the last error.  Any thread. */
    void (*mem_copy)(zero_core *c, void *dst, const void *src, size_t bytes);

    /* ---- 5. communicators -------------------------------------------- */
    /* comm_world: this rank's data-parallel group (with pipeline.stages > 1
     * the ranks holding the same pipeline stage); comm_global: every rank
     * of the job (the norm and overflow of a pipelined model); group_comm:
     * the communicator layout group g is partitioned over (comm_world for a
     * dense group, the expert-data-parallel group of an expert group; NULL
     * for g out of range).  All three are owned by the core, valid until
     * destroy: never free them.  Any thread. */
    zero_comm *(*comm_world)(zero_core *c);
    zero_comm *(*comm_global)(zero_core *c);
    zero_comm *(*group_comm)(zero_core *c, uint32_t g);
    int (*comm_rank)(const zero_comm *m);
    int (*comm_size)(const zero_comm *m);
    /* New communicators, owned by the plugin (comm_free before destroy),
     * counted in the engine's zero_comm_stats.  comm_split: MPI_Comm_split
     * semantics.  comm_split_node: the ranks of m on this rank's node, in
     * m's order (ZERO_RANKS_PER_NODE=k: "nodes" of k consecutive ranks, to
     * simulate several nodes on one machine).  Collective over m; step
     * thread. */
    zero_status (*comm_split)(zero_comm *m, int color, int key, zero_comm **out);
    zero_status (*comm_split_node)(zero_comm *m, zero_comm **out);
    void (*comm_free)(zero_comm *m);
    /* What has crossed m so far (calls, payload bytes), as zero_comm_stats
     * reports it; out->struct_size set by the caller.  Any thread. */
    zero_status (*comm_counters)(zero_comm *m, zero_comm_stats *out);

    /* ---- 6. collectives ---------------------------------------------- */
    /* Blocking: return when the result is in place.  Non-blocking (i*):
     * *req is owned by the caller until wait frees it (or test reports it
     * done and frees it); the buffers stay owned by the caller and must not
     * be touched until then.  Any thread, one collective order per
     * communicator on every rank. */
    zero_status (*allreduce)(zero_comm *m, void *buf, size_t count, zero_dtype dt, zero_reduce_op op);
    zero_status (*broadcast)(zero_comm *m, void *buf, size_t count, zero_dtype dt, int root);
    zero_status (*barrier)(zero_comm *m);
    zero_status (*iallreduce)(zero_comm *m, void *buf, size_t count, zero_dtype dt, zero_reduce_op op,
                              zero_comm_req **req);
    /* send holds sum(counts) elements, rank r's block at offset sum(counts[<r]);
     * recv receives this rank's reduced block (counts[rank] elements). */
    zero_status (*ireduce_scatterv)(zero_comm *m, const void *send, void *recv, const size_t *counts,
                                    zero_dtype dt, zero_comm_req **req);
    /* recv receives all blocks concatenated; send may alias recv's own block. */
    zero_status (*iallgatherv)(zero_comm *m, const void *send, void *recv, const size_t *counts,
                               zero_dtype dt, zero_comm_req **req);
    zero_status (*wait)(zero_comm_req *req);            /* frees req */
    zero_status (*test)(zero_comm_req *req, int *done); /* frees req when done */
    /* Batch the non-blocking collectives this thread issues on m until the
     * matching comm_group_end into one launch (NCCL: one group; MPI and
     * single-process: no-ops).  Groups nest; every start needs its end
     * from the same thread, also after an error.  Not collective itself. */
    zero_status (*comm_group_start)(zero_comm *m);
    zero_status (*comm_group_end)(zero_comm *m);
    /* Quantized, blocking, bitwise repeatable; q borrowed for the call.
     * Host memory, or device memory of the engine's device (issue 33:
     * quantized there by the CUDA kernels, bitwise the host result; a
     * library before it, or a device without the kernels, answers
     * ZERO_ERR_UNSUPPORTED); every non-empty operand on the same side
     * (ZERO_ERR_INVALID_ARGUMENT otherwise).
     * allgather_quantized: in place, recv holds sum(counts) elements of dt
     * (F32, BF16, F16), this rank's block at offset sum(counts[<rank]); on
     * return every block (this rank's too) holds the dequantized values.
     * reduce_scatter_quantized: send holds block r for rank r; recv
     * (counts[rank] elements, not overlapping send) receives the fp32 sum,
     * in rank order, of the dequantized blocks (q->error_feedback: see
     * zero_quant_spec).  Collective. */
    zero_status (*allgather_quantized)(zero_comm *m, void *recv, const size_t *counts, zero_dtype dt,
                                       const zero_quant_spec *q);
    zero_status (*reduce_scatter_quantized)(zero_comm *m, const void *send, void *recv, const size_t *counts,
                                            zero_dtype dt, const zero_quant_spec *q);

    /* ---- 7. gradient buckets ----------------------------------------- */
    /* A bucket set: gradients stream into fixed-size buckets as hooks fire
     * and full buckets are reduced (allreduce, or reduce-scatter to the
     * owners) while backward goes on.  spec is copied; its buffers stay
     * owned by the plugin and must outlive the set.  Create and destroy on
     * the step thread (params_done / destroy); grad_slot and ready from
     * any hook thread, concurrently for different params; flush on the
     * step thread, after every ready of the micro-step. */
    zero_status (*buckets_create)(zero_core *c, const zero_bucket_spec *spec, zero_buckets **out);
    /* Where param `index` adds its gradient this micro-step (grad_dtype);
     * owned by the set, valid until the param's buckets_ready. */
    zero_status (*buckets_grad_slot)(zero_buckets *b, uint32_t index, void **slot);
    /* Param `index` is final; a non-NULL src (a host-owned gradient of dtype
     * dt, borrowed for the call) is added into the slot first. */
    zero_status (*buckets_ready)(zero_buckets *b, uint32_t index, const void *src, zero_dtype dt);
    /* End of micro-step: launch what is left, wait for everything, reset. */
    zero_status (*buckets_flush)(zero_buckets *b);
    void (*buckets_destroy)(zero_buckets *b);

    /* ---- 8. parameter gather ----------------------------------------- */
    /* All-gather, in place, every layout group's equal rank shares of a
     * flat buffer (rank r's share of group g at groups[g].flat_begin + r *
     * part_numel) over comm (NULL = comm_world; expert groups over their
     * own communicator).  Every issued request is waited, also after an
     * error.  Collective; step thread. */
    zero_status (*allgather_shares)(zero_core *c, zero_comm *comm, void *flat, zero_dtype dt);

    /* ---- 9. optimizer and kernels ------------------------------------ */
    /* fp32 arrays of optimizer state per element.  Any thread. */
    uint32_t (*optim_state_count)(zero_core *c);
    /* One fused pass over r (borrowed): grad *= grad_mul, update master and
     * states for the global step about to be taken (per-group lr / betas /
     * decay), round out to param_out.  Refuses Lamb (use part_step).  Step
     * thread or the plugin's own worker threads on disjoint ranges. */
    zero_status (*optim_step)(zero_core *c, const zero_opt_range *r);
    /* fp64 sum of squares / any Inf or NaN, host or device memory (a
     * device failure reads as NaN / 1: the step is skipped).  Any thread. */
    double (*sumsq)(zero_core *c, const void *x, zero_dtype dt, size_t n);
    int (*nonfinite)(zero_core *c, const void *x, zero_dtype dt, size_t n);
    /* dst = src converted (RNE, NaN stays NaN); dst += src.  Any thread. */
    void (*convert)(zero_core *c, void *dst, zero_dtype dst_dt, const void *src, zero_dtype src_dt, size_t n);
    void (*add_into)(zero_core *c, float *dst, const void *src, zero_dtype src_dt, size_t n);
    /* The partitioned step every strategy shares (ps borrowed for the
     * call; collective over ps->norm_comm or comm_global; step thread,
     * between buckets_flush and the parameter all-gather).  grad_norm: the
     * global norm and overflow in one fp64 all-reduce, *out filled from ctx
     * (grad_divisor, loss_scale, grad_clip).  part_step: the fused
     * optimizer pass over every range (Lamb: one more all-reduce for its
     * trust ratios).  boundary_step: both, and the report (overflow ->
     * rep->overflow = 1, grad_norm -1, no update).  master_init: widen the
     * owned shares of `params` into ps->master when it is a separate fp32
     * array (no-op when ps->master == params); local. */
    zero_status (*grad_norm)(zero_core *c, const zero_part_step *ps, const struct zero_step_ctx *ctx,
                             zero_grad_norm *out);
    zero_status (*part_step)(zero_core *c, const zero_part_step *ps, float grad_mul);
    zero_status (*boundary_step)(zero_core *c, const zero_part_step *ps, const struct zero_step_ctx *ctx,
                                 struct zero_step_report *rep);
    zero_status (*master_init)(zero_core *c, const zero_part_step *ps, const void *params);

    /* ---- 10. checkpoints --------------------------------------------- */
    /* Inside the plugin's save / load only (step thread).  ckpt_write /
     * ckpt_read: one named blob per rank, atomic (temp file, fsync,
     * rename), host or device buffer (borrowed); the name "client_state"
     * is the host's (zero_save_options.client_state) and refused (libzero
     * 1.8).  ckpt_shard: this rank's
     * shard of a partitioned optimizer as blobs "<prefix>.params" (owned
     * shares of params, skipped when NULL), ".master" (when separate) and
     * ".state<k>", each the concatenation of ps's ranges; with a
     * resharding load it fills them from whichever saved files hold them.
     * ckpt_agree: agree over comm (NULL = comm_world) on a load's local
     * status, so that a missing shard fails every rank instead of hanging
     * the others (collective).  ckpt_reshard: nonzero inside a load of a
     * checkpoint written by another world size, plugin or layout (then
     * ckpt_read of the plugin's own blobs fails; derive what you keep
     * besides from the shards and clear gradient accumulators). */
    zero_status (*ckpt_write)(zero_core *c, const char *dir, const char *name, const void *buf, size_t bytes);
    zero_status (*ckpt_read)(zero_core *c, const char *dir, const char *name, void *buf, size_t bytes);
    zero_status (*ckpt_shard)(zero_core *c, const char *dir, const char *prefix, const zero_part_step *ps,
                              void *params, int write);
    zero_status (*ckpt_agree)(zero_core *c, zero_comm *comm, zero_status local, const char *dir, const char *who);
    int (*ckpt_reshard)(zero_core *c);

    /* ---- 11. trace --------------------------------------------------- */
    /* The engine's timeline (ZERO_TRACE / config "trace", docs/trace.md).
     * trace_clock: monotonic nanoseconds while tracing is on, else 0 (so a
     * disabled trace costs one call).  trace_span: a complete event
     * [t0, t1) on the calling thread's track, category "plugin", with one
     * optional numeric argument (key NULL: none); no-op when t0 is 0.  name
     * and key are copied (interned for the process's life): pass short,
     * fixed names, not per-call text.  Any thread. */
    uint64_t (*trace_clock)(zero_core *c);
    void (*trace_span)(zero_core *c, const char *name, uint64_t t0, uint64_t t1, const char *key, double value);
} zero_services_v2;


/* ------------------------------------------------------------------------ */
/* Planning (1.2): what a plugin's optional `plan` entry receives.  No      */
/* engine exists: `core` is a planning context, valid for the call only;    */
/* pass it back to these functions and never to zero_services_v1's.         */
/* ------------------------------------------------------------------------ */
typedef struct zero_plan_services_v1 {
    uint32_t struct_size;
    uint32_t abi_version;
    zero_core *core;
    const zero_run_config *(*config)(zero_core *c);   /* as the engine would resolve it */
    int (*cfg_int)(zero_core *c, const char *path, int64_t *out);       /* as zero_services_v1 */
    int (*cfg_double)(zero_core *c, const char *path, double *out);
    int (*cfg_bool)(zero_core *c, const char *path, int *out);
    int (*cfg_string)(zero_core *c, const char *path, const char **out);
    uint32_t (*nparams)(zero_core *c);
    /* numel, dtype (the model dtype), group, index and flat_offset are set;
     * no data pointers */
    const zero_param_info *(*param)(zero_core *c, uint32_t index);
    const zero_layout *(*layout)(zero_core *c);       /* rank 0's; partitions are equal on every rank */
    uint32_t (*optim_state_count)(zero_core *c);
    /* The plugin will hold `bytes` in (tier, tag) at its peak: call once per
     * allocation (or once per category with the sum). */
    void (*add)(zero_core *c, zero_mem_tier tier, zero_mem_tag tag, uint64_t bytes);
    /* Peak bytes (device tier, ZERO_MEM_BUCKETS) of the staging pool that
     * buckets_create(spec) would allocate, for hooks in bucket order.
     * Records nothing: pass it to add().  spec->flat / partition may be NULL. */
    uint64_t (*buckets_bytes)(zero_core *c, const zero_bucket_spec *spec);
    zero_status (*error)(zero_core *c, zero_status s, const char *fmt, ...) ZERO_PRINTF(3, 4);
} zero_plan_services_v1;

/* ------------------------------------------------------------------------ */
/* The plugin table                                                          */
/* ------------------------------------------------------------------------ */
/* What zero_step tells the plugin. */
typedef struct zero_step_ctx {
    uint32_t struct_size;
    int32_t boundary;      /* this micro-step ends the accumulation window */
    uint32_t micro_step;   /* 0 .. grad_accum-1 */
    uint32_t grad_accum;
    uint64_t global_step;  /* optimizer steps taken before this one */
    double loss_scale;     /* gradients carry this factor */
    double grad_clip;      /* 0 = off */
    double grad_divisor;   /* summed gradient / grad_divisor = mean gradient (world * gas) */
    void *stream;
} zero_step_ctx;

/* What the plugin reports back from step (at a boundary). */
typedef struct zero_step_report {
    uint32_t struct_size;
    int32_t overflow;      /* Inf/NaN found on any rank (step skipped) */
    double grad_norm;      /* global norm of the mean, unscaled gradient, pre-clip */
} zero_step_report;

/* Capabilities. */
enum {
    ZERO_PLUGIN_CAP_PARTITIONS_PARAMS = 1u << 0, /* stage 3: gather/release do real work */
    ZERO_PLUGIN_CAP_PIPELINE = 1u << 1,          /* safe with pipeline parallelism */
    ZERO_PLUGIN_CAP_OFFLOAD = 1u << 2,
    /* (1.1) honours zero_run_config.grad_accum_dtype / comm_dtype; without it
     * the core resolves both to the model dtype for this plugin */
    ZERO_PLUGIN_CAP_GRAD_DTYPES = 1u << 3,
    /* (1.2) its model state is saved entirely through ckpt_shard (plus
     * opaque blobs that are derived data or gradients), and its load
     * handles ckpt_reshard: checkpoints move between world sizes and
     * plugins that both declare it */
    ZERO_PLUGIN_CAP_RESHARD = 1u << 4,
    /* (1.3) supports expert groups (zero_group_desc.expert_color): one
     * bucket set per partition communicator (svc->group_comm), gradients
     * and shares of a group only over its own communicator.  The core
     * refuses expert groups with a plugin that lacks it. */
    ZERO_PLUGIN_CAP_EXPERT_GROUPS = 1u << 5,
    /* (1.4) gather returns with the gathered values complete in memory (it
     * waited for its collectives and queued no device work that the host
     * must wait for), so on a CUDA engine zero_gather need not order the
     * host's stream after libzero's -- which would also make the host's
     * compute wait for every reduction queued there.  Without it the core
     * orders the host's stream after libzero's stream at each gather. */
    ZERO_PLUGIN_CAP_GATHER_COMPLETE = 1u << 6
};

/* (1.7) One slice of a stacked param (zero_register_stacked): elements
 * [layer * numel / layers, (layer + 1) * numel / layers) of param. */
typedef struct zero_slice_ref {
    zero_param_info *param; /* the whole stacked param (the core's; borrowed) */
    uint32_t layer;         /* which slice: < layers */
    uint32_t layers;        /* how many slices the stack has (>= 1) */
} zero_slice_ref;

/* ------------------------------------------------------------------------ */
/* The plugin table, revision 2 (plugin ABI 1.6).  Frozen like the          */
/* services: a later change is zero_plugin_table_v3 / zero_plugin_v3.  The   */
/* first six fields are those of every revision (the loader reads them       */
/* before it knows which revision it holds).                                 */
/*                                                                           */
/* The core calls one engine's entries from one thread at a time, except     */
/* grad_buffer and on_grad_ready, which may run concurrently for different   */
/* params (the host may call from several threads).                          */
/* ------------------------------------------------------------------------ */
typedef struct zero_plugin_table_v2 {
    uint32_t struct_size; /* sizeof(zero_plugin_table_v2) */
    uint32_t abi_major;   /* ZERO_PLUGIN_ABI_MAJOR the plugin was built with */
    uint32_t abi_minor;   /* ZERO_PLUGIN_ABI_MINOR: 6 or later */
    uint32_t caps;        /* ZERO_PLUGIN_CAP_* */
    const char *name;     /* what the host selects it by; static storage */
    const char *description;

    /* ---- lifecycle --------------------------------------------------- */
    /* Required.  Allocate the plugin's state; keep svc (valid until
     * destroy returns).  On error free everything (destroy is not called). */
    zero_status (*create)(const zero_services_v2 *svc, void **state);
    /* Required.  Free everything the plugin allocated (mem_free, comm_free,
     * buckets_destroy); the core calls sync first when given. */
    void (*destroy)(void *state);
    /* Optional: drain asynchronous work (before step, save and destroy). */
    zero_status (*sync)(void *state);

    /* ---- parameters -------------------------------------------------- */
    /* Optional: inspect or veto a registration (the core recorded it). */
    zero_status (*register_param)(void *state, zero_param_info *p);
    /* Required.  The layout is final: allocate storage, copy init_data,
     * set p->data for every param (params_place does it for flat layouts). */
    zero_status (*params_done)(void *state);
    /* Optional: zero_set_phase(phase) (1..63 characters, checked by the
     * core).  NULL: phases change nothing for this plugin. */
    zero_status (*set_phase)(void *state, const char *phase);

    /* ---- gather (stage 3) -------------------------------------------- */
    /* Optional (NULL: ptrs[i] = params[i]->data).  See zero_gather /
     * zero_release in zero.h; params and ptrs are borrowed for the call. */
    zero_status (*gather)(void *state, zero_param_info *const *params, size_t n, void **ptrs);
    zero_status (*release)(void *state, zero_param_info *const *params, size_t n);

    /* ---- gradients (hook threads) ------------------------------------ */
    /* Required: where to add p's gradient this micro-step. */
    zero_status (*grad_buffer)(void *state, zero_param_info *p, void **buf);
    /* Required: p's gradient is final (host_grad, if any, holds it). */
    zero_status (*on_grad_ready)(void *state, zero_param_info *p, void *stream);

    /* ---- step -------------------------------------------------------- */
    /* Required: end of micro-step; at a boundary reduce, step and refresh
     * the parameters (ctx and rep are the core's, valid for the call). */
    zero_status (*step)(void *state, const zero_step_ctx *ctx, zero_step_report *rep);

    /* ---- checkpoints ------------------------------------------------- */
    /* Optional: this rank's shard, through the checkpoint services. */
    zero_status (*save)(void *state, const char *dir);
    zero_status (*load)(void *state, const char *dir);

    /* ---- planning ---------------------------------------------------- */
    /* Optional: record through ps->add every byte this plugin would
     * allocate per rank for the model ps describes (zero_plan,
     * tools/zero-estimate, "stage": "auto").  No engine or state exists.
     * NULL: the plugin cannot be planned. */
    zero_status (*plan)(const zero_plan_services_v1 *ps);
} zero_plugin_table_v2;

/* ------------------------------------------------------------------------ */
/* The plugin table, revision 3 (plugin ABI 1.7): revision 2 plus the       */
/* slice gathers.  Frozen like the others: a later change is                */
/* zero_plugin_table_v4 / zero_plugin_v4.  It receives the services of      */
/* revision 2 (unchanged).  The first six fields are those of every         */
/* revision (the loader reads them before it knows which it holds).         */
/* ------------------------------------------------------------------------ */
typedef struct zero_plugin_table_v3 {
    uint32_t struct_size; /* sizeof(zero_plugin_table_v3) */
    uint32_t abi_major;   /* ZERO_PLUGIN_ABI_MAJOR the plugin was built with */
    uint32_t abi_minor;   /* ZERO_PLUGIN_ABI_MINOR: 7 or later */
    uint32_t caps;        /* ZERO_PLUGIN_CAP_* */
    const char *name;     /* what the host selects it by; static storage */
    const char *description;

    /* ---- lifecycle --------------------------------------------------- */
    /* Required.  Allocate the plugin's state; keep svc (valid until
     * destroy returns).  On error free everything (destroy is not called). */
    zero_status (*create)(const zero_services_v2 *svc, void **state);
    /* Required.  Free everything the plugin allocated (mem_free, comm_free,
     * buckets_destroy); the core calls sync first when given. */
    void (*destroy)(void *state);
    /* Optional: drain asynchronous work (before step, save and destroy). */
    zero_status (*sync)(void *state);

    /* ---- parameters -------------------------------------------------- */
    /* Optional: inspect or veto a registration (the core recorded it). */
    zero_status (*register_param)(void *state, zero_param_info *p);
    /* Required.  The layout is final: allocate storage, copy init_data,
     * set p->data for every param (params_place does it for flat layouts). */
    zero_status (*params_done)(void *state);
    /* Optional: zero_set_phase(phase) (1..63 characters, checked by the
     * core).  NULL: phases change nothing for this plugin. */
    zero_status (*set_phase)(void *state, const char *phase);

    /* ---- gather (stage 3) -------------------------------------------- */
    /* Optional (NULL: ptrs[i] = params[i]->data).  See zero_gather /
     * zero_release in zero.h; params and ptrs are borrowed for the call. */
    zero_status (*gather)(void *state, zero_param_info *const *params, size_t n, void **ptrs);
    zero_status (*release)(void *state, zero_param_info *const *params, size_t n);

    /* ---- gradients (hook threads) ------------------------------------ */
    /* Required: where to add p's gradient this micro-step. */
    zero_status (*grad_buffer)(void *state, zero_param_info *p, void **buf);
    /* Required: p's gradient is final (host_grad, if any, holds it). */
    zero_status (*on_grad_ready)(void *state, zero_param_info *p, void *stream);

    /* ---- step -------------------------------------------------------- */
    /* Required: end of micro-step; at a boundary reduce, step and refresh
     * the parameters (ctx and rep are the core's, valid for the call). */
    zero_status (*step)(void *state, const zero_step_ctx *ctx, zero_step_report *rep);

    /* ---- checkpoints ------------------------------------------------- */
    /* Optional: this rank's shard, through the checkpoint services. */
    zero_status (*save)(void *state, const char *dir);
    zero_status (*load)(void *state, const char *dir);

    /* ---- planning ---------------------------------------------------- */
    /* Optional: record through ps->add every byte this plugin would
     * allocate per rank for the model ps describes (zero_plan,
     * tools/zero-estimate, "stage": "auto").  No engine or state exists.
     * NULL: the plugin cannot be planned. */
    zero_status (*plan)(const zero_plan_services_v1 *ps);

    /* ---- slices of stacked params (1.7, host ABI 1.6) ------------------ */
    /* Optional, both or neither (NULL: the core serves zero_gather_slices
     * from gather of the whole param plus the slice's offset).  See
     * zero_gather_slices / zero_release_slices in zero.h: ptrs[i] is slice
     * refs[i].layer's refs[i].param->numel / refs[i].layers elements,
     * plugin-owned, valid until the matching release_slices and at most
     * until step.  The core has checked that every ref names a stacked
     * param and a layer in range.  refs and ptrs are borrowed for the call.
     * Engine thread, like gather. */
    zero_status (*gather_slices)(void *state, const zero_slice_ref *refs, size_t n, void **ptrs);
    zero_status (*release_slices)(void *state, const zero_slice_ref *refs, size_t n);
} zero_plugin_table_v3;

/* The symbol a revision-3 plugin exports (and nothing else). */
#define ZERO_PLUGIN_SYMBOL_V3 "zero_plugin_v3"

/* ------------------------------------------------------------------------ */
/* The plugin table, revision 4 (plugin ABI 1.8): revision 3 plus           */
/* write_params (zero_params_write, host ABI 1.10).  Frozen like the        */
/* others: a later change is zero_plugin_table_v5 / zero_plugin_v5.  It     */
/* receives the services of revision 2 (unchanged).  The first six fields   */
/* are those of every revision (the loader reads them before it knows       */
/* which it holds).                                                         */
/* ------------------------------------------------------------------------ */
typedef struct zero_plugin_table_v4 {
    uint32_t struct_size; /* sizeof(zero_plugin_table_v4) */
    uint32_t abi_major;   /* ZERO_PLUGIN_ABI_MAJOR the plugin was built with */
    uint32_t abi_minor;   /* ZERO_PLUGIN_ABI_MINOR: 8 or later */
    uint32_t caps;        /* ZERO_PLUGIN_CAP_* */
    const char *name;     /* what the host selects it by; static storage */
    const char *description;

    /* ---- lifecycle --------------------------------------------------- */
    /* Required.  Allocate the plugin's state; keep svc (valid until
     * destroy returns).  On error free everything (destroy is not called). */
    zero_status (*create)(const zero_services_v2 *svc, void **state);
    /* Required.  Free everything the plugin allocated (mem_free, comm_free,
     * buckets_destroy); the core calls sync first when given. */
    void (*destroy)(void *state);
    /* Optional: drain asynchronous work (before step, save and destroy). */
    zero_status (*sync)(void *state);

    /* ---- parameters -------------------------------------------------- */
    /* Optional: inspect or veto a registration (the core recorded it). */
    zero_status (*register_param)(void *state, zero_param_info *p);
    /* Required.  The layout is final: allocate storage, copy init_data,
     * set p->data for every param (params_place does it for flat layouts). */
    zero_status (*params_done)(void *state);
    /* Optional: zero_set_phase(phase) (1..63 characters, checked by the
     * core).  NULL: phases change nothing for this plugin. */
    zero_status (*set_phase)(void *state, const char *phase);

    /* ---- gather (stage 3) -------------------------------------------- */
    /* Optional (NULL: ptrs[i] = params[i]->data).  See zero_gather /
     * zero_release in zero.h; params and ptrs are borrowed for the call. */
    zero_status (*gather)(void *state, zero_param_info *const *params, size_t n, void **ptrs);
    zero_status (*release)(void *state, zero_param_info *const *params, size_t n);

    /* ---- gradients (hook threads) ------------------------------------ */
    /* Required: where to add p's gradient this micro-step. */
    zero_status (*grad_buffer)(void *state, zero_param_info *p, void **buf);
    /* Required: p's gradient is final (host_grad, if any, holds it). */
    zero_status (*on_grad_ready)(void *state, zero_param_info *p, void *stream);

    /* ---- step -------------------------------------------------------- */
    /* Required: end of micro-step; at a boundary reduce, step and refresh
     * the parameters (ctx and rep are the core's, valid for the call). */
    zero_status (*step)(void *state, const zero_step_ctx *ctx, zero_step_report *rep);

    /* ---- checkpoints ------------------------------------------------- */
    /* Optional: this rank's shard, through the checkpoint services. */
    zero_status (*save)(void *state, const char *dir);
    zero_status (*load)(void *state, const char *dir);

    /* ---- planning ---------------------------------------------------- */
    /* Optional: record through ps->add every byte this plugin would
     * allocate per rank for the model ps describes (zero_plan,
     * tools/zero-estimate, "stage": "auto").  No engine or state exists.
     * NULL: the plugin cannot be planned. */
    zero_status (*plan)(const zero_plan_services_v1 *ps);

    /* ---- slices of stacked params (1.7, host ABI 1.6) ------------------ */
    /* Optional, both or neither (NULL: the core serves zero_gather_slices
     * from gather of the whole param plus the slice's offset).  See
     * zero_gather_slices / zero_release_slices in zero.h: ptrs[i] is slice
     * refs[i].layer's refs[i].param->numel / refs[i].layers elements,
     * plugin-owned, valid until the matching release_slices and at most
     * until step.  The core has checked that every ref names a stacked
     * param and a layer in range.  refs and ptrs are borrowed for the call.
     * Engine thread, like gather. */
    zero_status (*gather_slices)(void *state, const zero_slice_ref *refs, size_t n, void **ptrs);
    zero_status (*release_slices)(void *state, const zero_slice_ref *refs, size_t n);

    /* ---- parameter values the host sets (1.8, host ABI 1.10) ----------- */
    /* Optional (NULL: zero_params_write is ZERO_ERR_UNSUPPORTED naming the
     * plugin).  Make params[i]'s values values[i] -- its numel elements in
     * its dtype, in the engine's device tier (device memory on a CUDA
     * engine), owned by the core, the same bytes on every rank of the
     * param's data-parallel group (the core broadcast them), valid for the
     * call -- in every copy the plugin keeps: the parameter (every rank's
     * copy or shard, every tier), and the fp32 master of a 16-bit model
     * widened from the values exactly (svc->convert), as params_done does
     * with init_data.  Optimizer states, step counters and every other
     * parameter stay bitwise as they are.  The core calls it between
     * accumulation windows (no gradient reported, none in flight), with
     * nothing gathered (zero_gather and zero_gather_slices all released),
     * on every rank of the engine with the params of this rank, each group
     * of ranks with the same params in the same order; it may split one
     * zero_params_write into several calls.  Gathered copies the plugin
     * caches (stage 3's persistent or prefetched params) must not show the
     * old values afterwards.  May communicate over the plugin's own
     * communicators (every rank of them is in the call).  params and values
     * are borrowed for the call.  Engine thread. */
    zero_status (*write_params)(void *state, zero_param_info *const *params, size_t n, const void *const *values);
} zero_plugin_table_v4;

/* The symbol a revision-4 plugin exports (and nothing else). */
#define ZERO_PLUGIN_SYMBOL_V4 "zero_plugin_v4"


/* The symbol a revision-2 plugin exports (and nothing else):
 *   ZERO_PLUGIN_EXPORT const zero_plugin_table_v2 zero_plugin_v2 = { ... };
 * or, following the newest revision of the headers it is built with:
 *   ZERO_PLUGIN_EXPORT const zero_plugin_table ZERO_PLUGIN_TABLE = { ... };  */
#define ZERO_PLUGIN_SYMBOL_V2 "zero_plugin_v2"

/* The newest revision under version-free names: code that follows the
 * newest ABI it is compiled against (the plugin kit, in-tree plugins) names
 * these; code that must stay on one released layout names the _vN. */
typedef zero_services_v2 zero_services;
typedef zero_plugin_table_v4 zero_plugin_table;
typedef zero_plan_services_v1 zero_plan_services;
#define ZERO_PLUGIN_TABLE zero_plugin_v4
#define ZERO_PLUGIN_SYMBOL ZERO_PLUGIN_SYMBOL_V4
/* The fields every table starts with, for the headers in use:
 *   ZERO_PLUGIN_EXPORT const zero_plugin_table ZERO_PLUGIN_TABLE = {
 *       ZERO_PLUGIN_TABLE_HEAD, .caps = ..., .name = "mine", .create = ..., ... };
 * (designated initializers: C99, or C++20). */
#define ZERO_PLUGIN_TABLE_HEAD \
    .struct_size = sizeof(zero_plugin_table), .abi_major = ZERO_PLUGIN_ABI_MAJOR, .abi_minor = ZERO_PLUGIN_ABI_MINOR

/* ======================================================================== */
/* Revision 1 (plugin ABI 1.0-1.5), frozen.  Plugins built against the 1.0  */
/* to 1.5 headers export zero_plugin_v1 and receive this table; the core    */
/* adapts both at load (core/plugin_abi.c).  New plugins use revision 2.    */
/* The entries mean what their namesakes in zero_services_v2 mean.          */
/* ======================================================================== */
/* ------------------------------------------------------------------------ */
/* Services, revision 1 (release order; appended in 1.0..1.5).  Owned by   */
/* the core; valid from create() until destroy() returns.                    */
/* ------------------------------------------------------------------------ */
typedef struct zero_services_v1 {
    uint32_t struct_size;
    uint32_t abi_version; /* ZERO_ABI_VERSION of the core */
    zero_core *core;

    /* logging and errors */
    void (*log)(zero_core *c, zero_log_level lvl, const char *fmt, ...) ZERO_PRINTF(3, 4);
    /* Set the engine's last-error text; returns `s` for `return svc->error(...)`. */
    zero_status (*error)(zero_core *c, zero_status s, const char *fmt, ...) ZERO_PRINTF(3, 4);

    /* configuration */
    const zero_run_config *(*config)(zero_core *c);
    /* Lookup by dotted key path ("zero_optimization.my_plugin_key").  Return
     * 1 and fill *out if present with that type, 0 if absent, -1 if wrong type. */
    int (*cfg_int)(zero_core *c, const char *path, int64_t *out);
    int (*cfg_double)(zero_core *c, const char *path, double *out);
    int (*cfg_bool)(zero_core *c, const char *path, int *out);
    int (*cfg_string)(zero_core *c, const char *path, const char **out); /* string owned by core */

    /* parameters and layout (layout valid from params_done on) */
    uint32_t (*nparams)(zero_core *c);
    zero_param_info *(*param)(zero_core *c, uint32_t index);
    const zero_layout *(*layout)(zero_core *c);
    /* Pieces of [flat_lo, flat_hi) owned by `rank` (at most one per group the
     * range touches); returns the number written to out[] (<= cap). */
    uint32_t (*owned_ranges)(zero_core *c, uint32_t rank, uint64_t flat_lo, uint64_t flat_hi,
                             zero_owned_range *out, uint32_t cap);
    /* Accumulation position: is the current micro-step the last of its window? */
    int (*micro_is_boundary)(zero_core *c);

    /* memory: accounted, 64-byte aligned, zero-filled.  free(NULL) is a no-op. */
    void *(*mem_alloc)(zero_core *c, zero_mem_tier tier, zero_mem_tag tag, size_t bytes);
    void (*mem_free)(zero_core *c, void *p);
    void (*mem_copy)(zero_core *c, void *dst, const void *src, size_t bytes);

    /* communication (world and sub-groups) */
    zero_comm *(*comm_world)(zero_core *c);
    int (*comm_rank)(const zero_comm *m);
    int (*comm_size)(const zero_comm *m);
    zero_status (*comm_split)(zero_comm *m, int color, int key, zero_comm **out);
    void (*comm_free)(zero_comm *m);
    zero_status (*allreduce)(zero_comm *m, void *buf, size_t count, zero_dtype dt, zero_reduce_op op);
    zero_status (*broadcast)(zero_comm *m, void *buf, size_t count, zero_dtype dt, int root);
    zero_status (*barrier)(zero_comm *m);
    zero_status (*iallreduce)(zero_comm *m, void *buf, size_t count, zero_dtype dt, zero_reduce_op op,
                              zero_comm_req **req);
    /* send holds sum(counts) elements, rank r's block at offset sum(counts[<r]);
     * recv receives this rank's reduced block (counts[rank] elements). */
    zero_status (*ireduce_scatterv)(zero_comm *m, const void *send, void *recv, const size_t *counts,
                                    zero_dtype dt, zero_comm_req **req);
    /* recv receives all blocks concatenated; send may alias recv's own block. */
    zero_status (*iallgatherv)(zero_comm *m, const void *send, void *recv, const size_t *counts,
                               zero_dtype dt, zero_comm_req **req);
    zero_status (*wait)(zero_comm_req *req); /* frees req */
    zero_status (*test)(zero_comm_req *req, int *done); /* frees req when done */

    /* bucket engine */
    zero_status (*buckets_create)(zero_core *c, const zero_bucket_spec *spec, zero_buckets **out);
    /* Where param `index` adds its gradient this micro-step (grad_dtype). */
    zero_status (*buckets_grad_slot)(zero_buckets *b, uint32_t index, void **slot);
    /* Param `index` is final.  If `src` is non-NULL (host-owned gradient of
     * dtype dt) it is added into the slot first. */
    zero_status (*buckets_ready)(zero_buckets *b, uint32_t index, const void *src, zero_dtype dt);
    /* End of micro-step: launch what is left, wait for everything, reset. */
    zero_status (*buckets_flush)(zero_buckets *b);
    void (*buckets_destroy)(zero_buckets *b);

    /* kernels */
    uint32_t (*optim_state_count)(zero_core *c); /* fp32 arrays per element */
    /* One fused pass: grad *= grad_mul, update master/state for the global
     * step about to be taken, copy out.  Per-group lr/betas/decay applied. */
    zero_status (*optim_step)(zero_core *c, const zero_opt_range *r);
    double (*sumsq)(zero_core *c, const void *x, zero_dtype dt, size_t n); /* fp64 accumulation */
    int (*nonfinite)(zero_core *c, const void *x, zero_dtype dt, size_t n); /* any Inf/NaN */
    void (*convert)(zero_core *c, void *dst, zero_dtype dst_dt, const void *src, zero_dtype src_dt,
                    size_t n);                                       /* RNE, NaN stays NaN */
    void (*add_into)(zero_core *c, float *dst, const void *src, zero_dtype src_dt, size_t n);

    /* checkpoint I/O: one named blob per rank in `dir`, atomic (tmp+rename). */
    zero_status (*ckpt_write)(zero_core *c, const char *dir, const char *name, const void *buf,
                              size_t bytes);
    zero_status (*ckpt_read)(zero_core *c, const char *dir, const char *name, void *buf, size_t bytes);

    /* ---- appended in 1.0 by the pipeline plugin (check ZERO_SERVICES_HAS) ---- */
    /* The communicator spanning every rank of the job.  With pipeline.stages
     * = P > 1, comm_world is this rank's data-parallel group (the ranks that
     * hold the same pipeline stage; global rank = stage * dp_size + dp_rank)
     * and comm_global spans all P stages: use it for quantities that are
     * global to the model, such as the gradient norm used for clipping and
     * the fp16 overflow flag.  Without a pipeline it is comm_world.  Owned by
     * the core, valid until destroy; never free it. */
    zero_comm *(*comm_global)(zero_core *c);

    /* ---- shared partitioned-step services ---- */
    /* The step every partitioning plugin shares, so that plugins are glue.
     * Collective over ps->norm_comm (or comm_global); call on the engine's
     * step thread, between buckets_flush and the parameter all-gather.
     * grad_norm: fp64 sum of squares and Inf/NaN flag of this rank's ranges,
     * agreed in ONE fp64 all-reduce; fills *out (norm of the mean unscaled
     * gradient, clip coefficient, grad_mul) from ctx (grad_divisor,
     * loss_scale, grad_clip). */
    zero_status (*grad_norm)(zero_core *c, const zero_part_step *ps, const struct zero_step_ctx *ctx,
                             zero_grad_norm *out);
    /* The fused optimizer pass over every range: grad (model dtype) *
     * grad_mul, update master and states, round the new weights into
     * param_out (RNE) when given.  Local, no communication -- except with
     * optimizer.type Lamb, whose per-parameter trust ratios are completed
     * by one all-reduce over comm_world (then collective).  optim_step
     * refuses Lamb: only this service and boundary_step implement it. */
    zero_status (*part_step)(zero_core *c, const zero_part_step *ps, float grad_mul);
    /* Both, and the report: overflow -> rep->overflow = 1, grad_norm -1, no
     * update; else norm into rep and the step.  The plugin then clears its
     * gradients and re-gathers its parameters in either case. */
    zero_status (*boundary_step)(zero_core *c, const zero_part_step *ps, const struct zero_step_ctx *ctx,
                                 struct zero_step_report *rep);
    /* All-gather, in place, every layout group's equal rank shares of a flat
     * buffer of flat_numel elements of dt (rank r's share of group g at
     * groups[g].flat_begin + r * part_numel), over comm (NULL = comm_world).
     * All groups are issued before any wait; every issued request is waited
     * even after an error.  Collective. */
    zero_status (*allgather_shares)(zero_core *c, zero_comm *comm, void *flat, zero_dtype dt);

    /* ---- device-safe memory ---- */
    /* dst[0..bytes) = (unsigned char)value, for memory from mem_alloc of
     * either tier or host memory.  On a CUDA engine ZERO_TIER_DEVICE blocks
     * are device memory the host cannot dereference: plugins clear them with
     * this (and copy with mem_copy, which accepts any direction), never with
     * memset/memcpy.  Stream-ordered with the core's other device work;
     * returns ZERO_ERR_DEVICE (last error set) if the device failed. */
    zero_status (*mem_set)(zero_core *c, void *dst, int value, size_t bytes);

    /* ---- parameter placement and checkpoint shards ---- */
    /* The parameter placement and checkpoint code every flat-layout plugin
     * shares.  Engine step thread only (params_done / save / load).
     *
     * params_place: every param must be registered in dtype dt (else
     * ZERO_ERR_UNSUPPORTED naming the param and `who`); copies its initial
     * values (host or device memory) into flat (flat_numel elements of dt) at
     * its flat offset and sets p->data there. */
    zero_status (*params_place)(zero_core *c, void *flat, zero_dtype dt, const char *who);
    /* master_init: when ps->master is a separate fp32 array (16-bit model),
     * widen the owned shares of `params` (flat-indexed, ps->dtype) into it
     * (exact).  No-op when ps->master == params. */
    zero_status (*master_init)(zero_core *c, const zero_part_step *ps, const void *params);
    /* ckpt_shard: write (write = 1) or read this rank's shard of a
     * partitioned optimizer as atomic blobs "<prefix>.params" (the owned
     * shares of `params`, flat-indexed, model dtype, in range order; skipped
     * when params is NULL), "<prefix>.master" (only when ps->master !=
     * params) and "<prefix>.state<k>" (one per optimizer state), each the
     * concatenation of the ranges.  Arrays may be device memory.  Local;
     * follow a read with ckpt_agree. */
    zero_status (*ckpt_shard)(zero_core *c, const char *dir, const char *prefix, const zero_part_step *ps,
                              void *params, int write);
    /* ckpt_agree: agree over comm (NULL = comm_world) on a load's local
     * status, so that a shard missing on one rank fails on every rank
     * instead of leaving the others in the next collective.  Returns
     * `local` where it failed, ZERO_ERR_IO naming `who` and dir on the
     * others.  Collective. */
    zero_status (*ckpt_agree)(zero_core *c, zero_comm *comm, zero_status local, const char *dir, const char *who);

    /* ---- appended in 1.2 (checkpoint resharding; check ZERO_SERVICES_HAS) ---- */
    /* Inside a plugin's load: nonzero when the checkpoint was written by
     * another world size, plugin or layout.  ckpt_shard then fills this
     * rank's ranges of params / master / states from whichever of the
     * saver's files hold them (converted to this run's dtypes); blobs the
     * plugin wrote with ckpt_write are NOT available (ckpt_read fails): the
     * plugin derives what it keeps besides (a 16-bit shard: the master
     * rounded with convert) and clears its gradient accumulators (such a
     * checkpoint is always at an accumulation boundary).  Plugins that do
     * this declare ZERO_PLUGIN_CAP_RESHARD. */
    int (*ckpt_reshard)(zero_core *c);

    /* ---- appended in 1.3 (expert groups; check ZERO_SERVICES_HAS) ---- */
    /* The communicator layout group g (index into layout->groups) is
     * partitioned over: comm_world for a dense group, the group's
     * expert-data-parallel communicator for an expert group.  Owned by the
     * core, valid until destroy; never free it.  NULL for g out of range.
     * A bucket set created with spec.comm = an expert group's communicator
     * covers exactly the groups of that communicator; with any other comm
     * (NULL included) it covers the dense groups only.  allgather_shares
     * gathers every expert group over its own communicator. */
    zero_comm *(*group_comm)(zero_core *c, uint32_t g);

    /* ---- appended in 1.3 (issue 21: ZeRO++ and MiCS as outside plugins; ---- */
    /* ---- check ZERO_SERVICES_HAS) ------------------------------------------ */
    /* Node groups: the ranks of m on this rank's node, ordered by their rank
     * in m (the ranks whose host name and boot id match this rank's; every
     * rank of m gets the same partition; before 1.7.1 MPI's shared-memory
     * split, whose answer could differ between ranks).  The environment
     * variable ZERO_RANKS_PER_NODE=k makes "nodes" of k consecutive ranks of
     * m instead, so that tests and benchmarks simulate several nodes on one
     * machine.  Collective over m; free *out with comm_free. */
    zero_status (*comm_split_node)(zero_comm *m, zero_comm **out);
    /* Quantized all-gather, in place and blocking: recv holds sum(counts)
     * elements of dt (F32, BF16, F16), this rank's block at offset
     * sum(counts[<rank]); each rank sends its block block-quantized (q),
     * and on return every block -- this rank's own too -- holds the
     * dequantized values, so every rank holds the same tensor.  Collective;
     * counted in the communicator's all-gather bytes at the quantized size.
     * Host or device memory (see the 1.3 entry above: issue 33). */
    zero_status (*allgather_quantized)(zero_comm *m, void *recv, const size_t *counts, zero_dtype dt,
                                       const zero_quant_spec *q);
    /* Quantized reduce-scatter, blocking: send holds sum(counts) elements of
     * dt, block r for rank r; each block is quantized (q) and sent to its
     * rank in one all-to-all; recv (counts[rank] elements of dt) receives
     * the fp32 sum, in rank order 0..size-1, of the dequantized blocks, so
     * results are bitwise repeatable.  recv must not overlap send.
     * Collective; counted as a reduce-scatter of the quantized bytes.  Host
     * or device memory (see the 1.3 entry above: issue 33). */
    zero_status (*reduce_scatter_quantized)(zero_comm *m, const void *send, void *recv, const size_t *counts,
                                            zero_dtype dt, const zero_quant_spec *q);
    /* What has crossed communicator m so far (calls, payload bytes), as
     * zero_comm_stats reports them for the whole engine (the engine's
     * totals include every communicator made through comm_split /
     * comm_split_node).  out->struct_size must be set by the caller. */
    zero_status (*comm_counters)(zero_comm *m, zero_comm_stats *out);

    /* ---- appended in 1.5 (check ZERO_SERVICES_HAS) ---- */
    /* Batch the collectives this thread issues on m until the matching
     * comm_group_end into one launch: on an NCCL communicator one
     * ncclGroupStart/ncclGroupEnd, so that N small all-gathers (stage 3's
     * prefetch of several parameters) cost one kernel launch instead of N;
     * on MPI and single-process communicators both calls are no-ops.
     * Groups nest (counted).  Inside a group issue non-blocking
     * collectives on m only; requests handed out complete as usual once the
     * group ends.  A wait/test on such a request, or a blocking call on m,
     * made by the opening thread before comm_group_end launches what the
     * group holds first (correct, but the batching is lost).  Every
     * comm_group_start needs its comm_group_end from the same thread, also
     * after an error; the order of collectives must still be the same on
     * every rank.  Not collective by itself. */
    zero_status (*comm_group_start)(zero_comm *m);
    zero_status (*comm_group_end)(zero_comm *m);
} zero_services_v1;

/* Does this services table have field `f`? (built against a newer minor) */
#define ZERO_SERVICES_HAS(svc, f) \
    ((svc)->struct_size >= offsetof(zero_services_v1, f) + sizeof((svc)->f))

typedef struct zero_plugin_table_v1 {
    uint32_t struct_size;  /* sizeof(zero_plugin_table_v1) */
    uint32_t abi_major;    /* ZERO_PLUGIN_ABI_MAJOR the plugin was built with */
    uint32_t abi_minor;
    uint32_t caps;
    const char *name;
    const char *description;

    /* Required.  Allocate plugin state; keep `svc` (valid until destroy). */
    zero_status (*create)(const zero_services_v1 *svc, void **state);
    /* Optional: veto/inspect a registration (core already recorded it). */
    zero_status (*register_param)(void *state, zero_param_info *p);
    /* Required.  Layout is final: allocate storage, copy init_data, set p->data. */
    zero_status (*params_done)(void *state);
    /* Optional (NULL: return p->data).  See zero_gather. */
    zero_status (*gather)(void *state, zero_param_info *const *params, size_t n, void **ptrs);
    zero_status (*release)(void *state, zero_param_info *const *params, size_t n);
    /* Required: where to add p's gradient this micro-step. */
    zero_status (*grad_buffer)(void *state, zero_param_info *p, void **buf);
    /* Required: p's gradient is final (host_grad, if any, holds it). */
    zero_status (*on_grad_ready)(void *state, zero_param_info *p, void *stream);
    /* Required: end of micro-step; at a boundary reduce, step and refresh. */
    zero_status (*step)(void *state, const zero_step_ctx *ctx, zero_step_report *rep);
    /* Optional: checkpoint this rank's shard. */
    zero_status (*save)(void *state, const char *dir);
    zero_status (*load)(void *state, const char *dir);
    /* Optional: called before destroy/step to drain async work. */
    zero_status (*sync)(void *state);
    /* Required. Frees everything the plugin allocated. */
    void (*destroy)(void *state);
    /* ---- appended in 1.1 (the core reads it only when struct_size covers it) ---- */
    /* Optional: zero_set_phase(phase), name checked by the core (1..63
     * characters).  NULL: phases change nothing for this plugin. */
    zero_status (*set_phase)(void *state, const char *phase);
    /* ---- appended in 1.2 (read only when struct_size covers it) ---- */
    /* Optional: record, through ps->add, every byte this plugin would
     * allocate per rank for the model ps describes, by tier and category,
     * exactly as params_done and the first steps will (zero_plan,
     * tools/zero-estimate, "stage": "auto").  No engine and no state
     * exist; nothing may be allocated through them.  NULL: the plugin
     * cannot be planned (zero_plan says so; "auto" skips it). */
    zero_status (*plan)(const zero_plan_services_v1 *ps);
} zero_plugin_table_v1;

/* The symbol a plugin exports:
 *   ZERO_PLUGIN_EXPORT const zero_plugin_table_v1 zero_plugin_v1 = { ... };  */
#define ZERO_PLUGIN_SYMBOL_V1 "zero_plugin_v1"

#ifdef __cplusplus
}
#endif
#endif /* ZERO_PLUGIN_H */
