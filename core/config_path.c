/* Dotted-path lookups into the parsed JSON ("zero_optimization.stage",
 * "optimizer.params.betas[1]", "optimizer.param_groups.0.lr").
 *
 * Plugins read their own keys this way, so the lookups see the JSON exactly
 * as written (no defaults filled in: the typed zero_run_config has those).
 * Read-only on an immutable tree, hence safe from any thread. */
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "config_internal.h"

/* Parse a decimal index at s (digits only, up to `end`). -1 if not one. */
static long parse_index(const char *s, const char *end) {
    long v = 0;
    if (s == end) return -1;
    for (const char *p = s; p < end; ++p) {
        if (!isdigit((unsigned char)*p) || v > 100000000L) return -1;
        v = v * 10 + (*p - '0');
    }
    return v;
}

const json_t *zero__cfg_lookup(const json_t *root, const char *path, int *through_scalar) {
    const json_t *cur = root;
    const char *p = path;
    *through_scalar = 0;
    if (!root || !path || !*path) return NULL;
    while (*p) {
        if (*p == '[') {
            const char *close = strchr(p, ']');
            long idx;
            if (!close) return NULL;
            idx = parse_index(p + 1, close);
            if (!json_is_array(cur)) {
                if (cur && !json_is_object(cur)) *through_scalar = 1;
                return NULL;
            }
            if (idx < 0) return NULL;
            cur = json_array_get(cur, (size_t)idx);
            p = close + 1;
        } else {
            const char *end = p + strcspn(p, ".[");
            char key[256];
            size_t len = (size_t)(end - p);
            if (len == 0 || len >= sizeof key) return NULL;
            memcpy(key, p, len);
            key[len] = '\0';
            if (json_is_object(cur)) {
                cur = json_object_get(cur, key);
            } else if (json_is_array(cur)) {
                long idx = parse_index(p, end);
                if (idx < 0) return NULL;
                cur = json_array_get(cur, (size_t)idx);
            } else {
                *through_scalar = 1;
                return NULL;
            }
            p = end;
        }
        if (!cur) return NULL;
        if (*p == '.') {
            ++p;
            if (!*p) return NULL; /* trailing dot: not a path */
            if (!json_is_object(cur) && !json_is_array(cur)) {
                *through_scalar = 1;
                return NULL;
            }
        }
    }
    return cur;
}

/* Shared prologue: 0 absent (or null), -1 path through a scalar; else 1. */
static int find(const zero__config *c, const char *path, const json_t **v) {
    int through = 0;
    *v = c ? zero__cfg_lookup(c->root, path, &through) : NULL;
    if (through) return -1;
    if (!*v || json_is_null(*v)) return 0;
    return 1;
}

int zero__config_int(const zero__config *c, const char *path, int64_t *out) {
    const json_t *v;
    int r = find(c, path, &v);
    if (r != 1) return r;
    if (json_is_integer(v)) {
        *out = (int64_t)json_integer_value(v);
        return 1;
    }
    if (json_is_real(v)) {
        double d = json_real_value(v);
        if (d == floor(d) && fabs(d) <= 9007199254740992.0) {
            *out = (int64_t)d;
            return 1;
        }
    }
    return -1;
}

int zero__config_double(const zero__config *c, const char *path, double *out) {
    const json_t *v;
    int r = find(c, path, &v);
    if (r != 1) return r;
    if (!json_is_number(v)) return -1;
    *out = json_number_value(v);
    return 1;
}

int zero__config_bool(const zero__config *c, const char *path, int *out) {
    const json_t *v;
    int r = find(c, path, &v);
    if (r != 1) return r;
    if (!json_is_boolean(v)) return -1;
    *out = json_is_true(v) ? 1 : 0;
    return 1;
}

int zero__config_string(const zero__config *c, const char *path, const char **out) {
    const json_t *v;
    /* the offload devices as resolved (legacy cpu_offload, the stage-auto
     * override): zero__config_set_offload */
    if (c && path && (strcmp(path, "zero_optimization.offload_optimizer.device") == 0 ||
                      strcmp(path, "zero_optimization.offload_param.device") == 0)) {
        const char *d = strstr(path, "offload_optimizer") ? c->offload_opt_device : c->offload_param_device;
        *out = d ? d : "none";
        return 1;
    }
    int r = find(c, path, &v);
    if (r != 1) return r;
    if (!json_is_string(v)) return -1;
    *out = json_string_value(v);
    return 1;
}

double zero__config_double_or(const zero__config *c, const char *path, double dflt) {
    double v;
    return zero__config_double(c, path, &v) == 1 ? v : dflt;
}

int64_t zero__config_int_or(const zero__config *c, const char *path, int64_t dflt) {
    int64_t v;
    return zero__config_int(c, path, &v) == 1 ? v : dflt;
}
