/* The DeepSpeed config parser: defaults, the user config from issue 2,
 * batch-size derivation in every direction, a table of good configs (with
 * the warnings each must give) and of bad ones (with the exact key path the
 * error must start with), dotted-path lookups, and I/O / JSON errors. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "config.h"
#include "warn_capture.h"

/* CHECK_STR_CONTAINS tests its argument for NULL; an array never is. */
static const char *as_str(const char *s) { return s; }

static warn_capture W;
static char ERR[2048];

/* Parse text for `world`; NULL (with a failed check) on error. */
static zero__config *parse_ok(const char *json, int world) {
    zero__config *c = NULL;
    warn_capture_reset(&W);
    zero_status s = zero__config_parse(json, NULL, world, &c, warn_capture_fn, &W, ERR, sizeof ERR);
    CHECK(s == ZERO_OK && c, "config %s (world %d) failed: %s", json, world, ERR);
    return s == ZERO_OK ? c : NULL;
}

/* Parse text expecting ZERO_ERR_CONFIG whose message starts with prefix. */
static void parse_bad(const char *json, int world, const char *prefix) {
    zero__config *c = NULL;
    warn_capture_reset(&W);
    ERR[0] = '\0';
    zero_status s = zero__config_parse(json, NULL, world, &c, warn_capture_fn, &W, ERR, sizeof ERR);
    CHECK(s == ZERO_ERR_CONFIG, "config %s: status %d, expected ZERO_ERR_CONFIG", json, s);
    CHECK(c == NULL, "config %s: handle returned on error", json);
    CHECK(strncmp(ERR, prefix, strlen(prefix)) == 0, "config %s: error \"%s\" does not start with \"%s\"", json, ERR,
          prefix);
    zero__config_free(c);
}

static void test_defaults(void) {
    const char *texts[] = {NULL, "{}", "  {\n}\n"};
    for (int i = 0; i < 3; ++i) {
        zero__config *c = parse_ok(texts[i], 4);
        if (!c) continue;
        const zero_run_config *rc = zero__config_run(c);
        CHECK_EQ_INT(W.count, 0);
        CHECK_EQ_INT(rc->struct_size, sizeof(zero_run_config));
        CHECK_EQ_INT(rc->stage, 0);
        CHECK_EQ_INT(rc->train_batch_size, 4); /* micro 1 * gas 1 * world 4 */
        CHECK_EQ_INT(rc->micro_batch_per_gpu, 1);
        CHECK_EQ_INT(rc->grad_accum_steps, 1);
        CHECK_NEAR(rc->gradient_clipping, 0.0, 0);
        CHECK_EQ_INT(rc->prescale_gradients, 0);
        CHECK_NEAR(rc->gradient_predivide_factor, 1.0, 0);
        CHECK_EQ_INT(rc->steps_per_print, 10);
        CHECK_EQ_INT(rc->wall_clock_breakdown, 0);
        CHECK_EQ_INT(rc->model_dtype, ZERO_DTYPE_F32);
        CHECK_EQ_INT(rc->fp16_initial_scale_power, 16);
        CHECK_NEAR(rc->fp16_loss_scale, 0.0, 0);
        CHECK_EQ_INT(rc->fp16_loss_scale_window, 1000);
        CHECK_EQ_INT(rc->fp16_hysteresis, 2);
        CHECK_EQ_INT(rc->fp16_consecutive_hysteresis, 0);
        CHECK_NEAR(rc->fp16_min_loss_scale, 1.0, 0);
        CHECK_EQ_INT(rc->optim, ZERO_OPTIM_ADAMW);
        CHECK_NEAR(rc->lr, 1e-3, 0);
        CHECK_NEAR(rc->beta1, 0.9, 0);
        CHECK_NEAR(rc->beta2, 0.999, 0);
        CHECK_NEAR(rc->eps, 1e-8, 0);
        CHECK_NEAR(rc->weight_decay, 0.0, 0);
        CHECK_EQ_INT(rc->bias_correction, 1);
        CHECK_EQ_INT(rc->contiguous_gradients, 1);
        CHECK_EQ_INT(rc->reduce_scatter, 1);
        CHECK_EQ_INT(rc->reduce_bucket_size, 500000000);
        CHECK_EQ_INT(rc->allgather_bucket_size, 500000000);
        CHECK_EQ_INT(rc->overlap_comm, 0);
        CHECK_EQ_INT(rc->round_robin_gradients, 0);
        CHECK_EQ_INT(rc->offload_optimizer, 0);
        CHECK_EQ_INT(rc->offload_pin_memory, 0);
        CHECK_EQ_INT(rc->stage3_prefetch_bucket_size, 50000000);
        CHECK_EQ_INT(rc->stage3_param_persistence_threshold, 100000);
        CHECK_EQ_INT(rc->stage3_max_live_parameters, 1000000000);
        CHECK_EQ_INT(rc->stage3_max_reuse_distance, 1000000000);
        CHECK_EQ_INT(rc->sub_group_size, 1000000000);
        CHECK_EQ_INT(rc->strict_grads, 0);
        CHECK_EQ_INT(rc->pipeline_stages, 1);
        CHECK(strcmp(zero__config_plugin(c), "stage0") == 0, "plugin %s", zero__config_plugin(c));
        CHECK(zero__config_scheduler(c) == NULL, "scheduler %s", zero__config_scheduler(c));
        zero__config_free(c);
    }
    /* DeepSpeed turns overlap_comm on by default for stage 3 only. */
    zero__config *c = parse_ok("{\"zero_optimization\":{\"stage\":3}}", 1);
    if (c) {
        CHECK_EQ_INT(zero__config_run(c)->overlap_comm, 1);
        CHECK(strcmp(zero__config_plugin(c), "stage3") == 0, "plugin %s", zero__config_plugin(c));
        zero__config_free(c);
    }
    c = parse_ok("{\"zero_optimization\":{\"stage\":3,\"overlap_comm\":false}}", 1);
    if (c) {
        CHECK_EQ_INT(zero__config_run(c)->overlap_comm, 0);
        zero__config_free(c);
    }
}

static const char *USER_CONFIG =
    "{\"train_batch_size\":4096,\"train_micro_batch_size_per_gpu\":32,\"steps_per_print\":1000,"
    "\"prescale_gradients\":false,\"optimizer\":{\"type\":\"Adam\",\"params\":{\"lr\":6e-3,\"betas\":[0.9,0.99],"
    "\"eps\":1e-8,\"weight_decay\":0.01}},\"zero_optimization\":{\"stage\":1,\"allgather_partitions\":true,"
    "\"allgather_bucket_size\":5e8,\"overlap_comm\":false,\"reduce_scatter\":true,\"reduce_bucket_size\":5e8,"
    "\"contiguous_gradients\":true,\"grad_hooks\":true,\"round_robin_gradients\":false},\"scheduler\":{\"type\":"
    "\"WarmupLR\",\"params\":{\"warmup_min_lr\":1e-8,\"warmup_max_lr\":6e-3}},\"gradient_clipping\":1.0,"
    "\"wall_clock_breakdown\":false,\"fp16\":{\"enabled\":true,\"loss_scale\":0},\"sparse_attention\":{\"mode\":"
    "\"fixed\",\"block\":16}}";

static void test_user_config(void) {
    zero__config *c = parse_ok(USER_CONFIG, 8);
    if (c) {
        const zero_run_config *rc = zero__config_run(c);
        double d = 0;
        CHECK_EQ_INT(W.count, 1);
        CHECK(warn_capture_find(&W, "sparse_attention: not implemented by libzero, ignored") == 0,
              "no sparse_attention warning");
        if (W.count != 1) warn_capture_dump(&W, "user config");
        CHECK_EQ_INT(rc->train_batch_size, 4096);
        CHECK_EQ_INT(rc->micro_batch_per_gpu, 32);
        CHECK_EQ_INT(rc->grad_accum_steps, 16); /* 4096 = 32 * 16 * 8 */
        CHECK_EQ_INT(rc->steps_per_print, 1000);
        CHECK_EQ_INT(rc->stage, 1);
        CHECK(strcmp(zero__config_plugin(c), "stage1") == 0, "plugin %s", zero__config_plugin(c));
        CHECK_EQ_INT(rc->model_dtype, ZERO_DTYPE_F16);
        CHECK_NEAR(rc->fp16_loss_scale, 0.0, 0);
        CHECK_EQ_INT(rc->optim, ZERO_OPTIM_ADAMW);
        CHECK_NEAR(rc->lr, 6e-3, 0);
        CHECK_NEAR(rc->beta1, 0.9, 0);
        CHECK_NEAR(rc->beta2, 0.99, 0);
        CHECK_NEAR(rc->eps, 1e-8, 0);
        CHECK_NEAR(rc->weight_decay, 0.01, 0);
        CHECK_NEAR(rc->gradient_clipping, 1.0, 0);
        CHECK_EQ_INT(rc->reduce_bucket_size, 500000000);
        CHECK_EQ_INT(rc->allgather_bucket_size, 500000000);
        CHECK_EQ_INT(rc->overlap_comm, 0);
        CHECK_EQ_INT(rc->contiguous_gradients, 1);
        CHECK(zero__config_scheduler(c) && strcmp(zero__config_scheduler(c), "WarmupLR") == 0, "scheduler");
        CHECK(zero__config_double(c, "scheduler.params.warmup_max_lr", &d) == 1 && d == 6e-3, "warmup_max_lr %g", d);
        zero__config_free(c);
    }
    /* 4096 is not 32 * gas * 3 for any whole gas. */
    parse_bad(USER_CONFIG, 3, "train_batch_size: got 4096, expected a multiple of train_micro_batch_size_per_gpu (32) "
                              "* world size (3) = 96");
}

typedef struct batch_case {
    int64_t train, micro, gas; /* 0 = not given */
    int world;
    int64_t want_train, want_micro, want_gas; /* when it loads */
    const char *error;                        /* else: the error starts with this */
} batch_case;

static void test_batch(void) {
    static const batch_case cases[] = {
        {4096, 32, 0, 8, 4096, 32, 16, NULL},  /* gas derived */
        {4096, 0, 16, 8, 4096, 32, 16, NULL},  /* micro derived */
        {0, 32, 16, 8, 4096, 32, 16, NULL},    /* train derived */
        {4096, 32, 16, 8, 4096, 32, 16, NULL}, /* all three consistent */
        {4096, 0, 0, 8, 4096, 512, 1, NULL},   /* train only: gas 1 */
        {0, 32, 0, 8, 256, 32, 1, NULL},       /* micro only: gas 1 */
        {0, 0, 4, 8, 32, 1, 4, NULL},          /* gas only: micro 1 */
        {0, 0, 0, 8, 8, 1, 1, NULL},           /* none: micro 1, gas 1 */
        {96, 3, 0, 4, 96, 3, 8, NULL},
        {4096, 32, 8, 8, 0, 0, 0,
         "train_batch_size: got 4096, expected train_micro_batch_size_per_gpu (32) * gradient_accumulation_steps (8) "
         "* world size (8) = 2048"},
        {4096, 32, 0, 3, 0, 0, 0,
         "train_batch_size: got 4096, expected a multiple of train_micro_batch_size_per_gpu (32) * world size (3) = 96"},
        {4096, 0, 16, 3, 0, 0, 0,
         "train_batch_size: got 4096, expected a multiple of gradient_accumulation_steps (16) * world size (3) = 48"},
        {100, 0, 0, 3, 0, 0, 0, "train_batch_size: got 100, expected a multiple of the world size (3)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        const batch_case *b = &cases[i];
        char json[256];
        int n = snprintf(json, sizeof json, "{\"steps_per_print\":5");
        if (b->train) n += snprintf(json + n, sizeof json - n, ",\"train_batch_size\":%lld", (long long)b->train);
        if (b->micro)
            n += snprintf(json + n, sizeof json - n, ",\"train_micro_batch_size_per_gpu\":%lld", (long long)b->micro);
        if (b->gas)
            n += snprintf(json + n, sizeof json - n, ",\"gradient_accumulation_steps\":%lld", (long long)b->gas);
        snprintf(json + n, sizeof json - n, "}");
        if (b->error) {
            parse_bad(json, b->world, b->error);
            continue;
        }
        zero__config *c = parse_ok(json, b->world);
        if (!c) continue;
        const zero_run_config *rc = zero__config_run(c);
        CHECK(rc->train_batch_size == b->want_train && rc->micro_batch_per_gpu == b->want_micro &&
                  rc->grad_accum_steps == b->want_gas,
              "%s world %d: got %lld/%lld/%lld, want %lld/%lld/%lld", json, b->world, (long long)rc->train_batch_size,
              (long long)rc->micro_batch_per_gpu, (long long)rc->grad_accum_steps, (long long)b->want_train,
              (long long)b->want_micro, (long long)b->want_gas);
        CHECK_EQ_INT(rc->train_batch_size, rc->micro_batch_per_gpu * rc->grad_accum_steps * b->world);
        zero__config_free(c);
    }
    /* Integral reals are integers; "auto" (Hugging Face) keeps the default with a warning. */
    zero__config *c = parse_ok("{\"train_batch_size\":6.4e1,\"train_micro_batch_size_per_gpu\":8.0}", 2);
    if (c) {
        CHECK_EQ_INT(zero__config_run(c)->grad_accum_steps, 4);
        zero__config_free(c);
    }
    c = parse_ok("{\"train_batch_size\":\"auto\",\"gradient_accumulation_steps\":\"auto\"}", 2);
    if (c) {
        CHECK_EQ_INT(W.count, 2);
        CHECK(warn_capture_find(&W, "train_batch_size: \"auto\"") >= 0, "no auto warning");
        CHECK_EQ_INT(zero__config_run(c)->train_batch_size, 2);
        zero__config_free(c);
    }
    /* world < 1 is the caller's mistake. */
    zero__config *none = NULL;
    CHECK_EQ_INT(zero__config_parse("{}", NULL, 0, &none, NULL, NULL, ERR, sizeof ERR), ZERO_ERR_INVALID_ARGUMENT);
    CHECK(none == NULL, "handle on invalid world");
}

typedef struct bad_case {
    const char *json;
    const char *prefix; /* exact start of the error: key path, value, expectation */
} bad_case;

static void test_bad_table(void) {
    static const bad_case cases[] = {
        {"{\"zero_optimization\":{\"stage\":7}}", "zero_optimization.stage: got 7, expected an integer 0..3"},
        {"{\"zero_optimization\":{\"stage\":3,\"mics_shard_size\":0}}",
         "zero_optimization.mics_shard_size: got 0, expected -1 (off) or a positive integer"},
        {"{\"zero_optimization\":{\"stage\":3,\"mics_shard_size\":\"two\"}}",
         "zero_optimization.mics_shard_size: got \"two\", expected -1 (off) or a positive integer"},
        {"{\"zero_optimization\":{\"stage\":3,\"mics_shard_size\":2,\"zero_quantized_weights\":true}}",
         "zero_optimization.mics_shard_size: got 2 together with zero_quantized_weights, expected one of MiCS"},
        {"{\"zero_optimization\":{\"stage\":3,\"zero_hpz_partition_size\":0}}",
         "zero_optimization.zero_hpz_partition_size: got 0, expected a positive integer"},
        {"{\"zero_optimization\":{\"stage\":3,\"zero_quantized_gradients\":\"yes\"}}",
         "zero_optimization.zero_quantized_gradients: got \"yes\""},
        {"{\"zero_optimization\":{\"stage\":\"two\"}}", "zero_optimization.stage: got \"two\", expected an integer 0..3"},
        {"{\"zero_optimization\":{\"stage\":1.5}}", "zero_optimization.stage: got 1.5, expected an integer 0..3"},
        {"{\"zero_optimization\":{\"stage\":\"auto\",\"memory_budget_bytes\":0}}",
         "zero_optimization.memory_budget_bytes: got 0, expected a positive integer (bytes per rank)"},
        {"{\"zero_optimization\":{\"stage\":-1}}", "zero_optimization.stage: got -1, expected an integer 0..3"},
        {"{\"zero_optimization\":{\"reduce_bucket_size\":1.5}}", "zero_optimization.reduce_bucket_size: got 1.5, expected an integer >= 0"},
        {"{\"zero_optimization\":{\"reduce_bucket_size\":-5}}", "zero_optimization.reduce_bucket_size: got -5, expected an integer >= 0"},
        {"{\"zero_optimization\":{\"allgather_bucket_size\":-1}}", "zero_optimization.allgather_bucket_size: got -1, expected an integer >= 0"},
        {"{\"zero_optimization\":{\"sub_group_size\":0}}", "zero_optimization.sub_group_size: got 0, expected a positive integer"},
        {"{\"zero_optimization\":{\"stage3_max_live_parameters\":-1}}", "zero_optimization.stage3_max_live_parameters: got -1, expected an integer >= 0"},
        {"{\"zero_optimization\":{\"stage3_prefetch_bucket_size\":\"big\"}}", "zero_optimization.stage3_prefetch_bucket_size: got \"big\""},
        {"{\"zero_optimization\":{\"sub_group_size\":0}}", "zero_optimization.sub_group_size: got 0, expected a positive integer"},
        {"{\"zero_optimization\":{\"overlap_comm\":\"yes\"}}", "zero_optimization.overlap_comm: got \"yes\", expected true or false"},
        {"{\"zero_optimization\":{\"contiguous_gradients\":2}}", "zero_optimization.contiguous_gradients: got 2, expected true or false"},
        {"{\"zero_optimization\":{\"offload_optimizer\":{\"device\":\"nvme\"}}}", "zero_optimization.offload_optimizer.device: got \"nvme\" with zero_optimization.stage 0, expected stage 3"},
        {"{\"zero_optimization\":{\"stage\":3,\"offload_optimizer\":{\"device\":\"nvme\"}}}", "zero_optimization.offload_optimizer.nvme_path: missing"},
        {"{\"zero_optimization\":{\"stage\":3,\"offload_param\":{\"device\":\"nvme\"}}}", "zero_optimization.offload_param.nvme_path: missing"},
        {"{\"zero_optimization\":{\"offload_optimizer\":{\"device\":\"gpu\"}}}", "zero_optimization.offload_optimizer.device: got \"gpu\", expected \"none\", \"cpu\" or \"nvme\""},
        {"{\"zero_optimization\":{\"offload_optimizer\":\"cpu\"}}", "zero_optimization.offload_optimizer: got \"cpu\", expected an object"},
        {"{\"zero_optimization\":{\"offload_optimizer\":{\"device\":\"cpu\",\"pin_memory\":\"y\"}}}", "zero_optimization.offload_optimizer.pin_memory: got \"y\""},
        {"{\"zero_optimization\":{\"plugin\":\"\"}}", "zero_optimization.plugin: got \"\", expected a non-empty string"},
        {"{\"zero_optimization\":{\"plugin\":3}}", "zero_optimization.plugin: got 3, expected a non-empty string"},
        {"{\"zero_optimization\":{\"strict_grads\":\"no\"}}", "zero_optimization.strict_grads: got \"no\""},
        {"{\"zero_optimization\":[1]}", "zero_optimization: got [1], expected an object"},
        {"{\"optimizer\":{\"type\":\"Adam\",\"params\":{\"lr\":-1}}}", "optimizer.params.lr: got -1, expected a number >= 0"},
        {"{\"optimizer\":{\"type\":\"Adam\",\"params\":{\"lr\":\"fast\"}}}", "optimizer.params.lr: got \"fast\", expected a number >= 0"},
        {"{\"optimizer\":{\"type\":\"Adam\",\"params\":{\"betas\":[0.9]}}}", "optimizer.params.betas: got [0.9], expected two numbers in [0, 1)"},
        {"{\"optimizer\":{\"type\":\"Adam\",\"params\":{\"betas\":[0.9,1.0]}}}", "optimizer.params.betas: got [0.9,1.0], expected two numbers in [0, 1)"},
        {"{\"optimizer\":{\"type\":\"AdamW\",\"params\":{\"betas\":[0.9,-0.1]}}}", "optimizer.params.betas: got [0.9,-0.1]"},
        {"{\"optimizer\":{\"type\":\"Lamb\",\"params\":{\"betas\":\"0.9,0.99\"}}}", "optimizer.params.betas: got \"0.9,0.99\""},
        {"{\"optimizer\":{\"type\":\"Adam\",\"params\":{\"betas\":[0.9,0.99,0.5]}}}", "optimizer.params.betas: got [0.9,0.99,0.5]"},
        {"{\"optimizer\":{\"type\":\"Adam\",\"params\":{\"eps\":0}}}", "optimizer.params.eps: got 0, expected a number > 0"},
        {"{\"optimizer\":{\"type\":\"Adam\",\"params\":{\"eps\":-1e-8}}}", "optimizer.params.eps: got -1e-"},
        {"{\"optimizer\":{\"type\":\"Adam\",\"params\":{\"weight_decay\":-0.5}}}", "optimizer.params.weight_decay: got -0.5, expected a number >= 0"},
        {"{\"optimizer\":{\"type\":\"Adam\",\"params\":{\"adam_w_mode\":\"yes\"}}}", "optimizer.params.adam_w_mode: got \"yes\", expected true or false"},
        {"{\"optimizer\":{\"type\":\"Adam\",\"params\":{\"amsgrad\":true}}}", "optimizer.params.amsgrad: got true, expected false"},
        {"{\"optimizer\":{\"type\":\"SGD\",\"params\":{\"momentum\":-0.9}}}", "optimizer.params.momentum: got -0.9, expected a number >= 0"},
        {"{\"optimizer\":{\"type\":\"SGD\",\"params\":{\"nesterov\":true}}}", "optimizer.params.nesterov: got true with momentum 0"},
        {"{\"optimizer\":{\"type\":\"ZeroOneAdam\",\"params\":{\"lr\":1e-3}}}", "optimizer.type: got \"ZeroOneAdam\", expected one of Adam, AdamW, SGD, Lion, Adagrad, Lamb, OneBitAdam: ZeroOneAdam is not implemented by libzero"},
        /* issue 33: the reason, and the alternative named */
        {"{\"optimizer\":{\"type\":\"ZeroOneAdam\"}}", "optimizer.type: got \"ZeroOneAdam\", expected one of Adam, AdamW, SGD, Lion, Adagrad, Lamb, OneBitAdam: ZeroOneAdam is not implemented by libzero (0/1 Adam (Lu et al. 2022) needs local steps -- parameters that differ between ranks until a compressed sync -- and a variance refreshed on an exponentially spaced schedule, which the plugin \"onebit\" does not do; run \"OneBitAdam\" with the plugin \"onebit\" (1-bit compressed momentum after a full-precision warm-up, one compressed all-reduce per step)"},
        {"{\"optimizer\":{\"type\":\"OneBitLamb\"}}", "optimizer.type: got \"OneBitLamb\", expected one of Adam, AdamW, SGD, Lion, Adagrad, Lamb, OneBitAdam: OneBitLamb is not implemented by libzero (1-bit LAMB (Li et al. 2021) needs LAMB's per-layer trust ratios frozen at the end of the warm-up and rescaled from the fresh variance after it, which the plugin \"onebit\" does not do; run \"OneBitAdam\" with the plugin \"onebit\" for compressed communication, or \"Lamb\" uncompressed)"},
        {"{\"optimizer\":{\"type\":\"OneBitAdam\",\"params\":{\"amsgrad\":true}}}", "optimizer.params.amsgrad: got true, expected false: 1-bit Adam"},
        {"{\"optimizer\":{\"type\":\"OneBitAdam\",\"params\":{\"freeze_step\":-1}}}", "optimizer.params.freeze_step: got -1, expected an integer >= 0"},
        {"{\"optimizer\":{\"type\":\"zerooneadam\"}}", "optimizer.type: got \"zerooneadam\""},
        {"{\"optimizer\":{\"type\":\"ONEBITLAMB\"}}", "optimizer.type: got \"ONEBITLAMB\""},
        {"{\"optimizer\":{\"type\":\"Adadelta\"}}", "optimizer.type: got \"Adadelta\", expected one of Adam, AdamW, SGD, Lion, Adagrad, Lamb"},
        {"{\"optimizer\":{\"type\":7}}", "optimizer.type: got 7, expected a non-empty string"},
        {"{\"optimizer\":{\"params\":{\"lr\":1}}}", "optimizer.type: missing"},
        {"{\"optimizer\":{\"type\":\"Adam\",\"params\":[1]}}", "optimizer.params: got [1], expected an object"},
        {"{\"optimizer\":{\"type\":\"Adam\",\"param_groups\":[{\"lr\":-1}]}}", "optimizer.param_groups[0].lr: got -1, expected a number >= 0"},
        {"{\"optimizer\":{\"type\":\"Adam\",\"param_groups\":[{},{\"weight_decay\":\"x\"}]}}", "optimizer.param_groups[1].weight_decay: got \"x\""},
        {"{\"optimizer\":{\"type\":\"Adam\",\"param_groups\":{}}}", "optimizer.param_groups: got {}, expected an array of objects"},
        {"{\"optimizer\":\"Adam\"}", "optimizer: got \"Adam\", expected an object"},
        {"{\"scheduler\":{\"type\":\"CosineAnnealing\"}}", "scheduler.type: got \"CosineAnnealing\", expected one of WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle, LRRangeTest"},
        {"{\"scheduler\":{\"params\":{}}}", "scheduler.type: missing"},
        {"{\"scheduler\":{\"type\":\"WarmupDecayLR\",\"params\":{}}}", "scheduler.params.total_num_steps: missing, expected an integer >= 0 for scheduler type WarmupDecayLR"},
        {"{\"scheduler\":{\"type\":\"WarmupCosineLR\"}}", "scheduler.params.total_num_steps: missing"},
        {"{\"scheduler\":{\"type\":\"OneCycle\",\"params\":{\"cycle_max_lr\":1}}}", "scheduler.params.cycle_min_lr: missing"},
        {"{\"scheduler\":{\"type\":\"WarmupLR\",\"params\":{\"warmup_type\":\"cubic\"}}}", "scheduler.params.warmup_type: got \"cubic\", expected \"log\" or \"linear\""},
        {"{\"scheduler\":{\"type\":\"WarmupLR\",\"params\":{\"warmup_num_steps\":-3}}}", "scheduler.params.warmup_num_steps: got -3, expected an integer >= 0"},
        {"{\"scheduler\":{\"type\":\"WarmupLR\",\"params\":{\"warmup_max_lr\":-0.1}}}", "scheduler.params.warmup_max_lr: got -0.1, expected a number >= 0"},
        {"{\"scheduler\":{\"type\":\"LRRangeTest\",\"params\":{\"lr_range_test_staircase\":\"no\"}}}", "scheduler.params.lr_range_test_staircase: got \"no\""},
        {"{\"gradient_clipping\":-1}", "gradient_clipping: got -1, expected a number >= 0"},
        {"{\"gradient_clipping\":\"1\"}", "gradient_clipping: got \"1\", expected a number >= 0"},
        {"{\"train_micro_batch_size_per_gpu\":0}", "train_micro_batch_size_per_gpu: got 0, expected a positive integer"},
        {"{\"train_batch_size\":-8}", "train_batch_size: got -8, expected a positive integer"},
        {"{\"gradient_accumulation_steps\":2.5}", "gradient_accumulation_steps: got 2.5, expected a positive integer"},
        {"{\"steps_per_print\":0}", "steps_per_print: got 0, expected a positive integer"},
        {"{\"comm_timeout\":-1}", "comm_timeout: got -1, expected a number of seconds >= 0 (0 = no limit)"},
        {"{\"comm_timeout\":\"30s\"}", "comm_timeout: got \"30s\", expected a number of seconds >= 0"},
        {"{\"gradient_predivide_factor\":0}", "gradient_predivide_factor: got 0, expected a number > 0"},
        {"{\"prescale_gradients\":\"false\"}", "prescale_gradients: got \"false\", expected true or false"},
        {"{\"wall_clock_breakdown\":[]}", "wall_clock_breakdown: got [], expected true or false"},
        {"{\"fp16\":{\"enabled\":true},\"bf16\":{\"enabled\":true}}", "bf16.enabled: got true while fp16.enabled is also true"},
        {"{\"fp16\":{\"enabled\":true},\"bfloat16\":{\"enabled\":true}}", "bfloat16.enabled: got true while fp16.enabled is also true"},
        {"{\"fp16\":{\"enabled\":\"true\"}}", "fp16.enabled: got \"true\", expected true or false"},
        {"{\"fp16\":{\"loss_scale\":-1}}", "fp16.loss_scale: got -1, expected a number >= 0"},
        {"{\"fp16\":{\"initial_scale_power\":200}}", "fp16.initial_scale_power: got 200, expected an integer 0..127"},
        {"{\"fp16\":{\"loss_scale_window\":0}}", "fp16.loss_scale_window: got 0, expected a positive integer"},
        {"{\"fp16\":{\"hysteresis\":0}}", "fp16.hysteresis: got 0, expected a positive integer"},
        {"{\"fp16\":{\"min_loss_scale\":0}}", "fp16.min_loss_scale: got 0, expected a number > 0"},
        {"{\"fp16\":{\"consecutive_hysteresis\":\"x\"}}", "fp16.consecutive_hysteresis: got \"x\""},
        {"{\"fp16\":\"on\"}", "fp16: got \"on\", expected an object"},
        {"{\"bf16\":true}", "bf16: got true, expected an object"},
        {"{\"pipeline\":{\"stages\":0}}", "pipeline.stages: got 0, expected a positive integer"},
        {"{\"pipeline\":{\"stages\":4},\"zero_optimization\":{\"stage\":2}}", "zero_optimization.stage: got 2 with pipeline.stages 4, expected 0 or 1"},
        {"{\"pipeline\":{\"stages\":2},\"zero_optimization\":{\"stage\":3,\"plugin\":\"stage3\"}}", "zero_optimization.stage: got 3 with pipeline.stages 2, expected 0 or 1"},
        {"[1,2]", "config text: expected a JSON object at the top level"},
        {"{\"train_batch_size\":1,\"train_batch_size\":2}", "config text: invalid JSON at line 1"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) parse_bad(cases[i].json, 1, cases[i].prefix);

    /* The pipeline refusal explains itself. */
    parse_bad("{\"pipeline\":{\"stages\":4},\"zero_optimization\":{\"stage\":2}}", 1, "zero_optimization.stage");
    CHECK_STR_CONTAINS(as_str(ERR), "every micro-batch");
    CHECK_STR_CONTAINS(as_str(ERR), "stage1-pp");
    parse_bad("{\"train_batch_size\":1,\"train_batch_size\":2}", 1, "config text");
    CHECK_STR_CONTAINS(as_str(ERR), "duplicate");
}

typedef struct good_case {
    const char *json;
    const char *plugin;
    int nwarn;           /* exact number of warnings */
    const char *warning; /* one of them must contain this (when nwarn > 0) */
} good_case;

static void test_good_table(void) {
    static const good_case cases[] = {
        {"{\"zero_optimization\":{\"stage\":2,\"reduce_bucket_size\":5e8}}", "stage2", 0, NULL},
        {"{\"zero_optimization\":{\"stage\":2,\"offload_optimizer\":{\"device\":\"cpu\",\"pin_memory\":true}}}", "offload", 0, NULL},
        {"{\"zero_optimization\":{\"stage\":1,\"offload_optimizer\":{\"device\":\"none\"}}}", "stage1", 0, NULL},
        {"{\"zero_optimization\":{\"stage\":1,\"offload_optimizer\":null}}", "stage1", 0, NULL},
        {"{\"pipeline\":{\"stages\":4},\"zero_optimization\":{\"stage\":1}}", "stage1-pp", 0, NULL},
        {"{\"pipeline\":{\"stages\":4}}", "stage1-pp", 0, NULL},
        {"{\"pipeline\":{\"stages\":1},\"zero_optimization\":{\"stage\":3}}", "stage3", 0, NULL},
        {"{\"pipeline\":{\"stages\":2,\"partition\":\"uniform\"},\"zero_optimization\":{\"stage\":1}}", "stage1-pp", 1,
         "pipeline.partition: belongs to the host's own pipeline"},
        {"{\"zero_optimization\":{\"stage\":2,\"plugin\":\"my-plugin\"}}", "my-plugin", 0, NULL},
        {"{\"zero_optimization\":{\"plugin\":\"/opt/x/libzero-plugin-foo.so\",\"offload_optimizer\":{\"device\":\"cpu\"}}}",
         "/opt/x/libzero-plugin-foo.so", 0, NULL},
        {"{\"zero_optimization\":{\"stage\":1,\"foo\":1}}", "stage1", 1, "zero_optimization.foo: unknown key, ignored"},
        {"{\"bogus\":1}", "stage0", 1, "bogus: unknown key, ignored"},
        /* (1.7.5) a misspelt key names the key it probably meant; a far one does not */
        {"{\"gradient_acumulation_steps\":4}", "stage0", 1,
         "gradient_acumulation_steps: unknown key, ignored (did you mean gradient_accumulation_steps?)"},
        {"{\"zero_optimization\":{\"stage\":2,\"overlap_com\":true}}", "stage2", 1,
         "zero_optimization.overlap_com: unknown key, ignored (did you mean overlap_comm?)"},
        {"{\"optimizer\":{\"type\":\"AdamW\",\"params\":{\"weight_decy\":0.1}}}", "stage0", 1,
         "optimizer.params.weight_decy: unknown key, ignored (did you mean weight_decay?)"},
        {"{\"zero_optimization\":{\"offload_param\":{\"device\":\"cpu\"}}}", "stage0", 1,
         "zero_optimization.offload_param: parameter offload is a stage-3 feature"},
        /* issue 20: stage 3 with offload runs in stage3 (host tiers), NVMe too */
        {"{\"zero_optimization\":{\"stage\":3,\"offload_optimizer\":{\"device\":\"cpu\"}}}", "stage3", 0, NULL},
        {"{\"zero_optimization\":{\"stage\":3,\"offload_param\":{\"device\":\"cpu\",\"pin_memory\":true}}}",
         "stage3", 0, NULL},
        {"{\"zero_optimization\":{\"stage\":3,\"offload_optimizer\":{\"device\":\"nvme\",\"nvme_path\":\"/x\","
         "\"buffer_count\":4,\"pipeline_read\":false}}}", "stage3", 0, NULL},
        {"{\"zero_optimization\":{\"stage\":3,\"offload_optimizer\":{\"device\":\"nvme\",\"nvme_path\":\"/x\","
         "\"buffer_count\":8}}}", "stage3", 1, "zero_optimization.offload_optimizer.buffer_count: libzero keeps three NVMe tiles"},
        /* offload_param nvme: the shard in a file (stage3_pwin.c), DeepSpeed's window keys used */
        {"{\"zero_optimization\":{\"stage\":3,\"offload_param\":{\"device\":\"nvme\",\"nvme_path\":\"/x\","
         "\"buffer_count\":5,\"buffer_size\":100000000}}}", "stage3", 0, NULL},
        {"{\"zero_optimization\":{\"stage\":3,\"offload_param\":{\"device\":\"nvme\",\"nvme_path\":\"/x\","
         "\"max_in_cpu\":5}}}", "stage3", 1,
         "zero_optimization.offload_param.max_in_cpu: libzero keeps no host cache of NVMe parameters"},
        {"{\"zero_optimization\":{\"stage\":2,\"offload_optimizer\":{\"device\":\"cpu\"}}}", "offload", 0, NULL},
        /* DeepSpeed's reduce_bucket_size 0: every gradient in a bucket of its own */
        {"{\"zero_optimization\":{\"reduce_bucket_size\":0}}", "stage0", 1,
         "zero_optimization.reduce_bucket_size: 0 puts every gradient in a bucket of its own"},
        /* "auto" sizes are resolved from the model at params_done: no warning */
        {"{\"zero_optimization\":{\"stage\":3,\"reduce_bucket_size\":\"auto\",\"stage3_prefetch_bucket_size\":\"auto\","
         "\"stage3_param_persistence_threshold\":\"auto\"}}", "stage3", 0, NULL},
        {"{\"zero_optimization\":{\"offload_param\":{\"device\":\"none\"}}}", "stage0", 0, NULL},
        {"{\"zero_optimization\":{\"zero_hpz_partition_size\":1,\"load_from_fp32_weights\":true}}", "stage0", 0, NULL},
        {"{\"zero_optimization\":{\"zero_hpz_partition_size\":8}}", "stage0", 1,
         "zero_optimization.zero_hpz_partition_size: read by the stage-3 plugin \"zeropp\" (plugins-contrib); ignored by plugin \"stage0\""},
        /* ZeRO++ (DeepSpeed's keys): stage 3 + any switch selects the contrib plugin "zeropp" */
        {"{\"zero_optimization\":{\"stage\":3,\"zero_quantized_weights\":true}}", "zeropp", 0, NULL},
        {"{\"zero_optimization\":{\"stage\":3,\"zero_quantized_gradients\":true,\"zero_quantized_gradients_bits\":4}}", "zeropp", 0, NULL},
        {"{\"zero_optimization\":{\"stage\":3,\"zero_hpz_partition_size\":8}}", "zeropp", 0, NULL},
        {"{\"zero_optimization\":{\"stage\":3,\"zero_quantized_weights\":false,\"zero_hpz_partition_size\":1}}", "stage3", 0, NULL},
        {"{\"zero_optimization\":{\"stage\":3,\"zero_quantized_weights\":true,\"plugin\":\"stage3\"}}", "stage3", 1,
         "zero_optimization.zero_quantized_weights: read by the stage-3 plugin \"zeropp\""},
        /* MiCS (DeepSpeed's key): stage 3 + mics_shard_size > 0 selects the contrib plugin "mics" */
        {"{\"zero_optimization\":{\"stage\":3,\"mics_shard_size\":2}}", "mics", 0, NULL},
        {"{\"zero_optimization\":{\"stage\":3,\"mics_shard_size\":-1}}", "stage3", 0, NULL},
        {"{\"zero_optimization\":{\"stage\":3,\"mics_shard_size\":2,\"plugin\":\"mics\"}}", "mics", 0, NULL},
        {"{\"zero_optimization\":{\"stage\":2,\"mics_shard_size\":2}}", "stage2", 1,
         "zero_optimization.mics_shard_size: read by the stage-3 plugin \"mics\" (plugins-contrib); ignored by plugin \"stage2\""},
        {"{\"zero_optimization\":{\"stage\":3,\"mics_shard_size\":4,\"plugin\":\"stage3\"}}", "stage3", 1,
         "ignored by plugin \"stage3\""},
        {"{\"zero_optimization\":{\"stage\":3,\"mics_shard_size\":4,\"offload_optimizer\":{\"device\":\"cpu\"}}}", "stage3", 1,
         /* stage 3 with offload runs stage3 with host-tier state (issue 20), not mics */
         "ignored by plugin \"stage3\""},
        {"{\"zero_optimization\":{\"stage\":3,\"stage3_gather_16bit_weights_on_model_save\":true}}", "stage3", 1,
         "zero_optimization.stage3_gather_16bit_weights_on_model_save: not implemented"},
        {"{\"zero_optimization\":{\"allgather_partitions\":false}}", "stage0", 1, "zero_optimization.allgather_partitions"},
        {"{\"zero_optimization\":{\"grad_hooks\":false}}", "stage0", 1, "zero_optimization.grad_hooks"},
        {"{\"amp\":{\"enabled\":false}}", "stage0", 0, NULL},
        {"{\"amp\":{\"enabled\":true,\"opt_level\":\"O1\"}}", "stage0", 1, "amp: not implemented by libzero"},
        {"{\"activation_checkpointing\":{\"partition_activations\":true}}", "stage0", 1, "activation_checkpointing: not implemented"},
        {"{\"tensorboard\":{\"enabled\":true},\"wandb\":{\"enabled\":true},\"flops_profiler\":{\"enabled\":true}}", "stage0", 3,
         "wandb: not implemented by libzero, ignored"},
        {"{\"zero_optimization\":{\"offload_optimizer\":{\"device\":\"cpu\",\"ratio\":0.3}}}", "offload", 1,
         "zero_optimization.offload_optimizer.ratio: partial offload"},
        {"{\"zero_optimization\":{\"offload_optimizer\":{\"device\":\"cpu\",\"ratio\":1.0,\"nvme_path\":null}}}", "offload", 0, NULL},
        {"{\"zero_optimization\":{\"offload_optimizer\":{\"device\":\"cpu\",\"color\":1}}}", "offload", 1,
         "zero_optimization.offload_optimizer.color: unknown key"},
        {"{\"zero_optimization\":true}", "stage1", 1, "zero_optimization: a boolean is deprecated"},
        /* libzero resolves "stage": "auto" itself (planner), without the HF placeholder warning */
        {"{\"zero_optimization\":{\"stage\":\"auto\",\"memory_budget_bytes\":8e9}}", "auto", 0, NULL},
        {"{\"zero_optimization\":{\"stage\":\"auto\",\"plugin\":\"stage2\"}}", "stage2", 0, NULL},
        {"{\"zero_optimization\":{\"cpu_offload\":true,\"stage\":2}}", "offload", 1, "zero_optimization.cpu_offload: deprecated"},
        {"{\"optimizer\":{\"type\":\"AdamW\",\"params\":{\"adam_w_mode\":false}}}", "stage0", 1, "optimizer.params.adam_w_mode"},
        {"{\"optimizer\":{\"type\":\"SGD\",\"params\":{\"betas\":[0.9,0.99]}}}", "stage0", 1,
         "optimizer.params.betas: not used by optimizer type SGD, ignored"},
        {"{\"optimizer\":{\"type\":\"Adam\",\"params\":{\"foo\":1}}}", "stage0", 1, "optimizer.params.foo: unknown key"},
        {"{\"optimizer\":{\"type\":\"Adam\",\"params\":{\"lr\":\"auto\",\"betas\":\"auto\"}}}", "stage0", 2,
         "optimizer.params.betas: \"auto\""},
        {"{\"optimizer\":{\"type\":\"Adam\",\"param_groups\":[{\"lr_scale\":0.5},{\"weight_decay\":0,\"x\":1}]}}", "stage0", 1,
         "optimizer.param_groups[1].x: unknown key"},
        {"{\"scheduler\":{\"type\":\"WarmupLR\",\"params\":{\"bogus\":1}}}", "stage0", 1,
         "scheduler.params.bogus: not a parameter of scheduler type WarmupLR"},
        {"{\"scheduler\":{\"type\":\"OneCycle\",\"params\":{\"cycle_min_lr\":1e-4,\"cycle_max_lr\":1e-3,\"cycle_momentum\":false}}}", "stage0", 0, NULL},
        {"{\"scheduler\":{\"type\":\"LRRangeTest\"}}", "stage0", 0, NULL},
        {"{\"scheduler\":{\"type\":\"WarmupDecayLR\",\"params\":{\"total_num_steps\":1e4,\"warmup_type\":\"linear\"}}}", "stage0", 0, NULL},
        {"{\"fp16\":{\"enabled\":true,\"auto_cast\":false}}", "stage0", 0, NULL},
        {"{\"fp16\":{\"enabled\":true,\"auto_cast\":true}}", "stage0", 1, "fp16.auto_cast: not implemented"},
        {"{\"fp16\":{\"enabled\":true,\"typo\":1}}", "stage0", 1, "fp16.typo: unknown key, ignored"},
        {"{\"gradient_clipping\":null,\"fp16\":null}", "stage0", 0, NULL},
        {"{\"sparse_gradients\":false,\"dump_state\":false,\"zero_allow_untested_optimizer\":true}", "stage0", 1,
         "zero_allow_untested_optimizer: has no effect in libzero"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        const good_case *g = &cases[i];
        zero__config *c = parse_ok(g->json, 1);
        if (!c) continue;
        CHECK(strcmp(zero__config_plugin(c), g->plugin) == 0, "%s: plugin %s, expected %s", g->json,
              zero__config_plugin(c), g->plugin);
        CHECK(W.count == g->nwarn, "%s: %d warnings, expected %d", g->json, W.count, g->nwarn);
        if (g->warning) CHECK(warn_capture_find(&W, g->warning) >= 0, "%s: no warning containing \"%s\"", g->json, g->warning);
        if (W.count != g->nwarn || (g->warning && warn_capture_find(&W, g->warning) < 0)) warn_capture_dump(&W, g->json);
        zero__config_free(c);
    }
}

/* Issue 20: "auto" sizes from the model (Hugging Face's hidden_size rules with
 * hidden = sqrt(largest param)), reduce_bucket_size 0 -> one-element buckets. */
static void test_auto_sizes(void) {
    zero__config *c = parse_ok("{\"zero_optimization\":{\"stage\":3,\"reduce_bucket_size\":\"auto\","
                               "\"stage3_prefetch_bucket_size\":\"auto\",\"stage3_param_persistence_threshold\":\"auto\"}}",
                               1);
    if (c) {
        char note[512];
        zero__config_resolve_auto(c, 1000 * 1000 + 7, note, sizeof note); /* hidden 1000 */
        const zero_run_config *rc = zero__config_run(c);
        CHECK_EQ_INT(rc->reduce_bucket_size, 1000000);
        CHECK_EQ_INT(rc->stage3_prefetch_bucket_size, 900000);
        CHECK_EQ_INT(rc->stage3_param_persistence_threshold, 10000);
        CHECK(strstr(note, "hidden size taken as 1000") != NULL, "note: %s", note);
        zero__config_resolve_auto(c, 4, note, sizeof note); /* once only */
        CHECK_EQ_INT(rc->reduce_bucket_size, 1000000);
        CHECK(note[0] == '\0', "second resolve: %s", note);
        zero__config_free(c);
    }
    c = parse_ok("{\"zero_optimization\":{\"stage\":2,\"reduce_bucket_size\":\"auto\"}}", 1);
    if (c) { /* only the keys written "auto" change */
        zero__config_resolve_auto(c, 100, NULL, 0);
        CHECK_EQ_INT(zero__config_run(c)->reduce_bucket_size, 100);
        CHECK_EQ_INT(zero__config_run(c)->stage3_param_persistence_threshold, 100000);
        zero__config_free(c);
    }
    c = parse_ok("{\"zero_optimization\":{\"reduce_bucket_size\":0,\"allgather_bucket_size\":0}}", 1);
    if (c) {
        CHECK_EQ_INT(zero__config_run(c)->reduce_bucket_size, 1);
        CHECK_EQ_INT(zero__config_run(c)->allgather_bucket_size, 1);
        zero__config_free(c);
    }
    /* the offload devices as the plugin reads them (path lookups) */
    c = parse_ok("{\"zero_optimization\":{\"stage\":3,\"cpu_offload\":true}}", 1);
    if (c) {
        const char *d = NULL;
        CHECK(zero__config_string(c, "zero_optimization.offload_optimizer.device", &d) == 1 && d &&
                  strcmp(d, "cpu") == 0,
              "legacy cpu_offload reads as device cpu: %s", d ? d : "(null)");
        CHECK(zero__config_string(c, "zero_optimization.offload_param.device", &d) == 1 && strcmp(d, "none") == 0,
              "offload_param.device: %s", d);
        CHECK(strcmp(zero__config_plugin(c), "stage3") == 0, "plugin %s", zero__config_plugin(c));
        zero__config_set_offload(c, NULL, NULL);
        CHECK(zero__config_string(c, "zero_optimization.offload_optimizer.device", &d) == 1 && strcmp(d, "none") == 0,
              "override: %s", d);
        CHECK_EQ_INT(zero__config_run(c)->offload_optimizer, 0);
        zero__config_free(c);
    }
}

/* Typed values that the good-config table does not look at. */
static void test_values(void) {
    zero__config *c;
    const zero_run_config *rc;
#define WITH(json, world) for (c = parse_ok(json, world), rc = c ? zero__config_run(c) : NULL; c; zero__config_free(c), c = NULL)
    WITH("{\"optimizer\":{\"type\":\"adam\",\"params\":{\"adam_w_mode\":false,\"weight_decay\":0.1}}}", 1) {
        CHECK_EQ_INT(rc->optim, ZERO_OPTIM_ADAM); /* L2 decay: DeepSpeed's adam_w_mode=false */
        CHECK_NEAR(rc->weight_decay, 0.1, 0);
    }
    WITH("{\"optimizer\":{\"type\":\"ADAMW\",\"params\":{\"adam_w_mode\":false}}}", 1) CHECK_EQ_INT(rc->optim, ZERO_OPTIM_ADAMW);
    WITH("{\"optimizer\":{\"type\":\"Adam\",\"params\":{\"bias_correction\":false}}}", 1) {
        CHECK_EQ_INT(rc->optim, ZERO_OPTIM_ADAMW);
        CHECK_EQ_INT(rc->bias_correction, 0);
    }
    /* OneBitAdam: DeepSpeed's OnebitAdam update is AdamW without bias
     * correction; freeze_step stays readable for the onebit plugin, which
     * is the only plugin that runs it (zero__config_optim_plugin) */
    WITH("{\"optimizer\":{\"type\":\"OnebitAdam\",\"params\":{\"lr\":3e-5,\"freeze_step\":400,\"weight_decay\":0.01,"
         "\"cuda_aware\":false,\"comm_backend_name\":\"nccl\"}}}", 1) {
        int64_t fs = 0;
        CHECK_EQ_INT(rc->optim, ZERO_OPTIM_ADAMW);
        CHECK_EQ_INT(rc->bias_correction, 0);
        CHECK_NEAR(rc->lr, 3e-5, 0);
        CHECK_EQ_INT(zero__config_int(c, "optimizer.params.freeze_step", &fs), 1);
        CHECK_EQ_INT(fs, 400);
        CHECK_STR_CONTAINS(zero__config_optim_plugin(c), "onebit");
    }
    WITH("{\"optimizer\":{\"type\":\"Adam\"}}", 1) CHECK(zero__config_optim_plugin(c) == NULL, "Adam needs no plugin");
    WITH("{\"optimizer\":{\"type\":\"sgd\",\"params\":{\"lr\":0.1,\"momentum\":0.9,\"nesterov\":true,\"weight_decay\":1e-4}}}", 1) {
        CHECK_EQ_INT(rc->optim, ZERO_OPTIM_SGD);
        CHECK_NEAR(rc->lr, 0.1, 0);
        CHECK_NEAR(rc->momentum, 0.9, 0);
        CHECK_EQ_INT(rc->nesterov, 1);
        CHECK_NEAR(rc->weight_decay, 1e-4, 0);
    }
    WITH("{\"optimizer\":{\"type\":\"Lion\",\"params\":{\"betas\":[0.95,0.98]}}}", 1) {
        CHECK_EQ_INT(rc->optim, ZERO_OPTIM_LION);
        CHECK_NEAR(rc->lr, 1e-3, 0);
        CHECK_NEAR(rc->beta1, 0.95, 0);
        CHECK_NEAR(rc->beta2, 0.98, 0);
    }
    WITH("{\"optimizer\":{\"type\":\"Adagrad\"}}", 1) {
        CHECK_EQ_INT(rc->optim, ZERO_OPTIM_ADAGRAD);
        CHECK_NEAR(rc->lr, 1e-2, 0);
        CHECK_NEAR(rc->eps, 1e-10, 0);
    }
    WITH("{\"optimizer\":{\"type\":\"LAMB\",\"params\":{\"lr\":2e-3}}}", 1) {
        CHECK_EQ_INT(rc->optim, ZERO_OPTIM_LAMB);
        CHECK_NEAR(rc->lr, 2e-3, 0);
        CHECK_EQ_INT(rc->bias_correction, 1);
    }
    WITH("{\"bf16\":{\"enabled\":true}}", 1) CHECK_EQ_INT(rc->model_dtype, ZERO_DTYPE_BF16);
    WITH("{\"bfloat16\":{\"enabled\":true}}", 1) CHECK_EQ_INT(rc->model_dtype, ZERO_DTYPE_BF16);
    WITH("{\"fp16\":{\"enabled\":false},\"bf16\":{\"enabled\":true}}", 1) CHECK_EQ_INT(rc->model_dtype, ZERO_DTYPE_BF16);
    WITH("{\"fp16\":{\"enabled\":true,\"loss_scale\":128,\"initial_scale_power\":12,\"loss_scale_window\":500,"
         "\"hysteresis\":4,\"consecutive_hysteresis\":true,\"min_loss_scale\":0.5}}", 1) {
        CHECK_EQ_INT(rc->model_dtype, ZERO_DTYPE_F16);
        CHECK_NEAR(rc->fp16_loss_scale, 128, 0);
        CHECK_EQ_INT(rc->fp16_initial_scale_power, 12);
        CHECK_EQ_INT(rc->fp16_loss_scale_window, 500);
        CHECK_EQ_INT(rc->fp16_hysteresis, 4);
        CHECK_EQ_INT(rc->fp16_consecutive_hysteresis, 1);
        CHECK_NEAR(rc->fp16_min_loss_scale, 0.5, 0);
    }
    WITH("{\"zero_optimization\":{\"stage\":3,\"contiguous_gradients\":false,\"reduce_scatter\":false,"
         "\"reduce_bucket_size\":2e8,\"allgather_bucket_size\":3e8,\"round_robin_gradients\":true,"
         "\"stage3_prefetch_bucket_size\":1e6,\"stage3_param_persistence_threshold\":0,"
         "\"stage3_max_live_parameters\":3e9,\"stage3_max_reuse_distance\":2e9,\"sub_group_size\":1e8,"
         "\"strict_grads\":true}}", 1) {
        CHECK_EQ_INT(rc->stage, 3);
        CHECK_EQ_INT(rc->contiguous_gradients, 0);
        CHECK_EQ_INT(rc->reduce_scatter, 0);
        CHECK_EQ_INT(rc->reduce_bucket_size, 200000000);
        CHECK_EQ_INT(rc->allgather_bucket_size, 300000000);
        CHECK_EQ_INT(rc->round_robin_gradients, 1);
        CHECK_EQ_INT(rc->stage3_prefetch_bucket_size, 1000000);
        CHECK_EQ_INT(rc->stage3_param_persistence_threshold, 0);
        CHECK_EQ_INT(rc->stage3_max_live_parameters, 3000000000LL);
        CHECK_EQ_INT(rc->stage3_max_reuse_distance, 2000000000LL);
        CHECK_EQ_INT(rc->sub_group_size, 100000000);
        CHECK_EQ_INT(rc->strict_grads, 1);
    }
    /* DeepSpeed's field names without the stage3_ prefix are aliases. */
    WITH("{\"zero_optimization\":{\"stage\":3,\"prefetch_bucket_size\":123,\"param_persistence_threshold\":7}}", 1) {
        CHECK_EQ_INT(rc->stage3_prefetch_bucket_size, 123);
        CHECK_EQ_INT(rc->stage3_param_persistence_threshold, 7);
    }
    WITH("{\"zero_optimization\":{\"stage\":2,\"offload_optimizer\":{\"device\":\"cpu\",\"pin_memory\":true}}}", 1) {
        CHECK_EQ_INT(rc->offload_optimizer, 1);
        CHECK_EQ_INT(rc->offload_pin_memory, 1);
        CHECK_EQ_INT(rc->stage, 2);
    }
    WITH("{\"zero_optimization\":{\"ignore_unused_parameters\":false}}", 1) CHECK_EQ_INT(rc->strict_grads, 1);
    WITH("{\"zero_optimization\":{\"ignore_unused_parameters\":false,\"strict_grads\":false}}", 1)
        CHECK_EQ_INT(rc->strict_grads, 0);
    WITH("{\"pipeline\":{\"stages\":4}}", 1) CHECK_EQ_INT(rc->pipeline_stages, 4);
    WITH("{\"gradient_clipping\":0.5,\"prescale_gradients\":true,\"gradient_predivide_factor\":4,"
         "\"wall_clock_breakdown\":true,\"steps_per_print\":7}", 1) {
        CHECK_NEAR(rc->gradient_clipping, 0.5, 0);
        CHECK_EQ_INT(rc->prescale_gradients, 1);
        CHECK_NEAR(rc->gradient_predivide_factor, 4, 0);
        CHECK_EQ_INT(rc->wall_clock_breakdown, 1);
        CHECK_EQ_INT(rc->steps_per_print, 7);
    }
    WITH("{\"scheduler\":{\"type\":\"warmupcosinelr\",\"params\":{\"total_num_steps\":100}}}", 1)
        CHECK(strcmp(zero__config_scheduler(c), "WarmupCosineLR") == 0, "canonical scheduler name %s",
              zero__config_scheduler(c));
#undef WITH
}

static void test_lookups(void) {
    zero__config *c = parse_ok(
        "{\"zero_optimization\":{\"stage\":2,\"my_plugin\":{\"depth\":3,\"ratio\":0.25,\"name\":\"x\",\"on\":true,"
        "\"big\":5e8,\"nothing\":null}},\"optimizer\":{\"type\":\"Adam\",\"params\":{\"betas\":[0.8,0.9]},"
        "\"param_groups\":[{\"lr_scale\":0.5},{\"weight_decay\":0.1}]}}",
        1);
    if (!c) return;
    int64_t i = 0;
    double d = 0;
    int b = 0;
    const char *s = NULL;
    CHECK(zero__config_int(c, "zero_optimization.stage", &i) == 1 && i == 2, "stage %lld", (long long)i);
    CHECK(zero__config_int(c, "zero_optimization.my_plugin.depth", &i) == 1 && i == 3, "depth");
    CHECK(zero__config_int(c, "zero_optimization.my_plugin.big", &i) == 1 && i == 500000000, "integral real as int");
    CHECK(zero__config_int(c, "zero_optimization.my_plugin.ratio", &i) == -1, "0.25 is not an int");
    CHECK(zero__config_double(c, "zero_optimization.my_plugin.ratio", &d) == 1 && d == 0.25, "ratio");
    CHECK(zero__config_double(c, "zero_optimization.my_plugin.depth", &d) == 1 && d == 3.0, "int as double");
    CHECK(zero__config_string(c, "zero_optimization.my_plugin.name", &s) == 1 && strcmp(s, "x") == 0, "name");
    CHECK(zero__config_string(c, "zero_optimization.my_plugin.depth", &s) == -1, "depth is not a string");
    CHECK(zero__config_bool(c, "zero_optimization.my_plugin.on", &b) == 1 && b == 1, "on");
    CHECK(zero__config_bool(c, "zero_optimization.my_plugin.name", &b) == -1, "name is not a bool");
    CHECK(zero__config_int(c, "zero_optimization.my_plugin.missing", &i) == 0, "absent");
    CHECK(zero__config_int(c, "zero_optimization.my_plugin.nothing", &i) == 0, "null reads as absent");
    CHECK(zero__config_int(c, "no_such_section.key", &i) == 0, "absent section");
    CHECK(zero__config_int(c, "zero_optimization.stage.sub", &i) == -1, "path through a scalar");
    CHECK(zero__config_int(c, "", &i) == 0, "empty path");
    CHECK(zero__config_int(c, "zero_optimization.", &i) == 0, "trailing dot");
    CHECK(zero__config_double(c, "optimizer.params.betas[1]", &d) == 1 && d == 0.9, "betas[1]");
    CHECK(zero__config_double(c, "optimizer.params.betas.0", &d) == 1 && d == 0.8, "betas.0");
    CHECK(zero__config_double(c, "optimizer.params.betas[2]", &d) == 0, "betas[2] out of range");
    CHECK(zero__config_double(c, "optimizer.param_groups[0].lr_scale", &d) == 1 && d == 0.5, "group 0");
    CHECK(zero__config_double(c, "optimizer.param_groups.1.weight_decay", &d) == 1 && d == 0.1, "group 1");
    CHECK(zero__config_double(c, "optimizer.param_groups[1].lr_scale", &d) == 0, "group 1 has no lr_scale");
    CHECK(zero__config_double(c, "optimizer[0]", &d) == 0, "index into an object");
    CHECK_NEAR(zero__config_double_or(c, "zero_optimization.my_plugin.ratio", 9.0), 0.25, 0);
    CHECK_NEAR(zero__config_double_or(c, "zero_optimization.my_plugin.absent", 9.0), 9.0, 0);
    CHECK_EQ_INT(zero__config_int_or(c, "zero_optimization.my_plugin.depth", 7), 3);
    CHECK_EQ_INT(zero__config_int_or(c, "zero_optimization.my_plugin.name", 7), 7);
    /* A custom plugin section is an unknown key to the core: warned once, values still readable. */
    CHECK_EQ_INT(W.count, 1);
    CHECK(warn_capture_find(&W, "zero_optimization.my_plugin: unknown key") >= 0, "my_plugin warning");
    zero__config_free(c);
    /* NULL config: everything absent. */
    CHECK(zero__config_int(NULL, "a", &i) == 0, "NULL config");
    CHECK(zero__config_run(NULL) == NULL, "NULL run");
    zero__config_free(NULL);
}

static void test_files(void) {
    char path[] = "/tmp/zero-config-test-XXXXXX";
    zero__config *c = NULL;
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    if (fd < 0) return;
    /* Error on line 3, column 16 (a missing value). */
    const char *bad = "{\n  \"train_batch_size\": 8,\n  \"fp16\": {\"enabled\": }\n}\n";
    CHECK(write(fd, bad, strlen(bad)) == (ssize_t)strlen(bad), "write");
    close(fd);
    zero_status s = zero__config_parse(NULL, path, 1, &c, NULL, NULL, ERR, sizeof ERR);
    CHECK_EQ_INT(s, ZERO_ERR_CONFIG);
    CHECK(c == NULL, "handle on invalid JSON");
    CHECK(strncmp(ERR, path, strlen(path)) == 0, "error \"%s\" does not name the file", ERR);
    CHECK_STR_CONTAINS(as_str(ERR), "invalid JSON at line 3, column");
    /* Text errors carry Jansson's line/column too. */
    s = zero__config_parse("{\"a\": 1,\n \"b\": [1, 2,,]}", NULL, 1, &c, NULL, NULL, ERR, sizeof ERR);
    CHECK_EQ_INT(s, ZERO_ERR_CONFIG);
    CHECK_STR_CONTAINS(as_str(ERR), "config text: invalid JSON at line 2, column");

    /* A good file loads. */
    FILE *f = fopen(path, "w");
    CHECK(f != NULL, "fopen");
    if (f) {
        fputs("{\"train_batch_size\": 16, \"train_micro_batch_size_per_gpu\": 2, \"zero_optimization\": {\"stage\": 2}}", f);
        fclose(f);
        s = zero__config_parse(NULL, path, 4, &c, NULL, NULL, ERR, sizeof ERR);
        CHECK(s == ZERO_OK, "good file: %s", ERR);
        if (s == ZERO_OK) {
            CHECK_EQ_INT(zero__config_run(c)->grad_accum_steps, 2);
            CHECK(strcmp(zero__config_plugin(c), "stage2") == 0, "plugin");
            zero__config_free(c);
            c = NULL;
        }
    }
    /* Text wins over path when both are given. */
    s = zero__config_parse("{\"zero_optimization\":{\"stage\":1}}", path, 4, &c, NULL, NULL, ERR, sizeof ERR);
    CHECK(s == ZERO_OK && c && zero__config_run(c)->stage == 1, "text over path");
    zero__config_free(c);
    c = NULL;
    unlink(path);

    /* Missing file: ZERO_ERR_IO naming the path. */
    s = zero__config_parse(NULL, path, 1, &c, NULL, NULL, ERR, sizeof ERR);
    CHECK_EQ_INT(s, ZERO_ERR_IO);
    CHECK(c == NULL, "handle on missing file");
    CHECK_STR_CONTAINS(as_str(ERR), path);
    CHECK_STR_CONTAINS(as_str(ERR), "No such file");
    /* A directory is not a config file. */
    s = zero__config_parse(NULL, "/", 1, &c, NULL, NULL, ERR, sizeof ERR);
    CHECK(s == ZERO_ERR_IO || s == ZERO_ERR_CONFIG, "directory: status %d", s);
    CHECK(c == NULL, "handle on directory");
    /* NULL err buffer is allowed. */
    s = zero__config_parse("{\"zero_optimization\":{\"stage\":9}}", NULL, 1, &c, NULL, NULL, NULL, 0);
    CHECK_EQ_INT(s, ZERO_ERR_CONFIG);
}

/* data_types.grad_accum_dtype / communication_data_type (config_dtypes.c):
 * fp32 by default whatever the model dtype, the model dtype on request,
 * communication following the accumulation unless set; a 16-bit wire only
 * with fp32 accumulation (issue 14), no other mix. */
static void test_grad_dtypes(void) {
    static const struct {
        const char *json;
        zero_dtype accum, comm;
    } good[] = {
        {"{}", ZERO_DTYPE_F32, ZERO_DTYPE_F32},
        {"{\"fp16\":{\"enabled\":true}}", ZERO_DTYPE_F32, ZERO_DTYPE_F32},
        {"{\"bf16\":{\"enabled\":true}}", ZERO_DTYPE_F32, ZERO_DTYPE_F32},
        {"{\"fp16\":{\"enabled\":true},\"data_types\":{\"grad_accum_dtype\":\"fp16\"}}", ZERO_DTYPE_F16,
         ZERO_DTYPE_F16},
        {"{\"bf16\":{\"enabled\":true},\"data_types\":{\"grad_accum_dtype\":\"bf16\"},"
         "\"communication_data_type\":\"bfp16\"}",
         ZERO_DTYPE_BF16, ZERO_DTYPE_BF16},
        {"{\"bf16\":{\"enabled\":true},\"data_types\":{\"grad_accum_dtype\":\"fp32\"},"
         "\"communication_data_type\":\"fp32\"}",
         ZERO_DTYPE_F32, ZERO_DTYPE_F32},
        {"{\"communication_data_type\":null}", ZERO_DTYPE_F32, ZERO_DTYPE_F32},
        /* issue 14: fp32 accumulation over a 16-bit wire, any model dtype */
        {"{\"fp16\":{\"enabled\":true},\"communication_data_type\":\"fp16\"}", ZERO_DTYPE_F32, ZERO_DTYPE_F16},
        {"{\"communication_data_type\":\"bf16\"}", ZERO_DTYPE_F32, ZERO_DTYPE_BF16},
        {"{\"bf16\":{\"enabled\":true},\"communication_data_type\":\"fp16\"}", ZERO_DTYPE_F32, ZERO_DTYPE_F16},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        zero__config *c = parse_ok(good[i].json, 1);
        if (!c) continue;
        const zero_run_config *rc = zero__config_run(c);
        CHECK(rc->grad_accum_dtype == good[i].accum && rc->comm_dtype == good[i].comm,
              "%s: accum %d comm %d, expected %d %d", good[i].json, rc->grad_accum_dtype, rc->comm_dtype,
              good[i].accum, good[i].comm);
        CHECK(W.count == 0, "%s: %d warnings (the keys are implemented now)", good[i].json, W.count);
        zero__config_free(c);
    }
    parse_bad("{\"data_types\":{\"grad_accum_dtype\":\"fp16\"}}", 1,
              "data_types.grad_accum_dtype: got \"fp16\" with a fp32 model, expected fp32 or fp32");
    parse_bad("{\"fp16\":{\"enabled\":true},\"data_types\":{\"grad_accum_dtype\":\"bf16\"}}", 1,
              "data_types.grad_accum_dtype: got \"bf16\" with a fp16 model");
    parse_bad("{\"data_types\":{\"grad_accum_dtype\":\"int8\"}}", 1,
              "data_types.grad_accum_dtype: got \"int8\", expected one of fp32, fp16, bf16");
    parse_bad("{\"fp16\":{\"enabled\":true},\"data_types\":{\"grad_accum_dtype\":\"fp16\"},"
              "\"communication_data_type\":\"fp32\"}",
              1, "communication_data_type: got \"fp32\" while data_types.grad_accum_dtype is \"fp16\"");
    parse_bad("{\"communication_data_type\":7}", 1, "communication_data_type: got 7");
}

/* The engine sizes the data-parallel group from zero__config_peek_pipeline_stages
 * before the real parse: both must read pipeline.stages alike (tests/fuzz
 * found "stages": 2.0 peeked as 1 while the parse ran 2 stages). */
static void test_peek_pipeline(void) {
    static const struct {
        const char *json;
        int stages;
    } t[] = {{"{}", 1},
             {"{\"pipeline\":{\"stages\":3}}", 3},
             {"{\"pipeline\":{\"stages\":2.0}}", 2},
             {"{\"pipeline\":{\"stages\":2e0},\"zero_optimization\":{\"stage\":1}}", 2},
             {"{\"pipeline\":{\"stages\":\"auto\"}}", 1}};
    for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
        const int peek = zero__config_peek_pipeline_stages(t[i].json, NULL);
        CHECK(peek == t[i].stages, "peek of %s: %d, expected %d", t[i].json, peek, t[i].stages);
        zero__config *c = parse_ok(t[i].json, 4);
        if (c) CHECK(zero__config_run(c)->pipeline_stages == peek, "parse of %s: %d stages, peek %d", t[i].json,
                     (int)zero__config_run(c)->pipeline_stages, peek);
        zero__config_free(c);
    }
    CHECK(zero__config_peek_pipeline_stages("{\"pipeline\":{\"stages\":2.5}}", NULL) == 1, "2.5 stages peeked");
}

int main(void) {
    test_peek_pipeline();
    test_grad_dtypes();
    test_defaults();
    test_user_config();
    test_batch();
    test_bad_table();
    test_good_table();
    test_auto_sizes();
    test_values();
    test_lookups();
    test_files();
    return check_finish();
}
