/* White-box checks of what the engine-creation agreement compares and how
 * it names a config difference (core/config_canon.c, engine_agree.h):
 *  - the canonical form does not depend on key order or number spelling,
 *    and leaves out exactly the keys that may differ between nodes;
 *  - zero__config_first_diff names the first differing key (sorted, depth
 *    first) with both values: nested keys, array items, a key absent on one
 *    side, reals that differ beyond 15 digits (shown with 17);
 *  - a plugin's build id is the hex of its GNU build-id note. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "config.h"
#include "engine_agree.h"
#include "loader.h"

static char *canon_of(const char *json) {
    zero__config *c = NULL;
    char err[512];
    zero_status s = zero__config_parse(json, NULL, 1, &c, NULL, NULL, err, sizeof err);
    CHECK(s == ZERO_OK, "parse %s: %s", json, err);
    char *t = s == ZERO_OK ? zero__config_canonical(c) : NULL;
    if (c) zero__config_free(c);
    return t;
}

static void test_canonical(void) {
    char *a = canon_of("{\"optimizer\": {\"type\": \"SGD\", \"params\": {\"lr\": 1e-3}}, \"gradient_accumulation_steps\": 2}");
    char *b = canon_of("{\"gradient_accumulation_steps\": 2, \"optimizer\": {\"params\": {\"lr\": 0.001}, \"type\": \"SGD\"}}");
    CHECK(a && b && !strcmp(a, b), "key order and number spelling change the canonical form: %s vs %s",
          a ? a : "(null)", b ? b : "(null)");
    free(b);
    /* node-local keys are left out; everything else stays */
    b = canon_of("{\"gradient_accumulation_steps\": 2, \"optimizer\": {\"params\": {\"lr\": 0.001}, \"type\": \"SGD\"},"
                 " \"trace\": \"/tmp/x\", \"zero_optimization\": {\"stage\": 3, \"plugin\": \"/opt/p.so\","
                 " \"offload_param\": {\"device\": \"nvme\", \"nvme_path\": \"/node7/nvme\"}}}");
    CHECK(b && !strstr(b, "nvme_path") && !strstr(b, "trace") && !strstr(b, "/opt/p.so"), "excluded keys: %s", b ? b : "(null)");
    CHECK(b && strstr(b, "\"device\":\"nvme\"") && strstr(b, "\"stage\":3"), "kept keys: %s", b ? b : "(null)");
    free(a);
    free(b);
}

static void expect_diff(const char *x, const char *y, const char *path, const char *vx, const char *vy) {
    char p[256], a[64], b[64];
    const int found = zero__config_first_diff(x, y, p, sizeof p, a, b, sizeof a);
    CHECK(found == (path != NULL), "%s vs %s: found %d", x, y, found);
    if (!found || !path) return;
    CHECK(!strcmp(p, path) && !strcmp(a, vx) && !strcmp(b, vy), "%s vs %s: got '%s' %s / %s, want '%s' %s / %s", x, y,
          p, a, b, path, vx, vy);
}

static void test_first_diff(void) {
    expect_diff("{\"a\":1,\"b\":{\"c\":2}}", "{\"a\":1,\"b\":{\"c\":2}}", NULL, NULL, NULL);
    expect_diff("{\"a\":1,\"b\":{\"c\":2,\"d\":3}}", "{\"a\":1,\"b\":{\"c\":2,\"d\":4}}", "b.d", "3", "4");
    expect_diff("{\"z\":1,\"b\":{\"c\":2}}", "{\"z\":2,\"b\":{\"c\":3}}", "b.c", "2", "3"); /* sorted: b before z */
    expect_diff("{\"a\":1}", "{\"a\":1,\"m\":\"x\"}", "m", "absent", "\"x\"");
    expect_diff("{\"betas\":[0.9,0.999]}", "{\"betas\":[0.9,0.99]}", "betas[1]", "0.999", "0.99");
    expect_diff("{\"betas\":[0.9]}", "{\"betas\":[0.9,0.99]}", "betas", "[0.9]", "[0.9,0.99]");
    expect_diff("{\"lr\":0.1}", "{\"lr\":0.10000000000000002}", "lr", "0.10000000000000001", "0.10000000000000002");
    expect_diff("{\"a\":1}", "not json", NULL, NULL, NULL);
}

/* The build id of a loaded test plugin equals its note, as readelf shows
 * it; argv[1] is the loader test plugin directory. */
static void test_build_id(const char *dir) {
    char path[4096], err[2048], cmd[4200], want[128] = "";
    snprintf(path, sizeof path, "%s/libzero-plugin-loader-good.so", dir);
    zero__plugin p;
    zero_status s = zero__plugin_load(path, &p, err, sizeof err);
    CHECK(s == ZERO_OK, "load %s: %s", path, err);
    if (s != ZERO_OK) return;
    char id[96];
    zero__plugin_build_id(&p, id, sizeof id);
    snprintf(cmd, sizeof cmd, "readelf -n '%s' 2>/dev/null | sed -n 's/.*Build ID: *//p'", path);
    FILE *f = popen(cmd, "r");
    if (f) {
        if (!fgets(want, sizeof want, f)) want[0] = '\0';
        pclose(f);
    }
    want[strcspn(want, "\n")] = '\0';
    if (want[0]) CHECK(!strcmp(id, want), "build id %s, readelf says %s", id, want);
    else CHECK(strlen(id) >= 16, "build id '%s' (no readelf to compare with)", id);
    zero__plugin_unload(&p);
}

int main(int argc, char **argv) {
    test_canonical();
    test_first_diff();
    if (argc > 1) test_build_id(argv[1]);
    return check_finish();
}
