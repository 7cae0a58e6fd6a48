/* The NCCL comm backend on real GPUs, through the zero__comm_ops vtable.
 *   test_gpu_nccl mpi      under mpirun: communicator made from an
 *                          ncclUniqueId broadcast over MPI (np 1 = NCCL
 *                          world size 1).
 *   test_gpu_nccl threads  one process, one thread per GPU present, each
 *                          wrapping a host-made ncclComm_t (ncclCommInitAll):
 *                          the "host passes its ncclComm_t" path, on every GPU.
 * Values are small integers so that every sum is exact whatever NCCL's
 * reduction order. */
#include <time.h>
#include "gpu_nccl_driver.h"

static float *dev_floats(const float *h, size_t n) { return gpu_upload(h, n * 4); }

static void suite(zero_comm *m) {
    const int r = m->rank, W = m->size;
    CUDA_OK(cudaSetDevice(zero__comm_nccl_device(m)));
    TCHECK(zero__comm_is_nccl(m), "not an NCCL comm");

    /* allreduce: device buffer, SUM/MAX/MIN */
    enum { N = 1000 };
    float h[N], out[N];
    for (int op = 0; op < 3; ++op) {
        for (int i = 0; i < N; ++i) h[i] = (float)(r + 1) * (float)(i % 7);
        float *d = dev_floats(h, N);
        TCHECK(m->ops->allreduce(m, d, N, ZERO_DTYPE_F32, op) == ZERO_OK, "allreduce op %d", op);
        gpu_download(out, d, sizeof out);
        int bad = 0;
        for (int i = 0; i < N; ++i) {
            float k = (float)(i % 7);
            float want = op == ZERO_OP_SUM ? k * (float)(W * (W + 1) / 2) : op == ZERO_OP_MAX ? k * (float)W : k;
            bad += out[i] != want;
        }
        TCHECK(bad == 0, "rank %d allreduce op %d: %d wrong", r, op, bad);
        cudaFree(d);
    }
    /* host buffers (agreement scalars) are staged */
    double hd[2] = {(double)r, 1.0};
    TCHECK(m->ops->allreduce(m, hd, 2, ZERO_DTYPE_F64, ZERO_OP_SUM) == ZERO_OK, "host allreduce");
    TCHECK(hd[0] == W * (W - 1) / 2.0 && hd[1] == W, "host allreduce values %g %g", hd[0], hd[1]);
    uint64_t hv = r == W - 1 ? 0xfeedull : 0;
    TCHECK(m->ops->broadcast(m, &hv, 1, ZERO_DTYPE_U64, W - 1) == ZERO_OK && hv == 0xfeedull, "host broadcast");
    TCHECK(m->ops->barrier(m) == ZERO_OK, "barrier");
    uint32_t mine = 100u + (uint32_t)r, all[64];
    TCHECK(W <= 64 && m->ops->allgather_bytes(m, &mine, all, 4) == ZERO_OK, "allgather_bytes");
    for (int q = 0; q < W && q < 64; ++q) TCHECK(all[q] == 100u + (uint32_t)q, "allgather_bytes block %d", q);

    /* iallreduce + test/wait */
    for (int i = 0; i < N; ++i) h[i] = 1.0f;
    float *d = dev_floats(h, N);
    zero_comm_req *q = NULL;
    TCHECK(m->ops->iallreduce(m, d, N, ZERO_DTYPE_F32, ZERO_OP_SUM, &q) == ZERO_OK && q, "iallreduce");
    int done = 0;
    for (int spin = 0; spin < 1000000 && !done; ++spin) TCHECK(zero__comm_test(q, &done) == ZERO_OK, "test");
    if (!done) TCHECK(zero__comm_wait(q) == ZERO_OK, "wait");
    gpu_download(out, d, sizeof out);
    TCHECK(out[0] == (float)W && out[N - 1] == (float)W, "iallreduce value %g", out[0]);
    cudaFree(d);

    /* reduce-scatterv and allgatherv: equal counts, then unequal with a zero
     * block; in place (recv aliases the own block) for the unequal case. */
    for (int variant = 0; variant < 2; ++variant) {
        size_t counts[64], off[65] = {0};
        for (int b = 0; b < W; ++b) counts[b] = variant == 0 ? 300 : (size_t)(b == 1 ? 0 : 100 + 37 * b);
        for (int b = 0; b < W; ++b) off[b + 1] = off[b] + counts[b];
        size_t total = off[W];
        float *hs = malloc((total ? total : 1) * 4);
        for (size_t i = 0; i < total; ++i) hs[i] = (float)((i % 11) + (size_t)r);
        float *ds = dev_floats(hs, total);
        float *dr = variant == 0 ? dev_floats(hs, counts[r] ? counts[r] : 1) : ds + off[r];
        TCHECK(m->ops->ireduce_scatterv(m, ds, dr, counts, ZERO_DTYPE_F32, &q) == ZERO_OK, "ireduce_scatterv");
        TCHECK(zero__comm_wait(q) == ZERO_OK, "wait rs");
        float *got = malloc((counts[r] ? counts[r] : 1) * 4);
        gpu_download(got, dr, counts[r] * 4);
        int bad = 0;
        for (size_t i = 0; i < counts[r]; ++i)
            bad += got[i] != (float)(((off[r] + i) % 11) * (size_t)W + (size_t)(W * (W - 1) / 2));
        TCHECK(bad == 0, "rank %d reduce_scatterv variant %d: %d wrong", r, variant, bad);
        /* allgatherv of the reduced blocks: everyone ends with the full sum */
        float *dg = variant == 0 ? dev_floats(hs, total ? total : 1) : ds;
        const float *send = variant == 0 ? dr : ds + off[r];
        TCHECK(m->ops->iallgatherv(m, send, dg, counts, ZERO_DTYPE_F32, &q) == ZERO_OK, "iallgatherv");
        TCHECK(zero__comm_wait(q) == ZERO_OK, "wait ag");
        gpu_download(hs, dg, total * 4);
        bad = 0;
        for (size_t i = 0; i < total; ++i) bad += hs[i] != (float)((i % 11) * (size_t)W + (size_t)(W * (W - 1) / 2));
        TCHECK(bad == 0, "rank %d allgatherv variant %d: %d wrong", r, variant, bad);
        if (variant == 0) cudaFree(dr), cudaFree(dg);
        cudaFree(ds), free(hs), free(got);
    }

    /* host buffers are staged (CPU-resident plugins on an NCCL comm) */
    {
        size_t counts[64], total = 0, off_r = 0;
        for (int b = 0; b < W; ++b) counts[b] = (size_t)(50 + 13 * b), total += counts[b];
        for (int b = 0; b < r; ++b) off_r += counts[b];
        float *hs = malloc(total * 4), *hr = malloc(counts[r] * 4);
        for (size_t i = 0; i < total; ++i) hs[i] = (float)(i % 5);
        TCHECK(m->ops->ireduce_scatterv(m, hs, hr, counts, ZERO_DTYPE_F32, &q) == ZERO_OK && zero__comm_wait(q) == ZERO_OK,
               "host ireduce_scatterv");
        int bad = 0;
        for (size_t i = 0; i < counts[r]; ++i) bad += hr[i] != (float)(((off_r + i) % 5) * (size_t)W);
        TCHECK(bad == 0, "host reduce_scatterv: %d wrong", bad);
        memset(hs, 0, total * 4);
        TCHECK(m->ops->iallgatherv(m, hr, hs, counts, ZERO_DTYPE_F32, &q) == ZERO_OK && zero__comm_wait(q) == ZERO_OK,
               "host iallgatherv");
        bad = 0;
        for (size_t i = 0; i < total; ++i) bad += hs[i] != (float)((i % 5) * (size_t)W);
        TCHECK(bad == 0, "host allgatherv: %d wrong", bad);
        free(hs), free(hr);
    }

    /* split: even / odd ranks; the last rank opts out when W > 2 */
    zero_comm *sub = NULL;
    int color = (W > 2 && r == W - 1) ? -1 : r % 2;
    TCHECK(m->ops->split(m, color, r, &sub) == ZERO_OK, "split");
    if (color < 0) {
        TCHECK(sub == NULL, "opted-out rank got a communicator");
    } else if (sub) {
        int expect = 0;
        for (int q2 = 0; q2 < W; ++q2) expect += (!(W > 2 && q2 == W - 1) && q2 % 2 == color);
        TCHECK(sub->size == expect && sub->rank == r / 2, "sub size %d rank %d", sub->size, sub->rank);
        double one = 1.0;
        TCHECK(sub->ops->allreduce(sub, &one, 1, ZERO_DTYPE_F64, ZERO_OP_SUM) == ZERO_OK && one == expect, "sub allreduce");
        sub->ops->free(sub);
    } else {
        TCHECK(0, "rank %d: no sub-communicator", r);
    }
    TCHECK(m->counters.allreduce_calls >= 4 && m->counters.reduce_scatter_calls == 3 &&
               m->counters.allgather_calls == 3,
           "counters %llu %llu %llu", (unsigned long long)m->counters.allreduce_calls,
           (unsigned long long)m->counters.reduce_scatter_calls, (unsigned long long)m->counters.allgather_calls);
}

/* Groups (issue 24, services 1.5 comm_group_start/end): K all-gathers of
 * different shapes issued inside one group complete with the right values
 * after the group ends; a host-staged all-gather, a blocking host
 * all-reduce and a wait inside the group launch what it holds first (the
 * results stay right); nesting counts; an unmatched end is refused. */
static float ag_value(int rank, int k, size_t i) { return (float)(rank * 1000 + k * 7) + (float)(i % 97); }

static void group_suite(zero_comm *m) {
    const int W = m->size, r = m->rank, K = 8;
    size_t counts[8][64], total[8];
    float *dsend[8], *drecv[8];
    zero_comm_req *q[8];
    for (int k = 0; k < K; ++k) {
        total[k] = 0;
        for (int b = 0; b < W; ++b) counts[k][b] = (k % 2 == 0) ? (size_t)(64 + 32 * k) : (size_t)(10 + 17 * b + k);
        for (int b = 0; b < W; ++b) total[k] += counts[k][b];
        float *h = malloc(counts[k][r] * 4);
        for (size_t i = 0; i < counts[k][r]; ++i) h[i] = ag_value(r, k, i);
        dsend[k] = dev_floats(h, counts[k][r]);
        CUDA_OK(cudaMalloc((void **)&drecv[k], total[k] * 4));
        CUDA_OK(cudaMemset(drecv[k], 0, total[k] * 4));
        free(h);
    }
    TCHECK(zero__comm_group_start(m) == ZERO_OK, "group_start");
    TCHECK(zero__comm_group_start(m) == ZERO_OK, "nested group_start");
    for (int k = 0; k < K / 2; ++k)
        TCHECK(zero__iallgatherv(m, dsend[k], drecv[k], counts[k], ZERO_DTYPE_F32, &q[k]) == ZERO_OK, "grouped ag %d", k);
    /* a blocking call on host memory inside the group: launches the group first */
    double hd = 1.0;
    TCHECK(zero__allreduce(m, &hd, 1, ZERO_DTYPE_F64, ZERO_OP_SUM) == ZERO_OK && hd == (double)W, "allreduce in group");
    TCHECK(zero__comm_group_end(m) == ZERO_OK, "nested group_end");
    for (int k = K / 2; k < K; ++k)
        TCHECK(zero__iallgatherv(m, dsend[k], drecv[k], counts[k], ZERO_DTYPE_F32, &q[k]) == ZERO_OK, "grouped ag %d", k);
    /* a wait inside the open group (request K-1): launches it, then waits */
    TCHECK(zero__comm_wait(q[K - 1]) == ZERO_OK, "wait inside the group");
    q[K - 1] = NULL;
    TCHECK(zero__comm_group_end(m) == ZERO_OK, "group_end");
    for (int k = 0; k < K; ++k) {
        if (q[k]) TCHECK(zero__comm_wait(q[k]) == ZERO_OK, "wait ag %d", k);
        float *h = malloc(total[k] * 4);
        gpu_download(h, drecv[k], total[k] * 4);
        int bad = 0;
        size_t off = 0;
        for (int b = 0; b < W; ++b) {
            for (size_t i = 0; i < counts[k][b]; ++i) bad += h[off + i] != ag_value(b, k, i);
            off += counts[k][b];
        }
        TCHECK(bad == 0, "rank %d grouped all-gather %d: %d wrong", r, k, bad);
        free(h), cudaFree(dsend[k]), cudaFree(drecv[k]);
    }
    /* host buffers inside a group are staged synchronously (group paused) */
    {
        size_t hc[64], tot = 0;
        for (int b = 0; b < W; ++b) hc[b] = (size_t)(5 + b), tot += hc[b];
        float *mine = malloc(hc[r] * 4), *all = calloc(tot, 4);
        for (size_t i = 0; i < hc[r]; ++i) mine[i] = ag_value(r, 9, i);
        zero_comm_req *hq = NULL;
        TCHECK(zero__comm_group_start(m) == ZERO_OK, "group_start (host)");
        TCHECK(zero__iallgatherv(m, mine, all, hc, ZERO_DTYPE_F32, &hq) == ZERO_OK, "host ag in group");
        TCHECK(zero__comm_group_end(m) == ZERO_OK, "group_end (host)");
        TCHECK(hq && zero__comm_wait(hq) == ZERO_OK, "host ag wait");
        int bad = 0;
        size_t off = 0;
        for (int b = 0; b < W; ++b) {
            for (size_t i = 0; i < hc[b]; ++i) bad += all[off + i] != ag_value(b, 9, i);
            off += hc[b];
        }
        TCHECK(bad == 0, "host all-gather in a group: %d wrong", bad);
        free(mine), free(all);
    }
    TCHECK(zero__comm_group_end(m) == ZERO_ERR_INVALID_ARGUMENT, "unmatched group_end accepted");
}

/* (issue 35) Stream-ordered completion and the staging buffer.
 *  - ordered_on: yes for the communicator's own stream, no for another;
 *    drop ends a request without a host wait, and waiting for a later
 *    request of the communicator covers the dropped one (its sums are in
 *    place), counted as one host wait;
 *  - the device staging of host buffers grows while device collectives are
 *    queued ahead of it: the old buffer is freed after the stream passed its
 *    last use (scratch() waits for the stream first), results exact. */
static void ordered_suite(zero_comm *m) {
    const int W = m->size;
    CUDA_OK(cudaSetDevice(zero__comm_nccl_device(m)));
    cudaStream_t other;
    CUDA_OK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
    TCHECK(zero__comm_ordered_on(m, zero__comm_nccl_stream(m)) == 1, "ordered_on(own stream) is not 1");
    TCHECK(zero__comm_ordered_on(m, other) == 0, "ordered_on(another stream) is not 0");
    enum { N = 1 << 20 };
    float *h = malloc((size_t)N * 4);
    for (int i = 0; i < N; i++) h[i] = (float)(i % 13);
    float *a = dev_floats(h, N), *b = dev_floats(h, N);
    zero__comm_counters c0, c1;
    zero__comm_counters_get(m, &c0);
    zero_comm_req *qa = NULL, *qb = NULL;
    TCHECK(zero__iallreduce(m, a, N, ZERO_DTYPE_F32, ZERO_OP_SUM, &qa) == ZERO_OK && qa, "iallreduce a");
    TCHECK(zero__iallreduce(m, b, N, ZERO_DTYPE_F32, ZERO_OP_SUM, &qb) == ZERO_OK && qb, "iallreduce b");
    TCHECK(qa && zero__comm_drop(qa) == ZERO_OK, "drop a");
    TCHECK(qb && zero__comm_wait(qb) == ZERO_OK, "wait b");
    /* nothing else is queued: b's completion means a's too, no device sync */
    TCHECK(cudaStreamQuery((cudaStream_t)zero__comm_nccl_stream(m)) == cudaSuccess,
           "after waiting for b the stream is still busy (a dropped request outlived a later one)");
    zero__comm_counters_get(m, &c1);
    TCHECK(c1.host_waits - c0.host_waits == 1, "drop + wait counted %llu host waits, expected 1",
           (unsigned long long)(c1.host_waits - c0.host_waits));
    float *got = malloc((size_t)N * 4);
    int bad = 0;
    gpu_download(got, a, (size_t)N * 4);
    for (int i = 0; i < N; i++) bad += got[i] != (float)(i % 13) * (float)W;
    gpu_download(got, b, (size_t)N * 4);
    for (int i = 0; i < N; i++) bad += got[i] != (float)(i % 13) * (float)W;
    TCHECK(bad == 0, "dropped request then a waited one: %d wrong sums", bad);
    /* staging growth behind queued device work: 4 KiB, 1 MiB, 4 MiB host buffers */
    static const size_t hn[3] = {1024, 256 * 1024, 1024 * 1024};
    for (int k = 0; k < 3; k++) {
        TCHECK(zero__iallreduce(m, a, N, ZERO_DTYPE_F32, ZERO_OP_SUM, &qa) == ZERO_OK && qa, "iallreduce ahead");
        for (size_t i = 0; i < hn[k]; i++) h[i] = (float)((i + (size_t)k) % 7);
        TCHECK(m->ops->allreduce(m, h, hn[k], ZERO_DTYPE_F32, ZERO_OP_SUM) == ZERO_OK, "host allreduce %zu", hn[k]);
        bad = 0;
        for (size_t i = 0; i < hn[k]; i++) bad += h[i] != (float)((i + (size_t)k) % 7) * (float)W;
        TCHECK(bad == 0, "host allreduce of %zu floats while growing the staging: %d wrong", hn[k], bad);
        TCHECK(qa && zero__comm_wait(qa) == ZERO_OK, "wait ahead");
    }
    cudaFree(a), cudaFree(b), free(h), free(got);
    CUDA_OK(cudaStreamDestroy(other));
}

/* (issue 24) A collective that never finishes -- here: the communicator's
 * stream held by a kernel that waits for the host, as a dead peer would
 * hold it -- is not waited for forever: the wait gives ZERO_ERR_TIMEOUT
 * after comm_timeout, the communicator is aborted (ncclCommAbort), and
 * every later call on it fails at once naming why.  Runs last: the
 * communicator is dead afterwards.  One rank only: with peers, their
 * queued NCCL kernels would run on an aborted communicator once released
 * (a dead peer's own run needs two GPUs). */
int zero_test_hold_stream(void *stream, const int *flag_dev);

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Releases the hold after a while: ncclCommAbort may wait for the work
 * queued on the communicator's streams, which here is our hold kernel (a
 * real dead peer's collective is NCCL's own, which the abort stops). */
static void *release_later(void *flag) {
    struct timespec ts = {3, 0};
    nanosleep(&ts, NULL);
    *(volatile int *)flag = 1;
    return NULL;
}

static void abort_suite(zero_comm *m) {
    int *flag = NULL, *flag_dev = NULL;
    CUDA_OK(cudaHostAlloc((void **)&flag, sizeof *flag, cudaHostAllocMapped));
    *flag = 0;
    CUDA_OK(cudaHostGetDevicePointer((void **)&flag_dev, flag, 0));
    float *d = dev_floats((const float[]){1, 2, 3, 4}, 4);
    zero__comm_set_timeout(m, 0.5);
    TCHECK(zero_test_hold_stream(zero__comm_nccl_stream(m), flag_dev) == 0, "hold kernel launch");
    pthread_t releaser;
    TCHECK(pthread_create(&releaser, NULL, release_later, flag) == 0, "releaser thread");
    fprintf(stderr, "abort_suite: stream held; waiting for a collective behind it (limit 0.5 s)\n");
    zero_comm_req *q = NULL;
    TCHECK(zero__iallreduce(m, d, 4, ZERO_DTYPE_F32, ZERO_OP_SUM, &q) == ZERO_OK && q, "iallreduce behind the hold");
    double t0 = now_s();
    zero_status st = q ? zero__comm_wait(q) : ZERO_ERR_COMM;
    double waited = now_s() - t0;
    fprintf(stderr, "abort_suite: wait returned %d after %.2f s\n", (int)st, waited);
    TCHECK(st == ZERO_ERR_TIMEOUT, "wait on a stuck collective: status %d, expected ZERO_ERR_TIMEOUT", st);
    TCHECK(waited >= 0.4 && waited < 30, "timed out after %.2f s (limit 0.5 s)", waited);
    double one = 1;
    TCHECK(zero__allreduce(m, &one, 1, ZERO_DTYPE_F64, ZERO_OP_SUM) == ZERO_ERR_COMM, "call after abort not refused");
    pthread_join(releaser, NULL); /* the stream is released: freeing the communicator can drain it */
    CUDA_OK(cudaDeviceSynchronize());
    fprintf(stderr, "abort_suite: done\n");
    cudaFree(d);
    cudaFreeHost(flag);
}

static void body(zero_comm *m, int from_mpi) {
    if (from_mpi) {
        int wr = 0, ws = 0;
        MPI_Comm_rank(MPI_COMM_WORLD, &wr);
        MPI_Comm_size(MPI_COMM_WORLD, &ws);
        CHECK(m->rank == wr && m->size == ws, "NCCL rank/size %d/%d vs MPI %d/%d", m->rank, m->size, wr, ws);
    }
    suite(m);
    fprintf(stderr, "suite passed its checks; groups next\n");
    group_suite(m);
    fprintf(stderr, "groups passed; stream-ordered completion and staging growth next\n");
    ordered_suite(m);
    if (from_mpi && m->size == 1) abort_suite(m); /* the threads mode's host destroys its own ncclComm_t after */
}

int main(int argc, char **argv) { return gpu_nccl_main(argc, argv, "gpu_nccl", "NCCL suite", body); }
