/* offload: sharded checkpoint (zero_save / zero_load).
 *
 * Each rank writes atomic blobs (svc->ckpt_write): its host fp32 master
 * (the authority for its shard of the weights), its optimizer states and
 * the device gradient accumulator of the current window (stage 1: the full
 * flat local sum, reduced only at the boundary; stage 2: the partition), so
 * a save in the middle of an accumulation window resumes exactly.  Load
 * reads the shard, writes the master's values into the owned device
 * parameters and all-gathers them; the ranks agree on the read status first,
 * so a missing shard on one rank is an error everywhere, never a hang. */
#include <stdio.h>
#include <stdlib.h>

#include "offload.h"

static zero_status blob(offload *s, const char *dir, const char *name, void *buf, size_t bytes, int write) {
    return write ? s->svc->ckpt_write(s->c, dir, name, buf, bytes) : s->svc->ckpt_read(s->c, dir, name, buf, bytes);
}

/* The device gradient accumulator crosses through a host buffer (device
 * memory is never handed to file I/O). */
static zero_status grads_blob(offload *s, const char *dir, int write) {
    const size_t bytes = zero__of_dgrad_bytes(s);
    void *tmp = malloc(bytes ? bytes : 1);
    if (!tmp) return s->svc->error(s->c, ZERO_ERR_OUT_OF_MEMORY, "offload: checkpoint buffer (%zu bytes)", bytes);
    if (write) s->svc->mem_copy(s->c, tmp, s->dgrad, bytes);
    zero_status st = blob(s, dir, "offload.grads", tmp, bytes, write);
    if (!write && st == ZERO_OK) s->svc->mem_copy(s->c, s->dgrad, tmp, bytes);
    free(tmp);
    return st;
}

static zero_status blobs(offload *s, const char *dir, int write) {
    const size_t part = (size_t)s->L->part_numel * sizeof(float);
    zero_status st = blob(s, dir, "offload.master", s->master, part, write);
    if (st == ZERO_OK) st = grads_blob(s, dir, write);
    for (uint32_t k = 0; k < s->nstate && st == ZERO_OK; k++) {
        char name[32];
        snprintf(name, sizeof name, "offload.state%u", k);
        st = blob(s, dir, name, s->state[k], part, write);
    }
    return st;
}

zero_status zero__of_save(void *state, const char *dir) { return blobs(state, dir, 1); }

zero_status zero__of_load(void *state, const char *dir) {
    offload *s = state;
    const zero_services_v1 *svc = s->svc;
    zero_status st = blobs(s, dir, 0);
    double any = st != ZERO_OK;
    zero_status a = svc->allreduce(s->world, &any, 1, ZERO_DTYPE_F64, ZERO_OP_MAX);
    if (st != ZERO_OK) return st;
    if (a != ZERO_OK) return a;
    if (any > 0)
        return svc->error(s->c, ZERO_ERR_IO, "offload: checkpoint %s: another rank could not read its shard", dir);
    zero__of_params_to_device(s); /* rounded from the master exactly as a step does */
    return svc->allgather_shares(s->c, s->world, s->params, s->dtype);
}
