/* DeepSpeed JSON config: load (text or file), run the section parsers,
 * choose the plugin, and hand out the typed view (core/config.h).
 *
 * The parsed json_t stays alive inside zero__config because plugins look up
 * their own keys by path for the whole life of the engine. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config_internal.h"

/* DeepSpeed's defaults (deepspeed/runtime/constants.py, zero/config.py,
 * fp16/loss_scaler.py).  Batch sizes and the optimizer are filled by their
 * parsers. */
static void set_defaults(zero_run_config *rc) {
    memset(rc, 0, sizeof *rc);
    rc->struct_size = (uint32_t)sizeof *rc;
    rc->stage = 0;
    rc->train_batch_size = 1;
    rc->micro_batch_per_gpu = 1;
    rc->grad_accum_steps = 1;
    rc->gradient_clipping = 0.0;
    rc->prescale_gradients = 0;
    rc->gradient_predivide_factor = 1.0;
    rc->steps_per_print = 10;
    rc->wall_clock_breakdown = 0;
    rc->model_dtype = ZERO_DTYPE_F32;
    rc->fp16_initial_scale_power = 16;
    rc->fp16_loss_scale = 0.0;
    rc->fp16_loss_scale_window = 1000;
    rc->fp16_hysteresis = 2;
    rc->fp16_consecutive_hysteresis = 0;
    rc->fp16_min_loss_scale = 1.0;
    rc->contiguous_gradients = 1;
    rc->reduce_scatter = 1;
    rc->reduce_bucket_size = 500000000;
    rc->allgather_bucket_size = 500000000;
    rc->overlap_comm = 0;
    rc->round_robin_gradients = 0;
    rc->offload_optimizer = 0;
    rc->offload_pin_memory = 0;
    rc->stage3_prefetch_bucket_size = 50000000;
    rc->stage3_param_persistence_threshold = 100000;
    rc->stage3_max_live_parameters = 1000000000;
    rc->stage3_max_reuse_distance = 1000000000;
    rc->sub_group_size = 1000000000;
    rc->strict_grads = 0;
    rc->reduce_once_per_window = 0;
    rc->pipeline_stages = 1;
}

/* The largest config file read (docs/config.md): a DeepSpeed config is a
 * few KiB; the cap keeps a wrong path (/dev/zero, a log file) from eating
 * memory without bound. */
#define ZERO__CONFIG_MAX_BYTES ((size_t)64 << 20)

/* Read a whole config file into a NUL-less buffer (caller frees).  Only a
 * regular file is read: the open is non-blocking so that a FIFO without a
 * writer cannot hang engine creation, and fstat after the open (not stat
 * before it) judges the file actually opened.  On failure: NULL, the
 * message in ctx and *st the status (ZERO_ERR_IO for what the system
 * refused, ZERO_ERR_CONFIG for a file that is not an acceptable config). */
static char *read_file(zero__cfg_ctx *ctx, const char *path, size_t *len, zero_status *st) {
    struct stat sb;
    char *buf = NULL;
    size_t n = 0;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    *st = ZERO_ERR_IO;
    if (fd < 0) {
        zero__cfg_fail(ctx, "config file %s: %s", path, strerror(errno));
        return NULL;
    }
    if (fstat(fd, &sb) != 0) {
        zero__cfg_fail(ctx, "config file %s: %s", path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(sb.st_mode)) {
        *st = ZERO_ERR_CONFIG;
        zero__cfg_fail(ctx, "config file %s: is %s, expected a regular file", path,
                       S_ISDIR(sb.st_mode) ? "a directory" : S_ISFIFO(sb.st_mode) ? "a FIFO"
                       : S_ISCHR(sb.st_mode) ? "a character device" : S_ISBLK(sb.st_mode) ? "a block device"
                       : S_ISSOCK(sb.st_mode) ? "a socket" : "not a regular file");
        goto fail;
    }
    if ((uint64_t)sb.st_size > ZERO__CONFIG_MAX_BYTES) goto too_big;
    /* st_size + 1: reading 0 bytes at the end needs no second buffer; the
     * loop still grows it (up to one byte beyond the cap) for a file that
     * grew after fstat, or one whose size st_size does not tell (/proc) */
    size_t cap = (size_t)sb.st_size + 1 > 4096 ? (size_t)sb.st_size + 1 : 4096;
    buf = malloc(cap);
    if (!buf) {
        *st = ZERO_ERR_OUT_OF_MEMORY;
        zero__cfg_fail(ctx, "config file %s: out of memory", path);
        goto fail;
    }
    for (;;) {
        if (n == cap) {
            if (cap > ZERO__CONFIG_MAX_BYTES) goto too_big;
            size_t ncap = cap * 2 > ZERO__CONFIG_MAX_BYTES + 1 ? ZERO__CONFIG_MAX_BYTES + 1 : cap * 2;
            char *nb = realloc(buf, ncap);
            if (!nb) {
                *st = ZERO_ERR_OUT_OF_MEMORY;
                zero__cfg_fail(ctx, "config file %s: out of memory", path);
                goto fail;
            }
            buf = nb;
            cap = ncap;
        }
        ssize_t got = read(fd, buf + n, cap - n);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            zero__cfg_fail(ctx, "config file %s: %s", path, strerror(errno));
            goto fail;
        }
        if (got == 0) break;
        n += (size_t)got;
        if (n > ZERO__CONFIG_MAX_BYTES) goto too_big;
    }
    close(fd);
    *len = n;
    *st = ZERO_OK;
    return buf;
too_big:
    *st = ZERO_ERR_CONFIG;
    zero__cfg_fail(ctx, "config file %s: larger than %zu MiB, expected a DeepSpeed JSON config (a few KiB)", path,
                   ZERO__CONFIG_MAX_BYTES >> 20);
fail:
    free(buf);
    close(fd);
    return NULL;
}

/* Duplicate keys are refused like DeepSpeed does (its JSON loader raises on
 * them): a second "stage" silently winning is a classic config bug. */
static zero_status load_json(zero__cfg_ctx *ctx, const char *text, const char *path, json_t **out) {
    json_error_t jerr;
    const char *where = text ? "config text" : path;
    *out = NULL;
    if (text) {
        *out = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
    } else if (path) {
        size_t len = 0;
        zero_status st;
        char *buf = read_file(ctx, path, &len, &st);
        if (!buf) return st;
        *out = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
        free(buf);
    } else {
        *out = json_object();
        if (!*out) {
            zero__cfg_fail(ctx, "config: out of memory");
            return ZERO_ERR_OUT_OF_MEMORY;
        }
        return ZERO_OK;
    }
    if (!*out) {
        zero__cfg_fail(ctx, "%s: invalid JSON at line %d, column %d: %s", where, jerr.line, jerr.column, jerr.text);
        return ZERO_ERR_CONFIG;
    }
    if (!json_is_object(*out)) {
        json_decref(*out);
        *out = NULL;
        zero__cfg_fail(ctx, "%s: expected a JSON object at the top level", where);
        return ZERO_ERR_CONFIG;
    }
    return ZERO_OK;
}

/* Plugin named by the config: explicit key, else from offload/pipeline/stage. */
static void choose_plugin(zero__config *c, const char *plugin_key) {
    const zero_run_config *rc = &c->run;
    if (plugin_key) {
        c->plugin = plugin_key;
    } else if (rc->stage == 3 && (rc->offload_optimizer || c->offload_param_device)) {
        /* ZeRO-3 + offload (DeepSpeed's stage 3 with offload_optimizer /
         * offload_param): stage3 keeps its owned state in the host tier */
        c->plugin = "stage3";
    } else if (rc->offload_optimizer) {
        c->plugin = "offload";
    } else if (rc->pipeline_stages > 1 && rc->stage <= 1) {
        c->plugin = "stage1-pp";
    } else {
        snprintf(c->plugin_buf, sizeof c->plugin_buf, "stage%d", (int)rc->stage);
        c->plugin = c->plugin_buf;
    }
}

zero_status zero__config_parse(const char *text, const char *path, int world, zero__config **out,
                               zero__config_warn_fn warn, void *warn_user, char *err, size_t err_len) {
    zero__cfg_ctx ctx = {warn, warn_user, err, err_len};
    zero__config *c;
    const char *plugin_key = NULL;
    zero_status s;

    if (err && err_len) err[0] = '\0';
    if (!out) {
        zero__cfg_fail(&ctx, "zero__config_parse: out is NULL");
        return ZERO_ERR_INVALID_ARGUMENT;
    }
    *out = NULL;
    if (world < 1) {
        zero__cfg_fail(&ctx, "config: world size %d, expected at least 1", world);
        return ZERO_ERR_INVALID_ARGUMENT;
    }
    c = calloc(1, sizeof *c);
    if (!c) {
        zero__cfg_fail(&ctx, "config: out of memory");
        return ZERO_ERR_OUT_OF_MEMORY;
    }
    s = load_json(&ctx, text, path, &c->root);
    if (s != ZERO_OK) {
        free(c);
        return s;
    }
    set_defaults(&c->run);
    /* Order matters only for which error a config with several problems
     * reports first: the zero section precedes pipeline, whose check needs
     * the stage. */
    if (zero__cfg_parse_top(&ctx, c->root, world, &c->run) < 0 ||
        zero__cfg_parse_precision(&ctx, c->root, &c->run) < 0 ||
        zero__cfg_parse_dtypes(&ctx, c->root, &c->run) < 0 ||
        zero__cfg_parse_optimizer(&ctx, c->root, &c->run) < 0 ||
        zero__cfg_parse_scheduler(&ctx, c->root, &c->scheduler) < 0 ||
        zero__cfg_parse_zero(&ctx, c->root, &c->run, &plugin_key, c) < 0 ||
        zero__cfg_parse_pipeline(&ctx, c->root, &c->run) < 0 || zero__cfg_check_schedule(&ctx, c) < 0) {
        zero__config_free(c);
        return ZERO_ERR_CONFIG;
    }
    choose_plugin(c, plugin_key);
    *out = c;
    return ZERO_OK;
}

void zero__config_free(zero__config *c) {
    if (!c) return;
    json_decref(c->root);
    free(c);
}

const zero_run_config *zero__config_run(const zero__config *c) { return c ? &c->run : NULL; }

void zero__config_set_grad_dtypes(zero__config *c, zero_dtype accum, zero_dtype comm) {
    if (!c) return;
    c->run.grad_accum_dtype = accum;
    c->run.comm_dtype = comm;
}

const char *zero__config_plugin(const zero__config *c) { return c ? c->plugin : NULL; }

void zero__config_set_stage(zero__config *c, int stage) {
    if (!c) return;
    c->run.stage = stage;
    int overlap;
    if (zero__config_bool(c, "zero_optimization.overlap_comm", &overlap) != 1) c->run.overlap_comm = stage == 3;
}

const char *zero__config_scheduler(const zero__config *c) { return c ? c->scheduler : NULL; }
void zero__config_set_offload(zero__config *c, const char *opt_device, const char *param_device) {
    if (!c) return;
    c->offload_opt_device = opt_device;
    c->offload_param_device = param_device;
    c->run.offload_optimizer = opt_device != NULL;
}

const char *zero__config_offload_device(const zero__config *c, int param) {
    return !c ? NULL : param ? c->offload_param_device : c->offload_opt_device;
}

/* The Hugging Face Trainer's fill-ins for "auto" (trainer's
 * deepspeed.py: reduce_bucket_size = hidden_size^2, stage3_prefetch_bucket_size
 * = 0.9 hidden_size^2, stage3_param_persistence_threshold = 10 hidden_size),
 * with hidden_size taken as the square root of the largest registered
 * param's element count (a libzero host has no model config; for a
 * transformer the largest weight is a small multiple of hidden^2). */
void zero__config_resolve_auto(zero__config *c, uint64_t largest_numel, char *note, size_t note_len) {
    if (note && note_len) note[0] = '\0';
    if (!c || !c->auto_sizes || !largest_numel) return;
    uint64_t h = (uint64_t)sqrt((double)largest_numel);
    while ((h + 1) * (h + 1) <= largest_numel) h++;
    if (h == 0) h = 1;
    zero_run_config *rc = &c->run;
    if (c->auto_sizes & ZERO__AUTO_REDUCE_BUCKET) rc->reduce_bucket_size = (int64_t)(h * h);
    if (c->auto_sizes & ZERO__AUTO_PREFETCH) rc->stage3_prefetch_bucket_size = (int64_t)(0.9 * (double)(h * h));
    if (c->auto_sizes & ZERO__AUTO_PERSISTENCE) rc->stage3_param_persistence_threshold = (int64_t)(10 * h);
    if (note && note_len)
        snprintf(note, note_len,
                 "config \"auto\" sizes from the model (hidden size taken as %llu = sqrt of the largest param, "
                 "as the Hugging Face Trainer fills them): reduce_bucket_size %lld, stage3_prefetch_bucket_size "
                 "%lld, stage3_param_persistence_threshold %lld",
                 (unsigned long long)h, (long long)rc->reduce_bucket_size, (long long)rc->stage3_prefetch_bucket_size,
                 (long long)rc->stage3_param_persistence_threshold);
    c->auto_sizes = 0; /* once */
}


/* Appended by the pipeline worker: the engine must know pipeline.stages
 * before the real parse, because the batch arithmetic needs the
 * data-parallel size, which is world / stages. */
int zero__config_peek_pipeline_stages(const char *text, const char *path) {
    zero__cfg_ctx ctx = {NULL, NULL, NULL, 0};
    json_t *root = NULL;
    if (load_json(&ctx, text, path, &root) != ZERO_OK) return 0; /* unreadable: the parse says why */
    /* The same reader as zero__cfg_parse_pipeline: an integral real (2.0)
     * counts as well, or the peek and the parse disagree (tests/fuzz found
     * "stages": 2.0 peeked as 1 while the parse ran 2 stages). */
    int64_t v = 1;
    if (zero__cfg_int(&ctx, json_object_get(root, "pipeline"), "pipeline", "stages", 1, INT32_MAX,
                      "a positive integer", &v) != 1)
        v = 1;
    json_decref(root);
    return (int)v;
}
