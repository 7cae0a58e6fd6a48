/* The demo's text corpus and its deterministic, rank-sharded batches.
 *
 * The corpus is a byte string (by default every regular file under
 * /usr/share/common-licenses, sorted by name, concatenated).  The first 95%
 * is the training set, the last 5% the validation set.
 *
 * Batches: micro-step s of the whole job draws `global_batch` training
 * positions from a counter-based hash of (seed, s, j), j = 0..global_batch-1.
 * Rank r of N takes j in [r*b, (r+1)*b) with b = global_batch / N, so N ranks
 * with micro-batch b see exactly the samples that one rank with micro-batch
 * N*b sees, and no rank needs to talk to another to know its slice. */
#ifndef DEMO_DATA_H
#define DEMO_DATA_H
#include <stddef.h>
#include <stdint.h>

typedef struct demo_corpus {
    uint8_t *bytes; /* owned; free with demo_corpus_free */
    size_t n;       /* total bytes */
    size_t n_train; /* [0, n_train) trains, [n_train, n) validates */
    int nfiles;     /* files read */
} demo_corpus;

/* Load `path`: a regular file, or a directory whose regular files (not
 * symlinks, which there only duplicate other licences) are read in name
 * order.  Returns 0, or -1 with a message in err.  Not thread-safe with
 * respect to the same corpus. */
int demo_corpus_load(const char *path, demo_corpus *c, char *err, size_t err_len);
void demo_corpus_free(demo_corpus *c);

/* Fill `count` samples j = first..first+count-1 of micro-step `micro_step`:
 * tok[i*ctx .. i*ctx+ctx-1] gets the `ctx` bytes before a training position p
 * and tgt[i] the byte at p, with p uniform in [ctx, n_train).  Pure. */
void demo_batch_fill(const demo_corpus *c, int ctx, uint64_t seed, uint64_t micro_step, int first,
                     int count, uint8_t *tok, uint8_t *tgt);

/* Validation sample `i` (0 <= i < n - n_train): predict byte n_train + i from
 * the ctx bytes before it (which may reach back into the training text). */
void demo_val_fill(const demo_corpus *c, int ctx, size_t first, int count, uint8_t *tok,
                   uint8_t *tgt);
#endif
