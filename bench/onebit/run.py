#!/usr/bin/env python3
"""1-bit Adam vs stage0 on this machine (plugins-contrib/onebit).

zero-demo at N ranks (default 4) under mpirun, stage0 running AdamW
without bias correction and onebit with freeze_step 0 (every step
compressed) and otherwise the same config; REPEATS runs of each,
interleaved.  Prints the median of the demo's mean step time and of rank
0's bytes on the wire (zero_comm_stats: reduced + gathered, every
communicator) for each, and the ratios onebit / stage0.

All ranks share one machine: the "link" is shared memory, which is not
slow, so the step-time ratio says what the compression costs in compute
here, not what it saves on a slow network: for that, `SUITE=onebit
bench/contrib_netns/run.sh BUILD PLUGIN_DIR STEPS REPEATS 100mbit` (root)
runs the same pair across two network namespaces joined by a shaped link.

Goal (issue 33): bytes per step <= 0.1x stage0's once compressed (here every
step is: freeze_step 0); the last line says whether it is met.

Usage: bench/onebit/run.py [--build build] [--plugin-dir DIR] [--np 4] [--steps 20] [--repeats 5]
  --plugin-dir: where libzero-plugin-onebit.so is (default
  <build>/tests/contrib/work/build, made by `ctest -R contrib.build`).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(os.path.dirname(here))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(root, "build"))
    p.add_argument("--plugin-dir", default="")
    p.add_argument("--mpirun", default="mpirun")
    p.add_argument("--np", type=int, default=4)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--data", default="")
    a = p.parse_args()
    demo = os.path.join(a.build, "examples", "demo", "zero-demo")
    pdir = a.plugin_dir or os.path.join(a.build, "tests", "contrib", "work", "build")
    if not os.path.exists(os.path.join(pdir, "libzero-plugin-onebit.so")):
        print(f"bench-onebit: no libzero-plugin-onebit.so in {pdir} (run ctest -R contrib.build first)")
        return 1
    base = {"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1, "steps_per_print": 1000,
            "gradient_clipping": 1.0, "zero_optimization": {"stage": 0, "reduce_bucket_size": 50000,
                                                            "overlap_comm": True}}
    hp = {"lr": 0.003, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01}
    cfgs = {
        "stage0": dict(base, optimizer={"type": "AdamW", "params": dict(hp, bias_correction=False)}),
        "onebit": dict(base, optimizer={"type": "OneBitAdam", "params": dict(hp, freeze_step=0)},
                       zero_optimization=dict(base["zero_optimization"], plugin="onebit")),
    }
    tmp = tempfile.mkdtemp(prefix="bench-onebit-")
    times = {k: [] for k in cfgs}
    nbytes = {k: [] for k in cfgs}
    env = dict(os.environ, ZERO_PLUGIN_PATH=pdir)
    for r in range(a.repeats):
        for name, cfg in cfgs.items():
            cpath = os.path.join(tmp, name + ".json")
            summ = os.path.join(tmp, f"{name}-{r}.summary.json")
            json.dump(cfg, open(cpath, "w"))
            cmd = [a.mpirun, "--allow-run-as-root", "--oversubscribe", "-np", str(a.np), "--mca", "btl", "self,vader",
                   demo, "--config", cpath, "--plugin", name, "--steps", str(a.steps), "--quiet", "--summary",
                   summ] + (["--data", a.data] if a.data else [])
            rc = subprocess.call(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, timeout=600)
            if rc != 0:
                print(f"bench-onebit: {name} run {r} failed (exit {rc}): {' '.join(cmd)}")
                return 1
            s = json.load(open(summ))
            times[name].append(s["mean_step_time_ms"])
            nbytes[name].append((s["comm"]["bytes_reduced"] + s["comm"]["bytes_gathered"]) / a.steps)
    med = lambda xs: statistics.median(xs)
    print(f"N={a.np}, {a.steps} steps, {a.repeats} interleaved runs each (medians; one machine, shared-memory link)")
    print(f"{'plugin':<8} {'step ms':>9} {'bytes/step (rank 0)':>20}")
    for k in cfgs:
        print(f"{k:<8} {med(times[k]):9.2f} {med(nbytes[k]):20.0f}")
    tr = med(times['onebit']) / med(times['stage0'])
    br = med(nbytes['onebit']) / med(nbytes['stage0'])
    print(f"ratio onebit/stage0: step time {tr:.3f}, bytes {br:.4f}")
    print(f"bytes per step after the freeze: {br:.4f}x stage0's (goal <= 0.1x: {'met' if br <= 0.1 else 'NOT met'}); "
          f"step time {tr:.2f}x on this machine's shared-memory link (a slow link: bench/contrib_netns, SUITE=onebit)")
    return 0 if br <= 0.1 else 1


if __name__ == "__main__":
    sys.exit(main())
