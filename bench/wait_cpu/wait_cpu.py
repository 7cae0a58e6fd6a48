#!/usr/bin/env python3
"""bench/wait_cpu: what waiting for a slow peer costs in CPU, and what the
wait policy costs in step time -- this build against a baseline build, in
one run, interleaved (issue 18: "waiting costs no core").

Per repetition and per library (baseline, current; alternating):
  slow  tests/faults/fault_host on N ranks; rank 0 sleeps --slow-s seconds
        before step 6, so every other rank waits that long inside the step.
        Reported per waiting rank: CPU seconds (getrusage, user + system,
        all threads) / wall seconds of that step.
  step  the same host without a slow rank, --steps steps of a larger model;
        the median step wall time (mean over ranks).
  overlap (with --overlap) bench/overlap's "backward+zero_step" with
        overlap_comm on, per plugin.
  demo  (with --demo) the demo (examples/demo/zero-demo, 4 ranks,
        --demo-steps steps of stage2 and stage3) under /usr/bin/time: wall
        time of the whole run and CPU seconds per rank.
Ratios current / baseline are formed per repetition and their median is
printed, with the medians of the raw figures.

The baseline is a directory holding another build's libzero.so.1 and
libzero-plugin-*.so (e.g. of main: cp build/core/libzero.so* build/plugins/*.so
DIR); it is loaded through LD_LIBRARY_PATH and ZERO_PLUGIN_PATH.

usage: wait_cpu.py --build BUILD --baseline DIR [--np 4] [--reps 5]
       [--plugins stage0,stage2,stage3] [--slow-s 1.5] [--overlap]
"""
import argparse
import os
import re
import statistics
import subprocess
import tempfile

MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--mca", "btl", "self,vader"]


def env_for(libdir, plugdir):
    e = dict(os.environ)
    e["LD_LIBRARY_PATH"] = libdir + (":" + e["LD_LIBRARY_PATH"] if e.get("LD_LIBRARY_PATH") else "")
    e["ZERO_PLUGIN_PATH"] = plugdir
    return e


def results(out, np):
    rows = {}
    for r in range(np):
        p = os.path.join(out, "result.%d" % r)
        rows[r] = open(p).read().splitlines() if os.path.exists(p) else []
    return rows


def field(line, key):
    m = re.search(r"\b%s=([^ ]+)" % key, line)
    return float(m.group(1)) if m else None


def run_host(a, env, args):
    out = tempfile.mkdtemp(prefix="zero-waitcpu-")
    cmd = MPIRUN + ["-x", "LD_LIBRARY_PATH", "-x", "ZERO_PLUGIN_PATH", "-np", str(a.np), a.host, "--out", out,
                    "--linger", "0"] + args
    subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600, check=True)
    rows = results(out, a.np)
    subprocess.run(["rm", "-rf", out])
    return rows


def slow_case(a, env, plugin):
    rows = run_host(a, env, ["--plugin", plugin, "--steps", "10", "--slow-rank", "0", "--slow-step", "6",
                             "--slow-s", str(a.slow_s)])
    fr = []
    for r in range(1, a.np):
        for ln in rows[r]:
            if ln.startswith("slow "):
                fr.append(field(ln, "cpu") / field(ln, "wall"))
    return statistics.mean(fr)


def step_case(a, env, plugin):
    rows = run_host(a, env, ["--plugin", plugin, "--steps", str(a.steps), "--numel", str(a.numel)])
    w = [field(ln, "step_wall") for r in rows for ln in rows[r] if ln.startswith("done ")]
    return statistics.mean(w)


def overlap_case(a, env):
    exe = os.path.join(a.build, "bench", "overlap", "bench_overlap")
    cmd = MPIRUN + ["-x", "LD_LIBRARY_PATH", "-x", "ZERO_PLUGIN_PATH", "-np", "2", exe, "--reps", "3"]
    txt = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600).stdout
    got = {}
    for m in re.finditer(r"(stage\d) overlap_comm=true\s+backward\s+[\d.]+ ms\s+backward\+zero_step\s+([\d.]+) ms", txt):
        got[m.group(1)] = float(m.group(2))
    return got


def demo_case(a, env, plugin):
    exe = os.path.join(a.build, "examples", "demo", "zero-demo")
    cfg = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "configs", plugin + ".json")
    cmd = MPIRUN + ["-x", "LD_LIBRARY_PATH", "-x", "ZERO_PLUGIN_PATH", "-np", "4", "/usr/bin/time", "-f",
                    "TIME %U %S %e", exe, "--config", cfg, "--steps", str(a.demo_steps), "--quiet"]
    txt = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900).stderr
    rows = [tuple(map(float, m.groups())) for m in re.finditer(r"TIME ([\d.]+) ([\d.]+) ([\d.]+)", txt)]
    wall = max(r[2] for r in rows)
    cpu = statistics.mean(r[0] + r[1] for r in rows)
    return wall, cpu


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--baseline", required=True)
    ap.add_argument("--np", type=int, default=4)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--plugins", default="stage0,stage2,stage3")
    ap.add_argument("--slow-s", type=float, default=1.5)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--numel", type=int, default=400000)
    ap.add_argument("--overlap", action="store_true")
    ap.add_argument("--demo", action="store_true")
    ap.add_argument("--demo-steps", type=int, default=300)
    a = ap.parse_args()
    a.host = os.path.join(a.build, "tests", "faults", "fault_host")
    libs = {"baseline": env_for(a.baseline, a.baseline),
            "current": env_for(os.path.join(a.build, "core"), os.path.join(a.build, "plugins"))}
    plugins = a.plugins.split(",")
    fig = {(k, p, lib): [] for k in ("slow", "step") for p in plugins for lib in libs}
    ov = {}
    for rep in range(a.reps):
        order = ["baseline", "current"] if rep % 2 == 0 else ["current", "baseline"]
        for p in plugins:
            for lib in order:
                fig[("slow", p, lib)].append(slow_case(a, libs[lib], p))
                fig[("step", p, lib)].append(step_case(a, libs[lib], p))
        if a.demo:
            for p in ("stage2", "stage3"):
                for lib in order:
                    ov.setdefault(("demo", p, lib), []).append(demo_case(a, libs[lib], p))
        if a.overlap:
            for lib in order:
                for p, v in overlap_case(a, libs[lib]).items():
                    ov.setdefault((p, lib), []).append(v)
    load = os.getloadavg()[0]
    print("N=%d, %d repetitions, slow rank sleeps %.1f s; load average %.1f on %d cores" %
          (a.np, a.reps, a.slow_s, load, os.cpu_count()))
    print("%-7s %-34s %-34s %s" % ("plugin", "CPU/wall of a waiting rank", "step time (ms)", "ratios current/baseline"))
    for p in plugins:
        sb, sc = fig[("slow", p, "baseline")], fig[("slow", p, "current")]
        tb, tc = fig[("step", p, "baseline")], fig[("step", p, "current")]
        rs = statistics.median(c / b for b, c in zip(sb, sc))
        rt = statistics.median(c / b for b, c in zip(tb, tc))
        print("%-7s baseline %.3f current %.3f          baseline %7.3f current %7.3f   cpu %.3f  step %.3f" %
              (p, statistics.median(sb), statistics.median(sc), 1e3 * statistics.median(tb),
               1e3 * statistics.median(tc), rs, rt))
    for p in ("stage2", "stage3"):
        b, c = ov.get(("demo", p, "baseline"), []), ov.get(("demo", p, "current"), [])
        if b and c:
            print("demo N=4 %s %d steps: wall baseline %.2f s current %.2f s, ratio %.3f; CPU s per rank baseline "
                  "%.2f current %.2f, ratio %.3f" %
                  (p, a.demo_steps, statistics.median(x[0] for x in b), statistics.median(x[0] for x in c),
                   statistics.median(y[0] / x[0] for x, y in zip(b, c)), statistics.median(x[1] for x in b),
                   statistics.median(x[1] for x in c), statistics.median(y[1] / x[1] for x, y in zip(b, c))))
    for p in sorted({k[0] for k in ov if len(k) == 2}):
        b, c = ov.get((p, "baseline"), []), ov.get((p, "current"), [])
        if b and c:
            print("bench/overlap N=2 %s overlap on, backward+zero_step: baseline %.1f ms current %.1f ms, ratio %.3f" %
                  (p, statistics.median(b), statistics.median(c),
                   statistics.median(y / x for x, y in zip(b, c))))


if __name__ == "__main__":
    main()
