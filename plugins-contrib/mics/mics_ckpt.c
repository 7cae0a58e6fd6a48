/* mics: checkpoints, which reshard (ZERO_PLUGIN_CAP_RESHARD), and
 * write_params (at the end).
 *
 * Every rank writes its shard -- the R world shares of its replication
 * group -- through the core's ckpt_shard (zero_kit_shard_ckpt): the
 * manifest records which flat ranges each blob holds, so a load at
 * another world size, or by stage 1/2/3 (or stage 3 into MiCS), reads
 * each element from whichever saver's file holds it.  The R replicas of a
 * shard write equal blobs; any of them serves a read.  Besides: the
 * 16-bit shard ("mics.params") and the window's world-share gradient
 * accumulator ("mics.acc"), read only by a native load (a resharding load
 * is at a boundary: the shard is the master rounded, the accumulator
 * zero), and "mics.shape" (the shard size S).
 *
 * The one case the core calls native but is not: the same world size with
 * another mics_shard_size.  Then the saver's shards are laid out for S_old
 * while this run packs S shares; every rank still holds its own world
 * share in the old shard (rank r is share r, block r / S_old of shard
 * r mod S_old), so the load reads the old shard into scratch and
 * all-gathers the own shares over the new replication group, as the
 * boundary step does with gradients.  Engine step thread (save / load /
 * write_params). */
#include <stdlib.h>
#include <string.h>

#include "mics.h"

#define WHO "mics"

static zero_kit_shard_ckpt_spec spec_of(const mics *s) {
    zero_kit_shard_ckpt_spec sc;
    memset(&sc, 0, sizeof sc);
    sc.ranges = s->ranges;
    sc.nranges = s->nranges;
    sc.dtype = s->dtype;
    sc.params = s->pshard;
    sc.master = s->master;
    sc.state = s->state;
    sc.nstate = s->nstate;
    sc.numel = s->shard_numel;
    sc.acc = s->acc;
    sc.acc_bytes = (size_t)s->part * s->gesize;
    return sc;
}

/* Block k of a shard packed for shard size S_: the world share of rank
 * index + k*S_; ranges of every block, part_lo in packed numbering. */
static zero_owned_range *packed_ranges(const mics *s, int S_, int index, uint32_t *n_out) {
    const zero_services *svc = s->svc;
    const zero_layout *L = svc->layout(s->c);
    const uint32_t ng = L->ngroups ? L->ngroups : 1;
    const int R_ = s->nranks / S_;
    zero_owned_range *r = calloc((size_t)R_ * ng, sizeof *r);
    uint32_t n = 0;
    if (!r) return NULL;
    for (int k = 0; k < R_ && L->flat_numel; k++) {
        const uint32_t got = svc->owned_ranges(s->c, (uint32_t)(index + k * S_), 0, L->flat_numel, r + n, ng);
        for (uint32_t q = 0; q < got; q++) r[n + q].part_lo += (uint64_t)k * s->part;
        n += got;
    }
    *n_out = n;
    return r;
}

/* This rank's world share of `old` (packed for S_old) into block
 * rank / S of `cur`, then all-gathered over the replication group: the
 * shard packed for S. */
static zero_status regather(mics *s, const void *old, int S_old, void *cur, zero_dtype dt) {
    const zero_services *svc = s->svc;
    const size_t es = zero_kit_dtype_size(dt), bytes = (size_t)s->part * es;
    char *mine = (char *)cur + (size_t)(s->rank / s->S) * bytes;
    svc->mem_copy(s->c, mine, (const char *)old + (size_t)(s->rank / S_old) * bytes, bytes);
    if (s->R == 1) return ZERO_OK;
    size_t *counts = malloc((size_t)s->R * sizeof *counts);
    if (!counts) return svc->error(s->c, ZERO_ERR_OUT_OF_MEMORY, WHO ": out of memory");
    for (int k = 0; k < s->R; k++) counts[k] = (size_t)s->part;
    zero_comm_req *req = NULL;
    zero_status st = svc->iallgatherv(s->repl_comm, mine, cur, counts, dt, &req);
    if (st == ZERO_OK) st = svc->wait(req);
    free(counts);
    return st;
}

/* Same world size, the saver's shard size S_old != S (see the top). */
static zero_status load_other_shard_size(mics *s, const char *dir, int S_old) {
    const zero_services *svc = s->svc;
    svc->log(s->c, ZERO_LOG_INFO, WHO ": checkpoint %s was saved with mics_shard_size %d, this run uses %d: "
             "re-packing the shards", dir, S_old, s->S);
    const uint64_t old_numel = (uint64_t)(s->nranks / S_old) * s->part;
    const int sep = (void *)s->master != s->pshard;
    zero_kit_shard_ckpt_spec sc = spec_of(s);
    float *st_old[4] = {NULL, NULL, NULL, NULL};
    sc.master = zero_kit_alloc_n(svc, ZERO_TIER_DEVICE, ZERO_MEM_OTHER, old_numel, sizeof(float));
    sc.params = sep ? zero_kit_alloc_n(svc, ZERO_TIER_DEVICE, ZERO_MEM_OTHER, old_numel, s->esize) : sc.master;
    int ok = sc.master && sc.params;
    for (uint32_t k = 0; ok && k < s->nstate; k++)
        ok = (st_old[k] = zero_kit_alloc_n(svc, ZERO_TIER_DEVICE, ZERO_MEM_OTHER, old_numel, sizeof(float))) != NULL;
    sc.state = st_old;
    sc.numel = old_numel;
    sc.ranges = packed_ranges(s, S_old, s->rank % S_old, &sc.nranges);
    zero_status st = ok && sc.ranges ? ZERO_OK : svc->error(s->c, ZERO_ERR_OUT_OF_MEMORY, WHO ": out of memory");
    int resharded = 0;
    /* the old shard and the accumulator (a world share: the same at any S) */
    if (st == ZERO_OK) st = zero_kit_shard_ckpt(svc, dir, WHO, &sc, 0, &resharded);
    /* every rank must reach the all-gathers: agree on the reads first */
    st = zero_kit_blobs_agree(svc, NULL, st, dir, WHO);
    if (st == ZERO_OK) st = regather(s, sc.master, S_old, s->master, ZERO_DTYPE_F32);
    if (st == ZERO_OK && sep) st = regather(s, sc.params, S_old, s->pshard, s->dtype);
    for (uint32_t k = 0; st == ZERO_OK && k < s->nstate; k++)
        st = regather(s, st_old[k], S_old, s->state[k], ZERO_DTYPE_F32);
    free((void *)sc.ranges);
    zero_kit_shard_free(svc, st_old, sc.master, sc.params);
    return st;
}

zero_status mics_save(void *state, const char *dir) {
    mics *s = state;
    int32_t shape = s->S, resharded = 0;
    zero_kit_shard_ckpt_spec sc = spec_of(s);
    zero_status st = zero_kit_shard_ckpt(s->svc, dir, WHO, &sc, 1, &resharded);
    zero_kit_blob b = {"shape", &shape, sizeof shape};
    return st == ZERO_OK ? zero_kit_blobs_io(s->svc, dir, WHO, &b, 1, 1) : st;
}

zero_status mics_load(void *state, const char *dir) {
    mics *s = state;
    const zero_services *svc = s->svc;
    zero_status st = zero_kit_gather_drop_all(s->gather); /* gathered values are about to be stale */
    int32_t shape = s->S;
    int resharded = 0;
    if (st == ZERO_OK && !svc->ckpt_reshard(s->c)) { /* same world size: which shard size wrote it? */
        zero_kit_blob b = {"shape", &shape, sizeof shape};
        st = zero_kit_blobs_io(svc, dir, WHO, &b, 1, 0);
        if (st == ZERO_OK && (shape < 1 || shape > s->nranks || s->nranks % shape != 0))
            st = svc->error(s->c, ZERO_ERR_IO, WHO ": checkpoint %s: shard size %d does not divide the world size %d",
                            dir, (int)shape, s->nranks);
    }
    st = zero_kit_blobs_agree(svc, NULL, st, dir, WHO);
    if (st == ZERO_OK && shape != s->S) {
        st = load_other_shard_size(s, dir, (int)shape);
    } else if (st == ZERO_OK) {
        zero_kit_shard_ckpt_spec sc = spec_of(s);
        st = zero_kit_blobs_agree(svc, NULL, zero_kit_shard_ckpt(svc, dir, WHO, &sc, 0, &resharded), dir, WHO);
    }
    zero_kit_gather_mark_stale(s->gather);
    return st;
}

/* write_params (plugin ABI 1.8, zero_params_write): the values into this
 * rank's shard -- every block of its replication group that holds a piece
 * of the param, so all R replicas of a share are written alike, since every
 * rank was handed the same values -- and widened into the fp32 master of a
 * 16-bit model (zero_kit_shard_write).  Gathered copies are dropped first
 * and persistent ones refetched at their next use, as after a load; the
 * optimizer states and the gradient accumulator are not touched. */
zero_status mics_write_params(void *state, zero_param_info *const *params, size_t n, const void *const *values) {
    mics *s = state;
    zero_status st = zero_kit_gather_drop_all(s->gather); /* gathered values are about to be stale */
    zero_kit_shard_ckpt_spec sc = spec_of(s);
    if (st == ZERO_OK) st = zero_kit_shard_write(s->svc, &sc, params, n, values);
    zero_kit_gather_mark_stale(s->gather);
    return st;
}
