/* offload: sharded checkpoint (zero_save / zero_load).
 *
 * Each rank writes atomic blobs: its host fp32 master (the authority for
 * its shard of the weights) and its optimizer states, "offload.master" and
 * "offload.state<k>" (the core's ckpt_shard over the owned partition), and
 * the device gradient accumulator of the current window, "offload.grads"
 * (stage 1: the full flat local sum, reduced only at the boundary; stage 2:
 * the partition), so a save in the middle of an accumulation window resumes
 * exactly.  Load reads the shard, writes the master's values into the owned
 * device parameters and all-gathers them; the ranks agree on the read
 * status first (ckpt_agree), so a missing shard on one rank is an error
 * everywhere, never a hang. */
#include "offload.h"

static zero_status blobs(offload *s, const char *dir, int write) {
    const zero_services *svc = s->svc;
    zero_part_step ps = zero__of_part_step(s);
    zero_status st = svc->ckpt_shard(s->c, dir, "offload", &ps, NULL, write);
    /* ckpt_write/read stage a device buffer through host memory themselves */
    const size_t bytes = zero__of_dgrad_bytes(s);
    /* resharding: at a boundary, no gradient in flight; the saver's is not ours */
    if (st == ZERO_OK && !write && svc->ckpt_reshard(s->c))
        return svc->mem_set(s->c, s->dgrad, 0, bytes);
    if (st == ZERO_OK)
        st = write ? svc->ckpt_write(s->c, dir, "offload.grads", s->dgrad, bytes)
                   : svc->ckpt_read(s->c, dir, "offload.grads", s->dgrad, bytes);
    return st;
}

zero_status zero__of_save(void *state, const char *dir) { return blobs(state, dir, 1); }

zero_status zero__of_load(void *state, const char *dir) {
    offload *s = state;
    zero_status st = s->svc->ckpt_agree(s->c, s->world, blobs(s, dir, 0), dir, "offload");
    if (st != ZERO_OK) return st;
    zero__of_params_to_device(s); /* rounded from the master exactly as a step does */
    return s->svc->allgather_shares(s->c, s->world, s->params, s->dtype);
}
