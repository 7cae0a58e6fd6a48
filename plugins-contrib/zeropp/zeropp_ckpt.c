/* zeropp: checkpoints, which reshard (ZERO_PLUGIN_CAP_RESHARD).
 *
 * The share is stage 3's (this rank's world share of the layout), written
 * through the core's ckpt_shard (zero_kit_shard_ckpt): a load at another
 * world size, or by stage 1/2/3 or MiCS (and a stage-3 checkpoint into
 * ZeRO++), reads each element from whichever saver's file holds it.
 * Besides, read only by a native load (same world size and layout):
 *   - "zeropp.params" (16-bit share) and "zeropp.acc" (the window's
 *     gradient accumulator), the share's own state between boundaries;
 *   - "zeropp.ef" (qgZ error feedback on): this rank's residuals, what the
 *     quantization of its micro-step gradients lost, flat fp32.
 * On a resharding load (always at a boundary) the 16-bit share is the
 * master rounded and the accumulator zero, as after every step; the error
 * feedback residuals are reset to zero with a logged note: each belongs
 * to the rank that sent it under the saver's layout, and only their sum
 * over the ranks has a meaning, which no per-rank split preserves.  Their
 * loss is at most one micro-step's quantization error (the bound in
 * README.md), the same as the first step of a run.  hpZ's secondary
 * partition is derived state: it is never saved, and the first gather of
 * each parameter after a load spans the world again and rebuilds it
 * (zpp_params_changed).  Engine step thread (save / load). */
#include <string.h>

#include "zeropp.h"

#define WHO "zeropp"

static zero_status ckpt(zpp *s, const char *dir, int write) {
    const zero_services *svc = s->svc;
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
    int resharded = 0;
    zero_status st = zero_kit_shard_ckpt(svc, dir, WHO, &sc, write, &resharded);
    if (st != ZERO_OK || !s->ef) return st;
    const size_t ef_bytes = (size_t)(svc->layout(s->c)->flat_numel ? svc->layout(s->c)->flat_numel : 1) * 4;
    if (resharded) {
        if (s->rank == 0)
            svc->log(s->c, ZERO_LOG_INFO,
                     WHO ": checkpoint %s is resharded: qgZ error feedback residuals start from zero (they are "
                         "per-rank, under the saver's layout)",
                     dir);
        return svc->mem_set(s->c, s->ef, 0, ef_bytes);
    }
    zero_kit_blob b = {"ef", s->ef, ef_bytes};
    return zero_kit_blobs_io(svc, dir, WHO, &b, 1, write);
}

zero_status zpp_save(void *state, const char *dir) { return ckpt(state, dir, 1); }

zero_status zpp_load(void *state, const char *dir) {
    zpp *s = state;
    zero_status st = zero_kit_gather_drop_all(s->gather); /* gathered values are about to be stale */
    st = zero_kit_blobs_agree(s->svc, NULL, st == ZERO_OK ? ckpt(s, dir, 0) : st, dir, WHO);
    zpp_params_changed(s); /* gathered tensors and secondary chunks: refetched over the world */
    return st;
}
