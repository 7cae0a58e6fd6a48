/* (ABI 1.5, issue 15) Training over a host communicator (ZERO_COMM_HOST):
 * the test host's MLP driven through zero_host_comm callbacks that are MPI
 * calls (tests/common/host_comm_mpi.h), under mpirun with N ranks:
 *  - with the alltoall callback every plugin (stage0/1/2/3, offload) trains
 *    bitwise like the same plugin over ZERO_COMM_MPI (libzero sums in the
 *    MPI ring's order), and bitwise like stage 0 on the host communicator
 *    wherever the MPI backend itself is (gas 4: the window sums; gas 1
 *    within 1e-6, as tests/stages/test_equivalence.c);
 *  - with the started alltoall (alltoall_start/finish/test: MPI_Ialltoall)
 *    every plugin trains bitwise like the blocking alltoall, every started
 *    exchange is finished (none open at the end), and with overlap_comm
 *    exchanges are in flight while backward goes on;
 *  - hooks fired from two threads in a shuffled order: bitwise the same;
 *  - without alltoall (sums by the host's MPI_Allreduce of padded blocks)
 *    every plugin agrees with MPI within 1e-6;
 *  - a callback failing mid-training fails the call with ZERO_ERR_COMM and
 *    the engine's last error names the callback and its status, on every rank;
 *  - a NULL comm, a short struct, a missing callback, a bad rank, a newer
 *    header's struct with a field set (1.7.7) are refused by
 *    zero_engine_create with a message saying which;
 *  - (1.7.4) comm_timeout in the config, which cannot bound a host's
 *    callback, is warned about on rank 0 (not without it).
 * Usage: test_host_comm [steps] */
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "../common/host_comm_mpi.h"
#include "../common/host_util.h"
#include "../common/mpi_check.h"
#include "mlp_host.h"
#include "run_compare.h"

static int rank_ = 0, world_ = 1;
static hcm H;

static int ran(const host_run_out *o, const char *label) {
    CHECK(o->status == ZERO_OK, "%s failed: %s", label, o->error);
    return o->status == ZERO_OK;
}

static host_run_cfg cfg_for(const char *plugin, int steps, int gas) {
    host_run_cfg c = host_default_cfg();
    c.steps = steps;
    c.gas = gas;
    c.plugin = plugin;
    if (strcmp(plugin, "offload") == 0) {
        c.stage = 2;
        c.offload = 1;
    }
    return c;
}

static void run_on(const zero_host_comm *hc, const host_run_cfg *c, host_run_out *o) {
    th_set_host_comm(hc);
    host_run(c, o);
    th_set_host_comm(NULL);
}

/* make the next callback fail, on every rank, after `at` micro-steps */
static void fail_soon(void *user, uint64_t micro_steps) {
    if (micro_steps == 3) ((hcm *)user)->fail_after = 1;
}

static void refused(zero_comm_kind kind, void *comm, zero_status want, const char *needle, const char *what) {
    zero_engine_options o = ZERO_ENGINE_OPTIONS_INIT;
    o.config_json = "{\"train_micro_batch_size_per_gpu\": 1}";
    o.plugin = "stage0";
    o.comm_kind = kind;
    o.comm = comm;
    zero_engine *e = NULL;
    char msg[600] = "";
    zero_status s = zero_engine_create(&o, &e, msg, sizeof msg);
    CHECK(s == want && e == NULL && strstr(msg, needle), "%s: got %s '%s', expected %s with '%s'", what,
          zero_status_string(s), msg, zero_status_string(want), needle);
    if (rank_ == 0) printf("N=%d  refused: %-28s %s\n", world_, what, msg);
    zero_engine_destroy(e);
}

typedef struct warned {
    int timeout_lines;
    char text[600];
} warned;

static void note_warn(void *user, zero_log_level lvl, int rank, const char *msg) {
    (void)rank;
    warned *w = user;
    if (lvl == ZERO_LOG_WARN && strstr(msg, "does not apply to a ZERO_COMM_HOST communicator")) {
        w->timeout_lines++;
        snprintf(w->text, sizeof w->text, "%s", msg);
    }
}

/* (1.7.4) comm_timeout with a host communicator: rank 0 says it cannot hold. */
static void timeout_warned(const zero_host_comm *hc) {
    const char *cfgs[2] = {"{\"train_micro_batch_size_per_gpu\": 1}",
                           "{\"train_micro_batch_size_per_gpu\": 1, \"comm_timeout\": 7}"};
    for (int with = 0; with < 2; with++) {
        warned w = {0, ""};
        zero_engine_options o = ZERO_ENGINE_OPTIONS_INIT;
        o.config_json = cfgs[with];
        o.plugin = "stage0";
        o.comm_kind = ZERO_COMM_HOST;
        o.comm = (void *)hc;
        o.log_fn = note_warn;
        o.log_user = &w;
        zero_engine *e = NULL;
        char msg[600] = "";
        CHECK(zero_engine_create(&o, &e, msg, sizeof msg) == ZERO_OK, "host comm engine: %s", msg);
        const int want = with && rank_ == 0;
        CHECK(w.timeout_lines == want, "comm_timeout %s: %d warning(s) on rank %d, want %d", with ? "7" : "unset",
              w.timeout_lines, rank_, want);
        if (want) {
            CHECK_STR_CONTAINS(w.text, "config comm_timeout = 7 s");
            CHECK_STR_CONTAINS(w.text, "timeout=datetime.timedelta(seconds=7)");
            printf("N=%d  warned: %s\n", world_, w.text);
        }
        zero_engine_destroy(e);
    }
}

int main(int argc, char **argv) {
    check_mpi_init(&argc, &argv, &rank_, &world_);
    const int steps = argc > 1 ? atoi(argv[1]) : 20;
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    hcm_make(&H, dup, HCM_ALLTOALL | HCM_SPLIT);
    hcm plain, async;
    hcm_make(&plain, dup, 0); /* the required callbacks only */
    hcm_make(&async, dup, HCM_ALLTOALL | HCM_ASYNC | HCM_SPLIT);
    timeout_warned(&H.hc);
    char label[160];

    const char *plugins[] = {"stage0", "stage1", "stage2", "stage3", "offload"};
    enum { NP = sizeof plugins / sizeof plugins[0] };
    const int gases[2] = {4, 1};
    for (int gi = 0; gi < 2; gi++) {
        const int gas = gases[gi];
        host_run_out mpi[NP], host[NP];
        memset(mpi, 0, sizeof mpi);
        memset(host, 0, sizeof host);
        for (int p = 0; p < NP; p++) {
            host_run_cfg c = cfg_for(plugins[p], steps, gas);
            host_run(&c, &mpi[p]);
            snprintf(label, sizeof label, "%s gas=%d over MPI", plugins[p], gas);
            ran(&mpi[p], label);
            run_on(&H.hc, &c, &host[p]);
            snprintf(label, sizeof label, "%s gas=%d host comm (alltoall)", plugins[p], gas);
            if (ran(&host[p], label)) {
                snprintf(label, sizeof label, "%s gas=%d host comm == MPI backend", plugins[p], gas);
                host_expect_bitwise(&host[p], &mpi[p], label, 52);
            }
            if (p > 0) {
                /* bitwise like stage 0 wherever the MPI backend is, else within 1e-6 */
                const int mpi_same = mpi[p].params && mpi[0].params &&
                                     memcmp(mpi[p].params, mpi[0].params, mpi[0].numel * sizeof(float)) == 0;
                snprintf(label, sizeof label, "%s gas=%d host comm == stage0 host comm%s", plugins[p], gas,
                         mpi_same ? "" : " (MPI: not bitwise)");
                if (mpi_same || gas == 4)
                    host_expect_bitwise(&host[p], &host[0], label, 52);
                else
                    host_expect_close(&host[p], &host[0], label, 1e-6, 52);
            }
            /* the started alltoall: the same bits, every exchange finished */
            {
                host_run_out o;
                const long started0 = async.started;
                run_on(&async.hc, &c, &o);
                snprintf(label, sizeof label, "%s gas=%d host comm (started alltoall) == blocking alltoall", plugins[p],
                         gas);
                if (ran(&o, label)) host_expect_bitwise(&o, &host[p], label, 52);
                CHECK(async.open == 0, "%s gas=%d: %ld started exchanges never finished", plugins[p], gas, async.open);
                CHECK(world_ == 1 || strcmp(plugins[p], "stage3") == 0 || async.started > started0,
                      "%s gas=%d: no exchange was started (%ld)", plugins[p], gas, async.started - started0);
                host_run_free(&o);
            }
            /* the required callbacks only: the host's sums */
            host_run_out o;
            run_on(&plain.hc, &c, &o);
            snprintf(label, sizeof label, "%s gas=%d host comm (no alltoall) vs MPI", plugins[p], gas);
            if (ran(&o, label)) host_expect_close(&o, &mpi[p], label, 1e-6, 52);
            host_run_free(&o);
        }
        /* the comm stats count the host backend's traffic like MPI's */
        CHECK(world_ == 1 || (host[2].comm.reduce_scatter_calls > 0 && host[2].comm.bytes_reduced > 0),
              "stage2 on the host comm: %llu reduce-scatters, %llu bytes",
              (unsigned long long)host[2].comm.reduce_scatter_calls, (unsigned long long)host[2].comm.bytes_reduced);
        for (int p = 0; p < NP; p++) {
            host_run_free(&mpi[p]);
            host_run_free(&host[p]);
        }
    }

    /* hooks in a rank-dependent order from two threads: the callbacks are
     * still made one at a time, in libzero's issue order (bitwise the same) */
    {
        host_run_cfg c = cfg_for("stage2", steps, 4), t = c;
        t.order = HOST_ORDER_SHUFFLED;
        t.threads = 2;
        host_run_out a, b;
        run_on(&H.hc, &c, &a);
        run_on(&H.hc, &t, &b);
        if (ran(&a, "stage2 host comm") && ran(&b, "stage2 host comm, 2 hook threads"))
            host_expect_bitwise(&b, &a, "stage2 host comm: shuffled hooks from 2 threads", 52);
        host_run_free(&a);
        host_run_free(&b);
    }

    /* the same with the started alltoall and hooks from two threads */
    {
        host_run_cfg c = cfg_for("stage2", steps, 4), t = c;
        t.order = HOST_ORDER_SHUFFLED;
        t.threads = 2;
        host_run_out a, b;
        run_on(&async.hc, &c, &a);
        run_on(&async.hc, &t, &b);
        if (ran(&a, "stage2 started alltoall") && ran(&b, "stage2 started alltoall, 2 hook threads"))
            host_expect_bitwise(&b, &a, "stage2 started alltoall: shuffled hooks from 2 threads", 52);
        CHECK(async.open == 0, "2 hook threads: %ld started exchanges never finished", async.open);
        if (rank_ == 0)
            printf("N=%d  started alltoall: %ld exchanges, %ld found done by a test before their wait\n", world_,
                   async.started, async.tested_done);
        host_run_free(&a);
        host_run_free(&b);
    }

    /* a callback fails mid-training: ZERO_ERR_COMM with the callback's name,
     * every rank (one rank: libzero calls no callback at all) */
    if (world_ > 1) {
        host_run_cfg c = cfg_for("stage2", 8, 1);
        c.on_step = fail_soon;
        c.on_step_user = &H;
        host_run_out o;
        run_on(&H.hc, &c, &o);
        CHECK(o.status == ZERO_ERR_COMM && strstr(o.error, "ZERO_ERR_COMM") &&
                  strstr(o.error, "callback returned ZERO_ERR_IO") && strstr(o.error, "test MPI callbacks"),
              "failing callback: got %s: %s", zero_status_string(o.status), o.error);
        if (rank_ == 0) printf("N=%d  failing callback -> %s\n", world_, o.error);
        H.fail_after = 0;
        host_run_free(&o);
    }

    /* what zero_engine_create refuses */
    refused(ZERO_COMM_HOST, NULL, ZERO_ERR_INVALID_ARGUMENT, "ZERO_COMM_HOST: needs comm = &your_zero_host_comm",
            "NULL comm");
    zero_host_comm bad = H.hc;
    bad.struct_size = 16;
    refused(ZERO_COMM_HOST, &bad, ZERO_ERR_INVALID_ARGUMENT, "struct_size is 16", "short struct");
    bad = H.hc;
    bad.barrier = NULL;
    refused(ZERO_COMM_HOST, &bad, ZERO_ERR_INVALID_ARGUMENT, "zero_host_comm.barrier is NULL", "missing barrier");
    bad = async.hc;
    bad.alltoall_finish = NULL;
    refused(ZERO_COMM_HOST, &bad, ZERO_ERR_INVALID_ARGUMENT, "alltoall_start and alltoall_finish come together",
            "start without finish");
    bad = H.hc;
    bad.rank = bad.size;
    refused(ZERO_COMM_HOST, &bad, ZERO_ERR_INVALID_ARGUMENT, "need 0 <= rank < size", "rank out of range");
    /* (1.7.7) a struct from a newer header: refused when a field this
     * libzero does not know is set, taken when it is left zero */
    struct { zero_host_comm hc; uint64_t added; } newer = {H.hc, 1};
    newer.hc.struct_size = sizeof newer;
    refused(ZERO_COMM_HOST, &newer.hc, ZERO_ERR_INVALID_ARGUMENT, "newer libzero header", "newer struct, field set");
    newer.added = 0;
    {
        zero_engine_options o = ZERO_ENGINE_OPTIONS_INIT;
        o.config_json = "{\"train_micro_batch_size_per_gpu\": 1}";
        o.plugin = "stage0";
        o.comm_kind = ZERO_COMM_HOST;
        o.comm = &newer.hc;
        zero_engine *e = NULL;
        char msg[600] = "";
        CHECK(zero_engine_create(&o, &e, msg, sizeof msg) == ZERO_OK, "newer struct, new field zero: %s", msg);
        zero_engine_destroy(e);
    }

    MPI_Comm_free(&dup);
    return check_mpi_finish();
}
