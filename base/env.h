/* The environment variables libzero reads: one table (env.c) that says, for
 * each, what a value must look like, and the readers that parse by it.
 *
 * Why one table: each variable used to be parsed where it was read, each
 * its own way, and a value a reader did not understand (ZERO_COMM_TIMEOUT=
 * "abc", ZERO_CHECK_HOST_WRITES=ful, ZERO_COMM_BACKEND=mpl) quietly became
 * the default, or (ZERO_COMM_TIMEOUT=5m) a different number.  Now the
 * engine checks the whole environment at creation (zero__env_check): a bad
 * value of a variable that guards a result or a wait is refused, any other
 * bad value is warned about with the default that is used instead, and a
 * ZERO_ name that is close to one of ours (ZERO_CHECK_HOST_WRITE) is warned
 * about with the name it probably meant.  docs/environment.md lists the
 * same variables; tests/core/test_env_doc checks the two agree.
 *
 * Every function here is pure apart from reading the environment: no
 * state, thread-safe as getenv is (the host must not setenv while an engine
 * is being created). */
#ifndef ZERO_BASE_ENV_H
#define ZERO_BASE_ENV_H
#include <stddef.h>
#include <stdint.h>

#include "zero.h"

typedef enum zero__env_kind {
    ZERO__ENV_FLAG,      /* "0" or "1" */
    ZERO__ENV_INT,       /* a decimal integer in [lo, hi] */
    ZERO__ENV_U64,       /* a decimal unsigned 64-bit integer (a seed) */
    ZERO__ENV_SECONDS,   /* a finite number >= 0 (0: no limit) */
    ZERO__ENV_CHOICE,    /* one of choices[], any letter case */
    ZERO__ENV_TEXT,      /* a path or a name, checked where it is used */
    ZERO__ENV_OWN,       /* checked and warned about by its reader (log.c, optim_dispatch.c) */
    ZERO__ENV_FAULT,     /* a test's fault hook: warned about whenever it is set */
    ZERO__ENV_ELSEWHERE  /* read by zero.torch or the build, not by the library */
} zero__env_kind;

typedef struct zero__env_var {
    const char *name;
    zero__env_kind kind;
    int refuse;                 /* a bad value fails zero_engine_create (ZERO_ERR_CONFIG) */
    long lo, hi;                /* ZERO__ENV_INT */
    const char *const *choices; /* ZERO__ENV_CHOICE: NULL-terminated, lower case */
    const char *what;           /* one line: what it sets (messages and the docs check) */
} zero__env_var;

/* The table, in docs/environment.md's order; *n gets its length.  Static
 * storage, never freed. */
const zero__env_var *zero__env_table(size_t *n);
/* The entry for `name`, or NULL. */
const zero__env_var *zero__env_find(const char *name);

/* Readers.  Each returns 1 with *out set when the variable holds a valid
 * value, 0 when it is unset or empty, -1 when it is set to something the
 * table rejects (then *out is untouched: the caller keeps its default, and
 * zero__env_check has said so at engine creation).  `name` must be in the
 * table with the matching kind (else -1). */
int zero__env_flag(const char *name, int *out);
int zero__env_long(const char *name, long *out);
int zero__env_u64(const char *name, uint64_t *out);
int zero__env_seconds(const char *name, double *out);
/* *out is the table's own (lower-case) spelling of the choice. */
int zero__env_choice(const char *name, const char **out);

/* Check every variable in the table and every ZERO_ name in the
 * environment.  A bad value of a `refuse` variable: ZERO_ERR_CONFIG with
 * the reason in msg (all such variables named).  Anything else worth
 * saying (a bad value that falls back to the default, a set fault hook, a
 * near-miss name) goes to warn(user, line), one call per line; warn may be
 * NULL.  Returns ZERO_OK otherwise. */
zero_status zero__env_check(void (*warn)(void *user, const char *line), void *user, char *msg, size_t len);

/* The nearest table name to `name` when it is a likely misspelling (edit
 * distance <= 2, or every word of it inside one table name), else NULL.
 * Names in the table return NULL. */
const char *zero__env_suggest(const char *name);
#endif
