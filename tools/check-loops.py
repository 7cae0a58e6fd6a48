#!/usr/bin/env python3
"""Fail when translation units of libzero depend on each other in a loop.

A node is one translation unit: foo.c together with its own header foo.h
(same folder, same name).  A depends on B when
  - A's .c or .h writes #include "B.h"  (headers with no .c of their own,
    such as engine.h, are contracts, not units: they add no edge), or
  - A's object file uses a symbol that B's object file defines (nm on the
    static library: calls and data references, so a loop that goes through
    a shared contract header is still seen).
Every strongly connected set of two or more units is a loop.  A loop is
tolerated only when each of its members matches one line of the known-loops
file (glob patterns on the unit's path without extension); any other loop,
or a known one that now reaches a unit outside its line, fails with the
edges that close it.

    check-loops.py --src DIR --lib libzero_static.a [--known FILE] [--nm NM] [--all]

Why: loops between files (the comm factory and its backends; api.c and
services.c) make every change ripple both ways and keep files from being
read, tested or replaced one at a time.  Exit 0: no new loop; 1: a loop
(printed); 2: usage or tool error.
"""
import argparse
import fnmatch
import os
import re
import subprocess
import sys

# The folders whose sources make up libzero (core/CMakeLists.txt).
LIB_DIRS = ["core", "core/ckpt", "core/optim", "backends/comm", "backends/device"]
INCLUDE_RE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.M)


def units(src):
    """{unit: [files]} for every .c/.h under LIB_DIRS; unit = path less extension."""
    out = {}
    for d in LIB_DIRS:
        full = os.path.join(src, d)
        for name in sorted(os.listdir(full)):
            if name.endswith((".c", ".h")):
                out.setdefault(os.path.join(d, name[:-2]), []).append(os.path.join(d, name))
    return out


def include_edges(src, unit_files):
    """(a, b) -> 'includes b.h' for direct includes of a unit's own header."""
    paired = {u for u, fs in unit_files.items() if u + ".c" in fs}
    edges = {}
    for u, files in unit_files.items():
        if u not in paired:
            continue  # a contract header with no unit behind it
        for f in files:
            with open(os.path.join(src, f), encoding="utf-8", errors="replace") as fh:
                text = fh.read()
            for inc in INCLUDE_RE.findall(text):
                cands = [os.path.normpath(os.path.join(os.path.dirname(f), inc))]
                cands += [os.path.normpath(os.path.join(d, inc)) for d in LIB_DIRS]
                for c in cands:
                    if c.endswith(".h") and c[:-2] in paired:
                        if c[:-2] != u:
                            edges.setdefault((u, c[:-2]), "%s includes %s" % (f, c))
                        break
    return edges


def symbol_edges(lib, unit_files, nm="nm"):
    """(a, b) -> 'a uses sym' from nm over the static library's members."""
    try:
        out = subprocess.run([nm, "-A", "-P", lib], check=True, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError) as ex:
        sys.exit("check-loops: nm %s failed: %s" % (lib, ex))
    by_base = {}
    for u, files in unit_files.items():
        for f in files:
            if f.endswith(".c"):
                by_base.setdefault(os.path.basename(f), []).append(u)
    member_re = re.compile(r"\[([^\]]+)\]:?$")
    defined, used = {}, {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        m = member_re.search(parts[0])
        if not m:
            continue
        member = m.group(1)  # api.c.o
        base = member[:-2] if member.endswith(".o") else member
        owners = by_base.get(base)
        if not owners or len(owners) != 1:
            continue  # not one of ours (or an ambiguous name): no edges
        unit, sym, kind = owners[0], parts[1], parts[2]
        if kind == "U":
            used.setdefault(unit, set()).add(sym)
        elif kind.isupper() and kind not in "UVW":
            defined.setdefault(sym, unit)
    edges = {}
    for unit, syms in used.items():
        for sym in sorted(syms):
            owner = defined.get(sym)
            if owner and owner != unit:
                edges.setdefault((unit, owner), "%s uses %s" % (unit, sym))
    return edges


def loops(nodes, edges):
    """Strongly connected sets of two or more nodes (Tarjan, iterative)."""
    succ = {n: sorted({b for (a, b) in edges if a == n}) for n in nodes}
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                index[v] = low[v] = counter[0]
                counter[0] += 1
                stack.append(v)
                on.add(v)
            if i < len(succ[v]):
                work.append((v, i + 1))
                w = succ[v][i]
                if w not in index:
                    work.append((w, 0))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
    return out


def read_known(path):
    known = []
    if not path:
        return known
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            line = line.split("#", 1)[0].split()
            if line:
                known.append(line)
    return known


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--src", required=True, help="source tree root")
    ap.add_argument("--lib", required=True, help="libzero_static.a (objects of the library)")
    ap.add_argument("--known", help="known loops: one line a loop, glob patterns of its units")
    ap.add_argument("--nm", default="nm", help="the nm to run (default: nm on PATH)")
    ap.add_argument("--all", action="store_true", help="also list the known loops found")
    a = ap.parse_args()
    unit_files = units(a.src)
    edges = include_edges(a.src, unit_files)
    for k, why in symbol_edges(a.lib, unit_files, a.nm).items():
        edges.setdefault(k, why)
    known = read_known(a.known)
    bad = 0
    for comp in loops(set(unit_files), edges):
        line = next((k for k in known if all(any(fnmatch.fnmatch(u, p) for p in k) for u in comp)), None)
        if line and not a.all:
            continue
        tag = "known loop (%s)" % " ".join(line) if line else "LOOP"
        print("%s: %s" % (tag, " <-> ".join(comp)))
        members = set(comp)
        for (x, y), why in sorted(edges.items()):
            if x in members and y in members:
                print("    %s -> %s: %s" % (x, y, why))
        bad += 0 if line else 1
    if bad:
        print("check-loops: %d loop(s) between translation units.  Untie them (a small header the "
              "caller depends on and the callee does not, or the shared helper moved into its own "
              "file); a loop kept on purpose goes into %s with a reason." % (bad, a.known or "--known"))
        return 1
    print("check-loops: no loop between translation units beyond the %d known line(s)" % len(known))
    return 0


if __name__ == "__main__":
    sys.exit(main())
