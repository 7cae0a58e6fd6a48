"""Start N processes the way torchrun does (RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1, a free MASTER_PORT; no MPI
variables), each running `script args...`, and wait for them with a timeout.
Debian's torch 1.13 `python3 -m torch.distributed.run` fails on Python 3.11
before starting any worker (AttributeError in elastic/multiprocessing
to_map), so the tests launch this way; a working torchrun sets the same
environment.  Exit status: 77 (skipped) when torch is not importable or
every rank skipped, else the worst rank's.
Usage: run_torch_group.py N TIMEOUT_S script [args...]"""
import os
import socket
import subprocess
import sys
import time

try:
    import torch  # noqa: F401
except ImportError:
    print("SKIPPED: torch not importable by %s" % sys.executable)
    sys.exit(77)

n, timeout, script, args = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3], sys.argv[4:]
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
base = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMI", "PMIX_", "MPI_LOCAL"))}
base.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(n), LOCAL_WORLD_SIZE=str(n))
procs = [subprocess.Popen([sys.executable, script] + args, env=dict(base, RANK=str(r), LOCAL_RANK=str(r)))
         for r in range(n)]
deadline = time.time() + timeout
codes = []
for p in procs:
    try:
        codes.append(p.wait(timeout=max(1.0, deadline - time.time())))
    except subprocess.TimeoutExpired:
        codes.append(124)
for p in procs:
    if p.poll() is None:
        p.kill()
        p.wait()
if codes and all(c == 77 for c in codes):
    sys.exit(77)
print("run_torch_group: %d ranks, exit codes %s" % (n, codes))
sys.exit(max(codes, key=lambda c: (c != 0, c)) if any(codes) else 0)
