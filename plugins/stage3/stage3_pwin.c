/* offload_param.device "nvme" (ZeRO-Infinity's parameter offload): the
 * owned 16-bit parameter shard lives in an unlinked file under
 * offload_param.nvme_path, and the host tier holds only a window of
 * offload_param.buffer_count slots, each big enough for the largest piece
 * this rank owns of one parameter (offload_param.buffer_size, in elements,
 * must be at least that, as DeepSpeed requires buffer_size >= the largest
 * parameter).
 *
 * A gather that issues the all-gather of param p sends p's piece from a
 * slot.  The piece is normally there already: after every gather (and after
 * zero_step's prefetch) the recorded gather order is walked and the pieces
 * of the next params are read ahead into free slots with POSIX AIO, so the
 * read overlaps the host's compute like the all-gather prefetch does.
 * Otherwise (first micro-step, off the recorded order) the piece is read
 * synchronously.  A slot is busy until p's all-gather request is waited
 * for; when every slot is busy, the oldest sending request is waited for
 * (it was issued on every rank: waiting issues nothing), then a read-ahead
 * is dropped.
 *
 * The step (stage3_offload.c) writes each tile's new weights into the file
 * after the CPU optimizer (the worker thread, overlapped with the next
 * tile), so read-aheads are dropped before it (zero__s3_pwin_reset), as
 * before a checkpoint load rewrites the file.
 *
 * Everything here runs on the engine thread (gather, step, load).  The
 * all-gathers' requests are the gather engine's (kit/zero_kit_gather.h):
 * this file tests and waits for them only through it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stage3_tiers.h"

enum { SLOT_FREE = 0, SLOT_READING, SLOT_READY, SLOT_SENDING };

struct zero__s3_pslot {
    void *raw;             /* accounted host block (ZERO_TIER_HOST, ZERO_MEM_PARAMS) */
    char *base;            /* raw aligned up to ZERO__S3_NVME_ALIGN */
    int state;
    zero__s3_param *owner;
    const zero_comm_req *req; /* SENDING: the all-gather that reads the slot (the gather engine's request for
                                 owner: compared with zero_kit_gather_pending, never waited on here) */
    zero__s3_nvme_rd rd;
    uint64_t seq;          /* when it was filled (eviction order) */
};

static uint64_t piece_off(const zero__s3 *s, const zero__s3_param *p) { return p->part_lo * (uint64_t)s->esize; }
static size_t piece_len(const zero__s3 *s, const zero__s3_param *p) { return (size_t)p->count * s->esize; }

zero_status zero__s3_pwin_init(zero__s3 *s) {
    const zero_services *svc = s->svc;
    zero__s3_off *o = s->off;
    int64_t count = 5, size = 0;
    if (svc->cfg_int(s->c, "zero_optimization.offload_param.buffer_count", &count) != 1) count = 5;
    if (count < 2)
        return svc->error(s->c, ZERO_ERR_CONFIG,
                          "stage3: zero_optimization.offload_param.buffer_count: got %lld, expected at least 2 (one "
                          "piece being sent while the next is read ahead)",
                          (long long)count);
    if (count > 64) count = 64;
    size_t largest = 0;
    uint32_t which = 0;
    for (uint32_t i = 0; i < s->nparams; i++)
        if (piece_len(s, &s->params[i]) > largest) largest = piece_len(s, &s->params[i]), which = i;
    if (svc->cfg_int(s->c, "zero_optimization.offload_param.buffer_size", &size) == 1 && size >= 0 &&
        (uint64_t)size * s->esize < largest)
        return svc->error(s->c, ZERO_ERR_CONFIG,
                          "stage3: zero_optimization.offload_param.buffer_size: got %lld elements, but this rank's "
                          "piece of param '%s' has %zu: set it to at least the largest parameter's size",
                          (long long)size, s->params[which].info->name, largest / s->esize);
    o->pslots = calloc((size_t)count, sizeof *o->pslots);
    if (!o->pslots) return svc->error(s->c, ZERO_ERR_OUT_OF_MEMORY, "stage3: out of memory");
    o->npslots = (uint32_t)count;
    o->pslot_bytes = zero__s3_nvme_range_bytes(largest);
    for (uint32_t k = 0; k < o->npslots; k++) {
        struct zero__s3_pslot *q = &o->pslots[k];
        if (!(q->raw = svc->mem_alloc(s->c, ZERO_TIER_HOST, ZERO_MEM_PARAMS, o->pslot_bytes)))
            return svc->error(s->c, ZERO_ERR_OUT_OF_MEMORY, "stage3: cannot allocate the offload_param window");
        q->base = (char *)(((uintptr_t)q->raw + ZERO__S3_NVME_ALIGN - 1) & ~(uintptr_t)(ZERO__S3_NVME_ALIGN - 1));
    }
    const uint64_t bytes = (s->L->part_numel * s->esize + ZERO__S3_NVME_ALIGN - 1) / ZERO__S3_NVME_ALIGN *
                           ZERO__S3_NVME_ALIGN;
    o->pfile = zero__s3_nvme_open(s, "offload_param", s->param_nvme_path, 1, 1, bytes ? (size_t)bytes : ZERO__S3_NVME_ALIGN);
    return o->pfile ? ZERO_OK : ZERO_ERR_IO;
}

static zero_status read_failed(zero__s3 *s, const zero__s3_param *p) {
    return s->svc->error(s->c, ZERO_ERR_IO,
                         "stage3: offload_param nvme_path '%s': reading the shard of param '%s' back: %s",
                         s->param_nvme_path, p->info->name, zero__s3_nvme_error(s->off->pfile));
}

/* The gather engine's in-flight request for q's owner (none once the
 * engine is destroyed: it waited for every request first). */
static const zero_comm_req *pending(const zero__s3 *s, const struct zero__s3_pslot *q) {
    return s->gather ? zero_kit_gather_pending(s->gather, q->owner->info->index) : NULL;
}

/* Is slot q free to take?  A SENDING slot is, once its request was waited
 * for (the engine no longer has it in flight, or has issued a new one). */
static int is_free(const zero__s3 *s, const struct zero__s3_pslot *q) {
    return q->state == SLOT_FREE || (q->state == SLOT_SENDING && pending(s, q) != q->req);
}

/* A sending slot whose all-gather has finished (tested through the
 * engine, not waited: a finished request leaves the engine; a failed test
 * is kept and reported by the next read, as the world is unusable anyway). */
static int finished(zero__s3 *s, struct zero__s3_pslot *q) {
    if (q->state != SLOT_SENDING || pending(s, q) != q->req) return is_free(s, q);
    int done = 0;
    zero_status st = zero_kit_gather_complete(s->gather, q->owner->info->index, 0, &done);
    if (st != ZERO_OK && s->off->send_err == ZERO_OK) s->off->send_err = st;
    return done || st != ZERO_OK;
}

/* A slot to fill now: a free one (or one whose send has finished), else the
 * oldest sending one (its request waited for), else a read-ahead dropped
 * (the newest: furthest in the future).  With `demand` 0 (read-ahead) only
 * a free one, else NULL. */
static struct zero__s3_pslot *take(zero__s3 *s, int demand) {
    zero__s3_off *o = s->off;
    struct zero__s3_pslot *oldest = NULL, *newest_ra = NULL;
    for (uint32_t k = 0; k < o->npslots; k++) {
        struct zero__s3_pslot *q = &o->pslots[k];
        if (is_free(s, q) || (!demand && finished(s, q))) {
            q->state = SLOT_FREE;
            return q;
        }
        if (q->state == SLOT_SENDING && (!oldest || q->seq < oldest->seq)) oldest = q;
        if (q->state != SLOT_SENDING && (!newest_ra || q->seq > newest_ra->seq)) newest_ra = q;
    }
    if (!demand) return NULL;
    if (oldest) {
        int done = 0; /* (a failed request is the world's failure: the next collective reports it) */
        zero_kit_gather_complete(s->gather, oldest->owner->info->index, 1, &done);
        oldest->state = SLOT_FREE;
        return oldest;
    }
    if (newest_ra->state == SLOT_READING) zero__s3_nvme_read_finish(o->pfile, &newest_ra->rd);
    newest_ra->state = SLOT_FREE;
    return newest_ra;
}

static struct zero__s3_pslot *find(zero__s3 *s, const zero__s3_param *p) {
    zero__s3_off *o = s->off;
    for (uint32_t k = 0; k < o->npslots; k++)
        if ((o->pslots[k].state == SLOT_READING || o->pslots[k].state == SLOT_READY) && o->pslots[k].owner == p)
            return &o->pslots[k];
    return NULL;
}

const void *zero__s3_pwin_piece(zero__s3 *s, zero__s3_param *p, int *slot) {
    zero__s3_off *o = s->off;
    static const char none[16];
    *slot = -1;
    if (o->send_err != ZERO_OK) {
        s->svc->error(s->c, o->send_err, "stage3: an earlier parameter all-gather failed (found while recycling "
                                         "its offload_param window slot)");
        return NULL;
    }
    if (!piece_len(s, p)) return none; /* this rank owns nothing of p: sends nothing */
    struct zero__s3_pslot *q = find(s, p);
    if (q) {
        o->n_read_ahead++;
        if (q->state == SLOT_READING && zero__s3_nvme_read_finish(o->pfile, &q->rd) != 0) {
            q->state = SLOT_FREE;
            read_failed(s, p);
            return NULL;
        }
    } else {
        q = take(s, 1);
        o->n_read_sync++;
        if (zero__s3_nvme_read_range(o->pfile, piece_off(s, p), piece_len(s, p), q->base) != 0) {
            q->state = SLOT_FREE;
            read_failed(s, p);
            return NULL;
        }
        q->owner = p;
        q->seq = ++o->pseq;
    }
    q->state = SLOT_READY;
    *slot = (int)(q - o->pslots);
    return q->base + piece_off(s, p) % ZERO__S3_NVME_ALIGN;
}

void zero__s3_pwin_sent(zero__s3 *s, int slot, zero__s3_param *p, const zero_comm_req *req) {
    if (slot < 0) return;
    struct zero__s3_pslot *q = &s->off->pslots[slot];
    q->owner = p;
    q->req = req;
    q->state = req ? SLOT_SENDING : SLOT_FREE;
}

void zero__s3_pwin_readahead(zero__s3 *s) {
    zero__s3_off *o = s->off;
    if (!o || !o->pfile) return;
    /* look as far ahead as there are slots (and a little more: pieces of
     * resident params need none) along the engine's recorded order */
    uint32_t next[4 * 64];
    const size_t look = 4 * (size_t)o->npslots < sizeof next / sizeof next[0] ? 4 * (size_t)o->npslots
                                                                              : sizeof next / sizeof next[0];
    const size_t n = zero_kit_gather_upcoming(s->gather, next, look);
    for (size_t k = 0; k < n; k++) {
        zero__s3_param *p = &s->params[next[k]];
        if (!piece_len(s, p) || find(s, p)) continue;
        struct zero__s3_pslot *q = take(s, 0);
        if (!q) return;
        if (zero__s3_nvme_read_start(o->pfile, piece_off(s, p), piece_len(s, p), q->base, &q->rd) != 0) return;
        q->owner = p;
        q->seq = ++o->pseq;
        q->state = SLOT_READING;
    }
}

void zero__s3_pwin_reset(zero__s3 *s) {
    zero__s3_off *o = s->off;
    for (uint32_t k = 0; o && k < o->npslots; k++) {
        struct zero__s3_pslot *q = &o->pslots[k];
        if (q->state == SLOT_READING) zero__s3_nvme_read_finish(o->pfile, &q->rd);
        if (q->state == SLOT_SENDING && s->gather && pending(s, q) == q->req) {
            int done = 0;
            zero_kit_gather_complete(s->gather, q->owner->info->index, 1, &done);
        }
        q->state = SLOT_FREE;
        q->owner = NULL;
    }
}

void zero__s3_pwin_free(zero__s3 *s) {
    zero__s3_off *o = s->off;
    if (!o || !o->pslots) return;
    zero__s3_pwin_reset(s);
    if (o->n_read_ahead + o->n_read_sync)
        s->svc->log(s->c, ZERO_LOG_INFO,
                    "stage3: offload_param nvme: %llu shard pieces read ahead, %llu read on demand, window of %u "
                    "slots of %zu bytes",
                    (unsigned long long)o->n_read_ahead, (unsigned long long)o->n_read_sync, o->npslots,
                    o->pslot_bytes);
    for (uint32_t k = 0; k < o->npslots; k++) s->svc->mem_free(s->c, o->pslots[k].raw);
    free(o->pslots);
    o->pslots = NULL;
    zero__s3_nvme_close(o->pfile);
    o->pfile = NULL;
}
