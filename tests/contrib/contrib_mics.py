#!/usr/bin/env python3
"""MiCS (plugins-contrib/mics, built against the installed libzero) against
stage0, through zero-demo under mpirun.

Checks, each on the digest of every parameter's bytes after the last step
(demo summary digest.bits):
  1. MiCS is bitwise stage0 at N=4 with mics_shard_size 2, fp32 and bf16,
     at N=6 with shard size 3 and gradient accumulation 2 (many buckets),
     and at N=9 with shard size 3 in bf16 (odd world, 3 replicas);
     every MiCS run has ZERO_DEBUG_JITTER on (hook timing changes nothing);
  2. the plugin is selected by the config alone (stage 3 + mics_shard_size,
     DeepSpeed's key): the summary names "mics";
  3. memory: each rank's parameter shard is N/S world shares, i.e. exactly
     N/S times stage 3's parameter bytes at the same N (zero_memory_stats);
  4. a checkpoint saved half way and resumed by a new job ends with the
     uninterrupted run's bits;
  5. a shard size that does not divide the world fails naming the key.
Usage: contrib_mics.py --demo PATH --mpirun PATH --plugin-dir DIR --out DIR
Standard library only.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from demo_runner import run_demo  # noqa: E402  (the shared zero-demo runner)

BASE = {
    "train_micro_batch_size_per_gpu": 4,
    "gradient_accumulation_steps": 1,
    "steps_per_print": 1000,
    "gradient_clipping": 1.0,
    "optimizer": {"type": "AdamW", "params": {"lr": 0.003, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01}},
    "zero_optimization": {"stage": 3, "overlap_comm": True, "contiguous_gradients": True,
                          "stage3_param_persistence_threshold": 1000},
}


def config(a, tag, shard, bf16=False, gas=1, bucket=0):
    cfg = json.loads(json.dumps(BASE))
    cfg["zero_optimization"]["mics_shard_size"] = shard
    cfg["gradient_accumulation_steps"] = gas
    if bucket:
        cfg["zero_optimization"]["reduce_bucket_size"] = bucket
    if bf16:
        cfg["bf16"] = {"enabled": True}
    path = os.path.join(a.out, tag + ".json")
    json.dump(cfg, open(path, "w"), indent=1)
    return path


# The checks read digests, losses and current memory, never the validation loss: the demo's final pass over
# the held-out text is skipped (--no-validation; most of a short run's time).
NO_VALIDATION = ("--no-validation",)


def run(a, tag, np_, cfg, plugin=None, jitter=0, expect_fail=False, extra=(), steps=0):
    return run_demo(a, tag, np_, cfg, steps or a.steps, "contrib-mics", plugin=plugin,
                    env={"ZERO_DEBUG_JITTER": jitter or None}, extra=NO_VALIDATION + tuple(extra),
                    expect_fail=expect_fail)


def params_bytes(s):
    return [r["device"]["current"]["params"] for r in s["memory"]]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--demo", required=True)
    p.add_argument("--mpirun", default="mpirun")
    p.add_argument("--plugin-dir", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--data", default="",
                   help="zero-demo --data (default: the demo's corpus); CMake passes one 35 KB file: the final "
                        "validation pass over 5%% of the corpus dominates a short run (10x under ASan)")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    fails = []
    cases = [  # (tag, N, shard size, bf16, gas, bucket)
        ("n4_s2_fp32", 4, 2, False, 1, 0),
        ("n4_s2_bf16", 4, 2, True, 1, 0),
        ("n6_s3_fp32_gas2_b3000", 6, 3, False, 2, 3000),
        ("n9_s3_bf16", 9, 3, True, 1, 0),
    ]
    for tag, np_, shard, bf16, gas, bucket in cases:
        cfg = config(a, tag, shard, bf16, gas, bucket)
        ref = run(a, tag + "-stage0", np_, cfg, plugin="stage0")
        got = run(a, tag + "-mics", np_, cfg, jitter=50)  # plugin chosen by the config
        ok = got["digest"]["bits"] == ref["digest"]["bits"]
        print(f"  {tag:<24} stage0 {ref['digest']['bits']}  mics {got['digest']['bits']}  "
              f"{'bitwise' if ok else 'DIFFERENT'}  plugin={got['plugin']}")
        if got["plugin"] != "mics":
            fails.append(f"{tag}: the config selected plugin {got['plugin']!r}, expected 'mics'")
        if not ok:
            fails.append(f"{tag}: mics {got['digest']['bits']} != stage0 {ref['digest']['bits']} "
                         f"(losses {got['losses']} vs {ref['losses']})")
        if tag == "n4_s2_fp32":
            s3 = run(a, tag + "-stage3", np_, cfg, plugin="stage3")
            pm, p3 = params_bytes(got), params_bytes(s3)
            print(f"  params bytes per rank: mics {pm}  stage3 {p3}  (expect mics = {np_ // shard} x stage3)")
            if any(m != (np_ // shard) * t for m, t in zip(pm, p3)) or not all(pm):
                fails.append(f"{tag}: mics parameter bytes {pm} != {np_ // shard} x stage3's {p3}")
    # checkpoint: half the steps, saved, resumed in a new job: the uninterrupted run's bits
    cfg = config(a, "n4_s2_fp32", 2)
    ck = os.path.join(a.out, "ckpt")
    if os.path.isdir(ck):
        import shutil
        shutil.rmtree(ck)
    half = max(1, a.steps // 2)
    run(a, "resume-a", 4, cfg, extra=["--save-dir", ck, "--save-every", str(half)], steps=half)
    res = run(a, "resume-b", 4, cfg, extra=["--resume", ck])
    whole = run(a, "resume-whole", 4, cfg)
    print(f"  save at step {half} + resume: {res['digest']['bits']}  uninterrupted: {whole['digest']['bits']}")
    if res["digest"]["bits"] != whole["digest"]["bits"]:
        fails.append(f"resume: {res['digest']['bits']} != uninterrupted {whole['digest']['bits']}")
    cfg = config(a, "bad_shard", 3)
    rc, text = run(a, "bad_shard", 4, cfg, expect_fail=True)
    want = "zero_optimization.mics_shard_size: got 3, expected a divisor of the world size 4"
    print(f"  shard size 3 at N=4: exit {rc}, message {'found' if want in text else 'MISSING'}")
    if rc == 0 or want not in text:
        fails.append(f"shard size 3 at N=4: exit {rc}, expected a failure naming the key ({want!r})")
    for f in fails:
        print("FAIL:", f)
    print("contrib-mics:", "PASS" if not fails else f"FAIL ({len(fails)})")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
