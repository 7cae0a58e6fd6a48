/* Parameter values the host sets after zero_params_done (1.10,
 * zero_params_write in abi/zero.h): DeepSpeed's
 * GatheredParameters(modifier_rank=...), at every stage.
 *
 * Before 1.10 a C host could change weights after zero_params_done only by
 * loading a checkpoint: a write into libzero's copy (or a host-owned tensor,
 * or a stage-3 gathered copy) is refused at the next boundary since 1.7.4
 * (docs/reliability.md), so a weight surgery meant a save, an edit of the
 * files and a load.  Here the core checks the call on every rank, agrees
 * the verdict, broadcasts each written param from its group's root and
 * hands the values to the plugin's write_params (plugin ABI 1.8), which
 * knows where its copies live (shards, masters, offload tiers, NVMe tiles).
 *
 * Cost: the written bytes broadcast once (in pieces of at most PIECE bytes
 * of scratch, or one param when it is larger), and two all-reduces of a
 * few doubles over the job plus one over each data-parallel group (the
 * list check); bench/params_write compares it with one MPI_Bcast of the
 * same bytes.  Engine thread only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "engine.h"
#include "engine_mem.h"
#include "grad_window.h"
#include "log.h"
#include "params.h"
#include "params_write.h"

/* Scratch per plugin call; a larger param goes alone.  The scratch is the
 * largest piece: 64 MiB made a burst's first call cost ~13 broadcasts of
 * its bytes in page faults (bench/params_write), 16 MiB ~4; smaller pieces
 * mean more write_params calls (stage 3 with NVMe offload rewrites its
 * shard once per call). */
#define PIECE ((size_t)16 << 20)

static size_t bytes_of(const struct zero_param *p) { return (size_t)p->info.numel * zero__dtype_size(p->info.dtype); }

/* The communicator over which p is replicated in the data-parallel sense:
 * its expert group's expert-data-parallel ranks, else `world` (this
 * pipeline stage's ranks).  Group index, or -1 for world. */
static int group_of(const struct zero_engine *e, const struct zero_param *p) {
    if (!e->group_comms || !p->info.numel) return -1;
    const int g = zero__layout_group_of(&e->layout.view, p->info.flat_offset);
    return g >= 0 && (uint32_t)g < e->ngroup_comms && e->group_comms[g] ? g : -1;
}

static zero_comm *comm_of(const struct zero_engine *e, int g) { return g < 0 ? e->world : e->group_comms[g]; }

/* 64-bit FNV-1a over what each param in group g is (name, numel, dtype),
 * in the caller's order: equal lists, equal hashes. */
static uint64_t list_hash(const struct zero_engine *e, zero_param *const *params, size_t n, int g) {
    uint64_t h = 0xcbf29ce484222325ULL;
    uint64_t count = 0;
    for (size_t i = 0; i < n; i++) {
        const struct zero_param *p = params[i];
        if (!p->info.numel || group_of(e, p) != g) continue;
        const unsigned char *s = (const unsigned char *)p->name;
        for (; *s; s++)
            h = (h ^ *s) * 0x100000001b3ULL;
        const uint64_t tail[2] = {p->info.numel, (uint64_t)p->info.dtype + 1};
        const unsigned char *t = (const unsigned char *)tail;
        for (size_t k = 0; k < sizeof tail; k++)
            h = (h ^ t[k]) * 0x100000001b3ULL;
        count++;
    }
    return h ^ count;
}

/* Do all ranks of comm hold the same hash?  Two 32-bit halves as doubles
 * (exact), max and -min in one all-reduce.  *same = 1 when they agree. */
static zero_status same_everywhere(zero_comm *comm, uint64_t h, int *same) {
    const double hi = (double)(h >> 32), lo = (double)(h & 0xffffffffu);
    double v[4] = {hi, lo, -hi, -lo};
    zero_status s = zero__allreduce(comm, v, 4, ZERO_DTYPE_F64, ZERO_OP_MAX);
    *same = s == ZERO_OK && v[0] == -v[2] && v[1] == -v[3];
    return s;
}

/* This rank's own objections, first-hand (the message is the last error). */
static zero_status check_local(struct zero_engine *e, zero_param *const *params, const void *const *values, size_t n,
                               int root) {
    const char *plugin = e->plugin.table && e->plugin.table->name ? e->plugin.table->name : "?";
    if (!e->params_frozen)
        return zero__error(e, ZERO_ERR_STATE,
                           "zero_params_write before zero_params_done (initial values are "
                           "zero_param_desc.data)");
    if (!e->plugin.table->write_params) {
        char why[120];
        if (e->plugin.table->abi_minor < 8)
            snprintf(why, sizeof why, "it was built for plugin ABI 1.%u, which has no write_params: 1.8 added it",
                     e->plugin.table->abi_minor);
        else
            snprintf(why, sizeof why, "it leaves the optional write_params out");
        return zero__error(e, ZERO_ERR_UNSUPPORTED,
                           "zero_params_write: plugin '%s' cannot set parameter values (%s); load a checkpoint with "
                           "zero_load_ex instead",
                           plugin, why);
    }
    if (n && !params) return zero__error(e, ZERO_ERR_INVALID_ARGUMENT, "zero_params_write: params is NULL");
    unsigned char *seen = calloc(e->nparams ? e->nparams : 1, 1);
    if (!seen) return zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "zero_params_write: out of memory");
    zero_status s = ZERO_OK;
    for (size_t i = 0; i < n && s == ZERO_OK; i++) {
        const struct zero_param *p = params[i];
        if (!zero__param_valid(e, p) || p->magic != ZERO__PARAM_MAGIC) {
            s = zero__error(e, ZERO_ERR_INVALID_ARGUMENT,
                            "zero_params_write: params[%zu] (%p) is not a parameter "
                            "of this engine",
                            i, (const void *)p);
            break;
        }
        if (seen[p->info.index]++) {
            s = zero__error(e, ZERO_ERR_INVALID_ARGUMENT, "zero_params_write: param '%s' is given twice", p->name);
            break;
        }
        zero_comm *comm = comm_of(e, group_of(e, p));
        const int size = zero__comm_size(comm);
        if (root < 0 || root >= size) {
            s = zero__error(e, ZERO_ERR_INVALID_ARGUMENT,
                            "zero_params_write: root %d is not a place in param '%s''s data-parallel group of %d "
                            "rank(s)",
                            root, p->name, size);
            break;
        }
        if (p->info.numel && zero__comm_rank(comm) == root && (!values || !values[i]))
            s = zero__error(e, ZERO_ERR_INVALID_ARGUMENT,
                            "zero_params_write: this rank is the root of param '%s' but its values are NULL", p->name);
    }
    free(seen);
    if (s != ZERO_OK) return s;
    uint32_t held = 0;
    const char *first = NULL;
    for (uint32_t i = 0; i < e->nparams; i++)
        if (e->params[i]->holds && !held++) first = e->params[i]->name;
    if (held && (e->plugin.table->caps & ZERO_PLUGIN_CAP_PARTITIONS_PARAMS))
        return zero__error(e, ZERO_ERR_STATE,
                           "zero_params_write: %u param(s) are gathered and not released ('%s' first); release "
                           "them (zero_release / zero_release_slices) first",
                           held, first);
    const char *reported = NULL;
    const uint32_t nrep = zero__grads_reported(e, &reported);
    if (e->micro_step || nrep)
        return zero__error(e, ZERO_ERR_STATE,
                           "zero_params_write inside an accumulation window (micro-step %u, %u gradient(s) reported "
                           "on this rank%s%s%s): write between windows, after the boundary zero_step",
                           e->micro_step, nrep, reported ? ", '" : "", reported ? reported : "", reported ? "'" : "");
    return ZERO_OK;
}

/* The lists of every data-parallel group agree?  One all-reduce over
 * `world` and one over each expert group's communicator (every rank has
 * every layout group, so the sequence of collectives is the same on all). */
static zero_status check_lists(struct zero_engine *e, zero_param *const *params, size_t n, int *same) {
    *same = 1;
    int ok = 1;
    zero_status s = same_everywhere(e->world, list_hash(e, params, n, -1), &ok);
    *same = *same && ok;
    for (uint32_t g = 0; s == ZERO_OK && e->params_frozen && g < e->ngroup_comms; g++) {
        if (!e->group_comms[g]) continue;
        s = same_everywhere(e->group_comms[g], list_hash(e, params, n, (int)g), &ok);
        *same = *same && ok;
    }
    return s;
}

/* The broadcast scratch, at least `bytes`, in the device tier (what the
 * plugin and the engine's communicator take: device memory on a CUDA
 * engine).  Kept between the calls of a burst (a host writes module by
 * module, as DeepSpeed's GatheredParameters is used): a fresh buffer costs
 * its page faults, as much again as the copy into it, so it stays until
 * the next zero_step or the engine's end (zero__params_write_release). */
static char *scratch_for(struct zero_engine *e, size_t bytes) {
    if (e->pw_scratch && e->pw_scratch_bytes >= bytes) return e->pw_scratch;
    zero__params_write_release(e);
    e->pw_scratch = zero__mem_alloc(e->mem, ZERO_TIER_DEVICE, ZERO_MEM_OTHER, bytes);
    e->pw_scratch_bytes = e->pw_scratch ? bytes : 0;
    return e->pw_scratch;
}

void zero__params_write_release(struct zero_engine *e) {
    if (e->pw_scratch) zero__mem_free(e->mem, e->pw_scratch);
    e->pw_scratch = NULL;
    e->pw_scratch_bytes = 0;
}

/* Hand the plugin params[0..k) (one group) with their broadcast values. */
static zero_status write_piece(struct zero_engine *e, zero_param *const *ps, void *const *vals, size_t k) {
    zero_param_info **infos = malloc(k * sizeof *infos);
    if (!infos) return zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "zero_params_write: out of memory");
    for (size_t i = 0; i < k; i++)
        infos[i] = &ps[i]->info;
    zero_status s = e->plugin.table->write_params(e->pstate, infos, k, (const void *const *)vals);
    free(infos);
    return s;
}

/* The next piece of group g's params from params[*i] on: up to PIECE bytes
 * (at least one param), into ps[0..k) with their indexes in the caller's
 * arrays (at[]); *bytes their size.  Returns k (0: no more); advances *i.
 * The same on every rank of the group (their lists agree). */
static size_t next_piece(const struct zero_engine *e, zero_param *const *params, size_t n, int g, size_t *i,
                         zero_param **ps, size_t *at, size_t *bytes) {
    size_t k = 0, j = *i;
    *bytes = 0;
    for (; j < n; j++) {
        zero_param *p = params[j];
        if (!p->info.numel || group_of(e, p) != g) continue;
        if (k && *bytes + bytes_of(p) > PIECE) break;
        ps[k] = p;
        at[k++] = j;
        *bytes += bytes_of(p);
    }
    *i = j;
    return k;
}

/* The largest piece of any group: the scratch the write needs, taken
 * before the verdict so that a rank without it refuses with the others
 * instead of leaving them in a broadcast. */
static size_t largest_piece(const struct zero_engine *e, zero_param *const *params, size_t n, zero_param **ps,
                            size_t *at) {
    size_t need = 0;
    for (int g = -1; g < (int)e->ngroup_comms; g++) {
        if (g >= 0 && !e->group_comms[g]) continue;
        size_t i = 0, bytes = 0;
        while (next_piece(e, params, n, g, &i, ps, at, &bytes))
            if (bytes > need) need = bytes;
    }
    return need;
}

/* Broadcast and write group g's params (in the caller's order), in pieces
 * through the scratch taken before the verdict (ps, at: n entries).  After
 * a local failure the broadcasts go on (the other ranks are in them) but
 * nothing more is written; the first failure is returned. */
static zero_status write_group(struct zero_engine *e, zero_param *const *params, const void *const *values, size_t n,
                               int root, int g, zero_param **ps, size_t *at) {
    zero_core *c = zero__core_of(e);
    zero_comm *comm = comm_of(e, g);
    const int is_root = zero__comm_rank(comm) == root;
    void **vals = malloc((n ? n : 1) * sizeof *vals);
    zero_status first = vals ? ZERO_OK : zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "zero_params_write: out of memory");
    size_t i = 0, bytes = 0, k;
    while ((k = next_piece(e, params, n, g, &i, ps, at, &bytes)) != 0) {
        char *scratch = e->pw_scratch; /* at least the largest piece (zero__params_write) */
        size_t off = 0;
        for (size_t q = 0; q < k; q++) {
            const size_t b = bytes_of(ps[q]);
            if (is_root) zero__engine_copy(c, scratch + off, values[at[q]], b);
            /* every rank takes part in every broadcast, even after a failure of its own */
            zero_status b_s = zero__broadcast(comm, scratch + off, b, ZERO_DTYPE_U8, root);
            if (b_s != ZERO_OK && first == ZERO_OK)
                first =
                    zero__error(e, b_s, "zero_params_write: broadcasting param '%s' from place %d", ps[q]->name, root);
            if (vals) vals[q] = scratch + off;
            off += b;
        }
        if (first == ZERO_OK) first = write_piece(e, ps, vals, k);
    }
    free(vals);
    return first;
}

/* zero__params_write once this rank's own verdict (`local`) and the
 * scratch are settled: the agreement, then the writes. */
static zero_status write_agreed(struct zero_engine *e, zero_param *const *params, const void *const *values, size_t n,
                                int root, zero_status local, zero_param **ps, size_t *at, int *wrote) {
    const int me = zero__comm_rank(e->global);
    int same = 1;
    zero_status s = local == ZERO_OK ? check_lists(e, params, n, &same) : check_lists(e, NULL, 0, &same);
    if (s != ZERO_OK) return zero__error_context(e, s, "zero_params_write: agreeing on the parameters");
    /* one verdict: [a rank that refused, the status of a refusal, a rank
     * whose group's lists differ] */
    double v[3] = {local != ZERO_OK ? me + 1.0 : 0.0, (double)local, same ? 0.0 : me + 1.0};
    if ((s = zero__allreduce(e->global, v, 3, ZERO_DTYPE_F64, ZERO_OP_MAX)) != ZERO_OK)
        return zero__error_context(e, s, "zero_params_write: agreeing on the verdict");
    if (local != ZERO_OK) return local;
    if (v[0] > 0)
        return zero__error(e, (zero_status)v[1],
                           "zero_params_write: rank %.0f refused the call (its message says why); nothing written",
                           v[0] - 1);
    if (v[2] > 0) {
        char names[300] = "";
        for (size_t i = 0; i < n && i < 3; i++)
            zero__appendf(names, sizeof names, "%s'%s'", i ? ", " : "", params[i]->name);
        return zero__error(e, ZERO_ERR_MISMATCH,
                           "zero_params_write: the ranks of a data-parallel group passed different parameters "
                           "(each rank must pass the params its group holds, in the same order; this rank: %zu: "
                           "%s%s); nothing written",
                           n, n ? names : "none", n > 3 ? ", ..." : "");
    }
    *wrote = 1;
    /* dense params first, then each expert group's: the same order of
     * collectives on every rank of every communicator */
    zero_status w = write_group(e, params, values, n, root, -1, ps, at);
    for (uint32_t g = 0; g < e->ngroup_comms; g++) {
        if (!e->group_comms[g]) continue;
        zero_status gs = write_group(e, params, values, n, root, (int)g, ps, at);
        if (w == ZERO_OK) w = gs;
    }
    double fail = w != ZERO_OK ? me + 1.0 : 0.0;
    if ((s = zero__allreduce(e->global, &fail, 1, ZERO_DTYPE_F64, ZERO_OP_MAX)) != ZERO_OK) return s;
    if (w != ZERO_OK) return w;
    if (fail > 0)
        return zero__error(e, ZERO_ERR_IO,
                           "zero_params_write: rank %.0f failed to write its copies (its message says why); the "
                           "written params may differ between ranks: write them again or load a checkpoint",
                           fail - 1);
    return ZERO_OK;
}

zero_status zero__params_write(struct zero_engine *e, zero_param *const *params, const void *const *values, size_t n,
                               int root, int *wrote) {
    *wrote = 0;
    zero_status local = check_local(e, params, values, n, root);
    zero_param **ps = malloc((n ? n : 1) * sizeof *ps);
    size_t *at = malloc((n ? n : 1) * sizeof *at);
    if (local == ZERO_OK && (!ps || !at))
        local = zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "zero_params_write: out of memory");
    const size_t need = local == ZERO_OK ? largest_piece(e, params, n, ps, at) : 0;
    if (local == ZERO_OK && need && !scratch_for(e, need))
        local = zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "zero_params_write: no memory for %zu bytes of values", need);
    zero_status w = write_agreed(e, params, values, n, root, local, ps, at, wrote);
    free(ps);
    free(at);
    return w;
}
