#!/usr/bin/env python3
"""The fault catalogue is one place: every row of tests/faults/README.md's
table names ctest(s) in its "test" column, and each must exist in the build
and carry the `faults` label (so `ctest -L faults` runs the whole
catalogue).  Also fails if a `faults`-labelled test is in no row.

usage: catalogue_check.py --readme tests/faults/README.md --build BUILD_DIR
"""
import argparse
import re
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--readme", required=True)
    ap.add_argument("--build", required=True)
    a = ap.parse_args()
    rows, named = 0, set()
    for ln in open(a.readme):
        if not ln.startswith("|") or ln.startswith("| ---") or ln.startswith("| case"):
            continue
        cols = [c.strip() for c in ln.strip().strip("|").split("|")]
        if len(cols) < 4:
            continue
        rows += 1
        tests = re.findall(r"`([A-Za-z0-9_.]+)`", cols[1])
        if not tests:
            print("row without a test: %s" % cols[0])
            return 1
        named.update(tests)
    out = subprocess.run(["ctest", "-N", "-L", "^faults$"], cwd=a.build, capture_output=True, text=True).stdout
    labelled = set(re.findall(r"Test\s+#\d+: (\S+)", out))
    missing = sorted(t for t in named if t not in labelled)
    unlisted = sorted(t for t in labelled if t not in named and t != "faults_catalogue")
    print("%d catalogue rows, %d tests named, %d tests labelled faults" % (rows, len(named), len(labelled)))
    for t in missing:
        print("named in the catalogue but not a ctest labelled faults: %s" % t)
    for t in unlisted:
        print("labelled faults but in no catalogue row: %s" % t)
    return 1 if missing or unlisted or rows == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
