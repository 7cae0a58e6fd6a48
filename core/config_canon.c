/* The config in canonical form for the ranks' agreement at engine creation
 * (engine_agree.c; declared in config_canon.h), and the first difference between two such forms, so
 * that a mismatch names a key and both values rather than two digests. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_internal.h"
#include "config_canon.h"

/* Keys left out of the agreement, and why:
 *  - the two nvme_path keys: node-local scratch directories; nodes may
 *    mount their NVMe drives at different paths (each rank checks its own
 *    directory at engine setup);
 *  - trace: where a rank writes its own timeline, changes no value;
 *  - zero_optimization.plugin: may be a path, which differs between nodes
 *    that install plugins in different places; the plugin itself is agreed
 *    by name and build id instead. */
static const char *const EXCLUDED[] = {"zero_optimization.offload_optimizer.nvme_path",
                                       "zero_optimization.offload_param.nvme_path", "trace",
                                       "zero_optimization.plugin"};

static void drop_path(json_t *root, const char *path) {
    char buf[128];
    snprintf(buf, sizeof buf, "%s", path);
    json_t *o = root;
    char *key = buf;
    for (char *dot; (dot = strchr(key, '.')) != NULL; key = dot + 1) {
        *dot = '\0';
        o = json_object_get(o, key);
        if (!json_is_object(o)) return;
    }
    json_object_del(o, key);
}

char *zero__config_canonical(const zero__config *c) {
    json_t *copy = c && c->root ? json_deep_copy(c->root) : json_object();
    if (!copy) return NULL;
    if (json_is_object(copy))
        for (size_t i = 0; i < sizeof EXCLUDED / sizeof EXCLUDED[0]; i++) drop_path(copy, EXCLUDED[i]);
    char *t = json_dumps(copy, JSON_SORT_KEYS | JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(17));
    json_decref(copy);
    return t;
}

/* ---- first difference ---- */

typedef struct diff_out {
    char *path, *va, *vb;
    size_t plen, vlen;
} diff_out;

/* v as compact JSON into out ("absent" for NULL), with `digits` for reals;
 * a long value is cut with "...". */
static void show(const json_t *v, int digits, char *out, size_t n) {
    if (!v) {
        snprintf(out, n, "absent");
        return;
    }
    char *s = json_dumps(v, JSON_SORT_KEYS | JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(digits));
    if (!s) {
        snprintf(out, n, "?");
        return;
    }
    if (strlen(s) >= n && n > 4) snprintf(out, n, "%.*s...", (int)(n - 4), s);
    else snprintf(out, n, "%s", s);
    free(s);
}

static int report(diff_out *d, const char *path, const json_t *x, const json_t *y) {
    snprintf(d->path, d->plen, "%s", path[0] ? path : "(the whole config)");
    show(x, 15, d->va, d->vlen);
    show(y, 15, d->vb, d->vlen);
    if (!strcmp(d->va, d->vb)) { /* reals equal to 15 digits: show all 17 */
        show(x, 17, d->va, d->vlen);
        show(y, 17, d->vb, d->vlen);
    }
    return 1;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

static int diff(const json_t *x, const json_t *y, const char *path, diff_out *d);

/* Objects: the union of their keys in sorted order. */
static int diff_objects(const json_t *x, const json_t *y, const char *path, diff_out *d) {
    size_t n = json_object_size(x) + json_object_size(y), k = 0;
    const char **keys = malloc((n ? n : 1) * sizeof *keys);
    if (!keys) return report(d, path, x, y);
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)x, key, v) keys[k++] = key;
    json_object_foreach((json_t *)y, key, v) if (!json_object_get(x, key)) keys[k++] = key;
    qsort(keys, k, sizeof *keys, cmp_str);
    int found = 0;
    for (size_t i = 0; i < k && !found; i++) {
        char sub[512];
        snprintf(sub, sizeof sub, "%s%s%s", path, path[0] ? "." : "", keys[i]);
        found = diff(json_object_get(x, keys[i]), json_object_get(y, keys[i]), sub, d);
    }
    free(keys);
    return found;
}

static int diff(const json_t *x, const json_t *y, const char *path, diff_out *d) {
    if (!x || !y) return report(d, path, x, y);
    if (json_is_object(x) && json_is_object(y)) return diff_objects(x, y, path, d);
    if (json_is_array(x) && json_is_array(y) && json_array_size(x) == json_array_size(y)) {
        for (size_t i = 0; i < json_array_size(x); i++) {
            char sub[512];
            snprintf(sub, sizeof sub, "%s[%zu]", path, i);
            if (diff(json_array_get(x, i), json_array_get(y, i), sub, d)) return 1;
        }
        return 0;
    }
    return json_equal((json_t *)x, (json_t *)y) ? 0 : report(d, path, x, y);
}

int zero__config_first_diff(const char *a, const char *b, char *path, size_t plen, char *va, char *vb,
                            size_t vlen) {
    if (!a || !b || !path || !va || !vb || !plen || !vlen) return 0;
    json_t *x = json_loads(a, JSON_DECODE_ANY, NULL), *y = json_loads(b, JSON_DECODE_ANY, NULL);
    diff_out d = {path, va, vb, plen, vlen};
    const int found = x && y ? diff(x, y, "", &d) : 0;
    json_decref(x);
    json_decref(y);
    return found;
}
