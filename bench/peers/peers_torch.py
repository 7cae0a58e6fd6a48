"""One PyTorch-side contender of bench/peers (run under mpirun by run-peers.sh):
train the bench/peers MLP (the data file's initial weights and batches, see
peers_data.h) for STEPS steps and print one JSON line (rank 0).

  mode: ddp-adamw | ddp-zero-redundancy | fsdp-shard-grad-op | fsdp-full-shard |
        deepspeed-stage1 | deepspeed-stage2 | zero-torch-stage1 | zero-torch-stage2
  mpirun -np 2 python peers_torch.py ddp-adamw --data FILE --mb 16 --steps 30 --warmup 5 --threads 1

Same optimizer everywhere: AdamW(lr 1e-4, betas (0.9, 0.999), eps 1e-8, weight
decay 0.01), fp32, gradients averaged over the ranks, gloo for torch.distributed.
"""
import argparse
import json
import os
import resource
import statistics
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn

RANK = int(os.environ.get("OMPI_COMM_WORLD_RANK", 0))
WORLD = int(os.environ.get("OMPI_COMM_WORLD_SIZE", 1))
LR, BETAS, EPS, WD = 1e-4, (0.9, 0.999), 1e-8, 0.01


def read_data(path):
    hdr = np.fromfile(path, dtype=np.int32, count=6)
    if hdr[0] != 0x5a524550:
        raise SystemExit("%s: not a bench/peers data file" % path)
    width, layers, rows, pool = (int(v) for v in hdr[1:5])
    raw = np.fromfile(path, dtype=np.float32, offset=24)
    n = layers * (width * width + width)
    params = torch.from_numpy(raw[:n].copy())
    nb = pool * rows * width
    x = torch.from_numpy(raw[n:n + nb].copy()).view(pool, rows, width)
    y = torch.from_numpy(raw[n + nb:n + 2 * nb].copy()).view(pool, rows, width)
    return width, layers, params, x, y


def build_model(width, layers, flat):
    mods = []
    for _ in range(layers):
        mods += [nn.Linear(width, width), nn.Tanh()]
    model = nn.Sequential(*mods)
    off = 0
    with torch.no_grad():
        for p in model.parameters():  # weight [out][in], then bias: the file's order
            p.copy_(flat[off:off + p.numel()].view(p.shape))
            off += p.numel()
    return model


def ds_config(stage, mb, bucket):
    return {"train_micro_batch_size_per_gpu": mb, "gradient_accumulation_steps": 1, "steps_per_print": 10 ** 6,
            "optimizer": {"type": "AdamW", "params": {"lr": LR, "betas": list(BETAS), "eps": EPS,
                                                      "weight_decay": WD, "torch_adam": True}},
            "zero_optimization": {"stage": stage, "overlap_comm": True, "contiguous_gradients": True,
                                  "reduce_bucket_size": bucket, "allgather_bucket_size": bucket}}


def main():
    import faulthandler
    faulthandler.dump_traceback_later(int(os.environ.get("BENCH_HANG_S", "240")), exit=True)  # a hang fails
    ap = argparse.ArgumentParser()
    ap.add_argument("mode")
    ap.add_argument("--data", required=True)
    ap.add_argument("--mb", type=int, default=16)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--bucket", type=int, default=1 << 20)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29611")
    os.environ.update(RANK=str(RANK), WORLD_SIZE=str(WORLD), LOCAL_RANK=str(RANK), LOCAL_SIZE=str(WORLD))
    width, layers, flat, xs, ys = read_data(a.data)
    prof = []  # per step: forward, backward, (zero-torch: of which Python grad hooks), optimizer step; seconds
    hook_t = [0.0]
    model = build_model(width, layers, flat)
    nparams = sum(p.numel() for p in model.parameters())
    mode = a.mode
    if mode.startswith("deepspeed"):
        import deepspeed
        deepspeed.init_distributed(dist_backend="gloo", auto_mpi_discovery=False)
    else:
        dist.init_process_group("gloo", rank=RANK, world_size=WORLD)
    base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    if mode in ("ddp-adamw", "ddp-zero-redundancy"):
        net = nn.parallel.DistributedDataParallel(model)
        if mode == "ddp-adamw":
            opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=BETAS, eps=EPS, weight_decay=WD)
        else:
            from torch.distributed.optim import ZeroRedundancyOptimizer
            opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW, lr=LR,
                                          betas=BETAS, eps=EPS, weight_decay=WD)

        fwd = lambda x, y: nn.functional.mse_loss(net(x), y)
        bwd = lambda loss: (opt.zero_grad(set_to_none=True), loss.backward())
        upd = opt.step
    elif mode.startswith("fsdp"):
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, ShardingStrategy
        strat = ShardingStrategy.SHARD_GRAD_OP if mode == "fsdp-shard-grad-op" else ShardingStrategy.FULL_SHARD
        net = FSDP(model, sharding_strategy=strat, device_id=torch.device("cpu"), use_orig_params=False)
        opt = torch.optim.AdamW(net.parameters(), lr=LR, betas=BETAS, eps=EPS, weight_decay=WD)

        fwd = lambda x, y: nn.functional.mse_loss(net(x), y)
        bwd = lambda loss: (opt.zero_grad(set_to_none=True), loss.backward())
        upd = opt.step
    elif mode.startswith("deepspeed"):
        import deepspeed
        stage = int(mode[-1])
        engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                               config=ds_config(stage, a.mb, a.bucket))

        fwd = lambda x, y: nn.functional.mse_loss(engine(x), y)
        bwd = engine.backward
        upd = engine.step
    elif mode.startswith("zero-torch"):
        import zero.torch as zt
        cfg = ds_config(int(mode[-1]), a.mb, a.bucket)
        del cfg["optimizer"]["params"]["torch_adam"]
        engine, _, _, _ = zt.initialize(model, cfg, param_storage=os.environ.get("ZERO_TORCH_STORAGE", "host"))
        # where the time goes: forward, backward (of which inside the Python
        # gradient hooks), zero_step; libzero's own phases from step_timing()
        grad_ready = engine._grad_ready

        def timed_grad_ready(p):
            t = time.perf_counter()
            grad_ready(p)
            hook_t[0] += time.perf_counter() - t
        engine._grad_ready = timed_grad_ready

        fwd = lambda x, y: nn.functional.mse_loss(engine(x), y)
        bwd = engine.backward
        upd = engine.step
    else:
        raise SystemExit("unknown mode " + mode)

    times, loss = [], None
    pool = xs.shape[0]
    t_warm = None  # zero-torch: libzero's step_timing totals when the warm-up ends
    for s in range(a.steps):
        if s == a.warmup and mode.startswith("zero-torch"):
            t_warm = engine.z.step_timing(total=True)
        x = xs[s % pool, RANK * a.mb:(RANK + 1) * a.mb]
        y = ys[s % pool, RANK * a.mb:(RANK + 1) * a.mb]
        dist.barrier()
        t0 = time.perf_counter()
        loss = fwd(x, y)
        t1 = time.perf_counter()
        bwd(loss)
        t2 = time.perf_counter()
        upd()
        t3 = time.perf_counter()
        times.append(t3 - t0)
        prof.append((t1 - t0, t2 - t1, hook_t[0], t3 - t2))
        hook_t[0] = 0.0
    med = statistics.median(times[a.warmup:])
    mine = torch.tensor([med, float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss), float(base_rss),
                         float(loss.item())], dtype=torch.float64)
    allv = [torch.zeros(4, dtype=torch.float64) for _ in range(WORLD)]
    dist.all_gather(allv, mine)
    k = [statistics.median(v[i] for v in prof[a.warmup:]) * 1e3 for i in range(4)]
    extra = {"profile_ms": {"forward": k[0], "backward": k[1], "step": k[3]}}
    if mode.startswith("zero-torch"):
        t = engine.z.step_timing(total=True)
        t = {key: t[key] - t_warm[key] for key in t}
        n = max(1, t["micro_steps"])
        extra = {"profile_ms": {"forward": k[0], "backward": k[1], "python_hooks": k[2], "step": k[3],
                                "libzero_hooks": t["hook_seconds"] * 1e3 / n,
                                "libzero_step": {key[:-8]: t[key] * 1e3 / n for key in t if key.endswith("_seconds")
                                                 and key not in ("hook_seconds", "fetch_seconds")}}}
    if RANK == 0:
        print(json.dumps({**extra, "mode": mode, "world": WORLD, "params": nparams, "steps": a.steps, "warmup": a.warmup,
                          "step_ms": max(float(v[0]) for v in allv) * 1e3,
                          "final_loss": sum(float(v[3]) for v in allv) / WORLD,
                          "peak_rss_mib": [float(v[1]) / 1024 for v in allv],
                          "base_rss_mib": [float(v[2]) / 1024 for v in allv],
                          "torch": torch.__version__}), flush=True)
    if mode.startswith("zero-torch"):
        engine.close()
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
