/* The demo's end-of-run report: the memory table printed by rank 0 and the
 * --summary JSON file (Jansson).  Only rank 0 calls these, after the
 * per-rank data has been gathered to it with MPI.  No MPI or libzero calls
 * happen in here (zero_mem_tag_name only); everything passed in is borrowed
 * for the duration of the call.  Not thread-safe (Jansson objects, FILE). */
#ifndef DEMO_REPORT_H
#define DEMO_REPORT_H
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>

#include "model.h"
#include "zero.h"

/* One rank's zero_memory_stats packed as plain uint64 words so that it can
 * travel in one MPI_Gather: current[tier][tag], peak[tier][tag],
 * current_total[tier], peak_total[tier]. */
#define DEMO_MEM_WORDS (2 * ZERO_NTIERS * ZERO_MEM_NTAGS + 2 * ZERO_NTIERS)
void demo_mem_pack(const zero_memory_stats *s, uint64_t out[DEMO_MEM_WORDS]);

typedef struct demo_report {
    const char *plugin;      /* borrowed */
    int world;
    const char *config_path; /* may be NULL */
    json_t *config;          /* borrowed parsed config, may be NULL */
    const char *data_path;
    size_t train_bytes, val_bytes;
    long steps;              /* optimizer steps run */
    int micro_batch, grad_accum;
    uint64_t seed;
    demo_dims dims;
    uint64_t num_params;
    const double *losses, *lrs, *grad_norms, *step_ms; /* `steps` each */
    long skipped_steps;
    double mean_step_ms;     /* over steps after the first */
    double val_loss;
    uint64_t val_tokens;
    double digest_sum, digest_sumsq, digest_abssum; /* fp64 over all parameters */
    uint64_t digest_bits;    /* FNV-1a over every parameter's bytes, in parameter order: bitwise equality */
    double param_sum[DEMO_NPARAMS], param_sumsq[DEMO_NPARAMS];
    const uint64_t *mem;     /* world * DEMO_MEM_WORDS, rank-major */
    double comm_exposed_s, comm_total_s; /* rank 0's zero_comm_stats (-1 if unavailable) */
    /* rank 0's zero_comm_stats payload bytes and calls over the whole run, training and the
     * final validation/digest gathers included (0 if unavailable) */
    uint64_t comm_bytes_reduced, comm_bytes_gathered, comm_allgather_calls;
} demo_report;

/* Print every rank's memory by category (current and peak) to `f`. */
void demo_memory_print(FILE *f, int world, const uint64_t *mem);

/* Write the summary JSON to `path` atomically (temp file + rename).
 * Returns 0, or -1 with a message in err. */
int demo_summary_write(const demo_report *r, const char *path, char *err, size_t err_len);
#endif
