/* (1.7.5) A trace prefix whose directory cannot be written fails
 * zero_engine_create with ZERO_ERR_IO naming the directory, instead of the
 * whole run's trace being lost when the engine is destroyed (one stderr
 * line at the end, as before); a writable one still traces.  One process,
 * ZERO_COMM_SELF.  Usage: test_trace_dir WRITABLE_DIR */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "zero.h"

static zero_status create(const char *trace, char *err, size_t len) {
    char json[1024];
    snprintf(json, sizeof json, "{\"train_micro_batch_size_per_gpu\": 1, \"trace\": \"%s\", "
                                "\"optimizer\": {\"type\": \"SGD\", \"params\": {\"lr\": 0.1}}}", trace);
    zero_engine_options o = ZERO_ENGINE_OPTIONS_INIT;
    o.config_json = json;
    o.comm_kind = ZERO_COMM_SELF;
    o.plugin = "stage0";
    zero_engine *e = NULL;
    zero_status s = zero_engine_create(&o, &e, err, len);
    zero_engine_destroy(e);
    return s;
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    char err[2048] = "", good[1024], path[1200];
    zero_status s = create("/nonexistent-libzero-dir/run1/tr", err, sizeof err);
    CHECK(s == ZERO_ERR_IO, "a trace in a missing directory: %s (%s)", zero_status_string(s), err);
    CHECK_STR_CONTAINS(err, "directory /nonexistent-libzero-dir/run1: No such file or directory");
    CHECK_STR_CONTAINS(err, "trace: cannot write /nonexistent-libzero-dir/run1/tr.rank0.json");
    snprintf(good, sizeof good, "%s/trace-dir-ok", argv[1]);
    snprintf(path, sizeof path, "%s.rank0.json", good);
    unlink(path);
    s = create(good, err, sizeof err);
    CHECK(s == ZERO_OK, "a trace in a writable directory: %s (%s)", zero_status_string(s), err);
    struct stat sb;
    CHECK(stat(path, &sb) == 0 && sb.st_size > 0, "no trace written at %s", path);
    return check_finish();
}
