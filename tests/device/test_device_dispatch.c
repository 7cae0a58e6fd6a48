/* The engine's device routing, checked without a GPU.
 *
 * A stub device (installed with zero__device_set_factory, so engines are
 * created through the public ABI with device_kind CUDA) hands out "device
 * pointers" the host cannot dereference: real host blocks with bit 62 set,
 * a non-canonical x86-64 address, so any access that bypasses the device
 * (a plugin's raw memset/memcpy, a CPU kernel run on a device buffer, a host
 * communicator touching it) faults at once.  The stub's ops strip the bit
 * and run the CPU code, so results must be BITWISE those of the same run on
 * a CPU engine.  Checked, for every stage plugin (and offload) under mpirun
 * with N ranks (the world is MPI wrapped in the device staging layer):
 *  - parameters after training == the CPU engine's, bitwise;
 *  - the services dispatched by tier: optimizer steps, norms and the bucket
 *    engine's element-wise work ran on the device for device-tier buffers
 *    (offload: host-tier master stepped on the CPU, no device optimizer
 *    step, and its host tier pinned when pin_memory is set);
 *  - every zero_on_grad_ready ordered the device after the host's stream,
 *    every step and gather ordered the host's stream after the device;
 *  - params registered from device memory (desc.device = CUDA) train the same;
 *  - (1.12) expert groups: stage 1, 2, offload (and stage 0, 1.13) with bf16 gradients (at
 *    N = 2 groups of one rank, whose 16-bit sets still run a one-rank
 *    reduction), stage 3 gathering over the expert communicator, fp32 and
 *    bf16, with a zero_params_write from each group's place 0;
 *  - (1.7.3) ranks that register different initial values (from "device
 *    memory" too) all start from rank 0's: training equals the CPU run
 *    whose ranks all registered rank 0's, bitwise;
 *  - the bucket engine clears released device slots without a host wait:
 *    the stub's memset_async is deferred like work on a stream (it runs at
 *    the next device op or fence wait, never earlier), so a slot handed out
 *    before its clear was fenced, or a clear that hits live data, shows up
 *    as a bitwise difference;
 *  - (issue 35) allocation does not wait for the zero-fill: the stub hands
 *    out a block full of garbage and queues its zero-fill on the same
 *    "stream" (fill_wait runs the queue up to the newest fill), so a user
 *    that reads a block before the fill ran, or a copy into a block whose
 *    fill runs after it, changes the bits; stage_in's temporaries come
 *    without a fill (alloc_nofill) and are garbage until overwritten;
 *  - (issue 35) ordered completion of the bucket engine (white box,
 *    check_ordered_buckets): with overlap_comm off on a communicator whose
 *    collectives run in stream order (a mock whose collectives are queued
 *    on the stub's stream and run, over MPI, when the stream catches up),
 *    backward makes no host wait and a flush exactly one, however many
 *    buckets there are, and the sums are bitwise those of the same set with
 *    a host wait per bucket (ZERO_BUCKET_HOST_WAIT=1), whose waits grow
 *    with the bucket count.
 * And: a device_kind CUDA engine on a machine without a usable GPU fails at
 * create with ZERO_ERR_DEVICE and the driver's reason (CPU-only builds:
 * ZERO_ERR_UNSUPPORTED), never a crash. */
#include <malloc.h>
#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"
#include "bucket_fixture.h"
#include "check.h"
#include "comm.h"
#include "device.h"
#include "exact_data.h"
#include "print_math.h"
#include "zero.h"

/* ---------------------------------------------------------------- stub */

#define TAG ((uintptr_t)1 << 62)
static void *real(const void *p) { return (void *)((uintptr_t)p & ~TAG); }
static void *fake(void *p) { return (void *)((uintptr_t)p | TAG); }
static int tagged(const void *p) { return ((uintptr_t)p & TAG) != 0; }

enum { OP_ALLOC, OP_HOSTALLOC, OP_COPY, OP_MEMSET, OP_OPTIM, OP_SUMSQ, OP_NONFINITE, OP_CONVERT, OP_ADD, OP_SCALE,
       OP_AFTER, OP_BEFORE, OP_MEMSET_ASYNC, OP_FENCE_WAIT, OP_NORM_PIECES, OP_FILL_WAIT, OP_FENCE_ORDER, OP_NOFILL,
       OP_HOSTWAIT, OP_PRINTS, OP_N };
static atomic_long g_ops[OP_N];
static atomic_long g_live; /* device blocks not yet freed */
/* a host wait: the host blocks until the stub's stream has caught up */
static void host_wait(void) { atomic_fetch_add(&g_ops[OP_HOSTWAIT], 1); }

typedef struct stub {
    zero__device base;
} stub;

/* The stub's "stream": async memsets (slot clears), the zero-fills of new
 * blocks and (check_ordered_buckets) collectives wait here, in issue order,
 * until a device op (stream order), a wait or a full queue runs them. */
typedef struct pending_item {
    void *p; /* memset: tagged pointer */
    int v;
    size_t n;
    int fill;                /* the zero-fill of an allocation */
    void (*fn)(void *arg);   /* a queued collective (fn(arg) runs it, frees arg) */
    void *arg;
} pending_item;
enum { NPENDING = 256 };
static pending_item g_pending[NPENDING];
static int g_npending;
static pthread_mutex_t g_pending_mu = PTHREAD_MUTEX_INITIALIZER;
static void run_items(const pending_item *it, int k) {
    for (int i = 0; i < k; i++) {
        if (it[i].fn)
            it[i].fn(it[i].arg);
        else
            memset(real(it[i].p), it[i].v, it[i].n);
    }
}
/* Run the first k queued items (k < 0: all).  Taken off the queue under the
 * lock, run outside it (a collective blocks in MPI). */
static void run_first(int k) {
    pending_item it[NPENDING];
    pthread_mutex_lock(&g_pending_mu);
    if (k < 0 || k > g_npending) k = g_npending;
    memcpy(it, g_pending, (size_t)k * sizeof *it);
    memmove(g_pending, g_pending + k, (size_t)(g_npending - k) * sizeof *it);
    g_npending -= k;
    pthread_mutex_unlock(&g_pending_mu);
    run_items(it, k);
}
static void run_pending(void) { run_first(-1); }
static void enqueue(pending_item item) {
    for (;;) {
        pthread_mutex_lock(&g_pending_mu);
        if (g_npending < NPENDING) {
            g_pending[g_npending++] = item;
            pthread_mutex_unlock(&g_pending_mu);
            return;
        }
        pthread_mutex_unlock(&g_pending_mu);
        run_pending(); /* a full queue: the stream has caught up */
    }
}

static void *st_alloc_common(zero_mem_tier tier, size_t bytes, int fill) {
    size_t r = (bytes + 255) & ~(size_t)255;
    if (!r) r = 256;
    void *p = aligned_alloc(256, r);
    if (!p) return NULL;
    if (tier == ZERO_TIER_HOST) { /* "pinned": host-dereferenceable, zeroed at once */
        memset(p, 0, r);
        atomic_fetch_add(&g_ops[OP_HOSTALLOC], 1);
        return p;
    }
    /* (issue 35) device memory comes back dirty; its zero-fill is queued on
     * the stream like the CUDA backend's cudaMemsetAsync */
    memset(p, 0xA5, r);
    atomic_fetch_add(&g_ops[OP_ALLOC], 1);
    atomic_fetch_add(&g_live, 1);
    if (fill) enqueue((pending_item){fake(p), 0, r, 1, NULL, NULL});
    return fake(p);
}
static void *st_alloc(zero__device *d, zero_mem_tier tier, size_t bytes) {
    (void)d;
    return st_alloc_common(tier, bytes, 1);
}
static void *st_alloc_nofill(zero__device *d, zero_mem_tier tier, size_t bytes) {
    (void)d;
    atomic_fetch_add(&g_ops[OP_NOFILL], 1);
    return st_alloc_common(tier, bytes, 0);
}
static void st_free(zero__device *d, void *p) {
    (void)d;
    if (tagged(p)) {
        atomic_fetch_sub(&g_live, 1);
        /* queued clears and fills of this block are dead: drop them (a CUDA
         * arena block stays mapped, this one goes back to malloc) */
        const char *lo = real(p), *hi = lo + malloc_usable_size(real(p));
        pthread_mutex_lock(&g_pending_mu);
        int k = 0;
        for (int i = 0; i < g_npending; i++) {
            const char *q = g_pending[i].fn ? NULL : (const char *)real(g_pending[i].p);
            if (!q || q < lo || q >= hi) g_pending[k++] = g_pending[i];
        }
        g_npending = k;
        pthread_mutex_unlock(&g_pending_mu);
    }
    free(real(p));
}
static int st_is_device(zero__device *d, const void *p) {
    (void)d;
    return tagged(p);
}
static zero_status st_memset_async(zero__device *d, void *p, int v, size_t n) {
    (void)d;
    if (!tagged(p)) return ZERO_ERR_INVALID_ARGUMENT;
    atomic_fetch_add(&g_ops[OP_MEMSET_ASYNC], 1);
    enqueue((pending_item){p, v, n, 0, NULL, NULL});
    return ZERO_OK;
}
static zero_status st_fence(zero__device *d, void **fence) {
    (void)d;
    *fence = malloc(1);
    return *fence ? ZERO_OK : ZERO_ERR_OUT_OF_MEMORY;
}
static zero_status st_fence_wait(zero__device *d, void *fence) {
    (void)d;
    atomic_fetch_add(&g_ops[OP_FENCE_WAIT], 1);
    host_wait();
    run_pending();
    free(fence);
    return ZERO_OK;
}
/* The host's compute stream waits for the fence: in this test the host's
 * "kernels" are the direct writes that follow, so the stream catches up
 * first (no host wait is counted: on a GPU the host goes on). */
static zero_status st_fence_order(zero__device *d, void *fence, void *consumer) {
    (void)d, (void)consumer;
    atomic_fetch_add(&g_ops[OP_FENCE_ORDER], 1);
    run_pending();
    free(fence);
    return ZERO_OK;
}
/* Every fill queued so far, and what the stream holds before the newest
 * one (a CUDA event waits for all earlier work on its stream), not what
 * came after it: a slot clear queued after the last fill stays pending. */
static zero_status st_fill_wait(zero__device *d) {
    (void)d;
    pthread_mutex_lock(&g_pending_mu);
    int last = -1;
    for (int i = 0; i < g_npending; i++)
        if (g_pending[i].fill) last = i;
    pthread_mutex_unlock(&g_pending_mu);
    if (last < 0) return ZERO_OK; /* nothing pending: no wait */
    atomic_fetch_add(&g_ops[OP_FILL_WAIT], 1);
    host_wait();
    run_first(last + 1);
    return ZERO_OK;
}
static uint64_t st_host_waits(zero__device *d) {
    (void)d;
    return (uint64_t)atomic_load(&g_ops[OP_HOSTWAIT]);
}
static zero_status st_copy(zero__device *d, void *dst, const void *src, size_t n) {
    (void)d;
    run_pending();
    host_wait();
    atomic_fetch_add(&g_ops[OP_COPY], 1);
    memmove(real(dst), real(src), n);
    return ZERO_OK;
}
static zero_status st_memset(zero__device *d, void *p, int v, size_t n) {
    (void)d;
    run_pending();
    host_wait();
    if (!tagged(p)) return ZERO_ERR_INVALID_ARGUMENT; /* the core must only send device memory here */
    atomic_fetch_add(&g_ops[OP_MEMSET], 1);
    memset(real(p), v, n);
    return ZERO_OK;
}
/* Device-only entry points: a host pointer here is a routing bug. */
#define NEED_DEV(p) \
    do {            \
        if ((p) && !tagged(p)) return ZERO_ERR_INVALID_ARGUMENT; \
    } while (0)
static zero_status st_optim(zero__device *d, zero_optim_kind k, const zero_optim_scalars *s, float *master,
                            float *const state[4], const void *grad, zero_dtype gdt, float gm, void *out,
                            zero_dtype odt, size_t n) {
    (void)d;
    run_pending();
    NEED_DEV(master);
    NEED_DEV(grad);
    NEED_DEV(out);
    float *st[4] = {0};
    for (int j = 0; j < 4; j++) {
        NEED_DEV(state[j]);
        st[j] = state[j] ? real(state[j]) : NULL;
    }
    atomic_fetch_add(&g_ops[OP_OPTIM], 1);
    return zero__dev_optim_step(NULL, k, s, real(master), st, real(grad), gdt, gm, out ? real(out) : NULL, odt, n);
}
static zero_status st_sumsq(zero__device *d, const void *x, zero_dtype dt, size_t n, double *out) {
    (void)d;
    run_pending();
    NEED_DEV(x);
    host_wait();
    atomic_fetch_add(&g_ops[OP_SUMSQ], 1);
    return zero__dev_sumsq(NULL, real(x), dt, n, out);
}
static zero_status st_nonfinite(zero__device *d, const void *x, zero_dtype dt, size_t n, int *out) {
    (void)d;
    run_pending();
    NEED_DEV(x);
    host_wait();
    atomic_fetch_add(&g_ops[OP_NONFINITE], 1);
    return zero__dev_nonfinite(NULL, real(x), dt, n, out);
}
/* One call for the whole gradient norm: every piece must be device memory
 * (a host pointer here would be a missed route); computed by the host
 * kernels on the real memory, so the bits are the CPU engine's. */
static zero_status st_norm_pieces(zero__device *d, const zero__norm_piece *p, size_t k, double *sums, int *flags) {
    (void)d;
    run_pending();
    host_wait();
    for (size_t i = 0; i < k; i++) {
        if (p[i].n) NEED_DEV(p[i].x);
        zero_status st = zero__dev_sumsq(NULL, p[i].n ? real(p[i].x) : p[i].x, p[i].dt, p[i].n, &sums[i]);
        if (st == ZERO_OK) st = zero__dev_nonfinite(NULL, p[i].n ? real(p[i].x) : p[i].x, p[i].dt, p[i].n, &flags[i]);
        if (st != ZERO_OK) return st;
    }
    atomic_fetch_add(&g_ops[OP_NORM_PIECES], 1);
    return ZERO_OK;
}
/* (1.13) The host-write check's fingerprints: the CPU reference
 * (kernels/cpu/print_math.h, which the CUDA kernels share) on the real
 * memory, written or added into the (device) slots. */
static zero_status st_prints(zero__device *d, const void *const *x, const uint64_t *bytes, const uint32_t *slot,
                             size_t k, int full, uint64_t *out, int add) {
    (void)d;
    run_pending();
    NEED_DEV(out);
    for (size_t i = 0; i < k; i++) {
        if (bytes[i]) NEED_DEV(x[i]);
        const uint64_t f = zero_print_bytes(bytes[i] ? real(x[i]) : NULL, bytes[i],
                                            full ? ZERO_PRINT_LINE : ZERO_PRINT_STRIDE);
        uint64_t *o = (uint64_t *)real(out) + (slot ? slot[i] : i);
        *o = add ? *o + f : f;
    }
    atomic_fetch_add(&g_ops[OP_PRINTS], 1);
    return ZERO_OK;
}
static zero_status st_convert(zero__device *d, void *dst, zero_dtype ddt, const void *src, zero_dtype sdt, size_t n) {
    (void)d;
    run_pending();
    NEED_DEV(dst);
    NEED_DEV(src);
    atomic_fetch_add(&g_ops[OP_CONVERT], 1);
    return zero__dev_convert(NULL, real(dst), ddt, real(src), sdt, n);
}
static zero_status st_add(zero__device *d, void *dst, zero_dtype ddt, const void *src, zero_dtype sdt, size_t n) {
    (void)d;
    run_pending();
    NEED_DEV(dst);
    NEED_DEV(src);
    atomic_fetch_add(&g_ops[OP_ADD], 1);
    return zero__dev_add_into(NULL, real(dst), ddt, real(src), sdt, n);
}
static zero_status st_scale(zero__device *d, float *x, float a, size_t n) {
    (void)d;
    run_pending();
    NEED_DEV(x);
    atomic_fetch_add(&g_ops[OP_SCALE], 1);
    return zero__dev_scale(NULL, real(x), a, n);
}
static zero_status st_after(zero__device *d, void *s) {
    (void)d, (void)s;
    atomic_fetch_add(&g_ops[OP_AFTER], 1);
    return ZERO_OK;
}
static zero_status st_before(zero__device *d, void *s) {
    (void)d, (void)s;
    atomic_fetch_add(&g_ops[OP_BEFORE], 1);
    return ZERO_OK;
}
static zero_status st_sync(zero__device *d) {
    (void)d;
    host_wait();
    run_pending();
    return ZERO_OK;
}
static void *st_stream(zero__device *d) {
    (void)d;
    return NULL; /* no CUDA stream: the engine stages over MPI, never NCCL */
}
static const char *st_error(zero__device *d) {
    (void)d;
    return "stub";
}
static void st_close(zero__device *d) { free(d); }

static const zero__device_ops stub_ops = {"stub", st_alloc, st_free, st_is_device, st_copy, st_memset, st_optim,
                                          st_sumsq, st_nonfinite, st_convert, st_add, st_scale, st_after, st_before,
                                          st_sync, st_stream, st_error, st_close, st_memset_async, st_fence,
                                          st_fence_wait, NULL, st_norm_pieces, st_fill_wait, st_alloc_nofill,
                                          st_fence_order, st_host_waits, NULL, NULL, NULL, NULL, st_prints};

static zero_status stub_open(int ordinal, void *stream, zero__device **out, char *err, size_t len) {
    (void)stream, (void)err, (void)len;
    stub *s = calloc(1, sizeof *s);
    if (!s) return ZERO_ERR_OUT_OF_MEMORY;
    s->base.ops = &stub_ops;
    s->base.ordinal = ordinal;
    *out = &s->base;
    return ZERO_OK;
}

/* ---------------------------------------------------------------- host */

enum { NP = 5, STEPS = 3, GAS = 2 };
static const size_t sizes[NP] = {7, 300, 1000, 33, 517};
static int rank_ = 0, world_ = 1;


typedef struct run_opts {
    const char *plugin;
    int stage;
    int device;      /* 0 CPU engine, 1 stub device */
    int dev_params;  /* register initial values from device memory */
    int offload;     /* offload_optimizer cpu, pin_memory */
    int bf16;        /* bf16 model: 16-bit params and gradients, fp32 master (the bucket engine's mixed path) */
    int ckpt;        /* save mid-window, resume in a new engine (device buffers through ckpt_write/read) */
    int no_overlap;  /* overlap_comm false (issue 35: the host waits per bucket are gone on a stream-ordered comm;
                        here, MPI behind the staging layer, they stay) */
    int offload_param; /* stage 3: offload_param cpu, pin_memory (the shard in the host tier; with `offload`) */
    int rank_init;   /* (1.7.3) ranks other than 0 register other initial values: every rank must take rank 0's
                        (read from "device memory" where dev_params), so training equals the CPU run's without */
    int write;       /* (1.10) zero_params_write of p1 and p3 after the first window, from the last rank (values in
                        "device memory" where dev_params): gathered at once, then trained on like the CPU run's */
    int experts;     /* (1.12) p3 and p4 in an expert group, color rank % 2 at even world sizes (N = 2: groups of
                        one rank, whose 16-bit gradients still go through a one-rank reduction), one color
                        otherwise: reduced (stage 3: gathered) over the expert-data-parallel communicator */
    int host_owned;  /* (1.13) p4 ZERO_PARAM_HOST_OWNED, its tensor in "device memory" (g_owned) */
    int stacked;     /* (1.13) p4 stacked, STACK layers; check_host_write writes through a slice */
} run_opts;
enum { STACK = 11, SLICE_AT = 5 }; /* 517 = 11 x 47 */
static float g_owned[600]; /* p4's host-owned tensor (517 elements, fp32 or bf16), tagged as device memory */

/* (1.10) The write of run_opts.write: p1 and p3 from the last rank, their
 * values a function of the element (the model dtype), given from "device
 * memory" (dev_params) or host memory; the ranks read them back at once. */
static zero_status write_two(const run_opts *ro, zero_engine *e, zero_param **h) {
    const int ids[2] = {1, 3};
    const size_t es = ro->bf16 ? 2 : 4;
    void *vals[2] = {NULL, NULL};
    zero_param *ps[2] = {h[1], h[3]};
    for (int q = 0; q < 2; q++) {
        vals[q] = malloc(sizes[ids[q]] * es);
        for (size_t i = 0; i < sizes[ids[q]]; i++) {
            const float v = 0.125f * (float)((i * 7 + (size_t)ids[q]) % 23) - 1.0f;
            if (ro->bf16)
                ((uint16_t *)vals[q])[i] = th_to_bf16(v);
            else
                ((float *)vals[q])[i] = v;
        }
    }
    const void *given[2] = {ro->dev_params ? fake(vals[0]) : vals[0], ro->dev_params ? fake(vals[1]) : vals[1]};
    /* (1.12) with experts from place 0 of each group (p3's group may be one rank): every rank offers the
     * same values, each group's root's are read */
    const int root = ro->experts ? 0 : world_ - 1;
    zero_status s = zero_params_write(e, ps, ro->experts || rank_ == world_ - 1 ? given : NULL, 2, root);
    CHECK(s == ZERO_OK, "%s dev=%d: zero_params_write: %s", ro->plugin, ro->device, zero_last_error(e));
    void *ptrs[2];
    if (s == ZERO_OK && (s = zero_gather(e, ps, 2, ptrs)) == ZERO_OK) {
        for (int q = 0; q < 2; q++)
            CHECK(!memcmp(real(ptrs[q]), vals[q], sizes[ids[q]] * es), "%s dev=%d: p%d after zero_params_write",
                  ro->plugin, ro->device, ids[q]);
        zero_release(e, ps, 2);
    }
    free(vals[0]);
    free(vals[1]);
    return s;
}


/* Create an engine and register the model (initial values read at
 * params_done); NULL on failure (checked). */
static zero_engine *open_engine(const run_opts *ro, zero_param **h, size_t *total) {
    char json[768];
    snprintf(json, sizeof json,
             "{\"train_micro_batch_size_per_gpu\": 1, \"gradient_accumulation_steps\": %d,"
             " \"gradient_clipping\": 1.0, \"bf16\": {\"enabled\": %s},%s"
             " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01, \"weight_decay\": 0.1}},"
             " \"zero_optimization\": {\"stage\": %d, \"reduce_bucket_size\": 400, \"overlap_comm\": %s%s}}",
             GAS, ro->bf16 ? "true" : "false",
             /* bf16 gradients: this test checks the bucket engine's 16-bit staging on the device */
             ro->bf16 ? " \"data_types\": {\"grad_accum_dtype\": \"bf16\"}," : "", ro->stage,
             ro->no_overlap ? "false" : "true",
             ro->offload ? (ro->offload_param ? ", \"offload_optimizer\": {\"device\": \"cpu\", \"pin_memory\": true},"
                                                " \"offload_param\": {\"device\": \"cpu\", \"pin_memory\": true}"
                                              : ", \"offload_optimizer\": {\"device\": \"cpu\", \"pin_memory\": true}")
                         : "");
    MPI_Comm mc = MPI_COMM_WORLD;
    zero_engine_options o = ZERO_ENGINE_OPTIONS_INIT;
    o.config_json = json;
    o.plugin = ro->plugin;
    o.comm_kind = ZERO_COMM_MPI;
    o.comm = &mc;
    o.device_kind = ro->device ? ZERO_DEVICE_CUDA : ZERO_DEVICE_CPU;
    zero_engine *e = NULL;
    char err[512] = "";
    zero_status s = zero_engine_create(&o, &e, err, sizeof err);
    CHECK(s == ZERO_OK, "%s dev=%d: create: %s", ro->plugin, ro->device, err);
    if (s != ZERO_OK) return NULL;
    if (ro->experts) {
        zero_group_desc g = ZERO_GROUP_DESC_INIT;
        g.group = 1;
        g.expert_color = world_ % 2 ? 0 : rank_ % 2;
        s = zero_set_group(e, &g);
        CHECK(s == ZERO_OK, "%s: set_group: %s", ro->plugin, zero_last_error(e));
    }
    float *inits[NP] = {0};
    *total = 0;
    for (int p = 0; p < NP && s == ZERO_OK; ++p) {
        float *init = inits[p] = malloc(sizes[p] * 4);
        for (size_t i = 0; i < sizes[p]; ++i) {
            float v = exact_init(p, i) + (ro->rank_init && rank_ ? 0.25f * (float)rank_ : 0.0f);
            if (ro->bf16)
                ((uint16_t *)init)[i] = th_to_bf16(v);
            else
                init[i] = v;
        }
        char name[16];
        snprintf(name, sizeof name, "p%d", p);
        zero_param_desc d = ZERO_PARAM_DESC_INIT;
        d.name = name;
        d.data = ro->dev_params ? fake(init) : init; /* "device memory" the host cannot read */
        d.device = ro->dev_params ? ZERO_DEVICE_CUDA : ZERO_DEVICE_CPU;
        if (ro->host_owned && p == 4) { /* the host's own tensor, which libzero writes after every step */
            memcpy(g_owned, init, sizes[p] * (ro->bf16 ? 2 : 4));
            d.data = fake(g_owned);
            d.device = ZERO_DEVICE_CUDA;
            d.flags = ZERO_PARAM_HOST_OWNED;
        }
        d.numel = sizes[p];
        d.dtype = ro->bf16 ? ZERO_DTYPE_BF16 : ZERO_DTYPE_F32;
        d.group = ro->experts && p >= 3;
        s = ro->stacked && p == 4 ? zero_register_stacked(e, &d, STACK, &h[p]) : zero_register_param(e, &d, &h[p]);
        CHECK(s == ZERO_OK, "register %s: %s", name, zero_last_error(e));
        *total += sizes[p];
    }
    long after_pd = atomic_load(&g_ops[OP_AFTER]);
    if (s == ZERO_OK) s = zero_params_done(e);
    CHECK(s == ZERO_OK, "params_done: %s", zero_last_error(e));
    /* the initial values may come from the host's kernels: the copies wait */
    if (ro->device)
        CHECK(atomic_load(&g_ops[OP_AFTER]) > after_pd, "%s: zero_params_done did not wait for the host stream",
              ro->plugin);
    for (int p = 0; p < NP; ++p) free(inits[p]);
    if (s != ZERO_OK) {
        zero_engine_destroy(e);
        return NULL;
    }
    return e;
}

/* (1.13) The host-write check on a device engine: after the first window,
 * rank 0 writes one element of p4 (517 elements) the way a host kernel
 * would -- through zero_gather's pointer (stages 0-2: libzero's own copy;
 * stage 3: the gathered scratch copy, before its release), at `elem`.
 * The next boundary's zero_step must fail on every rank with
 * ZERO_ERR_STATE, rank 0 naming p4, unless the write is on no line the
 * check reads (`found` 0); every boundary before it passes.  The
 * fingerprints ran on the device (the stub's prints op) and the host never
 * read device memory (the stub's pointers fault on the host). */
static void check_host_write(const run_opts *ro, const char *mode, size_t elem, int found) {
    if (mode) setenv("ZERO_CHECK_HOST_WRITES", mode, 1);
    zero_param *h[NP];
    size_t total = 0;
    zero_engine *e = open_engine(ro, h, &total); /* the mode is read at each check: set for the whole run */
    if (!e) {
        unsetenv("ZERO_CHECK_HOST_WRITES");
        return;
    }
    const long prints0 = atomic_load(&g_ops[OP_PRINTS]);
    zero_status s = ZERO_OK;
    int refused_at = -1;
    for (int gm = 0; gm < 2 * GAS && s == ZERO_OK; ++gm) {
        void *ptrs[NP];
        if ((s = zero_gather(e, h, NP, ptrs)) != ZERO_OK) break;
        if (gm == GAS && rank_ == 0 && !ro->stacked) { /* the host's kernel writes the weight it was handed (or its own tensor) */
            void *w = ro->host_owned ? (void *)g_owned : real(ptrs[4]);
            if (ro->bf16) ((uint16_t *)w)[elem] ^= 0x0040;
            else ((float *)w)[elem] += 0.5f;
        }
        if (gm == GAS && ro->stacked) { /* one layer's slice, as a layer-by-layer host holds it; elem in the slice */
            const uint32_t layer = SLICE_AT;
            void *sl = NULL;
            if ((s = zero_gather_slices(e, &h[4], &layer, 1, &sl)) != ZERO_OK) break;
            if (rank_ == 0 && ro->bf16) ((uint16_t *)real(sl))[elem] ^= 0x0040;
            else if (rank_ == 0) ((float *)real(sl))[elem] += 0.5f;
            if ((s = zero_release_slices(e, &h[4], &layer, 1)) != ZERO_OK) break;
        }
        zero_release(e, h, NP);
        for (int p = NP - 1; p >= 0 && s == ZERO_OK; --p) {
            void *buf = NULL;
            if ((s = zero_grad_buffer(e, h[p], &buf)) != ZERO_OK) break;
            for (size_t i = 0; i < sizes[p]; ++i) {
                if (ro->bf16) ((uint16_t *)real(buf))[i] = th_to_bf16(exact_grad(rank_, gm, p, i));
                else ((float *)real(buf))[i] = exact_grad(rank_, gm, p, i);
            }
            s = zero_on_grad_ready(e, h[p], NULL);
        }
        zero_step_result r = ZERO_STEP_RESULT_INIT;
        if (s == ZERO_OK && (s = zero_step(e, NULL, &r)) != ZERO_OK) refused_at = gm;
    }
    const char *name = mode ? mode : "sampled";
    if (found) {
        CHECK(s == ZERO_ERR_STATE && refused_at == 2 * GAS - 1,
              "%s %s: a host write of p4[%zu] after the first window: step %d returned %s (%s), expected "
              "ZERO_ERR_STATE at the second boundary",
              ro->plugin, name, elem, refused_at, zero_status_string(s), zero_last_error(e));
        if (rank_ == 0 && s == ZERO_ERR_STATE) {
            CHECK_STR_CONTAINS(zero_last_error(e), "'p4'");
            if (ro->host_owned) { /* the element and both values, read back from the device */
                char at[48];
                snprintf(at, sizeof at, "element %zu is ", elem);
                CHECK_STR_CONTAINS(zero_last_error(e), "ZERO_PARAM_HOST_OWNED");
                CHECK_STR_CONTAINS(zero_last_error(e), at);
            }
        }
    } else {
        CHECK(s == ZERO_OK, "%s %s: step %d: %s", ro->plugin, name, refused_at, zero_last_error(e));
    }
    const long prints = atomic_load(&g_ops[OP_PRINTS]) - prints0;
    if (mode && !strcmp(mode, "off"))
        CHECK(prints == 0, "%s: ZERO_CHECK_HOST_WRITES=off, but %ld fingerprint calls ran", ro->plugin, prints);
    else
        CHECK(prints > 0, "%s %s: no fingerprint ran on the device", ro->plugin, name);
    zero_engine_destroy(e);
    unsetenv("ZERO_CHECK_HOST_WRITES");
}

static void check_host_writes(void) {
    static const run_opts ro[] = {
        {"stage0", 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, {"stage1", 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0},
        {"stage2", 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, {"offload", 2, 1, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0},
        {"stage3", 3, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, {"stage3", 3, 1, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0},
        /* stage 3 with offload_param: the shard in pinned host memory */
        {"stage3", 3, 1, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0},
        /* a host-owned tensor in device memory, fp32 and bf16: the host writes its own tensor */
        {"stage2", 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0}, {"stage1", 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 0},
        /* a slice of a stacked param (47 elements): stage 3 gathers the slice, stage 2 points into its copy */
        {"stage3", 3, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, {"stage3", 3, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1},
        {"stage2", 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1},
    };
    for (size_t i = 0; i < sizeof ro / sizeof ro[0]; i++) {
        /* inside: element 200 of p4 (800 bytes in: fp32 and bf16 alike, on no sampled line); a slice's
         * element 20 (80 or 40 bytes in: past the first line, before the last 64 bytes of 188 or 94 --
         * bf16: inside the tail line, so sampled finds that one) */
        const size_t inside = ro[i].stacked ? 20 : 200;
        const int sampled_finds_inside = ro[i].stacked && ro[i].bf16 && ro[i].stage == 3;
        /* below stage 3 a slice is libzero's copy, whose sampled lines are the whole tensor's: slice 5's
         * first element is on none of them, as on the CPU */
        const int sampled_finds_first = !(ro[i].stacked && ro[i].stage != 3);
        check_host_write(&ro[i], NULL, 0, sampled_finds_first);         /* the first line: sampled finds it */
        check_host_write(&ro[i], "full", inside, 1);                    /* full finds any byte */
        check_host_write(&ro[i], NULL, inside, sampled_finds_inside);   /* sampled: the CPU check's lines */
        check_host_write(&ro[i], "off", 0, 0);                          /* off: nothing runs */
    }
    if (rank_ == 0)
        printf("device host-write check: stage 0, 1, 2, offload, 3 (and offload_param), host-owned device tensors, "
               "slices of stacked params: found, missed as the CPU check\n");
}

/* Train; returns all params concatenated (host memory, model dtype) or NULL.
 * ro->ckpt: save in the middle of an accumulation window, destroy the
 * engine, resume from the checkpoint in a new one and finish. */
static void *train(const run_opts *ro, size_t *total) {
    zero_param *h[NP];
    zero_engine *e = open_engine(ro, h, total);
    if (!e) return NULL;
    zero_status s = ZERO_OK;
    long after0 = atomic_load(&g_ops[OP_AFTER]), before0 = atomic_load(&g_ops[OP_BEFORE]);
    long ready_calls = 0, syncs = 0, releases = 0, steps = 0;
    for (int gm = 0; gm < STEPS * GAS && s == ZERO_OK; ++gm) {
        /* mid-window, every stage: the window's gradient accumulator
         * (stage 3's gradient partition included) is part of the state */
        if (ro->ckpt && gm == GAS + 1) {
            char dir[64];
            snprintf(dir, sizeof dir, "device_dispatch_ckpt.np%d.%s.%d", world_, ro->plugin, ro->device);
            s = zero_save(e, dir);
            CHECK(s == ZERO_OK, "%s dev=%d: save: %s", ro->plugin, ro->device, zero_last_error(e));
            zero_engine_destroy(e);
            if (s != ZERO_OK || !(e = open_engine(ro, h, total))) return NULL;
            s = zero_load(e, dir);
            CHECK(s == ZERO_OK, "%s dev=%d: load: %s", ro->plugin, ro->device, zero_last_error(e));
            if (s != ZERO_OK) break;
            after0 = atomic_load(&g_ops[OP_AFTER]);
            before0 = atomic_load(&g_ops[OP_BEFORE]);
            ready_calls = syncs = releases = steps = 0;
        }
        if (ro->write && gm == GAS && (s = write_two(ro, e, h)) != ZERO_OK) break;
        void *ptrs[NP];
        if ((s = zero_gather(e, h, NP, ptrs)) != ZERO_OK) break;
        /* stage 3 completes its gathers (ZERO_PLUGIN_CAP_GATHER_COMPLETE):
         * the host's stream need not wait for libzero's queued reductions */
        if (ro->stage != 3) syncs++;
        for (int p = 0; p < NP; p++)
            CHECK(tagged(ptrs[p]) == (ro->device != 0), "%s: gathered pointer of p%d is %s memory", ro->plugin, p,
                  tagged(ptrs[p]) ? "device" : "host");
        zero_release(e, h, NP);
        if (ro->stage == 3) releases++; /* stage 3 waits for the compute stream before a buffer can be reused */
        for (int p = NP - 1; p >= 0 && s == ZERO_OK; --p) {
            void *buf = NULL;
            if ((s = zero_grad_buffer(e, h[p], &buf)) != ZERO_OK) break;
            /* stage 3 offload at N = 1: the slot is the host-tier (pinned) gradient partition itself */
            const int host_slot = ro->stage == 3 && ro->offload && world_ == 1;
            CHECK(tagged(buf) == (ro->device != 0 && !host_slot), "%s: grad buffer of p%d in the wrong tier", ro->plugin,
                  p);
            float *g = real(buf); /* what a host's backward kernel would write */
            uint16_t *g16 = real(buf);
            for (size_t i = 0; i < sizes[p]; ++i) {
                if (ro->bf16)
                    g16[i] = th_to_bf16(th_from_bf16(g16[i]) + exact_grad(rank_, gm, p, i));
                else
                    g[i] += exact_grad(rank_, gm, p, i);
            }
            s = zero_on_grad_ready(e, h[p], NULL);
            ready_calls++;
        }
        zero_step_result r = ZERO_STEP_RESULT_INIT;
        if (s == ZERO_OK) s = zero_step(e, NULL, &r), steps++; /* the step waits for the host stream first */
        syncs++;
        CHECK(s == ZERO_OK, "%s dev=%d: step %d: %s", ro->plugin, ro->device, gm, zero_last_error(e));
    }
    if (ro->device && !ro->write) { /* (a write's read-back gathers and releases are not counted) */
        CHECK(atomic_load(&g_ops[OP_AFTER]) - after0 == ready_calls + releases + steps,
              "%s: %ld grad-ready calls, %ld stage-3 releases and %ld steps ordered the device after the host stream "
              "%ld times",
              ro->plugin, ready_calls, releases, steps, atomic_load(&g_ops[OP_AFTER]) - after0);
        CHECK(atomic_load(&g_ops[OP_BEFORE]) - before0 == syncs,
              "%s: the host stream waited for the device %ld times, expected %ld (each step, and each gather but stage 3's)", ro->plugin,
              atomic_load(&g_ops[OP_BEFORE]) - before0, syncs);
        zero_memory_stats ms = ZERO_MEMORY_STATS_INIT;
        zero_memory_stats_get(e, &ms);
        CHECK(ms.current_total[ZERO_TIER_DEVICE] > 0, "%s: nothing accounted in the device tier", ro->plugin);
    }
    char *out = NULL;
    const size_t es = ro->bf16 ? 2 : 4;
    if (s == ZERO_OK) {
        out = malloc(*total * es);
        void *ptrs[NP];
        s = zero_gather(e, h, NP, ptrs);
        CHECK(s == ZERO_OK, "final gather: %s", zero_last_error(e));
        size_t off = 0;
        for (int p = 0; p < NP && s == ZERO_OK; ++p) {
            memcpy(out + off * es, real(ptrs[p]), sizes[p] * es);
            off += sizes[p];
        }
        if (s == ZERO_OK) zero_release(e, h, NP);
    }
    zero_engine_destroy(e);
    if (s != ZERO_OK) {
        free(out);
        return NULL;
    }
    return out;
}

static void snapshot(long *o) {
    for (int i = 0; i < OP_N; i++) o[i] = atomic_load(&g_ops[i]);
}

static void check_equal(const run_opts *ro) {
    size_t n0 = 0, n1 = 0;
    run_opts cpu = *ro;
    cpu.device = 0;
    cpu.dev_params = 0;
    cpu.ckpt = 0; /* the reference runs uninterrupted */
    cpu.rank_init = 0; /* ... from one model */
    char *a = train(&cpu, &n0);
    long before[OP_N], after[OP_N];
    snapshot(before);
    char *b = train(ro, &n1);
    snapshot(after);
    size_t bad = 0;
    if (a && b) {
        const size_t es = ro->bf16 ? 2 : 4;
        for (size_t i = 0; i < n0; i++)
            if (memcmp(a + i * es, b + i * es, es) != 0 && bad++ == 0)
                CHECK(0, "%s%s: element %zu differs from the CPU engine", ro->plugin,
                      ro->dev_params ? " (device-registered params)" : "", i);
        CHECK(bad == 0, "%s: %zu of %zu elements differ from the CPU engine", ro->plugin, bad, n0);
    }
    long d[OP_N];
    for (int i = 0; i < OP_N; i++) d[i] = after[i] - before[i];
    if (!ro->offload) {
        CHECK(d[OP_OPTIM] > 0, "%s: no optimizer step ran on the device (device-tier master)", ro->plugin);
        if (ro->stage != 0 || rank_ == 0) /* stage 0's replicas: rank 0 speaks for all in the norm */
            CHECK(d[OP_NORM_PIECES] > 0, "%s: the gradient norm did not run on the device (in one batch)",
                  ro->plugin);
        CHECK(d[OP_HOSTALLOC] == 0, "%s: host tier pinned without offload", ro->plugin);
    } else {
        CHECK(d[OP_OPTIM] == 0, "offload: the host-tier master was stepped on the device (%ld calls)", d[OP_OPTIM]);
        CHECK(d[OP_HOSTALLOC] > 0, "offload with pin_memory: no pinned host-tier block");
        CHECK(d[OP_COPY] > 0, "offload: no copy between the tiers");
    }
    CHECK(d[OP_ALLOC] > 0, "%s: no device-tier allocation", ro->plugin);
    if (world_ > 1 && ro->stage >= 2 && !(ro->stage == 3 && ro->offload)) /* stage 3 offload: into the host tier */
        CHECK(d[OP_ADD] > 0, "%s: the bucket engine did not add reduced blocks on the device", ro->plugin);
    if (world_ > 1 && ro->stage >= 2 && !ro->offload)
        CHECK(d[OP_MEMSET_ASYNC] > 0 && d[OP_FENCE_WAIT] > 0,
              "%s: released bucket slots were not cleared ahead (memset_async %ld, fence waits %ld)", ro->plugin,
              d[OP_MEMSET_ASYNC], d[OP_FENCE_WAIT]);
    if (world_ > 1 && ro->bf16)
        CHECK(d[OP_CONVERT] > 0 && d[OP_SCALE] > 0,
              "%s bf16: the bucket engine's fp32 staging (convert %ld, scale %ld) did not run on the device",
              ro->plugin, d[OP_CONVERT], d[OP_SCALE]);
    CHECK(atomic_load(&g_live) == 0, "%s: %ld device blocks leaked", ro->plugin, atomic_load(&g_live));
    if (rank_ == 0 && a && b && !bad)
        printf("%s%s%s%s%s%s: bitwise equal to the CPU engine; device ops: optim %ld norm batches %ld add %ld convert %ld memset %ld "
               "(async %ld) copy %ld pinned %ld\n",
               ro->plugin, ro->offload && ro->stage == 3 ? (ro->offload_param ? " offload_param+optimizer" : " offload")
                                                         : "",
               ro->bf16 ? " bf16" : "", ro->ckpt ? " (saved and resumed in a new engine)" : "", ro->dev_params ? " (device-registered params)" : "",
               ro->write ? " (zero_params_write)" : "", d[OP_OPTIM], d[OP_NORM_PIECES], d[OP_ADD],
               d[OP_CONVERT], d[OP_MEMSET], d[OP_MEMSET_ASYNC], d[OP_COPY], d[OP_HOSTALLOC]);
    free(a);
    free(b);
}

/* ------------------------------------------ ordered completion (issue 35) */

/* A communicator whose collectives behave like NCCL's on libzero's stream:
 * each is queued on the stub's stream and runs (a blocking MPI collective
 * over the real memory) when the stream catches up, i.e. at the next device
 * op or wait, in issue order, at the same point of the op sequence on every
 * rank.  ordered_on: yes; drop: forget the request; wait: the stream
 * catches up (a host wait, counted).  fp32 sums only (what these sets send). */
typedef struct mock_comm {
    zero_comm base;
    MPI_Comm mc;
} mock_comm;
typedef struct mock_coll {
    MPI_Comm mc;
    int kind; /* 0 reduce-scatter, 1 all-reduce, 2 all-gather */
    const void *send;
    void *recv;
    int world, rank;
    size_t es;
    size_t counts[]; /* world */
} mock_coll;
static atomic_long g_mock_waits;

static void mock_run(void *arg) {
    mock_coll *c = arg;
    size_t total = 0, off = 0;
    for (int r = 0; r < c->world; r++) {
        if (r < c->rank) off += c->counts[r];
        total += c->counts[r];
    }
    if (c->kind == 2) {
        int *rc = malloc((size_t)c->world * sizeof *rc), *dis = malloc((size_t)c->world * sizeof *dis);
        size_t o = 0;
        for (int r = 0; r < c->world; r++) rc[r] = (int)(c->counts[r] * c->es), dis[r] = (int)o, o += c->counts[r] * c->es;
        char *mine = malloc(c->counts[c->rank] * c->es + 1);
        memcpy(mine, real(c->send), c->counts[c->rank] * c->es);
        MPI_Allgatherv(mine, rc[c->rank], MPI_BYTE, real(c->recv), rc, dis, MPI_BYTE, c->mc);
        free(mine), free(rc), free(dis);
    } else {
        float *tmp = malloc(total * sizeof(float) + sizeof(float));
        memcpy(tmp, real(c->send), total * sizeof(float));
        MPI_Allreduce(MPI_IN_PLACE, tmp, (int)total, MPI_FLOAT, MPI_SUM, c->mc);
        if (c->kind == 1)
            memcpy(real(c->recv), tmp, total * sizeof(float));
        else
            memcpy(real(c->recv), tmp + off, c->counts[c->rank] * sizeof(float));
        free(tmp);
    }
    free(c);
}

static zero_status mock_queue(zero_comm *m, int kind, const void *send, void *recv, const size_t *counts,
                              zero_dtype dt, zero_comm_req **req) {
    if (kind != 2 && dt != ZERO_DTYPE_F32) return ZERO_ERR_UNSUPPORTED;
    if (!tagged(send) || !tagged(recv)) return ZERO_ERR_INVALID_ARGUMENT; /* device buffers only, as NCCL's path */
    mock_coll *c = malloc(sizeof *c + (size_t)m->size * sizeof(size_t));
    zero_comm_req *q = calloc(1, sizeof *q);
    if (!c || !q) {
        free(c), free(q);
        return ZERO_ERR_OUT_OF_MEMORY;
    }
    *c = (mock_coll){((mock_comm *)m)->mc, kind, send, recv, m->size, m->rank, zero__dtype_size(dt)};
    memcpy(c->counts, counts, (size_t)m->size * sizeof(size_t));
    q->comm = m;
    enqueue((pending_item){NULL, 0, 0, 0, mock_run, c});
    *req = q;
    return ZERO_OK;
}
static zero_status mock_rs(zero_comm *m, const void *send, void *recv, const size_t *counts, zero_dtype dt,
                           zero_comm_req **req) {
    return mock_queue(m, 0, send, recv, counts, dt, req);
}
static zero_status mock_arv(zero_comm *m, void *buf, const size_t *counts, zero_dtype dt, zero_comm_req **req) {
    return mock_queue(m, 1, buf, buf, counts, dt, req);
}
static zero_status mock_ag(zero_comm *m, const void *send, void *recv, const size_t *counts, zero_dtype dt,
                           zero_comm_req **req) {
    return mock_queue(m, 2, send, recv, counts, dt, req);
}
static zero_status mock_wait(zero_comm_req *r) {
    atomic_fetch_add(&g_mock_waits, 1);
    host_wait();
    run_pending();
    free(r);
    return ZERO_OK;
}
static zero_status mock_test(zero_comm_req *r, int *done) {
    run_pending();
    free(r);
    *done = 1;
    return ZERO_OK;
}
static zero_status mock_drop(zero_comm_req *r) {
    free(r);
    return ZERO_OK;
}
static int mock_ordered_on(zero_comm *m, void *stream) {
    (void)m, (void)stream;
    return 1;
}
static void mock_free(zero_comm *m) {
    MPI_Comm_free(&((mock_comm *)m)->mc);
    free(m);
}
static const zero__comm_ops mock_ops = {
    .name = "ordered-mock",
    .free = mock_free,
    .ireduce_scatterv = mock_rs,
    .iallgatherv = mock_ag,
    .iallreducev = mock_arv,
    .wait = mock_wait,
    .test = mock_test,
    .ordered_on = mock_ordered_on,
    .drop = mock_drop,
};

/* One bucket set over the mock with overlap_comm off: four reducing
 * micro-steps, gradients written into the slots the engine hands out (in
 * backward order, as a host's kernels would), then the sums (SCATTER: the
 * partition; ALLREDUCE: flat) copied out.  host_waits_env: set
 * ZERO_BUCKET_HOST_WAIT=1 for the create (the engine then waits per
 * bucket).  waits[0]/[1]: host waits during the last micro-step's backward
 * / its flush (the slot pool grows during the first ones: each growth
 * waits for the clear of the slot it replaces and for the new one's fill).
 * NULL on failure (checked). */
static char *ordered_run(zero_engine *e, int np, const size_t *psize, zero_bucket_mode mode, int bf16,
                         uint64_t bucket, int host_waits_env, long waits[2], uint32_t *nb, size_t *bytes) {
    zero__device *dev = e->dev;
    const zero_layout *L = &e->layout.view;
    const size_t es = bf16 ? 2 : 4;
    const size_t nflat = (size_t)L->flat_numel, npart = (size_t)L->part_numel;
    void *flat = dev->ops->alloc(dev, ZERO_TIER_DEVICE, nflat * es), *part = dev->ops->alloc(dev, ZERO_TIER_DEVICE, npart * es);
    zero_comm *mock = calloc(1, sizeof(mock_comm));
    mock->ops = &mock_ops;
    mock->rank = rank_;
    mock->size = world_;
    mock->engine = e;
    MPI_Comm_dup(MPI_COMM_WORLD, &((mock_comm *)mock)->mc);
    zero_bucket_spec spec = bucket_fixture_spec(mode, bucket, 0, flat, part);
    spec.comm = mock;
    spec.reduce_every_micro_step = 1; /* the engine stays at micro-step 0 of its window */
    spec.grad_dtype = bf16 ? ZERO_DTYPE_BF16 : ZERO_DTYPE_F32;
    if (host_waits_env) setenv("ZERO_BUCKET_HOST_WAIT", "1", 1);
    zero_buckets *b = NULL;
    zero_status s = zero__buckets_create(zero__core_of(e), &spec, &b);
    unsetenv("ZERO_BUCKET_HOST_WAIT");
    CHECK(s == ZERO_OK, "ordered buckets: create: %s", zero_last_error(e));
    char *out = NULL;
    *nb = b ? zero__buckets_count(b) : 0;
    for (int micro = 0; micro < 4 && s == ZERO_OK; micro++) {
        long w0 = atomic_load(&g_ops[OP_HOSTWAIT]);
        for (int p = np - 1; p >= 0 && s == ZERO_OK; --p) {
            void *slot = NULL;
            const uint32_t idx = (uint32_t)p; /* registration order */
            if ((s = zero__buckets_grad_slot(b, idx, &slot)) != ZERO_OK) break;
            if ((s = zero__dev_fill_wait(dev)) != ZERO_OK) break; /* as zero_grad_buffer does */
            for (size_t i = 0; i < psize[p]; i++) { /* the host's backward kernel */
                const float g = exact_grad(rank_, micro, p, i);
                if (bf16)
                    ((uint16_t *)real(slot))[i] = th_to_bf16(th_from_bf16(((uint16_t *)real(slot))[i]) + g);
                else
                    ((float *)real(slot))[i] += g;
            }
            s = zero__buckets_ready(b, idx, NULL, spec.grad_dtype);
        }
        long w1 = atomic_load(&g_ops[OP_HOSTWAIT]);
        if (s == ZERO_OK) s = zero__buckets_flush(b);
        long w2 = atomic_load(&g_ops[OP_HOSTWAIT]);
        waits[0] = w1 - w0, waits[1] = w2 - w1;
        CHECK(s == ZERO_OK, "ordered buckets: micro-step %d: %s", micro, zero_last_error(e));
    }
    if (s == ZERO_OK) {
        const size_t n = mode == ZERO_BUCKETS_SCATTER ? npart : nflat;
        *bytes = n * es;
        out = malloc(*bytes);
        dev->ops->sync(dev); /* the stream catches up: what is left of it is slot clears */
        memcpy(out, real(mode == ZERO_BUCKETS_SCATTER ? part : flat), *bytes);
    }
    zero__buckets_destroy(b);
    zero__comm_free(mock);
    dev->ops->free(dev, flat);
    dev->ops->free(dev, part);
    return out;
}

/* A stub-device engine (stage0: the core's layout) with np params of the
 * given sizes, params done; NULL on failure (checked). */
static zero_engine *open_plain(int np, const size_t *psize, int bf16) {
    char json[256];
    snprintf(json, sizeof json,
             "{\"train_micro_batch_size_per_gpu\": 1, \"bf16\": {\"enabled\": %s},"
             " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01}}}",
             bf16 ? "true" : "false");
    MPI_Comm mc = MPI_COMM_WORLD;
    zero_engine_options o = ZERO_ENGINE_OPTIONS_INIT;
    o.config_json = json;
    o.plugin = "stage0";
    o.comm_kind = ZERO_COMM_MPI;
    o.comm = &mc;
    o.device_kind = ZERO_DEVICE_CUDA;
    zero_engine *e = NULL;
    char err[512] = "";
    zero_status s = zero_engine_create(&o, &e, err, sizeof err);
    CHECK(s == ZERO_OK, "ordered buckets: create: %s", err);
    if (s != ZERO_OK) return NULL;
    for (int p = 0; p < np && s == ZERO_OK; p++) {
        char name[16];
        snprintf(name, sizeof name, "q%d", p);
        zero_param_desc d = ZERO_PARAM_DESC_INIT;
        d.name = name;
        static const float zeros[128];
        d.data = zeros; /* host memory: staged in at params_done */
        d.numel = psize[p];
        d.dtype = bf16 ? ZERO_DTYPE_BF16 : ZERO_DTYPE_F32;
        d.group = p % 5 == 4 ? 1 : 0; /* two groups, as the model above */
        zero_param *h = NULL;
        s = zero_register_param(e, &d, &h);
    }
    if (s == ZERO_OK) s = zero_params_done(e);
    CHECK(s == ZERO_OK, "ordered buckets: params: %s", zero_last_error(e));
    if (s != ZERO_OK) {
        zero_engine_destroy(e);
        return NULL;
    }
    return e;
}

static void check_ordered_buckets(void) {
    static const struct {
        zero_bucket_mode mode;
        int bf16;
        const char *name;
    } modes[] = {{ZERO_BUCKETS_SCATTER, 0, "SCATTER fp32 (stage 2)"},
                 {ZERO_BUCKETS_SCATTER, 1, "SCATTER bf16 (stage 2)"},
                 {ZERO_BUCKETS_ALLREDUCE, 0, "ALLREDUCE fp32 (stage 0/1)"},
                 {ZERO_BUCKETS_ALLREDUCE, 1, "ALLREDUCE bf16 (stage 0/1)"}};
    /* 24 params of 33..79 elements: SCATTER buckets hold whole params, so
     * its bucket count moves with the bucket size only for many params */
    enum { NQ = 24 };
    size_t qsize[NQ];
    for (int p = 0; p < NQ; p++) qsize[p] = 33 + (size_t)(p * 17) % 47;
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
        zero_engine *e = open_plain(NQ, qsize, modes[m].bf16);
        if (!e) return;
        /* big buckets (few) and small ones (many) */
        long ord_waits[2][2] = {{0}}, old_waits[2][2] = {{0}};
        uint32_t nbk[2] = {0};
        const uint64_t bucket[2] = {400, 48};
        for (int k = 0; k < 2; k++) {
            uint32_t nb0 = 0, nb1 = 0;
            size_t n0 = 0, n1 = 0;
            char *a = ordered_run(e, NQ, qsize, modes[m].mode, modes[m].bf16, bucket[k], 1, old_waits[k], &nb0, &n0);
            char *b = ordered_run(e, NQ, qsize, modes[m].mode, modes[m].bf16, bucket[k], 0, ord_waits[k], &nb1, &n1);
            nbk[k] = nb1;
            CHECK(a && b && n0 == n1 && nb0 == nb1 && memcmp(a, b, n0) == 0,
                  "%s, %u buckets: stream-ordered completion changed the sums", modes[m].name, nb1);
            free(a), free(b);
        }
        if (world_ > 1) {
            CHECK(nbk[1] > nbk[0], "%s: %u and %u buckets: the bucket sizes did not change the count", modes[m].name,
                  nbk[0], nbk[1]);
            for (int k = 0; k < 2; k++) {
                CHECK(ord_waits[k][0] == 0 && ord_waits[k][1] == 1,
                      "%s, %u buckets, overlap_comm off, stream-ordered: %ld host waits in backward and %ld in the "
                      "flush (expected 0 and 1)",
                      modes[m].name, nbk[k], ord_waits[k][0], ord_waits[k][1]);
                CHECK(old_waits[k][0] + old_waits[k][1] >= (long)nbk[k],
                      "%s, %u buckets, ZERO_BUCKET_HOST_WAIT=1: only %ld host waits (expected one per bucket)",
                      modes[m].name, nbk[k], old_waits[k][0] + old_waits[k][1]);
            }
            if (rank_ == 0)
                printf("ordered completion, %s, overlap_comm off: host waits per micro-step (backward + flush) "
                       "%ld + %ld with %u buckets, %ld + %ld with %u (ZERO_BUCKET_HOST_WAIT=1: %ld + %ld, %ld + %ld); "
                       "sums bitwise equal\n",
                       modes[m].name, ord_waits[0][0], ord_waits[0][1], nbk[0], ord_waits[1][0], ord_waits[1][1],
                       nbk[1], old_waits[0][0], old_waits[0][1], old_waits[1][0], old_waits[1][1]);
        }
        zero_engine_destroy(e);
    }
}

/* Default factory: a real CUDA engine on this machine. */
static void check_no_gpu_fails_cleanly(void) {
    zero__device_set_factory(NULL);
    zero_engine_options o = ZERO_ENGINE_OPTIONS_INIT;
    o.config_json = "{\"train_micro_batch_size_per_gpu\": 1}";
    o.plugin = "stage0";
    o.comm_kind = ZERO_COMM_SELF;
    o.device_kind = ZERO_DEVICE_CUDA;
    zero_engine *e = NULL;
    char err[512] = "";
    zero_status s = zero_engine_create(&o, &e, err, sizeof err);
    if (s == ZERO_OK) {
        if (rank_ == 0) printf("a usable GPU is present: the CUDA engine was created (no failure to check)\n");
        zero_engine_destroy(e);
        return;
    }
    CHECK(e == NULL, "failed create left an engine");
#ifdef ZERO_HAVE_CUDA
    CHECK(s == ZERO_ERR_DEVICE, "no GPU: status %d (%s), expected ZERO_ERR_DEVICE", (int)s, err);
    CHECK(strstr(err, "CUDA") && strstr(err, "device_index auto"), "the message names neither CUDA nor the device: %s",
          err);
#else
    CHECK(s == ZERO_ERR_UNSUPPORTED, "CPU-only build: status %d (%s), expected ZERO_ERR_UNSUPPORTED", (int)s, err);
#endif
    if (rank_ == 0) printf("device_kind CUDA without a usable GPU: %s\n", err);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &world_);
    check_no_gpu_fails_cleanly();
    zero__device_set_factory(stub_open);
    static const run_opts runs[] = {
        {"stage0", 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, {"stage1", 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
        {"stage2", 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
        {"stage3", 3, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, {"stage2", 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
        {"stage3", 3, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
        {"offload", 2, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0}, {"offload", 2, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0},
        {"stage0", 0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0},
        {"stage1", 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0}, {"stage2", 2, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0},
        {"stage3", 3, 1, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0},
        {"offload", 2, 1, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0}, {"stage0", 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0},
        {"stage1", 1, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0},
        {"stage2", 2, 1, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0}, {"stage3", 3, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0},
        {"offload", 2, 1, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0},
        {"stage0", 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0}, {"stage2", 2, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0},
        {"stage2", 2, 1, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0},
        /* the H200 demo case of issue 35: stage 3 offloading params and optimizer, bf16, accumulation 2 (the
           stream race it hit was in the NCCL backend's staged collectives: test_nccl_order) */
        {"stage3", 3, 1, 0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0}, {"stage3", 3, 1, 1, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0},
        /* (1.7.3) per-rank initial values, registered from device memory: rank 0's taken everywhere */
        {"stage0", 0, 1, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0}, {"stage3", 3, 1, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0},
        {"offload", 2, 1, 1, 1, 1, 0, 0, 0, 1, 0, 0, 0, 0},
        /* (1.10) zero_params_write from "device memory" (and once from host memory) into every plugin's tiers */
        {"stage0", 0, 1, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0}, {"stage1", 1, 1, 1, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0},
        {"stage2", 2, 1, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0}, {"stage3", 3, 1, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0},
        {"stage3", 3, 1, 1, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0}, {"offload", 2, 1, 1, 1, 1, 0, 0, 0, 0, 1, 0, 0, 0},
        {"stage3", 3, 1, 1, 1, 1, 0, 0, 1, 0, 1, 0, 0, 0},
        /* (1.12) expert groups on the device: stage 1, 2 and offload with bf16 gradients (N = 2: one-rank
           reductions of the 16-bit sets), stage 3 fp32 and bf16 gathering over the expert communicator */
        {"stage1", 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0}, {"stage2", 2, 1, 1, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0},
        {"offload", 2, 1, 0, 1, 1, 0, 0, 0, 0, 0, 1, 0, 0}, {"stage3", 3, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0},
        {"stage3", 3, 1, 0, 0, 1, 0, 0, 0, 0, 1, 1, 0, 0},
        /* (1.13) stage 0 with expert groups: each expert whole on its holders, fp32 and bf16, a write */
        {"stage0", 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0}, {"stage0", 0, 1, 0, 0, 1, 0, 0, 0, 0, 1, 1, 0, 0},
    };
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) check_equal(&runs[i]);
    check_host_writes();
    check_ordered_buckets();
    zero__device_set_factory(NULL);
    int rc = check_finish();
    MPI_Finalize();
    return rc;
}
