/* zeropp: checkpoints, which reshard (ZERO_PLUGIN_CAP_RESHARD), and
 * write_params (at the end).
 *
 * The share is stage 3's (this rank's world share of the layout), written
 * through the core's ckpt_shard (zero_kit_shard_ckpt): a load at another
 * world size, or by stage 1/2/3 or MiCS (and a stage-3 checkpoint into
 * ZeRO++), reads each element from whichever saver's file holds it.
 * Besides, read only by a native load (same world size and layout):
 *   - "zeropp.params" (16-bit share) and "zeropp.acc" (the window's
 *     gradient accumulator), the share's own state between boundaries;
 *   - "zeropp.ef" (qgZ error feedback on): this rank's residuals, what the
 *     quantization of its micro-step gradients lost: zpp_qgz_ef_numel
 *     fp32 elements, in the exchange's own layout (hierarchical: per
 *     layout group, the M node partial sums of this rank's node slice, in
 *     cross-rank order; flat: the whole flat gradient), and "zeropp.efgrid"
 *     (four int64: hierarchical, ranks per node k, nodes M, elements), the
 *     exchange they belong to.  A native load under another exchange (the
 *     same world in other nodes, or hierarchical switched) restarts them
 *     from zero with the note below, as a resharding load does.
 * On a resharding load (always at a boundary) the 16-bit share is the
 * master rounded and the accumulator zero, as after every step; the error
 * feedback residuals are reset to zero with a logged note: each belongs
 * to the rank that sent it under the saver's layout, and only their sum
 * over the ranks has a meaning, which no per-rank split preserves.  Their
 * loss is at most one micro-step's quantization error (the bound in
 * README.md), the same as the first step of a run.  hpZ's secondary
 * partition is derived state: it is never saved, and the first gather of
 * each parameter after a load spans the world again and rebuilds it
 * (zpp_params_changed).  Engine step thread (save / load / write_params). */
#include <string.h>

#include "zeropp.h"

#define WHO "zeropp"

/* The share as the kit's shard (checkpoints and write_params). */
static zero_kit_shard_ckpt_spec spec_of(const zpp *s) {
    zero_kit_shard_ckpt_spec sc;
    memset(&sc, 0, sizeof sc);
    sc.ranges = s->mine;
    sc.nranges = s->nmine;
    sc.dtype = s->dtype;
    sc.params = s->pshard;
    sc.master = s->master;
    sc.state = s->state;
    sc.nstate = s->nstate;
    sc.numel = s->part;
    sc.acc = s->acc;
    sc.acc_bytes = (size_t)s->part * s->gesize;
    return sc;
}

static zero_status ckpt(zpp *s, const char *dir, int write) {
    const zero_services *svc = s->svc;
    zero_kit_shard_ckpt_spec sc = spec_of(s);
    int resharded = 0;
    zero_status st = zero_kit_shard_ckpt(svc, dir, WHO, &sc, write, &resharded);
    if (st != ZERO_OK || !s->ef) return st;
    const zero_layout *L = svc->layout(s->c);
    const size_t efn = zpp_qgz_ef_numel(s, L->flat_numel, L->part_numel);
    const size_t ef_bytes = (efn ? efn : 1) * 4; /* as allocated (zpp_grads_setup) */
    int64_t grid[4] = {s->qg_hier, s->qk, s->qm, (int64_t)efn}, saved[4] = {0, 0, 0, 0};
    const char *why = resharded ? "is resharded" : NULL;
    if (!write && !why) {
        zero_kit_blob g = {"efgrid", saved, sizeof saved};
        if ((st = zero_kit_blobs_io(svc, dir, WHO, &g, 1, 0)) != ZERO_OK) return st;
        if (memcmp(saved, grid, sizeof grid) != 0) why = "was saved under another qgZ exchange (nodes or hierarchical)";
    }
    if (why) {
        if (s->rank == 0)
            svc->log(s->c, ZERO_LOG_INFO,
                     WHO ": checkpoint %s %s: qgZ error feedback residuals start from zero (they are per-rank, "
                         "under the saver's layout and nodes)",
                     dir, why);
        return svc->mem_set(s->c, s->ef, 0, ef_bytes);
    }
    zero_kit_blob b[2] = {{"ef", s->ef, ef_bytes}, {"efgrid", grid, sizeof grid}};
    return zero_kit_blobs_io(svc, dir, WHO, b, write ? 2 : 1, write);
}

zero_status zpp_save(void *state, const char *dir) { return ckpt(state, dir, 1); }

zero_status zpp_load(void *state, const char *dir) {
    zpp *s = state;
    zero_status st = zero_kit_gather_drop_all(s->gather); /* gathered values are about to be stale */
    st = zero_kit_blobs_agree(s->svc, NULL, st == ZERO_OK ? ckpt(s, dir, 0) : st, dir, WHO);
    zpp_params_changed(s); /* gathered tensors and secondary chunks: refetched over the world */
    return st;
}

/* write_params (plugin ABI 1.8, zero_params_write): the values into this
 * rank's world share and, for a 16-bit model, widened into its fp32 master
 * (zero_kit_shard_write).  Every copy derived from the share is refreshed
 * as after a load: gathered tensors are dropped (persistent ones refetched
 * at their next use) and the hpZ secondary chunks invalidated, so the next
 * gather of each param spans the world again (qwZ: quantized from the new
 * share, as after a step) and rebuilds them.  The optimizer states, the
 * gradient accumulator and qgZ's error feedback are not touched. */
zero_status zpp_write_params(void *state, zero_param_info *const *params, size_t n, const void *const *values) {
    zpp *s = state;
    zero_status st = zero_kit_gather_drop_all(s->gather); /* gathered values are about to be stale */
    zero_kit_shard_ckpt_spec sc = spec_of(s);
    if (st == ZERO_OK) st = zero_kit_shard_write(s->svc, &sc, params, n, values);
    zpp_params_changed(s); /* gathered tensors and secondary chunks: refetched over the world */
    return st;
}
