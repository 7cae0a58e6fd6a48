/* The tracer on its own (base/trace.c): several threads emitting nested
 * scopes, lane spans and instants into small rings.  Checks the exact
 * arithmetic of wrapping (what is kept, what is counted as dropped), that
 * nothing is recorded while off, that lanes are handed out lowest-free and
 * reused, and that the file parses (check_trace.py runs on it after this
 * program, from the ctest command).  Usage: test_trace_unit PREFIX */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace.h"

#define THREADS 4
#define PER_THREAD 100 /* events each thread records */
#define RING 64

static int fails;
#define CHECK(c)                                                                  \
    do {                                                                          \
        if (!(c)) {                                                               \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #c); \
            fails++;                                                              \
        }                                                                         \
    } while (0)

static void *worker(void *arg) {
    (void)arg;
    zero__trace_thread_name("worker");
    /* 25 rounds x 4 events: an outer scope, an inner scope, an instant and
     * a lane span */
    for (int i = 0; i < PER_THREAD / 4; i++) {
        ZERO_TRACE_SCOPE("outer", "test", "i", i, NULL, 0);
        {
            ZERO_TRACE_SCOPE("inner", "test", NULL, 0, NULL, 0);
        }
        ZERO_TRACE_INSTANT("mark", "test", "i", i, NULL, 0);
        int lane = zero__trace_lane_take(ZERO__LANE_COMM);
        uint64_t t0 = zero__trace_now();
        zero__trace_complete("lane_span", "test", t0, zero__trace_clock(), ZERO__LANE_COMM, lane, NULL, 0, NULL, 0);
        zero__trace_lane_give(ZERO__LANE_COMM, lane);
    }
    return NULL;
}

static long count(const char *text, const char *needle) {
    long n = 0;
    for (const char *p = text; (p = strstr(p, needle)) != NULL; p += strlen(needle)) n++;
    return n;
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    const char *prefix = argv[1];
    char err[256];
    /* off: nothing is recorded and no file appears */
    { ZERO_TRACE_SCOPE("never", "test", NULL, 0, NULL, 0); }
    CHECK(zero__trace_now() == 0);
    CHECK(zero__trace_start(prefix, 7, 8, RING) == 0);
    CHECK(zero__trace_start(prefix, 99, 99, 5) == 0); /* a second engine joins: first settings stay */
    zero__trace_thread_name("host");
    /* lanes: lowest free first, and reused after being given back */
    int a = zero__trace_lane_take(ZERO__LANE_BUCKET), b = zero__trace_lane_take(ZERO__LANE_BUCKET);
    CHECK(a == 0 && b == 1);
    zero__trace_lane_give(ZERO__LANE_BUCKET, a);
    CHECK(zero__trace_lane_take(ZERO__LANE_BUCKET) == 0);
    zero__trace_lane_give(ZERO__LANE_BUCKET, 0);
    zero__trace_lane_give(ZERO__LANE_BUCKET, 1);
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, worker, NULL);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    { ZERO_TRACE_SCOPE("host_span", "test", NULL, 0, NULL, 0); }
    CHECK(zero__trace_stop(err, sizeof err) == 0); /* one reference left: still on */
    CHECK(ZERO__TRACE_ON());
    CHECK(zero__trace_stop(err, sizeof err) == 0); /* the last: writes */
    CHECK(!ZERO__TRACE_ON());
    { ZERO_TRACE_SCOPE("after", "test", NULL, 0, NULL, 0); }

    char path[512];
    snprintf(path, sizeof path, "%s.rank7.json", prefix);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    if (!f) return 1;
    static char text[1 << 20];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    /* each worker recorded 100 into a ring of 64: 64 kept, 36 dropped */
    long kept = count(text, "\"ph\":\"X\"") + count(text, "\"ph\":\"i\"");
    CHECK(kept == THREADS * RING + 1);
    char want[64];
    snprintf(want, sizeof want, "\"dropped_events\":%d", THREADS * (PER_THREAD - RING));
    CHECK(strstr(text, want) != NULL);
    CHECK(strstr(text, "\"events_per_thread\":64") != NULL);
    CHECK(strstr(text, "\"world_size\":8") != NULL);
    CHECK(count(text, "\"name\":\"worker\"") == THREADS);
    CHECK(count(text, "\"name\":\"host\"") == 1);
    CHECK(strstr(text, "never") == NULL && strstr(text, "after") == NULL);
    CHECK(strstr(text, "\"name\":\"host_span\"") != NULL);
    /* the newest events survive the wrap: the last round's outer span (i = 24) */
    CHECK(strstr(text, "\"name\":\"outer\"") != NULL && strstr(text, "\"i\":24") != NULL);
    printf("test_trace_unit: %s (%ld events kept)\n", fails ? "FAIL" : "PASS", kept);
    return fails ? 1 : 0;
}
