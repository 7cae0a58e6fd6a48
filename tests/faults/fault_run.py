#!/usr/bin/env python3
"""Driver of the fault catalogue's job-level rows (tests/faults/README.md).

Starts tests/faults/fault_host under mpirun, disturbs it (SIGSTOP or kill -9
of one rank, a rank that pauses inside a save, a NaN gradient, a full file
system) and judges every surviving rank from the files fault_host writes
(result.R: one "fail status=... t=... wall=... cpu=..." line per failure).
Prints one line per rank and a summary line

    CASE <name>: <status> on <k> surviving ranks, detected in <min>..<max> s

that README.md's table quotes.  Exit status 0 = the row holds, 1 = it does
not, 77 = skipped (printed with the reason).

usage: fault_run.py --host BUILD/tests/faults/fault_host --mpirun mpirun --case NAME
"""
import argparse
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time

TIMEOUT_S = 3.0  # ZERO_COMM_TIMEOUT in these tests: detection must take about this long


def parse_results(out, np):
    res = {}
    for r in range(np):
        path = os.path.join(out, "result.%d" % r)
        lines = open(path).read().splitlines() if os.path.exists(path) else []
        ev = []
        for ln in lines:
            kind, _, rest = ln.partition(" ")
            fields = {}
            if kind == "fail":
                head, _, msg = rest.partition(" msg=")
                for kv in head.split(" "):
                    k, _, v = kv.partition("=")
                    fields[k] = v
                fields["msg"] = msg
            else:
                for kv in rest.split(" "):
                    k, _, v = kv.partition("=")
                    fields[k] = v
            ev.append((kind, fields))
        res[r] = ev
    return res


def first(ev, kind):
    for k, f in ev:
        if k == kind:
            return f
    return None


def read_int(path):
    """The number a writer put in `path` followed by a newline; -1 while the
    file is absent or only partly written (a partial pid would signal a
    stranger)."""
    try:
        txt = open(path).read()
        return int(txt) if txt.endswith("\n") else -1
    except (OSError, ValueError):
        return -1


def ours(pid):
    """Is pid one of fault_host's processes?  Checked before every signal."""
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return b"fault_host" in f.read()
    except OSError:
        return False


def signal_rank(pid, sig):
    if pid <= 0 or not ours(pid):
        return False
    os.kill(pid, sig)
    return True


def running(pid):
    """Is pid a live process (not a zombie waiting to be reaped)?"""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


class Job:
    def __init__(self, a, np, host_args, env=None, mpirun_extra=(), preexec=None):
        self.np = np
        self.out = tempfile.mkdtemp(prefix="zero-fault-")
        e = dict(os.environ)
        e.update(env or {})
        passenv = []
        for k in sorted(e):
            if k.startswith("ZERO_"):
                passenv += ["-x", k]
        cmd = [a.mpirun, "--allow-run-as-root", "--oversubscribe", "--mca", "btl", "self,vader"] + list(mpirun_extra)
        cmd += passenv + ["-np", str(np), a.host, "--out", self.out] + list(host_args)
        self.log = open(os.path.join(self.out, "mpirun.log"), "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=e,
                                     start_new_session=True, preexec_fn=preexec)

    def pid(self, r):
        return read_int(os.path.join(self.out, "pid.%d" % r))

    def wait_steps(self, k, limit=60):
        t0 = time.time()
        while time.time() - t0 < limit:
            if all(read_int(os.path.join(self.out, "step.%d" % r)) >= k for r in range(self.np)):
                return True
            if self.proc.poll() is not None:
                return False
            time.sleep(0.05)
        return False

    def wait_reports(self, ranks, what, limit):
        t0 = time.time()
        while time.time() - t0 < limit:
            res = parse_results(self.out, self.np)
            if all(first(res[r], what) is not None for r in ranks):
                return res
            if self.proc.poll() is not None:
                time.sleep(0.2)
                return parse_results(self.out, self.np)
            time.sleep(0.05)
        return parse_results(self.out, self.np)

    def end(self):
        """Kill whatever is left of the job (stopped ranks included)."""
        for r in range(self.np):
            try:
                signal_rank(self.pid(r), signal.SIGKILL)
            except OSError:
                pass
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            pass
        self.log.close()

    def tail(self):
        try:
            return open(os.path.join(self.out, "mpirun.log")).read()[-3000:]
        except OSError:
            return ""

    def cleanup(self):
        shutil.rmtree(self.out, ignore_errors=True)


def verdict(name, ok, lines):
    for ln in lines:
        print(ln)
    print(("PASS " if ok else "FAIL ") + name)
    return 0 if ok else 1


def check_timeouts(name, job, res, survivors, t_event, lo, hi, extra=()):
    """Every survivor reports ZERO_ERR_TIMEOUT (or one of `extra`) between lo
    and hi seconds after t_event, with a bounded, cheap wait and a quick
    destroy."""
    ok, lines, det = True, [], []
    allowed = ("ZERO_ERR_TIMEOUT",) + tuple(extra)
    for r in survivors:
        f = first(res[r], "fail")
        d = first(res[r], "destroyed")
        if f is None:
            ok = False
            lines.append("rank %d: no failure reported (still waiting?)" % r)
            continue
        st = f["status"].split(":")[0]
        dt = float(f["t"]) - t_event
        det.append(dt)
        cpu, wall = float(f["cpu"]), float(f["wall"])
        good = st in allowed and lo <= dt <= hi and d is not None and float(d["wall"]) < 5.0
        # waiting costs no core (issue 18): well under half a core while stalled
        if wall > 1.0 and cpu > 0.3 * wall:
            good = False
            lines.append("rank %d: the wait used %.2f s CPU in %.2f s" % (r, cpu, wall))
        ok &= good
        lines.append("rank %d: %s in %s after %.2f s (cpu %.3f s of %.2f s waiting), destroy %s s: %s" %
                     (r, st, f["call"], dt, cpu, wall, d["wall"] if d else "never", f["msg"][:300]))
    if det:
        lines.append("CASE %s: %s on %d surviving ranks, detected in %.2f..%.2f s" %
                     (name, "/".join(allowed), len(survivors), min(det), max(det)))
    return ok, lines


def case_stop(a, name, plugin, np, stop_rank, use_config):
    args = ["--plugin", plugin, "--steps", "1000000", "--linger", "30"]
    env = {}
    if use_config:
        args += ["--timeout-config", str(TIMEOUT_S)]  # the config key comm_timeout
    else:
        env["ZERO_COMM_TIMEOUT"] = str(TIMEOUT_S)
    job = Job(a, np, args, env)
    try:
        if not job.wait_steps(5):
            return verdict(name, False, ["the job did not start training", job.tail()])
        if not signal_rank(job.pid(stop_rank), signal.SIGSTOP):
            return verdict(name, False, ["rank %d's pid is not a fault_host process" % stop_rank])
        t_stop = time.time()
        surv = [r for r in range(np) if r != stop_rank]
        res = job.wait_reports(surv, "destroyed", 4 * TIMEOUT_S + 10)
        ok, lines = check_timeouts(name, job, res, surv, t_stop, 0.5 * TIMEOUT_S, 2 * TIMEOUT_S + 3)
        return verdict(name, ok, lines)
    finally:
        job.end()
        job.cleanup()


def case_stop_save(a, name):
    """A rank stops inside a save (before the manifest): the others wait in the
    checkpoint agreement and time out."""
    np, bad = 3, 1
    ck = tempfile.mkdtemp(prefix="zero-fault-ck-")
    marker = os.path.join(ck, "marker")
    env = {"ZERO_COMM_TIMEOUT": str(TIMEOUT_S), "ZERO_CKPT_FAULT": "pause:before_manifest@%d" % bad,
           "ZERO_CKPT_FAULT_MARKER": marker}
    job = Job(a, np, ["--plugin", "stage2", "--steps", "4", "--save-dir", os.path.join(ck, "root"), "--save-every",
                      "2", "--linger", "30"], env)
    try:
        t0 = time.time()
        while time.time() - t0 < 60 and read_int(marker) <= 0 and job.proc.poll() is None:
            time.sleep(0.05)
        if read_int(marker) <= 0:
            return verdict(name, False, ["the save never reached before_manifest", job.tail()])
        if not signal_rank(read_int(marker), signal.SIGSTOP):
            return verdict(name, False, ["the marker's pid is not a fault_host process"])
        t_stop = time.time()
        surv = [r for r in range(np) if r != bad]
        res = job.wait_reports(surv, "destroyed", 4 * TIMEOUT_S + 10)
        # the survivors may have been waiting since the stopped rank reached
        # its pause point (a little before the SIGSTOP): lower bound 0
        ok, lines = check_timeouts(name, job, res, surv, t_stop, 0.0, 2 * TIMEOUT_S + 3)
        for r in surv:
            f = first(res[r], "fail")
            if f and f["call"] != "zero_save":
                ok = False
                lines.append("rank %d failed in %s, not zero_save" % (r, f["call"]))
        return verdict(name, ok, lines)
    finally:
        job.end()
        job.cleanup()
        shutil.rmtree(ck, ignore_errors=True)


def case_kill(a, name, recovery, in_save):
    """kill -9 of one rank.  Without recovery Open MPI's runtime tears the job
    down (no libzero status can be returned: the survivors are killed); with
    `mpirun --enable-recovery` the job lives on and every survivor gets
    ZERO_ERR_TIMEOUT from libzero."""
    np, bad = 4, 2
    ck = tempfile.mkdtemp(prefix="zero-fault-ck-")
    marker = os.path.join(ck, "marker")
    env = {"ZERO_COMM_TIMEOUT": str(TIMEOUT_S)}
    args = ["--plugin", "stage2", "--linger", "30"]
    if in_save:
        env.update({"ZERO_CKPT_FAULT": "pause:between_shards@%d" % bad, "ZERO_CKPT_FAULT_MARKER": marker})
        args += ["--steps", "4", "--save-dir", os.path.join(ck, "root"), "--save-every", "2"]
    else:
        args += ["--steps", "1000000"]
    extra = ["--enable-recovery"] if recovery else []
    job = Job(a, np, args, env, mpirun_extra=extra)
    try:
        if in_save:
            t0 = time.time()
            while time.time() - t0 < 60 and read_int(marker) <= 0 and job.proc.poll() is None:
                time.sleep(0.05)
            victim = read_int(marker)
        else:
            victim = job.pid(bad) if job.wait_steps(5) else -1
        if victim <= 0:
            return verdict(name, False, ["the job never reached the kill point", job.tail()])
        if not signal_rank(victim, signal.SIGKILL):
            return verdict(name, False, ["the victim's pid is not a fault_host process"])
        t_kill = time.time()
        surv = [r for r in range(np) if r != bad]
        if recovery:
            res = job.wait_reports(surv, "destroyed", 4 * TIMEOUT_S + 10)
            ok, lines = check_timeouts(name, job, res, surv, t_kill, 0.0, 2 * TIMEOUT_S + 3, extra=("ZERO_ERR_COMM",))
            return verdict(name, ok, lines)
        # default: the runtime ends the job; measure how fast, and that no
        # survivor is left running
        try:
            rc = job.proc.wait(4 * TIMEOUT_S + 20)
        except subprocess.TimeoutExpired:
            rc = None
        t_end = time.time() - t_kill
        alive = [r for r in surv if running(job.pid(r))]
        t1 = time.time()
        while alive and time.time() - t1 < 5:  # the runtime's kills may still be landing
            time.sleep(0.05)
            alive = [r for r in surv if running(job.pid(r))]
        res = parse_results(job.out, np)
        reported = [r for r in surv if first(res[r], "fail")]
        lines = ["mpirun exit status %s %.2f s after the kill; survivors still alive: %s; survivors that reported "
                 "a libzero status first: %s" % (rc, t_end, alive or "none", reported or "none")]
        for r in reported:
            f = first(res[r], "fail")
            lines.append("rank %d: %s after %.2f s" % (r, f["status"].split(":")[0], float(f["t"]) - t_kill))
        ok = rc is not None and rc != 0 and not alive and t_end < 2 * TIMEOUT_S + 10
        # a survivor that got in first must have named a timeout or comm error
        ok &= all(first(res[r], "fail")["status"].split(":")[0] in ("ZERO_ERR_TIMEOUT", "ZERO_ERR_COMM")
                  for r in reported)
        lines.append("CASE %s: Open MPI job teardown (mpirun exit %s) in %.2f s%s" %
                     (name, rc, t_end, "" if not reported else ", %d survivor(s) reported a status first" %
                      len(reported)))
        return verdict(name, ok, lines)
    finally:
        job.end()
        job.cleanup()
        shutil.rmtree(ck, ignore_errors=True)


def case_nan(a, name, dtype, kind):
    """A NaN or Inf in one rank's gradient: the non-finite check is agreed in
    the same all-reduce as the global norm, so EVERY rank reports an
    overflow and skips the step (zero_step returns ZERO_OK with
    result.overflow = 1, taken = 0, grad_norm = -1), for fp32 and bf16 too;
    the next clean step is taken again.  fp16: the loss scaler counts it (hysteresis 2:
    the scale halves on the second overflow in a row, DeepSpeed's rule)."""
    np = 3
    job = Job(a, np, ["--plugin", "stage2", "--steps", "3", "--dtype", dtype, "--nan-rank", "1", "--nan-step", "1",
                      "--nan-kind", kind, "--print-steps", "--linger", "0"])
    try:
        try:
            job.proc.wait(60)
        except subprocess.TimeoutExpired:
            return verdict(name, False, ["the job did not finish", job.tail()])
        res = parse_results(job.out, np)
        ok, lines = job.proc.returncode == 0, []
        for r in range(np):
            steps = {int(f["k"]): f for k, f in res[r] if k == "step"}
            if sorted(steps) != [0, 1, 2]:
                ok = False
                lines.append("rank %d: steps %s (%s)" % (r, sorted(steps), first(res[r], "fail")))
                continue
            s0, s1, s2 = steps[0], steps[1], steps[2]
            good = (s0["taken"], s0["overflow"]) == ("1", "0") and (s1["taken"], s1["overflow"]) == ("0", "1") and \
                float(s1["norm"]) == -1.0 and (s2["taken"], s2["overflow"]) == ("1", "0")
            ok &= good
            lines.append("rank %d: step 1 overflow=%s taken=%s grad_norm=%s loss scale %s; step 2 taken=%s" %
                         (r, s1["overflow"], s1["taken"], s1["norm"], s1["scale"], s2["taken"]))
        lines.append("CASE %s: ZERO_OK, result.overflow=1 taken=0 on all %d ranks (the step is skipped), detected in "
                     "the same step" % (name, np))
        return verdict(name, ok, lines)
    finally:
        job.end()
        job.cleanup()


def case_full_fs(a, name):
    """A save onto a file system that fills up: every rank gets ZERO_ERR_IO
    naming ENOSPC, quickly.  A small tmpfs where mounting is allowed (root),
    else RLIMIT_FSIZE (EFBIG, the same path through libzero's writer)."""
    np = 3
    mnt = tempfile.mkdtemp(prefix="zero-fault-fs-")
    mounted = False
    preexec = None
    how = ""
    if os.geteuid() == 0 and shutil.which("mount"):
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=96k", "tmpfs", mnt],
                                 stderr=subprocess.DEVNULL).returncode == 0
    if mounted:
        how = "96 KiB tmpfs"
    else:
        def preexec():
            resource.setrlimit(resource.RLIMIT_FSIZE, (48 * 1024, 48 * 1024))
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        how = "RLIMIT_FSIZE 48 KiB (mount not permitted)"
    # The ranks linger after their report and the driver ends the job once
    # all three have reported: with --linger 0 a rank that reported first
    # exited non-zero and mpirun killed a rank still between the agreement
    # and its report (CI, once: "rank 0: the save succeeded?" while it was
    # only killed before writing its line).
    job = Job(a, np, ["--plugin", "stage2", "--steps", "2", "--save-dir", os.path.join(mnt, "root"),
                      "--save-every", "2", "--linger", "30", "--numel", "60000"], preexec=preexec)
    t0 = time.time()
    try:
        res = job.wait_reports(range(np), "fail", 60)
        ok, lines, det = True, ["file system: %s" % how], []
        for r in range(np):
            f = first(res[r], "fail")
            if f is None:
                ok = False
                done = first(res[r], "done")
                lines.append("rank %d: %s" % (r, "the save succeeded" if done else
                                              "no report (job %s)" % ("ended" if job.proc.poll() is not None
                                                                      else "still running after 60 s")))
                continue
            st = f["status"].split(":")[0]
            good = st == "ZERO_ERR_IO" and f["call"] == "zero_save" and \
                ("No space left" in f["msg"] or "too large" in f["msg"])
            ok &= good
            det.append(float(f["wall"]))
            lines.append("rank %d: %s in %s after %.2f s: %s" % (r, st, f["call"], float(f["wall"]), f["msg"][:240]))
        if det:
            lines.append("CASE %s: ZERO_ERR_IO on %d ranks (%s), detected in %.2f..%.2f s" %
                         (name, np, how, min(det), max(det)))
        lines.append("(every rank reported in %.1f s)" % (time.time() - t0))
        if not ok:
            lines.append(job.tail())
        return verdict(name, ok, lines)
    finally:
        job.end()
        job.cleanup()
        if mounted:
            subprocess.run(["umount", mnt])
        shutil.rmtree(mnt, ignore_errors=True)


def case_late_create(a, name):
    """(1.7.5) A rank reaches zero_engine_create long after the others (stuck
    in its own start-up): the others fail with ZERO_ERR_TIMEOUT after the
    comm timeout instead of waiting in MPI_Comm_dup for ever."""
    np, late = 3, 2
    env = {"ZERO_COMM_TIMEOUT": str(TIMEOUT_S)}
    t0 = time.time()
    job = Job(a, np, ["--plugin", "stage2", "--steps", "3", "--slow-rank", str(late), "--slow-step", "-1",
                      "--slow-s", "60", "--linger", "30"], env)
    try:
        surv = [r for r in range(np) if r != late]
        res = job.wait_reports(surv, "destroyed", 4 * TIMEOUT_S + 20)
        # t_event: the job's start (MPI_Init and the host's set-up take a
        # moment before the survivors enter zero_engine_create)
        ok, lines = check_timeouts(name, job, res, surv, t0, TIMEOUT_S, 2 * TIMEOUT_S + 10)
        for r in surv:
            f = first(res[r], "fail")
            if f and (f["call"] != "zero_engine_create" or "has not called zero_engine_create" not in f["msg"]):
                ok = False
                lines.append("rank %d failed in %s: %s" % (r, f["call"], f["msg"][:200]))
        return verdict(name, ok, lines)
    finally:
        job.end()
        job.cleanup()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", required=True)
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--case", required=True)
    a = ap.parse_args()
    c = a.case
    if c == "stop_stage0":
        return case_stop(a, c, "stage0", 4, 3, use_config=True)
    if c == "stop_stage2":
        return case_stop(a, c, "stage2", 5, 2, use_config=False)
    if c == "stop_stage3":
        return case_stop(a, c, "stage3", 3, 1, use_config=False)
    if c == "stop_save":
        return case_stop_save(a, c)
    if c == "kill_step":
        return case_kill(a, c, recovery=False, in_save=False)
    if c == "kill_step_recovery":
        return case_kill(a, c, recovery=True, in_save=False)
    if c == "kill_save":
        return case_kill(a, c, recovery=False, in_save=True)
    if c.startswith("nan_") or c.startswith("inf_"):
        kind, dtype = c.split("_")
        return case_nan(a, c, dtype, kind)
    if c == "full_fs":
        return case_full_fs(a, c)
    if c == "late_create":
        return case_late_create(a, c)
    print("unknown case", c)
    return 2


if __name__ == "__main__":
    sys.exit(main())
