/* What base/ (log, memory accounting) knows of the engine that owns a log
 * line, an error text or a scratch block (issue 32, floors).
 *
 * Lower floors receive the engine as an opaque `struct zero_engine *` (NULL
 * when there is none: a communicator made without an engine, a unit test)
 * and never see its layout: the engine (core/engine.h) begins with this
 * head, filled by the core when it creates the engine, and base reads only
 * the head.  The pointers lead to the engine's own fields, so the rank
 * shown follows a pipeline split and the accountant is the engine's
 * current one.  A contract header: no .c of its own. */
#ifndef ZERO_BASE_OWNER_H
#define ZERO_BASE_OWNER_H
#include <pthread.h>
#include <stddef.h>

#include "zero.h"

struct zero_engine;
struct zero__mem;

typedef struct zero__owner {
    zero_log_fn log_fn;                /* the host's log callback (NULL: stderr) */
    void *log_user;
    const int *rank, *world_size;      /* data-parallel rank and size */
    const int *pp_stage, *pp_stages;   /* pipeline stage and stage count (0 and 1 without) */
    char *last_error;                  /* the engine's last-error text ... */
    size_t last_error_len;             /* ... its size ... */
    pthread_mutex_t *err_lock;         /* ... and the lock that guards it */
    struct zero__mem *const *mem;      /* the engine's accountant (*mem may be NULL) */
} zero__owner;

/* The head of engine e (NULL for NULL). */
static inline const zero__owner *zero__owner_of(const struct zero_engine *e) {
    return (const zero__owner *)(const void *)e;
}
#endif
