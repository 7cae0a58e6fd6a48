#!/usr/bin/env python3
"""The plugin kit is a floor between core/ and plugins/ (issue 32): every
kit/ source includes only the ABI headers (zero.h, zero_plugin.h), its own
headers (installed zero_kit*.h, private ones) and C standard headers, and libzero_kit.a calls nothing
of libzero's (every undefined symbol of its objects is defined by another
kit object or is not a zero_* name): the core is reached only through the
services table.
Usage: check_kit_floor.py --kit-dir DIR --lib libzero_kit.a [--nm NM]
"""
import argparse
import os
import re
import subprocess
import sys

# C11 and the POSIX threads / time headers a plugin may use on its own
STD = {"assert.h", "errno.h", "float.h", "inttypes.h", "limits.h", "math.h", "stdalign.h", "stdarg.h",
       "stdatomic.h", "stdbool.h", "stddef.h", "stdint.h", "stdio.h", "stdlib.h", "string.h", "threads.h",
       "time.h", "pthread.h", "sched.h", "unistd.h"}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--kit-dir", required=True)
    p.add_argument("--lib", required=True)
    p.add_argument("--nm", default="nm")
    a = p.parse_args()
    bad = []
    # its own headers: the installed zero_kit*.h and private ones (gather_internal.h)
    own = {f for f in os.listdir(a.kit_dir) if f.endswith(".h")}
    for f in sorted(os.listdir(a.kit_dir)):
        if not f.endswith((".c", ".h")):
            continue
        text = open(os.path.join(a.kit_dir, f), encoding="utf-8").read()
        for q, inc in re.findall(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"]+)[>"]', text, re.M):
            ok = inc in STD if q == "<" else inc in ("zero.h", "zero_plugin.h") or inc in own
            if not ok:
                close = ">" if q == "<" else '"'
                bad.append(f"kit/{f} includes {q}{inc}{close}: the kit includes only abi/ and its own headers")
    out = subprocess.run([a.nm, "-A", a.lib], capture_output=True, text=True, check=True).stdout
    defined, undefined = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[-2] == "U":
            undefined.add(parts[-1])
        elif len(parts) >= 3 and parts[-2] in "TDBRtdbr":
            defined.add(parts[-1])
    for sym in sorted(undefined - defined):
        if sym.startswith("zero"):
            bad.append(f"libzero_kit.a needs {sym}: the kit calls the core only through the services table")
    for b in bad:
        print("FAIL:", b)
    print("kit-floor:", "OK" if not bad else f"{len(bad)} violation(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
