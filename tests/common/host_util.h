/* Small utilities shared by the test hosts (tests/stages/mlp_host.c,
 * tests/stage3/s3_host.c, tests/precision/prec_host.c) and the tests built
 * on them: deterministic data, comparisons, engine creation over the public
 * ABI, fp32 gathers and checkpoint-directory housekeeping.
 * Library: zero_test_host_util (tests/common/CMakeLists.txt).
 *
 * Everything here asserts nothing (check.h's counters are per translation
 * unit): functions return what they found and the tests CHECK it. */
#ifndef ZERO_TESTS_HOST_UTIL_H
#define ZERO_TESTS_HOST_UTIL_H
#include <stddef.h>
#include <stdint.h>

#include "rel_l2.h"
#include <mpi.h>

#include "zero.h"

/* Deterministic uniform in [-1, 1) from a 64-bit key (splitmix64).  Pure. */
double th_u11(uint64_t key);

/* th_rel_l2(a, b, n): relative L2 difference (rel_l2.h, header-only). */

/* zero_engine_create with a JSON config, a plugin name and a log callback
 * (may be NULL), over MPI_COMM_WORLD or, with self_comm, ZERO_COMM_SELF.
 * On failure *e is NULL and err (errlen bytes) holds
 * "zero_engine_create: <message>".  The caller owns *e.  Collective over
 * MPI_COMM_WORLD unless self_comm. */
/* The communicator th_engine_create gives libzero (default MPI_COMM_WORLD):
 * a test that runs an engine on a subset of its ranks sets a split of it.
 * Main thread only. */
void th_set_comm(MPI_Comm comm);
/* (1.5) Non-NULL: th_engine_create gives libzero this host communicator
 * (ZERO_COMM_HOST) instead of an MPI_Comm (unless self_comm); borrowed,
 * it must outlive the engines.  NULL (default): MPI.  Main thread only. */
void th_set_host_comm(const zero_host_comm *hc);
zero_status th_engine_create(const char *json, const char *plugin, int self_comm, zero_log_fn log_fn,
                             void *log_user, zero_engine **e, char *err, size_t errlen);

/* Gather the np fp32 params h[0..np), copy them one after another into dst
 * (numel[i] floats each), release them.  Returns zero_gather's status (dst
 * untouched when it failed).  Same threading as zero_gather. */
zero_status th_gather_all_f32(zero_engine *e, zero_param *const *h, uint32_t np, const size_t *numel, float *dst);

/* Remove a directory tree (a checkpoint root: its checkpoint directories,
 * their files, `latest`); missing is fine. */
void th_remove_dir(const char *path);

/* The checkpoint directory a root's `latest` names ("<root>/<tag>") into
 * out; out[0] = 0 if there is none. */
void th_ckpt_latest(const char *root, char *out, size_t n);

/* Rank 0 makes a temporary directory from `templ` ("/tmp/...-XXXXXX",
 * rewritten in place, at most `size` bytes) and broadcasts its name; on
 * failure templ[0] is 0 on every rank.  Collective over MPI_COMM_WORLD. */
void th_mkdtemp_bcast(char *templ, int size);
#endif
