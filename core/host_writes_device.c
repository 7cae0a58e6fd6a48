/* (1.13) The host-write check's fingerprints on a device engine
 * (host_writes_device.h says what is kept where and why). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "host_writes_device.h"
#include "log.h"
#include "memory.h"
#include "print_math.h"

static size_t slot_words(const struct zero_engine *e) { return (size_t)ZERO__HW_KINDS * e->nparams; }

static void turn_off(struct zero_engine *e, const char *why) {
    if (e->hwd_off) return;
    e->hwd_off = 1;
    zero__log(e, ZERO_LOG_WARN,
              "host-write check (ZERO_CHECK_HOST_WRITES) off on this device engine: %s; a write the host makes "
              "to libzero's copies is no longer found",
              why);
}

int zero__hwd_ready(struct zero_engine *e) {
    if (e->hwd_off || !e->dev) return 0;
    if (e->hwd_slots) return 1;
    if (!zero__dev_has_prints(e->dev)) { /* no warning: the device says it cannot (a documented gap) */
        e->hwd_off = 1;
        return 0;
    }
    const size_t bytes = (slot_words(e) ? slot_words(e) : 1) * sizeof(uint64_t);
    e->hwd_slots = zero__mem_alloc(e->mem, ZERO_TIER_DEVICE, ZERO_MEM_OTHER, bytes); /* zero-filled */
    e->hwd_host = calloc(slot_words(e) ? slot_words(e) : 1, sizeof(uint64_t));
    e->hwd_side = calloc(slot_words(e) ? slot_words(e) : 1, sizeof(uint64_t));
    if (!e->hwd_slots || !e->hwd_host || !e->hwd_side) {
        zero__hwd_free(e);
        turn_off(e, "out of memory for the fingerprint slots");
        return 0;
    }
    return 1;
}

void zero__hwd_queue(struct zero_engine *e, int kind, struct zero_param *const *params, const void *const *x,
                     const uint64_t *bytes, size_t n, int full, int add) {
    if (!n || !zero__hwd_ready(e)) return;
    uint32_t *slot = malloc(n * sizeof *slot);
    const void **dx = malloc(n * sizeof *dx);
    uint64_t *db = malloc(n * sizeof *db);
    if (!slot || !dx || !db) {
        free(slot), free(dx), free(db);
        turn_off(e, "out of memory");
        return;
    }
    size_t k = 0; /* the pieces in device memory, queued together */
    for (size_t i = 0; i < n; i++) {
        const uint32_t at = (uint32_t)kind * e->nparams + params[i]->info.index;
        if (!bytes[i]) continue;
        if (zero__dev_is_device(e->dev, x[i])) {
            slot[k] = at, dx[k] = x[i], db[k++] = bytes[i];
            continue;
        }
        const uint64_t f = zero_print_bytes(x[i], bytes[i], full ? ZERO_PRINT_LINE : ZERO_PRINT_STRIDE);
        e->hwd_side[at] = add ? e->hwd_side[at] + f : f;
    }
    const zero_status s = zero__dev_prints(e->dev, dx, db, slot, k, full, e->hwd_slots, add);
    free(slot), free(dx), free(db);
    if (s != ZERO_OK) turn_off(e, zero__dev_error(e->dev));
}

zero_status zero__hwd_read(struct zero_engine *e) {
    const zero_status s = zero__dev_copy(e->dev, e->hwd_host, e->hwd_slots, slot_words(e) * sizeof(uint64_t));
    if (s != ZERO_OK) turn_off(e, zero__dev_error(e->dev));
    return s == ZERO_OK ? ZERO_OK : ZERO_ERR_DEVICE;
}

zero_status zero__hwd_write_sums(struct zero_engine *e) {
    const size_t at = (size_t)ZERO__HW_GATHER * e->nparams;
    const zero_status s =
        zero__dev_copy(e->dev, e->hwd_slots + at, e->hwd_host + at, 2 * (size_t)e->nparams * sizeof(uint64_t));
    if (s != ZERO_OK) turn_off(e, zero__dev_error(e->dev));
    return s;
}

size_t zero__hwd_first_difference(struct zero_engine *e, const struct zero_param *p, const void *a, const void *b,
                                  unsigned char va[4], unsigned char vb[4]) {
    const size_t es = zero__dtype_size(p->info.dtype), bytes = (size_t)p->info.numel * es;
    unsigned char *ha = malloc(bytes ? bytes : 1), *hb = malloc(bytes ? bytes : 1);
    size_t at = SIZE_MAX;
    if (ha && hb && zero__dev_copy(e->dev, ha, a, bytes) == ZERO_OK && zero__dev_copy(e->dev, hb, b, bytes) == ZERO_OK)
        for (size_t i = 0; i < (size_t)p->info.numel; i++)
            if (memcmp(ha + i * es, hb + i * es, es)) {
                memcpy(va, ha + i * es, es);
                memcpy(vb, hb + i * es, es);
                at = i;
                break;
            }
    free(ha);
    free(hb);
    return at;
}

void zero__hwd_free(struct zero_engine *e) {
    if (e->hwd_slots) zero__mem_free(e->mem, e->hwd_slots);
    free(e->hwd_host);
    free(e->hwd_side);
    e->hwd_slots = e->hwd_host = e->hwd_side = NULL;
}
