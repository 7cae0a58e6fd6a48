#!/usr/bin/env python3
"""ZeRO++ (plugins-contrib/zeropp, built against the installed libzero)
against stage3, through zero-demo under mpirun at N=4 with
ZERO_RANKS_PER_NODE=2 (two simulated nodes of two ranks).

The demo's own stage-3 config (examples/configs/stage3.json: gradient
accumulation 2, warmup) plus the ZeRO++ keys, --steps steps:
  1. all three on (qwZ + qgZ int8 + hpZ over the node pair): the loss at
     every step within --tol (0.02 nats) of stage3's;
  2. each alone: qwZ and qgZ within the same tolerance; hpZ alone changes
     no value (exact gathers from the secondary partition): bitwise
     stage3's parameters;
  3. communication (rank 0's zero_comm_stats, every communicator, the
     final validation/digest gathers included; stage3_param_persistence_
     threshold 0 so both gather every param each time): with no switch on,
     zeropp gathers exactly stage3's bytes; qwZ gathers >= 3.8x fewer (int8
     + one fp32 scale per 256 elements: 3.94x on fp32 weights); flat qgZ
     moves >= 3.3x fewer reduction bytes (int8, scale per 64: 3.76x);
     hierarchical qgZ (the default) sends out of each node <= 0.3x of what
     any fp32 reduce-scatter over the world must, and less than flat qgZ;
     hpZ: the world gathers + the node-group gathers are the bytes of the
     plain run, and the world carries at most 30% of them (with
     accumulation 2, one gather of each param in four crosses the world:
     the forward of the window's first micro-batch); with accumulation 1
     the world carries each parameter exactly once per step and the
     backward's gathers stay in the node;
  4. the "all" run names no plugin: stage 3 + the ZeRO++ keys select zeropp;
  5. a checkpoint (all three on) saved half way and resumed by a new job
     ends with the uninterrupted run's bits;
  6. a zero_hpz_partition_size that does not divide the node fails naming
     the key.
With --qgz-worlds N:k,... only hierarchical qgZ at those world sizes (check_worlds).
Usage: contrib_zeropp.py --demo PATH --mpirun PATH --plugin-dir DIR --config stage3.json --out DIR
Standard library only.
"""
import argparse
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from demo_runner import run_demo  # noqa: E402  (the shared zero-demo runner)


QGZ_LINE = re.compile(r"zeropp: rank 0 qgZ (\w+) gradient exchange, (\d+) nodes of (\d+): (\d+) reductions; node (\d+) "
                      r"calls (\d+) bytes \(fp32\); cross-node (\d+) calls (\d+) bytes \(quantized\), (\d+) of them to "
                      r"other nodes")


def run(a, tag, cfg, plugin, expect_fail=False, steps=0, extra=(), np=4, rpn=2):
    # rpn 0: no ZERO_RANKS_PER_NODE, nodes from the machine records: one node on this machine
    r = run_demo(a, tag, np, cfg, steps or a.steps, "contrib-zeropp", plugin=plugin,
                 env={"ZERO_RANKS_PER_NODE": rpn or None, "ZERO_LOG_LEVEL": "info"}, extra=extra,
                 expect_fail=expect_fail)
    if expect_fail:
        return r
    s, text = r, r["log"]
    m = re.search(r"zeropp: rank 0 parameter gathers: world (\d+) calls (\d+) bytes, hpZ group (\d+) calls (\d+) bytes; "
                  r"order agreements \(the gather engine's, over the world\) (\d+) calls (\d+) bytes", text)
    s["gathers"] = [int(x) for x in m.groups()] if m else None
    m = QGZ_LINE.search(text)
    s["qgz"] = None
    if m:
        g = m.groups()
        s["qgz"] = dict(mode=g[0], nodes=int(g[1]), k=int(g[2]), reductions=int(g[3]), node_calls=int(g[4]),
                        node_bytes=int(g[5]), cross_calls=int(g[6]), cross_bytes=int(g[7]), out=int(g[8]))
    return s


def variant(base, **keys):
    c = json.loads(json.dumps(base))
    c["zero_optimization"].update(keys)
    return c


def node_out(s):
    """Bytes each node sent to other nodes in the gradient exchange: k ranks, each sending the same
    (rank 0's log line: the blocks of its all-to-all addressed to ranks on other nodes)."""
    return s["qgz"]["k"] * s["qgz"]["out"]


def stage3_node_out(s3, nodes):
    """What any reduce-scatter of stage 3's fp32 gradient must send out of each node at least: the
    node's contributions to the other nodes' shares, (M-1)/M of rank 0's reduce-scatter payload
    (its zero_comm_stats bytes_reduced; the few agreement/norm all-reduce bytes in it are <0.1%).
    Stage 3's ring sends more: (N-1)/N of it through each node boundary."""
    return s3["comm"]["bytes_reduced"] * (nodes - 1) / nodes


def check_worlds(a, base, fails, QG):
    """Hierarchical qgZ (node reduce-scatter in fp32, quantized all-to-all across nodes) at each
    N:k of --qgz-worlds (k = 0: no ZERO_RANKS_PER_NODE, one node: this machine; k not
    dividing N: unequal nodes, the flat exchange with a warning), int8:
    with error feedback, the loss within --tol of stage3 at every one of --steps steps, and two runs
    with the same bits at the worlds of --repeat-worlds (error feedback is the default; the runs
    name it); without it, within --tol over a run of --tol-steps steps (it drifts further later, so
    it is not run longer); bytes leaving a node <= 0.3x of stage 3's minimum; one node: the
    reduction is exact (stage 3's bits, nothing crosses)."""
    EF = {QG: True, "zero_quantized_gradients_error_feedback": True}
    NV = ["--no-validation"]  # losses, digests and the gradient exchange's bytes: no validation pass needed
    for w in a.qgz_worlds.split(","):
        n, k = (int(x) for x in w.split(":"))
        tag = f"n{n}k{k}"
        s3 = run(a, f"{tag}-stage3", base, "stage3", np=n, rpn=k, extra=NV)
        q1 = run(a, f"{tag}-qgz-ef", variant(base, **EF), "zeropp", np=n, rpn=k, extra=NV)
        again = a.repeat_worlds == "all" or w in a.repeat_worlds.split(",")
        q2 = run(a, f"{tag}-qgz-ef-again", variant(base, **EF), "zeropp", np=n, rpn=k, extra=NV) if again else None
        q0 = run(a, f"{tag}-qgz", variant(base, **{QG: True, "zero_quantized_gradients_error_feedback": False}),
                 "zeropp", np=n, rpn=k, steps=a.tol_steps, extra=NV)
        if not q1["qgz"] or not q0["qgz"]:
            fails.append(f"{tag}: no qgZ exchange line from zeropp at destroy")
            continue
        d = [abs(x - y) for x, y in zip(q1["losses"], s3["losses"])]
        d0 = [abs(x - y) for x, y in zip(q0["losses"], s3["losses"])]
        worst, worst0 = max(d), max(d0)
        x = q1["qgz"]
        nodes = x["nodes"]
        print(f"  N={n} {x['nodes']} node(s) of {x['k']}: qgZ {x['mode']} max |loss - stage3| over {len(d)} steps: "
              f"{worst:.4f} nats with error feedback (step {d.index(worst) + 1}), {worst0:.4f} without "
              f"over {len(d0)} steps (step {d0.index(worst0) + 1}); bits {q1['digest']['bits']} / again "
              f"{q2['digest']['bits'] if q2 else '(not run)'} (stage3 {s3['digest']['bits']})")
        # nodes of unequal size (k does not divide N): the flat exchange, with a warning
        want = "flat" if k and n % k else "hierarchical"
        if x["mode"] != want or q0["qgz"]["mode"] != want:
            fails.append(f"{tag}: qgZ ran the {x['mode']} exchange, expected {want}")
        if want == "flat" and "the hierarchical exchange needs equal nodes" not in open(
                os.path.join(a.out, f"{tag}-qgz.log")).read():
            fails.append(f"{tag}: no warning that unequal nodes fall back to the flat exchange")
        if len(d) != a.steps or worst > a.tol:
            fails.append(f"{tag}: loss {worst:.4f} nats from stage3's at step {d.index(worst) + 1} (tol {a.tol})")
        if len(d0) != a.tol_steps or worst0 > a.tol:
            fails.append(f"{tag}: without error feedback, loss {worst0:.4f} nats from stage3's in the first "
                         f"{a.tol_steps} steps (tol {a.tol})")
        if q2 and q1["digest"]["bits"] != q2["digest"]["bits"]:
            fails.append(f"{tag}: two runs differ: {q1['digest']['bits']} != {q2['digest']['bits']}")
        if x["reductions"] != a.steps * base["gradient_accumulation_steps"]:
            fails.append(f"{tag}: {x['reductions']} gradient exchanges on rank 0, expected one per micro-step")
        if nodes == 1:
            # one node: a full-precision reduce-scatter only, summed like stage 3's ring
            if x["cross_calls"] or x["out"] or q1["digest"]["bits"] != s3["digest"]["bits"]:
                fails.append(f"{tag}: one node: cross-node calls {x['cross_calls']}, bits {q1['digest']['bits']} "
                             f"(stage3 {s3['digest']['bits']}): expected none and stage 3's bits")
            continue
        if want == "flat":
            continue
        per = a.steps * base["gradient_accumulation_steps"]
        qo, so = node_out(q1) / per, stage3_node_out(s3, nodes) / per
        print(f"    bytes leaving each node per micro-step: qgZ {qo:.0f} (node fp32 reduce-scatter "
              f"{x['node_bytes'] / per:.0f} per rank stays inside), stage3 at least {so:.0f}: {qo / so:.3f}x")
        if qo > 0.3 * so:
            fails.append(f"{tag}: qgZ sends {qo:.0f} bytes out of a node per micro-step, {qo / so:.3f}x stage 3's "
                         f"{so:.0f} (bound 0.3x)")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--demo", required=True)
    p.add_argument("--mpirun", default="mpirun")
    p.add_argument("--plugin-dir", required=True)
    p.add_argument("--config", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--tol", type=float, default=0.02)
    p.add_argument("--data", default="",
                   help="zero-demo --data (default: the demo's corpus); CMake passes one 35 KB file: the final "
                        "validation pass over 5%% of the corpus dominates a short run (10x under ASan)")
    p.add_argument("--bytes-steps", type=int, default=6, help="steps of the communication runs")
    p.add_argument("--tol-steps", type=int, default=20,
                   help="--qgz-worlds: steps over which qgZ without error feedback must stay within --tol")
    p.add_argument("--repeat-worlds", default="all",
                   help="--qgz-worlds: the N:k entries (or 'all') where qgZ with error feedback runs twice and "
                        "must give the same bits")
    p.add_argument("--qgz-worlds", default="",
                   help="N:k,...: check only hierarchical qgZ at these world sizes and ranks per node (k = 0: "
                        "one node: this machine)")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    base = json.load(open(a.config))
    fails = []
    QW, QG, HPZ = "zero_quantized_weights", "zero_quantized_gradients", "zero_hpz_partition_size"
    if a.qgz_worlds:
        check_worlds(a, base, fails, QG)
        for f in fails:
            print("FAIL:", f)
        print("contrib-zeropp (hierarchical qgZ):", "PASS" if not fails else f"FAIL ({len(fails)})")
        return 1 if fails else 0

    # 1-2: loss curves
    ref = run(a, "stage3", base, "stage3")
    for tag, keys in [("all", {QW: True, QG: True, HPZ: 2}), ("qwz", {QW: True}), ("qgz", {QG: True}),
                      ("hpz", {HPZ: 2})]:
        s = run(a, tag, variant(base, **keys), None if tag == "all" else "zeropp")  # "all": chosen by the config
        if s["plugin"] != "zeropp":
            fails.append(f"{tag}: ran plugin {s['plugin']!r}, expected 'zeropp'")
        d = [abs(x - y) for x, y in zip(s["losses"], ref["losses"])]
        worst = max(d)
        print(f"  {tag:<4} max |loss - stage3| {worst:.4f} nats (step {d.index(worst) + 1} of {len(d)}), "
              f"final {s['losses'][-1]:.4f} vs {ref['losses'][-1]:.4f}, bits {s['digest']['bits']}")
        if len(d) != a.steps or worst > a.tol:
            fails.append(f"{tag}: loss {worst:.4f} nats from stage3's at step {d.index(worst) + 1} (tol {a.tol})")
        if tag == "hpz" and s["digest"]["bits"] != ref["digest"]["bits"]:
            fails.append(f"hpz alone: bits {s['digest']['bits']} != stage3 {ref['digest']['bits']}")

    # 3: bytes on the wire
    flat = variant(base, stage3_param_persistence_threshold=0, stage3_max_reuse_distance=0,
                   stage3_prefetch_bucket_size=0)
    s3 = run(a, "bytes-stage3", flat, "stage3", steps=a.bytes_steps)
    plain = run(a, "bytes-plain", flat, "zeropp", steps=a.bytes_steps)
    qw = run(a, "bytes-qwz", variant(flat, **{QW: True}), "zeropp", steps=a.bytes_steps)
    qg = run(a, "bytes-qgz-flat", variant(flat, **{QG: True, "zero_quantized_gradients_hierarchical": False}),
             "zeropp", steps=a.bytes_steps)
    qh = run(a, "bytes-qgz", variant(flat, **{QG: True}), "zeropp", steps=a.bytes_steps)
    hp = run(a, "bytes-hpz", variant(flat, **{HPZ: 2}), "zeropp", steps=a.bytes_steps)
    G = lambda s: s["comm"]["bytes_gathered"]
    R = lambda s: s["comm"]["bytes_reduced"]
    steps = a.bytes_steps
    print(f"  gathered bytes per step (rank 0): stage3 {G(s3) / steps:.0f}  zeropp {G(plain) / steps:.0f}  "
          f"qwZ {G(qw) / steps:.0f} ({G(s3) / G(qw):.2f}x fewer)")
    print(f"  reduced bytes per step (rank 0): stage3 {R(s3) / steps:.0f}  qgZ flat {R(qg) / steps:.0f} "
          f"({R(s3) / R(qg):.2f}x fewer)")
    if not qg["qgz"] or not qh["qgz"] or qg["qgz"]["mode"] != "flat" or qh["qgz"]["mode"] != "hierarchical":
        fails.append("no qgZ exchange line (flat and hierarchical) from zeropp at destroy")
    else:
        # bytes leaving each node (2 nodes of 2): the flat all-to-all sends N-k of its N blocks abroad
        # from every rank; the hierarchical one reduces inside the node in fp32 first, then sends
        # M-1 of M blocks of a 1/k slice
        fo, ho, so = node_out(qg) / steps, node_out(qh) / steps, stage3_node_out(s3, 2) / steps
        print(f"  bytes leaving each node per step: stage3 at least {so:.0f}, qgZ flat {fo:.0f} ({fo / so:.3f}x), "
              f"hierarchical {ho:.0f} ({ho / so:.3f}x; its fp32 node reduce-scatter: "
              f"{qh['qgz']['node_bytes'] / steps:.0f} per rank)")
        if ho > 0.3 * so or ho >= fo:
            fails.append(f"hierarchical qgZ: {ho:.0f} bytes out of a node per step, flat {fo:.0f}, stage3 {so:.0f}")
    if G(plain) != G(s3):
        fails.append(f"zeropp with no switch gathers {G(plain)} bytes, stage3 {G(s3)}")
    if G(s3) / G(qw) < 3.8:
        fails.append(f"qwZ: only {G(s3) / G(qw):.2f}x fewer gathered bytes than stage3 (expect ~3.94)")
    if R(s3) / R(qg) < 3.3:
        fails.append(f"qgZ: only {R(s3) / R(qg):.2f}x fewer reduced bytes than stage3 (expect ~3.76)")
    if not hp["gathers"] or not plain["gathers"]:
        fails.append("no 'parameter gathers' line from zeropp at destroy")
    else:
        wc, wb, hc, hb = hp["gathers"][:4]
        pwc, pwb = plain["gathers"][:2]
        print(f"  hpZ gathers (rank 0): world {wc} calls {wb} bytes, node group {hc} calls {hb} bytes; "
              f"without hpZ: world {pwc} calls {pwb} bytes; world share {wb / pwb:.2f}")
        if wb + hb != pwb or wc + hc != pwc:
            fails.append(f"hpZ: world {wb} + group {hb} bytes != the plain run's {pwb} (calls {wc}+{hc} vs {pwc})")
        if wb > 0.30 * pwb or hb == 0:
            fails.append(f"hpZ: the world still carries {wb / pwb:.2f} of the gathered bytes")

    # hpZ with gradient accumulation 1 and P = the ranks of a node: per step (the difference between
    # runs of n and 2n steps, so the final evaluation's gathers cancel) each param crosses the world
    # once, in its first gather (the forward's); every gather of the backward all-gathers inside the node
    one = variant(flat)
    one["gradient_accumulation_steps"] = 1
    n1 = a.bytes_steps
    runs = [run(a, f"bytes-{t}-gas1-{n}", c, "zeropp", steps=n)
            for t, c in (("plain", one), ("hpz", variant(one, **{HPZ: 2}))) for n in (n1, 2 * n1)]
    ga = [r["gathers"] for r in runs]
    psi_b = runs[0]["model"]["num_params"] * 4  # fp32 model: every parameter's bytes once
    if not all(ga):
        fails.append("no 'parameter gathers' line from zeropp at destroy (gas 1)")
    else:
        d = lambda i, j: ga[i + 1][j] - ga[i][j]  # per n1 steps: run 2n minus run n
        pc, pb, wc, wb, hc, hb = d(0, 0), d(0, 1), d(2, 0), d(2, 1), d(2, 2), d(2, 3)
        print(f"  hpZ, gas 1, per step (rank 0): world {wc / n1:.1f} calls {wb / n1:.0f} bytes, node {hc / n1:.1f} "
              f"calls {hb / n1:.0f} bytes; without hpZ: world {pc / n1:.1f} calls {pb / n1:.0f} bytes; the gather "
              f"engine's order agreements over the world: {d(2, 4) / n1:.1f} calls {d(2, 5) / n1:.0f} bytes")
        if wc + hc != pc or wb + hb != pb or wb != n1 * psi_b or hb == 0:
            fails.append(f"hpZ gas 1: per {n1} steps world {wc} calls {wb} bytes, node {hc} calls {hb} bytes, "
                         f"without hpZ {pc} calls {pb} bytes: expected the world to carry each parameter once "
                         f"per step ({psi_b} bytes), the node every later gather")

    # checkpoint with all three on: saved half way, resumed by a new job == uninterrupted
    allk = variant(base, **{QW: True, QG: True, HPZ: 2})
    ck = os.path.join(a.out, "ckpt")
    if os.path.isdir(ck):
        import shutil
        shutil.rmtree(ck)
    n = a.bytes_steps
    run(a, "resume-a", allk, "zeropp", steps=n // 2, extra=["--save-dir", ck, "--save-every", str(n // 2)])
    res = run(a, "resume-b", allk, "zeropp", steps=n, extra=["--resume", ck])
    whole = run(a, "resume-whole", allk, "zeropp", steps=n)
    print(f"  save at step {n // 2} + resume: {res['digest']['bits']}  uninterrupted: {whole['digest']['bits']}")
    if res["digest"]["bits"] != whole["digest"]["bits"]:
        fails.append(f"resume: {res['digest']['bits']} != uninterrupted {whole['digest']['bits']}")

    # 4: bad hpZ size
    rc, text = run(a, "bad-hpz", variant(base, **{HPZ: 3}), "zeropp", expect_fail=True, steps=1)
    want = "zero_optimization.zero_hpz_partition_size: got 3, expected a divisor of the 2 ranks of this node"
    if rc == 0 or want not in text:
        fails.append(f"hpZ size 3 on nodes of 2: exit {rc}, message {'found' if want in text else 'missing'}")
    for f in fails:
        print("FAIL:", f)
    print("contrib-zeropp:", "PASS" if not fails else f"FAIL ({len(fails)})")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
