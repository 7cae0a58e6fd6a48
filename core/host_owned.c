/* (1.1) ZERO_PARAM_HOST_OWNED: libzero writes its values into the host's
 * tensors, and (1.7.4) finds a host that wrote them itself (host_owned.h).
 *
 * Why the check: the contract says the host must not write a host-owned
 * tensor after zero_params_done, because libzero's copy, not the tensor,
 * is what the optimizer steps, and the next writeback overwrites the
 * tensor.  A C host that loaded weights or scaled a tensor in place after
 * zero_params_done trained on from libzero's old values without a word (a
 * torch host has version counters and zero.torch checks them; a C host has
 * nothing).  Between two writebacks the tensor must hold exactly what
 * libzero wrote, so comparing it with libzero's copy at the boundary, before
 * the optimizer moves that copy, finds such a write with no state of its own. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_mem.h"
#include "host_owned.h"
#include "log.h"
#include "optim_math.h"
#include "step_timing.h"

enum { LINE = 64, STRIDE = 4096 };

static size_t elem_size(const struct zero_param *p) { return p->info.dtype == ZERO_DTYPE_F32 ? 4 : 2; }

zero_status zero__host_owned_writeback(zero_engine *e, const char *when) {
    if (!e->any_host_owned) return ZERO_OK;
    zero__span sp = zero__phase_begin(e); /* (1.3) zero_step's copy-out */
    zero_status s = ZERO_OK;
    for (uint32_t i = 0; i < e->nparams && s == ZERO_OK; i++) {
        struct zero_param *p = e->params[i];
        if (!p->host_data) continue;
        if (!p->info.data) {
            s = zero__error(e, ZERO_ERR_UNSUPPORTED,
                            "%s: param '%s' is ZERO_PARAM_HOST_OWNED but plugin '%s' keeps no full copy of it "
                            "(zero_param_info.data is NULL)",
                            when, p->name, e->plugin.table->name ? e->plugin.table->name : "?");
            break;
        }
        /* mem_copy: any direction between host and device memory, ordered
         * on the device's stream; the step's device ordering after this
         * makes the host's stream wait for it */
        zero__engine_copy(zero__core_of(e), p->host_data, p->info.data, (size_t)p->info.numel * elem_size(p));
    }
    zero__phase_end(e, sp, ZERO__PH_COPY);
    return s;
}

/* The offset of the first byte in [at, at + len) where a and b differ, or
 * SIZE_MAX. */
static size_t differ_in(const unsigned char *a, const unsigned char *b, size_t at, size_t len) {
    if (memcmp(a + at, b + at, len) == 0) return SIZE_MAX;
    while (a[at] == b[at]) at++;
    return at;
}

/* The offset of the first differing byte of a and b (n bytes) among those
 * compared, or SIZE_MAX when they agree there.  full: every byte; else the
 * line at every STRIDE bytes from 0 and the last line (host_owned.h). */
static size_t first_difference(const unsigned char *a, const unsigned char *b, size_t n, int full) {
    if (full) return n ? differ_in(a, b, 0, n) : SIZE_MAX;
    for (size_t at = 0; at < n; at += STRIDE) {
        const size_t r = differ_in(a, b, at, n - at < LINE ? n - at : LINE);
        if (r != SIZE_MAX) return r;
    }
    const size_t tail = n > LINE ? n - LINE : 0;
    return differ_in(a, b, tail, n - tail);
}

static double value_at(const struct zero_param *p, const void *base, size_t i) {
    if (p->info.dtype == ZERO_DTYPE_F32) {
        float f;
        memcpy(&f, (const char *)base + 4 * i, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, (const char *)base + 2 * i, 2);
    return p->info.dtype == ZERO_DTYPE_BF16 ? zero_bf16_to_f32(h) : zero_f16_to_f32(h);
}

zero_status zero__host_owned_check(zero_engine *e) {
    if (!e->any_host_owned || e->dev) return ZERO_OK;
    const char *mode = getenv("ZERO_CHECK_HOST_WRITES");
    if (mode && !strcmp(mode, "off")) return ZERO_OK;
    const int full = mode && !strcmp(mode, "full");
    zero__span sp = zero__phase_begin(e); /* with the copy-out it guards */
    const struct zero_param *first = NULL;
    size_t first_at = 0;
    uint32_t written = 0;
    for (uint32_t i = 0; i < e->nparams; i++) {
        const struct zero_param *p = e->params[i];
        if (!p->host_data || !p->info.data || p->host_device != ZERO_DEVICE_CPU) continue;
        const size_t n = (size_t)p->info.numel * elem_size(p);
        const size_t at = first_difference(p->host_data, p->info.data, n, full);
        if (at == SIZE_MAX) continue;
        if (!written++) first = p, first_at = at / elem_size(p);
    }
    zero__phase_end(e, sp, ZERO__PH_COPY);
    if (!written) return ZERO_OK;
    char more[64] = "";
    if (written > 1) snprintf(more, sizeof more, " (and %u more param%s)", written - 1, written > 2 ? "s" : "");
    return zero__error(e, ZERO_ERR_STATE,
                       "zero_step: param '%s'%s is ZERO_PARAM_HOST_OWNED and was written by the host after "
                       "zero_params_done: element %zu is %.9g in the host's tensor but %.9g in libzero's copy, which "
                       "is what the optimizer steps and what this step would write back over the host's change. "
                       "Set initial values before zero_params_done (zero_param_desc.data) or load a checkpoint "
                       "with zero_load; no weight moved, the accumulation window is kept",
                       first->name, more, first_at, value_at(first, first->host_data, first_at),
                       value_at(first, first->info.data, first_at));
}
