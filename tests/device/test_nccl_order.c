/* The NCCL backend's stream ordering (issue 35), checked without a GPU.
 *
 * backends/comm/comm_nccl.c is compiled here against the CUDA runtime and
 * NCCL stand-ins of fake_cuda/ (one rank; streams are queues of work that
 * run lazily, only as far as a host wait needs, and first what that point
 * depends on: a legal CUDA schedule that turns a missing stream dependency
 * into wrong data every time).  The setting is the engine's on a GPU:
 * libzero's stream `lib` carries the world communicator's collectives, its
 * kernels, copies and the zero-fills of fresh device blocks (queued, not
 * waited for, with ZERO_CUDA_ALLOC_SYNC=0); the host's compute stream
 * `comp` is ordered before `lib` where the engine says so (zero_release,
 * zero_on_grad_ready, zero_step: cudaStreamWaitEvent); a sub-communicator
 * (stage 3's gather group, n_split) runs on a stream of its own and must
 * wait for `lib` before each collective, since its buffers are produced,
 * filled and released there.
 *
 * Checked, for each collective of the split (all-gather, reduce-scatter,
 * and the all-to-all of bytes of issue 33), with device and with host
 * (pinned) operands, alone and inside a comm group (as stage 3 issues its
 * gathers):
 *  - fill: the destination is a fresh block whose zero-fill is queued on
 *    `lib`; after the collective completes (its wait) and `lib` catches up,
 *    the destination holds the collective's result, not the fill's zeros;
 *  - reuse: the destination was just read by a "kernel" on `comp` (the
 *    forward of the param that held the buffer before), and `lib` was
 *    ordered after `comp` (zero_release); the kernel must see the old
 *    contents, not the new gather's.
 * The host-operand all-gather is stage 3's with offload_param (the shard is
 * pinned host memory): before the fix it was staged on the split's stream
 * without waiting for `lib`, and on an H200 the queued fill of a fresh
 * gather buffer landed after the gathered weights (stage 3 + offload_param
 * + offload_optimizer at N = 1 on NCCL left the CPU engine's bits). */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "comm_backend.h"
#include "comm_internal.h"
#include "comm_nccl.h"
#include "cuda_runtime_api.h"
#include "nccl.h"

/* ---- what comm_nccl.c needs from the core ---------------------------------- */

static char g_err[512];
zero_status zero__error(struct zero_engine *e, zero_status s, const char *fmt, ...) {
    (void)e;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_err, sizeof g_err, fmt, ap);
    va_end(ap);
    return s;
}
double zero__comm_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
void zero__engine_note_scratch(struct zero_engine *e, zero_mem_tier tier, int64_t delta) {
    (void)e, (void)tier, (void)delta;
}
/* base/env.c (comm_wait.c reads the timeout through it) builds its messages
 * with this; none is checked here */
void zero__appendf(char *buf, size_t len, const char *fmt, ...) {
    (void)buf, (void)len, (void)fmt;
}

/* ---- the setting -------------------------------------------------------------- */

enum { N = 1000 }; /* bf16 elements */
static cudaStream_t lib, comp;
static zero_comm *world, *grp;

static void *dev_block(void) { /* a fresh device block, its zero-fill queued on lib (zero_cuda_alloc) */
    void *p = NULL;
    if (cudaMalloc(&p, N * 2) != cudaSuccess) return NULL;
    cudaMemsetAsync(p, 0, N * 2, lib);
    return p;
}

static void pattern(uint16_t *x, uint16_t seed) {
    for (size_t i = 0; i < N; i++) x[i] = (uint16_t)(seed + 7 * i) | 1u; /* never zero */
}

/* The host's forward kernel reading the buffer's previous contents. */
typedef struct snap {
    const void *src;
    uint16_t out[N];
} snap;
static void snap_fn(void *arg) {
    snap *s = arg;
    memcpy(s->out, s->src, sizeof s->out);
}

/* Order lib after comp (what zero_release / zero_on_grad_ready do). */
static void lib_after_comp(void) {
    cudaEvent_t ev;
    cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    cudaEventRecord(ev, comp);
    cudaStreamWaitEvent(lib, ev, 0);
    cudaEventDestroy(ev);
}

/* One collective of the split: kind 0 all-gather, 1 reduce-scatter, 2 the
 * blocking all-to-all of bytes (issue 33: the quantized reduce-scatter's);
 * the source in host memory (staged) or device memory (produced on lib). */
static zero_status run(int kind, const void *send, void *recv, int grouped) {
    const size_t counts[1] = {N}, bytes[1] = {2 * N}, displs[1] = {0};
    zero_comm_req *req = NULL;
    zero_status st = grouped ? grp->ops->group_start(grp) : ZERO_OK;
    if (st == ZERO_OK)
        st = kind == 0   ? grp->ops->iallgatherv(grp, send, recv, counts, ZERO_DTYPE_BF16, &req)
             : kind == 1 ? grp->ops->ireduce_scatterv(grp, send, recv, counts, ZERO_DTYPE_BF16, &req)
                         : grp->ops->alltoallv_bytes(grp, send, bytes, displs, recv, bytes, displs);
    if (grouped) {
        zero_status e = grp->ops->group_end(grp);
        if (st == ZERO_OK) st = e;
    }
    if (st == ZERO_OK && req) st = grp->ops->wait(req); /* stage 3 waits for the params it hands out */
    return st;
}

static void check_case(int kind, int host_src, int grouped) {
    const char *what = kind == 0 ? "all-gather" : kind == 1 ? "reduce-scatter" : "all-to-all";
    const char *src = host_src ? "host (pinned) source, staged" : "device source";
    const char *grp_s = grouped ? ", in a comm group" : "";
    static uint16_t host[N], want[N];
    pattern(want, (uint16_t)(100 + 10 * kind + host_src));
    const void *send = host;
    void *dsend = NULL;
    if (host_src) {
        memcpy(host, want, sizeof host);
    } else { /* the source written on lib (the optimizer's new weights), after its own fill */
        dsend = dev_block();
        cudaMemcpyAsync(dsend, want, sizeof want, cudaMemcpyHostToDevice, lib);
        send = dsend;
    }

    /* fill: a fresh destination whose zero-fill is still queued on lib */
    void *recv = dev_block();
    zero_status st = run(kind, send, recv, grouped);
    CHECK(st == ZERO_OK, "%s, %s%s: %s", what, src, grp_s, g_err);
    cudaStreamSynchronize(lib); /* later work on libzero's stream (the fill is there) */
    uint16_t got[N];
    memcpy(got, recv, sizeof got);
    size_t bad = 0;
    for (size_t i = 0; i < N; i++) bad += got[i] != want[i];
    CHECK(bad == 0, "%s into a fresh block, %s%s: %zu of %d elements are not the collective's result (%s) -- the "
                    "split's stream did not wait for the block's zero-fill on libzero's stream",
          what, src, grp_s, bad, N, got[0] == 0 ? "zeros: the fill ran after it" : "garbage");

    /* reuse: recv (holding `want`) is read by a kernel on comp, then
     * released (lib after comp) and gathered into again */
    fake_cuda_device_sync();
    snap *s = calloc(1, sizeof *s);
    s->src = recv;
    fake_cuda_launch(comp, snap_fn, s);
    lib_after_comp();
    static uint16_t next[N];
    pattern(next, (uint16_t)(200 + 10 * kind + host_src));
    if (host_src) {
        memcpy(host, next, sizeof host);
    } else {
        cudaMemcpyAsync(dsend, next, sizeof next, cudaMemcpyHostToDevice, lib);
    }
    st = run(kind, send, recv, grouped);
    CHECK(st == ZERO_OK, "%s reuse, %s%s: %s", what, src, grp_s, g_err);
    fake_cuda_device_sync();
    CHECK(memcmp(s->out, want, sizeof want) == 0,
          "%s into a released buffer, %s%s: the host's kernel on its stream, ordered before libzero's stream, "
          "read the new collective's data (the split's stream did not wait for libzero's)",
          what, src, grp_s);
    CHECK(memcmp(recv, next, sizeof next) == 0, "%s into a released buffer, %s%s: wrong result", what, src, grp_s);
    free(s);
    cudaFree(recv);
    if (dsend) cudaFree(dsend);
}

int main(void) {
    ncclComm_t nc = fake_nccl_comm_new();
    char err[256] = "";
    zero_status st = zero__comm_nccl_create(&nc, NULL, &world, err, sizeof err);
    CHECK(st == ZERO_OK, "create: %s", err);
    if (st != ZERO_OK) return check_finish();
    cudaStreamCreateWithFlags(&lib, cudaStreamNonBlocking);
    cudaStreamCreateWithFlags(&comp, cudaStreamNonBlocking);
    zero__comm_nccl_set_stream(world, lib); /* the engine's world: collectives on libzero's stream */
    st = world->ops->split(world, 0, 0, &grp); /* stage 3's gather group */
    CHECK(st == ZERO_OK && grp, "split: %s", g_err);
    if (st != ZERO_OK || !grp) return check_finish();
    CHECK(zero__comm_nccl_stream(grp) != lib, "the split runs on libzero's stream: this test needs its own");
    for (int kind = 0; kind < 3; kind++)
        for (int host_src = 0; host_src < 2; host_src++)
            for (int grouped = 0; grouped < 2; grouped++) check_case(kind, host_src, grouped);
    grp->ops->free(grp);
    world->ops->free(world);
    ncclCommDestroy(nc); /* the host's communicator: borrowed by libzero, destroyed by its owner */
    cudaStreamDestroy(comp);
    cudaStreamDestroy(lib);
    CHECK(fake_cuda_pending() == 0, "%zu stream items never ran", fake_cuda_pending());
    int rc = check_finish();
    if (!rc) printf("NCCL split: all-gather, reduce-scatter and all-to-all, device and staged host operands, alone and grouped: "
                    "ordered after libzero's stream (fresh blocks' fills, released buffers' readers)\n");
    return rc;
}
