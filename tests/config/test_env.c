/* The environment table (base/env.c), white-box through zero_static:
 *  - the readers take exactly what the table allows (a unit suffix, a
 *    number out of range, trailing text, a word for a flag: all rejected,
 *    so the caller keeps its default);
 *  - zero__env_check refuses bad values of the variables that guard a
 *    result or a wait (naming every one), warns about the other bad values,
 *    about a set fault hook and about near-miss names, and is silent for a
 *    host's own ZERO_ names and a clean environment;
 *  - with argv[1] = the source tree: docs/environment.md has a row for each
 *    table entry and no row for a name that is not in the table, and every
 *    getenv("ZERO_...") in the library, the kit and the plugins reads a
 *    name in the table (a new variable cannot skip the check). */
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "slurp.h"
#include "env.h"

static char warned[8192];
static int nwarned;
static void collect(void *user, const char *line) {
    (void)user;
    nwarned++;
    size_t n = strlen(warned);
    snprintf(warned + n, sizeof warned - n, "%s\n", line);
}

static zero_status run_check(char *msg, size_t len) {
    warned[0] = '\0';
    nwarned = 0;
    return zero__env_check(collect, NULL, msg, len);
}

/* Unset every ZERO_ variable the test's own environment carries (ctest
 * sets ZERO_PLUGIN_PATH, a developer may have more). */
static void clear_zero_env(void) {
    extern char **environ;
    for (;;) {
        char name[256] = "";
        for (char **ep = environ; ep && *ep; ep++)
            if (!strncmp(*ep, "ZERO_", 5)) {
                const char *eq = strchr(*ep, '=');
                size_t k = eq ? (size_t)(eq - *ep) : strlen(*ep);
                if (k < sizeof name) memcpy(name, *ep, k), name[k] = '\0';
                break;
            }
        if (!name[0]) return;
        unsetenv(name);
    }
}

static void readers(void) {
    long l = -7;
    CHECK_EQ_INT(zero__env_long("ZERO_COMM_CHUNK_KB", &l), 0);
    CHECK_EQ_INT(l, -7);
    setenv("ZERO_COMM_CHUNK_KB", "64", 1);
    CHECK_EQ_INT(zero__env_long("ZERO_COMM_CHUNK_KB", &l), 1);
    CHECK_EQ_INT(l, 64);
    const char *bad_long[] = {"2", "64k", "", " 64x", "abc", "99999999999999999999999", "2097152"};
    for (size_t i = 0; i < sizeof bad_long / sizeof *bad_long; i++) {
        setenv("ZERO_COMM_CHUNK_KB", bad_long[i], 1);
        l = -7;
        CHECK(zero__env_long("ZERO_COMM_CHUNK_KB", &l) == (bad_long[i][0] ? -1 : 0) && l == -7,
              "ZERO_COMM_CHUNK_KB=\"%s\" gave %ld", bad_long[i], l);
    }
    unsetenv("ZERO_COMM_CHUNK_KB");
    CHECK_EQ_INT(zero__env_long("ZERO_NOT_IN_TABLE", &l), -1);
    CHECK_EQ_INT(zero__env_long("ZERO_COMM_SHM", &l), -1); /* a flag, not an int */

    double s = -1;
    const struct { const char *v; int r; double want; } secs[] = {
        {"30", 1, 30}, {"0", 1, 0}, {"2.5", 1, 2.5}, {"1e3", 1, 1000}, {"5m", -1, 0},
        {"30s", -1, 0}, {"-1", -1, 0}, {"inf", -1, 0}, {"nan", -1, 0}, {"abc", -1, 0}};
    for (size_t i = 0; i < sizeof secs / sizeof *secs; i++) {
        setenv("ZERO_COMM_TIMEOUT", secs[i].v, 1);
        s = -1;
        int r = zero__env_seconds("ZERO_COMM_TIMEOUT", &s);
        CHECK(r == secs[i].r && (r != 1 || s == secs[i].want), "ZERO_COMM_TIMEOUT=%s: %d, %g", secs[i].v, r, s);
    }
    unsetenv("ZERO_COMM_TIMEOUT");

    int f = 7;
    const struct { const char *v; int r, want; } flags[] = {
        {"1", 1, 1}, {"0", 1, 0}, {"yes", -1, 7}, {"true", -1, 7}, {"10", -1, 7}, {"01", -1, 7}};
    for (size_t i = 0; i < sizeof flags / sizeof *flags; i++) {
        setenv("ZERO_COMM_SHM", flags[i].v, 1);
        f = 7;
        int r = zero__env_flag("ZERO_COMM_SHM", &f);
        CHECK(r == flags[i].r && f == flags[i].want, "ZERO_COMM_SHM=%s: %d, %d", flags[i].v, r, f);
    }
    unsetenv("ZERO_COMM_SHM");

    const char *c = NULL;
    setenv("ZERO_COMM_BACKEND", "MPI", 1);
    CHECK(zero__env_choice("ZERO_COMM_BACKEND", &c) == 1 && c && !strcmp(c, "mpi"), "MPI: %s", c ? c : "-");
    setenv("ZERO_COMM_BACKEND", "mpl", 1);
    c = NULL;
    CHECK(zero__env_choice("ZERO_COMM_BACKEND", &c) == -1 && !c, "mpl accepted");
    unsetenv("ZERO_COMM_BACKEND");

    uint64_t u = 3;
    setenv("ZERO_DEBUG_JITTER_SEED", "18446744073709551615", 1);
    CHECK(zero__env_u64("ZERO_DEBUG_JITTER_SEED", &u) == 1 && u == UINT64_MAX, "max seed: %llu",
          (unsigned long long)u);
    setenv("ZERO_DEBUG_JITTER_SEED", "-1", 1); /* strtoull would take it as 2^64 - 1 */
    CHECK_EQ_INT(zero__env_u64("ZERO_DEBUG_JITTER_SEED", &u), -1);
    unsetenv("ZERO_DEBUG_JITTER_SEED");
}

static void check_env(void) {
    char msg[2048];
    CHECK_EQ_INT(run_check(msg, sizeof msg), ZERO_OK);
    CHECK(nwarned == 0 && !msg[0], "a clean environment said: %s / %s", warned, msg);

    /* tuning knobs: warned, never refused */
    setenv("ZERO_COMM_SHM", "yes", 1);
    setenv("ZERO_COMM_WINDOW", "65", 1);
    setenv("ZERO_COMM_ALLGATHER", "rign", 1);
    setenv("ZERO_OFFLOAD_SEQUENTIAL", "2", 1);
    CHECK_EQ_INT(run_check(msg, sizeof msg), ZERO_OK);
    CHECK_EQ_INT(nwarned, 4);
    CHECK_STR_CONTAINS(warned, "ZERO_COMM_SHM=\"yes\" not understood: expected 0 or 1; the default is used");
    CHECK_STR_CONTAINS(warned, "ZERO_COMM_WINDOW=\"65\" not understood: expected an integer in 1..64");
    CHECK_STR_CONTAINS(warned, "ZERO_COMM_ALLGATHER=\"rign\" not understood: expected one of auto, ring, direct, mpi");
    CHECK_STR_CONTAINS(warned, "ZERO_OFFLOAD_SEQUENTIAL=\"2\"");
    unsetenv("ZERO_COMM_SHM");
    unsetenv("ZERO_COMM_WINDOW");
    unsetenv("ZERO_COMM_ALLGATHER");
    unsetenv("ZERO_OFFLOAD_SEQUENTIAL");

    /* the guards: refused, every one named */
    setenv("ZERO_COMM_TIMEOUT", "5m", 1);
    setenv("ZERO_CHECK_HOST_WRITES", "ful", 1);
    setenv("ZERO_RANKS_PER_NODE", "0", 1);
    CHECK_EQ_INT(run_check(msg, sizeof msg), ZERO_ERR_CONFIG);
    CHECK_STR_CONTAINS(msg, "ZERO_COMM_TIMEOUT=\"5m\"");
    CHECK_STR_CONTAINS(msg, "without a unit");
    CHECK_STR_CONTAINS(msg, "ZERO_CHECK_HOST_WRITES=\"ful\"");
    CHECK_STR_CONTAINS(msg, "one of sampled, full, off");
    CHECK_STR_CONTAINS(msg, "ZERO_RANKS_PER_NODE=\"0\"");
    CHECK_STR_CONTAINS(msg, "unset them or fix their values");
    unsetenv("ZERO_CHECK_HOST_WRITES");
    unsetenv("ZERO_RANKS_PER_NODE");
    CHECK_EQ_INT(run_check(msg, sizeof msg), ZERO_ERR_CONFIG);
    CHECK_STR_CONTAINS(msg, "unset it or fix its value");
    CHECK(!strstr(msg, "ZERO_CHECK_HOST_WRITES"), "a fixed variable still named: %s", msg);
    setenv("ZERO_COMM_TIMEOUT", "0", 1); /* no limit: legal */
    setenv("ZERO_CHECK_HOST_WRITES", "FULL", 1);
    CHECK_EQ_INT(run_check(msg, sizeof msg), ZERO_OK);
    unsetenv("ZERO_COMM_TIMEOUT");
    unsetenv("ZERO_CHECK_HOST_WRITES");

    /* names: near misses warned with the name meant; the host's own and the
     * test drivers' not at all */
    setenv("ZERO_CHECK_HOST_WRITE", "full", 1);
    setenv("ZERO_COMM_TIMOUT", "10", 1);
    setenv("ZERO_TIMEOUT", "10", 1);
    setenv("ZERO_MY_APP_SETTING", "1", 1);
    setenv("ZERO_TEST_ANYTHING", "1", 1);
    setenv("ZERO_SWEEP_TAGS", "x", 1);
    CHECK_EQ_INT(run_check(msg, sizeof msg), ZERO_OK);
    CHECK_EQ_INT(nwarned, 3);
    CHECK_STR_CONTAINS(warned, "ZERO_CHECK_HOST_WRITE is not a variable libzero reads: did you mean "
                               "ZERO_CHECK_HOST_WRITES?");
    CHECK_STR_CONTAINS(warned, "ZERO_COMM_TIMOUT is not a variable libzero reads: did you mean ZERO_COMM_TIMEOUT?");
    CHECK_STR_CONTAINS(warned, "ZERO_TIMEOUT is not a variable libzero reads: did you mean ZERO_COMM_TIMEOUT?");
    CHECK(!strstr(warned, "ZERO_MY_APP_SETTING") && !strstr(warned, "ZERO_TEST_") && !strstr(warned, "ZERO_SWEEP"),
          "a host's or a test's name warned about: %s", warned);
    clear_zero_env();
    CHECK(zero__env_suggest("ZERO_COMM_TIMEOUT") == NULL, "a table name has a suggestion");
    CHECK(zero__env_suggest("ZERO_SIMDD") && !strcmp(zero__env_suggest("ZERO_SIMDD"), "ZERO_SIMD"), "ZERO_SIMDD");

    /* a fault hook left in the environment is never silent */
    setenv("ZERO_CKPT_FAULT", "enospc:1", 1);
    CHECK_EQ_INT(run_check(msg, sizeof msg), ZERO_OK);
    CHECK_EQ_INT(nwarned, 1);
    CHECK_STR_CONTAINS(warned, "ZERO_CKPT_FAULT=\"enospc:1\" is set: checkpoint fault injection");
    unsetenv("ZERO_CKPT_FAULT");

    /* free text and the kinds checked by their readers are not judged here */
    setenv("ZERO_LOG_LEVEL", "loud", 1);
    setenv("ZERO_PLUGIN_PATH", "/nowhere", 1);
    CHECK_EQ_INT(run_check(msg, sizeof msg), ZERO_OK);
    CHECK_EQ_INT(nwarned, 0);
    clear_zero_env();
}

/* ---- the docs and the sources against the table ---- */

static int sources_read;
static int scan_source(const char *path, const struct stat *sb, int type, struct FTW *ftw) {
    (void)sb, (void)ftw;
    size_t n = strlen(path);
    if (type != FTW_F || n < 3 || (strcmp(path + n - 2, ".c") && strcmp(path + n - 2, ".h") &&
                                   (n < 4 || strcmp(path + n - 3, ".cu"))))
        return 0;
    char *text = th_slurp(path);
    if (!text) return 0;
    sources_read++;
    for (const char *p = text; (p = strstr(p, "getenv(\"ZERO_")); p += 8) {
        const char *name = p + 8, *end = strchr(name, '"');
        char buf[128] = "";
        if (end && (size_t)(end - name) < sizeof buf) memcpy(buf, name, (size_t)(end - name));
        CHECK(zero__env_find(buf) != NULL, "%s reads %s, which base/env.c's table does not have", path, buf);
    }
    free(text);
    return 0;
}

static void docs_and_sources(const char *src) {
    char path[4096];
    snprintf(path, sizeof path, "%s/docs/environment.md", src);
    char *doc = th_slurp(path);
    CHECK(doc != NULL, "cannot read %s", path);
    if (!doc) return;
    size_t n;
    const zero__env_var *t = zero__env_table(&n);
    for (size_t i = 0; i < n; i++) {
        char row[160];
        snprintf(row, sizeof row, "| `%s`", t[i].name);
        CHECK(strstr(doc, row) != NULL, "docs/environment.md has no row for %s", t[i].name);
    }
    for (const char *p = doc; (p = strstr(p, "\n| `ZERO_")); p += 4) {
        const char *name = p + 4, *end = strchr(name, '`');
        char buf[128] = "";
        if (end && (size_t)(end - name) < sizeof buf) memcpy(buf, name, (size_t)(end - name));
        CHECK(zero__env_find(buf) != NULL, "docs/environment.md has a row for %s, which the table does not have", buf);
    }
    free(doc);
    const char *dirs[] = {"base", "kernels", "backends", "core", "kit", "plugins", "plugins-contrib"};
    for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) {
        snprintf(path, sizeof path, "%s/%s", src, dirs[i]);
        nftw(path, scan_source, 16, FTW_PHYS);
    }
    CHECK(sources_read > 100, "only %d sources read under %s", sources_read, src);
}

int main(int argc, char **argv) {
    clear_zero_env();
    readers();
    check_env();
    if (argc > 1) docs_and_sources(argv[1]);
    return check_finish();
}
