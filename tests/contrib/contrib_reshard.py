#!/usr/bin/env python3
"""Checkpoints of the outside plugins (MiCS, ZeRO++) that reshard: saved at
N=4 half way, resumed at N=2, 3 and 6 (and by / from the built-in stage3),
through zero-demo under mpirun.

The bitwise reference for a resumed run at M ranks is stage0's own path:
a stage0 checkpoint of the same run at N=4 (MiCS and exact ZeRO++ train to
stage0's bits, so their checkpoints hold the same values), resumed by
stage0 at M ranks.  Checks, on the digest of every parameter's bytes
after the last step (demo summary digest.bits):
  1. MiCS (shard size 2 at N=4) resumed by MiCS at M = 2 (S=2), 3 (S=3),
     6 (S=3), by stage3 at M = 3, and a stage3 checkpoint resumed by MiCS
     at M = 6 (S=2): each equals stage0's resumed run at M;
  2. MiCS at the same N=4 with another shard size (4): the shards are
     re-packed (mics.shape), the resumed run equals stage0's at N=4;
  3. the same in bf16 (N=4 S=2 -> N=6 S=3);
  4. ZeRO++ with hpZ only (exact; zero_hpz_partition_size 2, two simulated
     nodes per ZERO_RANKS_PER_NODE) resumed at M = 2, 3 (hpZ 3), 6, by
     stage3 at M = 2, and a stage3 checkpoint by ZeRO++ at M = 3: equals
     stage0's resumed run at M;
  5. ZeRO++ with qwZ, qgZ (error feedback on) and hpZ: resumed by a new job
     at N=4 it ends with the uninterrupted run's bits (error feedback
     saved); resumed at N=6 it logs that the error feedback restarts from
     zero and its final loss is within 0.02 nats of stage0's resumed run;
     resumed at N=4 in one node of 4 (saved in nodes of 2: another qgZ
     exchange) it logs the same reset, naming the other exchange;
  6. with --ckpt-tool: `zero-ckpt consolidate` of the MiCS and the exact
     ZeRO++ checkpoints gives the bytes of stage0's.
Usage: contrib_reshard.py --demo PATH --mpirun PATH --plugin-dir DIR --out DIR [--ckpt-tool PATH]
Standard library only.
"""
import argparse
import json
import os
import shutil
import subprocess
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


def config(a, tag, bf16=False, **zo):
    cfg = json.loads(json.dumps(BASE))
    cfg["zero_optimization"].update(zo)
    if bf16:
        cfg["bf16"] = {"enabled": True}
    path = os.path.join(a.out, tag + ".json")
    json.dump(cfg, open(path, "w"), indent=1)
    return path


# The checks read digests, losses and current memory, never the validation loss: the demo's final pass over
# the held-out text is skipped (--no-validation; most of a short run's time).
NO_VALIDATION = ("--no-validation",)


def run(a, tag, np_, cfg, plugin, steps, extra=(), ranks_per_node=None):
    rpn = str(ranks_per_node) if ranks_per_node else "2" if np_ % 2 == 0 else str(np_)
    return run_demo(a, tag, np_, cfg, steps, "contrib-reshard", plugin=plugin,
                    env={"ZERO_RANKS_PER_NODE": rpn, "ZERO_LOG_LEVEL": "info"}, extra=NO_VALIDATION + tuple(extra))


def save(a, tag, np_, cfg, plugin):
    """Half the steps, saved; the checkpoint root."""
    ck = os.path.join(a.out, "ck-" + tag)
    if os.path.isdir(ck):
        shutil.rmtree(ck)
    run(a, "save-" + tag, np_, cfg, plugin, a.half, ["--save-dir", ck, "--save-every", str(a.half)])
    return ck


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--demo", required=True)
    p.add_argument("--mpirun", default="mpirun")
    p.add_argument("--plugin-dir", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--data", default="", help="zero-demo --data (default: the demo's corpus)")
    p.add_argument("--ckpt-tool", default="", help="zero-ckpt, for the consolidation check")
    a = p.parse_args()
    a.half = max(1, a.steps // 2)
    os.makedirs(a.out, exist_ok=True)
    fails = []

    def same(what, got, ref):
        ok = got["digest"]["bits"] == ref["digest"]["bits"]
        print(f"  {what:<52} {got['digest']['bits']}  {'bitwise' if ok else 'DIFFERENT from ' + ref['digest']['bits']}")
        if not ok:
            fails.append(f"{what}: {got['digest']['bits']} != {ref['digest']['bits']} "
                         f"(losses {got['losses']} vs {ref['losses']})")

    def resharded(what, got):
        if "resharding" not in got["log"]:
            fails.append(f"{what}: the load did not reshard (no 'resharding' line in the log)")

    plain = config(a, "stage0")
    ck0 = save(a, "stage0-n4", 4, plain, "stage0")
    refs = {m: run(a, f"stage0-n4-to-{m}", m, plain, "stage0", a.steps, ["--resume", ck0]) for m in (2, 3, 4, 6)}

    # 1-2: MiCS
    ckm = save(a, "mics-n4-s2", 4, config(a, "mics-s2", mics_shard_size=2), "mics")
    for m, s in ((2, 2), (3, 3), (6, 3)):
        got = run(a, f"mics-n4-to-{m}-s{s}", m, config(a, f"mics-s{s}", mics_shard_size=s), "mics", a.steps,
                  ["--resume", ckm])
        resharded(f"mics x4 S2 -> mics x{m} S{s}", got)
        same(f"mics x4 S2 -> mics x{m} S{s}", got, refs[m])
    got = run(a, "mics-n4-to-stage3-3", 3, plain, "stage3", a.steps, ["--resume", ckm])
    same("mics x4 S2 -> stage3 x3", got, refs[3])
    ck3 = save(a, "stage3-n4", 4, plain, "stage3")
    got = run(a, "stage3-n4-to-mics-6", 6, config(a, "mics-s2", mics_shard_size=2), "mics", a.steps,
              ["--resume", ck3])
    same("stage3 x4 -> mics x6 S2", got, refs[6])
    got = run(a, "mics-n4-s2-to-s4", 4, config(a, "mics-s4", mics_shard_size=4), "mics", a.steps, ["--resume", ckm])
    if "re-packing the shards" not in got["log"]:
        fails.append("mics x4 S2 -> mics x4 S4: no 're-packing the shards' line in the log")
    same("mics x4 S2 -> mics x4 S4 (same N, re-packed)", got, refs[4])
    got = run(a, "mics-n4-s2-native", 4, config(a, "mics-s2", mics_shard_size=2), "mics", a.steps, ["--resume", ckm])
    same("mics x4 S2 -> mics x4 S2 (native)", got, refs[4])

    # 3: bf16
    b16 = config(a, "stage0-bf16", bf16=True)
    ck0b = save(a, "stage0-bf16-n4", 4, b16, "stage0")
    ref6b = run(a, "stage0-bf16-n4-to-6", 6, b16, "stage0", a.steps, ["--resume", ck0b])
    ckmb = save(a, "mics-bf16-n4-s2", 4, config(a, "mics-bf16-s2", bf16=True, mics_shard_size=2), "mics")
    got = run(a, "mics-bf16-n4-to-6-s3", 6, config(a, "mics-bf16-s3", bf16=True, mics_shard_size=3), "mics",
              a.steps, ["--resume", ckmb])
    same("mics bf16 x4 S2 -> mics bf16 x6 S3", got, ref6b)

    # 4: ZeRO++ exact (hpZ only)
    ckz = save(a, "zeropp-hpz-n4", 4, config(a, "zeropp-hpz2", zero_hpz_partition_size=2), "zeropp")
    for m, hp in ((2, 2), (3, 3), (6, 2)):
        got = run(a, f"zeropp-hpz-n4-to-{m}", m, config(a, f"zeropp-hpz{hp}", zero_hpz_partition_size=hp), "zeropp",
                  a.steps, ["--resume", ckz])
        resharded(f"zeropp hpZ x4 -> zeropp hpZ{hp} x{m}", got)
        same(f"zeropp hpZ x4 -> zeropp hpZ{hp} x{m}", got, refs[m])
    got = run(a, "zeropp-hpz-n4-to-stage3-2", 2, plain, "stage3", a.steps, ["--resume", ckz])
    same("zeropp hpZ x4 -> stage3 x2", got, refs[2])
    got = run(a, "stage3-n4-to-zeropp-3", 3, config(a, "zeropp-hpz3", zero_hpz_partition_size=3), "zeropp", a.steps,
              ["--resume", ck3])
    same("stage3 x4 -> zeropp hpZ3 x3", got, refs[3])

    # 5: ZeRO++ lossy, with error feedback
    allz = dict(zero_quantized_weights=True, zero_quantized_gradients=True, zero_hpz_partition_size=2,
                zero_quantized_gradients_error_feedback=True)
    zcfg = config(a, "zeropp-all", **allz)
    ckl = save(a, "zeropp-all-n4", 4, zcfg, "zeropp")
    whole = run(a, "zeropp-all-whole", 4, zcfg, "zeropp", a.steps)
    got = run(a, "zeropp-all-native", 4, zcfg, "zeropp", a.steps, ["--resume", ckl])
    same("zeropp all+ef x4 -> x4 (native: error feedback kept)", got, whole)
    got = run(a, "zeropp-all-n4-to-6", 6, zcfg, "zeropp", a.steps, ["--resume", ckl])
    resharded("zeropp all+ef x4 -> x6", got)
    note = "qgZ error feedback residuals start from zero"
    if note not in got["log"]:
        fails.append(f"zeropp all+ef x4 -> x6: no {note!r} line in the log")
    d = abs(got["final_loss"] - refs[6]["final_loss"])
    # the same world in one node of 4: another qgZ exchange, its residuals reset (logged), the run goes on
    other = run(a, "zeropp-all-native-1node", 4, zcfg, "zeropp", a.steps, ["--resume", ckl], ranks_per_node=4)
    if note not in other["log"] or "another qgZ exchange" not in other["log"]:
        fails.append(f"zeropp all+ef x4 (nodes of 2) -> x4 (one node): no {note!r} line naming the other exchange")
    print(f"  {'zeropp all+ef x4 -> x4 in one node (ef reset)':<52} final loss {other['final_loss']:.5f} vs "
          f"uninterrupted {whole['final_loss']:.5f}")
    print(f"  {'zeropp all+ef x4 -> x6 (lossy)':<52} final loss {got['final_loss']:.5f} vs stage0 "
          f"{refs[6]['final_loss']:.5f} (|d| {d:.5f}, limit 0.02)")
    if d > 0.02:
        fails.append(f"zeropp all+ef x4 -> x6: final loss differs from stage0's by {d:.5f} > 0.02")

    # 6: the tool reads them like any reshardable checkpoint
    if a.ckpt_tool:
        outs = {}
        for tag, ck in (("stage0", ck0), ("mics", ckm), ("zeropp", ckz)):
            out = os.path.join(a.out, f"consolidated-{tag}.safetensors")
            rc = subprocess.call([a.ckpt_tool, "consolidate", ck, out], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.STDOUT, timeout=120)
            outs[tag] = open(out, "rb").read() if rc == 0 and os.path.exists(out) else None
            if outs[tag] is None:
                fails.append(f"zero-ckpt consolidate {ck} failed (exit {rc})")
        for tag in ("mics", "zeropp"):
            ok = outs[tag] is not None and outs[tag] == outs["stage0"]
            print(f"  {'zero-ckpt consolidate ' + tag + ' x4 == stage0 x4':<52} {'same bytes' if ok else 'DIFFERENT'}")
            if not ok:
                fails.append(f"zero-ckpt consolidate: {tag}'s checkpoint differs from stage0's")

    for f in fails:
        print("FAIL:", f)
    print("contrib-reshard:", "PASS" if not fails else f"FAIL ({len(fails)})")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
