/* Command-line flags and config reading for the demo (see options.h). */
#include "options.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zero.h"

static void usage(void) {
    printf("usage: zero-demo [--config FILE] [--plugin NAME] [--steps N] [--seed S]\n"
           "                 [--summary FILE] [--data PATH] [--device cpu|cuda] [--comm auto|mpi]\n"
           "                 [--quiet] [--no-validation]\n"
           "                 [--save-dir DIR [--save-every K] [--keep-last K]] [--resume DIR | --init-from DIR]\n"
           "Trains a character-level MLP language model with libzero (run under mpirun).\n"
           "  --config FILE   DeepSpeed JSON config (batch, optimizer, scheduler, zero_optimization)\n"
           "  --plugin NAME   libzero strategy plugin, overriding the config (stage0, stage1, ...)\n"
           "  --steps N       optimizer steps (default %d)\n"
           "  --seed S        seed for the initial parameters and the batches (default 1234)\n"
           "  --summary FILE  write a JSON summary (losses, digest, memory) from rank 0\n"
           "  --data PATH     text file or directory of files (default %s)\n"
           "  --device D      cpu (default) or cuda: libzero keeps parameters, gradients and optimizer\n"
           "                  state on the GPU (local rank %% GPUs), reduces over NCCL and steps with the\n"
           "                  CUDA kernels; the model's own math stays on the CPU and copies in and out\n"
           "  --comm C        with --device cuda: auto (default; NCCL, one rank per GPU) or mpi (MPI\n"
           "                  behind libzero's staging layer: several ranks may share one GPU)\n"
           "  --quiet         no per-step lines\n"
           "  --no-validation skip the final pass over the held-out text (val_loss null in the\n"
           "                  summary): a short run's checks that compare bits, not the loss, take\n"
           "                  most of their time there\n"
           "  --save-dir DIR  save checkpoints under DIR (DIR/step-N, DIR/latest); at the end, and\n"
           "  --save-every K  after every K-th step\n"
           "  --keep-last K   keep only the newest K checkpoints in DIR\n"
           "  --init-from DIR fine-tune: the weights of DIR's latest checkpoint (any rank count,\n"
           "                  plugin, optimizer), a fresh optimizer and schedule from step 0\n"
           "  --resume DIR    load DIR's latest checkpoint (any rank count, any plugin) and continue\n"
           "                  from its step to --steps\n",
           DEMO_DEFAULT_STEPS, DEMO_DEFAULT_DATA);
}

static int parse_u64(const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-') return -1;
    *out = (uint64_t)v;
    return 0;
}

int demo_options_parse(int argc, char **argv, demo_options *o, int print, char *err, size_t err_len) {
    memset(o, 0, sizeof *o);
    o->steps = DEMO_DEFAULT_STEPS;
    o->seed = 1234;
    o->data_path = DEMO_DEFAULT_DATA;
    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            if (print) usage();
            return 1;
        }
        if (!strcmp(a, "--quiet")) {
            o->quiet = 1;
            continue;
        }
        if (!strcmp(a, "--no-validation")) {
            o->no_validation = 1;
            continue;
        }
        static const char *const with_value[] = {"--config", "--plugin", "--steps", "--seed",
                                                 "--summary", "--data", "--device", "--comm", "--save-dir",
                                                 "--save-every", "--keep-last", "--resume", "--init-from"};
        int known = 0;
        for (size_t k = 0; k < sizeof with_value / sizeof *with_value; ++k) known |= !strcmp(a, with_value[k]);
        if (!known) {
            snprintf(err, err_len, "unknown flag '%s' (try --help)", a);
            return -1;
        }
        if (i + 1 >= argc) {
            snprintf(err, err_len, "flag %s needs a value", a);
            return -1;
        }
        const char *v = argv[++i];
        uint64_t u;
        if (!strcmp(a, "--config")) o->config_path = v;
        else if (!strcmp(a, "--plugin")) o->plugin = v;
        else if (!strcmp(a, "--summary")) o->summary_path = v;
        else if (!strcmp(a, "--data")) o->data_path = v;
        else if (!strcmp(a, "--save-dir")) o->save_dir = v;
        else if (!strcmp(a, "--resume")) o->resume_dir = v;
        else if (!strcmp(a, "--init-from")) o->init_dir = v;
        else if (!strcmp(a, "--save-every") || !strcmp(a, "--keep-last")) {
            if (parse_u64(v, &u) || u > 100000000) {
                snprintf(err, err_len, "%s: '%s' is not a non-negative integer", a, v);
                return -1;
            }
            if (!strcmp(a, "--save-every")) o->save_every = (long)u;
            else o->keep_last = (long)u;
        }
        else if (!strcmp(a, "--device")) {
            if (strcmp(v, "cpu") && strcmp(v, "cuda")) {
                snprintf(err, err_len, "--device: '%s' is neither cpu nor cuda", v);
                return -1;
            }
            o->device_cuda = !strcmp(v, "cuda");
        }
        else if (!strcmp(a, "--comm")) {
            if (strcmp(v, "auto") && strcmp(v, "mpi")) {
                snprintf(err, err_len, "--comm: '%s' is neither auto nor mpi", v);
                return -1;
            }
            o->comm_mpi = !strcmp(v, "mpi");
        }
        else if (!strcmp(a, "--seed")) {
            if (parse_u64(v, &o->seed)) {
                snprintf(err, err_len, "--seed: '%s' is not a non-negative integer", v);
                return -1;
            }
        } else { /* --steps */
            if (parse_u64(v, &u) || u == 0 || u > 100000000) {
                snprintf(err, err_len, "--steps: '%s' is not a positive integer", v);
                return -1;
            }
            o->steps = (long)u;
        }
    }
    if (o->resume_dir && o->init_dir) {
        snprintf(err, err_len, "--resume and --init-from exclude each other (the first continues a run, the "
                 "second starts one from another run's weights)");
        return -1;
    }
    return 0;
}

/* Integer key of the top-level object: 1 found, 0 absent, -1 wrong type. */
static int get_int(json_t *root, const char *key, long long *out, char *err, size_t err_len) {
    json_t *v = json_object_get(root, key);
    /* "auto" (Hugging Face configs): the trainer fills it in; the demo is the
     * trainer here, so its own default applies */
    if (!v || json_is_null(v) || (json_is_string(v) && strcmp(json_string_value(v), "auto") == 0)) return 0;
    if (json_is_integer(v)) {
        *out = json_integer_value(v);
        return 1;
    }
    /* DeepSpeed configs sometimes spell integers as 16.0 */
    if (json_is_real(v) && json_real_value(v) == (double)(long long)json_real_value(v)) {
        *out = (long long)json_real_value(v);
        return 1;
    }
    snprintf(err, err_len, "config key '%s' must be an integer", key);
    return -1;
}

int demo_train_config_load(const char *path, int world, demo_train_config *c, char *err,
                           size_t err_len) {
    memset(c, 0, sizeof *c);
    c->micro_batch = 16;
    c->grad_accum = 1;
    c->steps_per_print = 10;
    if (!path) return 0;
    json_error_t je;
    c->root = json_load_file(path, 0, &je);
    if (!c->root) {
        snprintf(err, err_len, "config %s: %s (line %d)", path, je.text, je.line);
        return -1;
    }
    if (!json_is_object(c->root)) {
        snprintf(err, err_len, "config %s: top level is not a JSON object", path);
        goto fail;
    }
    /* DeepSpeed's (and libzero's, core/config_batch.c) batch arithmetic,
     * train_batch_size = micro * gas * world: whichever of the three is
     * missing is derived from the others, so {"train_batch_size": 64,
     * "train_micro_batch_size_per_gpu": 8} at N = 4 runs 2 accumulation
     * steps.  The library resolves the same keys for the engine, and the
     * training loop checks every zero_step's `boundary` against `gas`, so
     * the two cannot silently disagree.  With no batch key the demo's own
     * micro-batch of 16 applies (the library's default is 1 sample). */
    long long micro = 0, gas = 0, train = 0, spp = 10;
    int has_micro = 0, has_gas = 0, has_train = 0;
    if ((has_micro = get_int(c->root, "train_micro_batch_size_per_gpu", &micro, err, err_len)) < 0 ||
        (has_gas = get_int(c->root, "gradient_accumulation_steps", &gas, err, err_len)) < 0 ||
        (has_train = get_int(c->root, "train_batch_size", &train, err, err_len)) < 0 ||
        get_int(c->root, "steps_per_print", &spp, err, err_len) < 0)
        goto fail;
    if (has_gas && (gas < 1 || gas > 1000000)) {
        snprintf(err, err_len, "config key 'gradient_accumulation_steps' must be >= 1 (got %lld)", gas);
        goto fail;
    }
    if (has_micro && (micro < 1 || micro > 1000000)) {
        snprintf(err, err_len, "config key 'train_micro_batch_size_per_gpu' must be >= 1 (got %lld)", micro);
        goto fail;
    }
    if (has_train && train < 1) {
        snprintf(err, err_len, "config key 'train_batch_size' must be >= 1 (got %lld)", train);
        goto fail;
    }
    if (has_train && has_micro && !has_gas) {
        if (train % (micro * world)) {
            snprintf(err, err_len,
                     "config key 'train_batch_size' (%lld) is not divisible by "
                     "train_micro_batch_size_per_gpu * world size (%lld * %d), so "
                     "gradient_accumulation_steps cannot be derived", train, micro, world);
            goto fail;
        }
        gas = train / (micro * world);
        has_gas = 1;
        if (gas > 1000000) {
            snprintf(err, err_len, "derived gradient_accumulation_steps %lld is too large", gas);
            goto fail;
        }
    }
    if (!has_gas) gas = 1;
    if (!has_micro && has_train) {
        if (train % (gas * world)) {
            snprintf(err, err_len,
                     "config key 'train_batch_size' (%lld) is not divisible by "
                     "gradient_accumulation_steps * world size (%lld * %d)", train, gas, world);
            goto fail;
        }
        micro = train / (gas * world);
        if (micro > 1000000) {
            snprintf(err, err_len, "derived train_micro_batch_size_per_gpu %lld is too large", micro);
            goto fail;
        }
    } else if (!has_micro) {
        micro = 16;
    }
    if (has_train && has_micro && train != micro * gas * world) {
        snprintf(err, err_len,
                 "config: train_batch_size %lld != train_micro_batch_size_per_gpu %lld * "
                 "gradient_accumulation_steps %lld * world size %d", train, micro, gas, world);
        goto fail;
    }
    c->micro_batch = (int)micro;
    c->grad_accum = (int)gas;
    /* the model dtype: the params are registered in it (libzero checks it
     * against the same keys) */
    json_t *bf = json_object_get(c->root, "bf16"), *fp = json_object_get(c->root, "fp16");
    if (!bf) bf = json_object_get(c->root, "bfloat16"); /* DeepSpeed's alias */
    c->dtype = json_is_true(json_object_get(bf, "enabled"))   ? ZERO_DTYPE_BF16
               : json_is_true(json_object_get(fp, "enabled")) ? ZERO_DTYPE_F16
                                                                : ZERO_DTYPE_F32;
    c->steps_per_print = spp > 0 ? (int)spp : 10;
    return 0;
fail:
    json_decref(c->root);
    c->root = NULL;
    return -1;
}

void demo_train_config_free(demo_train_config *c) {
    json_decref(c->root);
    c->root = NULL;
}
