/* (1.3) Mixture-of-experts parameter groups (zero_group_desc.expert_color).
 *
 * An expert group is partitioned over its expert-data-parallel group (the
 * ranks that gave it the same color) instead of the whole data-parallel
 * group.  Everything that makes that safe happens here, at
 * zero_params_done, before the layout is built:
 *   1. zero__experts_agree: every rank has the same group table (which
 *      groups exist, in which order, which are expert groups) and no
 *      tensor is registered in two groups -- one fixed-size all-gather, so
 *      a disagreement is a named ZERO_ERR_MISMATCH on every rank, never a
 *      hang in a later collective;
 *   2. zero__experts_setup: one communicator per expert group (split of
 *      the world by color, ordered by rank), equal sizes on every rank
 *      (the flat layout must have the same shape everywhere, so that the
 *      dense buckets match), and, inside each expert-DP group, the same
 *      parameter names (its ranks hold the same experts); then the
 *      layout learns each param's partition size and place.
 * Step thread only (zero_params_done / zero_engine_destroy). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "layout.h"

#define DESC_LEN 256

static int32_t color_of(const struct zero_engine *e, int32_t group) {
    const zero__group_hp *g = zero__group_hp_of(e, group);
    return g ? g->expert_color : ZERO_GROUP_DENSE;
}

/* Distinct group ids in registration order (the layout's group order). */
static uint32_t group_ids(const struct zero_engine *e, int32_t *ids) {
    uint32_t n = 0;
    for (uint32_t i = 0; i < e->nparams; i++) {
        uint32_t g = 0;
        while (g < n && ids[g] != e->params[i]->info.group) g++;
        if (g == n) ids[n++] = e->params[i]->info.group;
    }
    return n;
}

static uint64_t fnv(uint64_t h, const void *data, size_t n) {
    const unsigned char *b = data;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

/* One param in two groups: a name registered again in another group
 * (refused by zero_register_param, remembered), or one host tensor -- a
 * host-owned gradient buffer, or a ZERO_PARAM_HOST_OWNED parameter (which
 * zero_register_param refuses first since 1.7.5, in any groups) -- behind
 * params of two groups.  (Plain initial values may be shared: they are
 * only copied.)  Describe the first into msg; 0 if none. */
static int same_tensor(const struct zero_param *a, const struct zero_param *b) {
    return (a->host_data && a->host_data == b->host_data) ||
           (a->info.host_grad && a->info.host_grad == b->info.host_grad);
}

static int by_tensor(const void *a, const void *b) {
    const struct zero_param *const *x = a, *const *y = b;
    uintptr_t p = (uintptr_t)((*x)->host_data ? (*x)->host_data : (*x)->info.host_grad);
    uintptr_t q = (uintptr_t)((*y)->host_data ? (*y)->host_data : (*y)->info.host_grad);
    return p < q ? -1 : p > q;
}

static int two_groups(const struct zero_engine *e, char *msg) {
    if (e->two_groups[0]) {
        snprintf(msg, DESC_LEN, "a parameter is registered in two groups: %.190s", e->two_groups);
        return 1;
    }
    if (e->nparams < 2) return 0;
    struct zero_param **v = malloc(e->nparams * sizeof *v);
    if (!v) return 0; /* the check is advisory under memory pressure */
    memcpy(v, e->params, e->nparams * sizeof *v);
    qsort(v, e->nparams, sizeof *v, by_tensor);
    int found = 0;
    for (uint32_t i = 1; i < e->nparams && !found; i++)
        if (same_tensor(v[i], v[i - 1]) && v[i]->info.group != v[i - 1]->info.group) {
            snprintf(msg, DESC_LEN, "one host tensor is registered in two groups: '%.80s' (group %d) and '%.80s' (group %d)",
                     v[i - 1]->name, (int)v[i - 1]->info.group, v[i]->name, (int)v[i]->info.group);
            found = 1;
        }
    free(v);
    return found;
}

/* Everyone's description, joined into one ZERO_ERR_MISMATCH message. */
static zero_status fail_all(struct zero_engine *e, zero_comm *over, const char *what, const char *mine) {
    const int n = zero__comm_size(over);
    char *all = calloc((size_t)n, DESC_LEN);
    char own[DESC_LEN];
    snprintf(own, sizeof own, "%s", mine);
    if (!all) return zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "zero_params_done: out of memory");
    zero_status s = zero__allgather_bytes(over, own, all, DESC_LEN);
    if (s != ZERO_OK) {
        free(all);
        return s;
    }
    char msg[4096];
    int off = snprintf(msg, sizeof msg, "zero_params_done: %s:", what);
    for (int r = 0; r < n && off < (int)sizeof msg - 1; r++) {
        const char *d = all + (size_t)r * DESC_LEN;
        if (d[0]) off += snprintf(msg + off, sizeof msg - off, " rank %d: %s;", r, d);
    }
    free(all);
    return zero__error(e, ZERO_ERR_MISMATCH, "%s", msg);
}

zero_status zero__experts_agree(struct zero_engine *e) {
    int32_t *ids = malloc((e->nparams ? e->nparams : 1) * sizeof *ids);
    if (!ids) return zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "zero_params_done: out of memory");
    const uint32_t ng = group_ids(e, ids);
    uint64_t h = 0xcbf29ce484222325ULL;
    char table[DESC_LEN];
    int off = snprintf(table, sizeof table, "groups");
    for (uint32_t g = 0; g < ng; g++) {
        int32_t row[2] = {ids[g], color_of(e, ids[g]) >= 0};
        h = fnv(h, row, sizeof row);
        if (off < (int)sizeof table - 1)
            off += snprintf(table + off, sizeof table - off, " %d(%s)", (int)ids[g], row[1] ? "expert" : "dense");
    }
    free(ids);
    char dup[DESC_LEN] = "";
    /* one exchange: the group table's hash and whether this rank registered a tensor twice */
    uint64_t mine[2] = {h, (uint64_t)two_groups(e, dup)};
    const int n = e->world_size;
    uint64_t *all = calloc((size_t)n * 2, sizeof *all);
    if (!all) return zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "zero_params_done: out of memory");
    zero_status s = n > 1 ? zero__allgather_bytes(e->world, mine, all, sizeof mine) : ZERO_OK;
    if (n <= 1) memcpy(all, mine, sizeof mine);
    int differ = 0, twice = 0;
    for (int r = 0; s == ZERO_OK && r < n; r++) {
        differ |= all[2 * r] != all[0];
        twice |= all[2 * r + 1] != 0;
    }
    free(all);
    if (s != ZERO_OK) return s;
    if (twice) return fail_all(e, e->world, "a parameter is registered in two groups", dup);
    if (differ)
        return fail_all(e, e->world,
                        "ranks registered different parameter groups (ids in registration order, dense or expert "
                        "per zero_group_desc.expert_color)",
                        table);
    return ZERO_OK;
}

/* Names of group g's params, hashed (experts are named per rank; the
 * ranks of one expert-DP group must hold the same ones). */
static uint64_t names_hash(const struct zero_engine *e, int32_t group, char *first) {
    uint64_t h = 0xcbf29ce484222325ULL;
    first[0] = 0;
    for (uint32_t i = 0; i < e->nparams; i++) {
        if (e->params[i]->info.group != group) continue;
        if (!first[0]) snprintf(first, 100, "%s", e->params[i]->name);
        h = fnv(h, e->params[i]->name, strlen(e->params[i]->name) + 1);
    }
    return h;
}

zero_status zero__experts_setup(struct zero_engine *e, uint32_t *part_world, uint32_t *part_rank) {
    int32_t *ids = malloc((e->nparams ? e->nparams : 1) * sizeof *ids);
    if (!ids) return zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "zero_params_done: out of memory");
    const uint32_t ng = group_ids(e, ids);
    zero__experts_free(e); /* a zero_params_done retried after a failure splits anew */
    int any = 0;
    for (uint32_t g = 0; g < ng; g++) any |= color_of(e, ids[g]) >= 0;
    if (!any) {
        free(ids);
        return ZERO_OK;
    }
    zero_status s = ZERO_OK;
    e->group_comms = calloc(ng, sizeof *e->group_comms);
    e->ngroup_comms = e->group_comms ? ng : 0;
    uint32_t *sizes = calloc(ng, sizeof *sizes), *all = calloc((size_t)ng * (size_t)e->world_size, sizeof *all);
    if (!e->group_comms || !sizes || !all) {
        s = zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "zero_params_done: out of memory");
        goto out;
    }
    /* The table agrees (zero__experts_agree): every rank splits the same
     * groups in the same order, so the splits themselves cannot hang. */
    for (uint32_t g = 0; g < ng && s == ZERO_OK; g++) {
        const int32_t color = color_of(e, ids[g]);
        if (color < 0) {
            sizes[g] = (uint32_t)e->world_size;
            continue;
        }
        s = zero__comm_split(e->world, color, e->rank, &e->group_comms[g]);
        if (s != ZERO_OK) {
            s = e->last_error[0] ? s : zero__error(e, s, "zero_params_done: splitting expert group %d failed", (int)ids[g]);
            goto out;
        }
        sizes[g] = (uint32_t)zero__comm_size(e->group_comms[g]);
    }
    /* equal expert-DP sizes everywhere: the layout (group padding) has the
     * same shape on every rank, so dense buckets and shares line up */
    if ((s = zero__allgather_bytes(e->world, sizes, all, ng * sizeof *sizes)) != ZERO_OK) goto out;
    char mine[DESC_LEN] = "";
    int bad = 0;
    for (uint32_t g = 0; g < ng && !bad; g++)
        for (int r = 0; r < e->world_size; r++)
            if (all[(size_t)r * ng + g] != sizes[g]) {
                snprintf(mine, sizeof mine, "expert group %d has %u ranks here, %u on rank %d", (int)ids[g], sizes[g],
                         all[(size_t)r * ng + g], r);
                bad = 1;
                break;
            }
    /* (16-bit gradient accumulation with expert-DP groups of one rank: the
     * bucket set still runs its one-rank reduction, where the mean's
     * scaling is, since libzero 1.12: bucket_plan.h) */
    /* inside each expert-DP group: the same experts (names) */
    for (uint32_t g = 0; g < ng && !bad; g++) {
        if (!e->group_comms[g] || sizes[g] <= 1) continue;
        char first[100];
        uint64_t h = names_hash(e, ids[g], first), *hs = calloc(sizes[g], sizeof *hs);
        if (!hs) {
            s = zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "zero_params_done: out of memory");
            goto out;
        }
        s = zero__allgather_bytes(e->group_comms[g], &h, hs, sizeof h);
        for (uint32_t r = 0; s == ZERO_OK && r < sizes[g] && !bad; r++)
            if (hs[r] != h) {
                snprintf(mine, sizeof mine,
                         "expert group %d: the ranks of this expert-data-parallel group (color %d) registered "
                         "different experts (here the first is '%.60s')",
                         (int)ids[g], (int)color_of(e, ids[g]), first);
                bad = 1;
            }
        free(hs);
        if (s != ZERO_OK) goto out;
    }
    /* one verdict for every rank, naming each rank's finding */
    {
        int64_t flag = bad;
        if ((s = zero__allreduce(e->world, &flag, 1, ZERO_DTYPE_I64, ZERO_OP_MAX)) != ZERO_OK) goto out;
        if (flag) {
            s = fail_all(e, e->world, "expert groups differ across ranks", mine);
            goto out;
        }
    }
    for (uint32_t i = 0; i < e->nparams; i++) {
        uint32_t g = 0;
        while (ids[g] != e->params[i]->info.group) g++;
        if (!e->group_comms[g]) continue;
        part_world[i] = sizes[g];
        part_rank[i] = (uint32_t)zero__comm_rank(e->group_comms[g]);
    }
out:
    free(ids);
    free(sizes);
    free(all);
    return s;
}

zero_status zero__experts_plan_sizes(struct zero_engine *e, int32_t *ids, uint32_t *sizes, uint32_t *n) {
    *n = 0;
    int32_t *gid = malloc((e->nparams ? e->nparams : 1) * sizeof *gid);
    if (!gid) return zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "zero_params_done: out of memory");
    const uint32_t ng = group_ids(e, gid);
    uint32_t nexp = 0;
    for (uint32_t g = 0; g < ng; g++)
        if (color_of(e, gid[g]) >= 0) gid[nexp++] = gid[g]; /* the expert ones, in order */
    zero_status s = ZERO_OK;
    const int w = e->world_size;
    int32_t *colors = nexp ? malloc(nexp * sizeof *colors) : NULL, *all = nexp ? calloc((size_t)w * nexp, sizeof *all) : NULL;
    if (nexp && (!colors || !all)) s = zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "zero_params_done: out of memory");
    for (uint32_t k = 0; s == ZERO_OK && k < nexp; k++) colors[k] = color_of(e, gid[k]);
    if (s == ZERO_OK && nexp) s = zero__allgather_bytes(e->world, colors, all, nexp * sizeof *colors);
    for (uint32_t k = 0; s == ZERO_OK && k < nexp; k++) {
        uint32_t best = 0;
        for (int r = 0; r < w; r++) {
            uint32_t same = 0;
            for (int q = 0; q < w; q++) same += all[(size_t)q * nexp + k] == all[(size_t)r * nexp + k];
            if (same > best) best = same;
        }
        ids[k] = gid[k];
        sizes[k] = best;
    }
    if (s == ZERO_OK) *n = nexp;
    free(gid);
    free(colors);
    free(all);
    return s;
}

zero_status zero__experts_param_comms(const struct zero_engine *e, zero_comm **out) {
    for (uint32_t i = 0; i < e->nparams; i++) out[i] = NULL;
    if (!e->group_comms) return ZERO_OK;
    int32_t *ids = malloc((e->nparams ? e->nparams : 1) * sizeof *ids);
    if (!ids) return zero__error((struct zero_engine *)e, ZERO_ERR_OUT_OF_MEMORY, "zero_params_done: out of memory");
    const uint32_t ng = group_ids(e, ids); /* group_comms is indexed like this */
    for (uint32_t i = 0; i < e->nparams; i++)
        for (uint32_t k = 0; k < ng && k < e->ngroup_comms; k++)
            if (ids[k] == e->params[i]->info.group) {
                out[i] = e->group_comms[k];
                break;
            }
    free(ids);
    return ZERO_OK;
}

void zero__experts_free(struct zero_engine *e) {
    if (!e->group_comms) return;
    for (uint32_t g = 0; g < e->ngroup_comms; g++)
        if (e->group_comms[g]) zero__comm_free(e->group_comms[g]);
    free(e->group_comms);
    e->group_comms = NULL;
    e->ngroup_comms = 0;
}
