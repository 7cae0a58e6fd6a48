/* Which sanitizer a test is built with (gcc's __SANITIZE_*__, clang's
 * __has_feature) and this process's address space, for tests that cap it
 * with RLIMIT_AS (which would break a sanitizer's shadow memory).
 * Header-only; pure apart from reading /proc/self/statm. */
#ifndef ZERO_TESTS_SANITIZER_ENV_H
#define ZERO_TESTS_SANITIZER_ENV_H
#include <stddef.h>
#include <stdio.h>
#include <sys/resource.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define UNDER_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define UNDER_SANITIZER 1
#endif
#endif

#if defined(__SANITIZE_THREAD__)
#define UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define UNDER_TSAN 1
#endif
#endif
#ifndef UNDER_TSAN
#define UNDER_TSAN 0
#endif

/* Bytes of this process's address space (VmSize), or -1. */
static inline long th_address_space_bytes(void) {
    long pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f || fscanf(f, "%ld", &pages) != 1) pages = -1;
    if (f) fclose(f);
    return pages < 0 ? -1 : pages * 4096;
}
/* Cap this process's address space (RLIMIT_AS) at what it maps now plus
 * `headroom` bytes, so that its next large allocation fails; *old gets
 * the limit to put back with th_address_space_restore.  Returns 1 when
 * capped, 0 when the size is unknown (nothing changed).  Never under a
 * sanitizer: its shadow memory needs the address space. */
static inline int th_address_space_cap(size_t headroom, struct rlimit *old) {
    getrlimit(RLIMIT_AS, old);
    const long now = th_address_space_bytes();
    if (now <= 0) return 0;
    struct rlimit cap = {(rlim_t)now + (rlim_t)headroom, old->rlim_max};
    setrlimit(RLIMIT_AS, &cap);
    return 1;
}
static inline void th_address_space_restore(const struct rlimit *old) { setrlimit(RLIMIT_AS, old); }
#endif
