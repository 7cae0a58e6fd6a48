/* Collects the config parser's warnings so tests can assert on them.
 * Single-threaded test helper; a capture lives on the test's stack. */
#ifndef ZERO_TESTS_CONFIG_WARN_CAPTURE_H
#define ZERO_TESTS_CONFIG_WARN_CAPTURE_H
#include <stdio.h>
#include <string.h>

#define WARN_CAPTURE_MAX 32

typedef struct warn_capture {
    int count;                       /* every warning, even those not stored */
    char msgs[WARN_CAPTURE_MAX][512];
} warn_capture;

static inline void warn_capture_fn(void *user, const char *msg) {
    warn_capture *w = (warn_capture *)user;
    if (w->count < WARN_CAPTURE_MAX) snprintf(w->msgs[w->count], sizeof w->msgs[0], "%s", msg);
    ++w->count;
}

static inline void warn_capture_reset(warn_capture *w) { w->count = 0; }

/* Index of the first stored warning containing `needle`, or -1. */
static inline int warn_capture_find(const warn_capture *w, const char *needle) {
    for (int i = 0; i < w->count && i < WARN_CAPTURE_MAX; ++i)
        if (strstr(w->msgs[i], needle)) return i;
    return -1;
}

static inline void warn_capture_dump(const warn_capture *w, const char *label) {
    for (int i = 0; i < w->count && i < WARN_CAPTURE_MAX; ++i) fprintf(stderr, "  [%s] warning: %s\n", label, w->msgs[i]);
}
#endif
