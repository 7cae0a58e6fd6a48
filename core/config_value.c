/* Typed, key-checked readers for the DeepSpeed config (config_internal.h).
 *
 * One place decides what "an integer" or "a boolean" means so every key
 * behaves alike: JSON writers (Python's json, jq) turn 5e8 into a real, so an
 * integral real is an integer; null means "not given", like a missing key in
 * DeepSpeed's pydantic models; "auto" is the Hugging Face placeholder that
 * only the HF Trainer resolves, so libzero warns and keeps the default
 * rather than refusing the whole file. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_internal.h"
#include "near_name.h"

void zero__cfg_warn(zero__cfg_ctx *ctx, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    if (!ctx->warn) return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ctx->warn(ctx->warn_user, msg);
}

int zero__cfg_fail(zero__cfg_ctx *ctx, const char *fmt, ...) {
    va_list ap;
    if (!ctx->err || ctx->err_len == 0) return -1;
    va_start(ap, fmt);
    vsnprintf(ctx->err, ctx->err_len, fmt, ap);
    va_end(ap);
    return -1;
}

void zero__cfg_join(char *out, size_t n, const char *section, const char *key) {
    if (section && section[0])
        snprintf(out, n, "%s.%s", section, key);
    else
        snprintf(out, n, "%s", key);
}

void zero__cfg_describe(const json_t *v, char *out, size_t n) {
    /* 15 digits: the user wrote 0.9, not 0.90000000000000002. */
    char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT | JSON_REAL_PRECISION(15));
    if (!s) {
        snprintf(out, n, "(unprintable)");
        return;
    }
    if (strlen(s) + 1 > n && n > 4) {
        memcpy(out, s, n - 4);
        strcpy(out + n - 4, "...");
    } else {
        snprintf(out, n, "%s", s);
    }
    free(s);
}

static int is_auto(const json_t *v) { return json_is_string(v) && strcmp(json_string_value(v), "auto") == 0; }

/* The common front of every reader: absent, null and "auto" mean "use the
 * default".  Returns the value to check, or NULL for "not given". */
static const json_t *get_given(zero__cfg_ctx *ctx, const json_t *obj, const char *section, const char *key) {
    const json_t *v = obj && json_is_object(obj) ? json_object_get(obj, key) : NULL;
    if (!v || json_is_null(v)) return NULL;
    if (is_auto(v)) {
        char path[256];
        zero__cfg_join(path, sizeof path, section, key);
        zero__cfg_warn(ctx, "%s: \"auto\" is resolved by the Hugging Face Trainer or the DeepSpeed "
                            "autotuner, not by libzero; using the default",
                       path);
        return NULL;
    }
    return v;
}

static int bad(zero__cfg_ctx *ctx, const json_t *v, const char *section, const char *key, const char *what) {
    char path[256], val[96];
    zero__cfg_join(path, sizeof path, section, key);
    zero__cfg_describe(v, val, sizeof val);
    return zero__cfg_fail(ctx, "%s: got %s, expected %s", path, val, what);
}

/* 2^53: beyond it a double no longer holds every integer, so "integral"
 * stops meaning anything. */
#define ZERO__CFG_EXACT_LIMIT 9007199254740992.0

int zero__cfg_int(zero__cfg_ctx *ctx, const json_t *obj, const char *section, const char *key,
                  int64_t lo, int64_t hi, const char *what, int64_t *out) {
    const json_t *v = get_given(ctx, obj, section, key);
    int64_t x;
    if (!v) return 0;
    if (json_is_integer(v)) {
        x = (int64_t)json_integer_value(v);
    } else if (json_is_real(v)) {
        double d = json_real_value(v);
        if (d != floor(d) || fabs(d) > ZERO__CFG_EXACT_LIMIT) return bad(ctx, v, section, key, what);
        x = (int64_t)d;
    } else {
        return bad(ctx, v, section, key, what);
    }
    if (x < lo || x > hi) return bad(ctx, v, section, key, what);
    *out = x;
    return 1;
}

int zero__cfg_num(zero__cfg_ctx *ctx, const json_t *obj, const char *section, const char *key,
                  double lo, int lo_open, double hi, const char *what, double *out) {
    const json_t *v = get_given(ctx, obj, section, key);
    double d;
    if (!v) return 0;
    if (!json_is_number(v)) return bad(ctx, v, section, key, what);
    d = json_number_value(v);
    if (isfinite(d) && d > hi && hi == ZERO__CFG_FLT_MAX) {
        /* 1e39 is a fine double, but the optimizer computes in fp32 where
         * it is Inf: say why a large finite number is refused */
        char path[256], val[96];
        zero__cfg_join(path, sizeof path, section, key);
        zero__cfg_describe(v, val, sizeof val);
        return zero__cfg_fail(ctx, "%s: got %s, expected %s and at most %g (the largest 32-bit float: the "
                                   "optimizer computes in fp32, where this value would be Inf)",
                              path, val, what, ZERO__CFG_FLT_MAX);
    }
    if (!isfinite(d) || d < lo || (lo_open && d == lo) || d > hi) return bad(ctx, v, section, key, what);
    *out = d;
    return 1;
}

int zero__cfg_bool(zero__cfg_ctx *ctx, const json_t *obj, const char *section, const char *key,
                   int32_t *out) {
    const json_t *v = get_given(ctx, obj, section, key);
    if (!v) return 0;
    if (json_is_boolean(v)) {
        *out = json_is_true(v) ? 1 : 0;
        return 1;
    }
    if (json_is_integer(v) && (json_integer_value(v) == 0 || json_integer_value(v) == 1)) {
        *out = (int32_t)json_integer_value(v);
        return 1;
    }
    return bad(ctx, v, section, key, "true or false");
}

int zero__cfg_str(zero__cfg_ctx *ctx, const json_t *obj, const char *section, const char *key,
                  const char **out) {
    const json_t *v = obj && json_is_object(obj) ? json_object_get(obj, key) : NULL;
    if (!v || json_is_null(v)) return 0;
    if (!json_is_string(v) || json_string_length(v) == 0) return bad(ctx, v, section, key, "a non-empty string");
    *out = json_string_value(v);
    return 1;
}

int zero__cfg_obj(zero__cfg_ctx *ctx, const json_t *obj, const char *section, const char *key,
                  const json_t **out) {
    const json_t *v = obj && json_is_object(obj) ? json_object_get(obj, key) : NULL;
    *out = NULL;
    if (!v || json_is_null(v)) return 0;
    if (!json_is_object(v)) return bad(ctx, v, section, key, "an object");
    *out = v;
    return 1;
}

/* Does v mean "this feature is off"?  Numbers compare by value so that a
 * quiet "1" also matches 1.0. */
static int is_quiet(const json_t *v, const char *quiet) {
    if (json_is_object(v)) {
        const json_t *en = json_object_get(v, "enabled");
        if (en && (json_is_false(en) || (json_is_integer(en) && json_integer_value(en) == 0))) return 1;
    }
    if (!quiet) return 0;
    json_t *q = json_loads(quiet, JSON_DECODE_ANY, NULL);
    int same = 0;
    if (q) {
        if (json_is_number(q) && json_is_number(v))
            same = json_number_value(q) == json_number_value(v);
        else
            same = json_equal(q, (json_t *)v);
        json_decref(q);
    }
    return same;
}

void zero__cfg_check_keys(zero__cfg_ctx *ctx, const json_t *obj, const char *section,
                          const zero__cfg_key *keys) {
    const char *key;
    json_t *v;
    if (!obj || !json_is_object(obj)) return;
    /* json_object_foreach needs a non-const object; iteration does not modify it. */
    json_object_foreach((json_t *)obj, key, v) {
        const zero__cfg_key *k = keys;
        char path[256];
        while (k->name && strcmp(k->name, key) != 0) ++k;
        zero__cfg_join(path, sizeof path, section, key);
        if (!k->name) {
            /* (1.7.5) a misspelt key ("gradient_acumulation_steps") trains
             * with the default: name the key it probably meant */
            const char *near = NULL;
            for (const zero__cfg_key *c = keys; c->name; ++c) near = zero__nearer(key, c->name, near);
            if (near)
                zero__cfg_warn(ctx, "%s: unknown key, ignored (did you mean %s?)", path, near);
            else
                zero__cfg_warn(ctx, "%s: unknown key, ignored", path);
        } else if (k->kind == ZERO__KEY_IGNORED && !is_quiet(v, k->quiet)) {
            zero__cfg_warn(ctx, "%s: %s", path, k->why ? k->why : "not implemented by libzero, ignored");
        }
    }
}
