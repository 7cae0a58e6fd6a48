/* base/log.c: ZERO_LOG_LEVEL threshold (this test runs with
 * ZERO_LOG_LEVEL=info), the "[zero rank R] LEVEL: " stderr prefix, the
 * host callback, and the per-engine last error "rank R: msg" (also from
 * several threads at once, and for messages longer than any fixed buffer). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "engine.h"
#include "log.h"

typedef struct captured {
    int n;
    zero_log_level lvl[8];
    int rank[8];
    char msg[8][256];
} captured;

static void capture(void *user, zero_log_level lvl, int rank, const char *msg) {
    captured *c = user;
    if (c->n >= 8) return;
    c->lvl[c->n] = lvl;
    c->rank[c->n] = rank;
    snprintf(c->msg[c->n], sizeof c->msg[c->n], "%s", msg);
    c->n++;
}

static void *hammer(void *arg) {
    struct zero_engine *e = arg;
    for (int i = 0; i < 2000; ++i) zero__error(e, ZERO_ERR_COMM, "thread error %d", i);
    return NULL;
}

int main(void) {
    CHECK_EQ_INT(zero__log_threshold(), ZERO_LOG_INFO); /* from the test's environment */

    struct zero_engine *e = calloc(1, sizeof *e);
    pthread_mutex_init(&e->err_lock, NULL);
    zero__engine_init_head(e, NULL, NULL);
    e->rank = 3;

    /* stderr: the prefix carries rank and level; debug is below the threshold. */
    char path[] = "/tmp/zero-test-log-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    fflush(stderr);
    int saved = dup(2);
    dup2(fd, 2);
    zero__log(e, ZERO_LOG_WARN, "bucket size %d clamped", 42);
    zero__log(e, ZERO_LOG_INFO, "info line");
    zero__log(e, ZERO_LOG_DEBUG, "debug line must not appear");
    zero__log(NULL, ZERO_LOG_ERROR, "before any engine");
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    char out[4096] = "";
    FILE *f = fopen(path, "r");
    size_t got = f ? fread(out, 1, sizeof out - 1, f) : 0;
    out[got] = '\0';
    if (f) fclose(f);
    unlink(path);
    close(fd);
    const char *o = out;
    CHECK_STR_CONTAINS(o, "[zero rank 3] WARN: bucket size 42 clamped\n");
    CHECK_STR_CONTAINS(o, "[zero rank 3] INFO: info line\n");
    CHECK_STR_CONTAINS(o, "[zero rank -1] ERROR: before any engine\n");
    CHECK(strstr(o, "debug line") == NULL, "debug filtered at threshold info: %s", o);

    /* Host callback replaces stderr and gets the rank. */
    captured cap = {0};
    e->head.log_fn = capture;
    e->head.log_user = &cap;
    zero__log(e, ZERO_LOG_ERROR, "to the host %s", "callback");
    zero__log(e, ZERO_LOG_DEBUG, "filtered");
    CHECK_EQ_INT(cap.n, 1);
    CHECK(cap.n >= 1 && cap.lvl[0] == ZERO_LOG_ERROR && cap.rank[0] == 3 &&
              strcmp(cap.msg[0], "to the host callback") == 0,
          "callback got: %d %d '%s'", cap.lvl[0], cap.rank[0], cap.msg[0]);

    /* Last error: "rank R: msg", status passed through. */
    CHECK_EQ_INT(zero__error(e, ZERO_ERR_CONFIG, "key '%s' must be > 0", "reduce_bucket_size"), ZERO_ERR_CONFIG);
    const char *le = e->last_error;
    CHECK(strcmp(le, "rank 3: key 'reduce_bucket_size' must be > 0") == 0, "last_error '%s'", le);
    CHECK_EQ_INT(cap.n, 1); /* errors log at debug only: below this threshold */

    /* A message longer than the internal stack buffer is kept (truncated
     * only to the engine's last_error size), not lost. */
    static char big[sizeof e->last_error + 1000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    zero__error(e, ZERO_ERR_IO, "%s", big);
    CHECK_EQ_INT(strlen(e->last_error), sizeof e->last_error - 1);
    CHECK(strncmp(e->last_error, "rank 3: xxxx", 12) == 0, "long message prefix");

    /* Concurrent errors: no torn text (each is a complete message). */
    e->head.log_fn = NULL;
    pthread_t t[4];
    for (int i = 0; i < 4; ++i) pthread_create(&t[i], NULL, hammer, e);
    for (int i = 0; i < 4; ++i) pthread_join(t[i], NULL);
    int n = -1;
    CHECK(sscanf(e->last_error, "rank 3: thread error %d", &n) == 1 && n == 1999, "last_error after threads: '%s'",
          e->last_error);

    /* Before the communicator gives the engine its rank (-1): the text
     * alone, not "rank -1: ..." */
    e->rank = -1;
    zero__error(e, ZERO_ERR_DEVICE, "device_kind CUDA: no device");
    CHECK(strcmp(e->last_error, "device_kind CUDA: no device") == 0, "rank unknown: '%s'", e->last_error);
    e->rank = 3;

    zero__error(NULL, ZERO_ERR_STATE, "no engine: only logged"); /* must not crash */
    pthread_mutex_destroy(&e->err_lock);
    free(e);
    return check_finish();
}
