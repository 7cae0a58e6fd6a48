/* The top level, fp16/bf16, zero_optimization and pipeline sections of a
 * DeepSpeed config, with DeepSpeed's defaults (deepspeed/runtime/config.py,
 * fp16/loss_scaler.py, zero/config.py, zero/offload_config.py).
 *
 * The key tables below are the single list of what libzero reads, what it
 * knowingly ignores, and (by omission) what it has never heard of; the
 * warnings and docs/config.md follow from them. */
#include <math.h>
#include <string.h>

#include "config_internal.h"

static const char *const NOT_IMPL = NULL; /* default text: "not implemented by libzero, ignored" */

static const zero__cfg_key top_keys[] = {
    {"train_batch_size", ZERO__KEY_USED, NULL, NULL},
    {"train_micro_batch_size_per_gpu", ZERO__KEY_USED, NULL, NULL},
    {"gradient_accumulation_steps", ZERO__KEY_USED, NULL, NULL},
    {"gradient_clipping", ZERO__KEY_USED, NULL, NULL},
    {"prescale_gradients", ZERO__KEY_USED, NULL, NULL},
    {"gradient_predivide_factor", ZERO__KEY_USED, NULL, NULL},
    {"steps_per_print", ZERO__KEY_USED, NULL, NULL},
    {"wall_clock_breakdown", ZERO__KEY_USED, NULL, NULL},
    {"fp16", ZERO__KEY_USED, NULL, NULL},
    {"bf16", ZERO__KEY_USED, NULL, NULL},
    {"bfloat16", ZERO__KEY_USED, NULL, NULL}, /* DeepSpeed's older spelling of bf16 */
    {"optimizer", ZERO__KEY_USED, NULL, NULL},
    {"scheduler", ZERO__KEY_USED, NULL, NULL},
    {"zero_optimization", ZERO__KEY_USED, NULL, NULL},
    {"pipeline", ZERO__KEY_USED, NULL, NULL},
    {"moe", ZERO__KEY_USED, NULL, NULL}, /* (1.3) max_group_size; experts themselves come from zero_set_group */
    {"trace", ZERO__KEY_USED, NULL, NULL}, /* libzero: timeline trace (core/trace_engine.c, docs/trace.md) */
    {"comm_timeout", ZERO__KEY_USED, NULL, NULL}, /* libzero: wait limit, read by api.c (docs/reliability.md) */
    /* DeepSpeed features outside ZeRO that libzero does not implement. */
    {"sparse_attention", ZERO__KEY_IGNORED, NULL, NOT_IMPL},
    {"compression_training", ZERO__KEY_IGNORED, NULL, NOT_IMPL},
    {"autotuning", ZERO__KEY_IGNORED, NULL, NOT_IMPL},
    {"flops_profiler", ZERO__KEY_IGNORED, NULL, NOT_IMPL},
    {"activation_checkpointing", ZERO__KEY_IGNORED, NULL,
     "not implemented by libzero (activations belong to the host), ignored"},
    {"tensorboard", ZERO__KEY_IGNORED, NULL, NOT_IMPL},
    {"wandb", ZERO__KEY_IGNORED, NULL, NOT_IMPL},
    {"csv_monitor", ZERO__KEY_IGNORED, NULL, NOT_IMPL},
    {"comet", ZERO__KEY_IGNORED, NULL, NOT_IMPL},
    {"data_efficiency", ZERO__KEY_IGNORED, NULL, NOT_IMPL},
    {"curriculum_learning", ZERO__KEY_IGNORED, NULL, NOT_IMPL},
    {"progressive_layer_drop", ZERO__KEY_IGNORED, NULL, NOT_IMPL},
    {"amp", ZERO__KEY_IGNORED, NULL, "not implemented by libzero (use fp16 or bf16), ignored"},
    {"elasticity", ZERO__KEY_IGNORED, NULL, NOT_IMPL},
    {"sparse_gradients", ZERO__KEY_IGNORED, "false", NOT_IMPL},
    {"communication_data_type", ZERO__KEY_USED, NULL, NULL}, /* config_dtypes.c */
    {"seq_parallel_communication_data_type", ZERO__KEY_IGNORED, NULL, NOT_IMPL},
    {"dump_state", ZERO__KEY_IGNORED, "false", NOT_IMPL},
    {"memory_breakdown", ZERO__KEY_IGNORED, "false",
     "not implemented by libzero (use zero_memory_stats_get), ignored"},
    {"checkpoint", ZERO__KEY_IGNORED, NULL, NOT_IMPL},
    {"aio", ZERO__KEY_IGNORED, NULL, NOT_IMPL},
    {"nebula", ZERO__KEY_IGNORED, NULL, NOT_IMPL},
    {"eigenvalue", ZERO__KEY_IGNORED, NULL, NOT_IMPL},
    {"quantize_training", ZERO__KEY_IGNORED, NULL, NOT_IMPL},
    {"data_types", ZERO__KEY_USED, NULL, NULL}, /* config_dtypes.c */
    {"zero_allow_untested_optimizer", ZERO__KEY_IGNORED, NULL,
     "has no effect in libzero (every optimizer it implements works with every stage), ignored"},
    {"zero_force_ds_cpu_optimizer", ZERO__KEY_IGNORED, NULL,
     "has no effect in libzero (offload always uses its own CPU optimizer), ignored"},
    {"hybrid_engine", ZERO__KEY_IGNORED, NULL, NOT_IMPL},
    {"compile", ZERO__KEY_IGNORED, NULL, NOT_IMPL},
    {"dataloader_drop_last", ZERO__KEY_IGNORED, "false",
     "not implemented by libzero (the host owns its data loader), ignored"},
    {"disable_allgather", ZERO__KEY_IGNORED, "false", NOT_IMPL},
    {"timers", ZERO__KEY_IGNORED, NULL, NOT_IMPL},
    {"weight_quantization", ZERO__KEY_IGNORED, NULL, NOT_IMPL},
    {"torch_autocast", ZERO__KEY_IGNORED, NULL, NOT_IMPL},
    {"graph_harvesting", ZERO__KEY_IGNORED, "false", NOT_IMPL},
    {"use_data_before_expert_parallelism", ZERO__KEY_IGNORED, "false", NOT_IMPL},
    {"tensor_parallel", ZERO__KEY_IGNORED, NULL, NOT_IMPL},
    {NULL, 0, NULL, NULL}};

int zero__cfg_parse_top(zero__cfg_ctx *ctx, const json_t *root, int world, zero_run_config *rc) {
    int64_t train = 0, micro = 0, gas = 0, spp;
    int r;
    zero__cfg_check_keys(ctx, root, "", top_keys);
    if (zero__cfg_int(ctx, root, "", "train_batch_size", 1, INT64_MAX, "a positive integer", &train) < 0 ||
        zero__cfg_int(ctx, root, "", "train_micro_batch_size_per_gpu", 1, INT64_MAX, "a positive integer",
                      &micro) < 0 ||
        zero__cfg_int(ctx, root, "", "gradient_accumulation_steps", 1, INT32_MAX, "a positive integer", &gas) < 0)
        return -1;
    if (zero__cfg_batch(ctx, world, train, micro, gas, rc) < 0) return -1;
    if (zero__cfg_num(ctx, root, "", "gradient_clipping", 0.0, 0, HUGE_VAL, "a number >= 0 (0 = off)",
                      &rc->gradient_clipping) < 0 ||
        zero__cfg_bool(ctx, root, "", "prescale_gradients", &rc->prescale_gradients) < 0 ||
        /* the gradients are scaled by 1/f and f/world in fp32 */
        zero__cfg_num(ctx, root, "", "gradient_predivide_factor", ZERO__CFG_FLT_MIN, 0, 1.0 / ZERO__CFG_FLT_MIN,
                      "a number > 0 whose reciprocal is a normal 32-bit float (1.17549e-38 .. 8.50706e+37)",
                      &rc->gradient_predivide_factor) < 0 ||
        zero__cfg_bool(ctx, root, "", "wall_clock_breakdown", &rc->wall_clock_breakdown) < 0)
        return -1;
    double comm_timeout = 0; /* checked here, read by the engine (zero__config_double) */
    if (zero__cfg_num(ctx, root, "", "comm_timeout", 0.0, 0, HUGE_VAL, "a number of seconds >= 0 (0 = no limit)",
                      &comm_timeout) < 0)
        return -1;
    r = zero__cfg_int(ctx, root, "", "steps_per_print", 1, INT32_MAX, "a positive integer", &spp);
    if (r < 0) return -1;
    if (r == 1) rc->steps_per_print = (int32_t)spp;
    return 0;
}

/* ---- fp16 / bf16 -------------------------------------------------------- */

static const zero__cfg_key fp16_keys[] = {
    {"enabled", ZERO__KEY_USED, NULL, NULL},
    {"loss_scale", ZERO__KEY_USED, NULL, NULL},
    {"initial_scale_power", ZERO__KEY_USED, NULL, NULL},
    {"loss_scale_window", ZERO__KEY_USED, NULL, NULL},
    {"hysteresis", ZERO__KEY_USED, NULL, NULL},
    {"consecutive_hysteresis", ZERO__KEY_USED, NULL, NULL},
    {"min_loss_scale", ZERO__KEY_USED, NULL, NULL},
    {"auto_cast", ZERO__KEY_IGNORED, "false",
     "not implemented by libzero (the host casts its own inputs), ignored"},
    {"fp16_master_weights_and_grads", ZERO__KEY_IGNORED, "false",
     "not implemented by libzero (master weights are always fp32), ignored"},
    {NULL, 0, NULL, NULL}};

static const zero__cfg_key bf16_keys[] = {
    {"enabled", ZERO__KEY_USED, NULL, NULL},
    {"immediate_grad_update", ZERO__KEY_IGNORED, NULL, NOT_IMPL},
    {"check_grad_overflow", ZERO__KEY_IGNORED, "false", NOT_IMPL},
    {"bf16_master_weights_and_grads", ZERO__KEY_IGNORED, "false",
     "not implemented by libzero (master weights are always fp32), ignored"},
    {"bf16_optimizer_states", ZERO__KEY_IGNORED, "false", NOT_IMPL},
    {NULL, 0, NULL, NULL}};

int zero__cfg_parse_precision(zero__cfg_ctx *ctx, const json_t *root, zero_run_config *rc) {
    const json_t *fp16, *bf16;
    const char *bf16_name = "bf16";
    int32_t fp16_on = 0, bf16_on = 0;
    int64_t v;
    double d;

    if (zero__cfg_obj(ctx, root, "", "fp16", &fp16) < 0) return -1;
    if (zero__cfg_obj(ctx, root, "", "bf16", &bf16) < 0) return -1;
    if (!bf16) {
        if (zero__cfg_obj(ctx, root, "", "bfloat16", &bf16) < 0) return -1;
        bf16_name = "bfloat16";
    }
    zero__cfg_check_keys(ctx, fp16, "fp16", fp16_keys);
    zero__cfg_check_keys(ctx, bf16, bf16_name, bf16_keys);

    /* The fp16 values are checked even when fp16 is off: a typo there is
     * still a typo, and DeepSpeed reads them unconditionally as well. */
    if (zero__cfg_bool(ctx, fp16, "fp16", "enabled", &fp16_on) < 0 ||
        zero__cfg_num(ctx, fp16, "fp16", "loss_scale", 0.0, 0, ZERO__CFG_FLT_MAX, "a number >= 0 (0 = dynamic)",
                      &rc->fp16_loss_scale) < 0)
        return -1;
    /* 2^127 is far beyond any useful scale yet still a finite float. */
    v = -1;
    if (zero__cfg_int(ctx, fp16, "fp16", "initial_scale_power", 0, 127, "an integer 0..127", &v) < 0) return -1;
    if (v >= 0) rc->fp16_initial_scale_power = (int32_t)v;
    v = 0;
    if (zero__cfg_int(ctx, fp16, "fp16", "loss_scale_window", 1, INT32_MAX, "a positive integer", &v) < 0) return -1;
    if (v > 0) rc->fp16_loss_scale_window = (int32_t)v;
    v = 0;
    if (zero__cfg_int(ctx, fp16, "fp16", "hysteresis", 1, INT32_MAX, "a positive integer", &v) < 0) return -1;
    if (v > 0) rc->fp16_hysteresis = (int32_t)v;
    if (zero__cfg_bool(ctx, fp16, "fp16", "consecutive_hysteresis", &rc->fp16_consecutive_hysteresis) < 0)
        return -1;
    d = 0;
    if (zero__cfg_num(ctx, fp16, "fp16", "min_loss_scale", 0.0, 1, ZERO__CFG_FLT_MAX, "a number > 0", &d) < 0)
        return -1;
    if (d > 0) rc->fp16_min_loss_scale = d;
    /* the gradients are unscaled by 1/scale in fp32: it must stay finite */
    if (rc->fp16_loss_scale > 0 && rc->fp16_loss_scale < ZERO__CFG_FLT_MIN)
        return zero__cfg_fail(ctx, "fp16.loss_scale: got %g, expected 0 (dynamic) or at least %g (1/scale must "
                                   "be a finite 32-bit float)",
                              rc->fp16_loss_scale, ZERO__CFG_FLT_MIN);
    if (rc->fp16_min_loss_scale < ZERO__CFG_FLT_MIN)
        return zero__cfg_fail(ctx, "fp16.min_loss_scale: got %g, expected at least %g (1/scale must be a finite "
                                   "32-bit float)",
                              rc->fp16_min_loss_scale, ZERO__CFG_FLT_MIN);

    if (zero__cfg_bool(ctx, bf16, bf16_name, "enabled", &bf16_on) < 0) return -1;
    if (fp16_on && bf16_on)
        return zero__cfg_fail(ctx, "%s.enabled: got true while fp16.enabled is also true, expected at most one "
                                   "of fp16 and bf16 enabled",
                              bf16_name);
    rc->model_dtype = fp16_on ? ZERO_DTYPE_F16 : bf16_on ? ZERO_DTYPE_BF16 : ZERO_DTYPE_F32;
    return 0;
}

/* ---- zero_optimization ------------------------------------------------ */

static const zero__cfg_key zero_keys[] = {
    {"stage", ZERO__KEY_USED, NULL, NULL},
    {"contiguous_gradients", ZERO__KEY_USED, NULL, NULL},
    {"reduce_scatter", ZERO__KEY_USED, NULL, NULL},
    {"reduce_bucket_size", ZERO__KEY_USED, NULL, NULL},
    {"allgather_bucket_size", ZERO__KEY_USED, NULL, NULL},
    {"allgather_partitions", ZERO__KEY_USED, NULL, NULL},
    {"overlap_comm", ZERO__KEY_USED, NULL, NULL},
    {"round_robin_gradients", ZERO__KEY_USED, NULL, NULL},
    {"offload_optimizer", ZERO__KEY_USED, NULL, NULL},
    {"offload_param", ZERO__KEY_USED, NULL, NULL},
    {"stage3_prefetch_bucket_size", ZERO__KEY_USED, NULL, NULL},
    {"stage3_param_persistence_threshold", ZERO__KEY_USED, NULL, NULL},
    {"stage3_max_live_parameters", ZERO__KEY_USED, NULL, NULL},
    {"stage3_max_reuse_distance", ZERO__KEY_USED, NULL, NULL},
    /* DeepSpeed's pydantic field names, accepted as aliases of the above. */
    {"prefetch_bucket_size", ZERO__KEY_USED, NULL, NULL},
    {"param_persistence_threshold", ZERO__KEY_USED, NULL, NULL},
    {"max_live_parameters", ZERO__KEY_USED, NULL, NULL},
    {"max_reuse_distance", ZERO__KEY_USED, NULL, NULL},
    {"sub_group_size", ZERO__KEY_USED, NULL, NULL},
    {"max_group_size", ZERO__KEY_USED, NULL, NULL}, /* (1.3) the optimizer step's tile cap (partition_step.c) */
    {"plugin", ZERO__KEY_USED, NULL, NULL},
    {"memory_budget_bytes", ZERO__KEY_USED, NULL, NULL}, /* libzero: the per-rank budget of "stage": "auto" */
    {"strict_grads", ZERO__KEY_USED, NULL, NULL},
    {"reduce_once_per_window", ZERO__KEY_USED, NULL, NULL}, /* libzero: docs/determinism.md */
    {"grad_hooks", ZERO__KEY_USED, NULL, NULL},
    {"cpu_offload", ZERO__KEY_USED, NULL, NULL},
    {"ignore_unused_parameters", ZERO__KEY_USED, NULL, NULL},
    {"find_unused_parameters", ZERO__KEY_USED, NULL, NULL}, /* libzero (issue 31): zero__config_find_unused */
    {"load_from_fp32_weights", ZERO__KEY_IGNORED, "true", NOT_IMPL},
    {"elastic_checkpoint", ZERO__KEY_IGNORED, "false", NOT_IMPL},
    {"stage3_gather_16bit_weights_on_model_save", ZERO__KEY_IGNORED, "false", NOT_IMPL},
    {"gather_16bit_weights_on_model_save", ZERO__KEY_IGNORED, "false", NOT_IMPL},
    {"stage3_gather_fp16_weights_on_model_save", ZERO__KEY_IGNORED, "false", NOT_IMPL},
    {"legacy_stage1", ZERO__KEY_IGNORED, "false", NOT_IMPL},
    /* read by the contrib plugin "zeropp" (plugins-contrib/zeropp); see parse_contrib */
    {"zero_hpz_partition_size", ZERO__KEY_USED, NULL, NULL},
    {"zero_quantized_weights", ZERO__KEY_USED, NULL, NULL},
    {"zero_quantized_nontrainable_weights", ZERO__KEY_IGNORED, "false", NOT_IMPL},
    {"zero_quantized_gradients", ZERO__KEY_USED, NULL, NULL},
    {"zero_quantized_gradients_bits", ZERO__KEY_USED, NULL, NULL},           /* libzero (zeropp): 8 or 4 */
    {"zero_quantized_gradients_block", ZERO__KEY_USED, NULL, NULL},          /* libzero (zeropp) */
    {"zero_quantized_weights_block", ZERO__KEY_USED, NULL, NULL},            /* libzero (zeropp) */
    {"zero_quantized_gradients_error_feedback", ZERO__KEY_USED, NULL, NULL}, /* libzero (zeropp) */
    {"zero_quantized_gradients_hierarchical", ZERO__KEY_USED, NULL, NULL},   /* libzero (zeropp) */
    /* read by the contrib plugin "mics" (plugins-contrib/mics); see parse_mics */
    {"mics_shard_size", ZERO__KEY_USED, NULL, NULL},
    {"mics_hierarchical_params_gather", ZERO__KEY_IGNORED, "false", NOT_IMPL},
    {"memory_efficient_linear", ZERO__KEY_IGNORED, "true", NOT_IMPL},
    {"use_multi_rank_bucket_allreduce", ZERO__KEY_IGNORED, "true", NOT_IMPL},
    {"pipeline_loading_checkpoint", ZERO__KEY_IGNORED, "false", NOT_IMPL},
    {"override_module_apply", ZERO__KEY_IGNORED, "true", NOT_IMPL},
    {"stage3_module_granularity_threshold", ZERO__KEY_IGNORED, "0", NOT_IMPL},
    {"log_trace_cache_warnings", ZERO__KEY_IGNORED, "false", NOT_IMPL},
    {"use_all_reduce_for_fetch_params", ZERO__KEY_IGNORED, "false", NOT_IMPL},
    {"cpu_offload_params", ZERO__KEY_IGNORED, "false", "parameter offload is not implemented by libzero, ignored"},
    {"cpu_offload_use_pin_memory", ZERO__KEY_IGNORED, "false", NOT_IMPL},
    {NULL, 0, NULL, NULL}};

static const zero__cfg_key offload_opt_keys[] = {
    {"device", ZERO__KEY_USED, NULL, NULL},
    {"pin_memory", ZERO__KEY_USED, NULL, NULL},
    {"nvme_path", ZERO__KEY_USED, NULL, NULL},
    {"buffer_count", ZERO__KEY_IGNORED, "4",
     "libzero keeps three NVMe tiles in host memory (one written back, one stepped, one read ahead), ignored"},
    {"fast_init", ZERO__KEY_IGNORED, "false", NOT_IMPL},
    {"pipeline_read", ZERO__KEY_IGNORED, "false",
     "libzero always reads the next NVMe tile while the CPU optimizer steps this one, ignored"},
    {"pipeline_write", ZERO__KEY_IGNORED, "false",
     "libzero always writes the last NVMe tile while the CPU optimizer steps this one, ignored"},
    {"pipeline", ZERO__KEY_IGNORED, "false", NOT_IMPL},
    {"ratio", ZERO__KEY_IGNORED, "1", "partial offload is not implemented by libzero (everything is offloaded), ignored"},
    {NULL, 0, NULL, NULL}};

static const zero__cfg_key offload_param_keys[] = {
    {"device", ZERO__KEY_USED, NULL, NULL},
    {"pin_memory", ZERO__KEY_USED, NULL, NULL},
    {"nvme_path", ZERO__KEY_USED, NULL, NULL},
    {"buffer_count", ZERO__KEY_USED, NULL, NULL},
    {"buffer_size", ZERO__KEY_USED, NULL, NULL},
    {"max_in_cpu", ZERO__KEY_IGNORED, "1000000000",
     "libzero keeps no host cache of NVMe parameters beyond the buffer_count window, ignored"},
    {NULL, 0, NULL, NULL}};

#define SZ "zero_optimization"
#define OO "zero_optimization.offload_optimizer"
#define OP "zero_optimization.offload_param"

/* "none" / "cpu" / "nvme" (or absent): the static spelling, NULL for none;
 * anything else is an error naming `section`.device. */
static int offload_device(zero__cfg_ctx *ctx, const json_t *o, const char *section, const char **out) {
    const char *device = NULL;
    *out = NULL;
    if (zero__cfg_str(ctx, o, section, "device", &device) < 0) return -1;
    if (!device || strcmp(device, "none") == 0) return 0;
    if (strcmp(device, "cpu") == 0) *out = "cpu";
    else if (strcmp(device, "nvme") == 0) *out = "nvme";
    else {
        char val[96];
        zero__cfg_describe(json_object_get(o, "device"), val, sizeof val);
        return zero__cfg_fail(ctx, "%s.device: got %s, expected \"none\", \"cpu\" or \"nvme\"", section, val);
    }
    return 0;
}

/* device "nvme" needs a directory: nvme_path (a string), else an error
 * saying so. */
static int need_nvme_path(zero__cfg_ctx *ctx, const json_t *o, const char *section) {
    const char *path = NULL;
    if (zero__cfg_str(ctx, o, section, "nvme_path", &path) < 0) return -1;
    if (!path)
        return zero__cfg_fail(ctx, "%s.nvme_path: missing, expected the directory that holds the NVMe tiles "
                                   "(device \"nvme\" needs it; a fast local file system)",
                              section);
    return 0;
}

static int parse_offload_optimizer(zero__cfg_ctx *ctx, const json_t *zo, zero_run_config *rc, zero__config *cfg) {
    const json_t *oo;
    int32_t cpu_offload = 0;
    if (zero__cfg_obj(ctx, zo, SZ, "offload_optimizer", &oo) < 0) return -1;
    /* Deprecated DeepSpeed spelling: "cpu_offload": true == {"device": "cpu"}. */
    if (zero__cfg_bool(ctx, zo, SZ, "cpu_offload", &cpu_offload) < 0) return -1;
    if (cpu_offload && !oo) {
        zero__cfg_warn(ctx, SZ ".cpu_offload: deprecated (as in DeepSpeed); treated as "
                              "offload_optimizer {\"device\": \"cpu\"}");
        rc->offload_optimizer = 1;
        cfg->offload_opt_device = "cpu";
    }
    if (!oo) return 0;
    zero__cfg_check_keys(ctx, oo, OO, offload_opt_keys);
    const char *device;
    if (offload_device(ctx, oo, OO, &device) < 0) return -1;
    if (device && strcmp(device, "nvme") == 0) {
        /* ZeRO-Infinity: DeepSpeed too offloads the optimizer to NVMe only with stage 3 */
        if (rc->stage != 3)
            return zero__cfg_fail(ctx, OO ".device: got \"nvme\" with zero_optimization.stage %d, expected stage 3 "
                                       "(NVMe offload is ZeRO-Infinity, stage 3 only, as in DeepSpeed) or device "
                                       "\"cpu\"",
                                  (int)rc->stage);
        if (need_nvme_path(ctx, oo, OO) < 0) return -1;
    }
    cfg->offload_opt_device = device;
    rc->offload_optimizer = device != NULL;
    return zero__cfg_bool(ctx, oo, OO, "pin_memory", &rc->offload_pin_memory) < 0 ? -1 : 0;
}

static int parse_offload_param(zero__cfg_ctx *ctx, const json_t *zo, const zero_run_config *rc, zero__config *cfg) {
    const json_t *op;
    if (zero__cfg_obj(ctx, zo, SZ, "offload_param", &op) < 0) return -1;
    if (!op) return 0;
    zero__cfg_check_keys(ctx, op, OP, offload_param_keys);
    const char *device;
    int32_t pin = 0;
    if (offload_device(ctx, op, OP, &device) < 0 || zero__cfg_bool(ctx, op, OP, "pin_memory", &pin) < 0) return -1;
    if (!device) return 0; /* {"device": "none"} asks for nothing: stay quiet */
    if (rc->stage != 3) {
        zero__cfg_warn(ctx, OP ": parameter offload is a stage-3 feature (as in DeepSpeed); with "
                              "zero_optimization.stage %d it is ignored (parameters stay in device memory)",
                       (int)rc->stage);
        return 0;
    }
    /* "nvme": the owned shard lives in a file under nvme_path, read through
     * a window of buffer_count pieces (plugins/stage3/stage3_pwin.c) */
    if (strcmp(device, "nvme") == 0 && need_nvme_path(ctx, op, OP) < 0) return -1;
    cfg->offload_param_device = device;
    return 0;
}

/* stage3_* keys also go by DeepSpeed's field name without the prefix. */
static int read_size(zero__cfg_ctx *ctx, const json_t *zo, const char *key, const char *alias, int64_t lo,
                     const char *what, int64_t *out) {
    int64_t v;
    int r = zero__cfg_int(ctx, zo, SZ, key, lo, INT64_MAX, what, &v);
    if (r == 0 && alias) r = zero__cfg_int(ctx, zo, SZ, alias, lo, INT64_MAX, what, &v);
    if (r == 1) *out = v;
    return r < 0 ? -1 : 0;
}

/* The plugin the config would run without a contrib key (for messages). */
static const char *plain_plugin(const zero_run_config *rc, const char *plugin_key) {
    return plugin_key             ? plugin_key
           : rc->stage == 3        ? "stage3" /* with offload too: stage3 keeps its state in the host tier */
           : rc->offload_optimizer ? "offload"
           : rc->stage == 0        ? "stage0"
           : rc->stage == 1        ? "stage1"
           : rc->stage == 2        ? "stage2"
                                   : "stage3";
}

/* A contrib strategy switched on by DeepSpeed's keys (`what` names the
 * first key found): with stage 3 and no plugin named (and no offload) it
 * selects `plugin`, as DeepSpeed selects MiCS / ZeRO++; with another
 * plugin named (or another stage) the keys are ignored, with a warning. */
static void select_contrib(zero__cfg_ctx *ctx, const zero_run_config *rc, const char **plugin_key, const char *plugin,
                           const char *what) {
    if (!*plugin_key && rc->stage == 3 && !rc->offload_optimizer) {
        *plugin_key = plugin;
    } else if (!*plugin_key || strcmp(*plugin_key, plugin) != 0) {
        zero__cfg_warn(ctx, SZ ".%s: read by the stage-3 plugin \"%s\" (plugins-contrib); ignored by plugin \"%s\"",
                       what, plugin, plain_plugin(rc, *plugin_key));
    }
}

/* DeepSpeed's MiCS and ZeRO++ keys: checked here, read by the contrib
 * plugins "mics" and "zeropp" through cfg_int / cfg_bool (their own
 * libzero keys, zero_quantized_*_block and friends, are checked there).
 * mics_shard_size -1 (DeepSpeed's default) is off; zero_hpz_partition_size
 * 1 is off.  Both strategies at once is an error: they partition
 * differently. */
static int parse_contrib(zero__cfg_ctx *ctx, const json_t *zo, const zero_run_config *rc, const char **plugin_key) {
    int64_t shard = -1, hpz = 1;
    int32_t qw = 0, qg = 0;
    if (zero__cfg_int(ctx, zo, SZ, "mics_shard_size", -1, INT32_MAX, "-1 (off) or a positive integer", &shard) < 0 ||
        zero__cfg_int(ctx, zo, SZ, "zero_hpz_partition_size", 1, INT32_MAX, "a positive integer", &hpz) < 0 ||
        zero__cfg_bool(ctx, zo, SZ, "zero_quantized_weights", &qw) < 0 ||
        zero__cfg_bool(ctx, zo, SZ, "zero_quantized_gradients", &qg) < 0)
        return -1;
    if (shard == 0) return zero__cfg_fail(ctx, SZ ".mics_shard_size: got 0, expected -1 (off) or a positive integer");
    const char *zpp = qw ? "zero_quantized_weights" : qg ? "zero_quantized_gradients"
                      : hpz > 1 ? "zero_hpz_partition_size" : NULL;
    if (shard > 0 && zpp)
        return zero__cfg_fail(ctx, SZ ".mics_shard_size: got %lld together with %s, expected one of MiCS "
                                   "(mics_shard_size) and ZeRO++ (zero_quantized_*, zero_hpz_partition_size)",
                              (long long)shard, zpp);
    if (shard > 0) select_contrib(ctx, rc, plugin_key, "mics", "mics_shard_size");
    if (zpp) select_contrib(ctx, rc, plugin_key, "zeropp", zpp);
    return 0;
}

static int is_auto_key(const json_t *zo, const char *key) {
    const json_t *v = zo ? json_object_get(zo, key) : NULL;
    return json_is_string(v) && strcmp(json_string_value(v), "auto") == 0;
}

/* reduce_bucket_size / allgather_bucket_size: DeepSpeed accepts 0 and then
 * reduces (gathers) every gradient on its own (the bucket is full as soon as
 * one param is in it); libzero does the same with a one-element size, which
 * the bucket planner raises to the largest param.  "auto" is resolved from
 * the model (reduce_bucket_size) or means the default. */
static int read_bucket(zero__cfg_ctx *ctx, const json_t *zo, const char *key, int64_t *out) {
    if (is_auto_key(zo, key)) return 0;
    int64_t v = -1;
    if (read_size(ctx, zo, key, NULL, 0, "an integer >= 0 (elements)", &v) < 0) return -1;
    if (v == 0) {
        zero__cfg_warn(ctx, SZ ".%s: 0 puts every gradient in a bucket of its own (as DeepSpeed does); set a "
                              "positive element count (DeepSpeed's default 5e8) to batch them",
                       key);
        v = 1;
    }
    if (v > 0) *out = v;
    return 0;
}

int zero__cfg_parse_zero(zero__cfg_ctx *ctx, const json_t *root, zero_run_config *rc, const char **plugin_key,
                         zero__config *cfg) {
    const json_t *zo = json_object_get(root, SZ);
    int64_t stage = 0;
    int32_t b, overlap = -1, ignore_unused = 1, have_strict;

    if (zo && json_is_boolean(zo)) {
        /* Legacy DeepSpeed: "zero_optimization": true meant stage 1. */
        rc->stage = json_is_true(zo) ? 1 : 0;
        zero__cfg_warn(ctx, SZ ": a boolean is deprecated (as in DeepSpeed); treated as {\"stage\": %d}",
                       rc->stage);
        zo = NULL;
    } else if (zero__cfg_obj(ctx, root, "", SZ, &zo) < 0) {
        return -1;
    }
    zero__cfg_check_keys(ctx, zo, SZ, zero_keys);
    /* "stage": "auto" (libzero): the plugin is picked at zero_params_done
     * from the memory plans (core/plan_auto.c); the run view says stage 0
     * until then. */
    const json_t *st = zo ? json_object_get(zo, "stage") : NULL;
    const int auto_stage = json_is_string(st) && strcmp(json_string_value(st), "auto") == 0;
    if (!auto_stage && zero__cfg_int(ctx, zo, SZ, "stage", 0, 3, "an integer 0..3", &stage) < 0) return -1;
    if (zo) rc->stage = (int32_t)stage;

    if (zero__cfg_bool(ctx, zo, SZ, "contiguous_gradients", &rc->contiguous_gradients) < 0 ||
        zero__cfg_bool(ctx, zo, SZ, "reduce_scatter", &rc->reduce_scatter) < 0 ||
        zero__cfg_bool(ctx, zo, SZ, "overlap_comm", &overlap) < 0 ||
        zero__cfg_bool(ctx, zo, SZ, "round_robin_gradients", &rc->round_robin_gradients) < 0 ||
        zero__cfg_bool(ctx, zo, SZ, "strict_grads", &rc->strict_grads) < 0 ||
        zero__cfg_bool(ctx, zo, SZ, "reduce_once_per_window", &rc->reduce_once_per_window) < 0)
        return -1;
    /* DeepSpeed turns overlap_comm on by default for stage 3 only. */
    rc->overlap_comm = overlap >= 0 ? overlap : rc->stage == 3;

    b = 1;
    if (zero__cfg_bool(ctx, zo, SZ, "allgather_partitions", &b) < 0) return -1;
    if (!b)
        zero__cfg_warn(ctx, SZ ".allgather_partitions: false (broadcast instead of all-gather) is not "
                              "implemented by libzero, ignored (partitions are all-gathered)");
    b = 1;
    if (zero__cfg_bool(ctx, zo, SZ, "grad_hooks", &b) < 0) return -1;
    if (!b)
        zero__cfg_warn(ctx, SZ ".grad_hooks: false is not implemented by libzero, ignored (the host always "
                              "reports gradients through zero_on_grad_ready)");
    /* DeepSpeed's ignore_unused_parameters=false makes a missing gradient an
     * error: that is libzero's strict_grads, unless strict_grads is given. */
    have_strict = zo && json_object_get(zo, "strict_grads") && !json_is_null(json_object_get(zo, "strict_grads"));
    if (zero__cfg_bool(ctx, zo, SZ, "ignore_unused_parameters", &ignore_unused) < 0) return -1;
    if (!ignore_unused && !have_strict) rc->strict_grads = 1;
    /* (issue 31) read at zero_step only when a gradient is missing
     * (zero__config_find_unused); checked here so that a typo is refused */
    b = 0;
    if (zero__cfg_bool(ctx, zo, SZ, "find_unused_parameters", &b) < 0) return -1;

    /* "auto" (the Hugging Face placeholder) for the three sizes the HF
     * Trainer derives from the model's hidden size: resolved from the
     * registered model at zero_params_done (zero__config_resolve_auto) */
    if (is_auto_key(zo, "reduce_bucket_size")) cfg->auto_sizes |= ZERO__AUTO_REDUCE_BUCKET;
    if (is_auto_key(zo, "stage3_prefetch_bucket_size") || is_auto_key(zo, "prefetch_bucket_size"))
        cfg->auto_sizes |= ZERO__AUTO_PREFETCH;
    if (is_auto_key(zo, "stage3_param_persistence_threshold") || is_auto_key(zo, "param_persistence_threshold"))
        cfg->auto_sizes |= ZERO__AUTO_PERSISTENCE;
    if (read_bucket(ctx, zo, "reduce_bucket_size", &rc->reduce_bucket_size) < 0 ||
        read_bucket(ctx, zo, "allgather_bucket_size", &rc->allgather_bucket_size) < 0 ||
        (!(cfg->auto_sizes & ZERO__AUTO_PREFETCH) &&
         read_size(ctx, zo, "stage3_prefetch_bucket_size", "prefetch_bucket_size", 0,
                   "an integer >= 0 (elements)", &rc->stage3_prefetch_bucket_size) < 0) ||
        (!(cfg->auto_sizes & ZERO__AUTO_PERSISTENCE) &&
         read_size(ctx, zo, "stage3_param_persistence_threshold", "param_persistence_threshold", 0,
                   "an integer >= 0 (elements)", &rc->stage3_param_persistence_threshold) < 0) ||
        read_size(ctx, zo, "stage3_max_live_parameters", "max_live_parameters", 0, "an integer >= 0 (elements)",
                  &rc->stage3_max_live_parameters) < 0 ||
        read_size(ctx, zo, "stage3_max_reuse_distance", "max_reuse_distance", 0, "an integer >= 0 (elements)",
                  &rc->stage3_max_reuse_distance) < 0 ||
        read_size(ctx, zo, "sub_group_size", NULL, 1, "a positive integer (elements)", &rc->sub_group_size) < 0)
        return -1;

    int64_t budget = 0, max_group = 0;
    if (read_size(ctx, zo, "max_group_size", NULL, 1, "a positive integer (elements per optimizer-step tile)",
                  &max_group) < 0)
        return -1;
    if (read_size(ctx, zo, "memory_budget_bytes", NULL, 1, "a positive integer (bytes per rank)", &budget) < 0)
        return -1;
    if (parse_offload_optimizer(ctx, zo, rc, cfg) < 0 || parse_offload_param(ctx, zo, rc, cfg) < 0) return -1;
    *plugin_key = NULL;
    if (zero__cfg_str(ctx, zo, SZ, "plugin", plugin_key) < 0) return -1;
    if (auto_stage && !*plugin_key) *plugin_key = "auto";
    return parse_contrib(ctx, zo, rc, plugin_key);
}

/* ---- pipeline (libzero extension; DeepSpeed's PipelineModule keys) ----- */

static const zero__cfg_key pipeline_keys[] = {
    {"stages", ZERO__KEY_USED, NULL, NULL},
    {"partition", ZERO__KEY_IGNORED, NULL, "belongs to the host's own pipeline, ignored by libzero"},
    {"seed_layers", ZERO__KEY_IGNORED, NULL, "belongs to the host's own pipeline, ignored by libzero"},
    {"activation_checkpoint_interval", ZERO__KEY_IGNORED, NULL,
     "belongs to the host's own pipeline, ignored by libzero"},
    {"pipe_partitioned", ZERO__KEY_IGNORED, NULL, "belongs to the host's own pipeline, ignored by libzero"},
    {"grad_partitioned", ZERO__KEY_IGNORED, NULL, "belongs to the host's own pipeline, ignored by libzero"},
    {"use_reentrant", ZERO__KEY_IGNORED, NULL, "belongs to the host's own pipeline, ignored by libzero"},
    {NULL, 0, NULL, NULL}};

/* ---- moe (1.3; DeepSpeed's MoE keys) ---------------------------------- *
 * Which groups are experts, and their expert-data-parallel groups, come
 * from the host (zero_group_desc.expert_color): libzero does not build
 * the model.  Only the step's tile cap is read here. */
static const zero__cfg_key moe_keys[] = {
    {"max_group_size", ZERO__KEY_USED, NULL, NULL},
    {"enabled", ZERO__KEY_IGNORED, NULL, "expert groups are declared by the host (zero_group_desc.expert_color), ignored"},
    {"ep_size", ZERO__KEY_IGNORED, NULL, "expert groups are declared by the host (zero_group_desc.expert_color), ignored"},
    {"num_experts", ZERO__KEY_IGNORED, NULL, "the model belongs to the host, ignored"},
    {"moe_param_group", ZERO__KEY_IGNORED, NULL, "expert groups are declared by the host (zero_group_desc.expert_color), ignored"},
    {NULL, 0, NULL, NULL}};

static int parse_moe(zero__cfg_ctx *ctx, const json_t *root) {
    const json_t *moe;
    int64_t m = 0;
    if (zero__cfg_obj(ctx, root, "", "moe", &moe) < 0) return -1;
    zero__cfg_check_keys(ctx, moe, "moe", moe_keys);
    return zero__cfg_int(ctx, moe, "moe", "max_group_size", 1, INT64_MAX,
                         "a positive integer (elements per optimizer-step tile)", &m) < 0
               ? -1
               : 0;
}

int zero__cfg_parse_pipeline(zero__cfg_ctx *ctx, const json_t *root, zero_run_config *rc) {
    const json_t *pp;
    int64_t stages = 1;
    if (parse_moe(ctx, root) < 0) return -1; /* (1.3) beside the pipeline: both shape the parallel layout */
    if (zero__cfg_obj(ctx, root, "", "pipeline", &pp) < 0) return -1;
    zero__cfg_check_keys(ctx, pp, "pipeline", pipeline_keys);
    if (zero__cfg_int(ctx, pp, "pipeline", "stages", 1, INT32_MAX, "a positive integer", &stages) < 0) return -1;
    rc->pipeline_stages = (int32_t)stages;
    if (stages > 1 && rc->stage >= 2)
        return zero__cfg_fail(ctx,
                              "zero_optimization.stage: got %d with pipeline.stages %d, expected 0 or 1: with "
                              "pipeline parallelism ZeRO stage %d would reduce-scatter gradients on every "
                              "micro-batch, multiplying data-parallel traffic by the number of micro-batches "
                              "for no memory gain; use stage 1 (plugin \"stage1-pp\")",
                              rc->stage, (int)stages, rc->stage);
    return 0;
}

/* (issue 31) zero_optimization.find_unused_parameters (libzero, default
 * false): gradients missing on some ranks count as zero instead of failing
 * zero_step.  Validated at parse (zero__cfg_parse_zero); read from the tree
 * because only zero_step's slow path (a gradient missing somewhere) asks. */
int zero__config_find_unused(const zero__config *c) {
    const json_t *zo = c ? json_object_get(c->root, SZ) : NULL;
    const json_t *v = json_is_object(zo) ? json_object_get(zo, "find_unused_parameters") : NULL;
    return json_is_true(v) || (json_is_integer(v) && json_integer_value(v) == 1);
}
