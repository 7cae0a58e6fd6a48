/* Ranks start from one model: the initial values agreement at
 * zero_params_done (1.7.3).
 *
 * Data parallelism averages gradients of one model.  A host that seeds each
 * rank differently before building its model (torch.manual_seed(rank), a
 * common PyTorch habit that DistributedDataParallel hides by broadcasting
 * rank 0's module at construction) registered different initial values:
 * stage 0 then trained one diverged model per rank for ever, and the
 * partitioning stages a patchwork of every rank's initial partition --
 * silently.  Now every rank hashes each parameter's initial bytes, one
 * all-reduce finds the parameters whose hashes differ (the same verdict on
 * every rank), and for those every rank takes rank 0's values (broadcast
 * into a host buffer that replaces init_data for the plugin's params_done),
 * as DistributedDataParallel and DeepSpeed do; rank 0 logs a warning that
 * names them.  Parameters of an expert group are different experts on
 * different expert-data-parallel groups: they agree inside their
 * expert-data-parallel group (its rank 0's values), not world-wide.
 *
 * Cost when the values agree (the usual case): one read of every initial
 * value (device values copied to the host in 16 MiB pieces) and one
 * all-reduce of 16 bytes per parameter, at zero_params_done only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "device.h"
#include "log.h"
#include "params.h"

#define PIECE ((size_t)16 << 20) /* device values reach the host in pieces this large */

/* 64-bit hash of n bytes: 8-byte words through a multiply-xorshift mix,
 * four independent lanes (a multiply's latency would otherwise bound it
 * well below the memory's speed), then the tail.  Not cryptographic: it
 * tells different initial values apart, and hashing must not cost much
 * more than reading them. */

uint64_t zero__params_hash_bytes(uint64_t h, const unsigned char *b, size_t n) {
    uint64_t l[4] = {h, h ^ 0x9e3779b97f4a7c15ULL, h ^ 0xc2b2ae3d27d4eb4fULL, h ^ 0x165667b19e3779f9ULL};
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        uint64_t w[4];
        memcpy(w, b + i, 32);
        for (int k = 0; k < 4; k++) l[k] = zero__hash_mix(l[k], w[k]);
    }
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, b + i, 8);
        l[0] = zero__hash_mix(l[0], w);
    }
    uint64_t tail = 0;
    memcpy(&tail, b + i, n - i);
    h = zero__hash_mix(l[0], tail ^ ((uint64_t)(n - i) << 56));
    for (int k = 1; k < 4; k++) h = zero__hash_mix(h, l[k]);
    return h;
}

static size_t param_bytes(const struct zero_param *p) {
    return (size_t)p->info.numel * zero__dtype_size(p->info.dtype);
}

/* The hash of p's initial values; device values go through `bounce`
 * (PIECE bytes).  NULL init_data (zero-filled by the plugin) hashes as its
 * length alone. */
static zero_status hash_param(struct zero_engine *e, const struct zero_param *p, unsigned char *bounce,
                              uint64_t *out) {
    const unsigned char *src = p->info.init_data;
    size_t n = param_bytes(p);
    uint64_t h = zero__hash_mix(0x243f6a8885a308d3ULL, (uint64_t)n);
    if (!src) {
        *out = h;
        return ZERO_OK;
    }
    if (!zero__dev_is_device(e->dev, src)) {
        *out = zero__params_hash_bytes(h, src, n);
        return ZERO_OK;
    }
    for (size_t off = 0; off < n; off += PIECE) {
        size_t k = n - off < PIECE ? n - off : PIECE;
        zero_status s = zero__dev_copy(e->dev, bounce, src + off, k);
        if (s != ZERO_OK)
            return zero__error(e, s, "zero_params_done: reading the initial values of '%s' from the device: %s",
                               p->name, e->dev->ops->error(e->dev));
        h = zero__params_hash_bytes(h, bounce, k);
    }
    *out = h;
    return ZERO_OK;
}

/* The root's (rank 0 of comm) initial values of p into buf (param_bytes(p)
 * bytes) on every rank of comm. */
static zero_status take_rank0(struct zero_engine *e, zero_comm *comm, const struct zero_param *p, unsigned char *buf) {
    size_t n = param_bytes(p);
    zero_status s = ZERO_OK;
    if (zero__comm_rank(comm) == 0) {
        if (!p->info.init_data)
            memset(buf, 0, n);
        else
            s = zero__dev_copy(e->dev, buf, p->info.init_data, n);
        if (s != ZERO_OK)
            s = zero__error(e, s, "zero_params_done: reading the initial values of '%s': %s", p->name,
                            e->dev ? e->dev->ops->error(e->dev) : "copy failed");
    }
    /* Every rank enters the broadcast even if rank 0's copy failed (it then
     * sends what it has and fails below): no rank is left waiting. */
    for (size_t off = 0; off < n; off += PIECE) {
        size_t k = n - off < PIECE ? n - off : PIECE;
        zero_status b = zero__broadcast(comm, buf + off, k, ZERO_DTYPE_U8, 0);
        if (b != ZERO_OK && s == ZERO_OK)
            s = zero__error(e, b, "zero_params_done: broadcasting rank 0's initial values of '%s' failed", p->name);
    }
    return s;
}

/* 1 on every rank of comm if `failed` is on any (one MAX all-reduce);
 * *s becomes `what` (or the all-reduce's status) where it was OK. */
static int any_failed(struct zero_engine *e, zero_comm *comm, zero_status *s, const char *what) {
    uint64_t failed = *s != ZERO_OK;
    zero_status r = zero__allreduce(comm, &failed, 1, ZERO_DTYPE_U64, ZERO_OP_MAX);
    if (*s == ZERO_OK && (r != ZERO_OK || failed)) *s = zero__error(e, r != ZERO_OK ? r : ZERO_ERR_COMM, "%s", what);
    return *s != ZERO_OK;
}

/* The agreement over `comm` for the params i with pc[i] == comm (bufs[i]
 * receives what replaced init_data).  Every rank of comm calls it with the
 * same params and returns the same verdict. */
static zero_status agree_on(struct zero_engine *e, zero_comm *comm, zero_comm *const *pc, void **bufs,
                            const char *where) {
    uint32_t np = e->nparams;
    uint64_t *h = calloc((size_t)np * 2 + 1, sizeof *h);
    unsigned char *bounce = e->dev ? malloc(PIECE) : NULL;
    if (!h || (e->dev && !bounce)) {
        free(h);
        free(bounce);
        return zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "out of memory in the initial values check");
    }
    /* [hash..., ~hash..., failed] under MAX: the first half is the largest
     * hash, the second the complement of the smallest (equal iff every rank
     * agrees), the last says whether a rank could not read its values (then
     * every rank fails).  Params of other communicators: 0 and ~0 on every
     * rank, never flagged. */
    zero_status s = ZERO_OK;
    for (uint32_t i = 0; i < np; i++) {
        uint64_t v = 0;
        if (pc[i] == comm && s == ZERO_OK) s = hash_param(e, e->params[i], bounce, &v);
        h[i] = v;
        h[np + i] = ~v;
    }
    free(bounce);
    h[(size_t)np * 2] = s != ZERO_OK;
    /* a rank whose read failed still joins the all-reduce, so none waits */
    zero_status r = zero__allreduce(comm, h, (size_t)np * 2 + 1, ZERO_DTYPE_U64, ZERO_OP_MAX);
    if (s == ZERO_OK && r != ZERO_OK) s = zero__error(e, r, "zero_params_done: the initial values check failed");
    if (s == ZERO_OK && h[(size_t)np * 2])
        s = zero__error(e, ZERO_ERR_DEVICE, "zero_params_done: another rank could not read its initial values");
    uint32_t ndiff = 0, first = 0, nmine = 0;
    for (uint32_t i = 0; i < np; i++) {
        nmine += pc[i] == comm;
        if (s == ZERO_OK && h[i] != ~h[np + i] && !ndiff++) first = i;
    }
    if (s != ZERO_OK || !ndiff) {
        free(h);
        return s;
    }
    /* The host buffers first, agreed: a rank out of host memory fails every
     * rank, each with a message, before any broadcast is entered.  (The
     * caller frees bufs on failure.) */
    for (uint32_t i = 0; i < np && s == ZERO_OK; i++) {
        size_t n = param_bytes(e->params[i]);
        if (h[i] != ~h[np + i] && n && !(bufs[i] = malloc(n)))
            s = zero__error(e, ZERO_ERR_OUT_OF_MEMORY,
                            "zero_params_done: no host memory (%zu bytes) to take rank 0's initial values of '%s'",
                            n, e->params[i]->name);
    }
    if (any_failed(e, comm, &s, "zero_params_done: another rank has no host memory to take rank 0's initial values")) {
        free(h);
        return s;
    }
    /* Every rank walks the same differing params and enters each broadcast;
     * what failed locally is agreed at the end. */
    for (uint32_t i = 0; i < np; i++) {
        if (h[i] == ~h[np + i] || !bufs[i]) continue;
        zero_status a = take_rank0(e, comm, e->params[i], bufs[i]);
        if (a == ZERO_OK) e->params[i]->info.init_data = bufs[i];
        if (s == ZERO_OK) s = a;
    }
    free(h);
    any_failed(e, comm, &s, "zero_params_done: another rank could not take rank 0's initial values");
    if (s == ZERO_OK && zero__comm_rank(comm) == 0)
        zero__log(e, ZERO_LOG_WARN,
                  "ranks registered different initial values for %u of %u parameters%s (first: '%s'): every rank "
                  "now starts from rank 0's values, as DistributedDataParallel and DeepSpeed broadcast rank 0's "
                  "model; to start from one model without this, seed every rank the same before building it",
                  ndiff, nmine, where, e->params[first]->name);
    return s;
}

zero_status zero__params_values_agree(struct zero_engine *e, void ***adopted) {
    *adopted = NULL;
    uint32_t np = e->nparams;
    if (e->world_size <= 1 || !np) return ZERO_OK;
    zero_comm **pc = calloc(np, sizeof *pc);
    void **bufs = calloc(np, sizeof *bufs);
    if (!pc || !bufs) {
        free(pc);
        free(bufs);
        return zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "out of memory in the initial values check");
    }
    zero_status s = zero__experts_param_comms(e, pc);
    for (uint32_t i = 0; i < np; i++)
        if (!pc[i]) pc[i] = e->world;
    /* the world first, then each expert group's communicator, in the order
     * of the params (the same on every rank: the group table agreed); a
     * group's params count as the world's once it is done, so the walk
     * meets each group once */
    if (s == ZERO_OK) s = agree_on(e, e->world, pc, bufs, "");
    for (uint32_t i = 0; s == ZERO_OK && i < np; i++) {
        zero_comm *c = pc[i];
        if (c == e->world) continue;
        char where[96];
        snprintf(where, sizeof where, " of expert group %d (inside its expert-data-parallel group)",
                 (int)e->params[i]->info.group);
        if (zero__comm_size(c) > 1) s = agree_on(e, c, pc, bufs, where);
        for (uint32_t j = i; j < np; j++)
            if (pc[j] == c) pc[j] = e->world;
    }
    free(pc);
    if (s != ZERO_OK) {
        zero__params_values_free(e, bufs);
        return s;
    }
    *adopted = bufs;
    return ZERO_OK;
}

void zero__params_values_free(struct zero_engine *e, void **adopted) {
    if (!adopted) return;
    for (uint32_t i = 0; i < e->nparams; i++) free(adopted[i]);
    free(adopted);
}
