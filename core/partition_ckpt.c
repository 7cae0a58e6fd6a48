/* Parameter placement and partition checkpoints shared by the flat-layout
 * plugins (services params_place, master_init, ckpt_shard, ckpt_agree;
 * contracts in zero_plugin.h).  Every copy goes through the services table's
 * mem_copy / convert, which accept device memory on a CUDA engine, so the
 * plugins never touch device-tier buffers with the host.  Engine step
 * thread only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_mem.h"
#include "ckpt/ckpt_blob.h"
#include "engine.h"
#include "optim.h"
#include "partition_step.h"
#include "ckpt/ckpt_engine.h"

static const char *dtype_name(zero_dtype dt) {
    return dt == ZERO_DTYPE_F32 ? "fp32" : dt == ZERO_DTYPE_BF16 ? "bf16" : dt == ZERO_DTYPE_F16 ? "fp16" : "?";
}

zero_status zero__svc_params_place(zero_core *c, void *flat, zero_dtype dt, const char *who) {
    struct zero_engine *e = zero__engine_of(c);
    const size_t es = zero__dtype_size(dt);
    if (!es || (!flat && e->layout.view.flat_numel))
        return zero__error(e, ZERO_ERR_INVALID_ARGUMENT, "%s: params_place without a buffer or with dtype %d",
                           who ? who : "plugin", (int)dt);
    for (uint32_t i = 0; i < e->nparams; i++) {
        const zero_param_info *p = &e->params[i]->info;
        if (p->dtype != dt)
            return zero__error(e, ZERO_ERR_UNSUPPORTED,
                               "%s: param '%s' is registered as %s, but the model dtype (bf16.enabled / "
                               "fp16.enabled) is %s",
                               who ? who : "plugin", p->name, dtype_name(p->dtype), dtype_name(dt));
    }
    for (uint32_t i = 0; i < e->nparams; i++) {
        zero_param_info *p = &e->params[i]->info;
        char *dst = (char *)flat + (size_t)p->flat_offset * es;
        if (p->init_data) zero__engine_copy(c, dst, p->init_data, (size_t)p->numel * es);
        p->data = dst;
    }
    return ZERO_OK; /* a failed device copy is reported by mem_copy itself (error log, last error) */
}

static size_t at(const zero_owned_range *r, zero_index_kind k) {
    return (size_t)(k == ZERO_INDEX_PART ? r->part_lo : r->flat_lo);
}

zero_status zero__svc_master_init(zero_core *c, const zero_part_step *ps, const void *params) {
    if (!ps || (const void *)ps->master == params) return ZERO_OK;
    const size_t es = zero__dtype_size(ps->dtype);
    for (uint32_t i = 0; i < ps->nranges; i++) {
        const zero_owned_range *r = &ps->ranges[i];
        zero__engine_convert(c, ps->master + at(r, ps->master_index), ZERO_DTYPE_F32,
                             (const char *)params + (size_t)r->flat_lo * es, ps->dtype, (size_t)(r->flat_hi - r->flat_lo));
    }
    return ZERO_OK;
}

/* One blob: the ranges' pieces of `base` (indexed as `kind`, es bytes per
 * element) concatenated in range order, staged through a host buffer.
 * Saving, the blob is recorded as holding `ck_kind` of those flat ranges
 * (the manifest's resharding map); loading a checkpoint of another world
 * size or plugin, each range is read element by element from the saver's
 * files instead (ckpt_source.h), converted to dt.  A weights-only load
 * (1.8) reads no optimizer state: those ranges are zero, as a new run's. */
static zero_status shard_blob(struct zero_engine *e, const char *dir, const char *name, const zero_part_step *ps,
                              void *base, zero_index_kind kind, zero_dtype dt, int32_t ck_kind, int write) {
    zero_core *c = zero__core_of(e);
    const size_t es = zero__dtype_size(dt);
    size_t total = 0;
    for (uint32_t i = 0; i < ps->nranges; i++) total += (size_t)(ps->ranges[i].flat_hi - ps->ranges[i].flat_lo);
    char *buf = malloc(total ? total * es : 1);
    if (!buf) return zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "checkpoint: no memory to stage %s", name);
    zero_status st = ZERO_OK;
    size_t off = 0;
    zero__ck_load *ld = e->ck_load;
    const int reshard = !write && ld && ld->reshard;
    const int fresh = reshard && ld->weights_only && ck_kind >= ZERO__CK_STATE0;
    if (fresh) memset(buf, 0, total ? total * es : 1);
    if (!write && !reshard) st = zero__ckpt_blob_read(c, dir, name, buf, total * es);
    for (uint32_t i = 0; st == ZERO_OK && i < ps->nranges; i++) {
        const zero_owned_range *r = &ps->ranges[i];
        size_t n = (size_t)(r->flat_hi - r->flat_lo) * es;
        char *arr = (char *)base + at(r, kind) * es;
        char err[1200];
        if (reshard && !fresh &&
            zero__ck_read_srcs(ld->r, ck_kind, ld->src, e->nparams, r->flat_lo, r->flat_hi, buf + off, dt, err,
                               sizeof err))
            st = zero__error(e, ZERO_ERR_IO, "%s", err);
        else if (write)
            zero__engine_copy(c, buf + off, arr, n);
        else
            zero__engine_copy(c, arr, buf + off, n);
        off += n;
    }
    if (write && st == ZERO_OK) {
        if (e->ck_save) {
            e->ck_save->kind = ck_kind;
            e->ck_save->dtype = dt;
            e->ck_save->ranges = ps->ranges;
            e->ck_save->nranges = ps->nranges;
        }
        st = zero__ckpt_blob_write(c, dir, name, buf, total * es);
        if (e->ck_save) e->ck_save->kind = ZERO__CK_OPAQUE;
    }
    free(buf);
    return st;
}

zero_status zero__svc_ckpt_shard(zero_core *c, const char *dir, const char *prefix, const zero_part_step *ps,
                                 void *params, int write) {
    struct zero_engine *e = zero__engine_of(c);
    if (!dir || !prefix || !ps) return zero__error(e, ZERO_ERR_INVALID_ARGUMENT, "ckpt_shard: NULL argument");
    const uint32_t nstate = zero__optim_state_count(e->rc->optim, e->rc->momentum);
    char name[160];
    zero_status st = ZERO_OK;
    if (params) {
        snprintf(name, sizeof name, "%s.params", prefix);
        st = shard_blob(e, dir, name, ps, params, ZERO_INDEX_FLAT, ps->dtype, ZERO__CK_PARAMS, write);
    }
    if (st == ZERO_OK && (void *)ps->master != params) {
        snprintf(name, sizeof name, "%s.master", prefix);
        st = shard_blob(e, dir, name, ps, ps->master, ps->master_index, ZERO_DTYPE_F32, ZERO__CK_MASTER, write);
    }
    for (uint32_t k = 0; k < nstate && k < 4 && st == ZERO_OK; k++) {
        snprintf(name, sizeof name, "%s.state%u", prefix, k);
        st = shard_blob(e, dir, name, ps, ps->state[k], ZERO_INDEX_PART, ZERO_DTYPE_F32, (int32_t)(ZERO__CK_STATE0 + k),
                        write);
    }
    return st;
}

zero_status zero__svc_ckpt_agree(zero_core *c, zero_comm *comm, zero_status local, const char *dir,
                                 const char *who) {
    struct zero_engine *e = zero__engine_of(c);
    double any = local != ZERO_OK;
    zero_status a = zero__allreduce(comm ? comm : e->world, &any, 1, ZERO_DTYPE_F64, ZERO_OP_MAX);
    if (local != ZERO_OK) return local;
    if (a != ZERO_OK) return a;
    if (any > 0) e->ck_echo = 1; /* zero_load's agreement prefers the first-hand message */
    if (any > 0)
        return zero__error(e, ZERO_ERR_IO, "%s: checkpoint %s: another rank could not read its shard",
                           who ? who : "plugin", dir ? dir : "?");
    return ZERO_OK;
}
