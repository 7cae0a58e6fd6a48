/* Accounted memory (see memory.h for the contract).
 *
 * Each accountant keeps a pointer -> (bytes, tier, tag) table rather than a
 * header in front of each block: the device tier will be cudaMalloc'd memory
 * the host cannot write a header into, and a table also lets free() of an
 * unknown pointer be detected instead of corrupting the heap.  The table is
 * open addressing with linear probing and backward-shift deletion (no
 * tombstones, so lookups stay short however many alloc/free cycles run).
 * One mutex guards table and counters; allocation itself (the expensive
 * part: zero-filling) happens outside the lock. */
#include "memory.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "log.h"
#include "owner.h"
#include "shared_blocks.h"

#define ZERO_MEM_ALIGN 64

typedef struct mem_entry {
    void *ptr; /* NULL = empty slot */
    size_t bytes;
    zero_mem_tier tier;
    zero_mem_tag tag;
    int on_dev; /* came from the device backend (device memory or pinned host) */
    size_t mapped; /* > 0: an anonymous mapping of this many bytes (large host blocks) */
    int shared;    /* the mapping is a shared block (shared_blocks.h) */
} mem_entry;

struct zero__mem {
    pthread_mutex_t lock;
    mem_entry *slots;
    size_t cap; /* power of two */
    size_t count;
    uint64_t current[ZERO_NTIERS][ZERO_MEM_NTAGS];
    uint64_t peak[ZERO_NTIERS][ZERO_MEM_NTAGS];
    uint64_t current_total[ZERO_NTIERS];
    uint64_t peak_total[ZERO_NTIERS];
    zero__mem_backing dev; /* alloc NULL: both tiers are plain host memory */
};

/* Fibonacci hashing of the pointer; low bits of aligned pointers are zero. */
static size_t slot_of(const void *p, size_t cap) {
    uint64_t h = (uint64_t)(uintptr_t)p * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 32) & (cap - 1);
}

zero__mem *zero__mem_create(void) {
    zero__mem *m = calloc(1, sizeof(*m));
    if (!m) return NULL;
    m->cap = 64;
    m->slots = calloc(m->cap, sizeof(*m->slots));
    if (!m->slots || pthread_mutex_init(&m->lock, NULL) != 0) {
        free(m->slots);
        free(m);
        return NULL;
    }
    return m;
}

/* Insert without growth check (caller guarantees a free slot). */
static void table_put(mem_entry *slots, size_t cap, const mem_entry *e) {
    size_t i = slot_of(e->ptr, cap);
    while (slots[i].ptr) i = (i + 1) & (cap - 1);
    slots[i] = *e;
}

/* Keep the load factor <= 1/2.  Called with the lock held. */
static int table_reserve(zero__mem *m) {
    if ((m->count + 1) * 2 <= m->cap) return 0;
    size_t ncap = m->cap * 2;
    mem_entry *ns = calloc(ncap, sizeof(*ns));
    if (!ns) return -1;
    for (size_t i = 0; i < m->cap; ++i)
        if (m->slots[i].ptr) table_put(ns, ncap, &m->slots[i]);
    free(m->slots);
    m->slots = ns;
    m->cap = ncap;
    return 0;
}

/* Remove p; returns 1 and fills *out if found.  Lock held. */
static int table_take(zero__mem *m, const void *p, mem_entry *out) {
    size_t mask = m->cap - 1, i = slot_of(p, m->cap);
    while (m->slots[i].ptr && m->slots[i].ptr != p) i = (i + 1) & mask;
    if (!m->slots[i].ptr) return 0;
    *out = m->slots[i];
    /* backward-shift: pull later members of the probe run into the hole */
    size_t hole = i, j = i;
    for (;;) {
        j = (j + 1) & mask;
        if (!m->slots[j].ptr) break;
        size_t home = slot_of(m->slots[j].ptr, m->cap);
        /* j may move to hole unless its home lies cyclically in (hole, j] */
        int stays = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
        if (!stays) {
            m->slots[hole] = m->slots[j];
            hole = j;
        }
    }
    m->slots[hole].ptr = NULL;
    m->count--;
    return 1;
}

static int tier_tag_ok(zero_mem_tier tier, zero_mem_tag tag) {
    return tier >= 0 && tier < ZERO_NTIERS && tag >= 0 && tag < ZERO_MEM_NTAGS;
}

void zero__mem_set_backing(zero__mem *m, const zero__mem_backing *b) {
    if (!m) return;
    if (b && b->alloc)
        m->dev = *b;
    else
        memset(&m->dev, 0, sizeof m->dev);
}

void zero__engine_note_scratch(struct zero_engine *e, zero_mem_tier tier, int64_t delta) {
    const zero__owner *o = zero__owner_of(e);
    if (o && o->mem && *o->mem) zero__mem_note(*o->mem, tier, ZERO_MEM_OTHER, delta);
}

/* Where a block of `tier` comes from: the device backend for the device
 * tier (cudaMalloc'd arenas) and, when the device pins host memory, for the
 * host tier too; otherwise aligned_alloc. */
static int from_device(const zero__mem *m, zero_mem_tier tier) {
    return m->dev.alloc && (tier == ZERO_TIER_DEVICE || (m->dev.pin_host && *m->dev.pin_host));
}

/* Host blocks of at least this size are anonymous mappings rather than
 * heap blocks, so that freeing one gives its pages back to the system at
 * once: otherwise glibc raises its mmap threshold after the first large
 * free and keeps later freed blocks in the heap, and resident memory no
 * longer follows the accounting (a stage-3 gather pool that is released
 * and refilled left ~10 MB resident at 5M params: docs/memory.md). */
#define ZERO_MEM_MAP_MIN ((size_t)1 << 20)
#define ZERO_MEM_SHARE_MIN ((size_t)64 << 10)

/* Whole pages: what a mapping of `bytes` takes. */
static size_t page_round(size_t bytes) {
    const long pg = sysconf(_SC_PAGESIZE);
    const size_t page = pg > 0 ? (size_t)pg : 4096;
    return (bytes + page - 1) / page * page;
}

static void block_free(zero__mem *m, const mem_entry *e) {
    if (e->shared)
        zero__shared_block_free(e->ptr);
    else if (e->mapped)
        munmap(e->ptr, e->mapped);
    else if (e->on_dev)
        m->dev.free(m->dev.ctx, e->ptr);
    else
        free(e->ptr);
}

void *zero__mem_alloc(zero__mem *m, zero_mem_tier tier, zero_mem_tag tag, size_t bytes) {
    if (!m || !tier_tag_ok(tier, tag)) return NULL;
    int on_dev = from_device(m, tier);
    void *p = NULL;
    size_t mapped = 0;
    int shared = 0;
    if (on_dev) {
        /* zero-filled by the backend; 256-byte aligned (>= ZERO_MEM_ALIGN) */
        if (!(p = m->dev.alloc(m->dev.ctx, tier, bytes ? bytes : 1))) return NULL;
        goto record;
    }
    /* aligned_alloc wants a multiple of the alignment; a 0-byte request still
     * gets a real, unique block so it can be tracked and freed. */
    if (bytes > SIZE_MAX - ZERO_MEM_ALIGN) return NULL;
    size_t rounded = bytes == 0 ? ZERO_MEM_ALIGN : (bytes + ZERO_MEM_ALIGN - 1) & ~(size_t)(ZERO_MEM_ALIGN - 1);
    const size_t len = rounded >= ZERO_MEM_SHARE_MIN ? page_round(rounded) : 0; /* mappings only */
    /* once a communicator shares this node with its peers, blocks a
     * collective may read are shared ones the peers read directly (issue
     * 18); from 64 KiB, so that a small model's buckets take that path too
     * (an op runs in shared memory only if every rank's buffer is shared) */
    if (rounded >= ZERO_MEM_SHARE_MIN && (p = zero__shared_block_alloc(len)) != NULL) {
        mapped = len;
        shared = 1;
        goto record;
    }
    if (rounded >= ZERO_MEM_MAP_MIN) {
        void *q = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (q != MAP_FAILED) { /* zero-filled and page-aligned by the kernel */
            p = q;
            mapped = len;
            goto record;
        }
    }
    p = aligned_alloc(ZERO_MEM_ALIGN, rounded);
    if (!p) return NULL;
    memset(p, 0, rounded);

record:;
    mem_entry e = {p, bytes, tier, tag, on_dev, mapped, shared};
    pthread_mutex_lock(&m->lock);
    if (table_reserve(m) != 0) {
        pthread_mutex_unlock(&m->lock);
        block_free(m, &e);
        return NULL;
    }
    table_put(m->slots, m->cap, &e);
    m->count++;
    m->current[tier][tag] += bytes;
    if (m->current[tier][tag] > m->peak[tier][tag]) m->peak[tier][tag] = m->current[tier][tag];
    m->current_total[tier] += bytes;
    if (m->current_total[tier] > m->peak_total[tier]) m->peak_total[tier] = m->current_total[tier];
    pthread_mutex_unlock(&m->lock);
    return p;
}

void zero__mem_free(zero__mem *m, void *p) {
    if (!m || !p) return;
    mem_entry e;
    pthread_mutex_lock(&m->lock);
    int found = table_take(m, p, &e);
    if (found) {
        m->current[e.tier][e.tag] -= e.bytes;
        m->current_total[e.tier] -= e.bytes;
    }
    pthread_mutex_unlock(&m->lock);
    if (found)
        block_free(m, &e);
    else
        zero__log(NULL, ZERO_LOG_DEBUG, "memory: free of a pointer this accountant did not allocate (%p), ignored",
                  p);
}

void zero__mem_stats(const zero__mem *m, zero_memory_stats *out) {
    if (!m || !out) return;
    zero_memory_stats s;
    memset(&s, 0, sizeof(s));
    /* The mutex is logically not part of the accountant's value: lock through
     * a cast so the query can take a const accountant. */
    pthread_mutex_t *lock = (pthread_mutex_t *)&m->lock;
    pthread_mutex_lock(lock);
    memcpy(s.current, m->current, sizeof(s.current));
    memcpy(s.peak, m->peak, sizeof(s.peak));
    memcpy(s.current_total, m->current_total, sizeof(s.current_total));
    memcpy(s.peak_total, m->peak_total, sizeof(s.peak_total));
    pthread_mutex_unlock(lock);
    /* Honour the caller's struct_size: an older, smaller struct gets only the
     * fields it has. */
    size_t n = out->struct_size < sizeof(s) ? out->struct_size : sizeof(s);
    if (n <= sizeof(s.struct_size) + sizeof(s.reserved0)) return;
    size_t skip = offsetof(zero_memory_stats, current);
    memcpy((char *)out + skip, (const char *)&s + skip, n - skip);
}

void zero__mem_note(zero__mem *m, zero_mem_tier tier, zero_mem_tag tag, int64_t delta) {
    if (!m || tier < 0 || tier >= ZERO_NTIERS || tag < 0 || tag >= ZERO_MEM_NTAGS || delta == 0) return;
    pthread_mutex_lock(&m->lock);
    if (delta > 0) {
        m->current[tier][tag] += (uint64_t)delta;
        if (m->current[tier][tag] > m->peak[tier][tag]) m->peak[tier][tag] = m->current[tier][tag];
        m->current_total[tier] += (uint64_t)delta;
        if (m->current_total[tier] > m->peak_total[tier]) m->peak_total[tier] = m->current_total[tier];
    } else {
        uint64_t d = (uint64_t)(-delta);
        m->current[tier][tag] -= d < m->current[tier][tag] ? d : m->current[tier][tag];
        m->current_total[tier] -= d < m->current_total[tier] ? d : m->current_total[tier];
    }
    pthread_mutex_unlock(&m->lock);
}

void zero__mem_destroy(zero__mem *m) {
    if (!m) return;
    size_t leaked = 0;
    uint64_t leaked_bytes = 0;
    for (size_t i = 0; i < m->cap; ++i) {
        if (m->slots[i].ptr) {
            ++leaked;
            leaked_bytes += m->slots[i].bytes;
            block_free(m, &m->slots[i]);
        }
    }
    if (leaked)
        zero__log(NULL, ZERO_LOG_DEBUG, "memory: %zu block(s) (%llu bytes) still allocated at destroy, freed",
                  leaked, (unsigned long long)leaked_bytes);
    pthread_mutex_destroy(&m->lock);
    free(m->slots);
    free(m);
}
