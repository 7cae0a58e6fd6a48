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

#include "env.h"
#include "host_writes.h"
#include "log.h"
#include "optim_math.h"
#include "params.h"
#include "step_timing.h"

enum { LINE = 64, STRIDE = 4096 };
enum { CHECK_OFF, CHECK_SAMPLED, CHECK_FULL };
#define PRINT_SEED 0x6a09e667f3bcc909ULL

static int check_mode(const zero_engine *e) {
    if (e->dev) return CHECK_OFF; /* device memory: not read from the host */
    const char *m = NULL; /* a bad value was refused at engine creation (env.c) */
    if (zero__env_choice("ZERO_CHECK_HOST_WRITES", &m) != 1) return CHECK_SAMPLED;
    return !strcmp(m, "off") ? CHECK_OFF : !strcmp(m, "full") ? CHECK_FULL : CHECK_SAMPLED;
}

static size_t bytes_of(const struct zero_param *p) { return (size_t)p->info.numel * zero__dtype_size(p->info.dtype); }

/* A host-owned tensor on the host: compared with libzero's copy, which
 * finds a write into either (kind 1 or 2), so its copy needs no
 * fingerprint of its own. */
static int tensor_compared(const struct zero_param *p) {
    return p->host_data && p->info.data && p->host_device == ZERO_DEVICE_CPU;
}

/* libzero's copy is what zero_gather / zero_param_storage hand out: a
 * plugin that keeps full copies (stage 3 gathers separately, see
 * zero__host_writes_gathered) */
static int copy_handed_out(const zero_engine *e, const struct zero_param *p) {
    return p->info.data && !(e->plugin.table->caps & ZERO_PLUGIN_CAP_PARTITIONS_PARAMS) && !tensor_compared(p);
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

void zero__host_writes_note(zero_engine *e) {
    const int mode = check_mode(e);
    e->gathered_writes = 0; /* libzero's values are whole again (a load), or were checked (a step) */
    e->gathered_written = NULL;
    zero__span sp = zero__phase_begin(e); /* with the copy-out, which also follows libzero's writes */
    for (uint32_t i = 0; i < e->nparams; i++) note_one(e, e->params[i], mode);
    zero__phase_end(e, sp, ZERO__PH_COPY);
}

void zero__host_writes_note_params(zero_engine *e, zero_param *const *params, size_t n) {
    const int mode = check_mode(e);
    for (size_t i = 0; i < n; i++) note_one(e, params[i], mode);
}

void zero__host_writes_gathered(zero_engine *e, zero_param *const *params, size_t n, void *const *ptrs) {
    const int mode = check_mode(e);
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

void zero__host_writes_slices_gathered(zero_engine *e, zero_param *const *params, const uint32_t *layers, size_t n,
                                       void *const *ptrs) {
    const int mode = check_mode(e);
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

zero_status zero__host_writes_check(zero_engine *e) {
    const int mode = check_mode(e);
    if (mode == CHECK_OFF) {
        e->gathered_writes = 0;
        e->gathered_written = NULL;
        return ZERO_OK;
    }
    zero__span sp = zero__phase_begin(e);
    const struct zero_param *tensor = NULL, *copy = NULL; /* the first of each kind */
    size_t tensor_at = 0;
    uint32_t tensors = 0, copies = 0;
    for (uint32_t i = 0; i < e->nparams; i++) {
        const struct zero_param *p = e->params[i];
        const size_t n = bytes_of(p);
        /* 2. libzero's copy against its fingerprint */
        if (p->copy_printed && p->copy_print_mode == mode && print_of(p->info.data, n, mode) != p->copy_print) {
            if (!copies++) copy = p;
            continue;
        }
        /* 1 (or 2). the host-owned tensor against libzero's copy */
        if (!tensor_compared(p)) continue;
        const size_t at = first_difference(p->host_data, p->info.data, n, mode);
        if (at == SIZE_MAX) continue;
        if (!tensors++) tensor = p, tensor_at = at / zero__dtype_size(p->info.dtype);
    }
    zero__phase_end(e, sp, ZERO__PH_COPY);
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
                       tensor->name, also, tensor_at, value_at(tensor, tensor->host_data, tensor_at),
                       value_at(tensor, tensor->info.data, tensor_at), fix);
}
