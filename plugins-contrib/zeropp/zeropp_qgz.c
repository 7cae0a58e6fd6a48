/* zeropp: qgZ's gradient exchange -- hierarchical as in the ZeRO++ paper
 * (Wang et al. 2023, section 4.3), or one flat quantized all-to-all.
 *
 * Hierarchical, per layout group, with k ranks per node and M nodes (N = kM):
 *  1. the flat gradient's N world shares are reordered in place so that
 *     node-local rank l's slice is the M shares owned by the ranks that
 *     have local rank l (one per node, in cross-communicator order);
 *  2. a full-precision reduce-scatter over the node communicator: local
 *     rank l holds the node's sum of its slice (M shares, fp32; the ring
 *     sums in a fixed order);
 *  3. a quantized all-to-all over the cross-node communicator (the M ranks
 *     of local rank l, one per node): each node's partial sum of share j
 *     goes, quantized, to the owner of j, which dequantizes and sums the M
 *     partial sums in cross-rank order (services reduce_scatter_quantized,
 *     error feedback on these partial sums).
 * The result lands in this rank's world share, exactly where the flat path
 * and stage 3 put it, so the optimizer step is unchanged.  With one node
 * (M = 1) step 3 is empty: the full-precision node reduce is the whole
 * reduction, exact.  With one rank per node (k = 1) step 2 is empty and
 * this is the flat exchange.  Unequal nodes fall back to the flat exchange
 * (logged): the cross-node communicators would differ in size.
 *
 * Engine step thread only (setup at params_done, reduce in zero_step). */
#include <stdlib.h>
#include <string.h>

#include "zeropp.h"

#define WHO "zeropp"

/* Where every world rank sits: its node-local rank and its rank in its
 * cross-node communicator, gathered over the world (two I64 per rank);
 * from that, perm[l*M + x] = the world rank with local rank l and cross
 * rank x.  Fails (ZERO_ERR_INTERNAL) if the table is not a k x M grid. */
static zero_status build_perm(zpp *s) {
    const zero_services *svc = s->svc;
    const int N = s->nranks, k = s->qk, M = s->qm;
    int64_t *all = malloc((size_t)N * 2 * sizeof *all);
    size_t *cnt = malloc((size_t)N * sizeof *cnt);
    s->qperm = malloc((size_t)N * sizeof *s->qperm);
    if (!all || !cnt || !s->qperm) {
        free(all);
        free(cnt);
        return svc->error(s->c, ZERO_ERR_OUT_OF_MEMORY, WHO ": out of memory");
    }
    for (int r = 0; r < N; r++) cnt[r] = 2;
    all[2 * s->rank] = svc->comm_rank(s->node);
    all[2 * s->rank + 1] = svc->comm_rank(s->xcomm);
    zero_comm_req *req = NULL;
    zero_status st = svc->iallgatherv(svc->comm_world(s->c), all + 2 * s->rank, all, cnt, ZERO_DTYPE_I64, &req);
    if (st == ZERO_OK) st = svc->wait(req);
    for (int r = 0; r < N; r++) s->qperm[r] = -1;
    for (int r = 0; r < N && st == ZERO_OK; r++) {
        const int64_t l = all[2 * r], x = all[2 * r + 1];
        if (l < 0 || l >= k || x < 0 || x >= M || s->qperm[l * M + x] >= 0)
            st = svc->error(s->c, ZERO_ERR_INTERNAL, WHO ": qgZ: rank %d has node rank %lld, cross rank %lld: "
                                                    "not a grid of %d nodes of %d ranks", r, (long long)l,
                            (long long)x, M, k);
        else
            s->qperm[l * M + x] = (int)r;
    }
    free(all);
    free(cnt);
    return st;
}

zero_status zpp_qgz_setup(zpp *s, uint64_t maxpart) {
    const zero_services *svc = s->svc;
    zero_comm *w = svc->comm_world(s->c);
    zero_status st = ZERO_OK;
    if (!s->node && (st = svc->comm_split_node(w, &s->node)) != ZERO_OK) {
        /* a backend that cannot tell nodes apart (a host communicator
         * without ZERO_RANKS_PER_NODE) refuses alike on every rank, before
         * any collective: keep the flat exchange, which needs no nodes */
        if (st != ZERO_ERR_UNSUPPORTED) return st;
        svc->log(s->c, ZERO_LOG_WARN,
                 WHO ": qgZ: this communicator cannot find node boundaries (set ZERO_RANKS_PER_NODE for the "
                     "hierarchical exchange): using the flat all-to-all over the world");
        s->qg_hier = 0;
    }
    s->qk = s->node ? svc->comm_size(s->node) : 1; /* unknown nodes: count every other rank as remote */
    /* every node the same size?  (min and max over the world) */
    int64_t mm[2] = {s->qk, -(int64_t)s->qk};
    if ((st = svc->allreduce(w, mm, 2, ZERO_DTYPE_I64, ZERO_OP_MIN)) != ZERO_OK) return st;
    const int equal = mm[0] == -mm[1];
    if (s->qg_hier && !equal) {
        svc->log(s->c, ZERO_LOG_WARN,
                 WHO ": qgZ: nodes of %lld to %lld ranks; the hierarchical exchange needs equal nodes: "
                     "using the flat all-to-all over the world",
                 (long long)mm[0], (long long)-mm[1]);
        s->qg_hier = 0;
    }
    /* the cross-node communicator: the ranks of the same node-local rank
     * (hierarchical), or a private duplicate of the world (flat) -- either
     * way gradients alone cross it, so its counters are the exchange's */
    const int color = s->qg_hier ? svc->comm_rank(s->node) : 0;
    if ((st = svc->comm_split(w, color, s->rank, &s->xcomm)) != ZERO_OK) return st;
    s->qm = equal ? s->nranks / s->qk : 0; /* 0: nodes of unequal sizes (flat exchange) */
    if (s->qg_hier) {
        if ((st = build_perm(s)) != ZERO_OK) return st;
    }
    if (s->qg_hier && s->qk > 1) { /* k = 1: no node reduce, no slice */
        s->gnode = zero_kit_alloc_n(svc, ZERO_TIER_DEVICE, ZERO_MEM_BUCKETS, (size_t)(maxpart ? maxpart : 1) * s->qm,
                                    sizeof(float));
        if (!s->gnode) return svc->error(s->c, ZERO_ERR_OUT_OF_MEMORY, WHO ": no memory for the qgZ node slice");
    }
    return ZERO_OK;
}

void zpp_qgz_free(zpp *s) {
    s->svc->mem_free(s->c, s->gnode);
    s->gnode = NULL;
    free(s->qperm);
    s->qperm = NULL;
    if (s->xcomm) s->svc->comm_free(s->xcomm);
    s->xcomm = NULL;
}

/* Reorder the N blocks of b (part elements each) in place so that block i
 * becomes the old block perm[i]: cycle by cycle, through one temporary
 * block (tmp).  seen: N bytes of scratch. */
static void permute_blocks(const zero_services *svc, zero_core *c, float *b, size_t part, const int *perm, int N,
                           float *tmp, unsigned char *seen) {
    const size_t bytes = part * sizeof(float);
    memset(seen, 0, (size_t)N);
    for (int i = 0; i < N; i++) {
        if (seen[i] || perm[i] == i) continue;
        svc->mem_copy(c, tmp, b + (size_t)i * part, bytes);
        int j = i;
        for (;;) {
            seen[j] = 1;
            const int from = perm[j];
            if (from == i) {
                svc->mem_copy(c, b + (size_t)j * part, tmp, bytes);
                break;
            }
            svc->mem_copy(c, b + (size_t)j * part, b + (size_t)from * part, bytes);
            j = from;
        }
    }
}

/* One group, hierarchical: g (the group's flat gradient, clobbered) into
 * out (this rank's share, part elements). */
static zero_status reduce_group_hier(zpp *s, const zero_layout_group *lg, zero_quant_spec *q, size_t *counts,
                                     unsigned char *seen) {
    const zero_services *svc = s->svc;
    const size_t part = (size_t)lg->part_numel;
    float *g = s->gflat + lg->flat_begin;
    zero_status st = ZERO_OK;
    const float *slice = g; /* k = 1: the node reduce is empty */
    if (s->qk > 1) {
        permute_blocks(svc, s->c, g, part, s->qperm, s->nranks, s->gpart, seen);
        for (int l = 0; l < s->qk; l++) counts[l] = part * (size_t)s->qm;
        zero_comm_req *req = NULL;
        st = svc->ireduce_scatterv(s->node, g, s->gnode, counts, ZERO_DTYPE_F32, &req);
        if (st == ZERO_OK) st = svc->wait(req);
        slice = s->gnode;
    }
    if (st != ZERO_OK) return st;
    if (s->qm == 1) { /* one node: the exact node sum is the whole reduction */
        svc->add_into(s->c, (float *)s->acc + lg->part_offset, slice, ZERO_DTYPE_F32, part);
        return ZERO_OK;
    }
    for (int x = 0; x < s->qm; x++) counts[x] = part;
    q->error_feedback = s->ef ? s->ef + (size_t)s->qm * lg->part_offset : NULL;
    st = svc->reduce_scatter_quantized(s->xcomm, slice, s->gpart, counts, ZERO_DTYPE_F32, q);
    if (st == ZERO_OK) svc->add_into(s->c, (float *)s->acc + lg->part_offset, s->gpart, ZERO_DTYPE_F32, part);
    return st;
}

zero_status zpp_qgz_reduce(zpp *s) {
    const zero_services *svc = s->svc;
    const zero_layout *L = svc->layout(s->c);
    size_t *counts = malloc((size_t)s->nranks * sizeof *counts);
    unsigned char *seen = malloc((size_t)s->nranks);
    if (!counts || !seen) {
        free(counts);
        free(seen);
        return svc->error(s->c, ZERO_ERR_OUT_OF_MEMORY, WHO ": out of memory");
    }
    zero_quant_spec q = ZERO_QUANT_SPEC_INIT;
    q.bits = s->qg_bits;
    q.block = s->qg_block;
    zero_status st = ZERO_OK;
    for (uint32_t g = 0; g < L->ngroups && st == ZERO_OK; g++) {
        const zero_layout_group *lg = &L->groups[g];
        if (!lg->numel) continue;
        if (s->qg_hier) {
            st = reduce_group_hier(s, lg, &q, counts, seen);
            continue;
        }
        for (int r = 0; r < s->nranks; r++) counts[r] = (size_t)lg->part_numel;
        q.error_feedback = s->ef ? s->ef + lg->flat_begin : NULL;
        st = svc->reduce_scatter_quantized(s->xcomm, s->gflat + lg->flat_begin, s->gpart, counts, ZERO_DTYPE_F32,
                                           &q);
        if (st == ZERO_OK)
            svc->add_into(s->c, (float *)s->acc + lg->part_offset, s->gpart, ZERO_DTYPE_F32, (size_t)lg->part_numel);
    }
    free(counts);
    free(seen);
    s->qg_reductions++;
    zero_status z = svc->mem_set(s->c, s->gflat, 0, (size_t)L->flat_numel * 4);
    return st != ZERO_OK ? st : z;
}

size_t zpp_qgz_ef_numel(const zpp *s, uint64_t flat_numel, uint64_t part_numel) {
    /* hierarchical: the M partial sums this rank quantizes per group */
    return (size_t)(s->qg_hier ? (uint64_t)s->qm * part_numel : flat_numel);
}

void zpp_qgz_log(zpp *s) {
    if (!s->xcomm) return;
    zero_comm_stats n = ZERO_COMM_STATS_INIT, x = n;
    if (s->qg_hier && s->qk > 1) s->svc->comm_counters(s->node, &n);
    s->svc->comm_counters(s->xcomm, &x);
    /* Of the bytes this rank sends in the all-to-all (every block the same
     * size), those to ranks on other nodes: hierarchical, M-1 of its M
     * blocks; flat, the N-k blocks of ranks outside its node. */
    const uint64_t out = s->qg_hier ? x.bytes_reduced / (uint64_t)s->qm * (uint64_t)(s->qm - 1)
                                    : x.bytes_reduced / (uint64_t)s->nranks * (uint64_t)(s->nranks - s->qk);
    s->svc->log(s->c, ZERO_LOG_INFO,
                WHO ": rank %d qgZ %s gradient exchange, %d nodes of %d: %llu reductions; node %llu calls %llu bytes "
                    "(fp32); cross-node %llu calls %llu bytes (quantized), %llu of them to other nodes",
                s->rank, s->qg_hier ? "hierarchical" : "flat", s->qm, s->qk, (unsigned long long)s->qg_reductions,
                (unsigned long long)n.reduce_scatter_calls, (unsigned long long)n.bytes_reduced,
                (unsigned long long)x.reduce_scatter_calls, (unsigned long long)x.bytes_reduced,
                (unsigned long long)out);
}
