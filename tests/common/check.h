/* Minimal assertion helpers for libzero's ctest programs.
 * CHECK(cond, fmt, ...) records a failure and continues; the test's main
 * returns check_finish() so ctest sees a non-zero exit on any failure. */
#ifndef ZERO_TESTS_CHECK_H
#define ZERO_TESTS_CHECK_H
#include <math.h>
#include <stdio.h>
#include <string.h>

static int check_failures_ = 0;
static int check_count_ = 0;

#define CHECK(cond, ...)                                                        \
    do {                                                                        \
        ++check_count_;                                                         \
        if (!(cond)) {                                                          \
            ++check_failures_;                                                  \
            fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                       \
            fputc('\n', stderr);                                                \
        }                                                                       \
    } while (0)

#define CHECK_EQ_INT(a, b) CHECK((long long)(a) == (long long)(b), "%lld != %lld", (long long)(a), (long long)(b))
/* hay may be a pointer (NULL allowed) or a char array */
#define CHECK_STR_CONTAINS(hay, needle)                                                                    \
    do {                                                                                                   \
        const char *check_hay_ = (hay);                                                                    \
        CHECK(check_hay_ && strstr(check_hay_, (needle)), "\"%s\" does not contain \"%s\"",               \
              check_hay_ ? check_hay_ : "(null)", (needle));                                               \
    } while (0)
#define CHECK_NEAR(a, b, tol) \
    CHECK(fabs((double)(a) - (double)(b)) <= (tol), "%.10g vs %.10g (tol %g)", (double)(a), (double)(b), (double)(tol))

static inline int check_finish(void) {
    if (check_failures_) {
        fprintf(stderr, "%d of %d checks failed\n", check_failures_, check_count_);
        return 1;
    }
    if (check_count_ == 0) {
        fprintf(stderr, "no checks ran\n");
        return 1;
    }
    return 0;
}
#endif
