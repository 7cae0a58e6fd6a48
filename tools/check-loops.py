#!/usr/bin/env python3
"""Fail when libzero's files depend on a higher floor, or on each other in a loop.

Floors, from the ground up (docs/architecture.md, "Layers"):

    abi < base < kernels < backends < core < kit < plugins = plugins-contrib

abi/ holds the public headers; base/ what every floor uses (log, trace,
status text, memory accounting, shared blocks); kernels/ the CPU and CUDA
kernels; backends/ comm and device; core/ the engine; kit/ the installed
plugin kit; plugins/ and plugins-contrib/ the strategies (each folder one
.so; plugins/common is compiled into several).  A folder that does not exist
(yet) is simply empty.

A node is one translation unit: foo.c (or foo.cu) together with its own
header foo.h (same folder, same name).  Edges:
  - includes: a file writes #include "x.h" (resolved by bare name: the
    file's own folder, then its own top-level folder, then the library's
    folders, then abi/);
  - symbols: an object file uses a symbol that another object of the same
    link unit defines (nm: calls and data references).  libzero's objects
    come from --lib (the static twin, libzero_static.a); each plugin's from
    --plugin-objs (folders or globs of object files, one link unit per
    CMake target folder <target>.dir), so a plugin's edges are read from
    its own objects.

Two checks, both on every edge:
  1. Floors: no file includes a file on a higher floor, and no object uses a
     symbol defined on a higher floor.  Nothing is allowed here; a lower
     floor gets what it needs from a higher one as a parameter or callback
     when it is created.  Every upward edge is printed.
  2. Loops: every strongly connected set of two or more units (unit edges:
     an include of another unit's own header -- headers with no .c of their
     own, such as engine.h, are contracts and add no loop edge -- or a
     symbol use) fails, with the edges that close it, unless each member
     matches one line of the --known file (glob patterns on the unit's path
     without extension).  CI passes none: no loop is allowed (the option
     remains for a branch that unties one loop at a time).

    check-loops.py --src DIR --lib libzero_static.a [--plugin-objs DIR|GLOB ...]
                   [--known FILE] [--nm NM] [--all] [--floor-report]

--floor-report prints, per pair of folders (from -> to, different folders),
how many include lines and how many (unit, symbol) uses go that way, marks
the upward ones, and totals them; it does not change the exit status.  The
script reads any tree, so the numbers of an older commit come from running
it on that commit's sources and build (issue 32: at b8e68df, 65 edges up a
floor -- backends -> core 21 includes + 42 symbol uses, kernels/cuda ->
core/optim 2 includes; after the floors, 0).

Why: loops between files make every change ripple both ways and keep files
from being read, tested or replaced one at a time; a call up a floor is the
same tie at the scale of folders.  Exit 0: no upward edge and no loop
beyond the known lines; 1: one of them (printed); 2: usage or tool error.
"""
import argparse
import fnmatch
import glob
import os
import re
import subprocess
import sys

# The floors, lowest first; plugins and plugins-contrib share the top one.
FLOORS = ["abi", "base", "kernels", "backends", "core", "kit", "plugins", "plugins-contrib"]
FLOOR_RANK = {"abi": 0, "base": 1, "kernels": 2, "backends": 3, "core": 4, "kit": 5,
              "plugins": 6, "plugins-contrib": 6}
PLUGIN_ROOTS = ("plugins", "plugins-contrib")
SOURCE_EXT = (".c", ".cu")
HEADER_EXT = (".h", ".cuh")
INCLUDE_RE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.M)


def top(path):
    return path.split("/", 1)[0]


def floor_of(path):
    return FLOOR_RANK.get(top(path), -1)


def folder_of(path):
    return os.path.dirname(path)


def scan(src):
    """[files] (paths relative to src) of every floor folder, walked recursively."""
    files = []
    for root in FLOORS:
        full = os.path.join(src, root)
        if not os.path.isdir(full):
            continue
        for d, subdirs, names in os.walk(full):
            subdirs.sort()
            for name in sorted(names):
                if name.endswith(SOURCE_EXT + HEADER_EXT):
                    files.append(os.path.relpath(os.path.join(d, name), src))
    return files


def unit_of(path):
    return os.path.splitext(path)[0]


def units(files):
    """{unit: [files]}; unit = path less extension."""
    out = {}
    for f in files:
        out.setdefault(unit_of(f), []).append(f)
    return out


def paired_units(unit_files):
    """Units with a source file of their own (a header alone is a contract)."""
    return {u for u, fs in unit_files.items() if any(f.endswith(SOURCE_EXT) for f in fs)}


def search_dirs(f, all_dirs):
    """Folders an include in f is looked up in, in order."""
    own = folder_of(f)
    t = top(f)
    same_top = [d for d in all_dirs if top(d) == t and d != own]
    if t in PLUGIN_ROOTS:  # a plugin sees its own folder, plugins/common and abi/
        lib = []
    else:
        lib = [d for d in all_dirs if top(d) not in PLUGIN_ROOTS and top(d) != t and top(d) != "abi"]
    return [own] + same_top + lib + [d for d in all_dirs if top(d) == "abi"]


def include_lines(src, files):
    """[(file, included file)] for every #include "x" that resolves in the tree."""
    present = set(files)
    all_dirs = sorted({folder_of(f) for f in files})
    out = []
    for f in files:
        with open(os.path.join(src, f), encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        dirs = search_dirs(f, all_dirs)
        for inc in INCLUDE_RE.findall(text):
            for d in dirs:
                c = os.path.normpath(os.path.join(d, inc))
                if c in present:
                    if c != f:
                        out.append((f, c))
                    break
    return out


def nm_lines(nm, paths):
    try:
        return subprocess.run([nm, "-A", "-P"] + paths, check=True, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError) as ex:
        sys.exit("check-loops: %s %s failed: %s" % (nm, " ".join(paths[:3]), ex))


def symbol_uses(groups, unit_files, nm):
    """[(user unit, definer unit, symbol)] within each link unit.

    groups: [(name, [object or archive paths], candidate roots)].  An object
    is matched to its source by basename (foo.c.o -> foo.c) among the units
    under the candidate roots; basenames are unique in the tree."""
    member_re = re.compile(r"\[([^\]]+)\]:?$")
    uses = []
    for _name, paths, roots in groups:
        by_base = {}
        for u, fs in unit_files.items():
            if top(u) not in roots:
                continue
            for f in fs:
                if f.endswith(SOURCE_EXT):
                    by_base.setdefault(os.path.basename(f), []).append(u)
        defined, used = {}, {}
        for line in nm_lines(nm, paths).splitlines():
            parts = line.split()
            if len(parts) < 3:
                continue
            m = member_re.search(parts[0])
            obj = m.group(1) if m else parts[0].rstrip(":")
            base = os.path.basename(obj)
            base = base[:-2] if base.endswith(".o") else base
            owners = by_base.get(base)
            if not owners or len(owners) != 1:
                continue  # not one of ours (or an ambiguous name): no edges
            unit, sym, kind = owners[0], parts[1], parts[2]
            if kind == "U":
                used.setdefault(unit, set()).add(sym)
            elif kind.isupper() and kind not in "UVW":
                defined.setdefault(sym, unit)
        for unit, syms in used.items():
            for sym in sorted(syms):
                owner = defined.get(sym)
                if owner and owner != unit:
                    uses.append((unit, owner, sym))
    return uses


def plugin_groups(specs):
    """One link unit per CMake target folder (<target>.dir) found under the
    given folders or globs; its objects found recursively."""
    by_target = {}
    for spec in specs:
        for hit in sorted(glob.glob(spec)) or []:
            objs = [hit] if hit.endswith(".o") else [
                os.path.join(d, n) for d, _s, ns in os.walk(hit) for n in ns if n.endswith(".o")]
            for o in objs:
                m = re.search(r"([^/]+)\.dir/", o)
                key = m.group(1) if m else os.path.dirname(o)
                by_target.setdefault(key, set()).add(o)
    return [(k, sorted(v), PLUGIN_ROOTS) for k, v in sorted(by_target.items())]


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


def floor_report(incs, uses):
    """Per (from folder, to folder): include lines and (unit, symbol) uses."""
    pairs = {}
    for f, c in incs:
        a, b = folder_of(f), folder_of(c)
        if a != b:
            pairs.setdefault((a, b), [0, 0])[0] += 1
    for u, o, _sym in uses:
        a, b = folder_of(u), folder_of(o)
        if a != b:
            pairs.setdefault((a, b), [0, 0])[1] += 1
    print("floor report: from -> to: includes + symbol uses (^ = up a floor)")
    up_inc = up_sym = bc_inc = bc_sym = 0
    for (a, b), (ni, ns) in sorted(pairs.items()):
        up = floor_of(b) > floor_of(a)
        print("  %s %-24s -> %-24s %4d + %4d" % ("^" if up else " ", a, b, ni, ns))
        if up:
            up_inc += ni
            up_sym += ns
        if top(a) == "backends" and top(b) == "core":
            bc_inc += ni
            bc_sym += ns
    print("floor report: backends -> core: %d includes + %d symbol uses = %d" % (bc_inc, bc_sym, bc_inc + bc_sym))
    print("floor report: up a floor (any): %d includes + %d symbol uses = %d" % (up_inc, up_sym, up_inc + up_sym))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 epilog="Floors: " + " < ".join(FLOORS[:-1]) + " = " + FLOORS[-1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", required=True, help="source tree root")
    ap.add_argument("--lib", required=True, help="libzero_static.a (objects of the library)")
    ap.add_argument("--plugin-objs", action="extend", nargs="+", default=[], metavar="DIR|GLOB",
                    help="object files of the plugins: folders or globs (e.g. "
                         "BUILD/plugins/*/CMakeFiles/*.dir), one link unit per <target>.dir; several may follow, "
                         "and the option may repeat")
    ap.add_argument("--known", help="known loops: one line a loop, glob patterns of its units")
    ap.add_argument("--nm", default="nm", help="the nm to run (default: nm on PATH)")
    ap.add_argument("--all", action="store_true", help="also list the known loops found")
    ap.add_argument("--floor-report", action="store_true",
                    help="print include and symbol edges per pair of folders (upward ones marked)")
    a = ap.parse_args()
    if not os.path.isdir(a.src):
        ap.error("--src %s is not a folder" % a.src)
    files = scan(a.src)
    unit_files = units(files)
    paired = paired_units(unit_files)
    incs = include_lines(a.src, files)
    lib_roots = tuple(r for r in FLOORS if r not in PLUGIN_ROOTS)
    groups = [("libzero", [a.lib], lib_roots)] + plugin_groups(a.plugin_objs)
    uses = symbol_uses(groups, unit_files, a.nm)

    if a.floor_report:
        floor_report(incs, uses)

    # 1. floors
    up = 0
    for f, c in incs:
        if floor_of(c) > floor_of(f):
            print("UPWARD: %s (%s) includes %s (%s)" % (f, top(f), c, top(c)))
            up += 1
    for u, o, sym in uses:
        if floor_of(o) > floor_of(u):
            print("UPWARD: %s (%s) uses %s of %s (%s)" % (u, top(u), sym, o, top(o)))
            up += 1

    # 2. loops
    edges = {}
    for f, c in incs:
        u, v = unit_of(f), unit_of(c)
        if u in paired and v in paired and u != v:
            edges.setdefault((u, v), "%s includes %s" % (f, c))
    for u, o, sym in uses:
        edges.setdefault((u, o), "%s uses %s" % (u, sym))
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
    status = 0
    if up:
        print("check-loops: %d edge(s) up a floor (%s).  A lower floor gets what it needs from a higher "
              "one as a parameter or callback when it is created." % (up, " < ".join(FLOORS)))
        status = 1
    if bad:
        print("check-loops: %d loop(s) between translation units.  Untie them (a small header the "
              "caller depends on and the callee does not, or the shared helper moved into its own "
              "file)." % bad)
        status = 1
    if status == 0:
        print("check-loops: %d units, %d link unit(s): no edge up a floor, no loop beyond the %d known line(s)"
              % (len(unit_files), len(groups), len(known)))
    return status


if __name__ == "__main__":
    sys.exit(main())
