/* Parameter registry: handle validation, registration and the cross-rank
 * agreement check at zero_params_done. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "params.h"
#include "shape.h"
#include "struct_in.h"

/* Handles are validated by membership in an open-addressing pointer set, so
 * a stale or foreign pointer is rejected without being dereferenced. */
static size_t ptr_hash(const void *p, uint32_t cap) {
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (size_t)(x & (cap - 1));
}

static int set_insert(struct zero_engine *e, void *p) {
    if ((e->nparams + 1) * 2 > e->param_set_cap) {
        uint32_t ncap = e->param_set_cap ? e->param_set_cap * 2 : 64;
        void **ns = calloc(ncap, sizeof(void *));
        if (!ns) return -1;
        for (uint32_t i = 0; i < e->param_set_cap; i++) {
            void *q = e->param_set[i];
            if (!q) continue;
            size_t h = ptr_hash(q, ncap);
            while (ns[h]) h = (h + 1) & (ncap - 1);
            ns[h] = q;
        }
        free(e->param_set);
        e->param_set = ns;
        e->param_set_cap = ncap;
    }
    size_t h = ptr_hash(p, e->param_set_cap);
    while (e->param_set[h]) h = (h + 1) & (e->param_set_cap - 1);
    e->param_set[h] = p;
    return 0;
}

int zero__param_valid(const struct zero_engine *e, const zero_param *p) {
    if (!p || !e->param_set_cap) return 0;
    size_t h = ptr_hash(p, e->param_set_cap);
    while (e->param_set[h]) {
        if (e->param_set[h] == p) return 1;
        h = (h + 1) & (e->param_set_cap - 1);
    }
    return 0;
}

static const char *dtype_name(zero_dtype d) {
    switch (d) {
    case ZERO_DTYPE_F32: return "f32";
    case ZERO_DTYPE_BF16: return "bf16";
    case ZERO_DTYPE_F16: return "f16";
    default: return "?";
    }
}

zero_status zero__param_register(struct zero_engine *e, const zero_param_desc *d, zero_param **out) {
    if (d->struct_size < offsetof(zero_param_desc, group))
        return zero__error(e, ZERO_ERR_INVALID_ARGUMENT, "zero_param_desc.struct_size %u is too small",
                           d->struct_size);
    /* Fields past the caller's struct_size take their documented defaults. */
    zero_param_desc desc = ZERO_PARAM_DESC_INIT;
    char why[512];
    if (!zero__struct_in(&desc, d, d->struct_size, sizeof desc, "zero_param_desc", why, sizeof why))
        return zero__error(e, ZERO_ERR_INVALID_ARGUMENT, "zero_register_param(%s): %s",
                           d->name ? d->name : "?", why);
    /* reserved fields are zero in ZERO_PARAM_DESC_INIT; refused otherwise
     * (1.7.7) so that a later ABI can give them a meaning */
    if (desc.reserved0 != 0 || desc.reserved1 != 0 || desc.reserved2 != 0)
        return zero__error(e, ZERO_ERR_INVALID_ARGUMENT,
                           "zero_register_param(%s): zero_param_desc.reserved0/1/2 are %u/%d/%u, must be 0 "
                           "(start from ZERO_PARAM_DESC_INIT)",
                           d->name ? d->name : "?", (unsigned)desc.reserved0, (int)desc.reserved1,
                           (unsigned)desc.reserved2);
    if (!desc.name || !desc.name[0])
        return zero__error(e, ZERO_ERR_INVALID_ARGUMENT, "zero_register_param: a name is required");
    if (desc.reserved3 != 0)
        return zero__error(e, ZERO_ERR_INVALID_ARGUMENT,
                           "zero_register_param(%s): zero_param_desc.reserved3 is %u, must be 0 (start from "
                           "ZERO_PARAM_DESC_INIT)",
                           desc.name, (unsigned)desc.reserved3);
    /* (1.8) the shape: only recorded, but a wrong one would name another
     * tensor in every file written from the checkpoint */
    if (desc.ndim > ZERO_MAX_NDIM || (desc.ndim && !desc.shape))
        return zero__error(e, ZERO_ERR_INVALID_ARGUMENT,
                           "zero_register_param(%s): ndim %u with shape %s (at most %d dimensions, and a shape "
                           "array for any)",
                           desc.name, (unsigned)desc.ndim, desc.shape ? "given" : "NULL", ZERO_MAX_NDIM);
    uint64_t prod = 0;
    if (desc.ndim) {
        const int over = zero__shape_numel(desc.shape, desc.ndim, &prod) != 0;
        if (over || prod != desc.numel) {
            char dims[200] = "";
            for (uint32_t k = 0; k < desc.ndim; k++)
                snprintf(dims + strlen(dims), sizeof dims - strlen(dims), "%s%llu", k ? " x " : "",
                         (unsigned long long)desc.shape[k]);
            return zero__error(e, ZERO_ERR_INVALID_ARGUMENT,
                               "zero_register_param(%s): shape %s holds %s elements, numel is %llu", desc.name, dims,
                               over ? "more than 2^64" : "another number of", (unsigned long long)desc.numel);
        }
    }
    if (desc.numel == 0)
        return zero__error(e, ZERO_ERR_INVALID_ARGUMENT, "zero_register_param(%s): numel is 0", desc.name);
    if (!desc.data)
        return zero__error(e, ZERO_ERR_INVALID_ARGUMENT, "zero_register_param(%s): data is NULL", desc.name);
    if (desc.dtype != ZERO_DTYPE_F32 && desc.dtype != ZERO_DTYPE_BF16 && desc.dtype != ZERO_DTYPE_F16)
        return zero__error(e, ZERO_ERR_INVALID_ARGUMENT, "zero_register_param(%s): unknown dtype %d",
                           desc.name, (int)desc.dtype);
    if (desc.dtype != e->rc->model_dtype)
        return zero__error(e, ZERO_ERR_INVALID_ARGUMENT,
                           "zero_register_param(%s): dtype %s differs from the config's model dtype %s "
                           "(set fp16.enabled / bf16.enabled to match)",
                           desc.name, dtype_name(desc.dtype), dtype_name(e->rc->model_dtype));
    /* (gpu-wiring) A CUDA engine takes initial values and host-owned
     * gradients from either host or device memory (copied / added through
     * the device); a CPU engine cannot read device memory. */
    if (desc.device != ZERO_DEVICE_CPU && !(desc.device == ZERO_DEVICE_CUDA && e->dev))
        return zero__error(e, ZERO_ERR_UNSUPPORTED,
                           "zero_register_param(%s): device %d is not supported %s", desc.name, (int)desc.device,
                           desc.device == ZERO_DEVICE_CUDA ? "by an engine created with device_kind CPU"
                                                           : "(unknown device kind)");
    if (desc.group < 0)
        return zero__error(e, ZERO_ERR_INVALID_ARGUMENT, "zero_register_param(%s): group %d < 0", desc.name,
                           (int)desc.group);
    if (desc.flags & ~(uint32_t)ZERO_PARAM_HOST_OWNED)
        return zero__error(e, ZERO_ERR_INVALID_ARGUMENT, "zero_register_param(%s): unknown flags 0x%x", desc.name,
                           (unsigned)(desc.flags & ~(uint32_t)ZERO_PARAM_HOST_OWNED));
    if ((desc.flags & ZERO_PARAM_HOST_OWNED) && (e->plugin.table->caps & ZERO_PLUGIN_CAP_PARTITIONS_PARAMS))
        return zero__error(e, ZERO_ERR_UNSUPPORTED,
                           "zero_register_param(%s): ZERO_PARAM_HOST_OWNED with plugin '%s', which partitions "
                           "parameters (stage 3): a rank keeps only a shard, so there is no full tensor to write "
                           "back; register without the flag and use zero_gather / zero_release",
                           desc.name, e->plugin.table->name ? e->plugin.table->name : "?");
    for (uint32_t i = 0; i < e->nparams; i++)
        if (strcmp(e->params[i]->name, desc.name) == 0) {
            /* (1.3) the same param in two groups (e.g. dense and expert):
             * remembered, so that zero_params_done fails on every rank */
            if (e->params[i]->info.group != desc.group && !e->two_groups[0])
                snprintf(e->two_groups, sizeof e->two_groups, "'%.120s' in group %d and again in group %d",
                         desc.name, (int)e->params[i]->info.group, (int)desc.group);
            return zero__error(e, ZERO_ERR_INVALID_ARGUMENT, "zero_register_param: duplicate name '%s'%s",
                               desc.name,
                               e->params[i]->info.group != desc.group ? " (registered in two groups)" : "");
        }

    /* (1.7.5) Two host-owned params on one tensor (tied weights registered
     * under both names): libzero would keep two copies and two optimizer
     * states for it and write both back into it, and the second step was
     * refused as a host write to the first ("written by the host"), which
     * it was not.  Any overlap is refused here, naming both. */
    if (desc.flags & ZERO_PARAM_HOST_OWNED) {
        const uintptr_t lo = (uintptr_t)desc.data, hi = lo + (uintptr_t)(desc.numel * zero__dtype_size(desc.dtype));
        for (uint32_t i = 0; i < e->nparams; i++) {
            const struct zero_param *q = e->params[i];
            if (!q->host_data || q->host_device != desc.device) continue;
            const uintptr_t qlo = (uintptr_t)q->host_data,
                            qhi = qlo + (uintptr_t)(q->info.numel * zero__dtype_size(q->info.dtype));
            if (lo < qhi && qlo < hi)
                return zero__error(e, ZERO_ERR_INVALID_ARGUMENT,
                                   "zero_register_param(%s): its ZERO_PARAM_HOST_OWNED tensor overlaps the one of "
                                   "param '%s' (%llu bytes in common): one tensor cannot be two params (libzero "
                                   "would keep two copies and two optimizer states and write both into it); for "
                                   "tied weights register the tensor once and add the gradients of both uses into "
                                   "its buffer",
                                   desc.name, q->name,
                                   (unsigned long long)((hi < qhi ? hi : qhi) - (lo > qlo ? lo : qlo)));
        }
    }

    if (e->nparams == e->params_cap) {
        uint32_t ncap = e->params_cap ? e->params_cap * 2 : 32;
        struct zero_param **np = realloc(e->params, ncap * sizeof *np);
        if (!np) return zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "out of memory registering params");
        e->params = np;
        e->params_cap = ncap;
    }
    struct zero_param *p = calloc(1, sizeof *p);
    char *name = strdup(desc.name);
    if (!p || !name || set_insert(e, p) != 0) {
        free(p);
        free(name);
        return zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "out of memory registering params");
    }
    p->magic = ZERO__PARAM_MAGIC;
    p->engine = e;
    p->name = name;
    atomic_init(&p->ready, 0);
    p->info.struct_size = sizeof p->info;
    p->info.index = e->nparams;
    p->info.name = name;
    p->info.numel = desc.numel;
    p->info.dtype = desc.dtype;
    p->info.group = desc.group;
    p->info.init_data = desc.data;
    p->info.init_device = desc.device;
    p->info.host_grad = desc.grad;
    p->ndim = desc.ndim;
    for (uint32_t k = 0; k < desc.ndim; k++) p->shape[k] = desc.shape[k];
    if (desc.flags & ZERO_PARAM_HOST_OWNED) {
        p->host_data = (void *)(uintptr_t)desc.data; /* the host promised writable memory */
        p->host_device = desc.device;
        e->any_host_owned = 1;
    }
    e->params[e->nparams++] = p;
    *out = p;
    return ZERO_OK;
}

static void set_rebuild(struct zero_engine *e) {
    memset(e->param_set, 0, e->param_set_cap * sizeof(void *));
    for (uint32_t i = 0; i < e->nparams; i++) {
        size_t h = ptr_hash(e->params[i], e->param_set_cap);
        while (e->param_set[h]) h = (h + 1) & (e->param_set_cap - 1);
        e->param_set[h] = e->params[i];
    }
}

void zero__param_unregister_last(struct zero_engine *e) {
    if (!e->nparams) return;
    struct zero_param *p = e->params[--e->nparams];
    set_rebuild(e);
    free(p->name);
    free(p->slice_seen);
    free(p->slice_prints);
    p->magic = 0;
    free(p);
}

void zero__params_free(struct zero_engine *e) {
    for (uint32_t i = 0; i < e->nparams; i++) {
        free(e->params[i]->name);
        free(e->params[i]->slice_seen);
        free(e->params[i]->slice_prints);
        e->params[i]->magic = 0;
        free(e->params[i]);
    }
    free(e->params);
    free(e->param_set);
    e->params = NULL;
    e->param_set = NULL;
    e->nparams = e->params_cap = e->param_set_cap = 0;
}

/* FNV-1a over what must agree across ranks: name, numel, dtype, group. */
static uint64_t fnv(uint64_t h, const void *data, size_t n) {
    const unsigned char *b = data;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

static uint64_t param_hash(const struct zero_param *p) {
    uint64_t h = 0xcbf29ce484222325ULL;
    /* (1.3) an expert group's params are different experts on ranks of
     * different expert-DP groups: only their shapes agree world-wide (the
     * names are compared inside each expert-DP group, experts.c) */
    const zero__group_hp *g = zero__group_hp_of(p->engine, p->info.group);
    if (!g || g->expert_color < 0) h = fnv(h, p->name, strlen(p->name));
    h = fnv(h, &p->info.numel, sizeof p->info.numel);
    h = fnv(h, &p->info.dtype, sizeof p->info.dtype);
    h = fnv(h, &p->info.group, sizeof p->info.group);
    return h ? h : 1; /* 0 marks "no param at this index" */
}

#define DESC_LEN 200

static void describe(const struct zero_engine *e, uint32_t i, char *buf) {
    if (i >= e->nparams) {
        snprintf(buf, DESC_LEN, "<no param: only %u registered>", e->nparams);
        return;
    }
    const struct zero_param *p = e->params[i];
    snprintf(buf, DESC_LEN, "'%.120s' (numel %llu, %s, group %d)", p->name, (unsigned long long)p->info.numel,
             dtype_name(p->info.dtype), (int)p->info.group);
}

/* Every rank learns the same verdict: the summary exchange is a fixed-size
 * allgather, so it cannot hang on differing lists; on a mismatch a second
 * exchange of the per-param hashes (padded to the longest list) finds the
 * first differing index, and a third shares each rank's description of it. */
zero_status zero__params_agree(struct zero_engine *e) {
    int n = e->world_size;
    if (n <= 1) return ZERO_OK;
    uint64_t mine[2] = {e->nparams, 0xcbf29ce484222325ULL};
    for (uint32_t i = 0; i < e->nparams; i++) {
        uint64_t h = param_hash(e->params[i]);
        mine[1] = fnv(mine[1], &h, sizeof h);
    }
    uint64_t *all = calloc((size_t)n * 2, sizeof(uint64_t));
    if (!all) return zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "out of memory in parameter check");
    zero_status s = zero__allgather_bytes(e->world, mine, all, sizeof mine);
    if (s != ZERO_OK) {
        free(all);
        return s;
    }
    int same = 1;
    uint64_t maxn = 0;
    for (int r = 0; r < n; r++) {
        if (all[2 * r] != all[0] || all[2 * r + 1] != all[1]) same = 0;
        if (all[2 * r] > maxn) maxn = all[2 * r];
    }
    free(all);
    if (same) return ZERO_OK;

    uint64_t *h = calloc(maxn ? maxn : 1, sizeof(uint64_t));
    uint64_t *hall = calloc((size_t)n * (maxn ? maxn : 1), sizeof(uint64_t));
    char *desc = calloc(DESC_LEN, 1);
    char *dall = calloc((size_t)n, DESC_LEN);
    if (!h || !hall || !desc || !dall) {
        free(h), free(hall), free(desc), free(dall);
        return zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "out of memory in parameter check");
    }
    for (uint32_t i = 0; i < e->nparams; i++) h[i] = param_hash(e->params[i]);
    s = zero__allgather_bytes(e->world, h, hall, (maxn ? maxn : 1) * sizeof(uint64_t));
    uint64_t first = maxn;
    for (uint64_t i = 0; s == ZERO_OK && i < maxn && first == maxn; i++)
        for (int r = 1; r < n; r++)
            if (hall[(size_t)r * maxn + i] != hall[i]) {
                first = i;
                break;
            }
    if (first == maxn) first = 0; /* lists equal param by param but the summary differed: cannot happen */
    describe(e, (uint32_t)first, desc);
    if (s == ZERO_OK) s = zero__allgather_bytes(e->world, desc, dall, DESC_LEN);
    if (s == ZERO_OK) {
        char msg[1600];
        int off = snprintf(msg, sizeof msg, "ranks registered different parameter lists; first difference at index %llu:",
                           (unsigned long long)first);
        for (int r = 0; r < n && off < (int)sizeof msg - 1; r++) {
            const char *dr = dall + (size_t)r * DESC_LEN;
            off += snprintf(msg + off, sizeof msg - off, " rank %d has %s;", r, dr);
        }
        s = zero__error(e, ZERO_ERR_MISMATCH, "%s", msg);
    }
    free(h), free(hall), free(desc), free(dall);
    return s;
}
