/* (1.7.4) Parameters the host wrote after zero_params_done (host_writes.h
 * says which writes, why they were silent and what is compared).
 *
 * Between two of libzero's own writes a parameter's bytes cannot change:
 * a host-owned tensor must hold exactly what the last writeback put there,
 * libzero's copy exactly what the last step (or params_done, or load) left.
 * So the check needs no state beyond a fingerprint of libzero's copy, and
 * runs at the boundary, before the optimizer moves that copy. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "env.h"
#include "host_writes.h"
#include "host_writes_device.h"
#include "log.h"
#include "optim_math.h"
#include "params.h"
#include "step_timing.h"

enum { LINE = 64, STRIDE = 4096 };
enum { CHECK_OFF, CHECK_SAMPLED, CHECK_FULL };
#define PRINT_SEED 0x6a09e667f3bcc909ULL

static int check_mode(zero_engine *e) {
    const char *m = NULL; /* a bad value was refused at engine creation (env.c) */
    const int mode = zero__env_choice("ZERO_CHECK_HOST_WRITES", &m) != 1 ? CHECK_SAMPLED
                     : !strcmp(m, "off")                                   ? CHECK_OFF
                     : !strcmp(m, "full")                                  ? CHECK_FULL
                                                                           : CHECK_SAMPLED;
    /* (1.13) a device engine's copies are fingerprinted on the device
     * (host_writes_device.h), where the device can */
    return mode != CHECK_OFF && e->dev && !zero__hwd_ready(e) ? CHECK_OFF : mode;
}

static size_t bytes_of(const struct zero_param *p) { return (size_t)p->info.numel * zero__dtype_size(p->info.dtype); }

/* A host-owned tensor (on the host; on a device engine, anywhere):
 * compared with libzero's copy, which finds a write into either (kind 1
 * or 2), so its copy needs no fingerprint of its own. */
static int tensor_compared(const zero_engine *e, const struct zero_param *p) {
    return p->host_data && p->info.data && (e->dev || p->host_device == ZERO_DEVICE_CPU);
}

/* libzero's copy is what zero_gather / zero_param_storage hand out: a
 * plugin that keeps full copies (stage 3 gathers separately, see
 * zero__host_writes_gathered) */
static int copy_handed_out(const zero_engine *e, const struct zero_param *p) {
    return p->info.data && !(e->plugin.table->caps & ZERO_PLUGIN_CAP_PARTITIONS_PARAMS) && !tensor_compared(e, p);
}

static size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

/* How far ahead the sampled loops prefetch: each sampled line is on a page
 * of its own, so neither the cache's nor the TLB's prefetcher sees it
 * coming, and one miss at a time made the sampled check cost several times
 * its bytes. */
#define AHEAD (8 * STRIDE)


/* One 64-byte line (or the len < 64 bytes of a short tensor) to a word:
 * each 8-byte word times an odd constant of its own, summed (a change to
 * any one word always changes the sum), then mixed into h. */
static uint64_t line_print(uint64_t h, const unsigned char *b, size_t len) {
    static const uint64_t K[8] = {0x9e3779b97f4a7c15ULL, 0xc2b2ae3d27d4eb4fULL, 0x165667b19e3779f9ULL,
                                  0xd6e8feb86659fd93ULL, 0xa0761d6478bd642fULL, 0xe7037ed1a0b428dbULL,
                                  0x8ebc6af09c88c6e3ULL, 0x589965cc75374cc3ULL};
    uint64_t w[8] = {0};
    memcpy(w, b, len < LINE ? len : LINE);
    uint64_t a = len;
    for (int k = 0; k < 8; k++) a += w[k] * K[k];
    return zero__hash_mix(h, a);
}

/* The fingerprint of n bytes at b: all of them (full) or the sampled
 * lines (host_writes.h). */
static uint64_t print_of(const unsigned char *b, size_t n, int mode) {
    if (mode == CHECK_FULL) return zero__params_hash_bytes(PRINT_SEED, b, n);
    uint64_t h = PRINT_SEED ^ n;
    for (size_t at = 0; at < n; at += STRIDE) {
        if (at + AHEAD < n) __builtin_prefetch(b + at + AHEAD);
        h = line_print(h, b + at, min_size(LINE, n - at));
    }
    const size_t tail = n > LINE ? n - LINE : 0;
    return line_print(h, b + tail, n - tail);
}

static void note_one(zero_engine *e, struct zero_param *p, int mode) {
    p->copy_printed = mode != CHECK_OFF && copy_handed_out(e, p);
    if (p->copy_printed) {
        p->copy_print = print_of(p->info.data, bytes_of(p), mode);
        p->copy_print_mode = mode;
    }
}

/* (1.13) A device engine: the copies' fingerprints queued on the device
 * (no wait), into their NOTED slots. */
static void note_device(zero_engine *e, zero_param *const *params, size_t n, int mode) {
    const void **x = malloc((n ? n : 1) * sizeof *x);
    uint64_t *bytes = malloc((n ? n : 1) * sizeof *bytes);
    for (size_t i = 0; i < n; i++) {
        struct zero_param *p = params[i];
        p->copy_printed = x && bytes && mode != CHECK_OFF && copy_handed_out(e, p);
        p->copy_print_mode = mode;
        if (x && bytes) x[i] = p->info.data, bytes[i] = p->copy_printed ? bytes_of(p) : 0;
    }
    if (x && bytes && mode != CHECK_OFF)
        zero__hwd_queue(e, ZERO__HW_NOTED, params, x, bytes, n, mode == CHECK_FULL, 0);
    free(x);
    free(bytes);
}

void zero__host_writes_note(zero_engine *e) {
    const int mode = check_mode(e);
    e->gathered_writes = 0; /* libzero's values are whole again (a load), or were checked (a step) */
    e->gathered_written = NULL;
    zero__span sp = zero__phase_begin(e); /* with the copy-out, which also follows libzero's writes */
    if (e->dev) note_device(e, e->params, e->nparams, mode);
    else
        for (uint32_t i = 0; i < e->nparams; i++) note_one(e, e->params[i], mode);
    zero__phase_end(e, sp, ZERO__PH_COPY);
}

void zero__host_writes_note_params(zero_engine *e, zero_param *const *params, size_t n) {
    const int mode = check_mode(e);
    if (e->dev) {
        note_device(e, params, n, mode);
        return;
    }
    for (size_t i = 0; i < n; i++) note_one(e, params[i], mode);
}

/* (1.13) A device engine: each gathered (or released) copy's fingerprint
 * added to the param's GATHER (RELEASE) sum on the device, no wait; the
 * boundary's check compares the two sums of every param no longer held. */
static void gathers_device(zero_engine *e, int kind, zero_param *const *params, size_t n, const void *const *ptrs,
                           int mode) {
    /* a param handed no copy is a piece of 0 bytes, which zero__hwd_queue
     * leaves out: a sum takes in nothing else */
    uint64_t *bytes = malloc((n ? n : 1) * sizeof *bytes);
    if (!bytes) return;
    for (size_t i = 0; i < n; i++) bytes[i] = ptrs[i] ? bytes_of(params[i]) : 0;
    zero__hwd_queue(e, kind, params, ptrs, bytes, n, mode == CHECK_FULL, 1);
    free(bytes);
}

void zero__host_writes_gathered(zero_engine *e, zero_param *const *params, size_t n, void *const *ptrs) {
    const int mode = check_mode(e);
    if (e->dev) {
        if (mode == CHECK_OFF) return;
        for (size_t i = 0; i < n; i++) {
            params[i]->gathered_mode = ptrs[i] ? mode : params[i]->gathered_mode;
            if (ptrs[i]) params[i]->gathered = ptrs[i];
        }
        gathers_device(e, ZERO__HW_GATHER, params, n, (const void *const *)ptrs, mode);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        struct zero_param *p = params[i];
        p->gathered_mode = mode != CHECK_OFF && ptrs[i] ? mode : 0;
        if (!p->gathered_mode) continue;
        p->gathered = ptrs[i];
        p->gathered_print = print_of(ptrs[i], bytes_of(p), mode);
    }
}

/* a gathered copy the host wrote: counted for the next boundary */
static void count_write(zero_engine *e, const struct zero_param *p, int64_t layer) {
    if (!e->gathered_writes++) {
        e->gathered_written = p;
        e->gathered_written_layer = layer;
    }
}

void zero__host_writes_released(zero_engine *e, zero_param *const *params, size_t n) {
    if (e->dev) { /* the sums stay until the boundary: gathered_mode marks the params in them */
        const void **ptrs = malloc((n ? n : 1) * sizeof *ptrs);
        int mode = 0;
        for (size_t i = 0; ptrs && i < n; i++) {
            ptrs[i] = params[i]->gathered_mode ? params[i]->gathered : NULL;
            if (params[i]->gathered_mode) mode = params[i]->gathered_mode;
        }
        if (ptrs && mode && zero__hwd_ready(e)) gathers_device(e, ZERO__HW_RELEASE, params, n, ptrs, mode);
        free(ptrs);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        struct zero_param *p = params[i];
        if (!p->gathered_mode) continue;
        const int mode = p->gathered_mode;
        p->gathered_mode = 0;
        if (print_of(p->gathered, bytes_of(p), mode) == p->gathered_print) continue;
        count_write(e, p, -1);
    }
}

static size_t slice_bytes(const struct zero_param *p) {
    return (size_t)p->slice_numel * zero__dtype_size(p->info.dtype);
}

/* (1.13) A device engine's slices: added to their param's GATHER and
 * RELEASE sums like whole gathers (compared at the boundary once the param
 * is no longer held), the pointer handed out kept per layer for the
 * release; one slice per call, since two slices of one param in a call
 * would write its slot twice. */
static void slices_device(zero_engine *e, zero_param *const *params, const uint32_t *layers, size_t n,
                          void *const *ptrs, int mode) {
    for (size_t i = 0; i < n; i++) {
        struct zero_param *p = params[i];
        struct zero__slice_print *sp = p->slice_prints ? &p->slice_prints[layers[i]] : NULL;
        int kind = ZERO__HW_RELEASE;
        if (ptrs) { /* a gather */
            if (mode == CHECK_OFF || !ptrs[i]) continue;
            if (!sp && (p->slice_prints = calloc(p->stack_layers, sizeof *p->slice_prints)))
                sp = &p->slice_prints[layers[i]];
            if (!sp) continue; /* out of memory: this slice goes unchecked */
            sp->ptr = ptrs[i];
            sp->mode = mode;
            sp->held++;
            p->gathered_mode = mode;
            kind = ZERO__HW_GATHER;
        } else {
            if (!sp || !sp->held) continue; /* not fingerprinted at its gather */
            sp->held--;
        }
        const void *x = sp->ptr;
        const uint64_t b = slice_bytes(p);
        zero__hwd_queue(e, kind, &params[i], &x, &b, 1, sp->mode == CHECK_FULL, 1);
    }
}

void zero__host_writes_slices_gathered(zero_engine *e, zero_param *const *params, const uint32_t *layers, size_t n,
                                       void *const *ptrs) {
    const int mode = check_mode(e);
    if (e->dev) {
        slices_device(e, params, layers, n, ptrs, mode);
        return;
    }
    for (size_t i = 0; i < n && mode != CHECK_OFF; i++) {
        struct zero_param *p = params[i];
        if (!ptrs[i]) continue;
        if (!p->slice_prints && !(p->slice_prints = calloc(p->stack_layers, sizeof *p->slice_prints))) continue;
        struct zero__slice_print *sp = &p->slice_prints[layers[i]];
        if (sp->held++) continue; /* held already: compared at its last release against its first gather */
        sp->ptr = ptrs[i];
        sp->mode = mode;
        sp->print = print_of(ptrs[i], slice_bytes(p), mode);
    }
}

void zero__host_writes_slices_released(zero_engine *e, zero_param *const *params, const uint32_t *layers,
                                       size_t n) {
    if (e->dev) {
        slices_device(e, params, layers, n, NULL, CHECK_OFF);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        struct zero_param *p = params[i];
        struct zero__slice_print *sp = p->slice_prints ? &p->slice_prints[layers[i]] : NULL;
        if (!sp || !sp->held || --sp->held) continue; /* not fingerprinted, or still held */
        if (print_of(sp->ptr, slice_bytes(p), sp->mode) != sp->print) count_write(e, p, layers[i]);
    }
}

/* The first byte in [at, at + len) where a and b differ, or SIZE_MAX. */
static size_t differ_in(const unsigned char *a, const unsigned char *b, size_t at, size_t len) {
    if (memcmp(a + at, b + at, len) == 0) return SIZE_MAX;
    while (a[at] == b[at]) at++;
    return at;
}

/* The first differing byte of a and b (n bytes) among those compared, or
 * SIZE_MAX. */
static size_t first_difference(const unsigned char *a, const unsigned char *b, size_t n, int mode) {
    if (mode == CHECK_FULL) return n ? differ_in(a, b, 0, n) : SIZE_MAX;
    for (size_t at = 0; at < n; at += STRIDE) {
        if (at + AHEAD < n) {
            __builtin_prefetch(a + at + AHEAD);
            __builtin_prefetch(b + at + AHEAD);
        }
        const size_t r = differ_in(a, b, at, min_size(LINE, n - at));
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

/* What one boundary's check found: the first param of each kind, how
 * many, and for a host-owned tensor the element and both values (bytes
 * of the param's dtype: the host's, then libzero's). */
typedef struct hw_found {
    const struct zero_param *tensor, *copy;
    size_t tensor_at;
    unsigned char tv[4], cv[4];
    uint32_t tensors, copies;
} hw_found;

static void found_tensor(hw_found *f, const struct zero_param *p, size_t at, const void *tv, const void *cv) {
    if (f->tensors++) return;
    const size_t es = zero__dtype_size(p->info.dtype);
    f->tensor = p, f->tensor_at = at;
    memcpy(f->tv, tv, es);
    memcpy(f->cv, cv, es);
}

static void scan_host(zero_engine *e, int mode, hw_found *f) {
    for (uint32_t i = 0; i < e->nparams; i++) {
        const struct zero_param *p = e->params[i];
        const size_t n = bytes_of(p);
        /* 2. libzero's copy against its fingerprint */
        if (p->copy_printed && p->copy_print_mode == mode && print_of(p->info.data, n, mode) != p->copy_print) {
            if (!f->copies++) f->copy = p;
            continue;
        }
        /* 1 (or 2). the host-owned tensor against libzero's copy */
        if (!tensor_compared(e, p)) continue;
        const size_t at = first_difference(p->host_data, p->info.data, n, mode);
        if (at == SIZE_MAX) continue;
        /* the element holding the first differing byte (which may be any of its bytes) */
        const size_t es = zero__dtype_size(p->info.dtype), el = at / es;
        found_tensor(f, p, el, (const char *)p->host_data + el * es, (const char *)p->info.data + el * es);
    }
}

/* (1.13) A device engine: this boundary's fingerprints queued on the
 * device (libzero's copies, host-owned tensors in device memory) and read
 * back with every slot in one copy; a host-owned tensor in host memory is
 * fingerprinted here with the same function.  Stage 3: the GATHER and
 * RELEASE sums of every param no longer held are compared, then cleared. */
static zero_status scan_device(zero_engine *e, int mode, hw_found *f) {
    const uint32_t np = e->nparams;
    /* every param a piece of each call, 0 bytes where there is nothing to
     * fingerprint (zero__hwd_queue leaves those out) */
    const void **xs = malloc((np ? np : 1) * sizeof *xs), **tx = malloc((np ? np : 1) * sizeof *tx);
    uint64_t *nb = malloc((np ? np : 1) * sizeof *nb), *tb = malloc((np ? np : 1) * sizeof *tb);
    zero_status st = xs && tx && nb && tb ? ZERO_OK : ZERO_ERR_OUT_OF_MEMORY;
    for (uint32_t i = 0; st == ZERO_OK && i < np; i++) {
        const struct zero_param *p = e->params[i];
        const int copy = p->copy_printed && p->copy_print_mode == mode, tensor = tensor_compared(e, p);
        xs[i] = p->info.data, nb[i] = copy || tensor ? bytes_of(p) : 0;
        tx[i] = p->host_data, tb[i] = tensor ? bytes_of(p) : 0;
    }
    if (st == ZERO_OK) {
        zero__hwd_queue(e, ZERO__HW_NOW, e->params, xs, nb, np, mode == CHECK_FULL, 0);
        zero__hwd_queue(e, ZERO__HW_TENSOR, e->params, tx, tb, np, mode == CHECK_FULL, 0);
        st = zero__hwd_ready(e) ? zero__hwd_read(e) : ZERO_OK; /* turned off meanwhile: nothing to compare */
    }
    int sums_changed = 0;
    for (uint32_t i = 0; st == ZERO_OK && e->hwd_host && i < np; i++) {
        struct zero_param *p = e->params[i];
        const int on_dev = zero__dev_is_device(e->dev, p->info.data); /* where NOTED and NOW were taken */
        const uint64_t now = on_dev ? ZERO__HW_AT(e, ZERO__HW_NOW, i) : ZERO__HW_SIDE(e, ZERO__HW_NOW, i);
        const uint64_t noted = on_dev ? ZERO__HW_AT(e, ZERO__HW_NOTED, i) : ZERO__HW_SIDE(e, ZERO__HW_NOTED, i);
        if (p->copy_printed && p->copy_print_mode == mode && now != noted) {
            if (!f->copies++) f->copy = p;
        } else if (tensor_compared(e, p)) {
            const uint64_t t = zero__dev_is_device(e->dev, p->host_data) ? ZERO__HW_AT(e, ZERO__HW_TENSOR, i)
                                                                          : ZERO__HW_SIDE(e, ZERO__HW_TENSOR, i);
            unsigned char tv[4], cv[4];
            size_t at;
            if (t != now && (at = zero__hwd_first_difference(e, p, p->host_data, p->info.data, tv, cv)) != SIZE_MAX)
                found_tensor(f, p, at, tv, cv);
        }
        if (p->gathered_mode && !p->holds) { /* 3. every gather of the window released */
            const uint64_t g = ZERO__HW_AT(e, ZERO__HW_GATHER, i) + ZERO__HW_SIDE(e, ZERO__HW_GATHER, i);
            const uint64_t r = ZERO__HW_AT(e, ZERO__HW_RELEASE, i) + ZERO__HW_SIDE(e, ZERO__HW_RELEASE, i);
            if (g != r && !e->gathered_writes++) {
                e->gathered_written = p;
                e->gathered_written_layer = -1;
            }
            ZERO__HW_AT(e, ZERO__HW_GATHER, i) = ZERO__HW_AT(e, ZERO__HW_RELEASE, i) = 0;
            ZERO__HW_SIDE(e, ZERO__HW_GATHER, i) = ZERO__HW_SIDE(e, ZERO__HW_RELEASE, i) = 0;
            p->gathered_mode = 0;
            sums_changed = 1;
        }
    }
    if (st == ZERO_OK && sums_changed) st = zero__hwd_write_sums(e);
    free(xs), free(tx), free(nb), free(tb);
    return st;
}

zero_status zero__host_writes_check(zero_engine *e) {
    const int mode = check_mode(e);
    if (mode == CHECK_OFF) {
        e->gathered_writes = 0;
        e->gathered_written = NULL;
        return ZERO_OK;
    }
    zero__span sp = zero__phase_begin(e);
    hw_found f = {0};
    zero_status st = ZERO_OK;
    if (e->dev) st = scan_device(e, mode, &f);
    else scan_host(e, mode, &f);
    zero__phase_end(e, sp, ZERO__PH_COPY);
    if (st != ZERO_OK && st != ZERO_ERR_DEVICE) /* out of memory: say so (a device failure turned the check off) */
        return zero__error(e, st, "zero_step: the host-write check ran out of memory");
    const struct zero_param *tensor = f.tensor, *copy = f.copy;
    const size_t tensor_at = f.tensor_at;
    const uint32_t tensors = f.tensors, copies = f.copies;
    /* 3. stage 3: gathered copies written before their release (stands
     * until a zero_load: whether the write reached libzero's values is not
     * known here) */
    const uint32_t gathered = e->gathered_writes;
    if (!tensors && !copies && !gathered) return ZERO_OK;
    if (!tensors && !copies) {
        char slice[48] = "";
        if (e->gathered_written_layer >= 0)
            snprintf(slice, sizeof slice, " (its slice %lld)", (long long)e->gathered_written_layer);
        return zero__error(e, ZERO_ERR_STATE,
                           "zero_step: param '%s'%s was written through the pointer %s returned (%u gather%s "
                           "written since the last step), which the host must not do: at stage 3 that memory is a "
                           "scratch copy, whose write is lost at zero_release, or, where a rank holds the whole "
                           "parameter, libzero's own, whose write the optimizer would go on from on that rank "
                           "alone; load a checkpoint with zero_load to go on (or set initial values before "
                           "zero_params_done, zero_param_desc.data); no weight moved, the accumulation window is kept",
                           e->gathered_written->name, slice,
                           e->gathered_written_layer >= 0 ? "zero_gather_slices" : "zero_gather", gathered,
                           gathered > 1 ? "s" : "");
    }
    const uint32_t more = tensors + copies - 1;
    char also[64] = "";
    if (more) snprintf(also, sizeof also, " (and %u more param%s)", more, more > 1 ? "s" : "");
    const char *fix = "set initial values before zero_params_done (zero_param_desc.data) or load a checkpoint with "
                      "zero_load; no weight moved, the accumulation window is kept";
    if (copy)
        return zero__error(e, ZERO_ERR_STATE,
                           "zero_step: libzero's copy of param '%s'%s changed since libzero last wrote it: the host "
                           "wrote through the pointer zero_gather (or zero_param_storage) returned, which it must "
                           "not (with fp32 params the optimizer would go on from the written values on the ranks "
                           "that wrote them, with bf16 or offload they would be lost: ranks that wrote differently "
                           "would diverge); %s",
                           copy->name, also, fix);
    return zero__error(e, ZERO_ERR_STATE,
                       "zero_step: param '%s'%s is ZERO_PARAM_HOST_OWNED and was written by the host after "
                       "zero_params_done (its tensor, or libzero's copy through zero_gather's pointer): element %zu "
                       "is %.9g in the host's tensor but %.9g in libzero's copy, which is what the optimizer steps "
                       "and what this step would write back over the tensor; %s",
                       tensor->name, also, tensor_at, value_at(tensor, f.tv, 0), value_at(tensor, f.cv, 0), fix);
}
