/* Internal logging and per-engine error text.  Thread-safe. */
#ifndef ZERO_BASE_LOG_H
#define ZERO_BASE_LOG_H
#include <stdarg.h>
#include <stddef.h>
#include "zero.h"

struct zero_engine;

/* Level from ZERO_LOG_LEVEL ("error","warn","info","debug" or 0..3), default warn.
 * Read once per process. */
zero_log_level zero__log_threshold(void);

/* Log for engine `e` (may be NULL before an engine exists: rank prefix -1).
 * Goes to the engine's callback if the host installed one, else stderr as
 * "[zero rank R] LEVEL: msg\n". */
void zero__log(const struct zero_engine *e, zero_log_level lvl, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void zero__vlog(const struct zero_engine *e, zero_log_level lvl, const char *fmt, va_list ap);
/* (1.3) zero__log whatever ZERO_LOG_LEVEL says: for lines a config key asked
 * for explicitly (wall_clock_breakdown). */
void zero__log_forced(const struct zero_engine *e, zero_log_level lvl, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Set e's last-error text to "rank R: <msg>" and log it at debug level.
 * Returns s.  e may be NULL (then only logs). */
zero_status zero__error(struct zero_engine *e, zero_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
zero_status zero__verror(struct zero_engine *e, zero_status s, const char *fmt, va_list ap);
/* The message of an error text without its "rank R: " / "rank R (pipeline
 * stage S, ...): " prefix: a pointer into `text` (or `text` itself).  Pure. */
const char *zero__error_body(const char *text);
/* Put context in front of e's current last error: "rank R: <ctx>: <the
 * previous message without its rank prefix>" (e.g. which bucket a timed-out
 * wait belonged to).  Returns s; e may be NULL (then nothing happens). */
zero_status zero__error_context(struct zero_engine *e, zero_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Append printf-style text to the NUL-terminated message in buf (len
 * bytes): cut at the end, never past it.  buf may be NULL or len 0 (then
 * nothing).  Pure; the caller owns buf. */
void zero__appendf(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
#endif
