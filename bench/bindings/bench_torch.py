"""One configuration of bench/bindings (run under mpirun by run-bench.sh):
train an fp32 MLP for STEPS steps and print one JSON line (rank 0) with the
median step time (after WARMUP), each rank's peak RSS, and where the step's
time goes ("phases_ms", rank 0's medians): forward, backward, optimizer step
(DDP: opt.step; zero.torch: engine.step = zero_step), and for zero.torch the
gradient hand-off inside backward (the Python hook: wrap libzero's buffer,
add_ the gradient, drop .grad, zero_on_grad_ready) with the part of it spent
inside libzero, and zero_step's own phases from zero_step_timing.

  mode: ddp-adamw | ddp-zero-redundancy | zero-stage1 | zero-stage2 | zero-offload | zero-stage2-views |
        zero-stage2-host[-blocking] (stage 2 over the torch.distributed gloo group, ABI 1.5 ZERO_COMM_HOST; started
        without mpirun by run-bench.sh)
  mpirun -np 2 python3 bench_torch.py zero-stage2 --width 1024 --layers 4 --steps 30 --warmup 5
"""
import argparse
import json
import os
import resource
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn

# under mpirun, or (zero-stage2-host: run_torch_group.py, the way torchrun
# starts workers) RANK / WORLD_SIZE with libzero over the gloo group
RANK = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("RANK", 0)))
WORLD = int(os.environ.get("OMPI_COMM_WORLD_SIZE", os.environ.get("WORLD_SIZE", 1)))


def rss_kib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def main():
    import faulthandler
    faulthandler.dump_traceback_later(int(os.environ.get("BENCH_HANG_S", "300")), exit=True)  # a hang fails
    ap = argparse.ArgumentParser()
    ap.add_argument("mode")
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--mb", type=int, default=16)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    a = ap.parse_args()
    torch.set_num_threads(1)
    hook_s = [0.0]
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29611")
    dist.init_process_group("gloo", rank=RANK, world_size=WORLD)
    base_rss = rss_kib()
    torch.manual_seed(0)
    layers = []
    for _ in range(a.layers):
        layers += [nn.Linear(a.width, a.width), nn.Tanh()]
    model = nn.Sequential(*layers)
    nparams = sum(p.numel() for p in model.parameters())
    lr, betas, eps, wd = 1e-4, (0.9, 0.999), 1e-8, 0.01
    if a.mode.startswith("ddp"):
        net = nn.parallel.DistributedDataParallel(model)
        if a.mode == "ddp-adamw":
            opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=betas, eps=eps, weight_decay=wd)
        else:
            from torch.distributed.optim import ZeroRedundancyOptimizer
            opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW, lr=lr,
                                          betas=betas, eps=eps, weight_decay=wd)

        def fwd(x, y):
            return nn.functional.mse_loss(net(x), y)

        def bwd(loss):
            opt.zero_grad(set_to_none=True)
            loss.backward()
        upd = opt.step
    else:
        import zero.torch as zt
        stage = {"zero-stage1": 1, "zero-stage2": 2, "zero-offload": 2, "zero-stage2-views": 2,
                 "zero-stage2-host": 2, "zero-stage2-host-blocking": 2}[a.mode]
        cfg = {"train_micro_batch_size_per_gpu": a.mb,
               "optimizer": {"type": "AdamW", "params": {"lr": lr, "betas": list(betas), "eps": eps,
                                                         "weight_decay": wd}},
               "zero_optimization": {"stage": stage, "overlap_comm": True}}
        if a.mode == "zero-offload":
            cfg["zero_optimization"]["offload_optimizer"] = {"device": "cpu"}
        # zero-stage2-views: the model's tensors are views of libzero's own copy (param_storage="libzero")
        host = a.mode.startswith("zero-stage2-host")
        import zero
        # zero-stage2-host-blocking: the same group without the started all-to-all (each reduction blocks its hook)
        comm = zero.TorchHostComm(started=False) if a.mode == "zero-stage2-host-blocking" else "auto"
        engine, _, _, _ = zt.initialize(model, cfg, comm=comm,
                                        param_storage="libzero" if a.mode == "zero-stage2-views" else "host")
        if (engine.z._hostcomm is not None) != host:
            raise SystemExit("%s: libzero's communicator is %s" % (a.mode, "the torch group" if
                                                                   engine.z._hostcomm else "MPI"))
        grad_ready = engine._grad_ready

        def timed_grad_ready(p):  # the hand-off of one gradient, as the hook runs it
            t = time.perf_counter()
            grad_ready(p)
            hook_s[0] += time.perf_counter() - t
        engine._grad_ready = timed_grad_ready

        def fwd(x, y):
            return nn.functional.mse_loss(engine(x), y)
        bwd, upd = engine.backward, engine.step
    g = torch.Generator().manual_seed(RANK)
    times, prof, lz = [], [], []
    zt_mode = not a.mode.startswith("ddp")
    for s in range(a.steps):
        x = torch.randn(a.mb, a.width, generator=g)
        y = torch.randn(a.mb, a.width, generator=g)
        dist.barrier()
        hook_s[0] = 0.0
        t0 = time.perf_counter()
        loss = fwd(x, y)
        t1 = time.perf_counter()
        bwd(loss)
        t2 = time.perf_counter()
        upd()
        t3 = time.perf_counter()
        times.append(t3 - t0)
        prof.append((t1 - t0, t2 - t1, hook_s[0], t3 - t2))
        if zt_mode:
            lz.append(engine.z.step_timing())  # this step's zero_step phases and libzero's hook time
    med = statistics.median(times[a.warmup:])

    def mid(vals):
        return statistics.median(vals[a.warmup:]) * 1e3
    phases = {"forward": mid([p[0] for p in prof]), "backward": mid([p[1] for p in prof]),
              "step": mid([p[3] for p in prof])}
    if zt_mode:
        phases["hook_handoff"] = mid([p[2] for p in prof])
        phases["hook_in_libzero"] = mid([t["hook_seconds"] for t in lz])
        phases["zero_step"] = {k[:-8]: mid([t[k] for t in lz]) for k in (
            "step_seconds", "exposed_comm_seconds", "reduce_seconds", "norm_seconds", "optimizer_seconds",
            "gather_seconds", "copy_seconds")}
    # per-rank figures to rank 0
    mine = torch.tensor([med, float(rss_kib()), float(base_rss)], dtype=torch.float64)
    allv = [torch.zeros(3, dtype=torch.float64) for _ in range(WORLD)]
    dist.all_gather(allv, mine)
    if RANK == 0:
        print(json.dumps({"mode": a.mode, "world": WORLD, "phases_ms": phases, "params": nparams, "steps": a.steps, "warmup": a.warmup,
                          "step_ms": max(float(v[0]) for v in allv) * 1e3,
                          "peak_rss_mib": [float(v[1]) / 1024 for v in allv],
                          "base_rss_mib": [float(v[2]) / 1024 for v in allv]}))
    if not a.mode.startswith("ddp"):
        engine.close()
    dist.barrier()
    dist.destroy_process_group()
    if a.mode.startswith("ddp"):
        # freeing DDP's objects when main() returns hung (torch 1.13, gloo) in 2 of ~10
        # DDP runs, inside a C destructor: the figures are printed, nothing else to tear down
        sys.stdout.flush()
        os._exit(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
