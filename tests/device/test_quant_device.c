/* (issue 33) The quantized collectives on device buffers, without a GPU.
 *
 * A device_kind CUDA engine gets a stub device (zero__device_set_factory)
 * whose "device pointers" are host blocks with bit 62 set (non-canonical:
 * any host access that bypasses the device faults).  Its quantization ops
 * run the CUDA kernels' very bodies (kernels/cuda/zero_cuda_quant_bodies.h,
 * launched through zero_cuda_quant_launchers.h under the CPU launch shim);
 * its other ops run the CPU code on the untagged pointers.  The world is MPI
 * behind the device staging layer, so the all-to-all and all-gather of the
 * quantized bytes go through comm_devstage.c.  Checked under mpirun with N
 * ranks (1, 3, 5, 6), for int8 and int4, F32/BF16/F16, block sizes 256 and
 * 7 (odd: int4 bytes straddle blocks), unequal counts including a zero and
 * odd ones, Inf/NaN blocks:
 *  - allgather_quantized on device memory == on host memory of the same
 *    engine (the host path, bitwise);
 *  - reduce_scatter_quantized, with and without error feedback, == the host
 *    path bitwise: recv and the carried errors;
 *  - the device kernels really ran (quantize/dequantize op counts), and the
 *    device scratch was returned (no live blocks afterwards);
 *  - mixed host/device operands are refused (ZERO_ERR_INVALID_ARGUMENT);
 *  - a device without the quantization ops refuses device buffers
 *    (ZERO_ERR_UNSUPPORTED, naming the device), as 1.6.0 did.
 * With `--zeropp PATH` (ctest contrib.zeropp_device_np*, after the contrib
 * plugins are built): the ZeRO++ plugin at PATH with qwZ and qgZ (with and
 * without error feedback), stage 3, AdamW, trains on the stub device to the
 * CPU engine's parameters, bitwise, and its quantization ran on the device. */
#include "cuda_shim.h"

#include <mpi.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zero_cuda_quant_launchers.h"
#include "check.h"
#include "comm.h"
#include "device.h"
#include "engine.h"
#include "optim.h"
#include "quant.h"
#include "zero.h"

#define TAG ((uintptr_t)1 << 62)
static void *real(const void *p) { return (void *)((uintptr_t)p & ~TAG); }
static void *fake(void *p) { return (void *)((uintptr_t)p | TAG); }
static int tagged(const void *p) { return ((uintptr_t)p & TAG) != 0; }

static atomic_long g_quant_ops, g_live;
static int g_with_quant = 1; /* the factory's next device has the quantization ops */

#define NEED_DEV(p)                                              \
    do {                                                         \
        if ((p) && !tagged(p)) return ZERO_ERR_INVALID_ARGUMENT; \
    } while (0)

static void *alloc_common(zero_mem_tier tier, size_t bytes, int fill) {
    size_t r = (bytes + 255) & ~(size_t)255;
    void *p = aligned_alloc(256, r ? r : 256);
    if (!p) return NULL;
    memset(p, fill ? 0 : 0xA5, r ? r : 256); /* alloc_nofill: dirty, as the contract allows */
    if (tier == ZERO_TIER_HOST) return p;
    atomic_fetch_add(&g_live, 1);
    return fake(p);
}
static void *st_alloc(zero__device *d, zero_mem_tier tier, size_t bytes) {
    (void)d;
    return alloc_common(tier, bytes, 1);
}
static void *st_alloc_nofill(zero__device *d, zero_mem_tier tier, size_t bytes) {
    (void)d;
    return alloc_common(tier, bytes, 0);
}
static void st_free(zero__device *d, void *p) {
    (void)d;
    if (tagged(p)) atomic_fetch_sub(&g_live, 1);
    free(real(p));
}
static int st_is_device(zero__device *d, const void *p) {
    (void)d;
    return tagged(p);
}
static zero_status st_copy(zero__device *d, void *dst, const void *src, size_t n) {
    (void)d;
    memmove(real(dst), real(src), n);
    return ZERO_OK;
}
static zero_status st_memset(zero__device *d, void *p, int v, size_t n) {
    (void)d;
    NEED_DEV(p);
    memset(real(p), v, n);
    return ZERO_OK;
}
static zero_status st_optim(zero__device *d, zero_optim_kind k, const zero_optim_scalars *s, float *master,
                            float *const state[4], const void *grad, zero_dtype gdt, float gm, void *out,
                            zero_dtype odt, size_t n) {
    (void)d;
    NEED_DEV(master);
    NEED_DEV(grad);
    NEED_DEV(out);
    float *st[4] = {0};
    for (int j = 0; j < 4; j++) {
        NEED_DEV(state[j]);
        st[j] = state[j] ? real(state[j]) : NULL;
    }
    return zero__dev_optim_step(NULL, k, s, real(master), st, real(grad), gdt, gm, out ? real(out) : NULL, odt, n);
}
static zero_status st_sumsq(zero__device *d, const void *x, zero_dtype dt, size_t n, double *out) {
    (void)d;
    NEED_DEV(x);
    return zero__dev_sumsq(NULL, real(x), dt, n, out);
}
static zero_status st_nonfinite(zero__device *d, const void *x, zero_dtype dt, size_t n, int *out) {
    (void)d;
    NEED_DEV(x);
    return zero__dev_nonfinite(NULL, real(x), dt, n, out);
}
static zero_status st_convert(zero__device *d, void *dst, zero_dtype ddt, const void *src, zero_dtype sdt, size_t n) {
    (void)d;
    NEED_DEV(dst);
    NEED_DEV(src);
    return zero__dev_convert(NULL, real(dst), ddt, real(src), sdt, n);
}
static zero_status st_add(zero__device *d, void *dst, zero_dtype ddt, const void *src, zero_dtype sdt, size_t n) {
    (void)d;
    NEED_DEV(dst);
    NEED_DEV(src);
    return zero__dev_add_into(NULL, real(dst), ddt, real(src), sdt, n);
}
static zero_status st_scale(zero__device *d, float *x, float a, size_t n) {
    (void)d;
    NEED_DEV(x);
    return zero__dev_scale(NULL, real(x), a, n);
}
static zero_status st_noop(zero__device *d, void *s) {
    (void)d, (void)s;
    return ZERO_OK;
}
static zero_status st_sync(zero__device *d) {
    (void)d;
    return ZERO_OK;
}
static void *st_stream(zero__device *d) {
    (void)d;
    return NULL;
}
static const char *st_error(zero__device *d) {
    (void)d;
    return "stub";
}
static void st_close(zero__device *d) { free(d); }

/* The quantization ops: the CUDA kernel bodies under the shim. */
static zero_status st_quantize(zero__device *d, void *q, const void *src, zero_dtype dt, size_t n, int bits,
                               size_t block) {
    (void)d;
    NEED_DEV(q);
    NEED_DEV(src);
    atomic_fetch_add(&g_quant_ops, 1);
    return zero_cuda_quantize(real(q), real(src), dt, n, bits, block, NULL);
}
static zero_status st_dequantize(zero__device *d, void *dst, zero_dtype dt, const void *q, size_t n, int bits,
                                 size_t block) {
    (void)d;
    NEED_DEV(dst);
    NEED_DEV(q);
    atomic_fetch_add(&g_quant_ops, 1);
    return zero_cuda_dequantize(real(dst), dt, real(q), n, bits, block, NULL);
}
static zero_status st_dequantize_add(zero__device *d, float *acc, const void *q, size_t n, int bits, size_t block) {
    (void)d;
    NEED_DEV(acc);
    NEED_DEV(q);
    atomic_fetch_add(&g_quant_ops, 1);
    return zero_cuda_dequantize_add(real(acc), real(q), n, bits, block, NULL);
}
static zero_status st_residual(zero__device *d, float *ef, const float *x, const void *q, size_t n, int bits,
                               size_t block) {
    (void)d;
    NEED_DEV(ef);
    NEED_DEV(x);
    NEED_DEV(q);
    atomic_fetch_add(&g_quant_ops, 1);
    return zero_cuda_quant_residual(real(ef), real(x), real(q), n, bits, block, NULL);
}

static zero__device_ops stub_ops = {
    .name = "stub", .alloc = st_alloc, .free = st_free, .is_device = st_is_device, .copy = st_copy,
    .memset = st_memset, .optim_step = st_optim, .sumsq = st_sumsq, .nonfinite = st_nonfinite,
    .convert = st_convert, .add_into = st_add, .scale = st_scale, .order_after = st_noop,
    .order_before = st_noop, .sync = st_sync, .stream = st_stream, .error = st_error, .close = st_close,
    .alloc_nofill = st_alloc_nofill, .quantize = st_quantize, .dequantize = st_dequantize, .dequantize_add = st_dequantize_add,
    .quant_residual = st_residual,
};
static zero__device_ops stub_ops_noquant; /* stub_ops without the quantization ops */

static zero_status stub_open(int ordinal, void *stream, zero__device **out, char *err, size_t len) {
    (void)stream, (void)err, (void)len;
    zero__device *s = calloc(1, sizeof *s);
    if (!s) return ZERO_ERR_OUT_OF_MEMORY;
    s->ops = g_with_quant ? &stub_ops : &stub_ops_noquant;
    s->ordinal = ordinal;
    *out = s;
    return ZERO_OK;
}

/* ---------------------------------------------------------------- data */

static int rank_ = 0, world_ = 1;

static void *to_dev(const void *h, size_t bytes) {
    void *d = st_alloc(NULL, ZERO_TIER_DEVICE, bytes ? bytes : 1);
    memcpy(real(d), h, bytes);
    return d;
}

/* Block-varying magnitudes; an Inf in one block and a NaN in another of
 * element range [bad_lo, ...). */
static void fill(float *x, size_t n, int seed, size_t bad_at) {
    for (size_t i = 0; i < n; i++) {
        const double mag = pow(10.0, (double)((i / 37 + (size_t)seed) % 7) - 3.0);
        x[i] = (float)(mag * sin(0.71 * (double)i + 1.9 * seed + 0.3));
    }
    if (bad_at < n) x[bad_at] = INFINITY;
    if (bad_at + 300 < n) x[bad_at + 300] = NAN;
}

static void *in_dt(const float *x, size_t n, zero_dtype dt) {
    void *o = malloc(n * 4 + 4);
    if (dt == ZERO_DTYPE_F32) memcpy(o, x, n * 4);
    else zero__convert(o, dt, x, ZERO_DTYPE_F32, n);
    return o;
}

static void check_allgather(zero_comm *m, const size_t *counts, zero_dtype dt, int bits, size_t block) {
    const size_t es = zero__dtype_size(dt);
    size_t total = 0;
    for (int r = 0; r < world_; r++) total += counts[r];
    float *x = malloc(total * 4 + 4);
    fill(x, total, 11, (size_t)rank_ * 97 + 5);
    void *h = in_dt(x, total, dt);
    void *d = to_dev(h, total * es);
    zero_quant_spec q = {0};
    q.bits = bits;
    q.block = block;
    long want = counts[rank_] > 0; /* one quantize, one dequantize per non-empty block */
    for (int r = 0; r < world_; r++) want += counts[r] > 0;
    const long ops0 = atomic_load(&g_quant_ops);
    CHECK_EQ_INT(zero__allgather_quantized(m, h, counts, dt, &q), ZERO_OK);
    CHECK(atomic_load(&g_quant_ops) == ops0, "allgather on host memory ran device kernels");
    CHECK_EQ_INT(zero__allgather_quantized(m, d, counts, dt, &q), ZERO_OK);
    CHECK(atomic_load(&g_quant_ops) - ops0 == want, "allgather: %ld device kernel calls, want %ld",
          atomic_load(&g_quant_ops) - ops0, want);
    CHECK(memcmp(h, real(d), total * es) == 0, "allgather int%d dt %d block %zu: device != host", bits, (int)dt, block);
    st_free(NULL, d);
    free(h), free(x);
}

static void check_reduce_scatter(zero_comm *m, const size_t *counts, zero_dtype dt, int bits, size_t block, int ef) {
    const size_t es = zero__dtype_size(dt);
    size_t total = 0;
    for (int r = 0; r < world_; r++) total += counts[r];
    const size_t mine = counts[rank_];
    float *x = malloc(total * 4 + 4), *efh = calloc(total + 1, 4);
    fill(x, total, 3 + rank_, ef ? total : 41 + (size_t)rank_ * 13); /* error feedback: finite data */
    for (size_t i = 0; i < total && ef; i++) efh[i] = 1e-3f * (float)sin((double)i);
    void *h = in_dt(x, total, dt);
    void *d = to_dev(h, total * es);
    float *efd = ef ? to_dev(efh, total * 4) : NULL;
    void *rh = malloc(mine * es + 4), *rdv = st_alloc(NULL, ZERO_TIER_DEVICE, mine * es + 4);
    zero_quant_spec q = {0};
    q.bits = bits;
    q.block = block;
    /* twice: the second round carries the first's errors */
    for (int round = 0; round < (ef ? 2 : 1); round++) {
        q.error_feedback = ef ? efh : NULL;
        CHECK_EQ_INT(zero__reduce_scatter_quantized(m, h, rh, counts, dt, &q), ZERO_OK);
        q.error_feedback = efd;
        CHECK_EQ_INT(zero__reduce_scatter_quantized(m, d, rdv, counts, dt, &q), ZERO_OK);
        CHECK(memcmp(rh, real(rdv), mine * es) == 0, "reduce_scatter int%d dt %d block %zu ef %d round %d: device != host",
              bits, (int)dt, block, ef, round);
        if (ef)
            CHECK(memcmp(efh, real(efd), total * 4) == 0, "reduce_scatter int%d dt %d ef round %d: carried errors differ",
                  bits, (int)dt, round);
    }
    st_free(NULL, d), st_free(NULL, rdv);
    if (efd) st_free(NULL, efd);
    free(h), free(rh), free(x), free(efh);
}

/* ---- the ZeRO++ plugin end to end (argv: --zeropp PATH) ----------------
 * qwZ + qgZ (+ error feedback), stage 3 over the quantized services: the
 * stub-device engine trains to the CPU engine's parameters, bitwise. */
enum { NP = 5, STEPS = 4 };
static const size_t psizes[NP] = {7, 300, 1000, 33, 517};

static float grad_of(int rank, int step, int p, size_t i) {
    return (float)(0.01 * sin(0.13 * (double)i + 0.7 * p + 1.1 * step + 0.37 * rank) * (1 + p % 3));
}

/* Train; all params concatenated (fp32, host), or NULL (checked). */
static float *train_zeropp(const char *plugin, int device, const char *extra) {
    char json[1024];
    snprintf(json, sizeof json,
             "{\"train_micro_batch_size_per_gpu\": 1, \"gradient_accumulation_steps\": 1,"
             " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01, \"weight_decay\": 0.1}},"
             " \"zero_optimization\": {\"stage\": 3, \"reduce_bucket_size\": 400,"
             " \"zero_quantized_weights\": true, \"zero_quantized_gradients\": true%s}}",
             extra);
    MPI_Comm mc = MPI_COMM_WORLD;
    zero_engine_options o = ZERO_ENGINE_OPTIONS_INIT;
    o.config_json = json;
    o.plugin = plugin;
    o.comm_kind = ZERO_COMM_MPI;
    o.comm = &mc;
    o.device_kind = device ? ZERO_DEVICE_CUDA : ZERO_DEVICE_CPU;
    zero_engine *e = NULL;
    char err[512] = "";
    zero_status s = zero_engine_create(&o, &e, err, sizeof err);
    CHECK(s == ZERO_OK, "zeropp dev=%d: create: %s", device, err);
    if (s != ZERO_OK) return NULL;
    zero_param *h[NP];
    float *inits[NP] = {0}; /* read at zero_params_done */
    size_t total = 0;
    for (int p = 0; p < NP && s == ZERO_OK; ++p) {
        float *init = inits[p] = malloc(psizes[p] * 4);
        for (size_t i = 0; i < psizes[p]; ++i) init[i] = (float)(0.1 * cos(0.3 * (double)i + p));
        zero_param_desc d = ZERO_PARAM_DESC_INIT;
        char name[16];
        snprintf(name, sizeof name, "p%d", p);
        d.name = name;
        d.data = init;
        d.numel = psizes[p];
        d.dtype = ZERO_DTYPE_F32;
        s = zero_register_param(e, &d, &h[p]);
        total += psizes[p];
    }
    if (s == ZERO_OK) s = zero_params_done(e);
    for (int p = 0; p < NP; ++p) free(inits[p]);
    for (int step = 0; step < STEPS && s == ZERO_OK; ++step) {
        void *ptrs[NP];
        if ((s = zero_gather(e, h, NP, ptrs)) != ZERO_OK) break;
        for (int p = 0; p < NP; p++)
            CHECK(tagged(ptrs[p]) == (device != 0), "zeropp: gathered p%d in the wrong memory", p);
        zero_release(e, h, NP);
        for (int p = NP - 1; p >= 0 && s == ZERO_OK; --p) {
            void *buf = NULL;
            if ((s = zero_grad_buffer(e, h[p], &buf)) != ZERO_OK) break;
            float *g = real(buf); /* what the host's backward kernel would write */
            for (size_t i = 0; i < psizes[p]; ++i) g[i] += grad_of(rank_, step, p, i);
            s = zero_on_grad_ready(e, h[p], NULL);
        }
        zero_step_result r = ZERO_STEP_RESULT_INIT;
        if (s == ZERO_OK) s = zero_step(e, NULL, &r);
    }
    CHECK(s == ZERO_OK, "zeropp dev=%d: training: %s", device, zero_last_error(e));
    float *out = NULL;
    if (s == ZERO_OK) {
        void *ptrs[NP];
        out = malloc(total * 4);
        s = zero_gather(e, h, NP, ptrs);
        CHECK(s == ZERO_OK, "zeropp dev=%d: final gather: %s", device, zero_last_error(e));
        for (int p = 0, off = 0; p < NP && s == ZERO_OK; off += (int)psizes[p], ++p)
            memcpy(out + off, real(ptrs[p]), psizes[p] * 4);
        if (s == ZERO_OK) zero_release(e, h, NP);
    }
    zero_engine_destroy(e);
    if (s != ZERO_OK) free(out);
    return s == ZERO_OK ? out : NULL;
}

static void check_zeropp(const char *plugin, const char *extra) {
    const size_t total = 7 + 300 + 1000 + 33 + 517;
    const long ops0 = atomic_load(&g_quant_ops);
    float *a = train_zeropp(plugin, 0, extra);
    CHECK(atomic_load(&g_quant_ops) == ops0, "zeropp on the CPU engine ran device kernels");
    float *b = train_zeropp(plugin, 1, extra);
    CHECK(atomic_load(&g_quant_ops) > ops0, "zeropp on the stub device ran no device quantization");
    if (a && b) {
        size_t bad = 0;
        for (size_t i = 0; i < total; i++) bad += memcmp(&a[i], &b[i], 4) != 0;
        CHECK(bad == 0, "zeropp%s: %zu of %zu params differ between the stub device and the CPU engine", extra, bad,
              total);
        size_t moved = 0, nan = 0, first = total;
        for (int p = 0, off = 0; p < NP; off += (int)psizes[p], ++p)
            for (size_t i = 0; i < psizes[p]; ++i) {
                moved += a[off + i] != (float)(0.1 * cos(0.3 * (double)i + p));
                nan += a[off + i] != a[off + i];
                if (first == total && memcmp(&a[off + i], &b[off + i], 4)) first = off + i;
            }
        CHECK(moved > total / 2 && nan == 0, "zeropp: training moved %zu of %zu params, %zu NaN", moved, total, nan);
        if (first < total) fprintf(stderr, "first difference at %zu: %.9g vs %.9g\n", first, a[first], b[first]);
    }
    free(a), free(b);
}

static zero_engine *open_engine(void) {
    MPI_Comm mc = MPI_COMM_WORLD;
    zero_engine_options o = ZERO_ENGINE_OPTIONS_INIT;
    o.config_json = "{\"train_micro_batch_size_per_gpu\": 1, \"zero_optimization\": {\"stage\": 0}}";
    o.comm_kind = ZERO_COMM_MPI;
    o.comm = &mc;
    o.device_kind = ZERO_DEVICE_CUDA;
    zero_engine *e = NULL;
    char err[512] = "";
    zero_status s = zero_engine_create(&o, &e, err, sizeof err);
    CHECK(s == ZERO_OK, "create: %s", err);
    return s == ZERO_OK ? e : NULL;
}

int main(int argc, char **argv) {
    int prov = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &prov);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &world_);
    stub_ops_noquant = stub_ops;
    stub_ops_noquant.quantize = NULL, stub_ops_noquant.dequantize = NULL;
    stub_ops_noquant.dequantize_add = NULL, stub_ops_noquant.quant_residual = NULL;
    zero__device_set_factory(stub_open);
    if (argc == 3 && strcmp(argv[1], "--zeropp") == 0) {
        check_zeropp(argv[2], ", \"zero_quantized_gradients_error_feedback\": false");
        check_zeropp(argv[2], ""); /* the default: error feedback on */
        int bad = check_finish(), any = 0;
        MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        if (rank_ == 0) printf("zeropp on the stub device: N=%d, %s\n", world_, any ? "FAILED" : "bitwise equal to the CPU engine");
        MPI_Finalize();
        return bad;
    }

    zero_engine *e = open_engine();
    if (e) {
        zero_comm *m = e->world;
        CHECK(e->dev && e->dev->ops == &stub_ops, "the engine must run on the stub device");
        /* unequal counts: odd ones, a zero (rank 1), none a multiple of the block */
        size_t *counts = malloc((size_t)world_ * sizeof *counts);
        for (int r = 0; r < world_; r++) counts[r] = r == 1 ? 0 : 301 + 258 * (size_t)r;
        const long live0 = atomic_load(&g_live);
        const size_t blocks[2] = {256, 7};
        for (int bi = 0; bi < 2; bi++)
            for (int bits = 8; bits >= 4; bits -= 4)
                for (int dt = 0; dt < 3; dt++) {
                    check_allgather(m, counts, (zero_dtype)dt, bits, blocks[bi]);
                    check_reduce_scatter(m, counts, (zero_dtype)dt, bits, blocks[bi], 0);
                    check_reduce_scatter(m, counts, (zero_dtype)dt, bits, blocks[bi], 1);
                }
        CHECK(atomic_load(&g_live) == live0, "device scratch not returned: %ld live blocks, was %ld",
              atomic_load(&g_live), live0);
        /* mixed operands: refused with a message */
        float hbuf[4096];
        void *dbuf = st_alloc(NULL, ZERO_TIER_DEVICE, sizeof hbuf);
        memset(hbuf, 0, sizeof hbuf);
        zero_quant_spec q = {0};
        q.bits = 8;
        for (int r = 0; r < world_; r++) counts[r] = 4;
        CHECK_EQ_INT(zero__reduce_scatter_quantized(m, dbuf, hbuf, counts, ZERO_DTYPE_F32, &q), ZERO_ERR_INVALID_ARGUMENT);
        CHECK_STR_CONTAINS(zero_last_error(e), "both the host and the device");
        st_free(NULL, dbuf);
        free(counts);
        zero_engine_destroy(e);
    }
    /* a device without the quantization kernels: device buffers refused */
    g_with_quant = 0;
    e = open_engine();
    if (e) {
        size_t *counts = malloc((size_t)world_ * sizeof *counts);
        for (int r = 0; r < world_; r++) counts[r] = 8;
        void *dbuf = st_alloc(NULL, ZERO_TIER_DEVICE, (size_t)world_ * 32);
        zero_quant_spec q = {0};
        q.bits = 4;
        CHECK_EQ_INT(zero__allgather_quantized(e->world, dbuf, counts, ZERO_DTYPE_F32, &q), ZERO_ERR_UNSUPPORTED);
        CHECK_STR_CONTAINS(zero_last_error(e), "stub device has no quantization kernels");
        st_free(NULL, dbuf);
        free(counts);
        zero_engine_destroy(e);
    }
    int bad = check_finish(), any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank_ == 0) printf("quant on the stub device: N=%d, %s\n", world_, any ? "FAILED" : "bitwise equal to the host path");
    MPI_Finalize();
    return bad;
}
