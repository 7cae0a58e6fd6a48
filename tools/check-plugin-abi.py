#!/usr/bin/env python3
"""Fail where the plugin ABI's revisions leak out of their one file.

docs/plugin-abi.md: core/plugin_abi.c is the only place that knows a plugin
may be built against an older revision, and the core calls plain functions,
never its own services table.  This reads the sources and reports, as
file:line, every
  - call through the engine's services table in the library (`e->svc.f(`,
    `svc->f(` ...) outside core/services.c (which fills it) and
    core/plugin_abi.c (which adapts it);
  - revision or size check outside core/plugin_abi.c on what a plugin hands
    over: ZERO_SERVICES_HAS, a revision-1 type (zero_services_v1,
    zero_plugin_table_v1), or `struct_size` of a zero_bucket_spec /
    zero_part_step / zero_opt_range / zero_quant_spec / plugin table, in
    the library, the plugin kit and the in-tree and contributed plugins.
Tests, the frozen 1.0 headers and the public header itself are not read.

    check-plugin-abi.py --src DIR      exit 0: clean; 1: findings; 2: usage
"""
import argparse
import os
import re
import sys

LIBRARY = ["base", "kernels", "backends", "core"]
PLUGIN_SIDE = ["kit", "plugins", "plugins-contrib", "examples/plugin-template"]
ADAPTER = {"core/plugin_abi.c", "core/plugin_abi.h"}
FILLS_TABLE = {"core/services.c"}

SVC_CALL = re.compile(r"\b(?:e|b->e|eng|engine)->svc\.\w+\s*\(|\bsvc_v1\.\w+\s*\(")
REVISION = re.compile(r"\bZERO_SERVICES_HAS\b|\bzero_services_v1\b|\bzero_plugin_table_v[12]\b")
STRUCT_SIZE = re.compile(r"\b(spec|ps|r|q|t|table)->struct_size\b")


def sources(root, folders):
    for d in folders:
        top = os.path.join(root, d)
        if not os.path.isdir(top):
            continue
        for dirpath, _, files in os.walk(top):
            for f in sorted(files):
                if f.endswith((".c", ".h", ".cu", ".cuh")):
                    full = os.path.join(dirpath, f)
                    yield os.path.relpath(full, root), full


def strip_comments(text):
    # keep line numbers: replace comment bodies by spaces/newlines
    def blank(m):
        return re.sub(r"[^\n]", " ", m.group(0))
    text = re.sub(r"/\*.*?\*/", blank, text, flags=re.S)
    return re.sub(r"//[^\n]*", blank, text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", required=True)
    a = ap.parse_args()
    if not os.path.isdir(os.path.join(a.src, "core")):
        print(f"check-plugin-abi: {a.src} has no core/", file=sys.stderr)
        return 2
    findings = []
    for rel, full in sources(a.src, LIBRARY + PLUGIN_SIDE):
        if rel in ADAPTER:
            continue
        with open(full, encoding="utf-8", errors="replace") as fh:
            lines = strip_comments(fh.read()).split("\n")
        in_lib = rel.split("/")[0] in LIBRARY
        for n, line in enumerate(lines, 1):
            if in_lib and rel not in FILLS_TABLE and SVC_CALL.search(line):
                findings.append(f"{rel}:{n}: the core calls through its own services table: {line.strip()}")
            if REVISION.search(line):
                findings.append(f"{rel}:{n}: a plugin ABI revision check outside core/plugin_abi.c: {line.strip()}")
            elif in_lib and STRUCT_SIZE.search(line) and "sizeof" not in line:
                findings.append(f"{rel}:{n}: struct_size of a plugin's struct read outside core/plugin_abi.c: "
                                f"{line.strip()}")
    for f in findings:
        print(f)
    print(f"check-plugin-abi: {len(findings)} finding(s)")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
