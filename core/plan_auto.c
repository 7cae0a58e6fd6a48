/* "stage": "auto": the lowest stage whose plan fits (contract in plan_auto.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm.h"
#include "device.h"
#include "engine.h"
#include "log.h"
#include "plan.h"
#include "plan_auto.h"
#include "plan_candidates.h"

/* MemAvailable from /proc/meminfo, else free pages; 0 if neither is known. */
static uint64_t host_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (f) {
        char line[256];
        unsigned long long kb;
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
                fclose(f);
                return (uint64_t)kb * 1024;
            }
        fclose(f);
    }
    long pages = sysconf(_SC_AVPHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    return pages > 0 && size > 0 ? (uint64_t)pages * (uint64_t)size : 0;
}

/* This rank's budget and where it came from. */
static uint64_t local_budget(struct zero_engine *e, const char **from) {
    int64_t b;
    if (zero__config_int(e->cfg, "zero_optimization.memory_budget_bytes", &b) == 1 && b > 0) {
        *from = "zero_optimization.memory_budget_bytes";
        return (uint64_t)b;
    }
    uint64_t fr;
    if (e->dev && e->dev->ops->free_bytes && e->dev->ops->free_bytes(e->dev, &fr) == 0) {
        *from = "the device's free memory";
        return fr;
    }
    *from = "the host's available memory";
    return host_available();
}

static void fmt_bytes(uint64_t b, char *out, size_t len) {
    const double v = (double)b;
    if (v >= 1e9) snprintf(out, len, "%.3f GB", v / 1e9);
    else if (v >= 1e6) snprintf(out, len, "%.3f MB", v / 1e6);
    else snprintf(out, len, "%.1f kB", v / 1e3);
}

zero_status zero__auto_pick(struct zero_engine *e, char *name, size_t len) {
    const char *from = NULL;
    uint64_t budget = local_budget(e, &from);
    /* every rank must pick the same plugin: the smallest budget of any rank */
    zero_status s = zero__allreduce(e->world, &budget, 1, ZERO_DTYPE_U64, ZERO_OP_MIN);
    if (s != ZERO_OK) return zero__error(e, s, "stage auto: agreeing on the memory budget failed");
    if (budget == 0) return zero__error(e, ZERO_ERR_CONFIG, "stage auto: no memory budget known (%s is 0); set "
                                                            "zero_optimization.memory_budget_bytes", from);

    uint64_t *numel = calloc(e->nparams ? e->nparams : 1, sizeof *numel);
    int32_t *group = calloc(e->nparams ? e->nparams : 1, sizeof *group);
    if (!numel || !group) {
        free(numel);
        free(group);
        return zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "stage auto: out of memory");
    }
    for (uint32_t i = 0; i < e->nparams; i++) {
        numel[i] = e->params[i]->info.numel;
        group[i] = e->params[i]->info.group;
    }
    /* (1.9) expert groups are planned partitioned over their own ranks (a
     * dense plan would give an expert's states world_size ranks to share and
     * pick a stage that does not fit); candidates that do not support them
     * are not planned, as zero_params_done would refuse them */
    int32_t *xid = calloc(e->nparams ? e->nparams : 1, sizeof *xid);
    uint32_t *xsize = calloc(e->nparams ? e->nparams : 1, sizeof *xsize), nx = 0;
    if (!xid || !xsize) s = zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "stage auto: out of memory");
    else s = zero__experts_plan_sizes(e, xid, xsize, &nx);
    if (s != ZERO_OK) {
        free(numel);
        free(group);
        free(xid);
        free(xsize);
        return s;
    }
    const zero__plan_experts ex = {nx, xid, xsize};
    /* the configured optimizer offload (the offload candidate's pin_memory log); parameter offload is
     * the stage3+offload candidate's alone */
    const char *opt0 = zero__config_offload_device(e->cfg, 0);
    if (opt0 && strcmp(opt0, "nvme") == 0) opt0 = "cpu";
    uint64_t dev[ZERO__AUTO_NCAND];
    int chosen = -1, runner = -1, smallest = -1;
    char err[1024] = "";
    for (int c = 0; c < ZERO__AUTO_NCAND; c++) {
        zero__plugin pl;
        memset(&pl, 0, sizeof pl);
        if (zero__plugin_load(zero__auto_candidates[c].plugin, &pl, err, sizeof err) != ZERO_OK) {
            zero__log(e, ZERO_LOG_DEBUG, "stage auto: %s not planned: %s", zero__auto_candidates[c].label, err);
            continue;
        }
        zero__config_set_stage(e->cfg, zero__auto_candidates[c].stage); /* its overlap_comm default, offload's partitioning */
        /* offload only where the candidate says so: stage3 plain and stage3+offload are two candidates */
        zero__config_set_offload(e->cfg, zero__auto_candidates[c].offload ? "cpu" : opt0, zero__auto_candidates[c].offload ? "cpu" : NULL);
        zero_memory_plan p = ZERO_MEMORY_PLAN_INIT;
        zero_status ps = zero__plan_table(pl.table, e->cfg, (uint32_t)e->world_size, numel, group, e->nparams, &ex, &p,
                                          err, sizeof err);
        zero__plugin_unload(&pl);
        if (ps != ZERO_OK) {
            zero__log(e, ZERO_LOG_DEBUG, "stage auto: %s not planned: %s", zero__auto_candidates[c].label, err);
            continue;
        }
        dev[c] = p.total[ZERO_TIER_DEVICE];
        zero__log(e, ZERO_LOG_DEBUG, "stage auto: %s plans %llu device bytes + %llu host bytes per rank",
                  zero__auto_candidates[c].label, (unsigned long long)dev[c], (unsigned long long)p.total[ZERO_TIER_HOST]);
        if (smallest < 0 || dev[c] < dev[smallest]) smallest = c;
        if (dev[c] <= budget) {
            if (chosen < 0) chosen = c;
            else if (runner < 0) runner = c;
        }
    }
    free(numel);
    free(group);
    free(xid);
    free(xsize);
    char bb[32], cb[32], rb[32];
    fmt_bytes(budget, bb, sizeof bb);
    if (chosen < 0) {
        zero__config_set_stage(e->cfg, 0);
        zero__config_set_offload(e->cfg, opt0, NULL);
        if (smallest < 0)
            return zero__error(e, ZERO_ERR_PLUGIN_NOT_FOUND, "stage auto: no candidate plugin could be planned (%s)",
                               err);
        fmt_bytes(dev[smallest], cb, sizeof cb);
        return zero__error(e, ZERO_ERR_OUT_OF_MEMORY,
                           "stage auto: no plugin fits the budget of %llu bytes (%s) per rank, from %s, on %d "
                           "rank(s); the smallest budget that fits is %llu bytes (%s), with %s",
                           (unsigned long long)budget, bb, from, e->world_size, (unsigned long long)dev[smallest], cb,
                           zero__auto_candidates[smallest].label);
    }
    zero__config_set_stage(e->cfg, zero__auto_candidates[chosen].stage);
    zero__config_set_offload(e->cfg, zero__auto_candidates[chosen].offload ? "cpu" : opt0, zero__auto_candidates[chosen].offload ? "cpu" : NULL);
    fmt_bytes(dev[chosen], cb, sizeof cb);
    char runner_txt[160] = "none (nothing else fits)";
    if (runner >= 0) {
        fmt_bytes(dev[runner], rb, sizeof rb);
        snprintf(runner_txt, sizeof runner_txt, "%s (%s)", zero__auto_candidates[runner].label, rb);
    }
    zero__log(e, ZERO_LOG_INFO,
              "stage auto: %s, planned %s of device memory per rank within a budget of %s (%s); runner-up %s",
              zero__auto_candidates[chosen].label, cb, bb, from, runner_txt);
    snprintf(name, len, "%s", zero__auto_candidates[chosen].plugin);
    return ZERO_OK;
}
