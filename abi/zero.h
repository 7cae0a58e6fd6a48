/*
 * libzero host ABI — ZeRO (Zero Redundancy Optimizer) for C/C++ trainers.
 *
 * This header is the whole contract between a host trainer and libzero.so.
 * It contains no Jansson, MPI, NCCL or CUDA type: communicators and streams
 * travel as `void *` together with a kind tag.
 *
 * Versioning rules (see README, "The ABI in one page"):
 *  - ZERO_ABI_VERSION_MAJOR changes only on an incompatible change; a host
 *    built against 1.x runs on any library 1.y with y >= x.
 *  - Every public struct begins with `struct_size` (set it to sizeof the
 *    struct you compiled against, the *_INIT macros do so).  Structs only
 *    grow at the end; the library reads only the fields your size covers and
 *    gives later fields their documented default.
 *  - (1.7.7) A struct you pass in that is LONGER than the library's (a host
 *    built against a newer header, run with an older library) is accepted
 *    when the fields the library does not know are zero (their *_INIT
 *    value), and refused with ZERO_ERR_INVALID_ARGUMENT, naming the struct
 *    and the byte, when one is set: the library never ignores a setting it
 *    cannot honour.  A struct_size above 4096 is refused unread.  Fields
 *    named reserved* must be 0 (checked), so a later version can use them;
 *    no struct has implicit padding (tests/abi checks with -Wpadded).
 *  - Status codes and enum values are never renumbered.
 *
 * Threading: unless a function says otherwise, calls on one engine must not
 * run concurrently.  zero_on_grad_ready and zero_grad_buffer may be called
 * from several threads at once (e.g. per-layer backward threads).
 */
#ifndef ZERO_H
#define ZERO_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ZERO_ABI_VERSION_MAJOR 1
#define ZERO_ABI_VERSION_MINOR 10
/* Encoded as major * 10000 + minor. */
#define ZERO_ABI_VERSION (ZERO_ABI_VERSION_MAJOR * 10000 + ZERO_ABI_VERSION_MINOR)

#if defined(_WIN32)
#define ZERO_API __declspec(dllimport)
#elif defined(ZERO_BUILDING_LIBRARY)
#define ZERO_API __attribute__((visibility("default")))
#else
#define ZERO_API
#endif

/* ------------------------------------------------------------------------ */
/* Status codes: stable numbers, never reused.                               */
/* ------------------------------------------------------------------------ */
typedef int32_t zero_status;
enum {
    ZERO_OK = 0,
    ZERO_ERR_INVALID_ARGUMENT = 1, /* NULL/unknown handle, bad value       */
    ZERO_ERR_CONFIG = 2,           /* config text/file wrong; message names the key */
    ZERO_ERR_PLUGIN_NOT_FOUND = 3, /* message lists every path searched     */
    ZERO_ERR_PLUGIN_ABI = 4,       /* plugin built for another ABI major    */
    ZERO_ERR_PLUGIN_SYMBOL = 5,    /* library lacks the plugin table symbol */
    ZERO_ERR_PLUGIN_INIT = 6,      /* the plugin's create() failed          */
    ZERO_ERR_OUT_OF_MEMORY = 7,
    ZERO_ERR_COMM = 8,             /* a collective failed                   */
    ZERO_ERR_MISMATCH = 9,         /* ranks disagree (params, gather order) */
    ZERO_ERR_STATE = 10,           /* call out of order (e.g. register after params_done) */
    ZERO_ERR_UNSUPPORTED = 11,     /* valid request this build/plugin cannot do */
    ZERO_ERR_IO = 12,              /* checkpoint or config file I/O         */
    ZERO_ERR_TIMEOUT = 13,         /* other ranks did not answer within ZERO_COMM_TIMEOUT (a peer stopped or died) */
    ZERO_ERR_LOSS_SCALE = 14,      /* fp16 loss scale hit min_loss_scale    */
    ZERO_ERR_DEVICE = 15,          /* device backend error / no device      */
    ZERO_ERR_INTERNAL = 16,
    ZERO_ERR_DUPLICATE = 17        /* e.g. grad ready twice in one micro-step */
};

/* Static text for a status code ("ZERO_ERR_CONFIG: ..."); never NULL.
 * Thread-safe; the string lives for the life of the process. */
ZERO_API const char *zero_status_string(zero_status s);

/* Runtime ABI version of the loaded library (ZERO_ABI_VERSION encoding).
 * Thread-safe. */
ZERO_API uint32_t zero_abi_version(void);
/* Library version string, e.g. "1.0.0". Static storage. Thread-safe. */
ZERO_API const char *zero_version_string(void);

/* ------------------------------------------------------------------------ */
/* Enumerations                                                              */
/* ------------------------------------------------------------------------ */
typedef int32_t zero_dtype;
enum { ZERO_DTYPE_F32 = 0, ZERO_DTYPE_BF16 = 1, ZERO_DTYPE_F16 = 2 };

typedef int32_t zero_device_kind;
enum { ZERO_DEVICE_CPU = 0, ZERO_DEVICE_CUDA = 1 };

/* What `zero_engine_options.comm` points to. */
typedef int32_t zero_comm_kind;
enum {
    ZERO_COMM_AUTO = 0, /* libzero decides: MPI_COMM_WORLD if MPI is built in, else single process */
    ZERO_COMM_MPI = 1,  /* comm points to the host's MPI_Comm (pass &my_comm) */
    ZERO_COMM_NCCL = 2, /* comm points to the host's ncclComm_t (pass &my_comm) */
    ZERO_COMM_SELF = 3, /* single process, world size 1, no MPI at all */
    ZERO_COMM_HOST = 4  /* (1.5) comm points to a zero_host_comm: the host's own collectives as callbacks */
};

/* Element types of communication buffers: the model dtypes above plus
 * these (the values the plugin ABI has used since 1.3; defined here since
 * 1.5 because zero_host_comm callbacks receive them). */
enum { ZERO_DTYPE_F64 = 16, ZERO_DTYPE_I64 = 17, ZERO_DTYPE_U64 = 18, ZERO_DTYPE_U8 = 19 };

/* (1.5) A communicator implemented by the host: libzero runs its
 * collectives through these callbacks (backends/comm/comm_host.c), so a
 * host whose processes already talk through something else than MPI (a
 * torch.distributed gloo or NCCL group, a custom transport) can train
 * without mpirun.  Pass ZERO_COMM_HOST and comm = &your_zero_host_comm.
 *
 * Ownership and lifetime: borrowed.  The struct, `user` and whatever the
 * callbacks use must stay valid until zero_engine_destroy has returned;
 * libzero copies the struct's fields at zero_engine_create (later changes
 * to it are not seen).  Communicators a `split` returns belong to the host
 * as well; libzero hands each back exactly once through `release`.
 *
 * Threads and order: callbacks run only on threads that are inside a
 * libzero call (zero_engine_create/destroy, zero_on_grad_ready,
 * zero_step, zero_gather, zero_save/load, ...), never on a thread of
 * libzero's own, and never two at a time per engine (libzero holds one
 * lock around every callback of a communicator and its splits).  They are
 * blocking: a callback returns when the collective is complete on this
 * rank.  Every rank makes the same sequence of calls (kind, byte count,
 * dtype, root), as MPI requires of collectives.  A callback that never
 * returns (a dead peer) hangs libzero: comm_timeout does not apply, use
 * the transport's own timeout.
 *
 * Errors: a callback returns ZERO_OK, or any other zero_status; libzero
 * then fails the operation with ZERO_ERR_COMM and the engine's last error
 * names the callback and the status ("comm host: allreduce_sum callback
 * returned ZERO_ERR_..."). After a failure the communicator is not used
 * again in a collective (the engine should be destroyed).
 *
 * Memory: every buffer is host memory, also on a device_kind CUDA engine
 * (libzero stages device buffers through host memory, as for
 * ZERO_COMM_MPI: they are copied out of device memory, complete, before
 * the callback runs, and what it writes is copied back afterwards), so
 * callbacks need no stream handling.  For device-to-device collectives
 * use ZERO_COMM_NCCL.  Buffers are valid only during the call; send and
 * recv never overlap unless a callback says so.
 *
 * Results must be identical on every rank (all ranks read the same bits):
 * libzero relies on it for the optimizer step.  Summation order: with
 * `alltoall`, libzero sums gradients itself in the MPI backend's ring
 * order (bitwise equal to ZERO_COMM_MPI's reduce-scatter, and independent
 * of bucket layout, so every stage plugin trains bitwise like stage 0);
 * without it, gradient sums are the host's all-reduce of blocks padded to
 * the largest (docs/comm.md "Host communicators"). */
typedef struct zero_host_comm {
    uint32_t struct_size; /* = sizeof(zero_host_comm) (ZERO_HOST_COMM_INIT) */
    uint32_t reserved0;   /* must be 0 */
    int32_t rank, size;   /* this process's rank in [0, size), size >= 1 */
    void *user;           /* passed to every callback */
    const char *name;     /* for messages ("torch.distributed gloo"); may be NULL; copied */
    /* Required.  In-place elementwise SUM of `count` elements of `dt`
     * (ZERO_DTYPE_F32, BF16, F16 (16-bit sums rounded per addition are
     * fine), F64, I64, U64, U8 (wrapping)) over all ranks. */
    zero_status (*allreduce_sum)(void *user, void *buf, size_t count, zero_dtype dt);
    /* Required.  recv[r * bytes_each ...] = rank r's `send` (bytes_each
     * bytes each, equal on all ranks); send may be recv + rank*bytes_each. */
    zero_status (*allgather)(void *user, const void *send, void *recv, size_t bytes_each);
    /* Required.  `bytes` bytes of buf from rank `root` to every rank. */
    zero_status (*broadcast)(void *user, void *buf, size_t bytes, int root);
    /* Required. */
    zero_status (*barrier)(void *user);
    /* Optional (NULL: gradient sums use allreduce_sum, see above).  Block b
     * (bytes_each bytes at send + b*bytes_each) goes to rank b; recv
     * receives rank r's block for this rank at recv + r*bytes_each. */
    zero_status (*alltoall)(void *user, const void *send, void *recv, size_t bytes_each);
    /* Optional.  Called only for splits that make a real sub-group:
     * libzero itself handles a copy of this communicator (every rank the
     * same color, keys in rank order: stage 3's gather communicator) and
     * every rank alone.  NULL: other splits fail with ZERO_ERR_UNSUPPORTED
     * naming this callback.  Collective like MPI_Comm_split: ranks with the same color form a communicator
     * ordered by (key, rank); color < 0: *out = NULL.  *out is a struct
     * owned by the host with its own rank/size/user and callbacks
     * (split/release may be NULL in it), valid until libzero passes it to
     * `release`.  Used by MiCS, ZeRO++ hpZ, MoE expert groups and
     * pipeline.stages > 1. */
    zero_status (*split)(void *user, int color, int key, struct zero_host_comm **out);
    /* Optional: libzero is done with `sub` (a communicator split returned);
     * called once per split communicator, in the same order on all of its
     * ranks, from the thread destroying the engine.  NULL: nothing. */
    void (*release)(void *user, struct zero_host_comm *sub);
    /* Optional: the alltoall started without waiting, so that gradient
     * reductions run while backward goes on (without them every reduction
     * blocks its gradient hook).  Give start and finish together (test may
     * stay NULL) and `alltoall` too.
     *   alltoall_start: begin the exchange `alltoall` does and return at
     *     once, *handle naming it; libzero leaves send and recv alone until
     *     the exchange is finished.
     *   alltoall_finish: block until recv is complete; called exactly once
     *     per started exchange (in start order), which ends the handle.
     *   alltoall_test: *done = 1 when finish would not block (NULL: libzero
     *     waits in finish when it needs the result).
     * Other callbacks (and further starts) may come while exchanges are in
     * flight; the transport must match collectives across ranks in issue
     * order, as MPI's nonblocking collectives and torch.distributed's
     * process groups (async_op=True) do. */
    zero_status (*alltoall_start)(void *user, const void *send, void *recv, size_t bytes_each, void **handle);
    zero_status (*alltoall_finish)(void *user, void *handle);
    zero_status (*alltoall_test)(void *user, void *handle, int *done);
} zero_host_comm;
#define ZERO_HOST_COMM_INIT \
    { sizeof(zero_host_comm), 0, 0, 1, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL }

typedef int32_t zero_log_level;
enum { ZERO_LOG_ERROR = 0, ZERO_LOG_WARN = 1, ZERO_LOG_INFO = 2, ZERO_LOG_DEBUG = 3 };

/* Memory accounting categories (zero_memory_stats). */
typedef int32_t zero_mem_tag;
enum {
    ZERO_MEM_PARAMS = 0,  /* model-dtype parameters owned by libzero          */
    ZERO_MEM_GRADS = 1,   /* persistent gradient buffers / partitions        */
    ZERO_MEM_MASTER = 2,  /* fp32 master weights (absent for fp32 models)    */
    ZERO_MEM_OPTIM = 3,   /* optimizer states (Adam m and v, momentum, ...)  */
    ZERO_MEM_BUCKETS = 4, /* reduction buckets / staging                     */
    ZERO_MEM_GATHER = 5,  /* stage-3 gather buffers                          */
    ZERO_MEM_OTHER = 6,   /* communication scratch: MPI ring temporaries, device staging (docs/memory.md) */
    ZERO_MEM_NTAGS = 7
};
/* Memory tiers: the accelerator (or, without one, the "device" arena that
 * stands for it) and host memory (offload). */
typedef int32_t zero_mem_tier;
enum { ZERO_TIER_DEVICE = 0, ZERO_TIER_HOST = 1, ZERO_NTIERS = 2 };

/* ------------------------------------------------------------------------ */
/* Handles (opaque)                                                          */
/* ------------------------------------------------------------------------ */
typedef struct zero_engine zero_engine;
typedef struct zero_param zero_param;

/* Log callback.  `rank` is the engine's world rank (or -1 before it is
 * known); `msg` has no trailing newline and is valid only during the call.
 * May be called from libzero's communication thread. */
typedef void (*zero_log_fn)(void *user, zero_log_level level, int rank, const char *msg);

/* ------------------------------------------------------------------------ */
/* Engine creation                                                           */
/* ------------------------------------------------------------------------ */
typedef struct zero_engine_options {
    uint32_t struct_size;      /* = sizeof(zero_engine_options) */
    uint32_t reserved0;        /* must be 0 */
    const char *config_json;   /* DeepSpeed JSON text, or NULL */
    const char *config_path;   /* path of a ds_config.json, or NULL (text wins if both) */
    zero_comm_kind comm_kind;  /* default ZERO_COMM_AUTO */
    zero_device_kind device_kind; /* default ZERO_DEVICE_CPU */
    void *comm;                /* per comm_kind: pointer to the host's MPI_Comm / ncclComm_t / (1.5) zero_host_comm; borrowed, must outlive the engine */
    int32_t device_index;      /* CUDA ordinal, or ZERO_DEVICE_INDEX_AUTO (1.1, the default); ignored on CPU */
    int32_t reserved1;         /* must be 0 */
    void *stream;              /* host compute stream (cudaStream_t) or NULL */
    const char *plugin;        /* plugin name or path; NULL = from config / ZERO_PLUGIN */
    zero_log_fn log_fn;        /* NULL = stderr, prefixed "[zero rank R] LEVEL: " */
    void *log_user;
} zero_engine_options;

/* device_index: the launcher's local rank (OMPI_COMM_WORLD_LOCAL_RANK,
 * MPI_LOCALRANKID, SLURM_LOCALID or LOCAL_RANK; 0 without one) modulo the
 * number of visible GPUs.  ABI 1.1; a 1.0 host's default 0 means GPU 0. */
#define ZERO_DEVICE_INDEX_AUTO (-1)

#define ZERO_ENGINE_OPTIONS_INIT                                                                   \
    { sizeof(zero_engine_options), 0, NULL, NULL, ZERO_COMM_AUTO, ZERO_DEVICE_CPU, NULL,           \
      ZERO_DEVICE_INDEX_AUTO, 0, NULL, NULL, NULL, NULL }

/* Create an engine: parse the config, set up communication, load the
 * plugin.  On success *out owns the engine (free with zero_engine_destroy).
 * On failure *out is NULL and, if `err`/`err_len` are given, the message is
 * copied there (the engine's last-error text does not exist yet).
 * Collective: every rank of the communicator calls it.  Strings in `opts`
 * are copied; `opts` may be freed after the call. */
ZERO_API zero_status zero_engine_create(const zero_engine_options *opts, zero_engine **out,
                                        char *err, size_t err_len);

/* Destroy the engine: waits for outstanding communication, frees all
 * libzero memory, unloads the plugin.  Finalizes MPI only if libzero
 * initialized it.  Collective.  NULL is a no-op. */
ZERO_API void zero_engine_destroy(zero_engine *e);

/* The last error message on this engine (empty string if none).  Owned by
 * the engine; valid until the next call on it.  Messages start with the
 * rank: "rank 2: ...". */
ZERO_API const char *zero_last_error(const zero_engine *e);

/* World rank and size of the engine's data-parallel communicator. */
ZERO_API int zero_rank(const zero_engine *e);
ZERO_API int zero_world_size(const zero_engine *e);
/* Name of the loaded plugin ("stage2", ...). Owned by the engine. */
ZERO_API const char *zero_plugin_name(const zero_engine *e);

/* Pipeline parallelism (appended in 1.0).  With pipeline.stages = P > 1 in
 * the config, the communicator given to zero_engine_create spans all P
 * stages and libzero splits it: global rank g belongs to pipeline stage
 * g / dp_size with data-parallel rank g % dp_size (dp_size = world / P;
 * P must divide the world size).  zero_rank / zero_world_size then give the
 * data-parallel rank and size.  The host registers only its stage's params.
 * Log lines (and the log_fn `rank`) and zero_last_error texts name the
 * global rank.  Without a pipeline: stage 0 of 1.  Thread-safe; -1 / 0 for a NULL engine. */
ZERO_API int zero_pipeline_stage(const zero_engine *e);
ZERO_API int zero_pipeline_stages(const zero_engine *e);

/* ------------------------------------------------------------------------ */
/* Parameters                                                                */
/* ------------------------------------------------------------------------ */
/* Parameter storage is owned by libzero from zero_params_done() on (unless
 * the param is registered ZERO_PARAM_HOST_OWNED, ABI 1.1, see below):
 * `data` below supplies the initial values and is read (copied) during
 * zero_params_done; afterwards the host may free it and must access the
 * parameter only through zero_gather()/zero_release().  The same host code
 * therefore works for every stage, including stage 3 where a rank keeps only
 * a shard. */
typedef struct zero_param_desc {
    uint32_t struct_size; /* = sizeof(zero_param_desc) */
    uint32_t reserved0;   /* must be 0 (checked since 1.7.7) */
    const char *name;     /* copied; must be unique; used in error messages and checkpoints */
    const void *data;     /* initial values (numel elements of dtype); read at zero_params_done
                             (1.1: with ZERO_PARAM_HOST_OWNED, the parameter itself, written at each step) */
    uint64_t numel;
    zero_dtype dtype;
    zero_device_kind device; /* where `data` lives */
    void *grad;           /* optional host-owned gradient buffer (numel, dtype): libzero reads it in
                             zero_on_grad_ready; NULL = use zero_grad_buffer() */
    int32_t group;        /* param group (optimizer.param_groups index), default 0 */
    int32_t reserved1;    /* must be 0 (checked since 1.7.7) */
    /* ---- appended in 1.1 (a 1.0 host's smaller struct_size leaves it 0) ---- */
    uint32_t flags;       /* ZERO_PARAM_* below; default 0 */
    uint32_t reserved2;   /* must be 0 */
    /* ---- appended in 1.7 (libzero 1.8; read only when struct_size covers them) ---- */
    /* The tensor's shape, for what is written outside the engine: the
     * checkpoint manifest records it, and `zero-ckpt consolidate` writes
     * each tensor with it (a safetensors file another framework loads as
     * it is).  ndim sizes whose product is numel (a stacked tensor: the
     * whole stack's, layers first); copied.  ndim 0 (shape NULL): the flat
     * [numel], as before 1.8.  At most ZERO_MAX_NDIM dimensions.  Nothing
     * in training depends on it. */
    const uint64_t *shape;
    uint32_t ndim;
    uint32_t reserved3;   /* must be 0 */
} zero_param_desc;
#define ZERO_MAX_NDIM 8

/* (1.1) zero_param_desc.flags.
 *
 * ZERO_PARAM_HOST_OWNED: the host's tensor IS the parameter.  `data` must
 * be writable memory (numel elements of dtype, on `device`) that stays valid
 * until zero_engine_destroy.  libzero still keeps its own copy for the
 * optimizer, but after every optimizer step it writes the updated values
 * into `data` in place (inside zero_step, before it returns; also at
 * zero_params_done and zero_load), so the host reads and uses its own
 * tensors directly and never calls zero_gather for them.  The host must not
 * write `data` itself after zero_params_done (libzero would overwrite the
 * change at the next step); since 1.7.4 zero_step finds such a write at the
 * window's boundary, before the optimizer, and refuses the step on every
 * rank with ZERO_ERR_STATE (no weight moved, the window kept: restore the
 * tensor or zero_load; CPU tensors, and device tensors of a CUDA engine
 * since 1.13; sampled unless ZERO_CHECK_HOST_WRITES=full, see
 * docs/reliability.md).  Stages 0/1/2, stage1-pp and offload (any plugin
 * that keeps full parameters, including 1.0 plugins); a plugin that
 * partitions parameters (stage 3, ZERO_PLUGIN_CAP_PARTITIONS_PARAMS) refuses
 * it in zero_register_param with ZERO_ERR_UNSUPPORTED: there the host keeps
 * using zero_gather / zero_release.  Host-owned tensors must not overlap
 * (tied weights are one param): an overlapping one is refused in
 * zero_register_param with ZERO_ERR_INVALID_ARGUMENT (1.7.5). */
#define ZERO_PARAM_HOST_OWNED 0x1u

#define ZERO_PARAM_DESC_INIT \
    { sizeof(zero_param_desc), 0, NULL, NULL, 0, ZERO_DTYPE_F32, ZERO_DEVICE_CPU, NULL, 0, 0, 0, 0, NULL, 0, 0 }

/* Register a parameter.  Order matters: it defines the flat layout, and
 * every rank must register the same list (checked in zero_params_done).
 * *out is a handle owned by the engine, valid until zero_engine_destroy.
 * Not thread-safe. */
ZERO_API zero_status zero_register_param(zero_engine *e, const zero_param_desc *desc,
                                         zero_param **out);

/* (1.1) Stacked tensors: a tensor that holds `layers` equal slices (the
 * weights of L identical layers as one layers x shape array) is registered
 * once and its gradient reported slice by slice, as each layer's backward
 * finishes.  `desc` describes the whole stack (numel = layers * slice numel,
 * so numel must be a multiple of `layers`, else ZERO_ERR_INVALID_ARGUMENT);
 * every other rule of zero_register_param applies (one handle, one name, one
 * checkpoint entry; zero_gather gathers the whole stack, and (1.6)
 * zero_gather_slices one layer's slice of it).  Not thread-safe. */
ZERO_API zero_status zero_register_stacked(zero_engine *e, const zero_param_desc *desc, uint32_t layers,
                                           zero_param **out);
/* (1.1) Where to ADD slice `layer`'s gradient: the slice's numel / layers
 * elements inside zero_grad_buffer(p) (or the host `grad`).  Same validity
 * and thread-safety as zero_grad_buffer. */
ZERO_API zero_status zero_slice_grad_buffer(zero_engine *e, zero_param *p, uint32_t layer, void **buf);
/* (1.1) Slice `layer` of stacked p is final for this micro-batch.  When the
 * last slice arrives the whole param counts as ready (zero_on_grad_ready is
 * done for it, on this thread): reduction starts at that granularity.  May
 * run concurrently for different slices.  A slice reported twice in one
 * micro-batch (or after zero_on_grad_ready(p)) is ZERO_ERR_DUPLICATE; a
 * param not registered with zero_register_stacked or a layer >= layers is
 * ZERO_ERR_INVALID_ARGUMENT.  A micro-step that ends with only some slices
 * reported delivers the param with the missing slices as zero (they were
 * never added), with a warning naming how many were missing. */
ZERO_API zero_status zero_on_slice_ready(zero_engine *e, zero_param *p, uint32_t layer, void *stream);

/* Freeze the layout, allocate partitions and optimizer state, copy initial
 * values.  Collective: compares a hash of the parameter list across ranks
 * and fails with ZERO_ERR_MISMATCH on every rank, naming the first
 * difference, if they disagree.  (1.7.3) Where ranks registered different
 * initial values for a parameter, every rank starts from rank 0's (an
 * expert group's: its expert-data-parallel group's first rank's), with a
 * warning on rank 0; a host-owned tensor receives them. */
ZERO_API zero_status zero_params_done(zero_engine *e);

/* Hyper-parameters of one param group (optimizer.param_groups[i] in the
 * config wins over these; unset fields (< 0) inherit optimizer.params). */
typedef struct zero_group_desc {
    uint32_t struct_size;
    int32_t group;
    double lr_scale;     /* multiplies the scheduled lr; default 1 */
    double weight_decay; /* < 0: inherit */
    /* ---- appended in 1.3 (a smaller struct_size leaves the default) ---- */
    /* Mixture-of-experts: ZERO_GROUP_DENSE (default) or >= 0, which makes
     * the group an EXPERT group whose gradients are reduced and partitioned
     * only over its expert-data-parallel group: the ranks of the engine's
     * data-parallel group that give this group the same color (a split of
     * it, ordered by rank; libzero makes and owns the communicator at
     * zero_params_done).  Ranks of one expert-DP group hold the same
     * experts; ranks of different expert-DP groups hold different ones
     * (names may differ) but every rank registers the same shapes, in the
     * same order, in the same groups.  Dense groups stay partitioned over
     * the whole data-parallel group.  The gradient norm used for clipping
     * and the fp16 overflow flag are agreed over every rank (each expert's
     * elements counted once).  Group tables that differ across ranks,
     * expert-DP groups of unequal size, different experts (names) inside
     * one expert-DP group, or a param registered in two groups (a name
     * registered again in another group -- that call fails too -- or one
     * host-owned tensor or host gradient buffer behind params of two
     * groups) fail zero_params_done with ZERO_ERR_MISMATCH on every rank,
     * naming what differs.  Plugins that support expert groups declare
     * ZERO_PLUGIN_CAP_EXPERT_GROUPS (stage1, stage2, offload; stage3 since
     * 1.12, stage0 and stage1-pp since 1.13, with a pipeline too: each
     * stage's groups over its own data-parallel ranks); the others (1.0-1.2
     * plugins, the kit's template, the contrib plugins) refuse at
     * zero_params_done with ZERO_ERR_UNSUPPORTED naming why. */
    int32_t expert_color;
    int32_t reserved0;   /* must be 0 */
} zero_group_desc;
#define ZERO_GROUP_DENSE (-1)
#define ZERO_GROUP_DESC_INIT { sizeof(zero_group_desc), 0, 1.0, -1.0, ZERO_GROUP_DENSE, 0 }
/* Set per-group options before zero_params_done. Not thread-safe. */
ZERO_API zero_status zero_set_group(zero_engine *e, const zero_group_desc *desc);

/* (1.1) Hyper-parameters for the next optimizer step and the ones after it,
 * for hosts that run their own schedule (torch's lr schedulers,
 * param_group["lr"] = ...).  Each field is a value to use from now on, or
 * ZERO_HPARAM_KEEP (leave it as it is) or ZERO_HPARAM_DEFAULT (back to the
 * config / scheduler value).  `lr` is the absolute learning rate: it replaces
 * the scheduled lr times the group's lr_scale.  `group` is a param group id
 * or ZERO_ALL_GROUPS; a group's own setting wins over an ALL_GROUPS one.
 * Sticky (like a torch param_group) until changed; saved in checkpoints
 * since 1.4 (zero_load replaces the settings with the checkpoint's, see
 * docs/checkpoints.md).  Call between steps, at the same point on every rank (the
 * values must agree across ranks, as the host's own schedule does).  Any
 * time after zero_engine_create.  Not thread-safe.  zero_step_result.lr
 * reports group 0's lr in force.  ZERO_ERR_INVALID_ARGUMENT for a value that
 * is neither a sentinel nor valid (betas must be in [0, 1), eps > 0). */
typedef struct zero_hparams {
    uint32_t struct_size; /* = sizeof(zero_hparams) */
    int32_t group;        /* param group id or ZERO_ALL_GROUPS */
    double lr;
    double weight_decay;
    double beta1, beta2;
    double eps;
} zero_hparams;
#define ZERO_ALL_GROUPS (-1)
#define ZERO_HPARAM_KEEP (-1.0)
#define ZERO_HPARAM_DEFAULT (-2.0)
#define ZERO_HPARAMS_INIT { sizeof(zero_hparams), ZERO_ALL_GROUPS, -1.0, -1.0, -1.0, -1.0, -1.0 }
ZERO_API zero_status zero_set_hparams(zero_engine *e, const zero_hparams *h);

/* ------------------------------------------------------------------------ */
/* Per micro-batch                                                           */
/* ------------------------------------------------------------------------ */
/* Make `n` parameters available (stage 3: all-gather their shards; below
 * stage 3: no communication).  ptrs[i] receives the full-tensor pointer of
 * params[i] (numel elements of its dtype), valid until the matching
 * zero_release (stage 3) and in any case until the next zero_step.
 * Collective in stage 3: ranks must gather the same params in the same
 * order (a divergent order fails with ZERO_ERR_MISMATCH naming the params).
 * The host must not write through these pointers (below stage 3 they are
 * libzero's own copy, at stage 3 a scratch copy whose writes are lost at
 * zero_release; since 1.7.4 zero_step refuses the next boundary on every
 * rank with ZERO_ERR_STATE when it finds such a write, docs/reliability.md). */
ZERO_API zero_status zero_gather(zero_engine *e, zero_param *const *params, size_t n, void **ptrs);
/* End the use of params gathered by zero_gather. No-op below stage 3. */
ZERO_API zero_status zero_release(zero_engine *e, zero_param *const *params, size_t n);

/* (1.6) zero_gather for slices of stacked tensors (zero_register_stacked):
 * ptrs[i] receives slice layers[i] of params[i] -- numel / layers
 * contiguous elements of its dtype, the same values zero_gather(params[i])
 * would show at offset layers[i] * (numel / layers) -- so a host that runs
 * layer by layer holds one layer's weights at a time instead of the whole
 * stack.  Stage 3 gathers only the slice (an all-gather of each rank's part
 * of the slice's range), with the recorded order, prefetch, reuse distance
 * and budget of whole params; below stage 3 (and with any plugin that has
 * no slice gather) the pointer is into the full tensor, so the same host
 * code runs on every stage.  Ownership: ptrs[i] is libzero's, read-only to
 * the host, valid until the matching zero_release_slices and in any case
 * until the next zero_step.  The same (param, layer) may be gathered again
 * (each gather is released once); a slice and its whole param may be held
 * at once (two copies in stage 3).  Collective in stage 3 like zero_gather:
 * every rank gathers the same slices in the same order.  A param not
 * registered with zero_register_stacked, a layer >= its layers or a NULL
 * array is ZERO_ERR_INVALID_ARGUMENT (nothing is gathered then).  params,
 * layers and ptrs are borrowed for the call.  Not thread-safe (the engine
 * thread, like zero_gather). */
ZERO_API zero_status zero_gather_slices(zero_engine *e, zero_param *const *params, const uint32_t *layers, size_t n,
                                        void **ptrs);
/* (1.6) End the use of slices gathered by zero_gather_slices (the same
 * params and layers; any grouping).  Never communicates.  No-op below
 * stage 3; ZERO_ERR_STATE for a slice that is not held. */
ZERO_API zero_status zero_release_slices(zero_engine *e, zero_param *const *params, const uint32_t *layers,
                                         size_t n);

/* (1.1) Name the phase the following gathers belong to: "train" (the
 * phase an engine starts in), "eval", "generate", any name up to 63
 * characters.  Stage 3 records one gather order per phase and prefetches
 * from it, so a host that evaluates (or generates) between training steps
 * with another order is neither warned nor loses the training order's
 * prefetch; switching back resumes the phase's recorded order.  Below
 * stage 3 (and with a 1.0 plugin) it only checks its arguments.  Call it
 * between micro-batches with every gathered param released, at the same
 * point on every rank: in stage 3 it is collective (it verifies the
 * gathers of the phase it leaves, so ranks that diverged still fail with
 * ZERO_ERR_MISMATCH naming both sides).  ZERO_ERR_STATE while params are
 * held, ZERO_ERR_INVALID_ARGUMENT for a NULL, empty or too long name. */
ZERO_API zero_status zero_set_phase(zero_engine *e, const char *phase);

/* (1.1) The persistent full-tensor storage libzero keeps for p: below stage
 * 3 (stages 0/1/2, stage1-pp, offload, and any plugin that sets
 * zero_param_info.data) p's slot in the plugin's parameter buffer, numel
 * elements of p's dtype on the engine's device, valid until
 * zero_engine_destroy.  libzero rewrites it inside zero_step (at the
 * boundary) and zero_load; at any other time the host may read it directly,
 * without zero_gather, e.g. to make its own tensors views of it (zero-copy,
 * the alternative to ZERO_PARAM_HOST_OWNED's copy).  The host must not write
 * it (refused at the next boundary since 1.7.4, as for zero_gather's
 * pointers).  ZERO_ERR_UNSUPPORTED for a plugin that partitions parameters (stage
 * 3: use zero_gather), ZERO_ERR_STATE before zero_params_done. */
ZERO_API zero_status zero_param_storage(zero_engine *e, zero_param *p, void **data);

/* (1.10) Set parameters' values after zero_params_done: DeepSpeed's
 * GatheredParameters(params, modifier_rank=root) -- a weight surgery
 * (resize or re-initialize an embedding, copy pretrained rows in, scale a
 * layer) on a model libzero already holds, at any stage.
 *
 * values[i] holds params[i]'s numel elements in its dtype (host memory, or
 * device memory on a CUDA engine), read on the root rank only (the other
 * ranks may pass NULL there, or a NULL `values`); libzero broadcasts them
 * over the ranks that hold the param -- its data-parallel group: the world,
 * a pipeline stage's ranks, an expert group's expert-data-parallel ranks --
 * from the rank at place `root` of that group (0 <= root < its size; for a
 * model without pipeline or experts, the world rank).  Afterwards every
 * copy libzero keeps is those values on every rank of the group: the
 * parameter (every stage's copy or shard, every offload tier), the fp32
 * master of a 16-bit model (widened from the values exactly), a
 * ZERO_PARAM_HOST_OWNED tensor (written back, as after a step), and what
 * zero_gather / zero_param_storage show.  Nothing else moves: the
 * optimizer's states (Adam's moments of the written params included, as in
 * DeepSpeed), step counters, the loss scaler and every other parameter stay
 * bitwise as they were, so a run that writes and trains on ends where a
 * run that started from those values with those states would.
 *
 * Collective over the engine's ranks: every rank calls it once, with the
 * params it holds to be written and the same root; the ranks of each
 * data-parallel group pass the same params in the same order (n may be 0
 * on a rank with nothing to write).  Verified before anything is written,
 * with the same verdict on every rank: ranks whose lists differ
 * (ZERO_ERR_MISMATCH, naming this rank's list), a root outside a
 * group, NULL values on a root, a param given twice or not this engine's
 * (ZERO_ERR_INVALID_ARGUMENT), a gradient reported in the current
 * accumulation window or a param held by zero_gather / zero_gather_slices
 * (ZERO_ERR_STATE: write between windows, with everything released), a
 * plugin without the entry (ZERO_ERR_UNSUPPORTED, naming it), a rank
 * without the memory for the broadcast scratch (ZERO_ERR_OUT_OF_MEMORY).  Then
 * nothing was written anywhere; a rank that refused says why, the others
 * name it.  A failure while writing (an NVMe tile's I/O) is reported on
 * every rank, and the written params may then differ between ranks.
 * Costs one broadcast of the written bytes (through device-tier scratch of
 * up to 16 MiB, or the largest param, kept as ZERO_MEM_OTHER until the
 * next zero_step so that a burst of writes reuses it), two small
 * all-reduces over the job and one over each data-parallel group; stage
 * 3 with NVMe offload also reads and rewrites its tile files.  params and
 * values are borrowed for the call.  Engine thread, between micro-batches;
 * not during zero_step. */
ZERO_API zero_status zero_params_write(zero_engine *e, zero_param *const *params, const void *const *values,
                                       size_t n, int root);

/* Where to put p's gradient for the current micro-batch: `numel` elements
 * of p's dtype.  ADD (+=) your gradient into it: the buffer may already
 * hold earlier micro-batches' sum (stage 0/1) or be zero (stage 2/3); never
 * overwrite.  Valid until zero_on_grad_ready(p).  Thread-safe (different
 * params concurrently).  For params registered with a host `grad`, returns
 * that pointer. */
ZERO_API zero_status zero_grad_buffer(zero_engine *e, zero_param *p, void **buf);

/* p's gradient for this micro-batch is final.  Call from the backward hook
 * as soon as the layer is done, in any order, possibly from several threads
 * at once.  `stream` orders device work (cudaStream_t) or NULL.  Calling it
 * twice for one param in one micro-batch is ZERO_ERR_DUPLICATE. */
ZERO_API zero_status zero_on_grad_ready(zero_engine *e, zero_param *p, void *stream);

typedef struct zero_step_args {
    uint32_t struct_size;
    uint32_t reserved0; /* must be 0 (checked since 1.7.7) */
    void *stream; /* cudaStream_t or NULL */
} zero_step_args;
#define ZERO_STEP_ARGS_INIT { sizeof(zero_step_args), 0, NULL }

typedef struct zero_step_result {
    uint32_t struct_size;   /* set by the caller */
    int32_t boundary;       /* 1 if this micro-batch ended an accumulation window */
    int32_t taken;          /* 1 if the optimizer stepped (0: not a boundary, or skipped on overflow) */
    int32_t overflow;       /* 1 if an fp16 overflow was detected on any rank */
    uint64_t global_step;   /* optimizer steps taken so far */
    double grad_norm;       /* global L2 norm of the (unscaled) gradient, before clipping; -1 if not a boundary */
    double loss_scale;      /* scale to multiply the next micro-batch's loss by (1 when not fp16) */
    double lr;              /* lr in force for the step just taken (group 0) */
} zero_step_result;
#define ZERO_STEP_RESULT_INIT { sizeof(zero_step_result), 0, 0, 0, 0, 0.0, 1.0, 0.0 }

/* Once per micro-batch, after every gradient is ready.  At the accumulation
 * boundary (gradient_accumulation_steps) libzero finishes the reduction,
 * clips, checks overflow, steps the optimizer and refreshes parameters.
 * Missing gradients are agreed over the ranks at the window's boundary
 * (1.5.2): a param reported on some ranks and not on others, or a window
 * micro-step in which no rank reported any gradient (a second zero_step
 * without a backward), is ZERO_ERR_STATE on every rank naming the param and
 * the ranks; no weight moves and the window is dropped.  With
 * zero_optimization.find_unused_parameters such params count as zero on
 * every rank (an empty window is a skipped step, taken = 0).  A param
 * missing on every rank counts as zero with a warning naming it (or
 * ZERO_ERR_STATE with zero_optimization.strict_grads).  A non-finite lr,
 * weight decay, beta or eps for the step is ZERO_ERR_STATE before any
 * weight moves.  `args` refused (a newer header's field set, reserved0 not
 * 0) is ZERO_ERR_INVALID_ARGUMENT; at a boundary the refusal is agreed
 * (1.8): every other rank returns ZERO_ERR_STATE naming it, the window is
 * kept, and the next zero_step (without a new backward) retries it.
 * Collective.  `args` may be NULL. */
ZERO_API zero_status zero_step(zero_engine *e, const zero_step_args *args, zero_step_result *result);

/* Loss scale to apply to the current micro-batch's loss (1 unless fp16). */
ZERO_API double zero_loss_scale(const zero_engine *e);

/* (1.7) Where training stands and the batch geometry the engine resolved
 * from the config, at any time (between steps, right after zero_load,
 * before the first step): what DeepSpeed's engine answers as global_steps,
 * gradient_accumulation_steps(), train_micro_batch_size_per_gpu(),
 * train_batch_size(), is_gradient_accumulation_boundary() and get_lr(). */
typedef struct zero_engine_info {
    uint32_t struct_size;                    /* = sizeof(zero_engine_info) */
    int32_t stage;                           /* the ZeRO stage the engine runs (0..3; "auto" resolved) */
    uint64_t global_step;                    /* optimizer steps taken (as zero_step_result.global_step; the
                                                checkpoint's after zero_load); skipped ones not counted */
    uint64_t skipped_steps;                  /* boundaries whose step was skipped (a non-finite gradient) */
    uint32_t micro_step;                     /* micro-steps done in the window in progress (0 at a boundary):
                                                the next zero_step is a boundary when
                                                micro_step + 1 == gradient_accumulation_steps */
    uint32_t gradient_accumulation_steps;
    uint64_t train_micro_batch_size_per_gpu; /* 0: the config gives none (and no train_batch_size) */
    uint64_t train_batch_size;               /* micro batch x accumulation steps x data-parallel size; 0: none */
    double lr;                               /* the schedule's lr for the next optimizer step (the config's
                                                optimizer lr, scheduler applied; per-group lr_scale and
                                                zero_set_hparams overrides apart) */
    double loss_scale;                       /* as zero_loss_scale */
} zero_engine_info;
#define ZERO_ENGINE_INFO_INIT {sizeof(zero_engine_info), 0, 0, 0, 0, 0, 0, 0, 0.0, 0.0}
/* Fill *out (the first out->struct_size bytes; struct_size kept).  Not
 * collective (every rank answers the same, the step state being agreed);
 * from the thread that calls zero_step, not during one. */
ZERO_API zero_status zero_engine_info_get(const zero_engine *e, zero_engine_info *out);

/* (1.7) Broadcast `bytes` bytes of host memory at `buf` from data-parallel
 * rank `root` to every rank of the engine's data-parallel group (with a
 * pipeline: this stage's ranks), over libzero's own communicator: for
 * state libzero does not keep but the ranks must agree on, such as a
 * model's buffers (torch DDP's broadcast_buffers).  Every rank of the
 * group passes the same bytes and root.  bytes 0: nothing, no collective.
 * A CPU engine only (device_kind CUDA: ZERO_ERR_UNSUPPORTED; use the
 * framework's collectives for device memory).  Collective; from the
 * engine thread, not during zero_step. */
ZERO_API zero_status zero_broadcast(zero_engine *e, void *buf, uint64_t bytes, int root);

/* ------------------------------------------------------------------------ */
/* Checkpoints                                                               */
/* ------------------------------------------------------------------------ */
/* Save a checkpoint under the root directory `dir` (created if needed) as
 * <dir>/<tag>/ and point <dir>/latest at it.  The tag is "step-<global
 * step>" ("step-<g>-micro<m>" inside an accumulation window).  Every rank
 * writes its shard blobs (fsync'ed, checksummed) into <dir>/<tag>.partial;
 * only when all ranks succeeded does global rank 0 write manifest.json,
 * rename the directory to <dir>/<tag> and replace `latest` atomically.  A
 * process killed at any point leaves `latest` naming a complete checkpoint.
 * Failures are agreed: every rank returns the same status, the message
 * naming the rank that failed and why (ENOSPC: "No space left on device");
 * the previous checkpoint is untouched.  In the middle of a micro-step
 * (a gradient reported since the last zero_step on any rank) it is
 * ZERO_ERR_STATE on every rank, nothing written (1.7.5).  Format and
 * guarantees: docs/checkpoints.md.  Collective over every rank of the job.
 * (1.0 wrote one flat directory; 1.2 reads only the manifest format.) */
ZERO_API zero_status zero_save(zero_engine *e, const char *dir);
/* Load a checkpoint: `dir` is a checkpoint directory (holding
 * manifest.json) or a root whose `latest` names one.  The manifest is
 * checked against the registered parameters (the first mismatch named) and
 * every byte read is verified against its CRC-32C; a truncated, corrupted,
 * missing or foreign file is ZERO_ERR_IO / ZERO_ERR_MISMATCH on every rank.
 * A checkpoint written by another world size or plugin is resharded (every
 * built-in plugin except stage1-pp), each rank reading only the byte ranges
 * it needs; it must have been saved at an accumulation boundary.  The
 * accumulation window in progress is dropped first (1.7.5): gradients of
 * finished micro-steps, a backward cut short, a held step; run a backward
 * before the next zero_step.  Collective. */
ZERO_API zero_status zero_load(zero_engine *e, const char *dir);

/* (1.2) zero_save with a tag and a retention policy. */
typedef struct zero_save_options {
    uint32_t struct_size;   /* = sizeof(zero_save_options) */
    uint32_t keep_last;     /* after a successful save, keep only the newest K checkpoints of dir
                               (by step; never the one just written); 0 = keep all */
    const char *tag;        /* checkpoint directory name (plain name, not "latest"); NULL = "step-<N>" */
    /* ---- appended in 1.7 (read only when struct_size covers them) ---- */
    /* The host's own state, saved with the checkpoint and handed back by
     * zero_client_state after zero_load (DeepSpeed's client_state: the
     * step counter, the LR scheduler's and data loader's state, RNG
     * seeds).  Opaque bytes: libzero checksums and stores them as they
     * are.  Global rank 0's bytes are saved (one copy, like DeepSpeed);
     * every rank should pass the same, and when the ranks' bytes differ
     * rank 0 says so at WARN (the checkpoint keeps rank 0's).  They stay
     * with the checkpoint when it is resharded at load or by
     * `zero-ckpt convert`.  client_state_bytes 0 = none (client_state is
     * then not read); client_state NULL with bytes > 0 is
     * ZERO_ERR_INVALID_ARGUMENT.  Borrowed for the call. */
    const void *client_state;
    uint64_t client_state_bytes;
} zero_save_options;
#define ZERO_SAVE_OPTIONS_INIT {sizeof(zero_save_options), 0, NULL, NULL, 0}
/* o may be NULL (= zero_save).  Borrowed for the call.  Collective. */
ZERO_API zero_status zero_save_ex(zero_engine *e, const char *dir, const zero_save_options *o);

/* (1.7) The client state of the checkpoint the last successful zero_load
 * read (zero_save_options.client_state, as global rank 0 saved it; the
 * same bytes on every rank).  *data = NULL and *bytes = 0 when there is
 * none: no zero_load yet, or a checkpoint saved without client state
 * (every checkpoint of libzero < 1.8).  The bytes are owned by the engine
 * and stay valid until the next successful zero_load or
 * zero_engine_destroy; copy them to keep them.  Not collective; call it
 * from the thread that calls zero_load. */
ZERO_API zero_status zero_client_state(const zero_engine *e, const void **data, uint64_t *bytes);

/* (1.8) zero_load with options. */
typedef struct zero_load_options {
    uint32_t struct_size; /* = sizeof(zero_load_options) */
    /* 1: load the weights only (DeepSpeed's load_module_only; fine-tuning
     * from a trained checkpoint).  The parameters (and the fp32 master of a
     * 16-bit model) become the checkpoint's, read through the resharding
     * reader: any world size and plugin wrote it, at any micro-step.  The
     * optimizer starts over as after zero_params_done: its states zero (this
     * run's optimizer, which may be another than the saver's), the step
     * counters 0 (the lr schedule and Adam's bias correction restart), the
     * loss scaler as the config sets it; this engine's zero_set_hparams
     * settings stay.  The checkpoint's client state is read as by zero_load
     * (zero_client_state).  The model must match as for zero_load (names,
     * element counts, dtypes, groups, model dtype, pipeline split); the
     * plugin must declare ZERO_PLUGIN_CAP_RESHARD (every built-in one
     * does); models with expert groups are refused.  0: zero_load. */
    uint32_t weights_only;
} zero_load_options;
#define ZERO_LOAD_OPTIONS_INIT {sizeof(zero_load_options), 0}
/* o may be NULL (= zero_load).  Every rank must pass the same options: a
 * rank whose options are refused (a newer header's field set), or ranks
 * that disagree on weights_only, make every rank return
 * ZERO_ERR_INVALID_ARGUMENT with nothing loaded.  Borrowed for the call.
 * Collective, like zero_load. */
ZERO_API zero_status zero_load_ex(zero_engine *e, const char *dir, const zero_load_options *o);

/* ------------------------------------------------------------------------ */
/* Statistics                                                                */
/* ------------------------------------------------------------------------ */
typedef struct zero_memory_stats {
    uint32_t struct_size;
    uint32_t reserved0;
    /* bytes by [tier][tag], this rank */
    uint64_t current[ZERO_NTIERS][ZERO_MEM_NTAGS];
    uint64_t peak[ZERO_NTIERS][ZERO_MEM_NTAGS];
    uint64_t current_total[ZERO_NTIERS];
    uint64_t peak_total[ZERO_NTIERS]; /* peak of the sum, not sum of peaks */
    /* ---- appended in 1.3 (filled only when struct_size covers them) ---- */
    /* The optimizer step runs as tiles: one param group's share at a time,
     * cut at max_group_size elements (zero_optimization.max_group_size or
     * moe.max_group_size).  With 16-bit gradients each tile's gradient is
     * upcast, unscaled and clipped into an fp32 temporary (accounted as
     * ZERO_MEM_OTHER) before its step, so at most one tile's fp32
     * temporary exists.  step_fp32_peak_bytes: the largest such temporary
     * held so far (0 with fp32 gradients: nothing is upcast);
     * step_tile_max_numel: the largest tile stepped; step_untiled_numel:
     * this rank's elements in one step, i.e. what one whole-partition
     * upcast without tiling would hold (x 4 bytes). */
    uint64_t step_fp32_peak_bytes;
    uint64_t step_tile_max_numel;
    uint64_t step_untiled_numel;
} zero_memory_stats;
/* Every field positionally: valid C89..C23 and C++98..C++23 (designated
 * initializers are C++20 only) and clean under -Wextra in both. */
#define ZERO_MEMORY_STATS_INIT { sizeof(zero_memory_stats), 0, {{0}}, {{0}}, {0}, {0}, 0, 0, 0 }

/* Fill *out for this rank. Thread-safe. */
ZERO_API zero_status zero_memory_stats_get(const zero_engine *e, zero_memory_stats *out);

/* Calls and payload bytes of every communicator of the engine: the world
 * and (1.3) the sub-communicators plugins make through the services
 * comm_split / comm_split_node (stage 3's gather communicator, MiCS's and
 * ZeRO++'s groups).  total_comm_seconds is the world's. */
typedef struct zero_comm_stats {
    uint32_t struct_size;
    uint32_t reserved0;
    uint64_t allreduce_calls, reduce_scatter_calls, allgather_calls, broadcast_calls, other_calls;
    uint64_t bytes_reduced;   /* payload bytes entering reductions on this rank */
    uint64_t bytes_gathered;  /* payload bytes of all-gathers on this rank */
    uint64_t reduction_passes;/* gradient reduction passes (one per bucket set flush) */
    double exposed_comm_seconds; /* time zero_step waited for reductions started during backward */
    double total_comm_seconds;   /* wall time collectives were in flight */
} zero_comm_stats;
#define ZERO_COMM_STATS_INIT { sizeof(zero_comm_stats), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0.0, 0.0 }
ZERO_API zero_status zero_comm_stats_get(const zero_engine *e, zero_comm_stats *out);

/* ------------------------------------------------------------------------ */
/* Where the time of a step went (1.3; DeepSpeed's wall_clock_breakdown)     */
/* ------------------------------------------------------------------------ */
/* Wall-clock seconds, measured by libzero on every engine (two clock reads
 * per timed call; the config key "wall_clock_breakdown": true only adds a
 * log line, below).
 *
 * The six "in zero_step" phases are disjoint slices of step_seconds: each
 * is the time of one kind of core service the plugin called directly from
 * its step (a service nested in another counts to the outer one).  What is
 * left, step_seconds minus their sum, is bookkeeping and work a plugin does
 * outside the core's services (stage 3's gather-order agreement, say); for
 * the built-in flat plugins it stays within a few per cent (tested).
 * hook_seconds and fetch_seconds are outside zero_step: time the host spent
 * inside libzero during forward and backward, summed over the threads that
 * made the calls (so, with several hook threads, it can exceed wall time). */
typedef struct zero_step_timing {
    uint32_t struct_size;        /* = sizeof(zero_step_timing), set by the caller */
    uint32_t reserved0;
    uint64_t micro_steps;        /* zero_step calls covered: 1 (LAST) or all so far (TOTAL); 0 before the first */
    double step_seconds;         /* wall time inside zero_step */
    /* ---- in zero_step ---- */
    double exposed_comm_seconds; /* waiting for gradient reductions launched during backward (overlap_comm) */
    double reduce_seconds;       /* the rest of finishing the gradient reduction: launching and completing the
                                    reductions not started during backward, placing the reduced blocks */
    double norm_seconds;         /* global gradient norm and overflow check with their all-reduce (clip coefficient) */
    double optimizer_seconds;    /* the optimizer pass over this rank's share */
    double gather_seconds;       /* all-gather of the updated parameter shares */
    double copy_seconds;         /* copies and clears: updated values into host-owned tensors (copy-out), offload's
                                    host/device transfers, clearing the window's gradient */
    /* ---- outside zero_step, since the previous zero_step returned (LAST) ---- */
    double hook_seconds;         /* inside zero_grad_buffer, zero_on_grad_ready and their slice forms */
    double fetch_seconds;        /* inside zero_gather and zero_release (stage 3's parameter gathers) */
} zero_step_timing;
#define ZERO_STEP_TIMING_INIT { sizeof(zero_step_timing), 0, 0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0 }

/* Which figures zero_step_timing_get returns. */
enum {
    ZERO_TIMING_LAST = 0,  /* the last zero_step, and the hook / fetch time of the micro-step it ended */
    ZERO_TIMING_TOTAL = 1  /* sums over every zero_step of the engine so far */
};

/* Fill *out (up to out->struct_size; later fields are left alone) with the
 * figures `which` names.  ZERO_ERR_INVALID_ARGUMENT for a NULL argument, a
 * struct_size below 4 or an unknown `which`.  Call it from the thread that
 * calls zero_step, not while a zero_step runs (the figures are written by
 * zero_step; hooks running on other threads at the time are counted into
 * the next micro-step).  With "wall_clock_breakdown": true, global rank 0
 * also logs every steps_per_print optimizer steps the mean of each phase
 * over the micro-steps since the previous line (through the log callback,
 * at INFO level, whatever ZERO_LOG_LEVEL says). */
ZERO_API zero_status zero_step_timing_get(const zero_engine *e, int32_t which, zero_step_timing *out);

/* ------------------------------------------------------------------------ */
/* Memory plan (1.2)                                                         */
/* ------------------------------------------------------------------------ */
/* What zero_plan plans: a model (a parameter list, or a bare count), a
 * DeepSpeed config (model dtype from fp16/bf16, the optimizer, buckets,
 * stage3_* keys, offload_optimizer, data_types), a world size and a plugin.
 * Everything is borrowed for the call only. */
typedef struct zero_plan_request {
    uint32_t struct_size;       /* = sizeof(zero_plan_request) */
    uint32_t reserved0;         /* must be 0 */
    const char *config_json;    /* DeepSpeed JSON text, or NULL ("{}" if both are NULL) */
    const char *config_path;    /* path of a ds_config.json, or NULL (text wins if both) */
    const char *plugin;         /* name or path; NULL = from the config (never $ZERO_PLUGIN, never "auto") */
    uint32_t world_size;        /* data-parallel ranks, >= 1 */
    uint32_t nparams;           /* entries of numels (0: use total_params) */
    const uint64_t *numels;     /* element counts in registration order, or NULL */
    const int32_t *groups;      /* param group of each entry, or NULL (all group 0) */
    uint64_t total_params;      /* numels NULL: a bare count, laid out as tensors of at most
                                   ZERO_PLAN_TENSOR_NUMEL elements */
    /* (1.9) Expert groups (docs/moe.md), as zero_set_group's expert_color
     * makes them: param group expert_groups[k] is partitioned over
     * expert_dp_sizes[k] ranks (its expert-data-parallel group: the ranks
     * that give it the same color) instead of world_size, and its
     * gradients are reduced by a bucket set of their own.  Each size
     * divides world_size; each group appears once and holds a param of
     * numels/groups.  The model is this rank's registrations (its own
     * experts).  Only plugins that declare ZERO_PLUGIN_CAP_EXPERT_GROUPS
     * plan them (the others: ZERO_ERR_UNSUPPORTED, as at
     * zero_params_done).  0 / NULL: every group dense (a 1.8 request). */
    uint32_t nexpert_groups;
    uint32_t reserved1;         /* must be 0 */
    const int32_t *expert_groups;
    const uint32_t *expert_dp_sizes;
} zero_plan_request;
#define ZERO_PLAN_REQUEST_INIT { sizeof(zero_plan_request), 0, NULL, NULL, NULL, 1, 0, NULL, NULL, 0, 0, 0, NULL, NULL }
/* A bare parameter count has no tensor shapes; it is planned as tensors of
 * this many elements (a 4096 x 4096 matrix) and one remainder, so that
 * per-tensor floors (a bucket holds at least the largest tensor) stay
 * those of a real transformer rather than of one giant tensor. */
#define ZERO_PLAN_TENSOR_NUMEL ((uint64_t)1 << 24)

/* Bytes per rank that the plugin will allocate through libzero's
 * accountant, by tier and category: the figures zero_memory_stats reports
 * as `peak` after the first optimizer steps (every rank's are the same).
 * Stage 3's gather buffers and the bucket engine's staging pool are
 * planned for the canonical host (docs/planner.md): one param at a time,
 * forward in registration order, backward in reverse. */
typedef struct zero_memory_plan {
    uint32_t struct_size;       /* = sizeof(zero_memory_plan) */
    uint32_t reserved0;
    uint64_t bytes[ZERO_NTIERS][ZERO_MEM_NTAGS];
    uint64_t total[ZERO_NTIERS];/* sum of the row */
    char plugin[64];            /* the plugin planned (its table's name) */
} zero_memory_plan;
#define ZERO_MEMORY_PLAN_INIT { sizeof(zero_memory_plan), 0, {{0}}, {0}, {0} }

/* Plan the memory of one plugin for one model and world size without
 * allocating it or communicating.  Loads the plugin (search rules as for
 * engines) and calls its optional `plan` table entry;
 * ZERO_ERR_UNSUPPORTED if it has none.  Errors are copied to err.  Local,
 * thread-safe (no engine involved). */
ZERO_API zero_status zero_plan(const zero_plan_request *req, zero_memory_plan *out, char *err, size_t err_len);

/* Human-readable name of a memory tag ("params", "grads", ...). Static. */
ZERO_API const char *zero_mem_tag_name(zero_mem_tag t);

#ifdef __cplusplus
}
#endif
#endif /* ZERO_H */
