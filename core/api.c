/* Host entry points (abi/zero.h): argument checking, lifecycle and the
 * micro-step bookkeeping every plugin relies on.  Strategy-specific work is
 * delegated to the loaded plugin. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_mem.h"
#include "plugin_abi.h"
#include "device.h"
#include "engine.h"
#include "engine_agree.h"
#include "env.h"
#include "grad_window.h"
#include "host_owned.h"
#include "params_write.h"
#include "host_writes.h"
#include "host_writes_device.h"
#include "comm_wait.h"
#include "ckpt/ckpt_engine.h"
#include "comm_stats.h"
#include "plan_auto.h"
#include "loss_scaler.h"
#include "optim.h"
#include "params.h"
#include "struct_in.h"
#include "partition_step.h"
#include "trace.h"
#include "trace_engine.h"

/* Engine-level state that does not need to be visible to other files. */
#define ENGINE_ALIGN_ELEMS 16 /* 64 bytes of fp32: every param starts cache-line aligned */

static void config_warn(void *user, const char *msg) { zero__log((struct zero_engine *)user, ZERO_LOG_WARN, "%s", msg); }

static void copy_err(char *err, size_t err_len, const char *msg) {
    if (err && err_len) snprintf(err, err_len, "%s", msg);
}

static zero_status fail_create(struct zero_engine *e, zero_status s, char *err, size_t err_len) {
    copy_err(err, err_len, e->last_error);
    zero_engine_destroy(e);
    return s;
}

/* With pipeline.stages = P > 1 the given communicator spans all stages:
 * keep it as e->global and make e->world this rank's data-parallel group.
 * Layout: global rank = pp_stage * dp_size + dp_rank (stage-major), so a
 * stage's replicas are consecutive ranks.  The checks give the same answer on
 * every rank (all know world size and P), so a refusal never leaves a rank
 * waiting in the split. */
static zero_status pipeline_split(struct zero_engine *e, int stages) {
    if (stages <= 1) return ZERO_OK;
    int world = e->world_size;
    if (world % stages != 0)
        return zero__error(e, ZERO_ERR_CONFIG,
                           "pipeline.stages: got %d, expected a divisor of the world size (%d): every pipeline "
                           "stage needs the same number of data-parallel replicas (global rank = stage * dp_size "
                           "+ dp_rank)",
                           stages, world);
    int dp = world / stages, grank = e->rank;
    zero_comm *sub = NULL;
    zero_status s = zero__comm_split(e->global, grank / dp, grank, &sub);
    if (s != ZERO_OK) return e->last_error[0] ? s : zero__error(e, s, "pipeline: splitting the world failed");
    if (!sub) return zero__error(e, ZERO_ERR_INTERNAL, "pipeline: split gave no data-parallel communicator");
    e->world = sub;
    e->pp_stages = stages;
    e->pp_stage = grank / dp;
    e->rank = zero__comm_rank(sub);
    e->world_size = zero__comm_size(sub);
    zero__log(e, ZERO_LOG_DEBUG, "pipeline: global rank %d -> stage %d of %d, data-parallel rank %d of %d", grank,
              e->pp_stage, stages, e->rank, e->world_size);
    return ZERO_OK;
}

#if defined(ZERO_HAVE_NCCL)
#include "comm_internal.h"
#include "comm_nccl.h"
#endif

/* The world communicator of a device_kind CUDA engine (gpu-wiring).
 *  - ZERO_COMM_NCCL: the host's ncclComm_t; it must run on the engine's device.
 *  - ZERO_COMM_AUTO: NCCL made over MPI (rank 0's ncclUniqueId broadcast over
 *    MPI_COMM_WORLD; the MPI world is kept as e->boot) when the build has
 *    NCCL and MPI and this is a real CUDA device launched under MPI;
 *    otherwise like MPI/SELF below.
 *  - ZERO_COMM_MPI / ZERO_COMM_SELF (and AUTO without NCCL): the host-memory
 *    communicator wrapped in the staging layer (comm_devstage.c): correct,
 *    no CUDA-aware MPI needed, but every collective crosses PCIe twice.
 * NCCL collectives are issued on the device's stream, so they are ordered
 * after the kernels libzero queues there without host synchronisation. */
static zero_status device_world(struct zero_engine *e, const zero_engine_options *o, char *msg, size_t len) {
    zero__device *d = e->dev;
    zero_status s;
#if defined(ZERO_HAVE_NCCL)
    void *dstream = d->ops->stream(d);
    if (o->comm_kind == ZERO_COMM_NCCL) {
        if ((s = zero__comm_nccl_create(o->comm, e, &e->world, msg, len)) != ZERO_OK) return s;
        if (zero__comm_nccl_device(e->world) != d->ordinal) {
            snprintf(msg, len, "the ncclComm_t runs on CUDA device %d but device_index is %d",
                     zero__comm_nccl_device(e->world), d->ordinal);
            return ZERO_ERR_DEVICE;
        }
        return dstream ? zero__comm_nccl_set_stream(e->world, dstream) : ZERO_OK;
    }
#if defined(ZERO_HAVE_MPI)
    if (o->comm_kind == ZERO_COMM_AUTO && dstream) {
        if ((s = zero__comm_world_create(ZERO_COMM_AUTO, NULL, e, &e->boot, msg, len)) != ZERO_OK) return s;
        if (zero__comm_mpi_initialized()) {
            if ((s = zero__comm_nccl_create_mpi(NULL, d->ordinal, e, &e->world, msg, len)) != ZERO_OK) return s;
            zero__log(e, ZERO_LOG_DEBUG, "comm: NCCL over MPI_COMM_WORLD on CUDA device %d", d->ordinal);
            return zero__comm_nccl_set_stream(e->world, dstream);
        }
        /* single process without MPI: the staged self communicator */
        zero_comm *inner = e->boot;
        e->boot = NULL;
        return zero__comm_devstage_create(inner, d, &e->world);
    }
#endif
#endif
    zero_comm *inner = NULL;
    if ((s = zero__comm_world_create(o->comm_kind, o->comm, e, &inner, msg, len)) != ZERO_OK) return s;
    if (inner->size > 1)
        zero__log(e, ZERO_LOG_INFO, "comm: device buffers staged through host memory over %s (use NCCL for speed)",
                  inner->ops->name);
    if ((s = zero__comm_devstage_create(inner, d, &e->world)) != ZERO_OK) zero__comm_world_free(inner);
    return s;
}

/* Load `plugin`, check it against the run (pipeline capability, gradient
 * dtypes), and create its state.  At zero_engine_create, or at
 * zero_params_done for "stage": "auto".  On failure the engine's last error
 * says why; a loaded plugin is unloaded by zero_engine_destroy. */
/* Load `plugin` ("auto": nothing yet) and agree with every rank on it and
 * on the config (engine_agree.c) before any plugin code runs: a plugin's
 * create or params_done may communicate, and ranks with different plugins
 * would wait in collectives that never match.  Every rank joins the
 * agreement, also one whose load failed, so that all of them fail. */
static zero_status load_agreed(zero_engine *e, const char *plugin) {
    char msg[8192] = ""; /* loader messages list every path searched */
    zero_status s = strcmp(plugin, "auto") ? zero__plugin_load(plugin, &e->plugin, msg, sizeof msg) : ZERO_OK;
    return zero__engine_agree(e, plugin, s, msg);
}

static zero_status bind_plugin(zero_engine *e, const char *plugin) {
    zero_status s;
    if (!e->plugin.table && (s = load_agreed(e, plugin)) != ZERO_OK) return s;
    if (e->rc->pipeline_stages > 1 && !(e->plugin.table->caps & ZERO_PLUGIN_CAP_PIPELINE))
        return zero__error(e, ZERO_ERR_CONFIG,
                           "plugin '%s' cannot run with pipeline parallelism (pipeline.stages = %d): "
                           "it does not declare ZERO_PLUGIN_CAP_PIPELINE.  ZeRO stage 2/3 would "
                           "reduce gradients on every micro-batch, multiplying data-parallel traffic "
                           "by the number of micro-batches for no memory gain, and a plugin unaware "
                           "of the pipeline would clip by its own stage's gradient norm; use stage 1 "
                           "(plugin stage1-pp)",
                           e->plugin.table->name, (int)e->rc->pipeline_stages);

    /* A plugin that does not know the 1.1 gradient dtypes keeps its 1.0
     * behaviour: gradients in the model dtype. */
    if (!(e->plugin.table->caps & ZERO_PLUGIN_CAP_GRAD_DTYPES)) {
        if (e->rc->grad_accum_dtype != e->rc->model_dtype || e->rc->comm_dtype != e->rc->model_dtype)
            zero__log(e, ZERO_LOG_INFO,
                      "plugin '%s' does not declare ZERO_PLUGIN_CAP_GRAD_DTYPES: gradients accumulate and reduce "
                      "in the model dtype", e->plugin.table->name);
        zero__config_set_grad_dtypes(e->cfg, e->rc->model_dtype, e->rc->model_dtype);
    }
    zero__services_init(e);
    s = zero__plugin_create(e, &e->pstate);
    if (s != ZERO_OK) {
        if (!e->last_error[0]) zero__error(e, s, "plugin '%s' failed to initialise", e->plugin.table->name);
        e->pstate = NULL;
        return s == ZERO_OK ? ZERO_ERR_PLUGIN_INIT : s;
    }
    zero__log(e, ZERO_LOG_INFO, "engine ready: plugin %s (%s), world %d, gas %lld", e->plugin.table->name,
              e->plugin.path, e->world_size, (long long)e->rc->grad_accum_steps);
    return ZERO_OK;
}

/* Every blocking wait of the engine's communicators gives up after
 * ZERO_COMM_TIMEOUT / comm_timeout seconds without progress (issue 17,
 * backends/comm/comm_wait.h).  Until the config is parsed the backends use
 * the environment's value or the default. */
static void set_comm_timeout(zero_engine *e) {
    double cfg = 0;
    const char *src = "default";
    const int set = zero__config_double(e->cfg, "comm_timeout", &cfg) == 1;
    const double t = zero__comm_timeout_resolve(set, cfg, &src);
    /* (1.7.4) a limit the host asked for that cannot hold: libzero never
     * waits itself on a host communicator, it is inside the host's callback */
    if (e->comm_kind == ZERO_COMM_HOST && strcmp(src, "default") != 0 && t > 0 && e->rank == 0)
        zero__log(e, ZERO_LOG_WARN,
                  "%s = %g s does not apply to a ZERO_COMM_HOST communicator: libzero waits inside the host's "
                  "callbacks and cannot interrupt them, so a rank that stops answering hangs the others for as long "
                  "as the transport waits; give the transport its own timeout (torch.distributed: "
                  "init_process_group(..., timeout=datetime.timedelta(seconds=%g)))",
                  src, t, t);
    zero__comm_set_timeout(e->global, t);
    if (e->world != e->global) zero__comm_set_timeout(e->world, t);
    if (e->boot) zero__comm_set_timeout(e->boot, t);
    zero__log(e, ZERO_LOG_DEBUG, "comm timeout %g s (%s)%s", t, src, t > 0 ? "" : ": waits are unbounded");
}

/* The accountant's device allocator (base/memory.h): the engine's device. */
static void *device_alloc(void *ctx, zero_mem_tier tier, size_t bytes) {
    zero__device *d = ctx;
    return d->ops->alloc(d, tier, bytes);
}
static void device_free(void *ctx, void *p) {
    zero__device *d = ctx;
    d->ops->free(d, p);
}

zero_status zero_engine_create(const zero_engine_options *user_opts, zero_engine **out, char *err,
                               size_t err_len) {
    if (out) *out = NULL;
    if (!user_opts || !out) {
        copy_err(err, err_len, "zero_engine_create: options and out must not be NULL");
        return ZERO_ERR_INVALID_ARGUMENT;
    }
    if (user_opts->struct_size < offsetof(zero_engine_options, plugin)) {
        copy_err(err, err_len, "zero_engine_create: options.struct_size is too small (use ZERO_ENGINE_OPTIONS_INIT)");
        return ZERO_ERR_INVALID_ARGUMENT;
    }
    /* Fields beyond the caller's struct_size keep their defaults. */
    zero_engine_options opts = ZERO_ENGINE_OPTIONS_INIT;
    char why[512];
    if (!zero__struct_in(&opts, user_opts, user_opts->struct_size, sizeof opts, "zero_engine_options", why,
                         sizeof why)) {
        if (err && err_len) snprintf(err, err_len, "zero_engine_create: %s", why);
        return ZERO_ERR_INVALID_ARGUMENT;
    }
    if (opts.reserved0 != 0 || opts.reserved1 != 0) {
        if (err && err_len)
            snprintf(err, err_len,
                     "zero_engine_create: zero_engine_options.reserved0 (%u) and reserved1 (%d) must be 0 "
                     "(start from ZERO_ENGINE_OPTIONS_INIT)",
                     (unsigned)opts.reserved0, (int)opts.reserved1);
        return ZERO_ERR_INVALID_ARGUMENT;
    }

    struct zero_engine *e = calloc(1, sizeof *e);
    if (!e) {
        copy_err(err, err_len, "zero_engine_create: out of memory");
        return ZERO_ERR_OUT_OF_MEMORY;
    }
    pthread_mutex_init(&e->err_lock, NULL);
    pthread_mutex_init(&e->sub_lock, NULL);
    e->rank = -1;
    zero__engine_init_head(e, opts.log_fn, opts.log_user);
    e->mem = zero__mem_create();
    if (!e->mem) return fail_create(e, zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "out of memory"), err, err_len);

    if (opts.device_kind != ZERO_DEVICE_CPU && opts.device_kind != ZERO_DEVICE_CUDA)
        return fail_create(e, zero__error(e, ZERO_ERR_INVALID_ARGUMENT, "unknown device_kind %d", (int)opts.device_kind),
                           err, err_len);

    char msg[8192] = ""; /* loader messages list every path searched */
    zero_status s;
    e->comm_kind = opts.comm_kind;
    if (opts.device_kind == ZERO_DEVICE_CUDA) {
        /* Before any communication: a machine without a usable GPU fails
         * here, on every rank alike, with the driver's reason. */
        s = zero__device_open(opts.device_index, opts.stream, &e->dev, msg, sizeof msg);
        if (s != ZERO_OK)
        {
            char idx[32] = "auto";
            if (opts.device_index >= 0) snprintf(idx, sizeof idx, "%d", (int)opts.device_index);
            return fail_create(e, zero__error(e, s, "device_kind CUDA (device_index %s): %s", idx, msg), err, err_len);
        }
        const zero__mem_backing backing = {e->dev, device_alloc, device_free, &e->dev->pin_host};
        zero__mem_set_backing(e->mem, &backing);
        s = device_world(e, &opts, msg, sizeof msg);
    } else {
        s = zero__comm_world_create(opts.comm_kind, opts.comm, e, &e->world, msg, sizeof msg);
    }
    if (s != ZERO_OK) return fail_create(e, zero__error(e, s, "%s", msg), err, err_len);
    e->global = e->world;
    e->pp_stages = 1;
    e->rank = zero__comm_rank(e->world);
    e->world_size = zero__comm_size(e->world);
    /* pipeline.stages as this rank's config says, agreed by every rank
     * before the split (a rank that skipped the split while the others
     * made it would leave them in MPI_Comm_split, which has no timeout) */
    int stages = zero__config_peek_pipeline_stages(opts.config_json, opts.config_json ? NULL : opts.config_path);
    if ((s = zero__engine_agree_stages(e, &stages)) != ZERO_OK) return fail_create(e, s, err, err_len);
    s = pipeline_split(e, stages);
    if (s != ZERO_OK) return fail_create(e, s, err, err_len);
#if defined(ZERO_HAVE_NCCL)
    /* A pipeline's data-parallel group is a split of the NCCL world with a
     * stream of its own: put it on the device's stream too, so the bucket
     * reductions stay ordered after the gradient kernels. */
    if (e->dev && e->world != e->global && zero__comm_is_nccl(e->world) && e->dev->ops->stream(e->dev) &&
        (s = zero__comm_nccl_set_stream(e->world, e->dev->ops->stream(e->dev))) != ZERO_OK)
        return fail_create(e, s, err, err_len);
#endif

    s = zero__config_parse(opts.config_json, opts.config_json ? NULL : opts.config_path, e->world_size, &e->cfg,
                           config_warn, e, msg, sizeof msg);
    /* A config that fails on some ranks only (a file missing on one node):
     * they still join the agreement, so the others fail at once naming
     * them instead of waiting out the comm timeout. */
    if (s != ZERO_OK) return fail_create(e, zero__engine_agree_failure(e, s, "parse its config", msg), err, err_len);
    /* The environment next (env.c): a bad value of a variable that guards a
     * result or a wait (ZERO_COMM_TIMEOUT=5m, ZERO_CHECK_HOST_WRITES=ful)
     * is refused, agreed like a bad config so that no rank waits for it;
     * the other bad values and near-miss names are warned about. */
    s = zero__env_check(config_warn, e, msg, sizeof msg);
    if (s != ZERO_OK) return fail_create(e, zero__engine_agree_failure(e, s, "read its environment", msg), err, err_len);
    e->rc = zero__config_run(e->cfg);
    /* a trace directory missing on one node only fails every rank at once */
    if ((s = zero__trace_engine_start(e)) != ZERO_OK) {
        /* without "rank R: ": the agreement puts the rank in front again */
        snprintf(msg, sizeof msg, "%s", zero__error_body(e->last_error));
        return fail_create(e, zero__engine_agree_failure(e, s, "start its trace", msg), err, err_len);
    }
    set_comm_timeout(e);
    /* offload_optimizer.pin_memory: host-tier blocks (fp32 master, states,
     * the gradient landing buffer) are pinned so host<->device copies DMA.
     * Unset on a CUDA engine means pinned: pageable memory turns every
     * gradient copy into a synchronous staged one (DeepSpeed defaults to
     * false; an explicit false is honoured). */
    if (e->dev && e->rc->offload_optimizer) {
        int pin = 0;
        if (zero__config_bool(e->cfg, "zero_optimization.offload_optimizer.pin_memory", &pin) != 1) {
            pin = 1;
            zero__log(e, ZERO_LOG_INFO, "offload on a CUDA engine: host-tier buffers pinned (offload_optimizer."
                                        "pin_memory unset; set it false for pageable memory)");
        }
        e->dev->pin_host = pin;
    }

    /* Plugin choice: explicit option, then $ZERO_PLUGIN, then the config.
     * "auto" ("stage": "auto"): zero_params_done picks one from the memory
     * plans of the parameters registered (plan_auto.c). */
    const char *plugin = opts.plugin, *env_plugin = getenv("ZERO_PLUGIN");
    /* an operator's ZERO_PLUGIN that the host's own choice overrides is
     * said, not dropped in silence (1.7.5) */
    if (plugin && plugin[0] && env_plugin && env_plugin[0] && strcmp(plugin, env_plugin) != 0)
        zero__log(e, ZERO_LOG_WARN, "ZERO_PLUGIN=%s is ignored: the host named plugin '%s' (zero_engine_options."
                  "plugin), which comes first (docs/environment.md)", env_plugin, plugin);
    if (!plugin || !plugin[0]) plugin = env_plugin;
    if (!plugin || !plugin[0]) plugin = zero__config_plugin(e->cfg);
    e->auto_pick = strcmp(plugin, "auto") == 0;
    const char *needs = zero__config_optim_plugin(e->cfg);
    if (needs && strcmp(plugin, needs) != 0)
        return fail_create(e,
                           zero__error(e, ZERO_ERR_CONFIG,
                                       "optimizer.type: OneBitAdam runs only with the plugin \"%s\" "
                                       "(plugins-contrib/onebit; select it with \"zero_optimization\": {\"plugin\": "
                                       "\"%s\"} or ZERO_PLUGIN=%s): plugin \"%s\" would run plain Adam without the "
                                       "1-bit compressed momentum",
                                       needs, needs, needs, plugin),
                           err, err_len);
    if ((s = load_agreed(e, plugin)) != ZERO_OK) return fail_create(e, s, err, err_len);
    if (e->auto_pick && e->rc->pipeline_stages > 1)
        return fail_create(e,
                           zero__error(e, ZERO_ERR_CONFIG,
                                       "zero_optimization.stage: \"auto\" with pipeline.stages %d: only stage1-pp "
                                       "runs with a pipeline; name it",
                                       (int)e->rc->pipeline_stages),
                           err, err_len);
    zero__engine_steps_init(e); /* no step taken, the configured loss scaler, the lr of step 1 */
    /* LAMB has no per-range kernel: its trust ratios need whole-parameter
     * norms, which the part_step/boundary_step services compute across
     * partitions (partition_lamb.c); a plugin stepping ranges itself through
     * optim_step gets a clear error at its first step. */
    if (!zero__optim_supported(e->rc->optim) && e->rc->optim != ZERO_OPTIM_LAMB)
        return fail_create(e,
                           zero__error(e, ZERO_ERR_UNSUPPORTED,
                                       "optimizer.type: this optimizer is not implemented by libzero's kernels yet "
                                       "(supported: Adam, AdamW, SGD, Lion, Adagrad, Lamb)"),
                           err, err_len);

    if (!e->auto_pick && (s = bind_plugin(e, plugin)) != ZERO_OK) return fail_create(e, s, err, err_len);
    *out = e;
    return ZERO_OK;
}

void zero_engine_destroy(zero_engine *e) {
    if (!e) return;
    zero__params_write_release(e);
    if (e->plugin.table && e->pstate) {
        if (e->plugin.table->sync) e->plugin.table->sync(e->pstate);
        e->plugin.table->destroy(e->pstate);
        e->pstate = NULL;
    }
    if (e->plugin.dl) zero__plugin_unload(&e->plugin);
    zero__experts_free(e); /* sub-communicators of the world, freed before it */
    zero__grad_window_free(e); /* (issue 31) */
    zero__hwd_free(e);         /* (1.13) the device host-write check's slots, before the accountant goes */
    if (e->params_frozen) zero__layout_free(&e->layout);
    free(e->groups);
    free(e->hp_over);
    free(e->ck_client);
    zero__params_free(e);
    if (e->cfg) zero__config_free(e->cfg);
    if (e->world && e->world != e->global) { /* a pipeline's sub-communicator goes before its world */
        if (e->global) zero__comm_free(e->world);
        else zero__comm_world_free(e->world);
    }
    if (e->global) zero__comm_world_free(e->global);
    if (e->boot) zero__comm_world_free(e->boot);
    zero__trace_engine_stop(e); /* after the comms: their progress threads are joined */
    if (e->mem) zero__mem_destroy(e->mem);
    zero__device_close(e->dev); /* last: the accountant returned its blocks, the comms used its stream */
    pthread_mutex_destroy(&e->err_lock);
    pthread_mutex_destroy(&e->sub_lock);
    free(e->sub_comms); /* plugins freed theirs in destroy; a leaked one is not ours to free */
    free(e);
}

const char *zero_last_error(const zero_engine *e) { return e ? e->last_error : "no engine"; }
int zero_rank(const zero_engine *e) { return e ? e->rank : -1; }
int zero_world_size(const zero_engine *e) { return e ? e->world_size : 0; }
int zero_pipeline_stage(const zero_engine *e) { return e ? e->pp_stage : -1; }
int zero_pipeline_stages(const zero_engine *e) { return e ? e->pp_stages : 0; }
const char *zero_plugin_name(const zero_engine *e) {
    if (e && !e->plugin.table && e->auto_pick) return "auto"; /* picked at zero_params_done */
    return e && e->plugin.table && e->plugin.table->name ? e->plugin.table->name : "";
}
double zero_loss_scale(const zero_engine *e) { return e ? e->scaler.scale : 1.0; }

zero_status zero_broadcast(zero_engine *e, void *buf, uint64_t bytes, int root) {
    if (!e) return ZERO_ERR_INVALID_ARGUMENT;
    if (!bytes) return ZERO_OK;
    if (!buf) return zero__error(e, ZERO_ERR_INVALID_ARGUMENT, "zero_broadcast: buf is NULL for %llu bytes",
                                 (unsigned long long)bytes);
    if (root < 0 || root >= e->world_size)
        return zero__error(e, ZERO_ERR_INVALID_ARGUMENT, "zero_broadcast: root %d, the data-parallel group has %d "
                           "ranks", root, e->world_size);
    if (e->dev)
        return zero__error(e, ZERO_ERR_UNSUPPORTED, "zero_broadcast: a device engine (device_kind CUDA): its "
                           "communicator moves device memory; broadcast with the framework's collectives");
    if (bytes > (uint64_t)SIZE_MAX) return zero__error(e, ZERO_ERR_INVALID_ARGUMENT, "zero_broadcast: too large");
    zero_status s = zero__broadcast(e->world, buf, (size_t)bytes, ZERO_DTYPE_U8, root);
    return s != ZERO_OK ? zero__error_context(e, s, "zero_broadcast") : s;
}

zero_status zero_engine_info_get(const zero_engine *e, zero_engine_info *out) {
    if (!e || !out || out->struct_size < sizeof(uint32_t)) return ZERO_ERR_INVALID_ARGUMENT;
    const zero_run_config *rc = e->rc;
    zero_engine_info i = ZERO_ENGINE_INFO_INIT;
    i.stage = rc->stage;
    i.global_step = e->global_step;
    i.skipped_steps = e->skipped_steps;
    i.micro_step = e->micro_step;
    i.gradient_accumulation_steps = rc->grad_accum_steps > 0 ? (uint32_t)rc->grad_accum_steps : 1u;
    i.train_micro_batch_size_per_gpu = rc->micro_batch_per_gpu > 0 ? (uint64_t)rc->micro_batch_per_gpu : 0u;
    i.train_batch_size = rc->train_batch_size > 0 ? (uint64_t)rc->train_batch_size : 0u;
    i.lr = e->lr;
    i.loss_scale = e->scaler.scale;
    const uint32_t size = out->struct_size; /* an older header's shorter struct gets its fields */
    memcpy(out, &i, size < sizeof i ? size : sizeof i);
    out->struct_size = size;
    return ZERO_OK;
}

/* ------------------------------------------------------------------------ */

static zero_status need_engine(const zero_engine *e) { return e ? ZERO_OK : ZERO_ERR_INVALID_ARGUMENT; }

zero_status zero_register_param(zero_engine *e, const zero_param_desc *desc, zero_param **out) {
    if (need_engine(e)) return ZERO_ERR_INVALID_ARGUMENT;
    if (!desc || !out) return zero__error(e, ZERO_ERR_INVALID_ARGUMENT, "zero_register_param: NULL argument");
    *out = NULL;
    if (e->params_frozen)
        return zero__error(e, ZERO_ERR_STATE, "zero_register_param(%s) after zero_params_done",
                           desc->name ? desc->name : "?");
    zero_param *p = NULL;
    zero_status s = zero__param_register(e, desc, &p);
    if (s != ZERO_OK) return s;
    if (e->plugin.table && e->plugin.table->register_param) { /* "auto": at zero_params_done */
        s = e->plugin.table->register_param(e->pstate, &p->info);
        if (s != ZERO_OK) {
            /* The plugin vetoed it: forget the registration entirely. */
            if (!e->last_error[0]) zero__error(e, s, "plugin refused param '%s'", p->name);
            zero__param_unregister_last(e);
            return s;
        }
    }
    *out = p;
    return ZERO_OK;
}

zero_status zero_set_group(zero_engine *e, const zero_group_desc *d) {
    if (need_engine(e)) return ZERO_ERR_INVALID_ARGUMENT;
    if (!d || d->struct_size < sizeof(uint32_t) + sizeof(int32_t))
        return zero__error(e, ZERO_ERR_INVALID_ARGUMENT, "zero_set_group: bad descriptor");
    if (e->params_frozen) return zero__error(e, ZERO_ERR_STATE, "zero_set_group after zero_params_done");
    zero_group_desc g = ZERO_GROUP_DESC_INIT;
    char why[512];
    if (!zero__struct_in(&g, d, d->struct_size, sizeof g, "zero_group_desc", why, sizeof why))
        return zero__error(e, ZERO_ERR_INVALID_ARGUMENT, "zero_set_group: %s", why);
    /* (1.3) expert groups: a color >= 0, or ZERO_GROUP_DENSE */
    if (g.expert_color < ZERO_GROUP_DENSE || g.reserved0 != 0)
        return zero__error(e, ZERO_ERR_INVALID_ARGUMENT,
                           "zero_set_group(%d): expert_color %d (expected ZERO_GROUP_DENSE or a color >= 0) or "
                           "reserved0 %d != 0",
                           (int)g.group, (int)g.expert_color, (int)g.reserved0);
    for (uint32_t i = 0; i < e->ngroups_hp; i++)
        if (e->groups[i].group_id == g.group) {
            e->groups[i].lr_scale = g.lr_scale;
            e->groups[i].weight_decay = g.weight_decay;
            e->groups[i].expert_color = g.expert_color;
            return ZERO_OK;
        }
    zero__group_hp *ng = realloc(e->groups, (e->ngroups_hp + 1) * sizeof *ng);
    if (!ng) return zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "out of memory");
    e->groups = ng;
    e->groups[e->ngroups_hp++] = (zero__group_hp){g.group, g.lr_scale, g.weight_decay, g.expert_color};
    return ZERO_OK;
}

/* "stage": "auto": choose from the memory plans of the registered params
 * (collective: the budget is agreed), bind the plugin, and show it the
 * registrations it missed.  A veto (register_param) fails params_done. */
static zero_status pick_plugin(zero_engine *e) {
    char name[64];
    zero_status s = zero__auto_pick(e, name, sizeof name);
    if (s != ZERO_OK) return s;
    if ((s = bind_plugin(e, name)) != ZERO_OK) return s;
    for (uint32_t i = 0; i < e->nparams && e->plugin.table->register_param; i++) {
        zero_param *p = e->params[i];
        if ((s = e->plugin.table->register_param(e->pstate, &p->info)) != ZERO_OK) {
            if (!e->last_error[0]) zero__error(e, s, "plugin '%s' refused param '%s'", name, p->name);
            return s;
        }
    }
    return ZERO_OK;
}

static zero_status device_order(zero_engine *e, int after, void *stream);

/* (1.3) Expert groups need a plugin that keeps one bucket set per
 * partition communicator (ZERO_PLUGIN_CAP_EXPERT_GROUPS).  The verdict is
 * the same on every rank: the group table was agreed, the plugin is the
 * config's.  Also reads max_group_size (the step's tile cap). */
static zero_status expert_support(zero_engine *e) {
    int64_t m = 0;
    if (zero__config_int(e->cfg, "moe.max_group_size", &m) == 1 && m > 0) e->max_group_size = (uint64_t)m;
    if (zero__config_int(e->cfg, "zero_optimization.max_group_size", &m) == 1 && m > 0) e->max_group_size = (uint64_t)m;
    const zero__group_hp *expert = NULL;
    for (uint32_t i = 0; i < e->nparams && !expert; i++) {
        const zero__group_hp *g = zero__group_hp_of(e, e->params[i]->info.group);
        if (g && g->expert_color >= 0) expert = g;
    }
    if (!expert) return ZERO_OK;
    /* (1.13) with a pipeline each stage's expert groups split from its own
     * data-parallel group; the clipping norm sums every stage's shares (each
     * expert counted once) and a checkpoint records the groups per stage */
    const zero_plugin_table *t = e->plugin.table;
    if (t->caps & ZERO_PLUGIN_CAP_EXPERT_GROUPS) return ZERO_OK;
    const char *why = (t->caps & ZERO_PLUGIN_CAP_PARTITIONS_PARAMS)
                          ? "it partitions parameters but does not gather an expert group over its own "
                            "expert-data-parallel group"
                      : (t->caps & ZERO_PLUGIN_CAP_PIPELINE)
                          ? "it reduces over one data-parallel group only"
                          : "it does not declare ZERO_PLUGIN_CAP_EXPERT_GROUPS (ABI 1.3)";
    return zero__error(e, ZERO_ERR_UNSUPPORTED,
                       "zero_params_done: param group %d is an expert group (zero_group_desc.expert_color %d) but "
                       "plugin '%s' does not support expert groups: %s; use stage0, stage1, stage2, stage3 or offload",
                       (int)expert->group_id, (int)expert->expert_color, t->name ? t->name : "?", why);
}

/* The plugin contract (abi/zero_plugin.h), checked once after params_done:
 * a plugin keeps a persistent full tensor of every param (info.data) unless
 * it partitions parameters AND gathers them (stage 3: gather_impl checks
 * what its gather returns instead).  A NULL here would otherwise reach the
 * host through zero_gather or zero_param_storage. */
static zero_status check_data_set(zero_engine *e) {
    const zero_plugin_table *t = e->plugin.table;
    if ((t->caps & ZERO_PLUGIN_CAP_PARTITIONS_PARAMS) && t->gather) return ZERO_OK;
    for (uint32_t i = 0; i < e->nparams; i++)
        if (!e->params[i]->info.data)
            return zero__error(e, ZERO_ERR_PLUGIN_SYMBOL,
                               "zero_params_done: plugin '%s' broke its contract: its params_done returned OK but "
                               "left param '%s' without storage (zero_param_info.data is NULL; a plugin %s must set "
                               "it for every param)",
                               t->name ? t->name : "?", e->params[i]->name,
                               t->gather ? "that does not declare ZERO_PLUGIN_CAP_PARTITIONS_PARAMS"
                                         : "without a gather function");
    return ZERO_OK;
}

zero_status zero_params_done(zero_engine *e) {
    if (need_engine(e)) return ZERO_ERR_INVALID_ARGUMENT;
    if (e->params_frozen) return zero__error(e, ZERO_ERR_STATE, "zero_params_done called twice");
    zero_status s = zero__experts_agree(e); /* (1.3) the group table first: it decides what must agree below */
    if (s == ZERO_OK) s = zero__params_agree(e);
    if (s != ZERO_OK) return s;
    { /* "auto" sizes from the model (the registered params agree on every rank) */
        uint64_t largest = 0;
        char note[512];
        for (uint32_t i = 0; i < e->nparams; i++)
            if (e->params[i]->info.numel > largest) largest = e->params[i]->info.numel;
        zero__config_resolve_auto(e->cfg, largest, note, sizeof note);
        if (note[0]) zero__log(e, ZERO_LOG_INFO, "%s", note);
    }
    if (e->auto_pick && !e->plugin.table && (s = pick_plugin(e)) != ZERO_OK) return s;
    if ((s = expert_support(e)) != ZERO_OK) return s;
    zero__layout_input *in = calloc(e->nparams ? e->nparams : 1, sizeof *in);
    if (!in) return zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "out of memory");
    for (uint32_t i = 0; i < e->nparams; i++) in[i] = (zero__layout_input){e->params[i]->info.numel, e->params[i]->info.group};
    /* (1.3) expert groups: each param's partition communicator */
    uint32_t *pw = calloc(e->nparams ? e->nparams : 1, sizeof *pw), *pr = calloc(e->nparams ? e->nparams : 1, sizeof *pr);
    if (!pw || !pr) s = zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "out of memory");
    if (s == ZERO_OK) s = zero__experts_setup(e, pw, pr);
    /* Same verdict on every rank: the group table was agreed above and the
     * config is the job's. */
    if (s == ZERO_OK && e->group_comms && e->rc->round_robin_gradients)
        s = zero__error(e, ZERO_ERR_UNSUPPORTED,
                        "zero_optimization.round_robin_gradients with expert groups (zero_group_desc.expert_color): "
                        "not supported (expert communicators are one per param group, stripes would need one "
                        "each); set round_robin_gradients to false");
    /* round_robin_gradients: interleaved ownership, one layout group per
     * bucket-sized stripe (layout.h) */
    int rc = s != ZERO_OK       ? -1
             : e->group_comms ? zero__layout_build_parts(&e->layout, in, e->nparams, (uint32_t)e->world_size,
                                                         (uint32_t)e->rank, ENGINE_ALIGN_ELEMS, pw, pr)
                              : zero__layout_build_run(&e->layout, in, e->nparams, (uint32_t)e->world_size,
                                                       (uint32_t)e->rank, ENGINE_ALIGN_ELEMS,
                                                       e->rc->round_robin_gradients,
                                                       e->rc->reduce_bucket_size > 0 ? (uint64_t)e->rc->reduce_bucket_size : 0);
    free(in);
    free(pw);
    free(pr);
    if (s != ZERO_OK) return s;
    if (rc != 0) return zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "could not build the partition layout");
    for (uint32_t i = 0; i < e->nparams; i++) e->params[i]->info.flat_offset = e->layout.param_offset[i];
    e->params_frozen = 1;
    /* The plugin copies the host's initial values on the device's own
     * (non-blocking) stream: it must first wait for the host's stream, where
     * the host's init kernels or uploads may still be running. */
    if (e->dev && (s = device_order(e, 1, NULL)) != ZERO_OK) return s;
    /* (1.7.3) one model on every rank: rank 0's values where they differ
     * (after the ordering above: device values are read on that stream) */
    void **adopted = NULL;
    if ((s = zero__params_values_agree(e, &adopted)) != ZERO_OK) return s;
    s = e->plugin.table->params_done(e->pstate);
    /* The host's initial buffers are not referenced after this call. */
    for (uint32_t i = 0; i < e->nparams; i++) e->params[i]->info.init_data = NULL;
    zero__params_values_free(e, adopted);
    if (s != ZERO_OK && !e->last_error[0]) zero__error(e, s, "plugin params_done failed");
    if (s == ZERO_OK) s = check_data_set(e);
    if (s == ZERO_OK) s = zero__host_owned_writeback(e, "zero_params_done");
    if (s == ZERO_OK) zero__host_writes_note(e);
    if (s == ZERO_OK && e->dev && e->any_host_owned) s = device_order(e, 0, NULL);
    return s;
}

/* Stream ordering on a CUDA engine: after = 1, the device's stream waits
 * for `stream` (a gradient's producer); 0, `stream` waits for the device's
 * stream (parameters refreshed by a step or gathered).  NULL = the compute
 * stream given at create.  Event-based: the host never blocks. */
static zero_status device_order(zero_engine *e, int after, void *stream) {
    zero__device *d = e->dev;
    zero_status s = after ? d->ops->order_after(d, stream) : d->ops->order_before(d, stream);
    if (s != ZERO_OK) return zero__error(e, s, "CUDA stream ordering failed: %s", d->ops->error(d));
    return ZERO_OK;
}

static __attribute__((noinline)) zero_status gathered_order(zero_engine *e) { return device_order(e, 0, NULL); }

static zero_status check_param(zero_engine *e, const zero_param *p, const char *fn) {
    if (!zero__param_valid(e, p) || p->magic != ZERO__PARAM_MAGIC)
        return zero__error(e, ZERO_ERR_INVALID_ARGUMENT, "%s: unknown parameter handle %p", fn, (const void *)p);
    if (!e->params_frozen) return zero__error(e, ZERO_ERR_STATE, "%s(%s) before zero_params_done", fn, p->name);
    return ZERO_OK;
}

static zero_status gather_impl(zero_engine *e, zero_param *const *params, size_t n, void **ptrs) {
    if (need_engine(e)) return ZERO_ERR_INVALID_ARGUMENT;
    if ((!params || !ptrs) && n) return zero__error(e, ZERO_ERR_INVALID_ARGUMENT, "zero_gather: NULL array");
    for (size_t i = 0; i < n; i++) {
        zero_status s = check_param(e, params[i], "zero_gather");
        if (s != ZERO_OK) return s;
    }
    ZERO_TRACE_GATHER(n, n ? (double)params[0]->info.index : -1.0);
    if (e->plugin.table->gather) {
        zero_param_info **infos = calloc(n ? n : 1, sizeof *infos);
        if (!infos) return zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "out of memory");
        for (size_t i = 0; i < n; i++) infos[i] = &params[i]->info;
        zero_status s = e->plugin.table->gather(e->pstate, infos, n, ptrs);
        free(infos);
        for (size_t i = 0; s == ZERO_OK && i < n; i++) /* never hand the host a NULL as a parameter */
            if (!ptrs[i])
                s = zero__error(e, ZERO_ERR_PLUGIN_SYMBOL,
                                "zero_gather: plugin '%s' broke its contract: its gather returned OK but no "
                                "pointer for param '%s' (position %zu of %zu)",
                                e->plugin.table->name ? e->plugin.table->name : "?", params[i]->name, i, n);
        /* (1.7.4) stage 3 hands out scratch copies: a host's write into one
         * would be lost at its release (host_writes.h) */
        if (s == ZERO_OK && (e->plugin.table->caps & ZERO_PLUGIN_CAP_PARTITIONS_PARAMS))
            zero__host_writes_gathered(e, params, n, ptrs);
        for (size_t i = 0; s == ZERO_OK && i < n; i++) params[i]->holds++;
        /* the host's compute stream must see the gathered parameters (a
         * plugin that completes its gathers says so: no wait on libzero's
         * stream, whose queued reductions would hold the host's compute) */
        if (s != ZERO_OK || !e->dev || !n || (e->plugin.table->caps & ZERO_PLUGIN_CAP_GATHER_COMPLETE)) return s;
        return gathered_order(e);
    }
    for (size_t i = 0; i < n; i++) ptrs[i] = params[i]->info.data;
    return e->dev && n ? gathered_order(e) : ZERO_OK;
}

static zero_status release_impl(zero_engine *e, zero_param *const *params, size_t n) {
    if (need_engine(e)) return ZERO_ERR_INVALID_ARGUMENT;
    if (!params && n) return zero__error(e, ZERO_ERR_INVALID_ARGUMENT, "zero_release: NULL array");
    for (size_t i = 0; i < n; i++) {
        zero_status s = check_param(e, params[i], "zero_release");
        if (s != ZERO_OK) return s;
    }
    ZERO_TRACE_SCOPE("zero_release", "stage3", "params", n, "first_param", n ? (double)params[0]->info.index : -1.0);
    if (!e->plugin.table->release) return ZERO_OK;
    /* Stage 3 may reuse a released gather buffer for the next all-gather:
     * the kernels that read these params (queued on the compute stream) must
     * be done first.  libzero's stream waits for the compute stream here (an
     * event, no host wait); every later write into the buffer is queued on
     * libzero's stream or on a sub-communicator's NCCL stream, which waits
     * for libzero's stream before each collective (comm_nccl.c), so the
     * reuse is ordered after the readers without draining the GPU. */
    if (e->dev && n && (e->plugin.table->caps & ZERO_PLUGIN_CAP_PARTITIONS_PARAMS)) {
        zero_status s = device_order(e, 1, NULL);
        if (s != ZERO_OK) return s;
    }
    zero_param_info **infos = malloc((n ? n : 1) * sizeof *infos);
    if (!infos) return zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "out of memory");
    for (size_t i = 0; i < n; i++) infos[i] = &params[i]->info;
    zero__host_writes_released(e, params, n); /* before the buffers can be reused */
    zero_status s = e->plugin.table->release(e->pstate, infos, n);
    free(infos);
    for (size_t i = 0; s == ZERO_OK && i < n; i++)
        if (params[i]->holds) params[i]->holds--;
    return s;
}

/* (1.6) Slices of stacked params.  The arguments are checked in full
 * before anything is gathered.  A plugin without a slice gather (every
 * stage below 3, and older plugins) serves them from its gather of the
 * whole param: the host code is the same on every stage. */
static zero_status check_slices(zero_engine *e, zero_param *const *params, const uint32_t *layers, size_t n,
                                const char *fn) {
    if ((!params || !layers) && n) return zero__error(e, ZERO_ERR_INVALID_ARGUMENT, "%s: NULL array", fn);
    for (size_t i = 0; i < n; i++) {
        zero_status s = check_param(e, params[i], fn);
        if (s != ZERO_OK) return s;
        if (!params[i]->stack_layers)
            return zero__error(e, ZERO_ERR_INVALID_ARGUMENT,
                               "%s: param '%s' was not registered with zero_register_stacked", fn, params[i]->name);
        if (layers[i] >= params[i]->stack_layers)
            return zero__error(e, ZERO_ERR_INVALID_ARGUMENT, "%s(%s): layer %u out of range (the stack has %u)",
                               fn, params[i]->name, layers[i], params[i]->stack_layers);
    }
    return ZERO_OK;
}

static zero_status gather_slices_impl(zero_engine *e, zero_param *const *params, const uint32_t *layers, size_t n,
                                      void **ptrs) {
    if (need_engine(e)) return ZERO_ERR_INVALID_ARGUMENT;
    if (!ptrs && n) return zero__error(e, ZERO_ERR_INVALID_ARGUMENT, "zero_gather_slices: NULL array");
    zero_status s = check_slices(e, params, layers, n, "zero_gather_slices");
    if (s != ZERO_OK || !n) return s;
    const zero_plugin_table *t = e->plugin.table;
    if (t->gather_slices) {
        zero_slice_ref *refs = calloc(n, sizeof *refs);
        if (!refs) return zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "out of memory");
        for (size_t i = 0; i < n; i++) {
            refs[i].param = &params[i]->info;
            refs[i].layer = layers[i];
            refs[i].layers = params[i]->stack_layers;
        }
        ZERO_TRACE_GATHER(n, (double)params[0]->info.index);
        s = t->gather_slices(e->pstate, refs, n, ptrs);
        free(refs);
        for (size_t i = 0; s == ZERO_OK && i < n; i++)
            if (!ptrs[i])
                s = zero__error(e, ZERO_ERR_PLUGIN_SYMBOL,
                                "zero_gather_slices: plugin '%s' broke its contract: its gather_slices returned OK "
                                "but no pointer for slice %u of '%s'",
                                t->name ? t->name : "?", layers[i], params[i]->name);
        /* (1.7.7) as zero_gather: a write into a stage-3 slice is lost at its release */
        if (s == ZERO_OK && (t->caps & ZERO_PLUGIN_CAP_PARTITIONS_PARAMS))
            zero__host_writes_slices_gathered(e, params, layers, n, ptrs);
        for (size_t i = 0; s == ZERO_OK && i < n; i++) params[i]->holds++;
        if (s != ZERO_OK || !e->dev || (t->caps & ZERO_PLUGIN_CAP_GATHER_COMPLETE)) return s;
        return gathered_order(e);
    }
    s = gather_impl(e, params, n, ptrs);
    for (size_t i = 0; s == ZERO_OK && i < n; i++) {
        const size_t es = params[i]->info.dtype == ZERO_DTYPE_F32 ? 4 : 2;
        ptrs[i] = (char *)ptrs[i] + (size_t)layers[i] * params[i]->slice_numel * es;
    }
    return s;
}

static zero_status release_slices_impl(zero_engine *e, zero_param *const *params, const uint32_t *layers,
                                       size_t n) {
    if (need_engine(e)) return ZERO_ERR_INVALID_ARGUMENT;
    zero_status s = check_slices(e, params, layers, n, "zero_release_slices");
    if (s != ZERO_OK || !n) return s;
    const zero_plugin_table *t = e->plugin.table;
    if (!t->release_slices) return release_impl(e, params, n);
    ZERO_TRACE_SCOPE("zero_release_slices", "stage3", "params", n, "first_param", (double)params[0]->info.index);
    if (e->dev && (t->caps & ZERO_PLUGIN_CAP_PARTITIONS_PARAMS)) { /* as release_impl: readers before reuse */
        s = device_order(e, 1, NULL);
        if (s != ZERO_OK) return s;
    }
    zero_slice_ref *refs = calloc(n, sizeof *refs);
    if (!refs) return zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "out of memory");
    for (size_t i = 0; i < n; i++) {
        refs[i].param = &params[i]->info;
        refs[i].layer = layers[i];
        refs[i].layers = params[i]->stack_layers;
    }
    zero__host_writes_slices_released(e, params, layers, n); /* before the buffers can be reused */
    s = t->release_slices(e->pstate, refs, n);
    free(refs);
    for (size_t i = 0; s == ZERO_OK && i < n; i++)
        if (params[i]->holds) params[i]->holds--;
    return s;
}

zero_status zero_set_phase(zero_engine *e, const char *phase) {
    if (need_engine(e)) return ZERO_ERR_INVALID_ARGUMENT;
    if (!phase || !phase[0] || strlen(phase) > 63)
        return zero__error(e, ZERO_ERR_INVALID_ARGUMENT, "zero_set_phase: the phase name must be 1..63 characters");
    const zero_plugin_table *t = e->plugin.table;
    if (!t) return ZERO_OK; /* "stage": "auto" before zero_params_done: no plugin yet, no gathers to order */
    /* A 1.0 plugin's table ends at destroy: never read past its size. */
    if (!t->set_phase)
        return ZERO_OK;
    return t->set_phase(e->pstate, phase);
}

zero_status zero_param_storage(zero_engine *e, zero_param *p, void **data) {
    if (need_engine(e)) return ZERO_ERR_INVALID_ARGUMENT;
    zero_status s = check_param(e, p, "zero_param_storage");
    if (s != ZERO_OK) return s;
    if (!data) return zero__error(e, ZERO_ERR_INVALID_ARGUMENT, "zero_param_storage: data is NULL");
    *data = NULL;
    if ((e->plugin.table->caps & ZERO_PLUGIN_CAP_PARTITIONS_PARAMS) || !p->info.data)
        return zero__error(e, ZERO_ERR_UNSUPPORTED,
                           "zero_param_storage(%s): plugin '%s' keeps no persistent full copy of the parameter "
                           "(it partitions parameters): use zero_gather / zero_release",
                           p->name, e->plugin.table->name ? e->plugin.table->name : "?");
    *data = p->info.data;
    return ZERO_OK;
}

static zero_status grad_buffer_impl(zero_engine *e, zero_param *p, void **buf) {
    if (need_engine(e)) return ZERO_ERR_INVALID_ARGUMENT;
    zero_status s = check_param(e, p, "zero_grad_buffer");
    if (s != ZERO_OK) return s;
    if (!buf) return zero__error(e, ZERO_ERR_INVALID_ARGUMENT, "zero_grad_buffer: buf is NULL");
    if (p->info.host_grad) {
        *buf = p->info.host_grad;
        return ZERO_OK;
    }
    s = e->plugin.table->grad_buffer(e->pstate, &p->info, buf);
    /* (issue 35) A device allocation's zero-fill is queued on libzero's
     * stream, not waited for; the host may write this buffer from any
     * stream, so a pending fill (a buffer fresh from an allocation: the
     * first micro-step, a grown bucket slot, contiguous_gradients false's
     * temporaries) is waited for here, once for all fills queued so far.
     * Nothing pending: no wait. */
    if (s == ZERO_OK && e->dev && (s = zero__dev_fill_wait(e->dev)) != ZERO_OK)
        return zero__error(e, s, "zero_grad_buffer(%s): waiting for the zero-fill of new device memory: %s", p->name,
                           zero__dev_error(e->dev));
    return s;
}

static zero_status on_grad_ready_impl(zero_engine *e, zero_param *p, void *stream) {
    if (need_engine(e)) return ZERO_ERR_INVALID_ARGUMENT;
    zero_status s = check_param(e, p, "zero_on_grad_ready");
    if (s != ZERO_OK) return s;
    ZERO_TRACE_SCOPE("grad_ready", "hook", "param", p->info.index, NULL, 0);
    if (atomic_exchange(&p->ready, 1) != 0)
        return zero__error(e, ZERO_ERR_DUPLICATE,
                           "zero_on_grad_ready(%s) called twice in one micro-step (micro-step %u of step %llu)",
                           p->name, e->micro_step, (unsigned long long)e->global_step + 1);
    /* The reduction of p's bucket is queued on the device's stream: order it
     * after the kernel that produced the gradient, without blocking. */
    if (e->dev && (s = device_order(e, 1, stream)) != ZERO_OK) return s;
    return e->plugin.table->on_grad_ready(e->pstate, &p->info, stream);
}

/* A new micro-step: no gradient (or slice) reported yet. */
static void reset_ready(zero_engine *e) {
    for (uint32_t i = 0; i < e->nparams; i++) {
        struct zero_param *p = e->params[i];
        atomic_store(&p->ready, 0);
        if (!p->stack_layers) continue;
        atomic_store(&p->slices_ready, 0);
        for (uint32_t l = 0; l < p->stack_layers; l++) atomic_store(&p->slice_seen[l], 0);
    }
}

/* ------------------------------------------------------------------------ */
/* (1.1) Stacked tensors: one param, its gradient reported slice by slice.  */

zero_status zero_register_stacked(zero_engine *e, const zero_param_desc *desc, uint32_t layers, zero_param **out) {
    if (need_engine(e)) return ZERO_ERR_INVALID_ARGUMENT;
    if (!desc || !out) return zero__error(e, ZERO_ERR_INVALID_ARGUMENT, "zero_register_stacked: NULL argument");
    *out = NULL;
    if (layers == 0 || desc->struct_size < offsetof(zero_param_desc, group) || desc->numel % layers != 0)
        return zero__error(e, ZERO_ERR_INVALID_ARGUMENT,
                           "zero_register_stacked(%s): numel %llu is not a positive multiple of layers %u",
                           desc->name ? desc->name : "?", (unsigned long long)desc->numel, layers);
    atomic_uchar *seen = calloc(layers, sizeof *seen);
    if (!seen) return zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "out of memory");
    zero_param *p = NULL;
    zero_status s = zero_register_param(e, desc, &p);
    if (s != ZERO_OK) {
        free(seen);
        return s;
    }
    for (uint32_t l = 0; l < layers; l++) atomic_init(&seen[l], 0);
    atomic_init(&p->slices_ready, 0);
    p->slice_seen = seen;
    p->slice_numel = desc->numel / layers;
    p->stack_layers = layers;
    p->info.stack_layers = layers;
    *out = p;
    return ZERO_OK;
}

static zero_status check_slice(zero_engine *e, zero_param *p, uint32_t layer, const char *fn) {
    zero_status s = check_param(e, p, fn);
    if (s != ZERO_OK) return s;
    if (!p->stack_layers)
        return zero__error(e, ZERO_ERR_INVALID_ARGUMENT, "%s(%s): not registered with zero_register_stacked", fn,
                           p->name);
    if (layer >= p->stack_layers)
        return zero__error(e, ZERO_ERR_INVALID_ARGUMENT, "%s(%s): layer %u >= layers %u", fn, p->name, layer,
                           p->stack_layers);
    return ZERO_OK;
}

static zero_status slice_grad_buffer_impl(zero_engine *e, zero_param *p, uint32_t layer, void **buf) {
    if (need_engine(e)) return ZERO_ERR_INVALID_ARGUMENT;
    zero_status s = check_slice(e, p, layer, "zero_slice_grad_buffer");
    if (s != ZERO_OK) return s;
    void *whole = NULL;
    if ((s = zero_grad_buffer(e, p, &whole)) != ZERO_OK) return s;
    size_t es = p->info.dtype == ZERO_DTYPE_F32 ? 4 : 2;
    *buf = (char *)whole + (size_t)layer * (size_t)p->slice_numel * es;
    return ZERO_OK;
}

static zero_status on_slice_ready_impl(zero_engine *e, zero_param *p, uint32_t layer, void *stream) {
    if (need_engine(e)) return ZERO_ERR_INVALID_ARGUMENT;
    zero_status s = check_slice(e, p, layer, "zero_on_slice_ready");
    if (s != ZERO_OK) return s;
    if (atomic_load(&p->ready) || atomic_exchange(&p->slice_seen[layer], 1) != 0)
        return zero__error(e, ZERO_ERR_DUPLICATE,
                           "zero_on_slice_ready(%s, layer %u): already reported in this micro-step (micro-step %u of "
                           "step %llu)", p->name, layer, e->micro_step, (unsigned long long)e->global_step + 1);
    if (atomic_fetch_add(&p->slices_ready, 1) + 1 < p->stack_layers) return ZERO_OK;
    return zero_on_grad_ready(e, p, stream); /* the last slice: the whole param is final */
}

/* Deliver what is missing; at the boundary, agree on the window
 * (grad_window.c).  A failure ends the micro-step on this rank. */
static zero_status settle_missing(zero_engine *e, int hp_refused, int host_written, int args_refused, int *verdict,
                                  char *why, size_t len) {
    zero_status s = zero__grads_settle(e, hp_refused, host_written, args_refused, verdict, why, len);
    if (s != ZERO_OK) {
        e->micro_step = 0;
        reset_ready(e);
    }
    return s;
}

/* The context of the plugin's step for this micro-step. */
/* The host's compute stream zero_step_args names (NULL: none, or a struct
 * older than the field). */
static void *args_stream(const zero_step_args *args) {
    return args && args->struct_size >= offsetof(zero_step_args, stream) + sizeof(void *) ? args->stream : NULL;
}

static void step_ctx(const zero_engine *e, const zero_step_args *args, zero_step_ctx *ctx) {
    const uint32_t gas = (uint32_t)e->rc->grad_accum_steps;
    memset(ctx, 0, sizeof *ctx);
    ctx->struct_size = sizeof *ctx;
    ctx->boundary = (e->micro_step + 1 >= gas);
    ctx->micro_step = e->micro_step;
    ctx->grad_accum = gas;
    ctx->global_step = e->global_step;
    ctx->loss_scale = e->scaler.scale;
    ctx->grad_clip = e->rc->gradient_clipping;
    /* fp32 gradients (an fp32 model, or fp32 accumulation of a 16-bit one)
     * hold the SUM over the data-parallel ranks and the window's
     * micro-steps; 16-bit ones already hold the mean over the ranks (the
     * bucket engine scales by 1/world around its fp32 reduction, see
     * buckets.c), so only the micro-steps remain to divide by. */
    ctx->grad_divisor = (double)gas * (e->rc->grad_accum_dtype == ZERO_DTYPE_F32 ? (double)e->world_size : 1.0);
    ctx->stream = args_stream(args);
}

/* Drop the accumulation window without moving a weight: the plugin's step
 * at a boundary (every service sees micro_step = gas - 1, so the bucket
 * sets reduce what they hold, in bucket order, on every rank) with the
 * grad_norm service reading it as an overflow: each plugin then clears its
 * gradients as after an fp16 overflow.  Neither the loss scaler nor the
 * step counters move.  Every rank calls this (the verdict was agreed). */
static zero_status drop_window(zero_engine *e, const zero_step_args *args) {
    e->micro_step = (uint32_t)e->rc->grad_accum_steps - 1;
    zero_step_ctx ctx;
    step_ctx(e, args, &ctx);
    zero_step_report rep = {sizeof rep, 0, -1.0};
    zero_status s = e->dev ? device_order(e, 1, ctx.stream) : ZERO_OK;
    zero__ps_step_begin(e, 1);
    if (s == ZERO_OK) s = e->plugin.table->step(e->pstate, &ctx, &rep);
    const int norm_ran = zero__ps_step_end();
    e->micro_step = 0;
    reset_ready(e);
    if (s == ZERO_OK && e->dev) s = device_order(e, 0, ctx.stream);
    if (s != ZERO_OK) return s;
    if (!norm_ran || !rep.overflow)
        return zero__error(e, ZERO_ERR_STATE, "zero_step: plugin '%s' stepped without the core's grad_norm service, "
                           "so the refused micro-step's window could not be dropped: its weights may have moved",
                           e->plugin.table->name ? e->plugin.table->name : "?");
    return ZERO_OK;
}

/* A micro-step the ranks refused (MG_REFUSE: ZERO_ERR_STATE) or skip
 * (MG_SKIP: ZERO_OK, taken = 0): the window is dropped on every rank. */
static zero_status refuse_micro_step(zero_engine *e, const zero_step_args *args, zero_step_result *result,
                                     int verdict, const char *why) {
    zero_status s = drop_window(e, args);
    if (s != ZERO_OK) return zero__error_context(e, s, "%s", why);
    if (verdict == MG_REFUSE) return zero__error(e, ZERO_ERR_STATE, "%s", why);
    zero__log(e, ZERO_LOG_WARN, "%s", why);
    if (result) {
        zero_step_result r = ZERO_STEP_RESULT_INIT;
        r.boundary = 1; /* the window ended: dropped */
        r.taken = 0;
        r.overflow = 0;
        r.global_step = e->global_step;
        r.grad_norm = -1.0;
        r.loss_scale = e->scaler.scale;
        r.lr = e->lr;
        size_t n = result->struct_size < sizeof r ? result->struct_size : sizeof r;
        r.struct_size = result->struct_size;
        memcpy(result, &r, n);
    }
    return ZERO_OK;
}

static zero_status step_impl(zero_engine *e, const zero_step_args *args, zero_step_result *result, int *taken_out) {
    if (need_engine(e)) return ZERO_ERR_INVALID_ARGUMENT;
    if (!e->params_frozen) return zero__error(e, ZERO_ERR_STATE, "zero_step before zero_params_done");
    ZERO_TRACE_SCOPE("zero_step", "step", "step", e->global_step + 1, "micro_step", e->micro_step);
    if (result && result->struct_size < sizeof(uint32_t) * 4)
        return zero__error(e, ZERO_ERR_INVALID_ARGUMENT, "zero_step: result.struct_size too small");
    int verdict = MG_PROCEED;
    char why[1536] = "";
    /* the arguments are read where used (step_ctx) and checked here: at a
     * boundary the verdict is agreed with the window (1.8), so that every
     * rank returns at once instead of waiting in the step's collectives
     * for the one that refused; between boundaries it returns alone (no
     * collective runs there to carry it) */
    zero_status av = ZERO_OK;
    if (args) {
        zero_step_args a = ZERO_STEP_ARGS_INIT;
        if (!zero__struct_in(&a, args, args->struct_size, sizeof a, "zero_step_args", why, sizeof why))
            av = zero__error(e, ZERO_ERR_INVALID_ARGUMENT, "zero_step: %s", why);
        else if (a.reserved0 != 0)
            av = zero__error(e, ZERO_ERR_INVALID_ARGUMENT,
                             "zero_step: zero_step_args.reserved0 is %u, must be 0 (ZERO_STEP_ARGS_INIT)",
                             (unsigned)a.reserved0);
        why[0] = 0;
    }
    /* timed with the reduction (zero_step_timing.reduce_seconds): part of
     * settling the micro-step's gradients, and a collective that waits for
     * the slowest rank as a flush would */
    /* a non-finite or out-of-range lr / decay / beta / eps is refused
     * before the plugin's step moves any weight; the refusal is agreed with
     * the missing gradients (one all-reduce), so that no rank enters the
     * step's collectives while another returned */
    const int boundary = e->micro_step + 1 >= (uint32_t)e->rc->grad_accum_steps;
    if (av != ZERO_OK && !boundary) return av;
    const zero_status hp = boundary && av == ZERO_OK ? zero__hp_check_step(e, e->global_step + 1) : ZERO_OK;
    /* (1.7.4) a parameter the host wrote itself: refused the same way
     * (host_writes.h).  (1.13) On a device the check reads the params on
     * libzero's stream, which must come after the host's writes: the
     * step's ordering after the host's stream (below) moves before it. */
    int ordered = 0;
    if (boundary && av == ZERO_OK && hp == ZERO_OK && e->dev) {
        const zero_status so = device_order(e, 1, args_stream(args));
        if (so != ZERO_OK) return so;
        ordered = 1;
    }
    const zero_status hw = boundary && av == ZERO_OK && hp == ZERO_OK ? zero__host_writes_check(e) : ZERO_OK;
    zero__span sp = zero__phase_begin(e);
    zero_status s = settle_missing(e, hp != ZERO_OK, hw != ZERO_OK, av != ZERO_OK, &verdict, why, sizeof why);
    zero__phase_end(e, sp, ZERO__PH_REDUCE);
    if (s != ZERO_OK) return av != ZERO_OK ? av : s;
    if (verdict == MG_HOLD) /* this rank's own message, else what another rank found (grad_window.c) */
        return av != ZERO_OK ? av
               : hp != ZERO_OK ? hp
               : hw != ZERO_OK ? hw
                               : zero__error(e, ZERO_ERR_STATE, "%s", why);
    if (verdict != MG_PROCEED) return refuse_micro_step(e, args, result, verdict, why);

    zero_step_ctx ctx;
    step_ctx(e, args, &ctx);
    zero_step_report rep = {sizeof rep, 0, -1.0};
    zero__hp hp0; /* group 0's hyper-parameters for this step (zero_step_result.lr) */
    zero__hp_resolve(e, 0, e->global_step + 1, &hp0);
    double lr_used = hp0.lr;

    /* The step writes parameters and reads gradients on the device's stream:
     * it must come after everything the host queued on its stream so far
     * (gradient kernels after the last zero_on_grad_ready, reads of the old
     * weights), or the optimizer races them. */
    if (e->dev && !ordered && (s = device_order(e, 1, ctx.stream)) != ZERO_OK) return s;
    zero__ps_step_begin(e, 0);
    s = e->plugin.table->step(e->pstate, &ctx, &rep);
    zero__ps_step_end();
    reset_ready(e);
    /* (1.1) host-owned params get the new values before zero_step returns */
    if (s == ZERO_OK && ctx.boundary && !rep.overflow) s = zero__host_owned_writeback(e, "zero_step");
    if (s == ZERO_OK && ctx.boundary) zero__host_writes_note(e);
    /* the next forward (on the host's stream) must see the refreshed params */
    if (s == ZERO_OK && e->dev) s = device_order(e, 0, ctx.stream);
    if (s != ZERO_OK) {
        if (!e->last_error[0]) zero__error(e, s, "plugin step failed");
        return s;
    }

    int taken = 0, at_min = 0;
    if (ctx.boundary) {
        e->micro_step = 0;
        at_min = zero__scaler_update(&e->scaler, rep.overflow);
        if (e->scaler.dynamic || rep.overflow) ZERO_TRACE_INSTANT("loss_scale", "fp16", "scale", e->scaler.scale, "overflow", rep.overflow);
        if (rep.overflow) {
            e->skipped_steps++;
            /* (issue 31) which rank(s) found the Inf/NaN, the same text on
             * every rank; a warning where no loss scaler absorbs it, and the
             * engine's last-error text (read by zero.torch) */
            const char *where = zero__ps_nonfinite_text();
            zero__log(e, e->scaler.dynamic ? ZERO_LOG_INFO : ZERO_LOG_WARN, "overflow: step skipped%s%s%s, loss scale "
                      "now %g", where[0] ? " (" : "", where, where[0] ? ")" : "", e->scaler.scale);
            if (where[0]) zero__error(e, ZERO_OK, "step %llu skipped: %s", (unsigned long long)e->global_step + 1, where);
        } else {
            e->global_step++;
            taken = 1;
            e->lr = zero__schedule_lr(e, e->global_step + 1);
        }
    } else {
        e->micro_step++;
    }
    *taken_out = taken;
    if (result) {
        zero_step_result r = ZERO_STEP_RESULT_INIT;
        r.boundary = ctx.boundary;
        r.taken = taken;
        r.overflow = ctx.boundary ? rep.overflow : 0;
        r.global_step = e->global_step;
        r.grad_norm = ctx.boundary ? rep.grad_norm : -1.0;
        r.loss_scale = e->scaler.scale;
        r.lr = lr_used;
        size_t n = result->struct_size < sizeof r ? result->struct_size : sizeof r;
        r.struct_size = result->struct_size;
        memcpy(result, &r, n);
    }
    if (at_min)
        return zero__error(e, ZERO_ERR_LOSS_SCALE,
                           "fp16 overflow with the loss scale already at min_loss_scale (%g): training diverged%s%s%s",
                           e->rc->fp16_min_loss_scale, zero__ps_nonfinite_text()[0] ? " (" : "",
                           zero__ps_nonfinite_text(), zero__ps_nonfinite_text()[0] ? ")" : "");
    return ZERO_OK;
}

/* ------------------------------------------------------------------------ */
/* (1.3) The host-facing calls of forward and backward, timed for
 * zero_step_timing (hook_seconds, fetch_seconds).  A call nested in another
 * (zero_on_slice_ready's last slice calls zero_on_grad_ready) counts once. */

zero_status zero_gather(zero_engine *e, zero_param *const *params, size_t n, void **ptrs) {
    zero__span sp = zero__outside_begin();
    zero_status s = gather_impl(e, params, n, ptrs);
    zero__outside_end(e, sp, ZERO__OUT_FETCH);
    return s;
}

zero_status zero_gather_slices(zero_engine *e, zero_param *const *params, const uint32_t *layers, size_t n,
                               void **ptrs) {
    zero__span sp = zero__outside_begin();
    zero_status s = gather_slices_impl(e, params, layers, n, ptrs);
    zero__outside_end(e, sp, ZERO__OUT_FETCH);
    return s;
}

zero_status zero_release_slices(zero_engine *e, zero_param *const *params, const uint32_t *layers, size_t n) {
    zero__span sp = zero__outside_begin();
    zero_status s = release_slices_impl(e, params, layers, n);
    zero__outside_end(e, sp, ZERO__OUT_FETCH);
    return s;
}

zero_status zero_release(zero_engine *e, zero_param *const *params, size_t n) {
    zero__span sp = zero__outside_begin();
    zero_status s = release_impl(e, params, n);
    zero__outside_end(e, sp, ZERO__OUT_FETCH);
    return s;
}

zero_status zero_grad_buffer(zero_engine *e, zero_param *p, void **buf) {
    zero__span sp = zero__outside_begin();
    zero_status s = grad_buffer_impl(e, p, buf);
    zero__outside_end(e, sp, ZERO__OUT_HOOK);
    return s;
}

zero_status zero_on_grad_ready(zero_engine *e, zero_param *p, void *stream) {
    zero__span sp = zero__outside_begin();
    zero_status s = on_grad_ready_impl(e, p, stream);
    zero__outside_end(e, sp, ZERO__OUT_HOOK);
    return s;
}

zero_status zero_slice_grad_buffer(zero_engine *e, zero_param *p, uint32_t layer, void **buf) {
    zero__span sp = zero__outside_begin();
    zero_status s = slice_grad_buffer_impl(e, p, layer, buf);
    zero__outside_end(e, sp, ZERO__OUT_HOOK);
    return s;
}

zero_status zero_on_slice_ready(zero_engine *e, zero_param *p, uint32_t layer, void *stream) {
    zero__span sp = zero__outside_begin();
    zero_status s = on_slice_ready_impl(e, p, layer, stream);
    zero__outside_end(e, sp, ZERO__OUT_HOOK);
    return s;
}

zero_status zero_step(zero_engine *e, const zero_step_args *args, zero_step_result *result) {
    int taken = 0;
    if (!e) return step_impl(e, args, result, &taken);
    zero__params_write_release(e); /* (1.10) a burst of writes is over */
    zero__timing_step_begin(e);
    zero_status s = step_impl(e, args, result, &taken);
    zero__timing_step_end(e);
    zero__timing_log(e, taken);
    return s;
}

zero_status zero_step_timing_get(const zero_engine *e, int32_t which, zero_step_timing *out) {
    if (!e || !out || out->struct_size < sizeof(uint32_t) ||
        (which != ZERO_TIMING_LAST && which != ZERO_TIMING_TOTAL))
        return ZERO_ERR_INVALID_ARGUMENT;
    zero_step_timing t = which == ZERO_TIMING_LAST ? e->timing.last : e->timing.total;
    if (t.struct_size == 0) { /* before the first zero_step */
        zero_step_timing z = ZERO_STEP_TIMING_INIT;
        t = z;
    }
    uint32_t size = out->struct_size;
    memcpy(out, &t, size < sizeof t ? size : sizeof t);
    out->struct_size = size;
    return ZERO_OK;
}

/* ------------------------------------------------------------------------ */
/* Checkpoints: core/ckpt/ (manifest, checksums, atomic publication,
 * resharding); docs/checkpoints.md. */

static zero_status ckpt_entry(zero_engine *e, const char *dir, const char *who, int need_load) {
    if (need_engine(e)) return ZERO_ERR_INVALID_ARGUMENT;
    if (!dir || !dir[0]) return zero__error(e, ZERO_ERR_INVALID_ARGUMENT, "%s: dir is NULL or empty", who);
    if (!e->params_frozen) return zero__error(e, ZERO_ERR_STATE, "%s before zero_params_done", who);
    if (need_load ? !e->plugin.table->load : !e->plugin.table->save)
        return zero__error(e, ZERO_ERR_UNSUPPORTED, "plugin '%s' does not implement checkpoints", e->plugin.table->name);
    return ZERO_OK;
}

zero_status zero_save(zero_engine *e, const char *dir) {
    zero_status s = ckpt_entry(e, dir, "zero_save", 0);
    ZERO_TRACE_SCOPE("zero_save", "ckpt", NULL, 0, NULL, 0);
    const zero__ck_save_args a = {NULL, 0, ZERO_OK, NULL, 0};
    return s != ZERO_OK ? s : zero__ckpt_save(e, dir, &a);
}

/* A checkpoint call's options struct (o may be NULL: the defaults already
 * in `opt`) read into opt, `size` bytes, by its leading struct_size; the
 * error that refuses it (a missing struct_size, a newer header's field set)
 * is the engine's last error.  `who` names the call. */
static zero_status options_in(zero_engine *e, void *opt, size_t size, const void *o, const char *type,
                              const char *who) {
    if (!o) return ZERO_OK;
    uint32_t have;
    memcpy(&have, o, sizeof have); /* every options struct starts with uint32_t struct_size */
    char why[512];
    if (have < sizeof(uint32_t))
        return zero__error(e, ZERO_ERR_INVALID_ARGUMENT, "%s: options without struct_size", who);
    if (!zero__struct_in(opt, o, have, size, type, why, sizeof why))
        return zero__error(e, ZERO_ERR_INVALID_ARGUMENT, "%s: %s", who, why);
    return ZERO_OK;
}

/* The options are judged on each rank, and the verdict goes into the
 * save's first agreement (1.8): a rank whose options are refused (a newer
 * header's field, a NULL client state) makes every rank return an error
 * naming it at once, instead of leaving the others waiting in the save's
 * collectives until the communication timeout. */
zero_status zero_save_ex(zero_engine *e, const char *dir, const zero_save_options *o) {
    zero_status s = ckpt_entry(e, dir, "zero_save_ex", 0);
    ZERO_TRACE_SCOPE("zero_save", "ckpt", NULL, 0, NULL, 0);
    if (s != ZERO_OK) return s;
    zero_save_options opt = ZERO_SAVE_OPTIONS_INIT;
    zero_status local = options_in(e, &opt, sizeof opt, o, "zero_save_options", "zero_save_ex");
    if (local == ZERO_OK && opt.client_state_bytes && !opt.client_state)
        local = zero__error(e, ZERO_ERR_INVALID_ARGUMENT,
                            "zero_save_ex: client_state is NULL with client_state_bytes %llu; nothing written",
                            (unsigned long long)opt.client_state_bytes);
    if (local != ZERO_OK) opt = (zero_save_options)ZERO_SAVE_OPTIONS_INIT; /* nothing of a refused struct is used */
    const zero__ck_save_args a = {opt.tag, opt.keep_last, local, opt.client_state, opt.client_state_bytes};
    return zero__ckpt_save(e, dir, &a);
}

zero_status zero_client_state(const zero_engine *e, const void **data, uint64_t *bytes) {
    if (!e || !data || !bytes) return ZERO_ERR_INVALID_ARGUMENT;
    *data = e->ck_client_bytes ? e->ck_client : NULL;
    *bytes = e->ck_client_bytes;
    return ZERO_OK;
}

/* (1.7.5) zero_load first discards the accumulation window it finds: the
 * gradients of finished micro-steps, a backward cut short (some params
 * reported, bucket reductions in flight on some ranks only), a micro-step
 * a refused zero_step holds.  Before, the window's gradients outlived the
 * load: a half backward's params were refused as ZERO_ERR_DUPLICATE in the
 * next one and their partial sums trained on, and a held micro-step let a
 * zero_step without a backward train on the gradients computed before the
 * load.  Agreed (one all-reduce over the job), since dropping the window
 * runs the bucket collectives on every rank: each delivers zeros for what
 * it was not given, in order, and the plugins clear their gradients as
 * after an overflow (drop_window).  After the load, the checkpoint's
 * micro-step starts a fresh one: the host runs a backward before zero_step.
 * (1.8) The same all-reduce agrees on zero_load_ex's options first: a rank
 * that refused its own (`local`) or ranks that disagree on weights_only
 * fail the call on every rank before anything changes, window included. */
static zero_status discard_window(zero_engine *e, zero_status local, int weights_only) {
    const int me = zero__comm_rank(e->global);
    double v[4] = {(e->micro_step || zero__grads_reported(e, NULL)) ? 1.0 : 0.0, local != ZERO_OK ? me + 1.0 : 0.0,
                   weights_only, !weights_only};
    zero_status s = zero__allreduce(e->global, v, 4, ZERO_DTYPE_F64, ZERO_OP_MAX);
    if (s != ZERO_OK) return zero__error_context(e, s, "zero_load: agreeing to drop the accumulation window");
    if (local != ZERO_OK) return local;
    if (v[1] > 0)
        return zero__error(e, ZERO_ERR_INVALID_ARGUMENT,
                           "zero_load_ex: rank %.0f refused its zero_load_options (its message says why); nothing "
                           "loaded", v[1] - 1);
    if (v[2] > 0 && v[3] > 0)
        return zero__error(e, ZERO_ERR_INVALID_ARGUMENT,
                           "zero_load_ex: the ranks disagree on zero_load_options.weights_only (this rank: %d); "
                           "nothing loaded", weights_only);
    const double any = v[0];
    zero__grad_window_drop(e);
    if (any == 0) return ZERO_OK;
    zero__log(e, ZERO_LOG_INFO, "zero_load: dropping the accumulation window in progress (micro-step %u, %u param(s) "
              "reported in it on this rank)", e->micro_step, zero__grads_reported(e, NULL));
    s = zero__grads_fill_unrecorded(e);
    zero_status d = drop_window(e, NULL);
    zero__grad_window_drop(e);
    if (s == ZERO_OK) s = d;
    return s != ZERO_OK ? zero__error_context(e, s, "zero_load: dropping the accumulation window in progress") : s;
}

static zero_status load_with(zero_engine *e, const char *dir, zero_status local, int weights_only) {
    zero_status s = discard_window(e, local, weights_only);
    if (s != ZERO_OK) return s;
    const zero__ck_load_args a = {weights_only};
    s = zero__ckpt_load(e, dir, &a);
    /* libzero wrote its copies (all, or some before a failure): the
     * host-write check must not take that for the host's doing */
    zero__host_writes_note(e);
    if (s != ZERO_OK) return s;
    /* host-owned parameters (1.1): the loaded values go into the host's tensors */
    if ((s = zero__host_owned_writeback(e, "zero_load")) != ZERO_OK) return s;
    if (e->dev && e->any_host_owned && (s = device_order(e, 0, NULL)) != ZERO_OK) return s;
    return ZERO_OK;
}

/* (1.10) As after a load, for the written params alone: libzero wrote its
 * copies of them (also after a partial failure), so new fingerprints for
 * the host-write check, then their values into host-owned tensors.  A
 * write the host made to any other param is still found at the boundary. */
zero_status zero_params_write(zero_engine *e, zero_param *const *params, const void *const *values, size_t n,
                              int root) {
    if (need_engine(e)) return ZERO_ERR_INVALID_ARGUMENT;
    ZERO_TRACE_SCOPE("zero_params_write", "params", "params", n, "root", root);
    int wrote = 0;
    zero_status s = zero__params_write(e, params, values, n, root, &wrote);
    if (wrote) zero__host_writes_note_params(e, params, n);
    if (s != ZERO_OK) return s;
    if ((s = zero__host_owned_writeback_params(e, params, n, "zero_params_write")) != ZERO_OK) return s;
    if (e->dev && e->any_host_owned && (s = device_order(e, 0, NULL)) != ZERO_OK) return s;
    return ZERO_OK;
}

zero_status zero_load(zero_engine *e, const char *dir) {
    zero_status s = ckpt_entry(e, dir, "zero_load", 1);
    ZERO_TRACE_SCOPE("zero_load", "ckpt", NULL, 0, NULL, 0);
    return s != ZERO_OK ? s : load_with(e, dir, ZERO_OK, 0);
}

/* As zero_save_ex: each rank judges its options and the verdict is agreed
 * in the load's first all-reduce (discard_window), so one rank's refusal
 * is an error on every rank at once, nothing loaded. */
zero_status zero_load_ex(zero_engine *e, const char *dir, const zero_load_options *o) {
    zero_status s = ckpt_entry(e, dir, "zero_load_ex", 1);
    ZERO_TRACE_SCOPE("zero_load", "ckpt", NULL, 0, NULL, 0);
    if (s != ZERO_OK) return s;
    zero_load_options opt = ZERO_LOAD_OPTIONS_INIT;
    zero_status local = options_in(e, &opt, sizeof opt, o, "zero_load_options", "zero_load_ex");
    if (local == ZERO_OK && opt.weights_only > 1)
        local = zero__error(e, ZERO_ERR_INVALID_ARGUMENT, "zero_load_ex: weights_only is %u (0 or 1)",
                            opt.weights_only);
    if (local != ZERO_OK) opt = (zero_load_options)ZERO_LOAD_OPTIONS_INIT; /* nothing of a refused struct is used */
    return load_with(e, dir, local, (int)opt.weights_only);
}

/* ------------------------------------------------------------------------ */

zero_status zero_memory_stats_get(const zero_engine *e, zero_memory_stats *out) {
    if (!e || !out || out->struct_size < sizeof(uint32_t)) return ZERO_ERR_INVALID_ARGUMENT;
    zero__mem_stats(e->mem, out);
    if (out->struct_size >= offsetof(zero_memory_stats, step_untiled_numel) + sizeof out->step_untiled_numel) {
        out->step_fp32_peak_bytes = e->step_fp32_peak_bytes; /* (1.3) the tiled step */
        out->step_tile_max_numel = e->step_tile_max_numel;
        out->step_untiled_numel = e->step_untiled_numel;
    }
    return ZERO_OK;
}

zero_status zero_comm_stats_get(const zero_engine *e, zero_comm_stats *out) {
    if (!e || !zero__comm_stats_out_ok(out)) return ZERO_ERR_INVALID_ARGUMENT;
    zero__comm_counters c;
    zero__comm_counters_get(e->world, &c);
    zero__sub_comms_add_counters((struct zero_engine *)e, &c);
    zero_comm_stats st = zero__comm_stats_of(&c);
    st.reduction_passes = atomic_load(&((struct zero_engine *)e)->reduction_passes);
    st.exposed_comm_seconds = e->exposed_comm_seconds;
    zero__comm_stats_copy_out(out, &st);
    return ZERO_OK;
}
