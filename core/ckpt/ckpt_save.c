/* zero_save: a checkpoint that is either complete or absent.
 *
 *   1. the ranks agree on the step they are saving (a rank that has taken
 *      another number of steps is an error everywhere, nothing written);
 *   2. global rank 0 creates <root>/<tag>.partial (removing a leftover of
 *      a killed save); every rank writes its blobs there, each fsync'ed and
 *      renamed into place, recording size and chunk checksums;
 *   3. the ranks agree on the outcome (a failed rank's message reaches all;
 *      on failure the staging directory is removed and the previous
 *      checkpoint is untouched);
 *   4. rank 0 gathers every rank's file records and writes manifest.json
 *      LAST (temp, fsync, rename, fsync dir), then moves the staging
 *      directory to <root>/<tag> (an atomic exchange when the tag exists),
 *      then points <root>/latest at it (temp, fsync, rename, fsync dir),
 *      then prunes to keep_last;
 *   5. every rank returns rank 0's outcome; on failure (a full disk under
 *      manifest.json too) rank 0 removes the staging directory.
 * A kill at any point leaves <root>/latest naming a complete checkpoint.
 * Links: <root>/<tag> that is a symbolic link or a file is refused in step
 * 2; a link at <tag>.partial is removed as a link; keep_last skips links;
 * nothing is removed through a link (zero__ck_remove_dir). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_blob.h"
#include "ckpt_engine.h"
#include "ckpt_hparams.h"
#include "crc32c.h"
#include "config_internal.h"
#include "engine.h"
#include "grad_window.h"
#include "optim.h"

static int plain_name(const char *s) {
    return s && s[0] && strlen(s) < 200 && !strchr(s, '/') && strcmp(s, ".") && strcmp(s, "..") &&
           !strstr(s, ".partial") && strcmp(s, "latest");
}

static json_t *scaler_json(const zero__scaler *s) {
    json_t *o = json_object();
    json_object_set_new(o, "dynamic", json_integer(s->dynamic));
    json_object_set_new(o, "scale", json_real(s->scale));
    json_object_set_new(o, "min_scale", json_real(s->min_scale));
    json_object_set_new(o, "window", json_integer(s->window));
    json_object_set_new(o, "hysteresis", json_integer(s->delayed_shift));
    json_object_set_new(o, "cur_hysteresis", json_integer(s->cur_hysteresis));
    json_object_set_new(o, "consecutive_hysteresis", json_integer(s->consecutive_hysteresis));
    json_object_set_new(o, "cur_iter", json_integer(s->cur_iter));
    json_object_set_new(o, "last_overflow_iter", json_integer(s->last_overflow_iter));
    return o;
}

/* (libzero 1.10) With expert groups: this rank's color in each, and the
 * names of its experts from the first rank of each expert-data-parallel
 * group (its place 0 in the group's communicator), so that a load at
 * another world size finds each expert by name (docs/checkpoints.md). */
static json_t *expert_contribution(struct zero_engine *e) {
    json_t *xs = json_array();
    const zero_layout *L = &e->layout.view;
    for (uint32_t g = 0; g < L->ngroups; g++) {
        const int32_t gid = L->groups[g].group_id;
        const zero__group_hp *hp = zero__group_hp_of(e, gid);
        if (!hp || hp->expert_color < 0) continue;
        json_t *x = json_object();
        json_object_set_new(x, "group", json_integer(gid));
        /* (1.13) with a pipeline each stage's groups are records of their own */
        if (e->pp_stages > 1) json_object_set_new(x, "pp_stage", json_integer(e->pp_stage));
        json_object_set_new(x, "color", json_integer(hp->expert_color));
        if (L->group_rank && L->group_rank[g] == 0) {
            json_t *names = json_array();
            for (uint32_t i = 0; i < e->nparams; i++)
                if (e->params[i]->info.group == gid) json_array_append_new(names, json_string(e->params[i]->info.name));
            json_object_set_new(x, "names", names);
        }
        json_array_append_new(xs, x);
    }
    return xs;
}

/* This rank's contribution: its files, and (data-parallel rank 0 of each
 * pipeline stage) that stage's params and layout. */
static char *contribution(struct zero_engine *e, json_t *files) {
    json_t *o = json_object();
    json_object_set(o, "files", files);
    if (e->group_comms) {
        json_object_set_new(o, "rank", json_integer(e->rank));
        json_object_set_new(o, "experts", expert_contribution(e));
    }
    if (e->rank == 0) {
        json_t *ps = json_array();
        for (uint32_t i = 0; i < e->nparams; i++) {
            const zero_param_info *p = &e->params[i]->info;
            json_t *q = json_object();
            json_object_set_new(q, "name", json_string(p->name));
            json_t *shape = json_array(); /* (1.8) the host's shape, else [numel] */
            const struct zero_param *zp = e->params[i];
            if (zp->ndim)
                for (uint32_t k = 0; k < zp->ndim; k++) json_array_append_new(shape, json_integer((json_int_t)zp->shape[k]));
            else json_array_append_new(shape, json_integer((json_int_t)p->numel));
            json_object_set_new(q, "shape", shape);
            json_object_set_new(q, "numel", json_integer((json_int_t)p->numel));
            json_object_set_new(q, "dtype", json_string(zero__ck_dtype_name(p->dtype)));
            json_object_set_new(q, "group", json_integer(p->group));
            json_object_set_new(q, "pp_stage", json_integer(e->pp_stage));
            json_object_set_new(q, "flat_offset", json_integer((json_int_t)p->flat_offset));
            json_array_append_new(ps, q);
        }
        json_object_set_new(o, "params", ps);
        const zero_layout *L = &e->layout.view;
        json_t *l = json_object();
        json_object_set_new(l, "pp_stage", json_integer(e->pp_stage));
        json_object_set_new(l, "align", json_integer((json_int_t)L->align));
        json_object_set_new(l, "flat_numel", json_integer((json_int_t)L->flat_numel));
        json_object_set_new(l, "part_numel", json_integer((json_int_t)L->part_numel));
        json_t *gs = json_array();
        for (uint32_t g = 0; g < L->ngroups; g++) {
            const zero_layout_group *G = &L->groups[g];
            json_t *x = json_object();
            json_object_set_new(x, "group_id", json_integer(G->group_id));
            json_object_set_new(x, "flat_begin", json_integer((json_int_t)G->flat_begin));
            json_object_set_new(x, "numel", json_integer((json_int_t)G->numel));
            json_object_set_new(x, "part_numel", json_integer((json_int_t)G->part_numel));
            json_array_append_new(gs, x);
        }
        json_object_set_new(l, "groups", gs);
        json_object_set_new(o, "layout", l);
    }
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

/* Gather every rank's contribution text on global rank 0 (others get NULL
 * arrays).  Collective. */
static zero_status gather(struct zero_engine *e, const char *mine, char **all, size_t *each, int *n) {
    zero_comm *g = e->global;
    *n = zero__comm_size(g);
    double len = (double)strlen(mine) + 1;
    zero_status s = zero__allreduce(g, &len, 1, ZERO_DTYPE_F64, ZERO_OP_MAX);
    if (s != ZERO_OK) return s;
    *each = (size_t)len;
    char *send = calloc(1, *each), *recv = calloc((size_t)*n, *each);
    if (!send || !recv) {
        free(send);
        free(recv);
        return zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "zero_save: out of memory gathering file records");
    }
    memcpy(send, mine, strlen(mine) + 1);
    s = zero__allgather_bytes(g, send, recv, *each);
    free(send);
    if (s != ZERO_OK) {
        free(recv);
        return s;
    }
    *all = recv;
    return ZERO_OK;
}

static json_t *build_manifest(struct zero_engine *e, const char *tag, const char *all, size_t each, int n,
                              json_t *client, char *err, size_t errn) {
    json_t *m = json_object();
    json_object_set_new(m, "format", json_string(ZERO__CK_FORMAT));
    json_object_set_new(m, "version", json_integer(ZERO__CK_VERSION));
    json_object_set_new(m, "tag", json_string(tag));
    json_object_set_new(m, "library_version", json_string(zero_version_string()));
    json_object_set_new(m, "abi_version", json_integer(zero_abi_version()));
    json_object_set_new(m, "plugin", json_string(e->plugin.table->name));
    json_object_set_new(m, "stage", json_integer(e->rc->stage));
    json_object_set_new(m, "world_size", json_integer(e->world_size));
    json_object_set_new(m, "pp_stages", json_integer(e->pp_stages));
    json_object_set_new(m, "reshardable", json_integer((e->plugin.table->caps & ZERO_PLUGIN_CAP_RESHARD) ? 1 : 0));
    json_object_set_new(m, "model_dtype", json_string(zero__ck_dtype_name(e->rc->model_dtype)));
    json_object_set_new(m, "optimizer", json_integer(e->rc->optim));
    json_object_set_new(m, "optimizer_states",
                        json_integer(zero__optim_state_count(e->rc->optim, e->rc->momentum)));
    json_object_set_new(m, "chunk_bytes", json_integer((json_int_t)ZERO__CK_CHUNK));
    json_t *st = json_object();
    json_object_set_new(st, "global_step", json_integer((json_int_t)e->global_step));
    json_object_set_new(st, "skipped_steps", json_integer((json_int_t)e->skipped_steps));
    json_object_set_new(st, "micro_step", json_integer(e->micro_step));
    json_object_set_new(st, "lr", json_real(e->lr));
    json_object_set_new(st, "loss_scaler", scaler_json(&e->scaler));
    json_t *sch = json_object();
    const char *sname = zero__config_scheduler(e->cfg);
    json_object_set_new(sch, "type", sname ? json_string(sname) : json_null());
    json_object_set_new(sch, "next_lr", json_real(e->lr));
    json_object_set_new(sch, "last_step", json_integer((json_int_t)e->global_step));
    json_object_set_new(st, "scheduler", sch);
    json_object_set_new(st, "hparams", zero__ck_hparams_json(e)); /* (1.4) zero_set_hparams */
    json_object_set_new(m, "state", st);
    json_object_set(m, "config", e->cfg->root ? e->cfg->root : json_null());
    json_t *params = json_array(), *layouts = json_array(), *files = json_array(), *experts = NULL;
    for (int r = 0; r < n; r++) {
        json_error_t je;
        json_t *c = json_loads(all + (size_t)r * each, 0, &je);
        if (!c) {
            snprintf(err, errn, "zero_save: rank %d's file records do not parse: %s", r, je.text);
            json_decref(params), json_decref(layouts), json_decref(files), json_decref(m), json_decref(experts);
            return NULL;
        }
        json_array_extend(files, json_object_get(c, "files"));
        if (json_object_get(c, "params")) json_array_extend(params, json_object_get(c, "params"));
        if (json_object_get(c, "layout")) json_array_append(layouts, json_object_get(c, "layout"));
        json_t *xs = json_object_get(c, "experts");
        if (json_is_array(xs)) { /* (libzero 1.10) colors by rank, names by color */
            if (!experts) experts = json_array();
            const json_int_t rank = json_integer_value(json_object_get(c, "rank"));
            for (size_t k = 0; k < json_array_size(xs); k++) {
                json_t *x = json_array_get(xs, k), *dst = NULL;
                json_t *stage = json_object_get(x, "pp_stage"); /* (1.13) present with a pipeline only */
                for (size_t q = 0; q < json_array_size(experts) && !dst; q++) { /* its (group, stage) record */
                    json_t *d = json_array_get(experts, q);
                    if (json_equal(json_object_get(d, "group"), json_object_get(x, "group")) &&
                        (!stage || json_equal(json_object_get(d, "pp_stage"), stage)))
                        dst = d;
                }
                if (!dst) {
                    dst = json_pack("{s:O,s:o,s:o}", "group", json_object_get(x, "group"), "colors", json_array(),
                                    "sets", json_array());
                    if (stage) json_object_set(dst, "pp_stage", stage);
                    for (int q = 0; q < e->world_size; q++) json_array_append_new(json_object_get(dst, "colors"), json_integer(0));
                    json_array_append_new(experts, dst);
                }
                json_array_set(json_object_get(dst, "colors"), (size_t)rank, json_object_get(x, "color"));
                if (json_object_get(x, "names"))
                    json_array_append_new(json_object_get(dst, "sets"),
                                          json_pack("{s:O,s:O}", "color", json_object_get(x, "color"), "names",
                                                    json_object_get(x, "names")));
            }
        }
        json_decref(c);
    }
    json_object_set_new(m, "layouts", layouts);
    json_object_set_new(m, "params", params);
    json_object_set_new(m, "files", files);
    if (experts) json_object_set_new(m, "experts", experts);
    if (client) json_object_set(m, "client_state", client); /* (1.7) */
    if (zero__ck_manifest_seal(m) != 0) { /* last: over everything above */
        snprintf(err, errn, "zero_save: out of memory sealing the manifest");
        json_decref(m);
        return NULL;
    }
    return m;
}

/* May root/tag be replaced?  Absent or a real directory: yes; a link (to a
 * directory or not) or a file: no -- refused before anything is written. */
static int replaceable(const char *root, const char *tag) {
    char path[4352];
    struct stat sb;
    snprintf(path, sizeof path, "%s/%s", root, tag);
    return lstat(path, &sb) != 0 || S_ISDIR(sb.st_mode);
}

/* A directory that still holds entries libzero did not write goes aside as
 * <root>/<base>.kept (or .kept.N), never removed: the host's files are the
 * host's.  Said at WARN with where they are. */
static void set_aside(struct zero_engine *e, const char *root, const char *dir, const char *base, int kept,
                      const char *why) {
    char aside[4400];
    for (int k = 0; k < 1000; k++) {
        if (k) snprintf(aside, sizeof aside, "%s/%s.kept.%d", root, base, k);
        else snprintf(aside, sizeof aside, "%s/%s.kept", root, base);
        struct stat sb;
        if (lstat(aside, &sb) == 0) continue;
        if (rename(dir, aside) == 0) {
            zero__log(e, ZERO_LOG_WARN, "checkpoint: %d entr%s in %s that libzero did not write (%s) moved to %s, "
                      "not removed", kept, kept == 1 ? "y" : "ies", dir, why, aside);
            return;
        }
        break;
    }
    zero__log(e, ZERO_LOG_WARN, "checkpoint: %d entr%s that libzero did not write left in %s", kept,
              kept == 1 ? "y" : "ies", dir);
}

/* The old directory of a tag that was just replaced (at `old`): entries
 * libzero did not write (the host's files saved beside a checkpoint, or a
 * directory of the host's that had the tag's name) move into the new
 * checkpoint at `final`, libzero's old files are removed, and what remains
 * (a name the new checkpoint uses) goes aside.  Before 1.7.5 the whole old
 * directory was removed, the host's files with it. */
static void retire_old(struct zero_engine *e, const char *root, const char *old, const char *final, const char *tag) {
    /* the names first, then the moves: a directory renamed from while it
     * is read may skip entries (they would only go aside, but need not) */
    struct dirent **names = NULL;
    const int n = scandir(old, &names, NULL, NULL);
    int moved = 0;
    for (int i = 0; i < n; i++) {
        const char *name = names[i]->d_name;
        if (strcmp(name, ".") && strcmp(name, "..") && !zero__ck_is_own_name(name)) {
            char from[4400], to[4400];
            struct stat sb;
            snprintf(from, sizeof from, "%s/%s", old, name);
            snprintf(to, sizeof to, "%s/%s", final, name);
            /* a name of the new checkpoint's stays, and goes aside below */
            if (lstat(to, &sb) != 0 && rename(from, to) == 0) moved++;
        }
        free(names[i]);
    }
    free(names);
    if (moved)
        zero__log(e, ZERO_LOG_INFO, "checkpoint: %d entr%s libzero did not write kept in %s (carried over from the "
                  "directory it replaced)", moved, moved == 1 ? "y" : "ies", final);
    int kept = 0;
    if (zero__ck_remove_dir_kept(old, &kept) != 0 && kept) set_aside(e, root, old, tag, kept, "names the new checkpoint uses");
}

/* Move staging into place as root/tag: an atomic exchange when the tag
 * already exists (the old one is then retired: retire_old), else a rename. */
static int publish(struct zero_engine *e, const char *root, const char *staging, const char *tag, char *err,
                   size_t errn) {
    char final[4352];
    snprintf(final, sizeof final, "%s/%s", root, tag);
    struct stat sb;
    if (lstat(final, &sb) == 0 && !S_ISDIR(sb.st_mode)) { /* appeared since step 2's check */
        snprintf(err, errn, "zero_save: %s is not a directory (a symbolic link or a file); not replaced", final);
        return -1;
    }
    if (lstat(final, &sb) == 0) {
#ifdef RENAME_EXCHANGE
        if (renameat2(AT_FDCWD, staging, AT_FDCWD, final, RENAME_EXCHANGE) == 0) {
            retire_old(e, root, staging, final, tag); /* staging is now the old directory of that tag */
            return zero__ck_fsync_dir(root);
        }
#endif
        /* no atomic exchange here: the old one goes aside first (latest may
         * name the tag for a moment without it; docs/checkpoints.md) */
        char old[4400], old_base[300];
        snprintf(old, sizeof old, "%s/%s.old", root, tag);
        snprintf(old_base, sizeof old_base, "%s.old", tag);
        int kept = 0;
        if (zero__ck_remove_dir_kept(old, &kept) != 0 && kept) set_aside(e, root, old, old_base, kept, "left by an earlier save");
        if (rename(final, old) != 0 || rename(staging, final) != 0) {
            snprintf(err, errn, "zero_save: cannot move %s to %s: %s", staging, final, strerror(errno));
            return -1;
        }
        retire_old(e, root, old, final, tag);
        return zero__ck_fsync_dir(root);
    }
    if (rename(staging, final) != 0) {
        snprintf(err, errn, "zero_save: cannot move %s to %s: %s", staging, final, strerror(errno));
        return -1;
    }
    return zero__ck_fsync_dir(root);
}

/* Keep the newest `keep` checkpoints of root (by global step, then micro
 * step), never removing `current`.  Only directories with a libzero
 * manifest are candidates. */
static void prune(struct zero_engine *e, const char *root, const char *current, uint32_t keep) {
    DIR *d = opendir(root);
    if (!d) return;
    struct cand {
        char name[256];
        uint64_t step;
    } *c = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        char path[4600], *text = NULL;
        size_t len = 0;
        if (de->d_name[0] == '.' || strlen(de->d_name) >= 256) continue;
        snprintf(path, sizeof path, "%s/%s", root, de->d_name);
        if (zero__ck_is_link(path)) { /* not a directory libzero wrote: neither it nor its target is pruned */
            zero__log(e, ZERO_LOG_WARN, "checkpoint: keep_last: %s is a symbolic link, not pruned (not counted)", path);
            continue;
        }
        snprintf(path, sizeof path, "%s/%s/manifest.json", root, de->d_name);
        if (zero__ck_slurp(path, 64u << 20, &text, &len) != 0) continue;
        json_t *j = json_loadb(text, len, 0, NULL);
        free(text);
        json_t *fmt = json_object_get(j, "format"), *st = json_object_get(j, "state");
        if (json_is_string(fmt) && !strcmp(json_string_value(fmt), ZERO__CK_FORMAT) && json_is_object(st)) {
            if (n == cap) {
                cap = cap ? 2 * cap : 16;
                void *nc = realloc(c, cap * sizeof *c);
                if (!nc) break;
                c = nc;
            }
            snprintf(c[n].name, sizeof c[n].name, "%s", de->d_name);
            c[n].step = (uint64_t)json_integer_value(json_object_get(st, "global_step")) * 4096u +
                        (uint64_t)json_integer_value(json_object_get(st, "micro_step"));
            n++;
        }
        json_decref(j);
    }
    closedir(d);
    /* newest first: selection of the keep newest, then remove the rest */
    for (size_t i = 0; i < n; i++)
        for (size_t k = i + 1; k < n; k++)
            if (c[k].step > c[i].step || (c[k].step == c[i].step && strcmp(c[k].name, c[i].name) > 0)) {
                struct cand t = c[i];
                c[i] = c[k];
                c[k] = t;
            }
    for (size_t i = keep; i < n; i++) {
        if (!strcmp(c[i].name, current)) continue;
        char path[4600];
        snprintf(path, sizeof path, "%s/%s", root, c[i].name);
        int kept = 0;
        if (zero__ck_remove_dir_kept(path, &kept) == 0)
            zero__log(e, ZERO_LOG_INFO, "checkpoint: removed %s (keep_last %u)", path, keep);
        else if (kept) /* (1.7.5) the host's files in it stay, with the directory */
            zero__log(e, ZERO_LOG_INFO, "checkpoint: keep_last %u: removed libzero's files of %s; %d entr%s it did "
                      "not write left there", keep, path, kept, kept == 1 ? "y" : "ies");
    }
    free(c);
}

/* The core blob (ckpt_engine.h), version 2: with the digest of global
 * rank 0's zero_set_hparams settings, which the manifest records
 * (broadcast: a rank's own settings may differ; the load adopts rank 0's).
 * Collective. */
static zero_status write_core_blob(struct zero_engine *e, const char *dir) {
    json_t *hp = json_object(), *st = json_object();
    json_object_set_new(st, "hparams", zero__ck_hparams_json(e));
    json_object_set_new(hp, "state", st);
    double d = (double)zero__ck_hparams_digest(hp);
    json_decref(hp);
    zero_status s = zero__broadcast(e->global, &d, 1, ZERO_DTYPE_F64, 0);
    if (s != ZERO_OK) return s;
    zero__core_blob c;
    memset(&c, 0, sizeof c);
    c.magic = ZERO__CORE_BLOB_MAGIC;
    c.version = ZERO__CORE_BLOB_VERSION;
    c.global_step = e->global_step;
    c.skipped_steps = e->skipped_steps;
    c.micro_step = e->micro_step;
    c.world = (uint32_t)e->world_size;
    c.lr = e->lr;
    c.scaler = e->scaler;
    c.hp_digest = (uint32_t)d;
    return zero__ckpt_blob_write(zero__core_of(e), dir, "core", &c, sizeof c);
}

/* Steps 4-5 on global rank 0. */
static zero_status finish_on_root(struct zero_engine *e, const char *root, const char *staging, const char *tag,
                                  uint32_t keep, const char *all, size_t each, int n, json_t *client) {
    char err[10000] = ""; /* room for two full paths */
    if (zero__ck_fsync_dir(staging) != 0)
        return zero__error(e, ZERO_ERR_IO, "zero_save: cannot sync %s: %s", staging, strerror(errno));
    json_t *m = build_manifest(e, tag, all, each, n, client, err, sizeof err);
    if (!m) return zero__error(e, ZERO_ERR_IO, "%s", err);
    char *text = json_dumps(m, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
    json_decref(m);
    if (!text) return zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "zero_save: out of memory writing the manifest");
    int bad = zero__ck_write_atomic(staging, "manifest.json", text, strlen(text), err, sizeof err);
    free(text);
    if (bad || publish(e, root, staging, tag, err, sizeof err))
        return zero__error(e, ZERO_ERR_IO, "%s", err[0] ? err : "zero_save: cannot publish the checkpoint");
    zero__ck_fault_point("before_latest", 0);
    char line[300];
    int len = snprintf(line, sizeof line, "%s\n", tag);
    if (zero__ck_write_atomic(root, "latest", line, (size_t)len, err, sizeof err))
        return zero__error(e, ZERO_ERR_IO, "%s", err);
    if (keep) prune(e, root, tag, keep);
    return ZERO_OK;
}

/* A leftover staging directory (a save killed before its publish, or after
 * an exchange and before the old directory was retired): libzero's files
 * go, the host's go aside with the directory.  0, or -1 with errno. */
static int clear_staging(struct zero_engine *e, const char *root, const char *tag, const char *staging) {
    int kept = 0;
    if (zero__ck_remove_dir_kept(staging, &kept) == 0) return 0;
    if (!kept) return -1;
    char base[300];
    snprintf(base, sizeof base, "%s.partial", tag);
    set_aside(e, root, staging, base, kept, "in a staging directory an earlier save left");
    struct stat sb;
    return lstat(staging, &sb) == 0 ? (errno = ENOTEMPTY, -1) : 0;
}

/* (1.7) Global rank 0's client state into the staging directory, its
 * record (a new reference) in *rec.  Other ranks: nothing. */
static zero_status write_client_state(struct zero_engine *e, const char *dir, const zero__ck_save_args *a,
                                      json_t **rec) {
    *rec = NULL;
    if (zero__comm_rank(e->global) != 0 || !a->client_bytes) return ZERO_OK;
    char err[1200];
    uint32_t *crc = NULL, nc = 0;
    if (zero__ck_write_blob(dir, ZERO__CK_CLIENT_FILE, a->client, a->client_bytes, ZERO__CK_CHUNK, 0, &crc, &nc, err,
                            sizeof err))
        return zero__error(e, ZERO_ERR_IO, "zero_save: the client state: %s", err);
    zero__ck_file f = {0};
    f.file = (char *)ZERO__CK_CLIENT_FILE;
    f.blob = (char *)ZERO__CK_CLIENT_BLOB;
    f.bytes = a->client_bytes;
    f.nchunks = nc;
    f.crc = crc;
    f.kind = ZERO__CK_OPAQUE;
    *rec = zero__ck_file_json(&f);
    free(crc);
    return *rec ? ZERO_OK : zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "zero_save: out of memory");
}

zero_status zero__ckpt_save(struct zero_engine *e, const char *root, const zero__ck_save_args *a) {
    const zero_status local = a->local;
    zero_comm *g = e->global;
    const int grank = zero__comm_rank(g);
    /* 1. the same step on every rank, and no micro-step in progress: the
     * gradients a backward has added so far (or a refused zero_step holds)
     * belong to no micro-step the checkpoint can name, so a resume would
     * count them again (1.7.5; before, they were saved) */
    const char *first = NULL;
    const uint32_t reported = zero__grads_reported(e, &first);
    const int gsize = zero__comm_size(g);
    /* (1.8) and each rank's verdict on its arguments, and (1.7) the size
     * and checksum of its client state: ranks that pass different bytes
     * are told (the checkpoint keeps global rank 0's) */
    const double cb = (double)a->client_bytes;
    const double cc = a->client_bytes ? (double)zero__crc32c(0, a->client, a->client_bytes) : 0.0;
    double v[11] = {(double)e->global_step, -(double)e->global_step, (double)e->micro_step, -(double)e->micro_step,
                    reported ? (double)(gsize - grank) : 0.0, (double)reported,
                    local != ZERO_OK ? (double)(gsize - grank) : 0.0, cb, -cb, cc, -cc};
    zero_status s = zero__allreduce(g, v, 11, ZERO_DTYPE_F64, ZERO_OP_MAX);
    if (s != ZERO_OK) return local != ZERO_OK ? local : s;
    if (local != ZERO_OK) return local; /* its own message */
    if (v[6] > 0)
        return zero__error(e, ZERO_ERR_INVALID_ARGUMENT,
                           "zero_save_ex: rank %.0f refused its arguments (its message says why); nothing written",
                           (double)gsize - v[6]);
    if (v[0] != -v[1] || v[2] != -v[3])
        return zero__error(e, ZERO_ERR_MISMATCH,
                           "zero_save: ranks are at different steps (global_step %.0f..%.0f, micro_step %.0f..%.0f); "
                           "nothing written",
                           -v[1], v[0], -v[3], v[2]);
    if (v[4] > 0) {
        if (reported)
            return zero__error(e, ZERO_ERR_STATE,
                               "zero_save in the middle of a micro-step: %u of %u params ('%s' first) reported with "
                               "zero_on_grad_ready since the last zero_step (or held by a refused zero_step); save "
                               "before the backward or after the zero_step that ends it; nothing written",
                               reported, e->nparams, first ? first : "?");
        return zero__error(e, ZERO_ERR_STATE,
                           "zero_save in the middle of a micro-step: rank %.0f has reported gradients since the last "
                           "zero_step (up to %.0f params on a rank); nothing written",
                           (double)gsize - v[4], v[5]);
    }
    if ((v[7] != -v[8] || v[9] != -v[10]) && grank == 0) {
        char sizes[96];
        if (v[7] == -v[8]) snprintf(sizes, sizeof sizes, "%.0f bytes on every rank, not the same bytes", v[7]);
        else snprintf(sizes, sizeof sizes, "%.0f to %.0f bytes", -v[8], v[7]);
        zero__log(e, ZERO_LOG_WARN,
                  "zero_save: the ranks passed different client states (%s); the checkpoint keeps global rank 0's "
                  "(%.0f bytes), which zero_load hands to every rank",
                  sizes, cb);
    }
    char tag[256];
    if (a->tag) snprintf(tag, sizeof tag, "%s", a->tag);
    else if (e->micro_step)
        snprintf(tag, sizeof tag, "step-%llu-micro%u", (unsigned long long)e->global_step, e->micro_step);
    else snprintf(tag, sizeof tag, "step-%llu", (unsigned long long)e->global_step);
    if (!plain_name(tag))
        return zero__error(e, ZERO_ERR_INVALID_ARGUMENT,
                           "zero_save: tag '%s' must be a plain directory name (no '/', not 'latest' or '*.partial')",
                           tag);
    zero__ck_save ss;
    memset(&ss, 0, sizeof ss);
    if (snprintf(ss.dir, sizeof ss.dir, "%s/%s.partial", root, tag) >= (int)sizeof ss.dir)
        return zero__error(e, ZERO_ERR_INVALID_ARGUMENT, "zero_save: path too long: %s", root);
    /* 2. staging directory (global rank 0), then every rank's blobs */
    s = ZERO_OK;
    if (grank == 0) {
        if (zero__ck_mkdirs(root) != 0)
            s = zero__error(e, ZERO_ERR_IO, "zero_save: cannot create %s: %s", root, strerror(errno));
        else if (!replaceable(root, tag))
            s = zero__error(e, ZERO_ERR_IO,
                            "zero_save: %s/%s is a symbolic link or a file, not a checkpoint directory; libzero "
                            "replaces only directories, never through a link (remove it or save under another "
                            "tag); nothing written",
                            root, tag);
        else if (clear_staging(e, root, tag, ss.dir) != 0) /* a leftover, or a link at its name (the link goes) */
            s = zero__error(e, ZERO_ERR_IO, "zero_save: cannot clear %s: %s", ss.dir, strerror(errno));
        else if (mkdir(ss.dir, 0777) != 0)
            s = zero__error(e, ZERO_ERR_IO, "zero_save: cannot create %s: %s", ss.dir, strerror(errno));
    }
    s = zero__ck_agree(e, s, "zero_save");
    if (s != ZERO_OK) return s;
    if (grank != 0) { /* node-local directories; shared: already there */
        if (zero__ck_is_link(ss.dir)) unlink(ss.dir); /* a node-local link at libzero's name: the link goes */
        zero__ck_mkdirs(ss.dir);
    }
    zero__ck_fault_point("before_shards", grank);
    ss.files = json_array();
    ss.kind = ZERO__CK_OPAQUE;
    e->ck_save = &ss;
    json_t *client = NULL;
    s = write_core_blob(e, ss.dir);
    if (s == ZERO_OK) s = e->plugin.table->save(e->pstate, ss.dir);
    e->ck_save = NULL;
    if (s == ZERO_OK) s = write_client_state(e, ss.dir, a, &client);
    /* 3. the outcome, agreed */
    s = zero__ck_agree(e, s, "zero_save");
    if (s != ZERO_OK) {
        if (grank == 0) zero__ck_remove_dir(ss.dir); /* a full disk gets its space back */
        json_decref(ss.files);
        json_decref(client);
        return s;
    }
    /* 4. records to rank 0, manifest, publish, latest */
    char *mine = contribution(e, ss.files);
    json_decref(ss.files);
    if (!mine) {
        json_decref(client);
        return zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "zero_save: out of memory");
    }
    char *all = NULL;
    size_t each = 0;
    int n = 0;
    zero__ck_fault_point("before_manifest", grank);
    s = gather(e, mine, &all, &each, &n);
    free(mine);
    if (s == ZERO_OK && grank == 0) s = finish_on_root(e, root, ss.dir, tag, a->keep_last, all, each, n, client);
    free(all);
    json_decref(client);
    s = zero__ck_agree(e, s, "zero_save");
    /* a failed save leaves no staging directory (ENOSPC on the manifest
     * included); after publish it is gone already */
    if (s != ZERO_OK && grank == 0) zero__ck_remove_dir(ss.dir);
    if (s == ZERO_OK) zero__log(e, ZERO_LOG_INFO, "checkpoint %s/%s saved", root, tag);
    return s;
}
