"""A complete zero.torch training script: an MLP regressing a fixed random
teacher, DeepSpeed-style.

    mpirun -np 2 python3 train_mlp.py --stage 2 [--steps 200] [--ckpt DIR [--resume]]

With --ckpt the run ends with a checkpoint (DeepSpeed's save_checkpoint,
the step in its client state: the data of a step is a function of the
step and the rank, so the step is all a resumed run needs) and loads it
back; --resume starts from the checkpoint DIR/latest names, where there is
one, and trains on to --steps.
(ZERO_LIBRARY=<build>/core/libzero.so.1 PYTHONPATH=bindings/python when libzero
is not installed.)  Exits non-zero if the loss did not fall to a fifth."""
import argparse
import os
import sys

try:
    import torch
    import torch.nn as nn
except ImportError:  # make test reports it skipped
    print("torch not importable by %s" % sys.executable)
    sys.exit(77)

import zero.torch as zt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stage", default="2", help="0, 1, 2, 3 or offload")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--ckpt", default=None, help="save a checkpoint here at the end, then load it back")
    ap.add_argument("--resume", action="store_true", help="start from the checkpoint in --ckpt, if there is one")
    ap.add_argument("--expect-start", type=int, default=None, help="(tests) fail unless the run starts at this step")
    a = ap.parse_args()
    torch.set_num_threads(1)
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", 0))
    config = {
        "train_micro_batch_size_per_gpu": 32,
        "gradient_clipping": 1.0,
        "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.01}},
        "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 3e-3,
                                                     "warmup_num_steps": 20}},
        "zero_optimization": {"stage": 2 if a.stage == "offload" else int(a.stage)},
    }
    if a.stage == "offload":
        config["zero_optimization"]["offload_optimizer"] = {"device": "cpu"}

    torch.manual_seed(0)  # every rank builds the same initial model
    model = nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 4))
    teacher = nn.Linear(16, 4)
    engine, optimizer, _, _ = zt.initialize(model, config)

    start = 0
    if a.ckpt and a.resume:
        path, client = engine.load_checkpoint(a.ckpt)  # (None, None): nothing saved there yet
        if path is not None:
            start = client["step"]
            if rank == 0:
                print("resumed from %s at step %d" % (path, start))
    if a.expect_start is not None and start != a.expect_start:
        print("started at step %d, expected %d" % (start, a.expect_start))
        return 1
    first = last = None
    for step in range(start, a.steps):
        gen = torch.Generator().manual_seed((100 + rank) * 1000003 + step)  # each rank its own data, per step
        x = torch.randn(32, 16, generator=gen)
        with torch.no_grad():
            y = torch.tanh(teacher(x))
        loss = nn.functional.mse_loss(engine(x), y)
        engine.backward(loss)
        r = engine.step()
        first = float(loss) if first is None else first
        last = float(loss)
        if rank == 0 and (step % 50 == 0 or step == a.steps - 1):
            print("step %4d  loss %.5f  grad norm %.4f  lr %.2e" % (step, last, r.grad_norm, r.lr))
    if a.ckpt:
        # the same client state on every rank (libzero keeps global rank 0's, and warns if they differ)
        engine.save_checkpoint(a.ckpt, client_state={"step": a.steps})
        path, client = engine.load_checkpoint(a.ckpt)
        if client["step"] != a.steps:
            print("the checkpoint's client state came back as %r" % (client,))
            return 1
        if rank == 0:
            print("checkpoint %s: step %d in its client state" % (path, client["step"]))
    st = engine.state
    if rank == 0 and first is not None:
        print("%s on %d ranks: loss %.4f -> %.4f (steps %d to %d); libzero model-state peak %d bytes" % (
            st["plugin"], st["world_size"], first, last, start, a.steps - 1,
            sum(st["memory"]["peak_total"].values())))
    engine.close()
    # a whole run must bring the loss to a fifth; a resumed one only continues
    return 0 if first is None or start > 0 or last < first / 5 else 1


if __name__ == "__main__":
    sys.exit(main())
