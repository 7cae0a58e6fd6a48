/* The compressed all-reduce of 1-bit Adam, on host memory, through the
 * core's collectives on bytes (ZERO_DTYPE_U8): what goes over the wire is
 * one bit per element plus one fp32 scale per ONEBIT_BLOCK elements.
 *
 * DeepSpeed's compressed_allreduce (deepspeed/runtime/comm), step by step:
 *  1. worker: x = m + worker_error; per block, scale = ||x||_2 / sqrt(n)
 *     (the paper's and DeepSpeed's scale), signs; worker_error = x -
 *     scale * sign(x) (sign(0) = +1);
 *  2. chunk j of every worker's message goes to rank j, its server (an
 *     all-to-all: here pairwise exchanges over two-rank communicators);
 *  3. server: y = mean over workers of the decompressed chunks +
 *     server_error; compressed again the same way; server_error = y -
 *     decompressed(y);
 *  4. the servers' messages are all-gathered and every rank decompresses
 *     the whole vector: the same bits everywhere.
 * Difference from DeepSpeed: its worker scale is one per tensor, its
 * server scale one per server chunk of a tensor; here both are one per
 * block of ONEBIT_BLOCK elements of the flat space (finer, 4 bytes per
 * 2048 elements), and the flat space is compressed as one tensor. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "onebit.h"

static uint64_t round_up(uint64_t x, uint64_t m) { return (x + m - 1) / m * m; }

void onebit_car_geometry(onebit_car *c, int n, uint64_t numel) {
    c->n = n;
    c->numel = numel;
    c->padded = round_up(numel ? numel : 1, (uint64_t)n * ONEBIT_BLOCK);
    c->chunk = c->padded / (uint64_t)n;
    c->nblk = c->chunk / ONEBIT_BLOCK;
    c->msg = (size_t)c->nblk * sizeof(float) + (size_t)(c->chunk / 8);
}

void onebit_car_plan(const zero_plan_services *ps, int n, uint64_t numel) {
    onebit_car g;
    onebit_car_geometry(&g, n, numel);
    /* as onebit_car_init allocates: the two error buffers, then the n-message
     * buffers (worker messages, inbox, gathered) and the pair buffer */
    ps->add(ps->core, ZERO_TIER_HOST, ZERO_MEM_OPTIM, (g.padded + g.chunk) * sizeof(float));
    ps->add(ps->core, ZERO_TIER_HOST, ZERO_MEM_OTHER, (3 * (uint64_t)n + 2) * g.msg);
}

zero_status onebit_car_init(onebit_car *c, const zero_services *svc, zero_comm *world, uint64_t numel,
                            const char *who) {
    zero_core *core = svc->core;
    c->svc = svc;
    c->world = world;
    onebit_car_geometry(c, svc->comm_size(world), numel);
    c->rank = svc->comm_rank(world);
    c->werr = zero_kit_alloc_n(svc, ZERO_TIER_HOST, ZERO_MEM_OPTIM, c->padded, sizeof(float));
    c->serr = zero_kit_alloc_n(svc, ZERO_TIER_HOST, ZERO_MEM_OPTIM, c->chunk, sizeof(float));
    c->wmsg = zero_kit_alloc_n(svc, ZERO_TIER_HOST, ZERO_MEM_OTHER, (uint64_t)c->n * c->msg, 1);
    c->inbox = zero_kit_alloc_n(svc, ZERO_TIER_HOST, ZERO_MEM_OTHER, (uint64_t)c->n * c->msg, 1);
    c->pairbuf = zero_kit_alloc_n(svc, ZERO_TIER_HOST, ZERO_MEM_OTHER, 2 * (uint64_t)c->msg, 1);
    c->gath = zero_kit_alloc_n(svc, ZERO_TIER_HOST, ZERO_MEM_OTHER, (uint64_t)c->n * c->msg, 1);
    /* circle method over M = n rounded up to even players; player M-1 is a
     * bye when n is odd */
    const int M = c->n + (c->n & 1);
    c->rounds = c->n > 1 ? (uint32_t)(M - 1) : 0;
    c->partner = calloc(c->rounds ? c->rounds : 1, sizeof *c->partner);
    c->pair = calloc(c->rounds ? c->rounds : 1, sizeof *c->pair);
    if (!c->werr || !c->serr || !c->wmsg || !c->inbox || !c->pairbuf || !c->gath || !c->partner || !c->pair)
        return svc->error(core, ZERO_ERR_OUT_OF_MEMORY, "%s: cannot allocate the compression buffers (%llu elements)",
                          who, (unsigned long long)c->padded);
    for (uint32_t r = 0; r < c->rounds; r++) {
        const int K = M - 1, me = c->rank;
        int q;
        if (me == K) q = (int)r;                      /* the fixed player meets the round's pivot */
        else if (me == (int)r) q = K;
        else q = (int)((2 * (int64_t)r - me + 2 * K) % K); /* (r + i) pairs with (r - i) */
        c->partner[r] = q < c->n ? q : -1;            /* player n (odd n): a bye */
        const int color = c->partner[r] < 0 ? me : (me < q ? me : q);
        zero_status st = svc->comm_split(world, color, me, &c->pair[r]);
        if (st != ZERO_OK) return st;
    }
    return ZERO_OK;
}

void onebit_car_free(onebit_car *c) {
    if (!c->svc) return;
    zero_core *core = c->svc->core;
    for (uint32_t r = 0; c->pair && r < c->rounds; r++)
        if (c->pair[r]) c->svc->comm_free(c->pair[r]);
    free(c->pair);
    free(c->partner);
    c->svc->mem_free(core, c->werr);
    c->svc->mem_free(core, c->serr);
    c->svc->mem_free(core, c->wmsg);
    c->svc->mem_free(core, c->inbox);
    c->svc->mem_free(core, c->pairbuf);
    c->svc->mem_free(core, c->gath);
    memset(c, 0, sizeof *c);
}

void onebit_car_reset(onebit_car *c) {
    memset(c->werr, 0, (size_t)c->padded * sizeof(float));
    memset(c->serr, 0, (size_t)c->chunk * sizeof(float));
}

/* Valid elements of the block starting at flat element `start`. */
static uint32_t valid_in(const onebit_car *c, uint64_t start) {
    return start >= c->numel ? 0 : c->numel - start >= ONEBIT_BLOCK ? ONEBIT_BLOCK : (uint32_t)(c->numel - start);
}

/* One block: x[0..nv) compensated values (the rest is padding) into
 * *scale and ONEBIT_BLOCK / 8 sign bytes; err[e] = x[e] - decompressed. */
static void compress_block(const float *x, uint32_t nv, float *scale, uint8_t *bits, float *err) {
    double ss = 0;
    for (uint32_t e = 0; e < nv; e++) ss += (double)x[e] * x[e];
    const float s = nv ? (float)sqrt(ss / nv) : 0.0f;
    memcpy(scale, &s, sizeof s);
    memset(bits, 0, ONEBIT_BLOCK / 8);
    for (uint32_t e = 0; e < ONEBIT_BLOCK; e++) {
        const int pos = e >= nv || x[e] >= 0.0f;
        if (pos) bits[e >> 3] |= (uint8_t)(1u << (e & 7));
        err[e] = e < nv ? x[e] - (pos ? s : -s) : 0.0f;
    }
}

/* Block b of a message: its scale and its sign bytes. */
static float msg_scale(const onebit_car *c, const uint8_t *msg, uint64_t b) {
    float s;
    memcpy(&s, msg + b * sizeof(float), sizeof s);
    (void)c;
    return s;
}
static const uint8_t *msg_bits(const onebit_car *c, const uint8_t *msg, uint64_t b) {
    return msg + c->nblk * sizeof(float) + b * (ONEBIT_BLOCK / 8);
}
static uint8_t *msg_bits_w(const onebit_car *c, uint8_t *msg, uint64_t b) {
    return msg + c->nblk * sizeof(float) + b * (ONEBIT_BLOCK / 8);
}

static inline float dec(const uint8_t *bits, uint32_t e, float s) { return (bits[e >> 3] >> (e & 7)) & 1u ? s : -s; }

zero_status onebit_car_run(onebit_car *c, float *m) {
    const zero_services *svc = c->svc;
    if (c->n <= 1) return ZERO_OK; /* DeepSpeed compresses only with more than one rank */
    float x[ONEBIT_BLOCK];
    const size_t msg = c->msg;
    /* 1. worker side: every chunk compressed with the worker error */
    for (int j = 0; j < c->n; j++) {
        uint8_t *out = c->wmsg + (size_t)j * msg;
        for (uint64_t b = 0; b < c->nblk; b++) {
            const uint64_t start = (uint64_t)j * c->chunk + b * ONEBIT_BLOCK;
            const uint32_t nv = valid_in(c, start);
            float *we = c->werr + start;
            for (uint32_t e = 0; e < nv; e++) x[e] = m[start + e] + we[e];
            float s;
            compress_block(x, nv, &s, msg_bits_w(c, out, b), we);
            memcpy(out + b * sizeof(float), &s, sizeof s);
        }
    }
    /* 2. all-to-all: chunk j to server j, as pairwise exchanges */
    memcpy(c->inbox + (size_t)c->rank * msg, c->wmsg + (size_t)c->rank * msg, msg);
    for (uint32_t r = 0; r < c->rounds; r++) {
        const int q = c->partner[r];
        if (q < 0) continue;
        const size_t counts[2] = {msg, msg};
        zero_comm_req *req = NULL;
        zero_status st = svc->iallgatherv(c->pair[r], c->wmsg + (size_t)q * msg, c->pairbuf, counts, ZERO_DTYPE_U8,
                                          &req);
        if (st == ZERO_OK) st = svc->wait(req);
        if (st != ZERO_OK) return st;
        const int mine = svc->comm_rank(c->pair[r]);
        memcpy(c->inbox + (size_t)q * msg, c->pairbuf + (size_t)(1 - mine) * msg, msg);
        c->calls++;
        c->bytes += 2 * (uint64_t)msg;
    }
    /* 3. server side: the mean of the workers' chunks, compensated with the
     * server error, compressed again into this rank's slot of gath */
    uint8_t *mine = c->gath + (size_t)c->rank * msg;
    const float inv_n = 1.0f / (float)c->n;
    for (uint64_t b = 0; b < c->nblk; b++) {
        const uint64_t start = (uint64_t)c->rank * c->chunk + b * ONEBIT_BLOCK;
        const uint32_t nv = valid_in(c, start);
        for (uint32_t e = 0; e < nv; e++) x[e] = 0.0f;
        for (int w = 0; w < c->n; w++) { /* in rank order: the same sum on every run */
            const uint8_t *in = c->inbox + (size_t)w * msg;
            const float s = msg_scale(c, in, b);
            const uint8_t *bits = msg_bits(c, in, b);
            for (uint32_t e = 0; e < nv; e++) x[e] += dec(bits, e, s);
        }
        float *se = c->serr + b * ONEBIT_BLOCK;
        for (uint32_t e = 0; e < nv; e++) x[e] = x[e] * inv_n + se[e];
        float s;
        compress_block(x, nv, &s, msg_bits_w(c, mine, b), se);
        memcpy(mine + b * sizeof(float), &s, sizeof s);
    }
    /* 4. every server's chunk to every rank */
    size_t *counts = calloc((size_t)c->n, sizeof *counts);
    if (!counts) return svc->error(svc->core, ZERO_ERR_OUT_OF_MEMORY, "onebit: out of memory");
    for (int j = 0; j < c->n; j++) counts[j] = msg;
    zero_comm_req *req = NULL;
    zero_status st = svc->iallgatherv(c->world, mine, c->gath, counts, ZERO_DTYPE_U8, &req);
    if (st == ZERO_OK) st = svc->wait(req);
    free(counts);
    if (st != ZERO_OK) return st;
    c->calls++;
    c->bytes += (uint64_t)c->n * msg;
    for (int j = 0; j < c->n; j++) {
        const uint8_t *in = c->gath + (size_t)j * msg;
        for (uint64_t b = 0; b < c->nblk; b++) {
            const uint64_t start = (uint64_t)j * c->chunk + b * ONEBIT_BLOCK;
            const uint32_t nv = valid_in(c, start);
            const float s = msg_scale(c, in, b);
            const uint8_t *bits = msg_bits(c, in, b);
            for (uint32_t e = 0; e < nv; e++) m[start + e] = dec(bits, e, s);
        }
    }
    return ZERO_OK;
}
