/* The trainer-loop pieces that zero-demo (examples/demo/main.c) and
 * zero-pipeline-demo (examples/pipeline/main.c) share, so that the two
 * binaries train the same model, log the same step lines and write the same
 * summary: the model shape, engine creation, the per-step log, the
 * parameter digest, the memory gather and the report.
 * Every function runs on the calling rank's main thread; those that take a
 * communicator are collective over it (said per function).  A failure that
 * would leave other ranks waiting aborts the job (MPI_Abort), as the demos
 * do for any failed libzero call. */
#ifndef DEMO_RUN_COMMON_H
#define DEMO_RUN_COMMON_H
#include <mpi.h>
#include <stdint.h>

#include "data.h"
#include "model.h"
#include "options.h"
#include "report.h"
#include "zero.h"

/* Model shape: ~190k parameters, small enough that 4 ranks sharing 2 cores
 * run 150 steps in seconds, large enough that the reduce buckets matter. */
extern const demo_dims demo_default_dims;

/* zero_engine_create from the demo options (config path, --plugin) on the
 * host's communicator *comm (borrowed during the call).  On failure prints
 * "[rank R] zero_engine_create failed: ..." and aborts the job.  The caller
 * owns the engine.  Collective over *comm. */
zero_engine *demo_engine_create(const demo_options *opt, MPI_Comm *comm, int rank);

/* After a failed libzero call (message printed): MPI_Abort(comm, 1), after
 * a short pause.  libzero agrees on the failures ranks must share (engine
 * creation, params_done, a step's verdict), so every rank fails at the same
 * call; without the pause the first rank's abort killed the others before
 * they printed their own message.  Does not return. */
void demo_abort_after_report(MPI_Comm comm);

/* What each optimizer step logged; arrays of steps + 1 entries, owned. */
typedef struct demo_run_log {
    long steps;
    double *losses, *lrs, *grad_norms, *step_ms;
    long skipped;
} demo_run_log;

/* Allocate for `steps` steps; aborts the job when out of memory. */
void demo_run_log_init(demo_run_log *l, long steps);
void demo_run_log_free(demo_run_log *l);
/* Record step `step` (global-batch mean loss, zero_step's result of the
 * boundary micro-step, wall time) and, when `print` is set, print
 * DeepSpeed's step line every `every` steps and at the first. */
void demo_run_log_step(demo_run_log *l, long step, double loss, const zero_step_result *res, double ms, int every,
                       int print);
/* Mean step time over the steps after the first (the first warms up). */
double demo_run_log_mean_ms(const demo_run_log *l);

/* Add param k's values (n floats) to the fp64 digest: its sum and sum of
 * squares, and the totals (sum, sum of squares, sum of |x|), which the
 * caller zeroes first and feeds in param order. */
void demo_digest_add(demo_report *r, int k, const float *w, uint64_t n);

/* Every rank's zero_memory_stats packed and gathered to rank 0 of comm:
 * returns world * DEMO_MEM_WORDS words there (caller frees), NULL on other
 * ranks.  Collective over comm. */
uint64_t *demo_mem_gather(zero_engine *e, MPI_Comm comm, int rank, int world);

/* Rank 0's "final:" line: last loss, validation loss, mean step time,
 * skipped steps and the digest. */
void demo_print_final(const demo_report *rep, const demo_run_log *l, double mean_ms);

/* Fill the summary fields every demo writes (borrowing what they point to). */
void demo_report_fill(demo_report *rep, zero_engine *e, int world, const demo_options *opt,
                      const demo_train_config *cfg, const demo_corpus *corpus, int micro, int gas, uint64_t nparams,
                      const demo_run_log *l, double mean_ms, const uint64_t *mem, const zero_comm_stats *cs,
                      int have_cs);

/* Leave: free the demo's communicator, MPI_Finalize, return rc. */
int demo_exit(MPI_Comm *comm, int rc);
#endif
