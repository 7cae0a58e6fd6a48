/* Parameter registry (internal).  Not thread-safe except zero__param_valid,
 * which only reads and may run concurrently with other readers. */
#ifndef ZERO_CORE_PARAMS_H
#define ZERO_CORE_PARAMS_H
#include "engine.h"

/* 1 if p is a live handle of engine e (never dereferences p otherwise). */
int zero__param_valid(const struct zero_engine *e, const zero_param *p);
/* Copy desc into a new handle owned by e. */
zero_status zero__param_register(struct zero_engine *e, const zero_param_desc *desc, zero_param **out);
void zero__params_free(struct zero_engine *e);
/* Undo the most recent registration (plugin veto). */
void zero__param_unregister_last(struct zero_engine *e);
/* Collective: all ranks must have registered the same list (name, numel,
 * dtype, group, in order).  ZERO_ERR_MISMATCH on every rank otherwise,
 * naming the first difference as each rank sees it. */
zero_status zero__params_agree(struct zero_engine *e);
/* (1.7.3) Collective, after zero__params_agree and before the plugin's
 * params_done: where ranks registered different initial values, every rank
 * takes rank 0's (params_values.c says why and what it costs); rank 0 warns.
 * Those params' info.init_data then point at host buffers in *adopted
 * (NULL when nothing differed), which the caller frees with
 * zero__params_values_free after params_done.  Every rank returns the same
 * verdict. */
zero_status zero__params_values_agree(struct zero_engine *e, void ***adopted);
void zero__params_values_free(struct zero_engine *e, void **adopted);
/* The hash the agreement runs over each parameter's initial bytes (seed h,
 * n bytes at b); pure, thread-safe.  Exposed for bench/agreement. */
uint64_t zero__params_hash_bytes(uint64_t h, const unsigned char *b, size_t n);
/* One multiply-xorshift step of that hash (also host_writes.c's
 * fingerprints).  Pure. */
static inline uint64_t zero__hash_mix(uint64_t h, uint64_t w) {
    h ^= w;
    h *= 0x9e3779b97f4a7c15ULL;
    return h ^ (h >> 29);
}
#endif
