#!/usr/bin/env python3
"""Check libzero trace files (issue 23): valid JSON in Chrome's trace-event
format, every B has its E on the same thread (libzero writes complete X
events, which the check also accepts), spans on every (pid, tid) track
nest (an inner span lies inside its outer one, never straddles it), each
thread that has events is named, and with --buckets: every bucket's
reduce-scatter lies between its launch and its completion, every launched
bucket got one and the collective carries its bytes.

Usage: check_trace.py [--buckets] [--expect NAME,NAME] [--ranks N] FILE...
Exit 0 when every check holds, 1 with the failures listed."""
import argparse
import json
import sys
from collections import defaultdict

EPS = 0.0015  # us: ts/dur are printed with 3 decimals


def load(path, errors):
    try:
        with open(path) as f:
            d = json.load(f)
    except (OSError, ValueError) as e:
        errors.append(f"{path}: not valid JSON: {e}")
        return []
    ev = d.get("traceEvents") if isinstance(d, dict) else d
    if not isinstance(ev, list):
        errors.append(f"{path}: no traceEvents list")
        return []
    return ev


def check_tracks(ev, errors, where):
    named = {(e["pid"], e["tid"]) for e in ev if e.get("ph") == "M" and e.get("name") == "thread_name"}
    tracks = defaultdict(list)
    open_b = defaultdict(list)
    for e in ev:
        ph = e.get("ph")
        for k in ("name", "ph", "pid", "tid"):
            if k not in e:
                errors.append(f"{where}: event without '{k}': {e}")
                return
        if ph == "M":
            continue
        if not isinstance(e.get("ts"), (int, float)):
            errors.append(f"{where}: event without a numeric ts: {e}")
            continue
        key = (e["pid"], e["tid"])
        if key not in named:
            errors.append(f"{where}: thread {key} has events but no thread_name")
            named.add(key)
        if ph == "X":
            if not isinstance(e.get("dur"), (int, float)) or e["dur"] < 0:
                errors.append(f"{where}: X event without a valid dur: {e}")
                continue
            tracks[key].append((e["ts"], e["ts"] + e["dur"], e["name"]))
        elif ph == "B":
            open_b[key].append(e)
        elif ph == "E":
            if not open_b[key]:
                errors.append(f"{where}: E without B on {key}: {e}")
            else:
                b = open_b[key].pop()
                tracks[key].append((b["ts"], e["ts"], b["name"]))
        elif ph not in ("i", "I", "C"):
            errors.append(f"{where}: unexpected phase {ph!r}")
    for key, st in open_b.items():
        for b in st:
            errors.append(f"{where}: B without E on {key}: {b['name']}")
    for key, spans in tracks.items():
        spans.sort(key=lambda s: (s[0], -s[1]))
        stack = []
        for s in spans:
            while stack and stack[-1][1] <= s[0] + EPS:
                stack.pop()
            if stack and s[1] > stack[-1][1] + EPS:
                errors.append(f"{where}: spans straddle on {key}: {stack[-1]} and {s}")
            stack.append(s)
    return tracks


def check_buckets(ev, errors, where):
    by_pid = defaultdict(list)
    for e in ev:
        if e.get("ph") == "X":
            by_pid[e["pid"]].append(e)
    nb = 0
    for pid, es in by_pid.items():
        flights = [e for e in es if e["name"] == "bucket.inflight"]
        rs = [e for e in es if e["name"] == "reduce_scatter" and "bucket" in e.get("args", {})]
        launches = [e for e in es if e["name"] == "bucket.launch"]
        if not flights:
            errors.append(f"{where}: rank {pid}: no bucket.inflight span (no bucket was reduced?)")
        used = set()
        for f in flights:
            k, lo, hi = f["args"]["bucket"], f["ts"], f["ts"] + f["dur"]
            m = [i for i, r in enumerate(rs) if i not in used and r["args"]["bucket"] == k
                 and r["ts"] >= lo - EPS and r["ts"] + r["dur"] <= hi + EPS]
            if len(m) != 1:
                errors.append(f"{where}: rank {pid}: bucket {k} in flight [{lo:.3f}, {hi:.3f}] holds {len(m)} "
                              f"reduce-scatters of its own (want 1)")
                continue
            r = rs[m[0]]
            used.add(m[0])
            if r["args"].get("bytes", 0) != f["args"].get("bytes"):
                errors.append(f"{where}: rank {pid}: bucket {k}: reduce-scatter of {r['args'].get('bytes')} bytes, "
                              f"bucket of {f['args'].get('bytes')}")
            nb += 1
        if len(used) != len(rs):
            errors.append(f"{where}: rank {pid}: {len(rs) - len(used)} bucket reduce-scatters outside any bucket's flight")
        if len(launches) < len(flights):
            errors.append(f"{where}: rank {pid}: {len(flights)} buckets in flight but {len(launches)} launches")
    return nb


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--buckets", action="store_true")
    ap.add_argument("--ranks", type=int, default=0, help="expect this many distinct pids over all files")
    ap.add_argument("--expect", default="", help="comma-separated event names that must occur")
    a = ap.parse_args()
    errors, allev = [], []
    for p in a.files:
        ev = load(p, errors)
        check_tracks(ev, errors, p)
        allev.extend(ev)
    pids = {e["pid"] for e in allev if "pid" in e}
    if a.ranks and len(pids) != a.ranks:
        errors.append(f"{len(pids)} ranks (pids) in the trace, expected {a.ranks}")
    names = {e.get("name") for e in allev}
    for n in filter(None, a.expect.split(",")):
        if n not in names:
            errors.append(f"no '{n}' event")
    nb = check_buckets(allev, errors, "trace") if a.buckets else 0
    nx = sum(1 for e in allev if e.get("ph") == "X")
    for e in errors[:40]:
        print("FAIL:", e)
    print(f"check_trace: {len(a.files)} file(s), {nx} spans, {len(pids)} rank(s), {nb} bucket flights checked: "
          f"{'PASS' if not errors else f'{len(errors)} FAILURES'}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
