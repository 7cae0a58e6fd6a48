/* stage3: ZeRO stage 3, parameters partitioned too.
 *
 * Per rank, for a model of Psi elements over N ranks (fp32 + Adam):
 *   shard (params = master)  4 Psi/N   ZERO_MEM_PARAMS
 *   gradient partition       4 Psi/N   ZERO_MEM_GRADS
 *   optimizer state          8 Psi/N   ZERO_MEM_OPTIM
 * plus bounded bucket staging and gather buffers (<= max_live).  Mixed
 * precision adds the fp32 master (ZERO_MEM_MASTER) and keeps shard and
 * gradients in the model dtype: (2+2+12) Psi/N; the places that differ are
 * params_done (allocation, init copy) and the optimizer call (param_out).
 *
 * This file: the plugin table, lifecycle, gradients and checkpoints.
 * Gathers are the kit's gather engine with stage 3's fetch
 * (stage3_gather.c), the step is in stage3_step.c.  Includes only abi/ and
 * kit/ headers (and plugins/common/plugin_glue.h, which includes only abi/
 * too), like any third-party plugin. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zero_kit.h"
#include "stage3.h"
#include "stage3_tiers.h"

static zero_status s3_create(const zero_services *svc, void **state) {
    zero__s3 *s = calloc(1, sizeof *s);
    if (!s) return ZERO_ERR_OUT_OF_MEMORY;
    s->svc = svc;
    s->c = svc->core;
    s->rc = svc->config(s->c);
    /* Debug builds poison released buffers by default; ZERO_DEBUG_POISON=1
     * turns it on in any build (=0 off). */
#ifdef ZERO_STAGE3_POISON_DEFAULT
    s->poison = 1;
#endif
    const char *env = getenv("ZERO_DEBUG_POISON");
    /* "0" or "1" (libzero warns about anything else at engine creation) */
    if (env && (!strcmp(env, "0") || !strcmp(env, "1"))) s->poison = env[0] == '1';
    *state = s;
    return ZERO_OK;
}

/* Model state in its tier: the host tier for what offload moves there. */
static void *alloc_state(zero__s3 *s, int host, zero_mem_tag tag, size_t bytes) {
    return s->svc->mem_alloc(s->c, host ? ZERO_TIER_HOST : ZERO_TIER_DEVICE, tag, bytes ? bytes : 1);
}

static uint64_t nonneg(int64_t v) { return v > 0 ? (uint64_t)v : 0; }

/* (libzero 1.12) Each layout group's param communicator (stage3.h fcomm):
 * gcomm for a dense group, a duplicate of an expert group's expert-data-
 * parallel communicator (one per distinct communicator, made in layout
 * order: every rank of that communicator makes the same splits in the same
 * order, since the group tables were agreed at zero_params_done).  And
 * each param's layout group. */
static zero_status setup_comms(zero__s3 *s) {
    const zero_services *svc = s->svc;
    const zero_layout *L = s->L;
    const uint32_t ng = L->ngroups;
    s->fcomm = calloc(ng ? ng : 1, sizeof *s->fcomm);
    s->group_of = calloc(s->nparams ? s->nparams : 1, sizeof *s->group_of);
    s->xcomms = calloc(ng ? ng : 1, sizeof *s->xcomms);
    s->xsrc = calloc(ng ? ng : 1, sizeof *s->xsrc);
    if (!s->fcomm || !s->group_of || !s->xcomms || !s->xsrc)
        return svc->error(s->c, ZERO_ERR_OUT_OF_MEMORY, "stage3: out of memory");
    for (uint32_t g = 0; g < ng; g++) {
        for (uint32_t j = 0; j < L->groups[g].nparams; j++) s->group_of[L->param_order[L->groups[g].first_param + j]] = g;
        zero_comm *gc = svc->group_comm(s->c, g);
        s->fcomm[g] = s->gcomm;
        if (!gc || gc == s->world) continue;
        uint32_t k = 0;
        while (k < s->nxcomms && s->xsrc[k] != gc) k++;
        if (k == s->nxcomms) {
            zero_status st = svc->comm_split(gc, 0, svc->comm_rank(gc), &s->xcomms[k]);
            if (st != ZERO_OK) return st;
            s->xsrc[k] = gc;
            s->nxcomms++;
        }
        s->fcomm[g] = s->xcomms[k];
    }
    return ZERO_OK;
}

/* Per-param all-gather counts and this rank's piece; copy the initial
 * values of the piece into the shard (the master is widened from the whole
 * shard afterwards). */
static zero_status setup_param(zero__s3 *s, uint32_t i) {
    const zero_services *svc = s->svc;
    zero__s3_param *p = &s->params[i];
    zero_param_info *info = svc->param(s->c, i);
    p->info = info;
    info->plugin_data = p;
    info->data = NULL; /* no permanent full tensor in stage 3 */
    if (info->dtype != s->dtype)
        return svc->error(s->c, ZERO_ERR_UNSUPPORTED, "stage3: param '%s' has dtype %d but the model dtype is %d",
                          info->name, (int)info->dtype, (int)s->dtype);
    /* initial values may be host or device memory (CUDA engine): they are
     * read only through mem_copy / convert, which take either */
    const uint32_t g = s->group_of[i];
    p->comm = s->fcomm[g];
    p->counts = calloc(zero__s3_group_world(s, g), sizeof *p->counts);
    if (!p->counts) return svc->error(s->c, ZERO_ERR_OUT_OF_MEMORY, "stage3: out of memory");
    const uint64_t lo = info->flat_offset, hi = lo + info->numel;
    p->count = info->numel ? zero__s3_pieces(s, g, lo, hi, p->counts, &p->part_lo, &p->piece_off) : 0;
    /* offload_param nvme: the file is written tile by tile (zero__s3_off_init); no values: zero-filled */
    if (!p->count || !s->shard || !info->init_data) return ZERO_OK;
    svc->mem_copy(s->c, (char *)s->shard + (size_t)p->part_lo * s->esize,
                  (const char *)info->init_data + (size_t)p->piece_off * s->esize, (size_t)p->count * s->esize);
    /* (the gather engine decides persistence and world 1's aliases: stage3_gather.c) */
    return ZERO_OK;
}

static zero_status s3_params_done(void *state) {
    zero__s3 *s = state;
    const zero_services *svc = s->svc;
    const zero_run_config *rc = s->rc;
    s->L = svc->layout(s->c);
    s->world = svc->comm_world(s->c);
    zero_status cs = svc->comm_split(s->world, 0, (int)s->L->rank, &s->gcomm);
    if (cs != ZERO_OK) return cs;
    s->rank = (int)s->L->rank;
    s->nranks = (int)s->L->world;
    s->dtype = rc->model_dtype;
    s->esize = zero__s3_dtype_size(s->dtype);
    s->gdtype = zero_kit_grad_dtype(rc);
    s->gesize = zero__s3_dtype_size(s->gdtype);
    s->nparams = svc->nparams(s->c);
    zero_status os = zero__s3_off_configure(s);
    if (os != ZERO_OK) return os;
    /* fp32 accumulation of a 16-bit model: fp32 slots, so the host writes
     * model-dtype temporaries that on_grad_ready widens into them */
    s->contiguous = s->gdtype == s->dtype && rc->contiguous_gradients;

    const size_t part = (size_t)s->L->part_numel;
    /* Tiers: offload moves master, states and the gradient partition (and
     * with offload_param the shard) to the host tier; NVMe keeps master and
     * states in its tile file instead (stage3_offload.c). */
    const int hopt = s->off_opt != 0, nvme = s->off_opt == ZERO__S3_OFF_NVME;
    /* (offload_param nvme: no shard in memory at all; stage3_pwin.c) */
    s->shard = s->off_param_nvme ? NULL : alloc_state(s, s->off_param, ZERO_MEM_PARAMS, part * s->esize);
    /* an fp32 shard is its own master when both sit in the same tier */
    const int own_master = s->dtype == ZERO_DTYPE_F32 && hopt == s->off_param && !nvme && !s->off_param_nvme;
    s->master = own_master ? s->shard : nvme ? NULL : alloc_state(s, hopt, ZERO_MEM_MASTER, part * sizeof(float));
    s->grads = alloc_state(s, hopt, ZERO_MEM_GRADS, part * s->gesize);
    s->nstate = svc->optim_state_count(s->c);
    uint32_t ng = s->L->ngroups;
    s->owned = calloc(ng ? ng : 1, sizeof *s->owned);
    s->params = calloc(s->nparams ? s->nparams : 1, sizeof *s->params);
    int ok = (s->shard || s->off_param_nvme) && (s->master || nvme) && s->grads && s->nstate <= 4 && s->owned && s->params;
    for (uint32_t k = 0; ok && !nvme && k < s->nstate; k++)
        ok = (s->state[k] = alloc_state(s, hopt, ZERO_MEM_OPTIM, part * sizeof(float))) != NULL;
    if (!ok)
        return svc->error(s->c, ZERO_ERR_OUT_OF_MEMORY, "stage3: cannot allocate the %zu-element model-state shard",
                          part);
    s->nowned = s->L->flat_numel ? svc->owned_ranges(s->c, s->L->rank, 0, s->L->flat_numel, s->owned, ng) : 0;
    zero_status ms = setup_comms(s);
    if (ms != ZERO_OK) return ms;
    for (uint32_t i = 0; i < s->nparams; i++) {
        zero_status st = setup_param(s, i);
        if (st != ZERO_OK) return st;
    }
    /* the gather engine: persistent buffers (from the initial values) and
     * world 1's aliases of the shard */
    zero_status gs = zero__s3_gather_setup(s);
    if (gs != ZERO_OK) return gs;
    /* mixed precision: the fp32 master is the exact widening of the shard
     * (padding included: zeros either way) */
    if (s->off) {
        zero_status is = zero__s3_off_init(s); /* across the tiers, tile by tile (and the NVMe file) */
        if (is != ZERO_OK) return is;
    } else if ((void *)s->master != s->shard) {
        svc->convert(s->c, s->master, ZERO_DTYPE_F32, s->shard, s->dtype, part);
    }

    zero_bucket_spec spec = {0};
    spec.struct_size = sizeof spec;
    spec.mode = ZERO_BUCKETS_SCATTER;
    spec.bucket_numel = nonneg(rc->reduce_bucket_size);
    spec.overlap = rc->overlap_comm;
    spec.contiguous = s->contiguous;
    spec.partition = s->grads;
    spec.reduce_every_micro_step = 1; /* no full gradient may exist: reduce every micro-step */
    spec.grad_dtype = s->gdtype;
    /* one set per partition communicator: the dense groups' over the world,
     * each expert group's over its expert-data-parallel group (1.12) */
    return zero_kit_bsets_create(&s->bs, svc, &spec);
}

/* Thread-safe for distinct params (the bucket engine is; grad_tmp is per param). */
static zero_status s3_grad_buffer(void *state, zero_param_info *p, void **buf) {
    zero__s3 *s = state;
    if (s->contiguous) return s->svc->buckets_grad_slot(zero_kit_bsets_of(&s->bs, p->index), p->index, buf);
    zero__s3_param *sp = p->plugin_data;
    return zero_kit_grad_tmp(s->svc, p, s->esize, &sp->grad_tmp, buf, "stage3");
}

static zero_status s3_on_grad_ready(void *state, zero_param_info *p, void *stream) {
    zero__s3 *s = state;
    (void)stream;
    zero__s3_param *sp = p->plugin_data;
    return zero_kit_grad_ready(s->svc, zero_kit_bsets_of(&s->bs, p->index), p, &sp->grad_tmp);
}

static zero_status s3_sync(void *state) {
    zero__s3 *s = state;
    return s->gather ? zero_kit_gather_wait_all(s->gather) : ZERO_OK;
}

/* Checkpoint: this rank's shard, master (mixed precision), optimizer
 * state and gradient partition, as atomic blobs: "stage3.master" (the fp32
 * weights: the shard itself for an fp32 model) and "stage3.state<k>"
 * written by the core's ckpt_shard, plus "stage3.params" (16-bit shard,
 * mixed precision only) and "stage3.grads".  The partition is the
 * accumulator of the current window (every micro-step's reduce-scatter ADDS
 * into it), so it must be saved for a checkpoint taken in the middle of a
 * window to resume exactly; at a boundary it is all zeros.  Gathered
 * buffers are derived data (dropped and refreshed from the shard on load),
 * and the gather trace only steers prefetch, never values. */
/* offload_param nvme: the "stage3.params" blob the host-tier shard would
 * have (16-bit models, or fp32 with an NVMe optimizer, whose master is not
 * the shard), so that checkpoints move between offload_param cpu and nvme;
 * the shard file is materialized in the host tier for the duration of the
 * save/load (as the NVMe optimizer tiles are).  fp32 with a host master and
 * no blob: the shard is the master, copied back after a load. */
static zero_status nvme_params_blob(zero__s3 *s, const char *dir, int write) {
    const zero_services *svc = s->svc;
    const size_t bytes = (size_t)s->L->part_numel * s->esize;
    const int blob = s->dtype != ZERO_DTYPE_F32 || s->off_opt == ZERO__S3_OFF_NVME;
    if (!blob) return write ? ZERO_OK : zero__s3_off_master_to_shard(s);
    void *raw = svc->mem_alloc(s->c, ZERO_TIER_HOST, ZERO_MEM_PARAMS, zero__s3_nvme_range_bytes(bytes));
    if (!raw) return svc->error(s->c, ZERO_ERR_OUT_OF_MEMORY, "stage3: no host memory to checkpoint the NVMe shard");
    char *buf = (char *)(((uintptr_t)raw + ZERO__S3_NVME_ALIGN - 1) & ~(uintptr_t)(ZERO__S3_NVME_ALIGN - 1));
    zero_status st = ZERO_OK;
    zero__s3_pwin_reset(s);
    if (write) {
        if (zero__s3_nvme_read_range(s->off->pfile, 0, bytes, buf) != 0)
            st = svc->error(s->c, ZERO_ERR_IO, "stage3: offload_param nvme_path '%s': reading the parameter shard: %s",
                            s->param_nvme_path, zero__s3_nvme_error(s->off->pfile));
        else
            st = svc->ckpt_write(s->c, dir, "stage3.params", buf, bytes);
    } else {
        st = svc->ckpt_read(s->c, dir, "stage3.params", buf, bytes);
        if (st == ZERO_OK && zero__s3_nvme_write_range(s->off->pfile, 0, bytes, buf) != 0)
            st = svc->error(s->c, ZERO_ERR_IO, "stage3: offload_param nvme_path '%s': writing the parameter shard: %s",
                            s->param_nvme_path, zero__s3_nvme_error(s->off->pfile));
    }
    svc->mem_free(s->c, raw);
    return st;
}

static zero_status s3_blobs(zero__s3 *s, const char *dir, int write) {
    const zero_services *svc = s->svc;
    const size_t bytes = (size_t)s->L->part_numel * s->esize;
    zero_part_step ps = zero__s3_part_step(s);
    /* params NULL: the shard is partition-indexed (ckpt_shard's params blob is
     * flat-indexed); for fp32 it is the master and saved as such */
    zero_status st = s->off_opt == ZERO__S3_OFF_NVME ? zero__s3_off_blobs(s, dir, write)
                                                     : svc->ckpt_shard(s->c, dir, "stage3", &ps, NULL, write);
    const size_t gbytes = (size_t)s->L->part_numel * s->gesize;
    if (st == ZERO_OK && !write && svc->ckpt_reshard(s->c)) {
        /* another world size / plugin wrote it (at a boundary): the 16-bit
         * shard is the master rounded, as after every step; no gradient */
        if (s->off) {
            zero_status ms = zero__s3_off_master_to_shard(s); /* across the tiers (and from/to the NVMe files) */
            if (ms != ZERO_OK) return ms;
        } else if ((void *)s->master != s->shard)
            svc->convert(s->c, s->shard, s->dtype, s->master, ZERO_DTYPE_F32, (size_t)s->L->part_numel);
        return svc->mem_set(s->c, s->grads, 0, gbytes);
    }
    if (st == ZERO_OK && s->off_param_nvme)
        st = nvme_params_blob(s, dir, write);
    else if (st == ZERO_OK && (void *)s->master != s->shard)
        st = write ? svc->ckpt_write(s->c, dir, "stage3.params", s->shard, bytes)
                   : svc->ckpt_read(s->c, dir, "stage3.params", s->shard, bytes);
    if (st == ZERO_OK)
        st = write ? svc->ckpt_write(s->c, dir, "stage3.grads", s->grads, gbytes)
                   : svc->ckpt_read(s->c, dir, "stage3.grads", s->grads, gbytes);
    return st;
}

static zero_status s3_save(void *state, const char *dir) { return s3_blobs(state, dir, 1); }

static zero_status s3_load(void *state, const char *dir) {
    zero__s3 *s = state;
    zero_status st = zero_kit_gather_drop_all(s->gather); /* gathered values are about to be stale */
    if (st == ZERO_OK) st = s3_blobs(s, dir, 0);
    zero_kit_gather_mark_stale(s->gather);
    /* Agree on the read status: a shard missing on one rank must fail the
     * load on every rank now, not leave the others waiting in the next
     * gather's agreement until its timeout. */
    return s->svc->ckpt_agree(s->c, s->world, st, dir, "stage3");
}

static void s3_destroy(void *state) {
    zero__s3 *s = state;
    if (!s) return;
    const zero_services *svc = s->svc;
    zero_kit_gather_destroy(s->gather); /* waits for its all-gathers, logs how gathers were served */
    s->gather = NULL;                   /* the NVMe window (zero__s3_off_free) must not ask it any more */
    zero__s3_gather_free(s);
    zero_kit_bsets_destroy(&s->bs);
    for (uint32_t k = 0; k < s->nxcomms; k++) svc->comm_free(s->xcomms[k]);
    free(s->xcomms);
    free(s->xsrc);
    free(s->fcomm);
    free(s->group_of);
    if (s->gcomm) svc->comm_free(s->gcomm);
    for (uint32_t i = 0; s->params && i < s->nparams; i++) {
        zero__s3_param *p = &s->params[i];
        if (p->grad_tmp) svc->mem_free(s->c, p->grad_tmp);
        free(p->counts);
        if (p->info) p->info->plugin_data = NULL;
    }
    zero__s3_off_free(s);
    for (uint32_t k = 0; k < 4; k++) svc->mem_free(s->c, s->state[k]);
    if (s->master && (void *)s->master != s->shard) svc->mem_free(s->c, s->master);
    svc->mem_free(s->c, s->grads);
    svc->mem_free(s->c, s->shard);
    free(s->owned);
    free(s->params);
    free(s);
}

ZERO_PLUGIN_EXPORT const zero_plugin_table ZERO_PLUGIN_TABLE = {
    ZERO_PLUGIN_TABLE_HEAD,
    /* GATHER_COMPLETE: zero__s3_gather waits for every all-gather it hands
     * out (and world-1 aliases of the shard were ordered by the step) */
    .caps = ZERO_PLUGIN_CAP_PARTITIONS_PARAMS | ZERO_PLUGIN_CAP_GRAD_DTYPES | ZERO_PLUGIN_CAP_RESHARD |
            ZERO_PLUGIN_CAP_OFFLOAD | ZERO_PLUGIN_CAP_GATHER_COMPLETE | ZERO_PLUGIN_CAP_EXPERT_GROUPS,
    .name = "stage3",
    .description = "ZeRO-3: parameters, gradients and optimizer states partitioned; params gathered just in time "
                   "with trace-driven prefetch",
    .create = s3_create,
    .params_done = s3_params_done,
    .gather = zero__s3_gather,
    .release = zero__s3_release,
    .gather_slices = zero__s3_gather_slices,
    .release_slices = zero__s3_release_slices,
    .grad_buffer = s3_grad_buffer,
    .on_grad_ready = s3_on_grad_ready,
    .step = zero__s3_step,
    .save = s3_save,
    .load = s3_load,
    .write_params = zero__s3_write_params,
    .sync = s3_sync,
    .destroy = s3_destroy,
    .set_phase = zero__s3_set_phase,
    .plan = zero__s3_plan,
};
