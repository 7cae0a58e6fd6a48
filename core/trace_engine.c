/* Which engines trace, and where (docs/trace.md): ZERO_TRACE=prefix in the
 * environment wins over the config's "trace": {"path": prefix,
 * "events_per_thread": n} (or "trace": "prefix"); ZERO_TRACE_EVENTS=n wins
 * over events_per_thread.  The tracer starts at engine create; the file is
 * written when the process's last tracing engine is destroyed. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "env.h"
#include "engine.h"
#include "log.h"
#include "trace.h"
#include "trace_engine.h"

zero_status zero__trace_engine_start(struct zero_engine *e) {
    const char *path = getenv("ZERO_TRACE");
    int64_t events = 0;
    if (!path || !path[0]) {
        path = NULL;
        /* "trace": "prefix" is short for "trace": {"path": "prefix"} */
        if (zero__config_string(e->cfg, "trace", &path) != 1) {
            path = NULL;
            int r = zero__config_string(e->cfg, "trace.path", &path);
            if (r < 0) return zero__error(e, ZERO_ERR_CONFIG, "trace.path: expected a string (a file prefix)");
            if (r == 0) return ZERO_OK;
        }
        if (!path[0]) return zero__error(e, ZERO_ERR_CONFIG, "trace.path: empty (give a file prefix, or leave trace out)");
    }
    /* "trace": "prefix" has no events_per_thread (before 1.7.5 that form
     * failed here with "trace.events_per_thread: expected an integer") */
    const char *short_form = NULL;
    int r = zero__config_string(e->cfg, "trace", &short_form) == 1
                ? 0
                : zero__config_int(e->cfg, "trace.events_per_thread", &events);
    if (r < 0 || (r == 1 && (events < 16 || events > (1 << 26))))
        return zero__error(e, ZERO_ERR_CONFIG, "trace.events_per_thread: expected an integer in 16..67108864");
    long env_ev = 0;
    if (zero__env_long("ZERO_TRACE_EVENTS", &env_ev) == 1) events = env_ev;
    /* (1.7.5) The file is written when the engine is destroyed: a prefix in
     * a directory that does not exist or cannot be written used to lose the
     * whole run's trace at the end, with one stderr line.  Checked now. */
    char dir[4096];
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == path) snprintf(dir, sizeof dir, "/");
    else snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    if (access(dir, W_OK | X_OK) != 0)
        return zero__error(e, ZERO_ERR_IO, "trace: cannot write %s.rank%d.json: directory %s: %s (ZERO_TRACE / "
                           "trace.path is a file prefix in an existing, writable directory)",
                           path, e->rank, dir, strerror(errno));
    if (zero__trace_start(path, e->rank, e->world_size, (size_t)events) != 0)
        return zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "trace: out of memory starting the tracer");
    e->tracing = 1;
    zero__trace_thread_name("host");
    zero__log(e, ZERO_LOG_INFO, "trace: writing %s.rank%d.json when the engine is destroyed", path, e->rank);
    return ZERO_OK;
}

void zero__trace_engine_stop(struct zero_engine *e) {
    if (!e->tracing) return;
    e->tracing = 0;
    char err[512];
    /* the engine's error text is gone with it: stderr is the one place left */
    if (zero__trace_stop(err, sizeof err) != 0) fprintf(stderr, "libzero: %s\n", err);
}
