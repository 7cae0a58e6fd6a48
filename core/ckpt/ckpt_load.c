/* zero_load: find the checkpoint (a directory with manifest.json, or a
 * root whose `latest` names one), check its manifest against this run,
 * and let the plugin read its blobs through the verifying services.
 *
 *   - global rank 0 reads the manifest (and `latest`) and broadcasts the
 *     text, so every rank judges the same bytes;
 *   - the model must match: every registered parameter's name, element
 *     count, dtype and group in order (the first mismatch is named), the
 *     model dtype and the optimizer's state count;
 *   - the checkpoint is valid as a whole before anything is restored
 *     (ckpt_validate.h, what zero-ckpt verify checks: the manifest's own
 *     checksum, offsets against the layout rules, every rank's files, and
 *     each rank's core blob agreeing with the manifest's steps, lr, loss
 *     scaler and hparams);
 *   - native load (same plugin, world size, pipeline split and layout):
 *     the plugin reads its own blobs;
 *   - otherwise a resharding load: the saver and this plugin must both
 *     declare ZERO_PLUGIN_CAP_RESHARD, the save must sit at an accumulation
 *     boundary (no gradient in flight) and the pipeline split must be the
 *     same; the plugin's ckpt_shard reads are served element by element
 *     from whichever of the saver's files hold them (ckpt_source.h);
 *   - (1.8) a weights-only load is a resharding load of the parameters and
 *     the master alone: ckpt_shard zero-fills the optimizer states (of this
 *     run's optimizer, which need not be the saver's), the plugin drops
 *     what it keeps privately as on any reshard (ckpt_reshard), and the
 *     engine's step state is reset as zero_params_done left it -- training
 *     starts over from the checkpoint's weights.  The saver's micro-step
 *     does not matter then: its gradients in flight are not read.
 * Every failure is agreed over the job with its message (zero__ck_agree). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_engine.h"
#include "ckpt_hparams.h"
#include "ckpt_validate.h"
#include "engine.h"
#include "optim.h"

#define MAX_MANIFEST ((size_t)256 << 20)

/* On global rank 0: the checkpoint directory and its manifest text. */
static zero_status find(struct zero_engine *e, const char *path, char *dir, size_t dn, char **text, size_t *len) {
    char p[4400];
    snprintf(p, sizeof p, "%s/manifest.json", path);
    if (zero__ck_slurp(p, MAX_MANIFEST, text, len) == 0) {
        snprintf(dir, dn, "%s", path);
        return ZERO_OK;
    }
    if (errno != ENOENT) return zero__error(e, ZERO_ERR_IO, "zero_load: cannot read %s: %s", p, strerror(errno));
    char *latest = NULL;
    size_t ll = 0;
    snprintf(p, sizeof p, "%s/latest", path);
    if (zero__ck_slurp(p, 4096, &latest, &ll) != 0) {
        snprintf(p, sizeof p, "%s/core.rank0.bin", path);
        FILE *old = fopen(p, "rb");
        if (old) {
            fclose(old);
            return zero__error(e, ZERO_ERR_IO,
                               "zero_load: %s is a checkpoint of libzero < 1.2 (no manifest): not readable by this "
                               "version; resave it with the version that wrote it's successor or retrain",
                               path);
        }
        return zero__error(e, ZERO_ERR_IO, "zero_load: no checkpoint in %s (neither manifest.json nor latest)", path);
    }
    while (ll && (latest[ll - 1] == '\n' || latest[ll - 1] == ' ')) latest[--ll] = 0;
    if (!ll || strchr(latest, '/') || !strcmp(latest, "..") || !strcmp(latest, ".")) {
        free(latest);
        return zero__error(e, ZERO_ERR_IO, "zero_load: %s/latest does not name a checkpoint directory", path);
    }
    snprintf(dir, dn, "%s/%s", path, latest);
    free(latest);
    snprintf(p, sizeof p, "%s/manifest.json", dir);
    if (zero__ck_slurp(p, MAX_MANIFEST, text, len) != 0)
        return zero__error(e, ZERO_ERR_IO, "zero_load: %s/latest names %s, which has no readable manifest.json: %s",
                           path, dir, strerror(errno));
    return ZERO_OK;
}

/* Rank 0's directory and manifest text to every rank. */
static zero_status share(struct zero_engine *e, const char *path, char *dir, size_t dn, char **text, size_t *len) {
    zero_comm *g = e->global;
    const int root = zero__comm_rank(g) == 0;
    zero_status s = ZERO_OK;
    if (root) s = find(e, path, dir, dn, text, len);
    s = zero__ck_agree(e, s, "zero_load");
    if (s != ZERO_OK) return s;
    double n = root ? (double)*len : 0;
    if ((s = zero__broadcast(g, &n, 1, ZERO_DTYPE_F64, 0)) != ZERO_OK) return s;
    if ((s = zero__broadcast(g, dir, dn, ZERO_DTYPE_U8, 0)) != ZERO_OK) return s;
    if (!root) {
        *len = (size_t)n;
        *text = malloc(*len + 1);
        if (!*text) return zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "zero_load: out of memory");
        (*text)[*len] = 0;
    }
    return zero__broadcast(g, *text, *len, ZERO_DTYPE_U8, 0);
}

/* (libzero 1.10) Another pipeline split: the manifest index of the param
 * named `name`, among every stage's params; -1 none, -2 two. */
static int by_name(const zero__ck_manifest *m, const char *name) {
    int at = -1;
    for (uint32_t k = 0; k < m->nparams; k++)
        if (!strcmp(m->params[k].name, name)) {
            if (at >= 0) return -2;
            at = (int)k;
        }
    return at;
}

/* This run's param i against manifest param k; the difference named. */
static zero_status check_param(struct zero_engine *e, const zero__ck_manifest *m, const char *dir, uint32_t i,
                               uint32_t k) {
    const zero_param_info *q = &e->params[i]->info;
    const zero__ck_param *p = &m->params[k];
    /* (1.3) an expert group's params are other experts on other
     * expert-DP groups (the manifest names rank 0's): shapes only */
    const zero__group_hp *gh = zero__group_hp_of(e, q->group);
    const int expert = gh && gh->expert_color >= 0;
    if ((!expert && strcmp(p->name, q->name)) || p->numel != q->numel || p->dtype != q->dtype || p->group != q->group)
        return zero__error(e, ZERO_ERR_MISMATCH,
                           "checkpoint %s: parameter %u is '%s' (%llu elements, %s, group %d), this run registered "
                           "'%s' (%llu elements, %s, group %d) (another model's checkpoint?)",
                           dir, i, p->name, (unsigned long long)p->numel, zero__ck_dtype_name(p->dtype), p->group,
                           q->name, (unsigned long long)q->numel, zero__ck_dtype_name(q->dtype), q->group);
    return ZERO_OK;
}

/* Each of this run's params against the manifest param it loads from
 * (idx[i], filled): positionally within this pipeline stage, or (libzero
 * 1.10, another number of pipeline stages) by name across the stages. */
static zero_status check_params(struct zero_engine *e, const zero__ck_manifest *m, const char *dir, int *idx) {
    if (m->pp_stages != e->pp_stages) {
        for (uint32_t i = 0; i < e->nparams; i++) {
            const char *name = e->params[i]->info.name;
            if ((idx[i] = by_name(m, name)) < 0)
                return zero__error(e, ZERO_ERR_MISMATCH,
                                   idx[i] == -1 ? "checkpoint %s (%d pipeline stages; this run has %d) holds no "
                                                  "parameter '%s' (another model's checkpoint?)"
                                                : "checkpoint %s (%d pipeline stages; this run has %d): parameter '%s' "
                                                  "is in two of its stages; with another pipeline split parameters "
                                                  "are found by name",
                                   dir, m->pp_stages, e->pp_stages, name);
            zero_status s = check_param(e, m, dir, i, (uint32_t)idx[i]);
            if (s != ZERO_OK) return s;
        }
        return ZERO_OK;
    }
    uint32_t j = 0;
    for (uint32_t k = 0; k < m->nparams; k++) {
        if (m->params[k].pp_stage != e->pp_stage) continue;
        if (j >= e->nparams)
            return zero__error(e, ZERO_ERR_MISMATCH,
                               "checkpoint %s: holds parameter %u '%s', this run registered only %u parameters "
                               "(another model's checkpoint?)",
                               dir, j, m->params[k].name, e->nparams);
        idx[j] = (int)k;
        zero_status s = check_param(e, m, dir, j++, k);
        if (s != ZERO_OK) return s;
    }
    if (j != e->nparams)
        return zero__error(e, ZERO_ERR_MISMATCH,
                           "checkpoint %s: holds %u parameters, this run registered %u; the first missing is '%s'",
                           dir, j, e->nparams, e->params[j]->info.name);
    return ZERO_OK;
}

/* The model and optimizer against this run's; the first difference named
 * (idx: check_params').  A weights-only load reads no optimizer state: any
 * optimizer wrote it.  (libzero 1.10) Another pipeline split is not a
 * difference: its parameters are found by name. */
static zero_status check_model(struct zero_engine *e, const zero__ck_manifest *m, const char *dir, int weights_only,
                               int *idx) {
    if (m->model_dtype != e->rc->model_dtype)
        return zero__error(e, ZERO_ERR_MISMATCH, "checkpoint %s: model dtype %s, this run trains in %s", dir,
                           zero__ck_dtype_name(m->model_dtype), zero__ck_dtype_name(e->rc->model_dtype));
    const uint32_t ns = zero__optim_state_count(e->rc->optim, e->rc->momentum);
    if (!weights_only && (m->optim != e->rc->optim || m->nstate != ns))
        return zero__error(e, ZERO_ERR_MISMATCH,
                           "checkpoint %s: optimizer %s with %u state arrays, this run's optimizer %s has %u", dir,
                           zero__ck_optim_name(m->optim), m->nstate, zero__ck_optim_name(e->rc->optim), ns);
    return check_params(e, m, dir, idx);
}

/* (libzero 1.10) Param i's place among this rank's params of its group
 * (registration order): the index of its name in an expert set. */
static uint32_t place_in_group(const struct zero_engine *e, uint32_t i) {
    uint32_t k = 0;
    for (uint32_t j = 0; j < i; j++) k += e->params[j]->info.group == e->params[i]->info.group;
    return k;
}

/* The set of x holding `color`'s names; x->nsets if none. */
static uint32_t set_of(const zero__ck_experts *x, int32_t color) {
    uint32_t s = 0;
    while (s < x->nsets && x->sets[s].color != color) s++;
    return s;
}

/* (libzero 1.10) Does this rank hold, under the same names, the experts
 * the saver's rank of the same number held (so that its blobs are ours),
 * and is every group dense or expert as it was?  Otherwise the load
 * reshards, which finds each expert by name (map_experts) or names the
 * difference; before 1.10 a permuted assignment loaded other experts'
 * values under this rank's names.  A manifest without the record (dense,
 * or older) is not checked here. */
static int same_experts(struct zero_engine *e, const zero__ck_manifest *m) {
    for (uint32_t i = 0; i < e->nparams; i++) {
        const zero_param_info *q = &e->params[i]->info;
        const zero__group_hp *gh = zero__group_hp_of(e, q->group);
        const int mine = gh && gh->expert_color >= 0, xi = zero__ck_expert_index(m, q->group, e->pp_stage);
        if (mine != (xi >= 0)) return 0;
        if (!mine) continue;
        const zero__ck_experts *x = &m->experts[xi];
        const uint32_t k = place_in_group(e, i), s = set_of(x, x->colors[e->rank]);
        if (s == x->nsets || k >= x->nnames || strcmp(x->sets[s].names[k], q->name)) return 0;
    }
    return 1;
}

/* Is this rank's layout the saver's (same plugin and world size too)?
 * Ownership included: the same params at the same offsets can still be
 * owned differently (round_robin_gradients cuts the flat space into more
 * layout groups), and a shard is only native when its ranges are ours. */
static int same_layout(struct zero_engine *e, const zero__ck_manifest *m) {
    if (strcmp(m->plugin, e->plugin.table->name) || m->world != e->world_size || m->pp_stages != e->pp_stages)
        return 0;
    const zero__ck_layout *L = zero__ck_layout_of(m, e->pp_stage);
    if (!L || L->align != e->layout.view.align || L->flat_numel != e->layout.view.flat_numel) return 0;
    if (L->ngroups) { /* recorded by every libzero that writes checkpoints */
        if (L->ngroups != e->layout.view.ngroups) return 0;
        for (uint32_t g = 0; g < L->ngroups; g++)
            if (L->group_begin[g] != e->layout.view.groups[g].flat_begin) return 0;
    }
    uint32_t j = 0;
    for (uint32_t i = 0; i < m->nparams; i++)
        if (m->params[i].pp_stage == e->pp_stage && m->params[i].flat_offset != e->params[j++]->info.flat_offset)
            return 0;
    return m->nexperts ? same_experts(e, m) : 1;
}

/* The whole checkpoint (ckpt_validate.h: what zero-ckpt verify checks
 * too) and this rank's core blob against the manifest, before anything is
 * restored from it.  A resharding rank reads the saver's rank (rank mod the
 * saver's world size) of its pipeline stage. */
static zero_status check_whole(struct zero_engine *e, zero__ck_load *ld) {
    char err[1024];
    if (zero__ck_manifest_validate(ld->m, err, sizeof err) != 0)
        return zero__error(e, ZERO_ERR_IO, "checkpoint %s: %s", ld->dir, err);
    const char *note = zero__ck_legacy_note(ld->m);
    if (note && zero__comm_rank(e->global) == 0) zero__log(e, ZERO_LOG_WARN, "checkpoint %s: %s", ld->dir, note);
    /* another pipeline split (1.10): a stage of the saver's; every core blob repeats the same step state */
    const int pp = e->pp_stage < ld->m->pp_stages ? e->pp_stage : 0;
    if (zero__ck_core_verify(ld->r, ld->m, e->rank % ld->m->world, pp, err, sizeof err) != 0)
        return zero__error(e, ZERO_ERR_IO, "checkpoint %s: %s", ld->dir, err);
    return ZERO_OK;
}

static zero_status prepare(struct zero_engine *e, zero__ck_load *ld, const char *text, size_t len) {
    char err[1024];
    ld->m = zero__ck_manifest_parse(text, len, err, sizeof err);
    if (!ld->m) return zero__error(e, ZERO_ERR_IO, "checkpoint %s: %s", ld->dir, err);
    ld->idx = calloc(e->nparams ? e->nparams : 1, sizeof *ld->idx);
    if (!ld->idx) return zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "zero_load: out of memory");
    zero_status s = check_model(e, ld->m, ld->dir, ld->weights_only, ld->idx);
    if (s != ZERO_OK) return s;
    if (zero__ck_hparams_parse(ld->m->root, &ld->hp, &ld->nhp, &ld->has_hp, err, sizeof err) != 0)
        return zero__error(e, ZERO_ERR_IO, "checkpoint %s: %s", ld->dir, err);
    ld->r = zero__ck_reader_open(ld->dir, ld->m);
    if (!ld->r) return zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "zero_load: out of memory");
    return check_whole(e, ld);
}

/* (libzero 1.10) A resharding load with expert groups: the saver's files
 * hold each expert-DP group's own experts over the same flat range, so each
 * of this rank's experts is found by name among the colors the manifest
 * records (ld->src[i].xi / color) and read from the files of that color's
 * ranks.
 * Expert-ness must agree group by group; a checkpoint that records no
 * expert groups (dense, or written before 1.10) cannot say which rank held
 * which expert. */
static zero_status map_experts(struct zero_engine *e, zero__ck_load *ld) {
    const zero__ck_manifest *m = ld->m;
    if (!e->group_comms && !m->nexperts) return ZERO_OK;
    for (uint32_t i = 0; i < e->nparams; i++) {
        const zero_param_info *q = &e->params[i]->info;
        const zero__group_hp *gh = zero__group_hp_of(e, q->group);
        /* (1.13) the record of the checkpoint's stage that held this param */
        const int mine = gh && gh->expert_color >= 0,
                  xi = zero__ck_expert_index(m, q->group, m->params[ld->idx[i]].pp_stage);
        if (mine && !m->nexperts)
            return zero__error(e, ZERO_ERR_UNSUPPORTED,
                               "checkpoint %s: records no expert groups (written by a run without them, or by libzero "
                               "before 1.10, which did not record which ranks held which experts); param group %d is "
                               "an expert group here: load it with '%s' at %d ranks",
                               ld->dir, (int)q->group, m->plugin, m->world);
        if (mine != (xi >= 0))
            return zero__error(e, ZERO_ERR_MISMATCH,
                               "checkpoint %s: param group %d is %s in the checkpoint and %s in this run "
                               "(zero_group_desc.expert_color)",
                               ld->dir, (int)q->group, xi >= 0 ? "an expert group" : "dense",
                               mine ? "an expert group" : "dense");
        if (!mine) continue;
        const uint32_t k = place_in_group(e, i);
        const zero__ck_experts *x = &m->experts[xi];
        int found = -1, twice = -1;
        for (uint32_t s = 0; s < x->nsets && k < x->nnames; s++)
            if (!strcmp(x->sets[s].names[k], q->name)) {
                if (found >= 0) twice = (int)s;
                else found = (int)s;
            }
        if (found < 0 || twice >= 0)
            return zero__error(e, ZERO_ERR_MISMATCH,
                               found < 0 ? "checkpoint %s: this rank's expert '%s' (param group %d) is in none of the "
                                           "checkpoint's expert-data-parallel groups (another model's checkpoint, or "
                                           "experts renamed?)"
                                         : "checkpoint %s: expert '%s' (param group %d) is held by two of the "
                                           "checkpoint's expert-data-parallel groups: which to load is ambiguous",
                               ld->dir, q->name, (int)q->group);
        ld->src[i].xi = xi;
        ld->src[i].color = x->sets[found].color;
    }
    return ZERO_OK;
}

static zero_status allow_reshard(struct zero_engine *e, zero__ck_load *ld) {
    const zero__ck_manifest *m = ld->m;
    /* where each param comes from: check_model's manifest index (its stage
     * and offset there), then an expert's color */
    ld->src = calloc(e->nparams ? e->nparams : 1, sizeof *ld->src);
    if (!ld->src) return zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "zero_load: out of memory");
    for (uint32_t i = 0; i < e->nparams; i++) {
        const zero__ck_param *p = &m->params[ld->idx[i]];
        ld->src[i] = (zero__ck_src){e->params[i]->info.flat_offset, e->params[i]->info.numel, p->flat_offset,
                                    p->pp_stage, -1, -1};
    }
    zero_status xs = map_experts(e, ld);
    if (xs != ZERO_OK) return xs;
    const char *mine = e->plugin.table->name;
    if (!m->reshardable)
        return zero__error(e, ZERO_ERR_UNSUPPORTED,
                           "checkpoint %s: written by plugin '%s' at %d ranks, which does not describe its shards for "
                           "resharding; load it with '%s' at %d ranks",
                           ld->dir, m->plugin, m->world, m->plugin, m->world);
    if (!(e->plugin.table->caps & ZERO_PLUGIN_CAP_RESHARD))
        return zero__error(e, ZERO_ERR_UNSUPPORTED,
                           ld->weights_only
                               ? "checkpoint %s: written by plugin '%s' at %d ranks; plugin '%s' cannot load weights "
                                 "only (no ZERO_PLUGIN_CAP_RESHARD: a weights-only load reads through the resharding "
                                 "reader)"
                               : "checkpoint %s: written by plugin '%s' at %d ranks; plugin '%s' cannot load another "
                                 "plugin's or world size's checkpoint (no ZERO_PLUGIN_CAP_RESHARD)",
                           ld->dir, m->plugin, m->world, mine);
    if (m->st.micro_step && !ld->weights_only)
        return zero__error(e, ZERO_ERR_UNSUPPORTED,
                           "checkpoint %s: saved in the middle of an accumulation window (micro-step %u): only plugin "
                           "'%s' at %d ranks %scan resume it (gradients in flight are not resharded)",
                           ld->dir, m->st.micro_step, m->plugin, m->world,
                           m->pp_stages != e->pp_stages ? "with the saver's pipeline split "
                           : !strcmp(m->plugin, mine) && m->world == e->world_size
                               ? "with the saver's partition layout (zero_optimization.round_robin_gradients and "
                                 "reduce_bucket_size as saved) "
                               : "");
    for (int k = -1; k < (ld->weights_only ? 0 : (int)m->nstate); k++) {
        int kind = k < 0 ? ZERO__CK_MASTER : ZERO__CK_STATE0 + k;
        for (uint32_t i = 0; i < e->nparams; i++) /* every saver's stage this rank reads from */
            if (!zero__ck_has(m, ld->src[i].pp, kind))
                return zero__error(e, ZERO_ERR_IO, "checkpoint %s: no shard data of kind %d of pipeline stage %d for "
                                   "resharding", ld->dir, kind, (int)ld->src[i].pp);
    }
    if (m->pp_stages != e->pp_stages)
        zero__log(e, ZERO_LOG_INFO, "checkpoint %s: %s %s x%d in %d pipeline stages -> %s x%d in %d", ld->dir,
                  ld->weights_only ? "loading the weights only of" : "resharding", m->plugin, m->world, m->pp_stages,
                  mine, e->world_size, e->pp_stages);
    else
        zero__log(e, ZERO_LOG_INFO, "checkpoint %s: %s %s x%d -> %s x%d", ld->dir,
                  ld->weights_only ? "loading the weights only of" : "resharding", m->plugin, m->world, mine,
                  e->world_size);
    return ZERO_OK;
}

/* (1.7) The checkpoint's client state, the same bytes on every rank:
 * global rank 0 reads it through the verifying reader (every chunk
 * against its CRC-32C) and broadcasts it, so a checkpoint directory that
 * only rank 0's node holds serves it too.  Read before anything is
 * restored: a damaged client state fails the load with the engine as it
 * was.  Collective. */
static zero_status read_client_state(struct zero_engine *e, zero__ck_load *ld, void **out, uint64_t *bytes) {
    *out = NULL;
    *bytes = 0;
    const zero__ck_file *f = ld->m->client; /* every rank parsed the same manifest text */
    if (!f || !f->bytes) return ZERO_OK;
    void *buf = malloc((size_t)f->bytes);
    zero_status s = buf ? ZERO_OK
                        : zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "zero_load: out of memory for the client state (%llu "
                                      "bytes)", (unsigned long long)f->bytes);
    if (s == ZERO_OK && zero__comm_rank(e->global) == 0) {
        char err[1200];
        if (zero__ck_read(ld->r, f, 0, buf, f->bytes, err, sizeof err))
            s = zero__error(e, ZERO_ERR_IO, "checkpoint %s: the client state: %s", ld->dir, err);
    }
    s = zero__ck_agree(e, s, "zero_load");
    if (s == ZERO_OK) s = zero__broadcast(e->global, buf, (size_t)f->bytes, ZERO_DTYPE_U8, 0);
    if (s != ZERO_OK) {
        free(buf);
        return s;
    }
    *out = buf;
    *bytes = f->bytes;
    return ZERO_OK;
}

/* (libzero 1.10) Another pipeline split: the stages of this run together
 * take every parameter of the checkpoint exactly once (each stage's
 * data-parallel rank 0 counts its params' manifest entries; one all-reduce
 * over every rank).  A layer left out, or registered on two stages, is
 * named.  Collective; every rank returns the same verdict. */
static zero_status resplit_coverage(struct zero_engine *e, zero__ck_load *ld) {
    const zero__ck_manifest *m = ld->m;
    double *cnt = calloc(m->nparams ? m->nparams : 1, sizeof *cnt);
    if (!cnt) return zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "zero_load: out of memory");
    for (uint32_t i = 0; e->rank == 0 && i < e->nparams; i++) cnt[ld->idx[i]] += 1;
    zero_status s = zero__allreduce(e->global, cnt, m->nparams, ZERO_DTYPE_F64, ZERO_OP_SUM);
    for (uint32_t k = 0; s == ZERO_OK && k < m->nparams; k++)
        if (cnt[k] != 1)
            s = zero__error(e, ZERO_ERR_MISMATCH,
                            "checkpoint %s: parameter '%s' (pipeline stage %d of %d) is registered by %.0f of this "
                            "run's %d pipeline stages; with another pipeline split every parameter must be on exactly "
                            "one stage",
                            ld->dir, m->params[k].name, (int)m->params[k].pp_stage, m->pp_stages, cnt[k], e->pp_stages);
    free(cnt);
    return s;
}

/* (libzero 1.10) A resharding load with expert groups finds each rank's
 * experts by name; experts of the checkpoint that no rank of this run holds
 * (a run with fewer experts) are not loaded.  Not an error -- pruning
 * experts is a choice -- but said: the first rank of each expert-DP group
 * marks what its group takes, one all-reduce sums the marks, and global
 * rank 0 warns naming how many and the first.  Collective; after
 * map_experts agreed on every rank. */
static zero_status expert_coverage(struct zero_engine *e, zero__ck_load *ld) {
    const zero__ck_manifest *m = ld->m;
    size_t n = 0; /* (1.13) with a pipeline: this stage's records, which its data-parallel group loads */
    for (uint32_t x = 0; x < m->nexperts; x++) n += (size_t)m->experts[x].nsets * m->experts[x].nnames;
    double *held = calloc(n ? n : 1, sizeof *held);
    if (!held) return zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "zero_load: out of memory");
    const zero_layout *L = &e->layout.view;
    for (uint32_t i = 0; i < e->nparams; i++) {
        const zero__ck_src *src = &ld->src[i];
        const int g = zero__layout_group_of(L, e->params[i]->info.flat_offset);
        if (src->xi < 0 || g < 0 || !L->group_rank || L->group_rank[g] != 0) continue;
        size_t at = 0;
        for (int x = 0; x < src->xi; x++) at += (size_t)m->experts[x].nsets * m->experts[x].nnames;
        const zero__ck_experts *x = &m->experts[src->xi];
        const uint32_t set = set_of(x, src->color), k = place_in_group(e, i);
        if (set < x->nsets && k < x->nnames) held[at + (size_t)set * x->nnames + k] = 1;
    }
    zero_status s = zero__allreduce(e->world, held, n, ZERO_DTYPE_F64, ZERO_OP_SUM);
    size_t missing = 0, at = 0;
    const char *first = NULL;
    for (uint32_t x = 0; s == ZERO_OK && x < m->nexperts; x++)
        for (uint32_t set = 0; set < m->experts[x].nsets; set++)
            for (uint32_t k = 0; k < m->experts[x].nnames; k++, at++)
                if (m->experts[x].pp_stage == e->pp_stage && held[at] == 0 && !missing++)
                    first = m->experts[x].sets[set].names[k];
    if (missing && zero__comm_rank(e->world) == 0) /* the first rank of the job, or of each pipeline stage */
        zero__log(e, ZERO_LOG_WARN,
                  "checkpoint %s: %zu expert parameter%s of the checkpoint %s held by no rank of this run and not "
                  "loaded (the first: '%s'); a run with fewer experts drops them",
                  ld->dir, missing, missing == 1 ? "" : "s", missing == 1 ? "is" : "are", first);
    free(held);
    return s;
}

zero_status zero__ckpt_load(struct zero_engine *e, const char *path, const zero__ck_load_args *a) {
    zero__ck_load ld;
    memset(&ld, 0, sizeof ld);
    ld.weights_only = a->weights_only != 0;
    char *text = NULL;
    size_t len = 0;
    zero_status s = share(e, path, ld.dir, sizeof ld.dir, &text, &len);
    if (s == ZERO_OK) s = prepare(e, &ld, text, len);
    free(text);
    s = zero__ck_agree(e, s, "zero_load");
    if (s == ZERO_OK) {
        double need = same_layout(e, ld.m) ? 0 : 1;
        s = zero__allreduce(e->global, &need, 1, ZERO_DTYPE_F64, ZERO_OP_MAX);
        ld.reshard = need > 0 || ld.weights_only;
        if (s == ZERO_OK && ld.m->pp_stages != e->pp_stages) s = resplit_coverage(e, &ld);
        if (s == ZERO_OK) {
            e->ck_load = &ld;
            s = ld.reshard ? allow_reshard(e, &ld) : ZERO_OK;
            e->ck_load = NULL;
        }
        s = zero__ck_agree(e, s, "zero_load");
        if (s == ZERO_OK && ld.reshard && ld.m->nexperts && e->group_comms) s = expert_coverage(e, &ld);
    }
    void *client = NULL;
    uint64_t client_bytes = 0;
    if (s == ZERO_OK) s = read_client_state(e, &ld, &client, &client_bytes);
    if (s == ZERO_OK) {
        e->ck_load = &ld;
        s = e->plugin.table->load(e->pstate, ld.dir);
        e->ck_load = NULL;
        s = zero__ck_agree(e, s, "zero_load");
    }
    if (s == ZERO_OK && ld.weights_only) {
        /* training starts over from these weights: the optimizer states are zero (ckpt_shard), the plugin
         * dropped its gradients (a resharding load), the step state is a new run's */
        zero__engine_steps_init(e);
        free(e->ck_client); /* the client state is read as by a whole load */
        e->ck_client = client;
        e->ck_client_bytes = client_bytes;
        client = NULL;
    } else if (s == ZERO_OK) {
        const zero__ck_state *st = &ld.m->st;
        e->global_step = st->global_step;
        e->skipped_steps = st->skipped_steps;
        e->micro_step = st->micro_step;
        e->lr = st->lr;
        zero__scaler *sc = &e->scaler;
        sc->dynamic = st->ls_dynamic;
        sc->scale = st->ls_scale;
        sc->min_scale = st->ls_min_scale;
        sc->window = st->ls_window;
        sc->delayed_shift = st->ls_delayed_shift;
        sc->cur_hysteresis = st->ls_cur_hysteresis;
        sc->consecutive_hysteresis = st->ls_consecutive;
        sc->cur_iter = st->ls_cur_iter;
        sc->last_overflow_iter = st->ls_last_overflow_iter;
        if (ld.has_hp) { /* (1.4) the saver's zero_set_hparams settings replace this run's */
            free(e->hp_over);
            e->hp_over = ld.hp;
            e->nhp_over = ld.nhp;
            ld.hp = NULL;
        }
        free(e->ck_client); /* (1.7) this checkpoint's, or none */
        e->ck_client = client;
        e->ck_client_bytes = client_bytes;
        client = NULL;
    }
    free(client);
    free(ld.hp);
    zero__ck_reader_close(ld.r);
    zero__ck_manifest_free(ld.m);
    free(ld.src);
    free(ld.idx);
    return s;
}
