"""zero.torch broadcast_buffers (1.8), under mpirun -np N.

A BatchNorm with momentum 0 keeps its running statistics through a
forward, so what a forward starts from is what it leaves: each rank sets
its running mean to rank + 1, runs one training step, and
  * broadcast_buffers=True: every rank holds rank 0's (1.0), as torch DDP's
    default gives;
  * broadcast_buffers=False (the default): each keeps its own (rank + 1),
    which is also what shows the check can fail;
  * an eval-mode forward does not broadcast (rank + 5 stays);
at stage 2 and 3.
Usage: mpirun -np N python3 test_torch_buffers.py"""
import sys

from torch_test_util import RANK, WORLD, check, failures  # exits 77 (skipped) without torch
import torch
import torch.nn as nn

import zero.torch as zt



def model():
    torch.manual_seed(7)
    return nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6, momentum=0.0), nn.Tanh(), nn.Linear(6, 2))


def run(stage, broadcast):
    cfg = {"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": stage},
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}}
    engine, _, _, _ = zt.initialize(model(), cfg, broadcast_buffers=broadcast)
    bn = engine.module[1]
    with torch.no_grad():
        bn.running_mean.fill_(RANK + 1.0)
    x = torch.randn(4, 4, generator=torch.Generator().manual_seed(RANK))
    engine.backward(engine(x).pow(2).mean())
    engine.step()
    got = float(bn.running_mean[0])
    want = 1.0 if broadcast else RANK + 1.0
    check(got == want and bool((bn.running_mean == want).all()),
          "stage %d broadcast_buffers=%s: running mean %r after a training forward, want %r"
          % (stage, broadcast, bn.running_mean.tolist(), want))
    engine.eval()
    with torch.no_grad():
        bn.running_mean.fill_(RANK + 5.0)
        engine(x)
    check(bool((bn.running_mean == RANK + 5.0).all()), "stage %d: an eval forward broadcast the buffers" % stage)
    engine.close()
    return got


def main():
    for stage in (2, 3):
        on, off = run(stage, True), run(stage, False)
        if RANK == 0:
            print("N=%d stage %d: running mean after a forward: broadcast_buffers=True -> %g on every rank, "
                  "False -> each rank its own (rank 0: %g)" % (WORLD, stage, on, off))
    if failures:
        return 1
    if RANK == 0:
        print("test_torch_buffers: all checks passed on %d ranks" % WORLD)
    return 0


if __name__ == "__main__":
    sys.exit(main())
