#!/usr/bin/env python3
"""Every registered ctest has its own TIMEOUT, and every test that runs
mpirun/mpiexec has one no longer than 600 s: a hung collective must fail the
run, not stall CI.  Reads `ctest --show-only=json-v1` from the build dir."""
import json
import os
import subprocess
import sys

build = sys.argv[1]
out = subprocess.run(['ctest', '--show-only=json-v1'], cwd=build, capture_output=True, text=True, check=True)
tests = json.loads(out.stdout)['tests']
bad = []
for t in tests:
    props = {p['name']: p['value'] for p in t.get('properties', [])}
    timeout = props.get('TIMEOUT')
    cmd = ' '.join(os.path.basename(c) for c in t.get('command', []))
    mpi = 'mpirun' in cmd or 'mpiexec' in cmd
    if timeout is None or timeout <= 0:
        bad.append(f"{t['name']}: no TIMEOUT")
    elif mpi and timeout > 600:
        bad.append(f"{t['name']}: multi-rank test with TIMEOUT {timeout} > 600")
for b in bad:
    print(b)
print(f"{len(tests)} tests checked, {sum(1 for t in tests if 'mpi' in ' '.join(t.get('command', [])))} multi-rank")
sys.exit(1 if bad or not tests else 0)
