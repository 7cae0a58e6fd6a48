/* The whole-checkpoint checks shared by zero_load and zero-ckpt verify
 * (ckpt_validate.h).  The first problem is reported as "manifest: <field>:
 * <what>", naming the values that disagree. */
#include "ckpt_validate.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_hparams.h"

static int fail(char *err, size_t errn, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t errn, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int w = snprintf(err, errn, "manifest: ");
    if (w > 0 && (size_t)w < errn) vsnprintf(err + w, errn - (size_t)w, fmt, ap);
    va_end(ap);
    return -1;
}

typedef unsigned long long ull;

/* ---- the step state a load restores ---- */
static int check_state(const zero__ck_manifest *m, char *err, size_t errn) {
    const zero__ck_state *s = &m->st;
    if (!isfinite(s->lr) || s->lr < 0) return fail(err, errn, "state.lr: %g is not a finite lr >= 0", s->lr);
    if (!isfinite(s->ls_scale) || s->ls_scale <= 0)
        return fail(err, errn, "state.loss_scaler.scale: %g is not a finite scale > 0", s->ls_scale);
    if (!isfinite(s->ls_min_scale) || s->ls_min_scale <= 0)
        return fail(err, errn, "state.loss_scaler.min_scale: %g is not a finite scale > 0", s->ls_min_scale);
    if (s->ls_window < 1 || s->ls_delayed_shift < 1)
        return fail(err, errn, "state.loss_scaler: window %d, hysteresis %d (both are >= 1)", s->ls_window,
                    s->ls_delayed_shift);
    if (s->ls_cur_iter < 0 || s->ls_last_overflow_iter < -1)
        return fail(err, errn, "state.loss_scaler: cur_iter %lld, last_overflow_iter %lld out of range",
                    (long long)s->ls_cur_iter, (long long)s->ls_last_overflow_iter);
    zero__hp_override *hp = NULL;
    uint32_t nhp = 0;
    int present = 0;
    char e2[512];
    int bad = zero__ck_hparams_parse(m->root, &hp, &nhp, &present, e2, sizeof e2);
    free(hp);
    return bad ? fail(err, errn, "%s", e2) : 0;
}

/* ---- layouts ---- */
static int check_layouts(const zero__ck_manifest *m, char *err, size_t errn) {
    if ((int64_t)m->nlayouts != m->pp_stages)
        return fail(err, errn, "layouts: %u entries for %d pipeline stages", m->nlayouts, m->pp_stages);
    for (uint32_t i = 0; i < m->nlayouts; i++) {
        const zero__ck_layout *L = &m->layouts[i];
        if (zero__ck_layout_of(m, L->pp_stage) != L)
            return fail(err, errn, "layouts[%u]: pipeline stage %d has two layouts", i, L->pp_stage);
        if (!L->align || (L->align & (L->align - 1)))
            return fail(err, errn, "layouts[%u].align: %llu is not a power of two", i, (ull)L->align);
        if (L->flat_numel % L->align || L->part_numel > L->flat_numel)
            return fail(err, errn, "layouts[%u]: flat_numel %llu, part_numel %llu with align %llu", i,
                        (ull)L->flat_numel, (ull)L->part_numel, (ull)L->align);
        for (uint32_t g = 0; g < L->ngroups; g++) {
            const uint64_t b = L->group_begin[g];
            if ((g == 0 && b != 0) || (g > 0 && b <= L->group_begin[g - 1]) || b % L->align ||
                (b >= L->flat_numel && L->flat_numel))
                return fail(err, errn,
                            "layouts[%u].groups[%u].flat_begin: %llu (layout groups start at 0, aligned to %llu, "
                            "increasing, inside %llu elements)",
                            i, g, (ull)b, (ull)L->align, (ull)L->flat_numel);
        }
    }
    return 0;
}

/* ---- parameter offsets ---- */
typedef struct pkey {
    uint64_t a, b; /* sort keys */
    uint32_t i;    /* param index */
} pkey;
static int cmp_pkey(const void *x, const void *y) {
    const pkey *p = x, *q = y;
    if (p->a != q->a) return p->a < q->a ? -1 : 1;
    if (p->b != q->b) return p->b < q->b ? -1 : 1;
    return 0;
}

/* The stage's params in layout order (param groups by first appearance,
 * then registration order) into order[]; returns their count. */
static uint32_t layout_order(const zero__ck_manifest *m, int pp, pkey *k, uint32_t *order) {
    uint32_t n = 0;
    for (uint32_t i = 0; i < m->nparams; i++)
        if (m->params[i].pp_stage == pp) k[n] = (pkey){(uint64_t)(int64_t)m->params[i].group, i, i}, n++;
    qsort(k, n, sizeof *k, cmp_pkey); /* by group, then position: the first of a run is its first appearance */
    uint64_t first = 0;
    for (uint32_t j = 0; j < n; j++) {
        if (j == 0 || k[j].a != k[j - 1].a) first = k[j].b;
        k[j].a = first;
    }
    qsort(k, n, sizeof *k, cmp_pkey);
    for (uint32_t j = 0; j < n; j++) order[j] = k[j].i;
    return n;
}

static int check_offsets(const zero__ck_manifest *m, const zero__ck_layout *L, const uint32_t *order, uint32_t n,
                         char *err, size_t errn) {
    uint64_t pos = 0;
    int64_t gi = -1; /* the layout group of the previous param */
    for (uint32_t j = 0; j < n; j++) {
        const uint32_t i = order[j];
        const zero__ck_param *p = &m->params[i];
        const uint64_t next = (pos + L->align - 1) / L->align * L->align;
        const int new_group = j == 0 || p->group != m->params[order[j - 1]].group;
        int ok;
        if (L->ngroups) {
            const int at_next = gi + 1 < (int64_t)L->ngroups && p->flat_offset == L->group_begin[gi + 1] &&
                                L->group_begin[gi + 1] >= next;
            ok = at_next || (!new_group && p->flat_offset == next);
            if (at_next) gi++;
        } else { /* not recorded (never written so): alignment and order only */
            ok = p->flat_offset % L->align == 0 && (new_group ? p->flat_offset >= pos : p->flat_offset == next);
        }
        const uint64_t end = L->ngroups && gi + 1 < (int64_t)L->ngroups ? L->group_begin[gi + 1] : L->flat_numel;
        if (!ok) {
            const uint64_t want = new_group && L->ngroups && gi + 1 < (int64_t)L->ngroups ? L->group_begin[gi + 1] : next;
            return fail(err, errn,
                        "params[%u] '%s': flat_offset %llu, but the layout puts it at %llu (align %llu, the "
                        "parameters before it%s): offsets changed, swapped or overlapping",
                        i, p->name, (ull)p->flat_offset, (ull)want, (ull)L->align,
                        new_group ? ", a new param group starts a layout group" : "");
        }
        if (p->flat_offset + p->numel > end)
            return fail(err, errn, "params[%u] '%s': elements [%llu, %llu) cross the end of their layout group at %llu",
                        i, p->name, (ull)p->flat_offset, (ull)(p->flat_offset + p->numel), (ull)end);
        pos = p->flat_offset + p->numel;
    }
    if (n && L->ngroups && gi + 1 != (int64_t)L->ngroups)
        return fail(err, errn, "layouts (pipeline stage %d): %u layout groups, the parameters fill %lld", L->pp_stage,
                    L->ngroups, (long long)(gi + 1));
    return 0;
}

/* ---- files ---- */
/* qsort over pointers to the records: no context, so any thread may validate */
static int cmp_file(const void *x, const void *y) {
    const zero__ck_file *a = *(const zero__ck_file *const *)x, *b = *(const zero__ck_file *const *)y;
    if (a->pp_stage != b->pp_stage) return a->pp_stage < b->pp_stage ? -1 : 1;
    if (a->rank != b->rank) return a->rank < b->rank ? -1 : 1;
    return strcmp(a->blob, b->blob);
}
static int cmp_name(const void *x, const void *y) {
    return strcmp((*(const zero__ck_file *const *)x)->file, (*(const zero__ck_file *const *)y)->file);
}

static int check_file_set(const zero__ck_manifest *m, const zero__ck_file **ix, char *err, size_t errn) {
    const uint64_t core_bytes =
        m->version == ZERO__CK_VERSION_LEGACY ? ZERO__CORE_BLOB_V1_BYTES : sizeof(zero__core_blob);
    for (uint32_t i = 0; i < m->nfiles; i++) ix[i] = &m->files[i];
    qsort(ix, m->nfiles, sizeof *ix, cmp_name);
    for (uint32_t i = 1; i < m->nfiles; i++)
        if (!strcmp(ix[i]->file, ix[i - 1]->file)) return fail(err, errn, "files: '%s' listed twice", ix[i]->file);
    qsort(ix, m->nfiles, sizeof *ix, cmp_file);
    /* runs of (pp_stage, rank), blobs sorted: each compared with its stage's rank 0 */
    uint32_t at = 0, ref = 0, nref = 0;
    for (int pp = 0; pp < m->pp_stages; pp++)
        for (int r = 0; r < m->world; r++) {
            uint32_t b = at;
            while (at < m->nfiles && ix[at]->pp_stage == pp && ix[at]->rank == r) at++;
            const uint32_t n = at - b;
            if (r == 0) ref = b, nref = n;
            int has_core = 0;
            for (uint32_t k = 0; k < n; k++) {
                const zero__ck_file *f = ix[b + k];
                if (k && !strcmp(f->blob, ix[b + k - 1]->blob))
                    return fail(err, errn, "files: blob '%s' of rank %d pipeline stage %d listed twice", f->blob, r,
                                pp);
                if (!strcmp(f->blob, "core")) {
                    has_core = 1;
                    if (f->kind != ZERO__CK_OPAQUE || f->bytes != core_bytes)
                        return fail(err, errn, "files: %s: a core blob of %llu bytes (kind %d), expected %llu", f->file,
                                    (ull)f->bytes, f->kind, (ull)core_bytes);
                }
                if (f->kind >= ZERO__CK_STATE0 && (uint32_t)(f->kind - ZERO__CK_STATE0) >= m->nstate)
                    return fail(err, errn, "files: %s holds optimizer state %d of %u", f->file,
                                f->kind - ZERO__CK_STATE0, m->nstate);
                if (r == 0) continue;
                const zero__ck_file *g = k < nref ? ix[ref + k] : NULL;
                if (!g || strcmp(g->blob, f->blob) || g->kind != f->kind || (f->kind != ZERO__CK_OPAQUE && g->dtype != f->dtype))
                    return fail(err, errn,
                                "files: rank %d pipeline stage %d has blob '%s' where rank 0 has '%s' (an entry "
                                "missing from the manifest, or a different kind)",
                                r, pp, f->blob, g ? g->blob : "(none)");
            }
            if (!has_core)
                return fail(err, errn, "files: rank %d pipeline stage %d has no core blob (an entry missing from the "
                                       "manifest)",
                            r, pp);
            if (n != nref)
                return fail(err, errn,
                            "files: rank %d pipeline stage %d has %u blobs, rank 0 has %u (an entry missing from the "
                            "manifest)",
                            r, pp, n, nref);
        }
    return 0;
}

static int cmp_range(const void *x, const void *y) {
    const zero__ck_range *a = x, *b = y;
    if (a->flat_lo != b->flat_lo) return a->flat_lo < b->flat_lo ? -1 : 1;
    return a->flat_hi < b->flat_hi ? -1 : a->flat_hi > b->flat_hi;
}

/* Each shard's ranges sorted and disjoint; the shards of each kind of a
 * stage together hold every element of every parameter (order: the stage's
 * params by offset, as check_offsets proved). */
static int check_ranges(const zero__ck_manifest *m, int pp, const uint32_t *order, uint32_t np, char *err,
                        size_t errn) {
    uint64_t total = 0;
    for (uint32_t i = 0; i < m->nfiles; i++) {
        const zero__ck_file *f = &m->files[i];
        if (f->pp_stage != pp || f->kind == ZERO__CK_OPAQUE) continue;
        for (uint32_t k = 0; k < f->nranges; k++)
            if (k && f->ranges[k].flat_lo < f->ranges[k - 1].flat_hi)
                return fail(err, errn, "files: %s: ranges[%u] [%llu, %llu) unsorted or overlapping", f->file, k,
                            (ull)f->ranges[k].flat_lo, (ull)f->ranges[k].flat_hi);
        total += f->nranges;
    }
    zero__ck_range *all = calloc(total ? total : 1, sizeof *all);
    if (!all) return fail(err, errn, "out of memory");
    int rc = 0;
    for (int kind = ZERO__CK_PARAMS; rc == 0 && kind < ZERO__CK_STATE0 + 4; kind++) {
        uint64_t n = 0;
        for (uint32_t i = 0; i < m->nfiles; i++) {
            const zero__ck_file *f = &m->files[i];
            if (f->pp_stage == pp && f->kind == kind)
                for (uint32_t k = 0; k < f->nranges; k++) all[n++] = f->ranges[k];
        }
        if (!n) continue;
        qsort(all, n, sizeof *all, cmp_range);
        /* a sweep over the merged runs of ranges, params in offset order */
        uint64_t j = 0, run_lo = 0, run_hi = 0;
        int have = 0;
        for (uint32_t q = 0; rc == 0 && q < np; q++) {
            const zero__ck_param *p = &m->params[order[q]];
            const uint64_t a = p->flat_offset, b = p->flat_offset + p->numel;
            if (!p->numel) continue;
            while (!(have && run_lo <= a && run_hi >= b) && j < n) {
                if (!have || all[j].flat_lo > run_hi) run_lo = all[j].flat_lo, run_hi = all[j].flat_hi, have = 1;
                else if (all[j].flat_hi > run_hi) run_hi = all[j].flat_hi;
                j++;
            }
            if (!(have && run_lo <= a && run_hi >= b)) {
                char kb[16];
                rc = fail(err, errn,
                          "files: no %s shard of pipeline stage %d holds all of parameter '%s' (elements [%llu, %llu))",
                          zero__ck_kind_name(kind, kb, sizeof kb), pp, p->name, (ull)a, (ull)b);
            }
        }
    }
    free(all);
    return rc;
}

int zero__ck_manifest_validate(const zero__ck_manifest *m, char *err, size_t errn) {
    if (errn) err[0] = 0;
    if (m->chunk_bytes & (m->chunk_bytes - 1)) /* every writer uses ZERO__CK_CHUNK */
        return fail(err, errn, "chunk_bytes: %llu is not a power of two", (ull)m->chunk_bytes);
    if (check_state(m, err, errn) || check_layouts(m, err, errn)) return -1;
    const size_t n = m->nparams;
    pkey *k = calloc(n ? n : 1, sizeof *k);
    uint32_t *order = calloc(n ? n : 1, sizeof *order);
    int rc = k && order ? 0 : fail(err, errn, "out of memory");
    for (int pp = 0; rc == 0 && pp < m->pp_stages; pp++) {
        const uint32_t np = layout_order(m, pp, k, order);
        rc = check_offsets(m, zero__ck_layout_of(m, pp), order, np, err, errn);
        if (rc == 0) rc = check_ranges(m, pp, order, np, err, errn);
    }
    const zero__ck_file **fx = rc == 0 ? calloc(m->nfiles ? m->nfiles : 1, sizeof *fx) : NULL;
    if (rc == 0) rc = fx ? check_file_set(m, fx, err, errn) : fail(err, errn, "out of memory");
    free(fx);
    free(k);
    free(order);
    return rc;
}

const char *zero__ck_legacy_note(const zero__ck_manifest *m) {
    if (m->version != ZERO__CK_VERSION_LEGACY) return NULL;
    return "manifest format 1 (the libzero 1.5.1 release and older): the manifest has no checksum of its own and its "
           "core blobs no digest of the zero_set_hparams settings, so a change to fields the load does not "
           "cross-check (hparams, config, names) cannot be detected; steps, lr, loss scaler, offsets, layout and "
           "files were checked";
}

/* ---- core blobs ---- */
void zero__ck_core_fill(zero__core_blob *c, const zero__ck_manifest *m, uint32_t world) {
    const zero__ck_state *s = &m->st;
    memset(c, 0, sizeof *c);
    c->magic = ZERO__CORE_BLOB_MAGIC;
    c->version = ZERO__CORE_BLOB_VERSION;
    c->global_step = s->global_step;
    c->skipped_steps = s->skipped_steps;
    c->micro_step = s->micro_step;
    c->world = world;
    c->lr = s->lr;
    c->scaler = (zero__scaler){s->ls_dynamic,       s->ls_scale,          s->ls_min_scale,
                               s->ls_window,        s->ls_delayed_shift,  s->ls_cur_hysteresis,
                               s->ls_consecutive,   s->ls_cur_iter,       s->ls_last_overflow_iter};
    c->hp_digest = zero__ck_hparams_digest(m->root);
}

/* One field: the core blob's value against the manifest's, both named. */
#define SAME_INT(name, blob, man)                                                                                  \
    do {                                                                                                            \
        if ((long long)(blob) != (long long)(man))                                                                  \
            return core_differs(f, err, errn, name, (long long)(blob), (long long)(man));                          \
    } while (0)
/* bitwise: the manifest's %.17g text round-trips the saved double exactly */
#define SAME_REAL(name, blob, man)                                                                                 \
    do {                                                                                                            \
        if (memcmp(&(double){blob}, &(double){man}, sizeof(double)))                                                \
            return core_differs_real(f, err, errn, name, blob, man);                                                \
    } while (0)

static int core_differs(const zero__ck_file *f, char *err, size_t errn, const char *name, long long b, long long v) {
    return fail(err, errn,
                "state.%s: %lld, but %s (checksummed, rank %d) says %lld: the manifest does not describe what the "
                "ranks saved",
                name, v, f->file, f->rank, b);
}
static int core_differs_real(const zero__ck_file *f, char *err, size_t errn, const char *name, double b, double v) {
    return fail(err, errn,
                "state.%s: %.17g, but %s (checksummed, rank %d) says %.17g: the manifest does not describe what the "
                "ranks saved",
                name, v, f->file, f->rank, b);
}

static int core_check(const zero__ck_manifest *m, const zero__ck_file *f, const zero__core_blob *c, char *err,
                      size_t errn) {
    const uint64_t want = m->version == ZERO__CK_VERSION_LEGACY ? 1 : ZERO__CORE_BLOB_VERSION;
    if (c->magic != ZERO__CORE_BLOB_MAGIC || c->version != want)
        return fail(err, errn, "%s: not a libzero core blob of version %llu (magic %016llx, version %llu)", f->file,
                    (ull)want, (ull)c->magic, (ull)c->version);
    const zero__ck_state *s = &m->st;
    SAME_INT("global_step", c->global_step, s->global_step);
    SAME_INT("micro_step", c->micro_step, s->micro_step);
    SAME_INT("skipped_steps", c->skipped_steps, s->skipped_steps);
    SAME_INT("world_size (top level)", c->world, m->world);
    SAME_REAL("lr", c->lr, s->lr);
    const zero__scaler *q = &c->scaler;
    SAME_INT("loss_scaler.dynamic", q->dynamic, s->ls_dynamic);
    SAME_REAL("loss_scaler.scale", q->scale, s->ls_scale);
    SAME_REAL("loss_scaler.min_scale", q->min_scale, s->ls_min_scale);
    SAME_INT("loss_scaler.window", q->window, s->ls_window);
    SAME_INT("loss_scaler.hysteresis", q->delayed_shift, s->ls_delayed_shift);
    SAME_INT("loss_scaler.cur_hysteresis", q->cur_hysteresis, s->ls_cur_hysteresis);
    SAME_INT("loss_scaler.consecutive_hysteresis", q->consecutive_hysteresis, s->ls_consecutive);
    SAME_INT("loss_scaler.cur_iter", q->cur_iter, s->ls_cur_iter);
    SAME_INT("loss_scaler.last_overflow_iter", q->last_overflow_iter, s->ls_last_overflow_iter);
    if (want >= 2) {
        const uint32_t d = zero__ck_hparams_digest(m->root);
        if (c->hp_digest != d || c->reserved)
            return fail(err, errn,
                        "state.hparams: their digest is %08x, %s (checksummed, rank %d) recorded %08x: the manifest "
                        "does not describe what the ranks saved",
                        d, f->file, f->rank, c->hp_digest);
    }
    return 0;
}

int zero__ck_core_verify(zero__ck_reader *r, const zero__ck_manifest *m, int rank, int pp_stage, char *err,
                         size_t errn) {
    const zero__ck_file *f = zero__ck_find(m, "core", rank, pp_stage);
    if (!f) return fail(err, errn, "files: rank %d pipeline stage %d has no core blob", rank, pp_stage);
    if (f->bytes > sizeof(zero__core_blob) || f->bytes < ZERO__CORE_BLOB_V1_BYTES)
        return fail(err, errn, "files: %s: a core blob of %llu bytes", f->file, (ull)f->bytes);
    zero__core_blob c;
    memset(&c, 0, sizeof c);
    if (zero__ck_read(r, f, 0, &c, f->bytes, err, errn)) return -1;
    return core_check(m, f, &c, err, errn);
}
