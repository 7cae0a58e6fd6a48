"""The demo's charts, shared by tools/demo-report (the HTML page) and
tools/demo-compare --svg (the same charts as SVG files): loss curves,
peak memory by category beside the ZeRO formula, step time, and one traced
step as a timeline.  Input: zero-demo --summary dicts (with "_label") and
trace events.  Pure functions; standard library only."""
import json
import statistics

import svgchart

TAGS = ["params", "grads", "master", "optim", "buckets", "gather", "other"]


# ---- the ZeRO formula ------------------------------------------------------

def formula(run):
    """Model-state bytes per rank by the ZeRO paper's Table 1 (DESIGN.md):
    params P*Psi, grads G*Psi, optimizer K*Psi, each divided by N where the
    stage partitions it.  P = G = 2 bytes for fp16/bf16 and 4 for fp32;
    K = 4 bytes per optimizer state (2 for Adam) plus a 4-byte fp32 master
    for a 16-bit model (the paper's K = 12); an fp32 model's master is the
    parameter itself.  Offload keeps K on the host: its device bar has P
    and the stage's G only.  Returns {category: bytes}, stage."""
    cfg = run.get("config") or {}
    psi = float((run.get("model") or {}).get("num_params") or 0)
    n = float(run["world_size"])
    half = any((cfg.get(k) or {}).get("enabled") for k in ("fp16", "bf16", "bfloat16"))
    pb = 2.0 if half else 4.0
    opt = ((cfg.get("optimizer") or {}).get("type") or "adam").lower()
    states = 2 if "adam" in opt or "lamb" in opt else 1
    zo = cfg.get("zero_optimization") or {}
    plugin = run["plugin"]
    stage = zo.get("stage", 0) if isinstance(zo.get("stage", 0), int) else 0
    if plugin.startswith("stage") and plugin[5:6].isdigit():
        stage = int(plugin[5])
    offload = plugin == "offload" or bool(zo.get("offload_optimizer"))
    parts = {"params": pb * psi / (n if stage >= 3 else 1),
             "grads": pb * psi / (n if stage >= 2 else 1)}
    if not offload:
        parts["optim"] = 4.0 * states * psi / (n if stage >= 1 else 1)
        if half:
            parts["master"] = 4.0 * psi / (n if stage >= 1 else 1)
    return parts, stage


# ---- trace: one step ------------------------------------------------------

def load_trace(path):
    with open(path) as f:
        d = json.load(f)
    return d.get("traceEvents", [])


def step_window(events, gas):
    """(t0, t1, step) of the last complete optimizer step: from the end of
    the previous boundary zero_step to the end of this one."""
    ends = sorted((e["ts"] + e["dur"], int(e["args"].get("step", 0))) for e in events
                  if e.get("ph") == "X" and e.get("name") == "zero_step" and
                  int(e.get("args", {}).get("micro_step", 0)) == gas - 1)
    if len(ends) < 2:
        return None
    return ends[-2][0], ends[-1][0], ends[-1][1]


def trace_tracks(rank_events, window):
    t0, t1 = window
    tracks = []
    for rank in sorted(rank_events):
        ev = rank_events[rank]
        names = {e["tid"]: e["args"]["name"] for e in ev if e.get("ph") == "M" and e.get("name") == "thread_name"}
        by_tid = {}
        for e in ev:
            if e.get("ph") != "X" or e["ts"] + e["dur"] < t0 or e["ts"] > t1:
                continue
            by_tid.setdefault(e["tid"], []).append((e["ts"], e["ts"] + e["dur"], e["name"], e.get("cat", "")))
        for tid in sorted(by_tid):
            tracks.append((f"rank {rank} {names.get(tid, tid)}", by_tid[tid]))
    return tracks



# ---- charts ----------------------------------------------------------------

def loss_svg(runs):
    series = [(r["_label"], [(i + 1, v) for i, v in enumerate(r["losses"])]) for r in runs]
    return svgchart.line_chart("loss", "Training loss per step, every plugin", series, "optimizer step", "loss")


def memory_groups(runs):
    groups = []
    for r in runs:
        bars = []
        for m in r["memory"]:
            peak = m["device"]["peak"]
            bars.append((f"r{m['rank']}", {t: peak.get(t, 0) / 1024.0 for t in TAGS}, False))
        f, _ = formula(r)
        bars.append(("ZeRO", {k: v / 1024.0 for k, v in f.items()}, True))
        groups.append((r["_label"], bars))
    return groups


def memory_svg(runs):
    return svgchart.stacked_bars("memory", "Peak device-tier memory per rank by category (KiB)", memory_groups(runs),
                                 TAGS, ylabel="KiB", width=1200, ref_label="ZeRO formula")


def step_time_svg(runs):
    bars = []
    for r in runs:
        st = [v for v in r.get("step_time_ms") or [] if v is not None]
        bars.append((r["_label"], statistics.median(st) if st else (r.get("mean_step_time_ms") or 0)))
    return svgchart.bar_chart("step_time", "Median step time per plugin (ms)", bars, "ms", unit=" ms")


def trace_svg(run, rank_events):
    """One step of a run's trace ({rank: events}); (svg, tracks) or (None, why)."""
    if 0 not in rank_events:
        return None, "no trace files"
    gas = int(run.get("gradient_accumulation_steps") or 1)
    w = step_window(rank_events[0], gas)
    if not w:
        return None, "the trace holds no complete step"
    tracks = trace_tracks(rank_events, w[:2])
    svg = svgchart.timeline(f"trace-{run['_label']}", f"{run['_label']}: step {w[2]}", tracks, w[0], w[1],
                            note=f" (step {w[2]}, {(w[1] - w[0]) / 1000:.2f} ms)")
    return svg, tracks
