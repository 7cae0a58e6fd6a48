/* zero__plugin_load on plugins with one defect each: the documented status,
 * a message that names the problem, nothing left loaded (RTLD_NOLOAD), and a
 * good plugin still loads afterwards.  argv[1]: directory of the test plugins. */
#define ZERO_STR_(x) #x
#define ZERO_STR(x) ZERO_STR_(x)
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "loader_paths.h"
#include "loader.h"

static const char *g_dir;
static char g_err_buf[8192];
static char *const g_err = g_err_buf; /* a pointer: check.h's NULL test warns on arrays */

static const char *plugin_path(const char *variant) { return loader_plugin_path(g_dir, variant); }
static int still_loaded(const char *path) { return loader_still_loaded(path); }

/* Load `variant` by path; expect status `want` and every needle in the message. */
static void expect_refused(const char *variant, zero_status want, const char *n1, const char *n2) {
    zero__plugin p;
    const char *path = plugin_path(variant);
    zero_status s = zero__plugin_load(path, &p, g_err, sizeof g_err_buf);
    CHECK(s == want, "%s: status %d (%s), expected %d; message: %s", variant, s, zero_status_string(s), want,
          g_err);
    if (n1) CHECK_STR_CONTAINS(g_err, n1);
    if (n2) CHECK_STR_CONTAINS(g_err, n2);
    CHECK_STR_CONTAINS(g_err, path); /* the user must learn which file it was */
    CHECK(p.dl == NULL && p.table == NULL, "%s: handle left in out", variant);
    CHECK(!still_loaded(path), "%s: library still loaded after refusal", variant);
    if (s == ZERO_OK) zero__plugin_unload(&p);
}

static void test_good_by_path(void) {
    zero__plugin p;
    const char *path = plugin_path("good");
    zero_status s = zero__plugin_load(path, &p, g_err, sizeof g_err_buf);
    CHECK(s == ZERO_OK, "good by path: %s", g_err);
    if (s != ZERO_OK) return;
    CHECK(p.table && strcmp(p.table->name, "loader-good") == 0, "table name");
    CHECK(p.table->gather == NULL && p.table->save == NULL, "optional functions are NULL in this plugin");
    CHECK(strcmp(p.path, path) == 0, "path recorded: %s", p.path);
    CHECK(still_loaded(path), "loaded while held");
    zero__plugin_unload(&p);
    CHECK(p.dl == NULL && p.table == NULL, "unload clears the handle");
    CHECK(!still_loaded(path), "unloaded after zero__plugin_unload");
    zero__plugin_unload(&p); /* twice is harmless */
}

static void test_good_by_name(void) {
    char env[8192];
    snprintf(env, sizeof env, "/nonexistent-zero-dir::%s:", g_dir);
    setenv("ZERO_PLUGIN_PATH", env, 1);
    zero__plugin p;
    zero_status s = zero__plugin_load("loader-good", &p, g_err, sizeof g_err_buf);
    CHECK(s == ZERO_OK, "good by name: %s", g_err);
    if (s == ZERO_OK) {
        CHECK(strcmp(p.path, plugin_path("good")) == 0, "found in the second entry: %s", p.path);
        zero__plugin_unload(&p);
    }
    /* Search order: ZERO_PLUGIN_PATH entries (empty ones skipped), then the
     * install dir, then the build tree. */
    char **dirs = zero__plugin_dirs();
    CHECK(dirs != NULL, "dirs");
    if (dirs) {
        int n = 0;
        while (dirs[n]) ++n;
        CHECK(n >= 4, "at least 4 dirs, got %d", n);
        CHECK(n >= 2 && strcmp(dirs[0], "/nonexistent-zero-dir") == 0 && strcmp(dirs[1], g_dir) == 0,
              "env entries first, empty ones skipped");
        CHECK(n >= 1 && strcmp(dirs[n - 1], ZERO_BUILD_PLUGIN_DIR) == 0, "build tree last: %s",
              n ? dirs[n - 1] : "");
        CHECK(n >= 2 && strcmp(dirs[n - 2], ZERO_INSTALL_PLUGIN_DIR) == 0, "install dir before it");
        zero__plugin_dirs_free(dirs);
    }
}

static void test_not_found(void) {
    zero__plugin p;
    zero_status s = zero__plugin_load("no-such-strategy", &p, g_err, sizeof g_err_buf);
    CHECK_EQ_INT(s, ZERO_ERR_PLUGIN_NOT_FOUND);
    /* Every path tried is named. */
    CHECK_STR_CONTAINS(g_err, "/nonexistent-zero-dir/libzero-plugin-no-such-strategy.so");
    char want[4096];
    snprintf(want, sizeof want, "%s/libzero-plugin-no-such-strategy.so", g_dir);
    CHECK_STR_CONTAINS(g_err, want);
    snprintf(want, sizeof want, "%s/libzero-plugin-no-such-strategy.so", ZERO_INSTALL_PLUGIN_DIR);
    CHECK_STR_CONTAINS(g_err, want);
    snprintf(want, sizeof want, "%s/libzero-plugin-no-such-strategy.so", ZERO_BUILD_PLUGIN_DIR);
    CHECK_STR_CONTAINS(g_err, want);
    CHECK_STR_CONTAINS(g_err, "ZERO_PLUGIN_PATH");
    /* The plugins that do exist are named (a misspelling is obvious), each
     * once although g_dir is on the path twice, before the paths tried. */
    CHECK_STR_CONTAINS(g_err, "not found; available: ");
    CHECK_STR_CONTAINS(g_err, "loader-good, ");
    CHECK_STR_CONTAINS(g_err, "loader-wrong-major");
    const char *avail = strstr(g_err, "available: "), *searched = strstr(g_err, "; searched:");
    CHECK(avail && searched && avail < searched, "available listed before searched: %s", g_err);
    const char *first = strstr(g_err, "loader-good,");
    CHECK(first && !strstr(first + 1, "loader-good,"), "loader-good listed once: %s", g_err);

    /* No plugin anywhere: said so. */
    setenv("ZERO_PLUGIN_PATH", "/nonexistent-zero-dir", 1);
    char **dirs = zero__plugin_dirs();
    int any = 0;
    for (char **d = dirs; d && *d; ++d) {
        char **names = zero__plugin_dir_names(*d);
        any |= names && names[0];
        zero__plugin_dirs_free(names);
    }
    zero__plugin_dirs_free(dirs);
    s = zero__plugin_load("no-such-strategy", &p, g_err, sizeof g_err_buf);
    CHECK_EQ_INT(s, ZERO_ERR_PLUGIN_NOT_FOUND);
    if (!any) CHECK_STR_CONTAINS(g_err, "available: (none); searched:");
    CHECK(zero__plugin_dir_names("/nonexistent-zero-dir") == NULL, "a missing dir lists as NULL");

    /* A path that does not exist: dlopen's own text is passed on. */
    s = zero__plugin_load("/nonexistent-zero-dir/libzero-plugin-x.so", &p, g_err, sizeof g_err_buf);
    CHECK_EQ_INT(s, ZERO_ERR_PLUGIN_NOT_FOUND);
    CHECK_STR_CONTAINS(g_err, "/nonexistent-zero-dir/libzero-plugin-x.so");
    CHECK_STR_CONTAINS(g_err, "No such file");

    /* Empty name and tiny error buffers do not crash. */
    CHECK_EQ_INT(zero__plugin_load("", &p, g_err, sizeof g_err_buf), ZERO_ERR_INVALID_ARGUMENT);
    char tiny[8];
    CHECK_EQ_INT(zero__plugin_load("no-such-strategy", &p, tiny, sizeof tiny), ZERO_ERR_PLUGIN_NOT_FOUND);
    CHECK(strlen(tiny) < sizeof tiny, "tiny buffer terminated");
    CHECK_EQ_INT(zero__plugin_load("no-such-strategy", &p, NULL, 0), ZERO_ERR_PLUGIN_NOT_FOUND);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s <test plugin dir>\n", argv[0]);
        return 2;
    }
    g_dir = argv[1];
    test_good_by_path();
    expect_refused("wrong-major", ZERO_ERR_PLUGIN_ABI, "built for libzero plugin ABI 2.",
                   "this library implements 1." ZERO_STR(ZERO_PLUGIN_ABI_MINOR));
    expect_refused("newer-minor", ZERO_ERR_PLUGIN_ABI, "ABI 1.9", "newer than the 1." ZERO_STR(ZERO_PLUGIN_ABI_MINOR));
    expect_refused("bad-size", ZERO_ERR_PLUGIN_ABI, "table of 16 bytes", NULL);
    expect_refused("no-symbol", ZERO_ERR_PLUGIN_SYMBOL, "exports none of zero_plugin_v4, zero_plugin_v3, zero_plugin_v2, zero_plugin_v1", NULL);
    expect_refused("v5-only", ZERO_ERR_PLUGIN_ABI, "exports zero_plugin_v5 only", "implements 1." ZERO_STR(ZERO_PLUGIN_ABI_MINOR));
    expect_refused("no-step", ZERO_ERR_PLUGIN_SYMBOL, "lacks required functions: step, destroy", NULL);
    expect_refused("undefined-ref", ZERO_ERR_PLUGIN_NOT_FOUND, "could not be loaded",
                   "zero_test_symbol_that_does_not_exist");
    /* fail-create loads fine: create is only called by the engine. */
    zero__plugin p;
    CHECK_EQ_INT(zero__plugin_load(plugin_path("fail-create"), &p, g_err, sizeof g_err_buf), ZERO_OK);
    zero__plugin_unload(&p);
    test_good_by_name();
    test_not_found();
    /* After all those refusals the process is still usable. */
    test_good_by_path();
    return check_finish();
}
