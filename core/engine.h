/* The engine: what a zero_engine* (host) and a zero_core* (plugin) point at.
 * Internal; never included by plugins. */
#ifndef ZERO_CORE_ENGINE_H
#define ZERO_CORE_ENGINE_H
#include <pthread.h>
#include <stdatomic.h>
#include "zero_plugin.h"
#include "config.h"
#include "layout.h"
#include "loader.h"
#include "log.h"
#include "memory.h"
#include "owner.h"
#include "comm.h"
#include "loss_scaler.h"
#include "step_timing.h"

#define ZERO__PARAM_MAGIC 0x7a65726fu /* "zero" */

/* Host handle for one parameter. */
struct zero_param {
    uint32_t magic;
    struct zero_engine *engine;
    zero_param_info info;     /* what the plugin sees */
    atomic_int ready;         /* grad ready in the current micro-step */
    char *name;               /* owned copy */
    void *host_data;          /* (1.1) ZERO_PARAM_HOST_OWNED: the host's tensor, written after each step */
    uint32_t stack_layers;    /* (1.1) zero_register_stacked: slices, else 0 */
    uint64_t slice_numel;
    atomic_uint slices_ready; /* slices reported this micro-step */
    atomic_uchar *slice_seen; /* stack_layers flags (owned) */
    zero_device_kind host_device;
    /* (1.8) zero_param_desc.shape, for the checkpoint manifest; ndim 0: [numel] */
    uint32_t ndim;
    uint64_t shape[ZERO_MAX_NDIM];
    /* (1.7.4) host_writes.c: a fingerprint of info.data taken when libzero
     * last wrote it (copy_printed), in mode copy_print_mode */
    uint64_t copy_print;
    int copy_printed, copy_print_mode;
    /* (1.7.4) stage 3: the pointer zero_gather last handed out and its
     * fingerprint then (gathered_mode 0: none) */
    const void *gathered;
    uint64_t gathered_print;
    int gathered_mode;
    /* (1.7.7) stage 3: the slices zero_gather_slices handed out, one entry
     * per layer (stack_layers, allocated at the first slice gather, owned) */
    struct zero__slice_print *slice_prints;
    /* (1.10) gathers (zero_gather, zero_gather_slices) of this param the
     * host has not released yet, whatever the host-write check does:
     * zero_params_write refuses while a stage-3 copy is held.  Engine thread. */
    uint32_t holds;
};

/* One held slice's pointer and fingerprint at its first gather; `held`
 * counts its gathers not yet released (host_writes.c). */
struct zero__slice_print {
    const void *ptr;
    uint64_t print;
    uint32_t held;
    int mode;
};

/* Per-group hyper-parameters resolved at params_done. */
typedef struct zero__group_hp {
    int32_t group_id;
    double lr_scale;
    double weight_decay;
    int32_t expert_color;  /* (1.3) ZERO_GROUP_DENSE or the expert-DP color (zero_group_desc) */
} zero__group_hp;

/* (1.1) zero_set_hparams overrides of one group (or ZERO_ALL_GROUPS); a
 * field < 0 is not overridden. */
typedef struct zero__hp_override {
    int32_t group;
    double lr, weight_decay, beta1, beta2, eps;
} zero__hp_override;

/* Hyper-parameters in force for one group at optimizer step t. */
typedef struct zero__hp {
    double lr, weight_decay, beta1, beta2, eps;
} zero__hp;

struct zero_engine {
    /* What base/ reads of the engine (log callback, rank, error text,
     * accountant): first, so that a lower floor handed a zero_engine* reads
     * it without knowing the rest (base/owner.h; set by zero_engine_create). */
    zero__owner head;
    /* configuration and plumbing */
    zero__config *cfg;
    const zero_run_config *rc;
    zero_comm *world;
    zero__mem *mem;
    int rank, world_size;
    char last_error[8192];   /* long enough for a not-found message listing every search path */
    pthread_mutex_t err_lock;
    /* (1.3) communicators plugins made through the services, for
     * zero_comm_stats (comm_stats.c); a freed one's counters move into sub_retired.  Under
     * sub_lock. */
    pthread_mutex_t sub_lock;
    zero_comm **sub_comms;
    size_t nsub, sub_cap;
    zero__comm_counters sub_retired;

    /* plugin */
    zero__plugin plugin;
    void *pstate;
    zero_services_v2 svc;        /* what plugins see (services.c); a revision-1 plugin gets plugin.services_v1 */
    int auto_pick;               /* "stage": "auto": no plugin until zero_params_done picks one (plan_auto.c) */

    /* params */
    struct zero_param **params;
    uint32_t nparams, params_cap;
    void **param_set;            /* open-addressing set of valid handles */
    uint32_t param_set_cap;
    int params_frozen;
    zero__layout layout;
    zero__group_hp *groups;      /* ngroups entries, by layout group order */
    uint32_t ngroups_hp;
    zero__hp_override *hp_over;  /* (1.1) zero_set_hparams, nhp_over entries */
    uint32_t nhp_over;
    int any_host_owned;          /* (1.1) some param is ZERO_PARAM_HOST_OWNED */
    uint32_t gathered_writes;    /* (1.7.4) stage-3 gathers the host wrote before releasing them (host_writes.c) */
    const struct zero_param *gathered_written; /* the first of them */
    int64_t gathered_written_layer;              /* (1.7.7) its slice (zero_gather_slices), or -1: the whole param */
    /* (1.13) host_writes_device.c: the fingerprints of a device engine's
     * check, ZERO__HW_KINDS x nparams words in device memory and their host
     * mirror (NULL until first used); hwd_off: the check could not run on
     * this device (warned once) */
    uint64_t *hwd_slots, *hwd_host;
    uint64_t *hwd_side; /* the same layout: fingerprints of pieces in host memory, taken on the host */
    int hwd_off;

    /* step state */
    uint32_t micro_step;         /* within the accumulation window */
    uint64_t global_step;        /* optimizer steps taken */
    uint64_t skipped_steps;
    double lr;                   /* scheduled lr for the next optimizer step (group 0, before lr_scale) */
    zero__scaler scaler;         /* fp16 loss scale (1 and static otherwise) */
    /* (issue 31) this window's missing gradients on this rank, agreed at the
     * boundary (api.c); NULL until one is missing.  Step thread only. */
    struct zero__grad_window *gwin;

    /* stats */
    atomic_uint_fast64_t reduction_passes;
    double exposed_comm_seconds;

    /* pipeline parallelism.  With
     * pipeline.stages = P > 1 the communicator the host gave spans every
     * stage; it is kept here as `global` and `world` (and rank/world_size)
     * become this rank's data-parallel group, split off with the layout
     * global rank = pp_stage * dp_size + dp_rank.  Without a pipeline
     * global == world.  `global` owns the backend; `world` is freed first. */
    zero_comm *global;
    int pp_stage, pp_stages;     /* 0 and 1 without a pipeline */

    /* (gpu-wiring) The compute device of a device_kind CUDA engine, NULL on
     * the CPU.  Owned; closed last in zero_engine_destroy (after the plugin,
     * the communicators and the memory accountant).  The services, the
     * bucket engine and the accountant route device-resident buffers to it
     * (backends/device/device.h). */
    struct zero__device *dev;
    /* (gpu-wiring) With comm_kind AUTO on a CUDA device the world is NCCL
     * made over MPI; the MPI world that bootstrapped it (and that finalizes
     * MPI if libzero initialized it) is kept here and freed after `global`. */
    zero_comm *boot;
    /* (1.7.4) zero_engine_options.comm_kind as the host gave it */
    zero_comm_kind comm_kind;

    /* (checkpoints) The save / load in progress, or NULL (core/ckpt/
     * ckpt_engine.h): consulted by the checkpoint services while the
     * plugin's save / load runs.  ck_echo: this rank's last checkpoint
     * failure was only another rank's, reported by ckpt_agree. */
    struct zero__ck_save *ck_save;
    struct zero__ck_load *ck_load;
    int ck_echo;
    /* (1.7) The client state of the checkpoint the last successful
     * zero_load read (zero_client_state), owned; NULL / 0 when none. */
    void *ck_client;
    uint64_t ck_client_bytes;

    /* (1.3) Expert groups (core/experts.c).  group_comms: one entry per
     * layout group, the expert-data-parallel communicator of an expert
     * group (owned, split from `world` at zero_params_done, freed before
     * it) or NULL for a dense group; the array itself is NULL when no
     * group is an expert group. */
    zero_comm **group_comms;
    uint32_t ngroup_comms;
    char two_groups[200];        /* a name registered in two groups (refused), reported at params_done */
    /* (1.3) Tiled optimizer step (partition_step.c): max_group_size (0 =
     * one tile per group share) and what zero_memory_stats reports.  Step
     * thread only (written), any thread (read: plain 64-bit loads). */
    uint64_t max_group_size;
    uint64_t step_fp32_peak_bytes, step_tile_max_numel, step_untiled_numel;
    /* (trace) this engine holds a reference on the process's tracer (base/trace.h) */
    int tracing;
    /* (1.3) where the time of each step goes (step_timing.h) */
    zero__timing timing;
    /* (1.10) zero_params_write's broadcast scratch, kept until the next
     * zero_step (params_write.c); NULL / 0 when none.  Engine thread. */
    char *pw_scratch;
    size_t pw_scratch_bytes;
};
_Static_assert(offsetof(struct zero_engine, head) == 0, "base/owner.h: the head comes first");
_Static_assert(sizeof(((struct zero_engine *)0)->last_error) <= 8192, "base/log.c copies at most 8192 bytes");
/* Point e's head at e's own fields (zero_engine_create, and tests that
 * make an engine by hand). */
static inline void zero__engine_init_head(struct zero_engine *e, zero_log_fn log_fn, void *log_user) {
    e->head = (zero__owner){.log_fn = log_fn, .log_user = log_user, .rank = &e->rank,
                            .world_size = &e->world_size, .pp_stage = &e->pp_stage, .pp_stages = &e->pp_stages,
                            .last_error = e->last_error, .last_error_len = sizeof e->last_error,
                            .err_lock = &e->err_lock, .mem = &e->mem};
}

static inline struct zero_engine *zero__engine_of(zero_core *c) { return (struct zero_engine *)c; }
static inline zero_core *zero__core_of(struct zero_engine *e) { return (zero_core *)e; }
/* Is the current micro-step the last of its accumulation window? */
static inline int zero__micro_is_boundary(const struct zero_engine *e) {
    return e->micro_step + 1 >= (uint32_t)e->rc->grad_accum_steps;
}

/* (issue 31) This rank's missing gradients in the window: grad_window.c. */
typedef struct zero__grad_window zero__grad_window;
/* Hyper-parameter overrides of a param group (zero_set_group) or NULL (hparams.c). */
const zero__group_hp *zero__group_hp_of(const struct zero_engine *e, int32_t group_id);
/* (1.1) Resolve group_id's hyper-parameters for optimizer step t (hparams.c). */
void zero__hp_resolve(const struct zero_engine *e, int32_t group_id, uint64_t t, zero__hp *out);
/* Before optimizer step t moves anything (zero_step, at a boundary): every
 * group's resolved lr, weight decay (and lr * decay), betas and eps are
 * finite and in fp32 range, or ZERO_ERR_STATE naming the group, the value
 * and where it came from (hparams.c).  The same on every rank. */
zero_status zero__hp_check_step(struct zero_engine *e, uint64_t t);
/* (1.3) Expert groups at zero_params_done, before the layout is built
 * (experts.c): agree the group table and the param list over every rank,
 * refuse a tensor registered in two groups, split one communicator per
 * expert group and fill part_world[i] / part_rank[i] (zeroed arrays of
 * nparams; left 0 for dense params).  Collective over
 * e->world; every rank returns the same verdict. */
zero_status zero__experts_agree(struct zero_engine *e);
zero_status zero__experts_setup(struct zero_engine *e, uint32_t *part_world, uint32_t *part_rank);
/* (1.9) For "stage": "auto", before zero__experts_setup: the expert groups
 * (ids, in registration order) and the partition size each will have --
 * the largest set of ranks that gave it one color, the same figure on
 * every rank (sizes that differ are refused by the setup, by name).
 * ids and sizes hold nparams entries; *n = 0 without expert groups.  After
 * zero__experts_agree; collective over e->world (one all-gather) when the
 * (agreed) group table has an expert group, local otherwise. */
zero_status zero__experts_plan_sizes(struct zero_engine *e, int32_t *ids, uint32_t *sizes, uint32_t *n);
/* (1.3) Free the expert communicators (destroy; NULL-safe). */
void zero__experts_free(struct zero_engine *e);
/* (1.7.3) out[i] (nparams entries): the expert-data-parallel communicator
 * of param i's group (made by zero__experts_setup), NULL for a dense group
 * or when there are none.  Reads the engine only; ZERO_ERR_OUT_OF_MEMORY. */
zero_status zero__experts_param_comms(const struct zero_engine *e, zero_comm **out);
/* Fill e->svc (services.c). */
void zero__services_init(struct zero_engine *e);
/* Learning-rate schedule: lr for optimizer step t (1-based), group 0 (sched.c). */
double zero__schedule_lr(const struct zero_engine *e, uint64_t t);
/* The step state a run starts from: no step taken (global, skipped and
 * micro-step 0), the loss scaler as the config sets it, the lr of the
 * schedule's first step.  At engine creation and by a weights-only load
 * (1.8).  Step thread. */
void zero__engine_steps_init(struct zero_engine *e);
/* Optimizer betas for step t: the configured ones, or OneCycle's cycled
 * momentum (sched.c).  Pure; any thread. */
void zero__schedule_betas(const struct zero_engine *e, uint64_t t, double *beta1, double *beta2);

#endif
