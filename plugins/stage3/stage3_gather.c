/* zero_gather / zero_release for stage 3: the plugin kit's gather engine
 * (kit/zero_kit_gather.h) with stage 3's fetch.
 *
 * The engine does the recorded per-phase order, the agreement before any
 * collective, prefetch, reuse distance, persistence, the pool and its
 * budget; this file tells it how one param's full tensor is assembled:
 * each param's all-gather has per-rank counts = its intersection with each
 * rank's share, so the pieces land concatenated as the full tensor, sent
 * from the shard (or, with offload_param nvme, from a window slot the piece
 * was read into: stage3_pwin.c).  World 1 needs no gather at all: every
 * param's full tensor is its place in the shard (an alias).
 * Engine thread only (stage3.h). */
#include <stdlib.h>
#include <string.h>

#include "stage3.h"
#include "stage3_tiers.h"

/* A slice unit's all-gather: each rank's intersection with the slice's
 * flat range [flat_offset + offset, + numel), in rank order (the pieces
 * land concatenated as the slice).  Counts made at the first fetch. */
static zero_status fetch_slice(zero__s3 *s, uint32_t idx, void *buf, zero_comm_req **req) {
    uint32_t param, layer;
    uint64_t offset, numel;
    zero_kit_gather_unit(s->gather, idx, &param, &layer, &offset, &numel);
    const uint32_t k = idx - s->nparams;
    if (k >= s->nslices) {
        zero__s3_slice *a = realloc(s->slices, (size_t)(k + 1) * sizeof *a);
        if (!a) return s->svc->error(s->c, ZERO_ERR_OUT_OF_MEMORY, "stage3: out of memory");
        memset(a + s->nslices, 0, (size_t)(k + 1 - s->nslices) * sizeof *a);
        s->slices = a;
        s->nslices = k + 1;
    }
    zero__s3_slice *sl = &s->slices[k];
    const zero__s3_param *p = &s->params[param];
    if (!sl->counts) {
        const uint32_t g = s->group_of[param];
        if (!(sl->counts = calloc(zero__s3_group_world(s, g), sizeof *sl->counts)))
            return s->svc->error(s->c, ZERO_ERR_OUT_OF_MEMORY, "stage3: out of memory");
        const uint64_t lo = p->info->flat_offset + offset;
        uint64_t piece_lo = 0;
        if (numel) zero__s3_pieces(s, g, lo, lo + numel, sl->counts, &sl->part_lo, &piece_lo);
    }
    const char *send = (const char *)s->shard + (size_t)sl->part_lo * s->esize;
    zero_status st = s->svc->iallgatherv(p->comm, send, buf, sl->counts, s->dtype, req);
    if (st != ZERO_OK) *req = NULL;
    return st;
}

static zero_status fetch(void *ctx, uint32_t idx, void *buf, zero_comm_req **req) {
    zero__s3 *s = ctx;
    if (idx >= s->nparams) return fetch_slice(s, idx, buf, req); /* never with offload_param nvme */
    zero__s3_param *p = &s->params[idx];
    const char *send = (const char *)s->shard + (size_t)p->part_lo * s->esize;
    int slot = -1;
    if (s->off_param_nvme && !(send = zero__s3_pwin_piece(s, p, &slot))) /* from the file (error set) */
        return s->off->send_err != ZERO_OK ? s->off->send_err : ZERO_ERR_IO;
    zero_status st = s->svc->iallgatherv(p->comm, send, buf, p->counts, s->dtype, req);
    if (st != ZERO_OK) *req = NULL;
    if (s->off_param_nvme) zero__s3_pwin_sent(s, slot, p, *req); /* the slot is busy until *req is waited for */
    return st;
}

/* offload_param nvme: read the next pieces ahead, while the host computes */
static void after_issue(void *ctx) { zero__s3_pwin_readahead(ctx); }

/* World 1: this rank's shard is the whole model in flat order, so the
 * "gathered" tensor is the shard itself: no buffer, no copy, no
 * all-gather, and stage 3 holds exactly what stage 2 does.  The same for
 * an expert group partitioned over one rank (expert parallelism = world:
 * each rank holds its experts whole).  (offload_param: the shard is host
 * memory; gather a device copy.) */
int zero__s3_aliased(const zero__s3 *s, uint32_t idx) {
    return !s->off_param && zero__s3_group_world(s, s->group_of[idx]) == 1;
}

static void *alias(void *ctx, uint32_t idx) {
    zero__s3 *s = ctx;
    if (!zero__s3_aliased(s, idx)) return NULL;
    const zero__s3_param *p = &s->params[idx];
    return p->info->numel ? (char *)s->shard + (size_t)p->part_lo * s->esize : s->shard;
}

zero_status zero__s3_gather_setup(zero__s3 *s) {
    zero_kit_gather_spec spec;
    zero_kit_gather_spec_from_config(s->svc, s->dtype, s->poison, &spec);
    spec.who = "stage3";
    spec.comm = s->gcomm;
    /* Batch one call's fetches into one launch -- unless expert groups put
     * some of them on other communicators: NCCL's group is the thread's,
     * and a collective issued on a communicator outside the open group would
     * record its completion event before the group's end launched it. */
    spec.group_comm = s->nxcomms ? NULL : s->gcomm;
    spec.gathers_world = s->nranks > 1;
    /* The gather budget never exceeds what partitioning the parameters
     * saves: stage 2 holds flat model-dtype elements, stage 3 part of them
     * plus its gather buffers, with the same buckets and partitions
     * otherwise.  So live + cached + persistent + prefetched gather bytes <=
     * (flat - part) * esize keeps stage 3 at or under stage 2 whenever the
     * host holds no more at once than fits (a demand gather beyond it goes
     * ahead and warns once).  World 1 needs no gather memory at all (alias).
     * (offload_param: the device holds no shard at all, so everything
     * gathered is within what stage 2 holds.) */
    spec.cap_bytes = (s->L->flat_numel - (s->off_param ? 0 : s->L->part_numel)) * (uint64_t)s->esize;
    spec.ops.fetch = fetch;
    spec.ops.after_issue = after_issue;
    spec.ops.alias = alias;
    spec.ctx = s;
    return zero_kit_gather_create(s->svc, &spec, &s->gather);
}

zero_status zero__s3_gather(void *state, zero_param_info *const *params, size_t n, void **ptrs) {
    zero__s3 *s = state;
    if (!n) return ZERO_OK;
    if ((!s->shard && !s->off_param_nvme && s->L->part_numel) || !s->gather)
        return s->svc->error(s->c, ZERO_ERR_STATE, "stage3: zero_gather before the model state exists");
    return zero_kit_gather_get(s->gather, params, n, ptrs);
}

zero_status zero__s3_release(void *state, zero_param_info *const *params, size_t n) {
    zero__s3 *s = state;
    return n ? zero_kit_gather_release(s->gather, params, n) : ZERO_OK;
}

zero_status zero__s3_set_phase(void *state, const char *phase) {
    zero__s3 *s = state;
    if (!s->gather) return s->svc->error(s->c, ZERO_ERR_STATE, "zero_set_phase before zero_params_done");
    return zero_kit_gather_set_phase(s->gather, phase);
}

/* offload_param nvme reads whole params' pieces through its window: slices
 * there are served from the whole param's gather (the core's fallback,
 * done here since the table entry exists). */
static zero_status whole_of(zero__s3 *s, const zero_slice_ref *refs, size_t n, zero_param_info ***out) {
    *out = malloc(n * sizeof **out);
    if (!*out) return s->svc->error(s->c, ZERO_ERR_OUT_OF_MEMORY, "stage3: out of memory");
    for (size_t i = 0; i < n; i++) (*out)[i] = refs[i].param;
    return ZERO_OK;
}

zero_status zero__s3_gather_slices(void *state, const zero_slice_ref *refs, size_t n, void **ptrs) {
    zero__s3 *s = state;
    if (!n) return ZERO_OK;
    if ((!s->shard && !s->off_param_nvme && s->L->part_numel) || !s->gather)
        return s->svc->error(s->c, ZERO_ERR_STATE, "stage3: zero_gather_slices before the model state exists");
    if (!s->off_param_nvme) return zero_kit_gather_get_slices(s->gather, refs, n, ptrs);
    zero_param_info **whole;
    zero_status st = whole_of(s, refs, n, &whole);
    if (st == ZERO_OK) st = zero_kit_gather_get(s->gather, whole, n, ptrs);
    for (size_t i = 0; st == ZERO_OK && i < n; i++)
        ptrs[i] = (char *)ptrs[i] + (size_t)refs[i].layer * (refs[i].param->numel / refs[i].layers) * s->esize;
    free(whole);
    return st;
}

zero_status zero__s3_release_slices(void *state, const zero_slice_ref *refs, size_t n) {
    zero__s3 *s = state;
    if (!n) return ZERO_OK;
    if (!s->off_param_nvme) return zero_kit_gather_release_slices(s->gather, refs, n);
    zero_param_info **whole;
    zero_status st = whole_of(s, refs, n, &whole);
    if (st == ZERO_OK) st = zero_kit_gather_release(s->gather, whole, n);
    free(whole);
    return st;
}

void zero__s3_gather_free(zero__s3 *s) {
    for (uint32_t k = 0; k < s->nslices; k++) free(s->slices[k].counts);
    free(s->slices);
    s->slices = NULL;
    s->nslices = 0;
}
