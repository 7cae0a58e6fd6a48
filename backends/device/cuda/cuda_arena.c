/* Best-fit pooled sub-allocator; see cuda_arena.h.  Bookkeeping is one array
 * of segments sorted by address, so free() finds a block by binary search
 * and coalescing only looks at the two neighbours.  O(segments) per alloc is
 * fine: ZeRO allocates a few dozen long-lived buffers, not millions. */
#include "cuda_arena.h"

#include <stdlib.h>
#include <string.h>

typedef struct seg {
    uintptr_t addr;
    size_t size;
    uint32_t region;
    uint32_t is_free;
} seg;

struct zero_cuda_arena {
    size_t align;
    seg *segs;
    size_t nsegs, cap;
    uintptr_t *region_base;
    size_t *region_size;
    size_t nregions;
    size_t used, peak_used, live;
};

zero_cuda_arena *zero_cuda_arena_create(size_t align) {
    if (align == 0 || (align & (align - 1)) != 0) return NULL;
    zero_cuda_arena *a = calloc(1, sizeof *a);
    if (a) a->align = align;
    return a;
}

void zero_cuda_arena_destroy(zero_cuda_arena *a) {
    if (!a) return;
    free(a->segs);
    free(a->region_base);
    free(a->region_size);
    free(a);
}

static int reserve(zero_cuda_arena *a, size_t n) {
    if (n <= a->cap) return 0;
    size_t cap = a->cap ? a->cap * 2 : 16;
    while (cap < n) cap *= 2;
    seg *s = realloc(a->segs, cap * sizeof *s);
    if (!s) return -1;
    a->segs = s;
    a->cap = cap;
    return 0;
}

static int insert_at(zero_cuda_arena *a, size_t i, seg s) {
    if (reserve(a, a->nsegs + 1) != 0) return -1;
    memmove(a->segs + i + 1, a->segs + i, (a->nsegs - i) * sizeof(seg));
    a->segs[i] = s;
    a->nsegs++;
    return 0;
}

static void remove_at(zero_cuda_arena *a, size_t i) {
    memmove(a->segs + i, a->segs + i + 1, (a->nsegs - i - 1) * sizeof(seg));
    a->nsegs--;
}

/* Index of the first segment with addr >= p. */
static size_t lower_bound(const zero_cuda_arena *a, uintptr_t p) {
    size_t lo = 0, hi = a->nsegs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (a->segs[mid].addr < p) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

int zero_cuda_arena_add_region(zero_cuda_arena *a, void *base, size_t bytes) {
    if (!a || !base) return -1;
    /* Align the usable start; the region must hold at least one block. */
    uintptr_t b = (uintptr_t)base;
    uintptr_t start = (b + a->align - 1) & ~(uintptr_t)(a->align - 1);
    if (start - b >= bytes) return -1;
    size_t usable = (bytes - (size_t)(start - b)) & ~(a->align - 1);
    if (usable == 0) return -1;
    for (size_t i = 0; i < a->nregions; ++i) { /* overlapping regions would corrupt */
        uintptr_t rb = a->region_base[i];
        if (b < rb + a->region_size[i] && rb < b + bytes) return -1;
    }
    uintptr_t *rb = realloc(a->region_base, (a->nregions + 1) * sizeof *rb);
    if (!rb) return -1;
    a->region_base = rb;
    size_t *rs = realloc(a->region_size, (a->nregions + 1) * sizeof *rs);
    if (!rs) return -1;
    a->region_size = rs;
    seg s = { start, usable, (uint32_t)a->nregions, 1 };
    if (insert_at(a, lower_bound(a, start), s) != 0) return -1;
    a->region_base[a->nregions] = b;
    a->region_size[a->nregions] = bytes;
    a->nregions++;
    return 0;
}

void *zero_cuda_arena_alloc(zero_cuda_arena *a, size_t bytes) {
    if (!a) return NULL;
    if (bytes == 0) bytes = 1;
    if (bytes > SIZE_MAX - a->align) return NULL;
    size_t need = (bytes + a->align - 1) & ~(a->align - 1);
    size_t best = a->nsegs;
    for (size_t i = 0; i < a->nsegs; ++i) {
        const seg *s = &a->segs[i];
        if (s->is_free && s->size >= need && (best == a->nsegs || s->size < a->segs[best].size)) {
            best = i;
            if (s->size == need) break;
        }
    }
    if (best == a->nsegs) return NULL;
    seg *s = &a->segs[best];
    if (s->size > need) {
        /* Split: the tail stays free.  If the bookkeeping cannot grow, hand
         * out the whole segment rather than fail. */
        seg tail = { s->addr + need, s->size - need, s->region, 1 };
        if (insert_at(a, best + 1, tail) == 0) a->segs[best].size = need;
    }
    s = &a->segs[best];
    s->is_free = 0;
    a->used += s->size;
    if (a->used > a->peak_used) a->peak_used = a->used;
    a->live++;
    return (void *)s->addr;
}

static size_t find_live(const zero_cuda_arena *a, const void *p) {
    size_t i = lower_bound(a, (uintptr_t)p);
    if (i < a->nsegs && a->segs[i].addr == (uintptr_t)p && !a->segs[i].is_free) return i;
    return (size_t)-1;
}

int zero_cuda_arena_free(zero_cuda_arena *a, void *p) {
    if (!p) return 0;
    if (!a) return -1;
    size_t i = find_live(a, p);
    if (i == (size_t)-1) return -1;
    a->segs[i].is_free = 1;
    a->used -= a->segs[i].size;
    a->live--;
    /* Coalesce with the next, then the previous free neighbour (same region:
     * two regions may happen to be adjacent in the address space but came
     * from different cudaMalloc calls and must stay apart). */
    if (i + 1 < a->nsegs && a->segs[i + 1].is_free && a->segs[i + 1].region == a->segs[i].region &&
        a->segs[i].addr + a->segs[i].size == a->segs[i + 1].addr) {
        a->segs[i].size += a->segs[i + 1].size;
        remove_at(a, i + 1);
    }
    if (i > 0 && a->segs[i - 1].is_free && a->segs[i - 1].region == a->segs[i].region &&
        a->segs[i - 1].addr + a->segs[i - 1].size == a->segs[i].addr) {
        a->segs[i - 1].size += a->segs[i].size;
        remove_at(a, i);
    }
    return 0;
}

size_t zero_cuda_arena_block_size(const zero_cuda_arena *a, const void *p) {
    if (!a || !p) return 0;
    size_t i = find_live(a, p);
    return i == (size_t)-1 ? 0 : a->segs[i].size;
}

int zero_cuda_arena_owns(const zero_cuda_arena *a, const void *p) {
    if (!a) return 0;
    uintptr_t q = (uintptr_t)p;
    for (size_t i = 0; i < a->nregions; ++i)
        if (q >= a->region_base[i] && q < a->region_base[i] + a->region_size[i]) return 1;
    return 0;
}

void zero_cuda_arena_stats_get(const zero_cuda_arena *a, zero_cuda_arena_stats *out) {
    memset(out, 0, sizeof *out);
    if (!a) return;
    for (size_t i = 0; i < a->nregions; ++i) out->capacity += a->region_size[i];
    for (size_t i = 0; i < a->nsegs; ++i)
        if (a->segs[i].is_free && a->segs[i].size > out->largest_free) out->largest_free = a->segs[i].size;
    out->used = a->used;
    out->peak_used = a->peak_used;
    out->live_blocks = a->live;
    out->regions = a->nregions;
}

void *zero_cuda_arena_region(const zero_cuda_arena *a, size_t i) {
    return (a && i < a->nregions) ? (void *)a->region_base[i] : NULL;
}
