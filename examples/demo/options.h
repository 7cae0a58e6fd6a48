/* Command line and the few config keys the demo itself needs.
 *
 * The demo hands the whole DeepSpeed config to libzero (config_path); it
 * reads only the batch shape and print interval itself, because the host
 * decides how many samples go into each micro-batch.
 * Thread-safety: none needed; called once from main before training. */
#ifndef DEMO_OPTIONS_H
#define DEMO_OPTIONS_H
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

typedef struct demo_options {
    const char *config_path;  /* --config FILE (NULL: library defaults, micro-batch 16) */
    const char *plugin;       /* --plugin NAME overrides the config's choice (NULL: none) */
    long steps;               /* --steps N optimizer steps (default DEMO_DEFAULT_STEPS) */
    uint64_t seed;            /* --seed S: init and batch sampling (default 1234) */
    const char *summary_path; /* --summary FILE (NULL: none) */
    const char *data_path;    /* --data PATH file or directory */
    int quiet;                /* --quiet: no per-step lines */
    int no_validation;        /* --no-validation: no final pass over the held-out text */
    int device_cuda;          /* --device cuda: libzero keeps params, grads and optimizer state on the GPU */
    int comm_mpi;             /* --comm mpi: with --device cuda, MPI behind the staging layer instead of NCCL */
    const char *save_dir;     /* --save-dir DIR: checkpoint root (zero_save_ex; DIR/latest names the newest) */
    long save_every;          /* --save-every K: save after every K-th step (and the last); 0: only the last */
    long keep_last;           /* --keep-last K: keep only the newest K checkpoints (0: all) */
    const char *resume_dir;   /* --resume DIR: zero_load(DIR) (its latest), continue from its step */
    const char *init_dir;     /* --init-from DIR: zero_load_ex weights only, from step 0 (fine-tuning) */
} demo_options;

#define DEMO_DEFAULT_STEPS 150
#define DEMO_DEFAULT_DATA "/usr/share/common-licenses"

/* Parse argv (strings are borrowed from argv).  Returns 0 to run, 1 if
 * --help was asked (usage already printed to stdout when `print` is set),
 * -1 on a bad flag with a message in err. */
int demo_options_parse(int argc, char **argv, demo_options *o, int print, char *err, size_t err_len);

/* What the demo reads from the DeepSpeed config. */
typedef struct demo_train_config {
    json_t *root;        /* the parsed config, owned (json_decref); NULL without --config */
    int micro_batch;     /* train_micro_batch_size_per_gpu (or train_batch_size / (gas * world)) */
    int grad_accum;      /* gradient_accumulation_steps, default 1 */
    int steps_per_print; /* steps_per_print, default 10 (DeepSpeed's default) */
    int dtype;           /* model dtype: ZERO_DTYPE_BF16 / _F16 when bf16 / fp16 "enabled", else F32 */
} demo_train_config;

/* Load `path` (NULL: defaults) for a job of `world` ranks.  Returns 0 or -1
 * with a message naming the key in err.  Free with demo_train_config_free. */
int demo_train_config_load(const char *path, int world, demo_train_config *c, char *err,
                           size_t err_len);
void demo_train_config_free(demo_train_config *c);
#endif
