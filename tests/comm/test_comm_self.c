/* The single-process backend: collectives are copies or no-ops, async
 * requests are complete at once, and ZERO_COMM_SELF never touches MPI. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "../common/check.h"
#include "comm.h"
#include "comm_internal.h"

/* Nodes from gathered machine records (comm_node.c): what zm_split_node
 * and the shared-memory setup read from their tables */
static void set_row(char *tbl, int p, const char *host, const char *boot) {
    char *row = tbl + (size_t)p * ZERO__NODE_RECORD;
    memset(row, 0, ZERO__NODE_RECORD);
    strcpy(row, host);
    strcpy(row + 64, boot);
}

static void test_node_records(void) {
    char a[ZERO__NODE_RECORD], b[ZERO__NODE_RECORD];
    zero__node_record(a);
    zero__node_record(b);
    CHECK(memcmp(a, b, sizeof a) == 0 && a[0] != '\0', "this machine's record is stable and names the host");
    char tbl[6 * ZERO__NODE_RECORD];
    /* nodes {0, 2, 4} and {1, 3} (round-robin placement), and rank 5 on a
     * machine with the same host name but another boot id */
    for (int p = 0; p < 5; ++p) set_row(tbl, p, p % 2 ? "hostB" : "hostA", "boot-1\n");
    set_row(tbl, 5, "hostA", "boot-2\n");
    int members = -1, local = -1;
    CHECK_EQ_INT(zero__node_leader(tbl, 6, 4, &members, &local), 0);
    CHECK(members == 3 && local == 2, "rank 4: %d members, local rank %d", members, local);
    CHECK_EQ_INT(zero__node_leader(tbl, 6, 3, &members, &local), 1);
    CHECK(members == 2 && local == 1, "rank 3: %d members, local rank %d", members, local);
    CHECK_EQ_INT(zero__node_leader(tbl, 6, 5, &members, &local), 5);
    CHECK(members == 1 && local == 0, "rank 5: %d members, local rank %d", members, local);
    CHECK_EQ_INT(zero__node_leader(tbl, 6, 0, NULL, NULL), 0);
    /* every rank reads the same partition from the same table: each rank's
     * leader leads itself and counts the same members */
    for (int q = 0; q < 6; ++q) {
        int mq = 0, ml = 0, l = zero__node_leader(tbl, 6, q, &mq, NULL);
        CHECK(zero__node_leader(tbl, 6, l, &ml, NULL) == l && ml == mq, "rank %d: leader %d, %d vs %d members", q, l, mq,
              ml);
    }
    /* the same records as the first field of larger rows (the shared-memory
     * setup's table) with other fields that differ per rank: same partition */
    enum { STRIDE = ZERO__NODE_RECORD + 40 };
    char rows[6 * STRIDE];
    for (int p = 0; p < 6; ++p) {
        memcpy(rows + p * STRIDE, tbl + p * ZERO__NODE_RECORD, ZERO__NODE_RECORD);
        memset(rows + p * STRIDE + ZERO__NODE_RECORD, 'a' + p, STRIDE - ZERO__NODE_RECORD);
    }
    for (int q = 0; q < 6; ++q) {
        int m1 = -1, l1 = -1, m2 = -2, l2 = -2;
        const int a = zero__node_leader(tbl, 6, q, &m1, &l1), b = zero__node_leader_rows(rows, STRIDE, 6, q, &m2, &l2);
        CHECK(a == b && m1 == m2 && l1 == l2, "rank %d: rows of %d bytes give leader %d, %d members, local %d; "
              "records %d, %d, %d", q, STRIDE, b, m2, l2, a, m1, l1);
    }
}

int main(void) {
    test_node_records();
    zero_comm *w = NULL;
    char err[128];
    CHECK_EQ_INT(zero__comm_world_create(ZERO_COMM_SELF, NULL, NULL, &w, err, sizeof err), ZERO_OK);
    if (!w) return check_finish();
    CHECK(strcmp(w->ops->name, "self") == 0, "backend %s", w->ops->name);
    CHECK_EQ_INT(zero__comm_rank(w), 0);
    CHECK_EQ_INT(zero__comm_size(w), 1);
    CHECK_EQ_INT(zero__dtype_size(ZERO_DTYPE_F32), 4);
    CHECK_EQ_INT(zero__dtype_size(ZERO_DTYPE_BF16), 2);
    CHECK_EQ_INT(zero__dtype_size(ZERO_DTYPE_F64), 8);
    CHECK_EQ_INT(zero__dtype_size(ZERO_DTYPE_U8), 1);
    CHECK_EQ_INT(zero__dtype_size(12345), 0);

    float a[5] = {1, 2, 3, 4, 5};
    CHECK_EQ_INT(zero__allreduce(w, a, 5, ZERO_DTYPE_F32, ZERO_OP_SUM), ZERO_OK);
    CHECK(a[0] == 1 && a[4] == 5, "allreduce changed data");
    /* 16-bit sums exist (issue 14's wire); over one rank they change nothing */
    CHECK_EQ_INT(zero__allreduce(w, a, 5, ZERO_DTYPE_BF16, ZERO_OP_SUM), ZERO_OK);
    CHECK(a[0] == 1 && a[4] == 5, "bf16 allreduce changed data");
    CHECK_EQ_INT(zero__broadcast(w, a, 5, ZERO_DTYPE_F32, 0), ZERO_OK);
    CHECK_EQ_INT(zero__broadcast(w, a, 5, ZERO_DTYPE_F32, 1), ZERO_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(zero__barrier(w), ZERO_OK);

    float out[5] = {0};
    size_t counts[1] = {5};
    zero_comm_req *q = NULL;
    CHECK_EQ_INT(zero__ireduce_scatterv(w, a, out, counts, ZERO_DTYPE_F32, &q), ZERO_OK);
    int done = 0;
    CHECK_EQ_INT(zero__comm_test(q, &done), ZERO_OK);
    CHECK_EQ_INT(done, 1);
    CHECK(memcmp(a, out, sizeof a) == 0, "reduce-scatter copy");
    memset(out, 0, sizeof out);
    CHECK_EQ_INT(zero__iallgatherv(w, a, out, counts, ZERO_DTYPE_F32, &q), ZERO_OK);
    CHECK_EQ_INT(zero__comm_wait(q), ZERO_OK);
    CHECK(memcmp(a, out, sizeof a) == 0, "allgather copy");
    CHECK_EQ_INT(zero__iallgatherv(w, out, out, counts, ZERO_DTYPE_F32, &q), ZERO_OK); /* in place */
    CHECK_EQ_INT(zero__comm_wait(q), ZERO_OK);
    CHECK(memcmp(a, out, sizeof a) == 0, "in-place allgather");
    CHECK_EQ_INT(zero__iallreduce(w, a, 5, ZERO_DTYPE_F64, ZERO_OP_MAX, &q), ZERO_OK);
    CHECK_EQ_INT(zero__comm_wait(q), ZERO_OK);
    CHECK_EQ_INT(zero__ireduce_scatterv(w, a, out, counts, ZERO_DTYPE_F16, &q), ZERO_OK);
    CHECK_EQ_INT(zero__comm_wait(q), ZERO_OK);
    CHECK_EQ_INT(zero__ireduce_scatterv(w, a, out, counts, (zero_dtype)12345, &q), ZERO_ERR_INVALID_ARGUMENT);
    uint64_t x = 42, y = 0;
    CHECK_EQ_INT(zero__allgather_bytes(w, &x, &y, sizeof x), ZERO_OK);
    CHECK_EQ_INT(y, 42);

    zero_comm *sub = NULL;
    CHECK_EQ_INT(zero__comm_split(w, 3, 0, &sub), ZERO_OK);
    CHECK(sub && zero__comm_size(sub) == 1, "split");
    zero__comm_free(sub);
    CHECK_EQ_INT(zero__comm_split(w, -1, 0, &sub), ZERO_OK);
    CHECK(sub == NULL, "color < 0 gives no communicator");

    zero__comm_counters ct;
    zero__comm_counters_get(w, &ct);
    CHECK_EQ_INT(ct.allreduce_calls, 3); /* f32, bf16 (2 bytes a element), f64 max */
    CHECK_EQ_INT(ct.reduce_scatter_calls, 2); /* f32, f16; the unknown dtype was refused */
    CHECK_EQ_INT(ct.allgather_calls, 2);
    CHECK_EQ_INT(ct.bytes_reduced, 5 * 4 + 5 * 2 + 5 * 8 + 5 * 4 + 5 * 2);
    zero__comm_world_free(w);

    /* AUTO outside mpirun with ZERO_COMM_BACKEND=self is the self backend */
    setenv("ZERO_COMM_BACKEND", "self", 1);
    CHECK_EQ_INT(zero__comm_world_create(ZERO_COMM_AUTO, NULL, NULL, &w, err, sizeof err), ZERO_OK);
    CHECK(w && strcmp(w->ops->name, "self") == 0, "auto -> self");
    zero__comm_world_free(w);
    /* AUTO with no MPI launcher in the environment and MPI not initialised:
     * single process, no MPI singleton start */
    unsetenv("ZERO_COMM_BACKEND");
    if (!getenv("OMPI_COMM_WORLD_SIZE") && !getenv("PMIX_RANK") && !getenv("PMI_SIZE") && !getenv("PMI_RANK")) {
        CHECK_EQ_INT(zero__comm_world_create(ZERO_COMM_AUTO, NULL, NULL, &w, err, sizeof err), ZERO_OK);
        CHECK(w && strcmp(w->ops->name, "self") == 0, "auto without a launcher -> self");
        zero__comm_world_free(w);
    }
    CHECK_EQ_INT(zero__comm_world_create(99, NULL, NULL, &w, err, sizeof err), ZERO_ERR_UNSUPPORTED);
    CHECK(strstr(err, "not supported") != NULL, "error text: %s", err);
    return check_finish();
}
