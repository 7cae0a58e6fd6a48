/* Private to the config parser (core/config*.c): the parsed config object
 * and the typed, key-checked readers every section parser uses.  Nothing
 * outside core/config*.c includes this; the rest of the core goes through
 * config.h.
 *
 * Everything here runs once, on the thread that calls zero__config_parse;
 * none of it keeps global state, so concurrent parses are safe. */
#ifndef ZERO_CORE_CONFIG_INTERNAL_H
#define ZERO_CORE_CONFIG_INTERNAL_H
#include <jansson.h>
#include <stdint.h>

#include "config.h"

struct zero__config {
    json_t *root;            /* owned; never modified after parse (lookups are read-only) */
    zero_run_config run;     /* typed view with DeepSpeed's defaults filled in */
    const char *plugin;      /* static string, plugin_buf, or a string owned by root */
    char plugin_buf[16];     /* "stage0".."stage3" */
    const char *scheduler;   /* canonical static name ("WarmupLR", ...) or NULL */
    /* zero_optimization.offload_optimizer.device / offload_param.device as
     * resolved ("cpu", "nvme"; NULL = none), possibly overridden by
     * zero__config_set_offload ("stage": "auto" planning stage3+offload);
     * the path lookups of those two keys answer with these */
    const char *offload_opt_device, *offload_param_device;
    unsigned auto_sizes;     /* ZERO__AUTO_* bits: size keys written "auto" (resolved from the model) */
};

/* Size keys whose "auto" is resolved from the registered model
 * (zero__config_resolve_auto), as the Hugging Face Trainer does. */
enum { ZERO__AUTO_REDUCE_BUCKET = 1u, ZERO__AUTO_PREFETCH = 2u, ZERO__AUTO_PERSISTENCE = 4u };

/* Where messages go while parsing. */
typedef struct zero__cfg_ctx {
    zero__config_warn_fn warn; /* may be NULL */
    void *warn_user;
    char *err;                 /* may be NULL */
    size_t err_len;
} zero__cfg_ctx;

/* One warning through ctx->warn (printf-style). */
void zero__cfg_warn(zero__cfg_ctx *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Write the error text; always returns -1 so parsers can `return zero__cfg_fail(...)`. */
int zero__cfg_fail(zero__cfg_ctx *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* "section.key" (or "key" when section is "" or NULL) into out[n]. */
void zero__cfg_join(char *out, size_t n, const char *section, const char *key);
/* Compact JSON text of v for messages, cut to n-1 chars with "..." when long. */
void zero__cfg_describe(const json_t *v, char *out, size_t n);

/* Typed readers of obj[key], where obj is the object at dotted path
 * `section`.  Return 1 and fill *out when the key holds an acceptable
 * value, 0 when it is absent, null, or the Hugging Face placeholder "auto"
 * (which warns: it is resolved by the HF Trainer / DeepSpeed autotuner, not
 * by libzero, so the default applies), and -1 with ctx's error set
 * ("<path>: got <value>, expected <what>") otherwise.  obj may be NULL. */

/* Integer within [lo, hi]; an integral JSON real (5e8) is accepted.
 * `what` describes the range for the message ("an integer 0..3"). */
int zero__cfg_int(zero__cfg_ctx *ctx, const json_t *obj, const char *section, const char *key,
                  int64_t lo, int64_t hi, const char *what, int64_t *out);
/* FLT_MAX: hyper-parameters reach the optimizer kernels as fp32
 * (zero_optim_scalars), so a number the config gives for them must fit one.
 * As zero__cfg_num's hi it also makes the message say so. */
#define ZERO__CFG_FLT_MAX 3.40282346638528859811704183484516925e+38
/* FLT_MIN, the smallest normal fp32 value: the least eps (a denormal may be
 * flushed to zero by the SIMD kernels, and Adam's 0 / (0 + eps) is NaN). */
#define ZERO__CFG_FLT_MIN 1.17549435082228750796873653722224568e-38

/* Number (integer or real) with lo <= v (lo < v when lo_open) and v <= hi;
 * never NaN or Inf. */
int zero__cfg_num(zero__cfg_ctx *ctx, const json_t *obj, const char *section, const char *key,
                  double lo, int lo_open, double hi, const char *what, double *out);
/* true/false (0 and 1 are accepted too, as DeepSpeed's pydantic does). */
int zero__cfg_bool(zero__cfg_ctx *ctx, const json_t *obj, const char *section, const char *key,
                   int32_t *out);
/* Non-empty string; *out points into obj (lives as long as the tree). */
int zero__cfg_str(zero__cfg_ctx *ctx, const json_t *obj, const char *section, const char *key,
                  const char **out);
/* Sub-object (null/absent -> 0, *out = NULL); anything else is an error. */
int zero__cfg_obj(zero__cfg_ctx *ctx, const json_t *obj, const char *section, const char *key,
                  const json_t **out);

/* Key tables: which keys a section knows.  A key not in the table gets
 * "<path>: unknown key, ignored".  A ZERO__KEY_IGNORED key is a DeepSpeed
 * feature libzero does not implement: one warning ("<path>: <why>"), unless
 * its value equals `quiet` (JSON text of the value that means "feature off",
 * e.g. "false"), or it is an object whose "enabled" is false. */
enum { ZERO__KEY_USED = 0, ZERO__KEY_IGNORED = 1 };
typedef struct zero__cfg_key {
    const char *name;
    int kind;
    const char *quiet; /* IGNORED: JSON of the "off" value, or NULL */
    const char *why;   /* IGNORED: message; NULL = "not implemented by libzero, ignored" */
} zero__cfg_key;

/* Warn about every key of obj (at dotted path `section`) that the
 * NULL-name-terminated table does not mark USED.  obj may be NULL. */
void zero__cfg_check_keys(zero__cfg_ctx *ctx, const json_t *obj, const char *section,
                          const zero__cfg_key *keys);

/* Section parsers (config_sections.c, config_optim.c).  Each fills its part
 * of rc from root and returns 0, or -1 with ctx's error set. */
int zero__cfg_parse_top(zero__cfg_ctx *ctx, const json_t *root, int world, zero_run_config *rc);
int zero__cfg_parse_precision(zero__cfg_ctx *ctx, const json_t *root, zero_run_config *rc);
/* After precision (needs the model dtype): config_dtypes.c. */
int zero__cfg_parse_dtypes(zero__cfg_ctx *ctx, const json_t *root, zero_run_config *rc);
int zero__cfg_parse_zero(zero__cfg_ctx *ctx, const json_t *root, zero_run_config *rc,
                         const char **plugin_key, zero__config *cfg);
int zero__cfg_parse_pipeline(zero__cfg_ctx *ctx, const json_t *root, zero_run_config *rc);
int zero__cfg_parse_optimizer(zero__cfg_ctx *ctx, const json_t *root, zero_run_config *rc);
int zero__cfg_parse_scheduler(zero__cfg_ctx *ctx, const json_t *root, const char **canonical);

/* After every section parsed (config_sched.c): the schedule's lr over its
 * whole domain, and that lr times weight_decay, fit a 32-bit float;
 * OneCycle's momentum stays below 1.  0, or -1 naming the key. */
int zero__cfg_check_schedule(zero__cfg_ctx *ctx, const zero__config *c);

/* Batch sizes (config_batch.c): given which of train/micro/gas were set
 * (value <= 0 = not set), derive the rest for `world` ranks exactly as
 * DeepSpeed does, or fail naming the three values. */
int zero__cfg_batch(zero__cfg_ctx *ctx, int world, int64_t train, int64_t micro, int64_t gas,
                    zero_run_config *rc);

/* Dotted-path lookup (config_path.c): "a.b.c", array items as "a[0]" or
 * "a.0".  Returns the node or NULL; *through_scalar = 1 when the path runs
 * through a value that is neither object nor array. */
const json_t *zero__cfg_lookup(const json_t *root, const char *path, int *through_scalar);
#endif
