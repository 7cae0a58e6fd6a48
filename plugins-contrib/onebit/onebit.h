/* 1-bit Adam (Tang et al. 2021) as a libzero contrib plugin: the
 * compressed all-reduce of the momentum (onebit_comm.c) and the plugin
 * (onebit_plugin.c).  Built on the installed plugin kit only. */
#ifndef ONEBIT_H
#define ONEBIT_H
#include <stdint.h>

#include "zero_kit.h"

/* Elements per fp32 scale: one scale per block of the compensated momentum
 * (worker side) and of the averaged chunk (server side).  2048 elements are
 * 256 bytes of signs + 4 bytes of scale: 1.016 bits per element. */
#define ONEBIT_BLOCK 2048u

/* Buckets of the count sketch that estimates the norm of the mean
 * gradient after the freeze (onebit_plugin.c, sketch): 4 KB on the wire per step,
 * a relative error of about sqrt(2 / ONEBIT_SKETCH) = 4% on the squared
 * norm. */
#define ONEBIT_SKETCH 1024u

/* The compressed all-reduce (DeepSpeed's compressed_allreduce, on the
 * host): the flat space [0, numel) padded to `padded`, a multiple of
 * n * ONEBIT_BLOCK, cut into n equal chunks; rank j is the "server" of
 * chunk j.  A chunk travels as one message of `msg` bytes: its blocks'
 * fp32 scales, then one sign bit per element (bit e % 8 of byte e / 8, set
 * for x >= 0).  Owned by the plugin (zero it first). */
typedef struct onebit_car {
    const zero_services *svc;
    zero_comm *world;
    int n, rank;
    uint64_t numel, padded, chunk, nblk;
    size_t msg;
    float *werr;      /* worker error, padded elements (0 past numel) */
    float *serr;      /* server error of this rank's chunk, chunk elements */
    uint8_t *wmsg;    /* n messages: this rank's compressed chunk j at j * msg */
    uint8_t *inbox;   /* n messages: chunk `rank` as compressed by every worker w, at w * msg */
    uint8_t *pairbuf; /* 2 messages: one exchange with a partner */
    uint8_t *gath;    /* n messages: every server's recompressed chunk */
    /* the all-to-all of the worker messages as n-1 (n even) or n (n odd)
     * rounds of pairwise exchanges (the circle method: each round a
     * perfect matching), each over a two-rank communicator from comm_split;
     * partner[r] < 0: this rank sits out round r */
    uint32_t rounds;
    int *partner;
    zero_comm **pair;
    /* bytes this rank's exchanges moved (counted as the comm layer counts
     * them: the payload of each call) */
    uint64_t calls, bytes;
} onebit_car;

/* Allocates the buffers (host tier, ZERO_MEM_OPTIM for the errors,
 * ZERO_MEM_OTHER for the messages) and the pair communicators (collective
 * over world: every rank calls comm_split the same number of times).
 * Step thread (params_done). */
zero_status onebit_car_init(onebit_car *c, const zero_services *svc, zero_comm *world, uint64_t numel,
                            const char *who);
/* Sets n, numel, padded, chunk, nblk and msg for n ranks (nothing else).
 * Pure. */
void onebit_car_geometry(onebit_car *c, int n, uint64_t numel);
/* Plan (ABI 1.2) of what onebit_car_init allocates for n ranks, through
 * ps->add: the error buffers (host, OPTIM) and the messages (host, OTHER).
 * Pure apart from ps->add. */
void onebit_car_plan(const zero_plan_services *ps, int n, uint64_t numel);
/* Frees everything (NULL-safe, idempotent).  Step thread (destroy). */
void onebit_car_free(onebit_car *c);
/* m[0..numel): this rank's momentum in, the compressed average of every
 * rank's out (the same bits on every rank).  Collective over world.  Step
 * thread. */
zero_status onebit_car_run(onebit_car *c, float *m);
/* Clears both error-feedback buffers (a restart of the compressed phase). */
void onebit_car_reset(onebit_car *c);

#endif /* ONEBIT_H */
