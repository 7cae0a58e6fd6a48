/* Every DeepSpeed config of a directory has a written-down expected outcome
 * here: it loads, with exactly the warnings listed, for a world size that
 * makes its batch sizes consistent; or it fails with an error naming the
 * key.  A file in the directory without a row (or a row without a file)
 * fails the test, so a table cannot silently drift from its data.
 *
 * Two sets: `shared` is the real DeepSpeedExamples files in
 * ../shared/ds-configs, beside the source tree but not part of it (a plain
 * clone has no ../shared: the test then exits 77, which ctest reports as
 * skipped); `local` is tests/config/ds-files, written for this repository,
 * covering the same keys and outcomes, so a clone tests them too.
 *
 * usage: test_config_ds_files <dir> shared|local */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "config.h"
#include "warn_capture.h"

/* CHECK_STR_CONTAINS tests its argument for NULL; an array never is. */
static const char *as_str(const char *s) { return s; }

#define MAX_WARN 4
typedef struct ds_case {
    const char *file;
    int world;               /* chosen so that train = micro * gas * world */
    const char *error;       /* NULL: must load; else the error must start with this (key path and value) */
    const char *plugin;      /* expected plugin when it loads */
    int64_t train, micro, gas;
    zero_dtype dtype;
    const char *warnings[MAX_WARN]; /* all warnings expected (substrings); no others allowed */
} ds_case;

#define F32 ZERO_DTYPE_F32
#define F16 ZERO_DTYPE_F16
#define COMPRESSION "compression_training: not implemented by libzero"
#define MICRO_AUTO "train_micro_batch_size_per_gpu: \"auto\""
/* A row for a file that must fail with an error starting with `prefix`. */
#define REFUSED(file, world, prefix) {file, world, prefix, NULL, 0, 0, 0, F32, {NULL}}
#define ZERO_ONE_ADAM "optimizer.type: got \"ZeroOneAdam\""
#define ONE_BIT_LAMB "optimizer.type: got \"OneBitLamb\""

static const ds_case shared_cases[] = {
    /* train 32 = micro 32: one rank, no accumulation. */
    {"compression_bert_config_XTC_ds_config_layer_reduction_W1Q8_fp32.json", 1, NULL, "stage0", 32, 32, 1, F32, {COMPRESSION}},
    {"compression_bert_config_XTC_ds_config_layer_reduction_fp16.json", 1, NULL, "stage0", 32, 32, 1, F32, {COMPRESSION}},
    {"compression_bert_config_ZeroQuant_ds_config_W48A8_Qgroup48_lkd_fp32.json", 1, NULL, "stage0", 32, 32, 1, F32, {COMPRESSION}},
    {"compression_bert_config_ZeroQuant_ds_config_W8A8_Qgroup48_fp32.json", 1, NULL, "stage0", 32, 32, 1, F32, {COMPRESSION}},
    {"compression_bert_config_ds_config.json", 1, NULL, "stage0", 32, 32, 1, F16, {COMPRESSION}},
    {"compression_bert_config_ds_config_W1A8_Qgroup64_fp16.json", 1, NULL, "stage0", 32, 32, 1, F16, {COMPRESSION}},
    {"compression_bert_config_ds_config_W1A8_Qgroup64_fp32.json", 1, NULL, "stage0", 32, 32, 1, F32, {COMPRESSION}},
    {"compression_cifar_config_ds_config.json", 1, NULL, "stage0", 32, 32, 1, F16, {NULL}},
    /* train 8, micro 4: two ranks, no accumulation. */
    {"compression_gpt2_config_ds_config_W4or8A8_Qgroup64_fp32.json", 2, NULL, "stage0", 8, 4, 1, F32, {COMPRESSION}},
    {"compression_gpt2_config_ds_config_W8A8_Qgroup64_fp16.json", 2, NULL, "stage0", 8, 4, 1, F16, {COMPRESSION}},
    {"compression_gpt2_config_ds_config_W8A8_Qgroup64_fp32.json", 2, NULL, "stage0", 8, 4, 1, F32, {COMPRESSION}},
    /* 1-bit Adam: parses (train 96 = 3 * 8 * 4 keeps the batch check quiet); the engine then refuses
     * any plugin but "onebit" (plugins-contrib/onebit), which refuses fp16 (tests/contrib). */
    {"training_BingBertSquad_1-bit_adam_mpi_infiniband_deepspeed_onebitadam_bsz96_config.json", 4, NULL, "stage0", 96, 3, 8, F16, {NULL}},
    {"training_BingBertSquad_1-bit_adam_nccl_deepspeed_onebitadam_bsz96_config.json", 4, NULL, "stage0", 96, 3, 8, F16, {NULL}},
    /* Hugging Face autotuning templates: micro "auto" -> default 1. */
    {"training_autotuning_hf_bert-base_ds_config_tune.json", 1, NULL, "stage0", 1, 1, 1, F32,
     {MICRO_AUTO, "autotuning: not implemented by libzero"}},
    {"training_autotuning_hf_distilbert_ds_config_tune.json", 1, NULL, "stage0", 1, 1, 1, F32,
     {MICRO_AUTO, "autotuning: not implemented by libzero"}},
    {"training_autotuning_hf_dsconfigs_ds_config_fp16_z0.json", 2, NULL, "stage0", 2, 1, 1, F16, {MICRO_AUTO}},
    {"training_autotuning_hf_dsconfigs_ds_config_fp16_z1.json", 2, NULL, "stage1", 2, 1, 1, F16, {MICRO_AUTO}},
    {"training_autotuning_hf_dsconfigs_ds_config_fp16_z2.json", 2, NULL, "stage2", 2, 1, 1, F16, {MICRO_AUTO}},
    {"training_autotuning_hf_dsconfigs_ds_config_fp16_z3.json", 2, NULL, "stage3", 2, 1, 1, F16, {MICRO_AUTO}},
    {"training_autotuning_hf_dsconfigs_ds_config_z1.json", 2, NULL, "stage1", 2, 1, 1, F32, {MICRO_AUTO}},
    {"training_autotuning_hf_dsconfigs_ds_config_z2.json", 2, NULL, "stage2", 2, 1, 1, F32, {MICRO_AUTO}},
    {"training_autotuning_hf_dsconfigs_ds_config_z3.json", 2, NULL, "stage3", 2, 1, 1, F32, {MICRO_AUTO}},
    /* 0/1 Adam and 1-bit Adam: refused (train 4096 = 16 * 16 * 16). */
    REFUSED("training_bing_bert_01_adam_mpi_ethernet_deepspeed_bsz4k_01adam_config_seq128_mpi_ethernet.json", 16, ZERO_ONE_ADAM),
    REFUSED("training_bing_bert_01_adam_mpi_ethernet_deepspeed_bsz4k_01adam_config_seq512_mpi_ethernet.json", 16, ZERO_ONE_ADAM),
    REFUSED("training_bing_bert_01_adam_mpi_infiniband_deepspeed_bsz4k_01adam_config_seq128_mpi_infiniband.json", 16, ZERO_ONE_ADAM),
    REFUSED("training_bing_bert_01_adam_mpi_infiniband_deepspeed_bsz4k_01adam_config_seq512_mpi_infiniband.json", 16, ZERO_ONE_ADAM),
    REFUSED("training_bing_bert_01_adam_nccl_deepspeed_bsz4k_01adam_config_seq128_nccl.json", 16, ZERO_ONE_ADAM),
    REFUSED("training_bing_bert_01_adam_nccl_deepspeed_bsz4k_01adam_config_seq512_nccl.json", 16, ZERO_ONE_ADAM),
    {"training_bing_bert_1-bit_adam_mpi_infiniband_deepspeed_bsz4k_onebitadam_config_seq128_mpi_infiniband.json", 16, NULL, "stage0", 4096, 16, 16, F16, {NULL}},
    {"training_bing_bert_1-bit_adam_nccl_deepspeed_bsz4k_onebitadam_config_seq128_nccl.json", 16, NULL, "stage0", 4096, 16, 16, F16, {NULL}},
    /* 1-bit Lamb: refused (32768 = 16 * 32 * 64, 65536 = 64 * 16 * 64). */
    REFUSED("training_bing_bert_1-bit_lamb_mpi_ethernet_deepspeed_bsz32k_onebitlamb_config_seq512_mpi_ethernet.json", 64, ONE_BIT_LAMB),
    REFUSED("training_bing_bert_1-bit_lamb_mpi_ethernet_deepspeed_bsz64k_onebitlamb_config_seq128_mpi_ethernet.json", 64, ONE_BIT_LAMB),
    REFUSED("training_bing_bert_1-bit_lamb_mpi_infiniband_deepspeed_bsz32k_onebitlamb_config_seq512_mpi_infiniband.json", 64, ONE_BIT_LAMB),
    REFUSED("training_bing_bert_1-bit_lamb_nccl_deepspeed_bsz32k_onebitlamb_config_seq512_nccl.json", 64, ONE_BIT_LAMB),
    /* Plain Lamb loads: 32768 = 16 * 32 * 64. */
    {"training_bing_bert_deepspeed_bsz32k_lamb_config_seq512.json", 64, NULL, "stage0", 32768, 16, 32, F16, {NULL}},
    {"training_bing_bert_deepspeed_bsz4k_progressive_layer_drop_config_seq128.json", 16, NULL, "stage0", 4096, 16, 16, F16,
     {"progressive_layer_drop: not implemented by libzero"}},
    {"training_data_efficiency_gpt_finetuning_config_ds_config_gpt_base_random_ltd.json", 2, NULL, "stage0", 4, 2, 1, F32,
     {"data_efficiency: not implemented by libzero"}},
    {"training_data_efficiency_vit_finetuning_config_ds_config_imagenet_random_ltd.json", 4, NULL, "stage0", 256, 16, 4, F32,
     {"data_efficiency: not implemented by libzero"}},
    /* train only: micro = 64 / 8, gas 1. */
    {"training_gan_gan_deepspeed_config.json", 8, NULL, "stage0", 64, 8, 1, F32, {NULL}},
    /* train 256 with gas 1 on 8 ranks: micro 32. */
    {"training_imagenet_config_ds_fp16_config.json", 8, NULL, "stage0", 256, 32, 1, F16,
     {"zero_allow_untested_optimizer: has no effect", "fp16.auto_cast: not implemented by libzero",
      "cuda_visible_devices: unknown key"}},
    {"training_imagenet_config_ds_fp16_z1_config.json", 8, NULL, "stage1", 256, 32, 1, F16,
     {"zero_allow_untested_optimizer: has no effect", "fp16.auto_cast: not implemented by libzero",
      "cuda_visible_devices: unknown key"}},
};

/* tests/config/ds-files: the same keys and outcomes as the shared files. */
static const ds_case local_cases[] = {
    {"compression_fp16_stage0.json", 2, NULL, "stage0", 8, 4, 1, F16, {COMPRESSION}},
    {"autotuning_micro_auto.json", 1, NULL, "stage0", 1, 1, 1, F32,
     {MICRO_AUTO, "autotuning: not implemented by libzero"}},
    {"hf_fp16_z3_auto.json", 2, NULL, "stage3", 2, 1, 1, F16, {MICRO_AUTO}},
    {"hf_z1_auto.json", 2, NULL, "stage1", 2, 1, 1, F32, {MICRO_AUTO}},
    {"onebit_adam.json", 4, NULL, "stage0", 96, 3, 8, F16, {NULL}},
    REFUSED("zero_one_adam.json", 16, ZERO_ONE_ADAM),
    REFUSED("onebit_lamb.json", 64, ONE_BIT_LAMB),
    {"lamb_fp16.json", 64, NULL, "stage0", 32768, 16, 32, F16, {NULL}},
    {"progressive_layer_drop.json", 16, NULL, "stage0", 4096, 16, 16, F16,
     {"progressive_layer_drop: not implemented by libzero"}},
    {"data_efficiency.json", 4, NULL, "stage0", 256, 16, 4, F32, {"data_efficiency: not implemented by libzero"}},
    {"gan_adam.json", 8, NULL, "stage0", 64, 8, 1, F32, {NULL}},
    {"imagenet_fp16_z1.json", 8, NULL, "stage1", 256, 32, 1, F16,
     {"zero_allow_untested_optimizer: has no effect", "fp16.auto_cast: not implemented by libzero",
      "cuda_visible_devices: unknown key"}},
};

typedef struct ds_set {
    const char *name;
    const ds_case *cases;
    size_t ncases;
    const char *lamb, *gan, *pld; /* the files spot_checks reads */
} ds_set;

static const ds_set sets[] = {
    {"shared", shared_cases, sizeof shared_cases / sizeof shared_cases[0],
     "training_bing_bert_deepspeed_bsz32k_lamb_config_seq512.json", "training_gan_gan_deepspeed_config.json",
     "training_bing_bert_deepspeed_bsz4k_progressive_layer_drop_config_seq128.json"},
    {"local", local_cases, sizeof local_cases / sizeof local_cases[0], "lamb_fp16.json", "gan_adam.json",
     "progressive_layer_drop.json"},
};

static void run_case(const char *dir, const ds_case *c) {
    char path[4096], err[1024];
    warn_capture w;
    zero__config *cfg = NULL;
    zero_status s;
    int expected_warnings = 0;

    snprintf(path, sizeof path, "%s/%s", dir, c->file);
    warn_capture_reset(&w);
    s = zero__config_parse(NULL, path, c->world, &cfg, warn_capture_fn, &w, err, sizeof err);
    if (c->error) {
        CHECK(s == ZERO_ERR_CONFIG, "%s: status %d, expected ZERO_ERR_CONFIG (%s)", c->file, s, err);
        CHECK(cfg == NULL, "%s: config returned on error", c->file);
        CHECK(strncmp(err, c->error, strlen(c->error)) == 0, "%s: error \"%s\" does not start with \"%s\"", c->file,
              err, c->error);
        CHECK_STR_CONTAINS(as_str(err), "not implemented by libzero");
        zero__config_free(cfg);
        return;
    }
    CHECK(s == ZERO_OK, "%s: status %d: %s", c->file, s, err);
    if (s != ZERO_OK) return;
    const zero_run_config *rc = zero__config_run(cfg);
    CHECK(strcmp(zero__config_plugin(cfg), c->plugin) == 0, "%s: plugin %s, expected %s", c->file,
          zero__config_plugin(cfg), c->plugin);
    CHECK(rc->train_batch_size == c->train && rc->micro_batch_per_gpu == c->micro && rc->grad_accum_steps == c->gas,
          "%s: batch %lld = %lld * %lld * %d, expected %lld = %lld * %lld", c->file, (long long)rc->train_batch_size,
          (long long)rc->micro_batch_per_gpu, (long long)rc->grad_accum_steps, c->world, (long long)c->train,
          (long long)c->micro, (long long)c->gas);
    CHECK(rc->model_dtype == c->dtype, "%s: dtype %d, expected %d", c->file, rc->model_dtype, c->dtype);
    for (int i = 0; i < MAX_WARN && c->warnings[i]; ++i) {
        ++expected_warnings;
        CHECK(warn_capture_find(&w, c->warnings[i]) >= 0, "%s: no warning containing \"%s\"", c->file, c->warnings[i]);
    }
    CHECK(w.count == expected_warnings, "%s: %d warnings, expected %d", c->file, w.count, expected_warnings);
    if (w.count != expected_warnings) warn_capture_dump(&w, c->file);
    zero__config_free(cfg);
}

/* Specific values from a few files, beyond the table's columns. */
static void spot_checks(const char *dir, const ds_set *set) {
    char path[4096], err[1024];
    zero__config *cfg = NULL;
    snprintf(path, sizeof path, "%s/%s", dir, set->lamb);
    if (zero__config_parse(NULL, path, 64, &cfg, NULL, NULL, err, sizeof err) == ZERO_OK) {
        const zero_run_config *rc = zero__config_run(cfg);
        double d = 0;
        CHECK_EQ_INT(rc->optim, ZERO_OPTIM_LAMB);
        CHECK_EQ_INT(rc->bias_correction, 0);
        CHECK_NEAR(rc->lr, 2e-3, 1e-15);
        CHECK_NEAR(rc->weight_decay, 0.01, 1e-15);
        CHECK_NEAR(rc->gradient_clipping, 1.0, 0);
        CHECK_EQ_INT(rc->steps_per_print, 1000);
        CHECK(zero__config_double(cfg, "optimizer.params.max_coeff", &d) == 1 && d == 0.3, "max_coeff %g", d);
        zero__config_free(cfg);
    } else {
        CHECK(0, "lamb config: %s", err);
    }
    snprintf(path, sizeof path, "%s/%s", dir, set->gan);
    if (zero__config_parse(NULL, path, 8, &cfg, NULL, NULL, err, sizeof err) == ZERO_OK) {
        const zero_run_config *rc = zero__config_run(cfg);
        CHECK_EQ_INT(rc->optim, ZERO_OPTIM_ADAMW); /* DeepSpeed "Adam": adam_w_mode defaults to true */
        CHECK_NEAR(rc->beta1, 0.5, 0);
        CHECK_NEAR(rc->beta2, 0.999, 0);
        CHECK_NEAR(rc->lr, 0.0002, 1e-18);
        zero__config_free(cfg);
    } else {
        CHECK(0, "gan config: %s", err);
    }
    snprintf(path, sizeof path, "%s/%s", dir, set->pld);
    if (zero__config_parse(NULL, path, 16, &cfg, NULL, NULL, err, sizeof err) == ZERO_OK) {
        const zero_run_config *rc = zero__config_run(cfg);
        CHECK_EQ_INT(rc->prescale_gradients, 1);
        CHECK_NEAR(rc->gradient_predivide_factor, 8.0, 0);
        zero__config_free(cfg);
    } else {
        CHECK(0, "pld config: %s", err);
    }
}

/* ctest's SKIP_RETURN_CODE for this test (tests/config/CMakeLists.txt). */
#define EXIT_SKIP 77

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : NULL;
    const char *set_name = argc > 2 ? argv[2] : "shared";
    const ds_set *set = NULL;
    DIR *d;
    struct dirent *ent;
    int json_files = 0;

    for (size_t i = 0; i < sizeof sets / sizeof sets[0]; ++i)
        if (strcmp(sets[i].name, set_name) == 0) set = &sets[i];
    if (!set) {
        fprintf(stderr, "FATAL: unknown set %s (shared or local)\n", set_name);
        return 1;
    }
    if (!dir || !(d = opendir(dir))) {
        if (set == &sets[0]) {
            /* ../shared is not part of the repository: a plain clone has
             * none.  Say so and let ctest report the test as skipped; the
             * local set covers the same keys. */
            printf("SKIP: DeepSpeed config directory %s is absent (../shared/ds-configs lives beside the source "
                   "tree, not in it); config_ds_local covers the same keys\n",
                   dir ? dir : "(no argument)");
            return EXIT_SKIP;
        }
        fprintf(stderr, "FATAL: config directory %s is missing\n", dir ? dir : "(no argument)");
        return 1;
    }
    /* Every file has a row. */
    while ((ent = readdir(d)) != NULL) {
        size_t n = strlen(ent->d_name);
        int found = 0;
        if (n < 5 || strcmp(ent->d_name + n - 5, ".json") != 0) continue;
        ++json_files;
        for (size_t i = 0; i < set->ncases; ++i) found |= strcmp(set->cases[i].file, ent->d_name) == 0;
        CHECK(found, "%s/%s has no row in this test's table: add its expected outcome", dir, ent->d_name);
    }
    closedir(d);
    CHECK(json_files > 0, "no .json files in %s", dir);
    CHECK(json_files == (int)set->ncases, "%d files in %s, %d rows in the table", json_files, dir, (int)set->ncases);

    for (size_t i = 0; i < set->ncases; ++i) run_case(dir, &set->cases[i]);
    spot_checks(dir, set);
    return check_finish();
}
