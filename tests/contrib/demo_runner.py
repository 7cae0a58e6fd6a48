"""One zero-demo job under mpirun, as the contrib tests run it (mics, zeropp,
onebit, reshard): the command line, the plugin search path, the log and
the summary, and what a failed run prints.  Standard library only.

The scripts pass their argparse namespace `a`, which has: mpirun, demo,
out (the folder for configs, logs and summaries), data (a corpus file or
empty) and plugin_dir (where the contrib plugins were built).
"""
import json
import os
import subprocess
import sys


def write_config(a, tag, cfg):
    """cfg (a dict) as <out>/<tag>.json; returns the path."""
    path = os.path.join(a.out, tag + ".json")
    with open(path, "w") as f:
        json.dump(cfg, f, indent=1)
    return path


def run_demo(a, tag, np_, cfg, steps, who, plugin=None, env=None, extra=(), expect_fail=False, timeout=300):
    """mpirun -np np_ zero-demo --config cfg --steps steps [--plugin plugin] ...

    cfg: a config path, or a dict (written to <out>/<tag>.json first).
    env: variables over os.environ (a value of None removes one); the
    plugin search path starts with a.plugin_dir.  The output goes to
    <out>/<tag>.log and the summary to <out>/<tag>.summary.json (a stale one
    is removed first).  Returns the summary with its "log" (the output), or,
    with expect_fail, (exit code, output).  A run that fails when it should
    not prints the end of its output and exits 2, naming `who` and the tag."""
    if isinstance(cfg, dict):
        cfg = write_config(a, tag, cfg)
    summ = os.path.join(a.out, tag + ".summary.json")
    log = os.path.join(a.out, tag + ".log")
    if os.path.exists(summ):
        os.remove(summ)
    cmd = [a.mpirun, "--allow-run-as-root", "--oversubscribe", "-np", str(np_), "--mca", "btl", "self,vader",
           a.demo, "--config", cfg, "--steps", str(steps), "--quiet", "--summary", summ]
    if plugin:
        cmd += ["--plugin", plugin]
    if a.data:
        cmd += ["--data", a.data]
    cmd += list(extra)
    full = dict(os.environ)
    old = full.get("ZERO_PLUGIN_PATH")
    full["ZERO_PLUGIN_PATH"] = a.plugin_dir + (":" + old if old else "")
    for k, v in (env or {}).items():
        if v is None:
            full.pop(k, None)
        else:
            full[k] = str(v)
    with open(log, "w") as lf:
        rc = subprocess.call(cmd, stdout=lf, stderr=subprocess.STDOUT, env=full, timeout=timeout)
    text = open(log).read()
    if expect_fail:
        return rc, text
    if rc != 0 or not os.path.exists(summ):
        sys.stdout.write(text[-3000:])
        print(f"{who}: run {tag} failed (exit {rc})")
        sys.exit(2)
    s = json.load(open(summ))
    s["log"] = text
    return s
