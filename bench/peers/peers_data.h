/* The data every contender of bench/peers trains on: one file, written
 * once by the C host (`bench_peers_host --write-data FILE ...`) and read by
 * it and by peers_torch.py, so libzero, PyTorch and DeepSpeed start from the
 * same weights and see the same batches.
 *
 * Layout (little-endian): a header of 6 int32 {magic, width, layers, rows,
 * pool, 0}, then the initial parameters as float32 in PyTorch's order
 * (for each layer: weight [out][in], then bias), then `pool` global batches
 * of inputs x (rows x width each), then as many targets y.  Micro-step s of
 * rank r uses rows [r*mb, (r+1)*mb) of batch s % pool (rows = 8 * mb covers
 * N <= 8).  Values come from a counter-based hash, so the file is the same
 * on every machine.  Not thread-safe (one call at a time). */
#ifndef BENCH_PEERS_DATA_H
#define BENCH_PEERS_DATA_H
#include <stddef.h>

#define PEERS_DATA_MAGIC 0x5a524550 /* "PERZ" */

typedef struct peers_data {
    int width, layers, rows, pool;
    float *params;  /* layers * (width*width + width) */
    float *x, *y;   /* pool * rows * width each */
} peers_data;

size_t peers_param_count(int width, int layers);
/* Write the file; 0 or -1 (errno set). */
int peers_data_write(const char *path, int width, int layers, int rows, int pool);
/* Read it (allocates; free with peers_data_free); 0 or -1 with a message in err. */
int peers_data_read(const char *path, peers_data *d, char *err, size_t err_len);
void peers_data_free(peers_data *d);
#endif
