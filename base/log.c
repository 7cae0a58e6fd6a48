/* Logging and per-engine last-error text (base/log.h).  It reads only the
 * engine's head (base/owner.h), never the rest of the engine.
 *
 * Every line carries the rank because libzero always runs as N cooperating
 * processes whose stderr is usually interleaved by mpirun; a line without a
 * rank is useless there.  The threshold comes from ZERO_LOG_LEVEL once per
 * process; it filters both stderr and the host callback (the callback is a
 * sink, not a second filter). */
#include "log.h"

#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "owner.h"

static zero_log_level g_threshold = ZERO_LOG_WARN;
static pthread_once_t g_threshold_once = PTHREAD_ONCE_INIT;

static void read_threshold(void) {
    const char *v = getenv("ZERO_LOG_LEVEL");
    if (!v || !*v) return;
    static const struct { const char *name; zero_log_level lvl; } names[] = {
        {"error", ZERO_LOG_ERROR}, {"warn", ZERO_LOG_WARN}, {"warning", ZERO_LOG_WARN},
        {"info", ZERO_LOG_INFO},   {"debug", ZERO_LOG_DEBUG}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; ++i) {
        if (strcasecmp(v, names[i].name) == 0) {
            g_threshold = names[i].lvl;
            return;
        }
    }
    if (isdigit((unsigned char)v[0]) && v[1] == '\0' && v[0] <= '3') {
        g_threshold = (zero_log_level)(v[0] - '0');
        return;
    }
    /* An unknown value must not silence errors: keep the default and say so. */
    fprintf(stderr, "[zero rank -1] WARN: ZERO_LOG_LEVEL=\"%s\" not understood "
                    "(expected error, warn, info, debug or 0..3); using warn\n", v);
}

zero_log_level zero__log_threshold(void) {
    pthread_once(&g_threshold_once, read_threshold);
    return g_threshold;
}

static const char *level_name(zero_log_level lvl) {
    switch (lvl) {
    case ZERO_LOG_ERROR: return "ERROR";
    case ZERO_LOG_WARN: return "WARN";
    case ZERO_LOG_INFO: return "INFO";
    default: return "DEBUG";
    }
}

/* Format into `stack` when it fits, else into a malloc'd buffer that the
 * caller frees (when the return value != stack).  Never returns NULL. */
static char *format_msg(char *stack, size_t stack_len, const char *fmt, va_list ap) {
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(stack, stack_len, fmt, ap2);
    va_end(ap2);
    if (n < 0) {
        snprintf(stack, stack_len, "(unformattable log message)");
        return stack;
    }
    if ((size_t)n < stack_len) return stack;
    char *big = malloc((size_t)n + 1);
    if (!big) return stack; /* truncated text beats no text */
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    return big;
}

/* The rank a reader needs to find the process: with a pipeline e->rank is
 * the data-parallel rank, shared by every stage, so show the global one
 * (stage * dp_size + dp_rank, see core/api.c pipeline_split). */
static int field(const int *p, int dflt) { return p ? *p : dflt; }
static int dp_rank(const zero__owner *o) { return o ? field(o->rank, -1) : -1; }
static int pp_stage(const zero__owner *o) { return field(o->pp_stage, 0); }
static int pp_stages(const zero__owner *o) { return field(o->pp_stages, 1); }
static int global_rank(const struct zero_engine *e) {
    const zero__owner *o = zero__owner_of(e);
    if (!o) return -1;
    return pp_stages(o) > 1 ? pp_stage(o) * field(o->world_size, 1) + dp_rank(o) : dp_rank(o);
}

static void emit(const struct zero_engine *e, zero_log_level lvl, const char *msg) {
    int rank = global_rank(e);
    const zero__owner *o = zero__owner_of(e);
    if (o && o->log_fn) {
        o->log_fn(o->log_user, lvl, rank, msg);
        return;
    }
    /* One fprintf per line: stdio locks the stream per call, so lines from
     * several threads do not interleave mid-line. */
    fprintf(stderr, "[zero rank %d] %s: %s\n", rank, level_name(lvl), msg);
}

void zero__vlog(const struct zero_engine *e, zero_log_level lvl, const char *fmt, va_list ap) {
    if (lvl > zero__log_threshold()) return;
    char stack[1024];
    char *msg = format_msg(stack, sizeof stack, fmt, ap);
    emit(e, lvl, msg);
    if (msg != stack) free(msg);
}

void zero__log_forced(const struct zero_engine *e, zero_log_level lvl, const char *fmt, ...) {
    char stack[1024];
    va_list ap;
    va_start(ap, fmt);
    char *msg = format_msg(stack, sizeof stack, fmt, ap);
    va_end(ap);
    emit(e, lvl, msg);
    if (msg != stack) free(msg);
}

void zero__log(const struct zero_engine *e, zero_log_level lvl, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    zero__vlog(e, lvl, fmt, ap);
    va_end(ap);
}

zero_status zero__verror(struct zero_engine *e, zero_status s, const char *fmt, va_list ap) {
    char stack[1024];
    char *msg = format_msg(stack, sizeof stack, fmt, ap);
    const zero__owner *o = zero__owner_of(e);
    if (o && o->last_error) {
        pthread_mutex_lock(o->err_lock);
        if (pp_stages(o) > 1)
            snprintf(o->last_error, o->last_error_len, "rank %d (pipeline stage %d, data-parallel rank %d): %s",
                     global_rank(e), pp_stage(o), dp_rank(o), msg);
        else if (dp_rank(o) >= 0)
            snprintf(o->last_error, o->last_error_len, "rank %d: %s", dp_rank(o), msg);
        else /* before the communicator gave the engine its rank (a device that did not open, say) */
            snprintf(o->last_error, o->last_error_len, "%s", msg);
        pthread_mutex_unlock(o->err_lock);
    }
    /* Debug only: the host receives the status and decides whether to print
     * it; logging every error at warn would double every message. */
    if (ZERO_LOG_DEBUG <= zero__log_threshold())
        zero__log(e, ZERO_LOG_DEBUG, "%s (%s)", msg, zero_status_string(s));
    if (msg != stack) free(msg);
    return s;
}

zero_status zero__error(struct zero_engine *e, zero_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    zero__verror(e, s, fmt, ap);
    va_end(ap);
    return s;
}

const char *zero__error_body(const char *text) {
    /* skip "rank R: " or "rank R (pipeline stage ...): " */
    const char *colon = strncmp(text, "rank ", 5) == 0 ? strstr(text, ": ") : NULL;
    return colon ? colon + 2 : text;
}

zero_status zero__error_context(struct zero_engine *e, zero_status s, const char *fmt, ...) {
    const zero__owner *o = zero__owner_of(e);
    if (!o || !o->last_error) return s;
    char ctx[512], prev[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx, sizeof ctx, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(o->err_lock);
    snprintf(prev, sizeof prev, "%s", o->last_error);
    pthread_mutex_unlock(o->err_lock);
    return zero__error(e, s, "%s: %s", ctx, zero__error_body(prev));
}

void zero__appendf(char *buf, size_t len, const char *fmt, ...) {
    if (!buf || len == 0) return;
    size_t used = strnlen(buf, len);
    if (used + 1 >= len) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + used, len - used, fmt, ap);
    va_end(ap);
}
