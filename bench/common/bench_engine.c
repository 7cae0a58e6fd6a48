/* See bench_engine.h. */
#include "bench_engine.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

double bench_slowest(double v) {
    double w = 0;
    MPI_Allreduce(&v, &w, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return w;
}

void bench_die(const char *what, zero_engine *e, zero_status s) {
    fprintf(stderr, "%s: %s %s\n", what, zero_status_string(s), e ? zero_last_error(e) : "");
    MPI_Abort(MPI_COMM_WORLD, 1);
}

zero_engine *bench_engine_open(const char *json, const char *plugin, int cuda, zero_log_fn log_fn) {
    MPI_Comm comm = MPI_COMM_WORLD;
    zero_engine_options o = ZERO_ENGINE_OPTIONS_INIT;
    o.config_json = json;
    o.plugin = plugin;
    o.comm_kind = ZERO_COMM_MPI;
    o.comm = &comm;
    o.log_fn = log_fn;
    if (cuda) {
        o.device_kind = ZERO_DEVICE_CUDA;
        o.device_index = ZERO_DEVICE_INDEX_AUTO;
    }
    zero_engine *e = NULL;
    char err[512];
    zero_status s = zero_engine_create(&o, &e, err, sizeof err);
    if (s != ZERO_OK) {
        fprintf(stderr, "engine: %s\n", err);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return e;
}

static zero_engine *flat(const char *json, const char *plugin, int nparams, size_t per, const char *prefix,
                        zero_param **h, float **host_grads) {
    zero_engine *e = bench_engine_open(json, plugin, host_grads != NULL, NULL);
    zero_status s = ZERO_OK;
    float *init = calloc(per ? per : 1, sizeof(float));
    for (int i = 0; i < nparams; i++) {
        char name[32];
        snprintf(name, sizeof name, "%s%d", prefix, i);
        zero_param_desc d = ZERO_PARAM_DESC_INIT;
        d.name = name;
        d.data = init;
        d.numel = per;
        if (host_grads) d.grad = host_grads[i];
        if ((s = zero_register_param(e, &d, &h[i])) != ZERO_OK) bench_die("register", e, s);
    }
    if ((s = zero_params_done(e)) != ZERO_OK) bench_die("params_done", e, s);
    free(init);
    return e;
}

zero_engine *bench_engine_flat(const char *json, const char *plugin, int nparams, size_t per, const char *prefix,
                               zero_param **h) {
    return flat(json, plugin, nparams, per, prefix, h, NULL);
}

zero_engine *bench_engine_flat_cuda(const char *json, const char *plugin, int nparams, size_t per,
                                    const char *prefix, zero_param **h, float **host_grads) {
    return flat(json, plugin, nparams, per, prefix, h, host_grads);
}
