"""zero.torch at stage 3 with default stage-3 keys (issue 34 item 7): train,
evaluate (engine.eval(): its own gather order), "generate" (eval passes of
varying length through parts of the model) and read the weights with
engine.gathered_parameters() between steps, mid-window and at boundaries.
libzero must log no WARN line (check-no-warn.sh greps this process's
output), and the model must train.

    mpirun -np 2 python3 no_warn_torch.py [steps]

Exit 77 when torch is missing (ctest: skipped)."""
import os
import sys

try:
    import torch
    import torch.nn as nn
except ImportError:
    print("torch not importable by %s" % sys.executable)
    sys.exit(77)

import zero.torch as zt


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 64
    torch.set_num_threads(1)
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", 0))
    config = {
        "train_micro_batch_size_per_gpu": 16,
        "gradient_accumulation_steps": 2,
        "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.01}},
        "zero_optimization": {"stage": 3},
    }
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 4))
    teacher = nn.Linear(16, 4)
    engine, _, _, _ = zt.initialize(model, config)
    gen = torch.Generator().manual_seed(100 + rank)
    losses = []
    total = 0.0
    for micro in range(steps):
        x = torch.randn(16, 16, generator=gen)
        with torch.no_grad():
            y = torch.tanh(teacher(x))
        loss = nn.functional.mse_loss(engine(x), y)
        engine.backward(loss)
        engine.step()
        losses.append(float(loss))
        if micro % 4 == 3:  # after a boundary: evaluate, then "generate"
            engine.eval()
            with torch.no_grad():
                engine(x)
                for _ in range(micro % 3 + 1):  # a varying number of partial passes
                    model[2](model[1](model[0](x)))
            engine.train()
        if micro % 4 in (1, 3):  # mid-window and at a boundary
            with engine.gathered_parameters() as ps:
                total += sum(float(p.double().sum()) for p in ps)
    engine.close()
    first, last = sum(losses[:4]) / 4, sum(losses[-4:]) / 4  # means of 4 micro-batches
    if rank == 0:
        print("stage 3, default keys: loss %.4f -> %.4f; gathered_parameters sum %.6f" % (first, last, total))
    return 0 if last < first / 2 else 1


if __name__ == "__main__":
    sys.exit(main())
