/* DeepSpeed JSON config (Jansson).  Parsing is pure apart from logging
 * warnings through the callback given. */
#ifndef ZERO_CORE_CONFIG_H
#define ZERO_CORE_CONFIG_H
#include <stddef.h>
#include "zero_plugin.h"

typedef struct zero__config zero__config; /* owns the json_t tree */

typedef void (*zero__config_warn_fn)(void *user, const char *msg);

/* Parse from text (if non-NULL) or a file path.  `world` is the data-parallel
 * size used for batch-size derivation/checks (train = micro * gas * world).
 * On success *out is set and ZERO_OK returned; unknown keys produce one
 * warning each through warn (may be NULL).  On error, err receives a message
 * naming the key, the value and what was expected (ZERO_ERR_CONFIG), or the
 * file problem (ZERO_ERR_IO; a path that is not a regular file, or one over
 * 64 MiB, is ZERO_ERR_CONFIG naming it, without blocking on a FIFO).
 * Accepted numbers are finite and fit the fp32 kernels, and so is the
 * schedule at every step (config_sched.c).  Neither text nor path: all
 * defaults. */
zero_status zero__config_parse(const char *text, const char *path, int world, zero__config **out,
                               zero__config_warn_fn warn, void *warn_user, char *err, size_t err_len);
void zero__config_free(zero__config *c);

const zero_run_config *zero__config_run(const zero__config *c);
/* The engine's resolution of grad_accum_dtype / comm_dtype for the loaded
 * plugin (the model dtype for a plugin without ZERO_PLUGIN_CAP_GRAD_DTYPES).
 * Before the plugin's create only: the run view is read-only after. */
void zero__config_set_grad_dtypes(zero__config *c, zero_dtype accum, zero_dtype comm);

/* "stage": "auto" resolved (core/plan_auto.c): the run view's stage becomes
 * `stage` and, unless overlap_comm was given, overlap_comm DeepSpeed's
 * default for it (on for stage 3).  Before the plugin's create only. */
void zero__config_set_stage(zero__config *c, int stage);

/* Offload as configured: "cpu", "nvme" or NULL (none) for
 * zero_optimization.offload_optimizer.device (param 0) or offload_param.device
 * (param 1, stage 3 only).  zero__config_set_offload overrides both (and the run view's
 * offload_optimizer) for "stage": "auto" planning the stage3+offload
 * candidate; the path lookups of the two device keys answer with them.
 * Before the plugin's create only. */
void zero__config_set_offload(zero__config *c, const char *opt_device, const char *param_device);
const char *zero__config_offload_device(const zero__config *c, int param);

/* Size keys written "auto" (reduce_bucket_size, stage3_prefetch_bucket_size,
 * stage3_param_persistence_threshold) get the Hugging Face Trainer's values
 * for a hidden size of sqrt(largest_numel).  `note` receives what was set
 * ("" when nothing was "auto").  Once, at zero_params_done, before the
 * plugin's params_done (and before planning). */
void zero__config_resolve_auto(zero__config *c, uint64_t largest_numel, char *note, size_t note_len);

/* Plugin chosen by the config: zero_optimization.plugin if set, else from
 * stage/offload ("stage0".."stage3", "offload", "stage1-pp" when a pipeline
 * section asks for >1 stage with stage 1), or "auto" for "stage": "auto".  Static or config-owned string. */
const char *zero__config_plugin(const zero__config *c);
/* The plugin the configured optimizer needs, or NULL when any plugin runs
 * it: "onebit" for optimizer.type OneBitAdam (its compressed momentum
 * all-reduce is the plugin; any other plugin would run plain Adam). */
const char *zero__config_optim_plugin(const zero__config *c);

/* Lookups by dotted path: 1 found, 0 absent, -1 wrong type. */
int zero__config_int(const zero__config *c, const char *path, int64_t *out);
int zero__config_double(const zero__config *c, const char *path, double *out);
int zero__config_bool(const zero__config *c, const char *path, int *out);
int zero__config_string(const zero__config *c, const char *path, const char **out);

/* Scheduler as parsed ("WarmupLR", ...) or NULL; params object lookups go
 * through the path functions ("scheduler.params.warmup_num_steps"). */
const char *zero__config_scheduler(const zero__config *c);

/* Schedules (config_sched.c, DeepSpeed's lr_schedules.py): the lr and the
 * betas optimizer step t (1-based) runs with, from the scheduler section
 * and optimizer.params (no scheduler: optimizer.params.lr and betas).  A
 * config that parsed yields, for every t >= 1, an lr in [0, FLT_MAX] and
 * betas in [0, 1) (the parser proves it, or refuses naming the key).  Pure;
 * thread-safe. */
double zero__config_sched_lr(const zero__config *c, uint64_t t);
void zero__config_sched_betas(const zero__config *c, uint64_t t, double *beta1, double *beta2);

/* Name of an optimizer kind as the config spells it ("AdamW", "Adam" for
 * the L2 variant, "SGD", "Lion", "Adagrad", "Lamb"), "unknown" otherwise:
 * for messages, which print names rather than enum numbers. */
const char *zero__config_optim_name(zero_optim_kind k);

/* (issue 31) zero_optimization.find_unused_parameters: 1 when gradients
 * missing on some ranks count as zero (torch DDP's find_unused_parameters),
 * 0 (default) when zero_step refuses them.  Pure. */
int zero__config_find_unused(const zero__config *c);

/* --- convenience lookups with defaults --- */
/* Ownership, lifetime, threads: zero__config_parse returns a config the
 * caller owns (free with zero__config_free); everything it hands out
 * (run view, strings) lives until then.  A parsed config is immutable, so
 * every getter and lookup may run concurrently from any thread.
 *
 * Path syntax: keys joined by '.', array items as "[i]" or ".i"
 * ("optimizer.params.betas[1]", "optimizer.param_groups.0.lr").  Lookups see
 * the JSON as written (no defaults; null reads as absent); the typed
 * zero_run_config carries DeepSpeed's defaults.  zero__config_double accepts
 * integers too; zero__config_int accepts integral reals (5e8).
 * docs/config.md lists every key, default, warning and error. */

/* Value at path, or dflt when absent or of another type. */
double zero__config_double_or(const zero__config *c, const char *path, double dflt);
int64_t zero__config_int_or(const zero__config *c, const char *path, int64_t dflt);
#endif

/* --- pipeline --- */
/* pipeline.stages of the config text (or file at path; text wins), 1 if
 * absent or invalid, 0 if the config does not load (the real parse reports
 * that; the caller then splits nothing).  Pure; thread-safe. */
int zero__config_peek_pipeline_stages(const char *text, const char *path);
