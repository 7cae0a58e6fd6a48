/* Manifest parsing and file records (see ckpt_manifest.h).  Every value is
 * type- and range-checked where it is read; the first problem is reported
 * as "manifest: <field>: <what>". */
#include "ckpt_manifest.h"

#include "crc32c.h"
#include "shape.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_BYTES ((uint64_t)1 << 52)  /* 4 PiB: larger sizes can only be damage */
#define MAX_ITEMS (1u << 26)
/* Readers allocate one chunk (zero__ck_reader_open, zero-ckpt verify):
 * the writer uses ZERO__CK_CHUNK (1 MiB); anything above 64 MiB can only be
 * damage, and unchecked it made the reader ask for up to 4 PiB (issue 17,
 * found with the tests/fuzz harness). */
#define MAX_CHUNK ((uint64_t)1 << 26)

const char *zero__ck_dtype_name(zero_dtype dt) {
    switch (dt) {
    case ZERO_DTYPE_F32: return "fp32";
    case ZERO_DTYPE_BF16: return "bf16";
    case ZERO_DTYPE_F16: return "fp16";
    default: return "?";
    }
}

const char *zero__ck_optim_name(int32_t optim) {
    static const char *const names[] = {"AdamW", "Adam", "SGD", "Lion", "Adagrad", "LAMB"};
    return optim >= 0 && optim < (int32_t)(sizeof names / sizeof names[0]) ? names[optim] : "?";
}

/* The canonical form is independent of key order and whitespace, and a
 * parsed number dumps as it was written (jansson: %.17g round-trips a
 * double), so the saver's document and the loader's parse of it agree. */
static int canonical_crc(json_t *v, uint32_t *out) {
    char *s = json_dumps(v, JSON_SORT_KEYS | JSON_COMPACT | JSON_ENCODE_ANY);
    if (!s) return -1;
    *out = zero__crc32c(0, s, strlen(s));
    free(s);
    return 0;
}

int zero__ck_manifest_crc(json_t *root, uint32_t *out) {
    json_t *c = json_copy(root); /* shallow: only the top-level key goes */
    if (!c) return -1;
    json_object_del(c, ZERO__CK_SUM_KEY);
    int rc = canonical_crc(c, out);
    json_decref(c);
    return rc;
}

int zero__ck_manifest_seal(json_t *root) {
    uint32_t crc;
    char hex[9];
    if (zero__ck_manifest_crc(root, &crc)) return -1;
    snprintf(hex, sizeof hex, "%08x", crc);
    return json_object_set_new(root, ZERO__CK_SUM_KEY, json_string(hex));
}

uint32_t zero__ck_hparams_digest(json_t *root) {
    json_t *hp = json_object_get(json_object_get(root, "state"), "hparams");
    json_t *v = hp ? json_incref(hp) : json_null();
    uint32_t crc = 0;
    if (canonical_crc(v, &crc)) crc = 0xffffffffu; /* out of memory: never a stored digest's match by accident */
    json_decref(v);
    return crc;
}

size_t zero__ck_dtype_size(zero_dtype dt) {
    return dt == ZERO_DTYPE_F32 ? 4 : (dt == ZERO_DTYPE_BF16 || dt == ZERO_DTYPE_F16) ? 2 : 0;
}

static int dtype_from(const char *s, zero_dtype *out) {
    if (!strcmp(s, "fp32")) *out = ZERO_DTYPE_F32;
    else if (!strcmp(s, "bf16")) *out = ZERO_DTYPE_BF16;
    else if (!strcmp(s, "fp16")) *out = ZERO_DTYPE_F16;
    else return -1;
    return 0;
}

const char *zero__ck_kind_name(int32_t kind, char *buf, size_t n) {
    if (kind == ZERO__CK_PARAMS) snprintf(buf, n, "params");
    else if (kind == ZERO__CK_MASTER) snprintf(buf, n, "master");
    else if (kind >= ZERO__CK_STATE0 && kind < ZERO__CK_STATE0 + 4) snprintf(buf, n, "state%d", kind - ZERO__CK_STATE0);
    else snprintf(buf, n, "opaque");
    return buf;
}

static int kind_from(const char *s, int32_t *out) {
    if (!strcmp(s, "params")) *out = ZERO__CK_PARAMS;
    else if (!strcmp(s, "master")) *out = ZERO__CK_MASTER;
    else if (!strncmp(s, "state", 5) && s[5] >= '0' && s[5] <= '3' && !s[6]) *out = ZERO__CK_STATE0 + (s[5] - '0');
    else if (!strcmp(s, "opaque")) *out = ZERO__CK_OPAQUE;
    else return -1;
    return 0;
}

json_t *zero__ck_file_json(const zero__ck_file *f) {
    char kb[16];
    json_t *o = json_object();
    json_object_set_new(o, "file", json_string(f->file));
    json_object_set_new(o, "blob", json_string(f->blob));
    json_object_set_new(o, "rank", json_integer(f->rank));
    json_object_set_new(o, "pp_stage", json_integer(f->pp_stage));
    json_object_set_new(o, "bytes", json_integer((json_int_t)f->bytes));
    char *hex = malloc((size_t)f->nchunks * 8 + 1);
    if (hex) {
        for (uint32_t i = 0; i < f->nchunks; i++) snprintf(hex + 8 * i, 9, "%08x", f->crc[i]);
        hex[8 * (size_t)f->nchunks] = 0;
        json_object_set_new(o, "crc32c", json_string(hex));
        free(hex);
    }
    json_object_set_new(o, "kind", json_string(zero__ck_kind_name(f->kind, kb, sizeof kb)));
    if (f->kind != ZERO__CK_OPAQUE) {
        json_object_set_new(o, "dtype", json_string(zero__ck_dtype_name(f->dtype)));
        json_t *r = json_array();
        for (uint32_t i = 0; i < f->nranges; i++) {
            json_t *p = json_array();
            json_array_append_new(p, json_integer((json_int_t)f->ranges[i].flat_lo));
            json_array_append_new(p, json_integer((json_int_t)f->ranges[i].flat_hi));
            json_array_append_new(r, p);
        }
        json_object_set_new(o, "ranges", r);
    }
    return o;
}

/* ---- typed getters: 0 ok, -1 with err set ---- */
typedef struct pctx {
    char *err;
    size_t errn;
} pctx;

static int fail(pctx *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int w = snprintf(c->err, c->errn, "manifest: ");
    if (w > 0 && (size_t)w < c->errn) vsnprintf(c->err + w, c->errn - (size_t)w, fmt, ap);
    va_end(ap);
    return -1;
}

static int get_u64(pctx *c, json_t *o, const char *where, const char *key, uint64_t max, uint64_t *out) {
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v)) return fail(c, "%s%s: missing or not an integer", where, key);
    json_int_t x = json_integer_value(v);
    if (x < 0 || (uint64_t)x > max) return fail(c, "%s%s: %lld out of range 0..%llu", where, key, (long long)x,
                                                (unsigned long long)max);
    *out = (uint64_t)x;
    return 0;
}
static int get_i32(pctx *c, json_t *o, const char *where, const char *key, int32_t lo, int32_t hi, int32_t *out) {
    uint64_t u = 0; /* set by get_u64 on success; gcc -O2 cannot see that */
    json_t *v = json_object_get(o, key);
    if (json_is_integer(v) && json_integer_value(v) < 0 && lo < 0) {
        json_int_t x = json_integer_value(v);
        if (x < lo) return fail(c, "%s%s: %lld out of range", where, key, (long long)x);
        *out = (int32_t)x;
        return 0;
    }
    if (get_u64(c, o, where, key, (uint64_t)(hi < 0 ? 0 : hi), &u)) return -1;
    if ((int64_t)u < lo) return fail(c, "%s%s: %llu out of range", where, key, (unsigned long long)u);
    *out = (int32_t)u;
    return 0;
}
static int get_str(pctx *c, json_t *o, const char *where, const char *key, char **out) {
    json_t *v = json_object_get(o, key);
    if (!json_is_string(v)) return fail(c, "%s%s: missing or not a string", where, key);
    *out = strdup(json_string_value(v));
    return *out ? 0 : fail(c, "out of memory");
}
static int get_f64(pctx *c, json_t *o, const char *where, const char *key, double *out) {
    json_t *v = json_object_get(o, key);
    if (!json_is_number(v)) return fail(c, "%s%s: missing or not a number", where, key);
    *out = json_number_value(v);
    return 0;
}
static int get_i64(pctx *c, json_t *o, const char *where, const char *key, int64_t *out) {
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v)) return fail(c, "%s%s: missing or not an integer", where, key);
    *out = (int64_t)json_integer_value(v);
    return 0;
}
static int get_dtype(pctx *c, json_t *o, const char *where, const char *key, zero_dtype *out) {
    json_t *v = json_object_get(o, key);
    if (!json_is_string(v) || dtype_from(json_string_value(v), out))
        return fail(c, "%s%s: expected \"fp32\", \"bf16\" or \"fp16\"", where, key);
    return 0;
}
static int get_array(pctx *c, json_t *o, const char *key, json_t **out) {
    *out = json_object_get(o, key);
    if (!json_is_array(*out)) return fail(c, "%s: missing or not an array", key);
    if (json_array_size(*out) > MAX_ITEMS) return fail(c, "%s: %zu entries", key, json_array_size(*out));
    return 0;
}

static int hexval(int ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    return -1;
}

/* i: the index in "files", or (size_t)-1 for the "client_state" record */
static int parse_file(pctx *c, const zero__ck_manifest *m, json_t *o, size_t i, zero__ck_file *f) {
    char w[48];
    if (i == (size_t)-1) snprintf(w, sizeof w, "client_state.");
    else snprintf(w, sizeof w, "files[%zu].", i);
    if (!json_is_object(o)) return fail(c, "%.*s: not an object", (int)strlen(w) - 1, w);
    char *kind = NULL;
    if (get_str(c, o, w, "file", &f->file) || get_str(c, o, w, "blob", &f->blob) ||
        get_i32(c, o, w, "rank", 0, m->world - 1, &f->rank) ||
        get_i32(c, o, w, "pp_stage", 0, m->pp_stages - 1, &f->pp_stage) ||
        get_u64(c, o, w, "bytes", MAX_BYTES, &f->bytes) || get_str(c, o, w, "kind", &kind))
        return -1;
    /* a file name is a plain name inside the checkpoint directory */
    if (!f->file[0] || strchr(f->file, '/') || !strcmp(f->file, ".") || !strcmp(f->file, ".."))
        return free(kind), fail(c, "%sfile: '%s' is not a plain file name", w, f->file);
    int bad = kind_from(kind, &f->kind);
    free(kind);
    if (bad) return fail(c, "%skind: unknown", w);
    json_t *crc = json_object_get(o, "crc32c");
    const uint64_t want = (f->bytes + m->chunk_bytes - 1) / m->chunk_bytes;
    if (!json_is_string(crc) || json_string_length(crc) != want * 8)
        return fail(c, "%scrc32c: expected %llu checksums for %llu bytes", w, (unsigned long long)want,
                    (unsigned long long)f->bytes);
    f->nchunks = (uint32_t)want;
    f->crc = calloc(want ? want : 1, sizeof *f->crc);
    if (!f->crc) return fail(c, "out of memory");
    const char *h = json_string_value(crc);
    for (uint64_t k = 0; k < want; k++) {
        uint32_t v = 0;
        for (int d = 0; d < 8; d++) {
            int x = hexval(h[8 * k + (uint64_t)d]);
            if (x < 0) return fail(c, "%scrc32c: not lowercase hex", w);
            v = v << 4 | (uint32_t)x;
        }
        f->crc[k] = v;
    }
    if (f->kind == ZERO__CK_OPAQUE) return 0;
    if (get_dtype(c, o, w, "dtype", &f->dtype)) return -1;
    json_t *r = json_object_get(o, "ranges");
    if (!json_is_array(r) || json_array_size(r) > MAX_ITEMS) return fail(c, "%sranges: missing or not an array", w);
    f->nranges = (uint32_t)json_array_size(r);
    f->ranges = calloc(f->nranges ? f->nranges : 1, sizeof *f->ranges);
    if (!f->ranges) return fail(c, "out of memory");
    const zero__ck_layout *L = zero__ck_layout_of(m, f->pp_stage);
    uint64_t total = 0;
    for (uint32_t k = 0; k < f->nranges; k++) {
        json_t *p = json_array_get(r, k);
        json_t *a = json_array_get(p, 0), *b = json_array_get(p, 1);
        if (!json_is_array(p) || json_array_size(p) != 2 || !json_is_integer(a) || !json_is_integer(b))
            return fail(c, "%sranges[%u]: expected [flat_lo, flat_hi]", w, k);
        json_int_t lo = json_integer_value(a), hi = json_integer_value(b);
        if (lo < 0 || hi < lo || !L || (uint64_t)hi > L->flat_numel)
            return fail(c, "%sranges[%u]: [%lld, %lld) outside the flat space", w, k, (long long)lo, (long long)hi);
        f->ranges[k] = (zero__ck_range){(uint64_t)lo, (uint64_t)hi};
        total += (uint64_t)(hi - lo);
    }
    if (total * zero__ck_dtype_size(f->dtype) != f->bytes)
        return fail(c, "%sranges: %llu elements of %s are not %llu bytes", w, (unsigned long long)total,
                    zero__ck_dtype_name(f->dtype), (unsigned long long)f->bytes);
    return 0;
}

/* The manifest's own checksum, before any field is believed. */
static int check_sum(pctx *c, const zero__ck_manifest *m, json_t *root) {
    json_t *v = json_object_get(root, ZERO__CK_SUM_KEY);
    if (m->version == ZERO__CK_VERSION_LEGACY)
        return v ? fail(c, "%s: present in a version-%d manifest (libzero 1.5.1 and older wrote none): the version "
                           "field was changed",
                        ZERO__CK_SUM_KEY, m->version)
                 : 0;
    uint32_t want = 0, got;
    const char *h = json_string_value(v);
    if (!h || strlen(h) != 8) return fail(c, "%s: missing or not 8 hex digits", ZERO__CK_SUM_KEY);
    for (int d = 0; d < 8; d++) {
        int x = hexval(h[d]);
        if (x < 0) return fail(c, "%s: not lowercase hex", ZERO__CK_SUM_KEY);
        want = want << 4 | (uint32_t)x;
    }
    if (zero__ck_manifest_crc(root, &got)) return fail(c, "out of memory");
    if (got != want)
        return fail(c, "%s: recorded %08x, the content's checksum is %08x: manifest.json was changed or damaged "
                       "after it was written",
                    ZERO__CK_SUM_KEY, want, got);
    return 0;
}

/* (libzero 1.10) "experts": [{"group", "colors": [per rank], "sets":
 * [{"color", "names": [...]}]}]: every rank's color known, every color's
 * names given once, as many as the group's params.  (1.13) With a
 * pipeline, one record per stage that has the group: "pp_stage" (absent:
 * 0), its colors those of the stage's data-parallel ranks and its names
 * that stage's params of the group. */
static int parse_experts(pctx *c, zero__ck_manifest *m, json_t *root) {
    json_t *a = json_object_get(root, "experts");
    if (!a) return 0;
    if (get_array(c, root, "experts", &a)) return -1;
    m->nexperts = (uint32_t)json_array_size(a);
    m->experts = calloc(m->nexperts ? m->nexperts : 1, sizeof *m->experts);
    if (!m->experts) return fail(c, "out of memory");
    for (uint32_t i = 0; i < m->nexperts; i++) {
        zero__ck_experts *x = &m->experts[i];
        json_t *o = json_array_get(a, i), *cs = json_object_get(o, "colors"), *ss = json_object_get(o, "sets");
        char w[32];
        snprintf(w, sizeof w, "experts[%u].", i);
        if (!json_is_object(o) || get_i32(c, o, w, "group", -(1 << 30), 1 << 30, &x->group))
            return c->err[0] ? -1 : fail(c, "experts[%u]: not an object", i);
        x->pp_stage = 0;
        if (json_object_get(o, "pp_stage") && get_i32(c, o, w, "pp_stage", 0, m->pp_stages - 1, &x->pp_stage)) return -1;
        for (uint32_t k = 0; k < i; k++)
            if (m->experts[k].group == x->group && m->experts[k].pp_stage == x->pp_stage)
                return fail(c, "experts[%u]: group %d of pipeline stage %d twice", i, (int)x->group, (int)x->pp_stage);
        for (uint32_t k = 0; k < m->nparams; k++)
            x->nnames += m->params[k].group == x->group && m->params[k].pp_stage == x->pp_stage;
        if (!x->nnames)
            return fail(c, "experts[%u]: group %d holds no parameter of pipeline stage %d", i, (int)x->group,
                        (int)x->pp_stage);
        if (!json_is_array(cs) || json_array_size(cs) != (size_t)m->world)
            return fail(c, "experts[%u].colors: not an array of world_size %d colors", i, (int)m->world);
        if (!json_is_array(ss) || json_array_size(ss) < 1 || json_array_size(ss) > (size_t)m->world)
            return fail(c, "experts[%u].sets: not an array of 1 to %d entries", i, (int)m->world);
        x->nsets = (uint32_t)json_array_size(ss);
        x->colors = calloc((size_t)m->world, sizeof *x->colors);
        x->sets = calloc(x->nsets, sizeof *x->sets);
        if (!x->colors || !x->sets) return fail(c, "out of memory");
        for (uint32_t k = 0; k < x->nsets; k++) {
            zero__ck_expert_set *e = &x->sets[k];
            json_t *so = json_array_get(ss, k), *ns = json_object_get(so, "names");
            char ws[48];
            snprintf(ws, sizeof ws, "experts[%u].sets[%u].", i, k);
            if (!json_is_object(so) || get_i32(c, so, ws, "color", 0, 1 << 30, &e->color))
                return c->err[0] ? -1 : fail(c, "experts[%u].sets[%u]: not an object", i, k);
            for (uint32_t q = 0; q < k; q++)
                if (x->sets[q].color == e->color) return fail(c, "%scolor: %d twice", ws, (int)e->color);
            if (!json_is_array(ns) || json_array_size(ns) != x->nnames)
                return fail(c, "%snames: not an array of the group's %u parameter names", ws, x->nnames);
            if (!(e->names = calloc(x->nnames, sizeof *e->names))) return fail(c, "out of memory");
            for (uint32_t q = 0; q < x->nnames; q++) {
                json_t *n = json_array_get(ns, q);
                if (!json_is_string(n)) return fail(c, "%snames[%u]: not a string", ws, q);
                if (!(e->names[q] = strdup(json_string_value(n)))) return fail(c, "out of memory");
            }
        }
        for (int r = 0; r < m->world; r++) {
            json_t *v = json_array_get(cs, (size_t)r);
            if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > (1 << 30))
                return fail(c, "experts[%u].colors[%d]: not a color", i, r);
            x->colors[r] = (int32_t)json_integer_value(v);
            uint32_t k = 0;
            while (k < x->nsets && x->sets[k].color != x->colors[r]) k++;
            if (k == x->nsets) return fail(c, "experts[%u].colors[%d]: color %d has no names", i, r, (int)x->colors[r]);
        }
    }
    return 0;
}

int zero__ck_expert_index(const zero__ck_manifest *m, int32_t group, int32_t pp_stage) {
    for (uint32_t i = 0; i < m->nexperts; i++)
        if (m->experts[i].group == group && m->experts[i].pp_stage == pp_stage) return (int)i;
    return -1;
}

static int parse(pctx *c, zero__ck_manifest *m, json_t *root) {
    if (!json_is_object(root)) return fail(c, "not a JSON object");
    json_t *fmt = json_object_get(root, "format");
    if (!json_is_string(fmt) || strcmp(json_string_value(fmt), ZERO__CK_FORMAT))
        return fail(c, "format: not a libzero checkpoint manifest");
    if (get_i32(c, root, "", "version", 0, 1 << 30, &m->version)) return -1;
    if (m->version != ZERO__CK_VERSION && m->version != ZERO__CK_VERSION_LEGACY)
        return fail(c, "version: the manifest is format version %d, this library reads versions %d and %d",
                    m->version, ZERO__CK_VERSION_LEGACY, ZERO__CK_VERSION);
    if (check_sum(c, m, root)) return -1;
    uint64_t u = 0;
    if (get_str(c, root, "", "tag", &m->tag) || get_str(c, root, "", "plugin", &m->plugin) ||
        get_str(c, root, "", "library_version", &m->library_version) ||
        get_i32(c, root, "", "abi_version", 0, 1 << 30, &m->abi_version) ||
        get_i32(c, root, "", "stage", 0, 3, &m->stage) || get_i32(c, root, "", "world_size", 1, 1 << 24, &m->world) ||
        get_i32(c, root, "", "pp_stages", 1, 1 << 16, &m->pp_stages) ||
        get_i32(c, root, "", "reshardable", 0, 1, &m->reshardable) ||
        get_dtype(c, root, "", "model_dtype", &m->model_dtype) || get_i32(c, root, "", "optimizer", 0, 64, &m->optim) ||
        get_u64(c, root, "", "optimizer_states", 4, &u))
        return -1;
    m->nstate = (uint32_t)u;
    if (get_u64(c, root, "", "chunk_bytes", MAX_CHUNK, &m->chunk_bytes)) return -1;
    if (m->chunk_bytes < 4096) return fail(c, "chunk_bytes: %llu is too small", (unsigned long long)m->chunk_bytes);
    json_t *st = json_object_get(root, "state");
    if (!json_is_object(st)) return fail(c, "state: missing");
    zero__ck_state *s = &m->st;
    if (get_u64(c, st, "state.", "global_step", MAX_BYTES, &s->global_step) ||
        get_u64(c, st, "state.", "skipped_steps", MAX_BYTES, &s->skipped_steps) ||
        get_u64(c, st, "state.", "micro_step", 1u << 30, &u) || get_f64(c, st, "state.", "lr", &s->lr))
        return -1;
    s->micro_step = (uint32_t)u;
    json_t *ls = json_object_get(st, "loss_scaler");
    if (!json_is_object(ls)) return fail(c, "state.loss_scaler: missing");
    const char *w = "state.loss_scaler.";
    if (get_i32(c, ls, w, "dynamic", 0, 1, &s->ls_dynamic) || get_f64(c, ls, w, "scale", &s->ls_scale) ||
        get_f64(c, ls, w, "min_scale", &s->ls_min_scale) || get_i32(c, ls, w, "window", 0, 1 << 30, &s->ls_window) ||
        get_i32(c, ls, w, "hysteresis", 0, 1 << 30, &s->ls_delayed_shift) ||
        get_i32(c, ls, w, "cur_hysteresis", -(1 << 30), 1 << 30, &s->ls_cur_hysteresis) ||
        get_i32(c, ls, w, "consecutive_hysteresis", 0, 1, &s->ls_consecutive) ||
        get_i64(c, ls, w, "cur_iter", &s->ls_cur_iter) || get_i64(c, ls, w, "last_overflow_iter", &s->ls_last_overflow_iter))
        return -1;

    json_t *a;
    if (get_array(c, root, "layouts", &a)) return -1;
    m->nlayouts = (uint32_t)json_array_size(a);
    m->layouts = calloc(m->nlayouts ? m->nlayouts : 1, sizeof *m->layouts);
    if (!m->layouts) return fail(c, "out of memory");
    for (uint32_t i = 0; i < m->nlayouts; i++) {
        char wl[32];
        snprintf(wl, sizeof wl, "layouts[%u].", i);
        json_t *o = json_array_get(a, i);
        zero__ck_layout *L = &m->layouts[i];
        if (!json_is_object(o) || get_i32(c, o, wl, "pp_stage", 0, m->pp_stages - 1, &L->pp_stage) ||
            get_u64(c, o, wl, "align", 1u << 20, &L->align) || get_u64(c, o, wl, "flat_numel", MAX_BYTES, &L->flat_numel) ||
            get_u64(c, o, wl, "part_numel", MAX_BYTES, &L->part_numel))
            return c->err[0] ? -1 : fail(c, "layouts[%u]: not an object", i);
        json_t *gs = json_object_get(o, "groups");
        if (json_is_array(gs) && json_array_size(gs) > 0) {
            L->ngroups = (uint32_t)json_array_size(gs);
            if (!(L->group_begin = calloc(L->ngroups, sizeof *L->group_begin))) return fail(c, "out of memory");
            for (uint32_t g = 0; g < L->ngroups; g++) {
                char wg[48];
                snprintf(wg, sizeof wg, "layouts[%u].groups[%u].", i, g);
                json_t *x = json_array_get(gs, g);
                if (!json_is_object(x)) return fail(c, "layouts[%u].groups[%u]: not an object", i, g);
                if (get_u64(c, x, wg, "flat_begin", L->flat_numel, &L->group_begin[g])) return -1;
            }
        }
    }
    for (int p = 0; p < m->pp_stages; p++)
        if (!zero__ck_layout_of(m, p)) return fail(c, "layouts: no entry for pipeline stage %d", p);

    if (get_array(c, root, "params", &a)) return -1;
    m->nparams = (uint32_t)json_array_size(a);
    m->params = calloc(m->nparams ? m->nparams : 1, sizeof *m->params);
    if (!m->params) return fail(c, "out of memory");
    for (uint32_t i = 0; i < m->nparams; i++) {
        char wp[32];
        snprintf(wp, sizeof wp, "params[%u].", i);
        json_t *o = json_array_get(a, i);
        zero__ck_param *p = &m->params[i];
        if (!json_is_object(o)) return fail(c, "params[%u]: not an object", i);
        if (get_str(c, o, wp, "name", &p->name) || get_u64(c, o, wp, "numel", MAX_BYTES, &p->numel) ||
            get_dtype(c, o, wp, "dtype", &p->dtype) || get_i32(c, o, wp, "group", -(1 << 30), 1 << 30, &p->group) ||
            get_i32(c, o, wp, "pp_stage", 0, m->pp_stages - 1, &p->pp_stage) ||
            get_u64(c, o, wp, "flat_offset", MAX_BYTES, &p->flat_offset))
            return -1;
        /* (1.8) "shape": the host's (zero_param_desc.shape), or [numel];
         * optional, and only recorded, but it must hold numel elements */
        json_t *sh = json_object_get(o, "shape");
        if (sh) {
            if (!json_is_array(sh) || json_array_size(sh) > ZERO_MAX_NDIM)
                return fail(c, "params[%u] '%s'.shape: not an array of at most %d sizes", i, p->name, ZERO_MAX_NDIM);
            p->ndim = (uint32_t)json_array_size(sh);
            for (uint32_t k = 0; k < p->ndim; k++) {
                json_t *d = json_array_get(sh, k);
                if (!json_is_integer(d) || json_integer_value(d) < 0)
                    return fail(c, "params[%u] '%s'.shape[%u]: not a size", i, p->name, k);
                p->shape[k] = (uint64_t)json_integer_value(d);
            }
            uint64_t prod = 0;
            if (zero__shape_numel(p->shape, p->ndim, &prod) != 0 || prod != p->numel)
                return fail(c, "params[%u] '%s'.shape: holds another number of elements than numel %llu", i, p->name,
                            (unsigned long long)p->numel);
            p->has_shape = 1;
        }
        const zero__ck_layout *L = zero__ck_layout_of(m, p->pp_stage);
        if (p->flat_offset + p->numel > L->flat_numel)
            return fail(c, "params[%u] '%s': elements [%llu, %llu) outside the flat space of %llu", i, p->name,
                        (unsigned long long)p->flat_offset, (unsigned long long)(p->flat_offset + p->numel),
                        (unsigned long long)L->flat_numel);
    }

    if (get_array(c, root, "files", &a)) return -1;
    m->nfiles = (uint32_t)json_array_size(a);
    /* one more slot: the client state's record (1.7) sits after the files,
     * so that a reader serves it like any file (zero__ck_reader_open) */
    m->files = calloc(m->nfiles + 1u, sizeof *m->files);
    if (!m->files) return fail(c, "out of memory");
    for (uint32_t i = 0; i < m->nfiles; i++)
        if (parse_file(c, m, json_array_get(a, i), i, &m->files[i])) return -1;
    json_t *cs = json_object_get(root, "client_state");
    if (cs) {
        zero__ck_file *f = &m->files[m->nfiles];
        m->client = f; /* set first: freed with the files whatever parse_file leaves */
        if (parse_file(c, m, cs, (size_t)-1, f)) return -1;
        if (f->kind != ZERO__CK_OPAQUE || f->rank != 0 || f->pp_stage != 0 || strcmp(f->blob, ZERO__CK_CLIENT_BLOB) ||
            strcmp(f->file, ZERO__CK_CLIENT_FILE))
            return fail(c, "client_state: expected the opaque blob '%s' of rank 0 in '%s'", ZERO__CK_CLIENT_BLOB,
                        ZERO__CK_CLIENT_FILE);
        for (uint32_t i = 0; i < m->nfiles; i++)
            if (!strcmp(m->files[i].file, f->file))
                return fail(c, "client_state: '%s' is also files[%u]", f->file, i);
    }
    return parse_experts(c, m, root);
}

zero__ck_manifest *zero__ck_manifest_parse(const char *text, size_t len, char *err, size_t errn) {
    pctx c = {err, errn};
    if (errn) err[0] = 0;
    json_error_t je;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        fail(&c, "not valid JSON (line %d: %s)", je.line, je.text);
        return NULL;
    }
    zero__ck_manifest *m = calloc(1, sizeof *m);
    if (!m) {
        json_decref(root);
        fail(&c, "out of memory");
        return NULL;
    }
    m->root = root;
    if (parse(&c, m, root)) {
        zero__ck_manifest_free(m);
        return NULL;
    }
    return m;
}

void zero__ck_manifest_free(zero__ck_manifest *m) {
    if (!m) return;
    for (uint32_t i = 0; m->files && i < zero__ck_nrecords(m); i++) {
        free(m->files[i].file);
        free(m->files[i].blob);
        free(m->files[i].crc);
        free(m->files[i].ranges);
    }
    for (uint32_t i = 0; i < m->nparams; i++) free(m->params[i].name);
    free(m->files);
    free(m->params);
    for (uint32_t i = 0; m->layouts && i < m->nlayouts; i++) free(m->layouts[i].group_begin);
    free(m->layouts);
    for (uint32_t i = 0; m->experts && i < m->nexperts; i++) {
        for (uint32_t k = 0; m->experts[i].sets && k < m->experts[i].nsets; k++) {
            for (uint32_t q = 0; m->experts[i].sets[k].names && q < m->experts[i].nnames; q++)
                free(m->experts[i].sets[k].names[q]);
            free(m->experts[i].sets[k].names);
        }
        free(m->experts[i].sets);
        free(m->experts[i].colors);
    }
    free(m->experts);
    free(m->tag);
    free(m->plugin);
    free(m->library_version);
    json_decref(m->root);
    free(m);
}

const zero__ck_file *zero__ck_find(const zero__ck_manifest *m, const char *blob, int rank, int pp_stage) {
    for (uint32_t i = 0; i < m->nfiles; i++) {
        const zero__ck_file *f = &m->files[i];
        if (f->rank == rank && f->pp_stage == pp_stage && !strcmp(f->blob, blob)) return f;
    }
    return NULL;
}

const zero__ck_layout *zero__ck_layout_of(const zero__ck_manifest *m, int pp_stage) {
    for (uint32_t i = 0; i < m->nlayouts; i++)
        if (m->layouts[i].pp_stage == pp_stage) return &m->layouts[i];
    return NULL;
}
