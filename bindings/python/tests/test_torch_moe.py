"""zero.torch with DeepSpeed's mixture-of-experts parameters (1.10), under mpirun -np N.

A seeded model (fp32): a dense input layer, one expert per rank and a dense
head.  The expert is marked as DeepSpeed's MoE layer marks it (allreduce =
False, group_name "ep_size_<E>"); rank r holds expert r % E, the ranks with
the same r % E (its expert-data-parallel group) hold the same one.  Each rank
trains on its own batches (no token exchange: each expert sees its holders'
tokens).

The reference is plain torch on every rank: dense gradients all-reduced over
the world, the expert's over its expert-data-parallel group, both divided by
the world size (libzero's mean over the data-parallel group, docs/moe.md),
then torch.optim.AdamW.  Each libzero run -- stage 0 (libzero 1.13), 1, 2, 3 (libzero 1.12;
gathering for real, and with offload_param cpu) and offload; the
parameter groups made by zero.torch (the experts split off by itself), by
split_params_into_different_moe_groups_for_optimizer, or a torch AdamW built
on those groups -- must land within 1e-6 relative (L2 per tensor) of it
after STEPS steps, with each expert equal on the ranks of its group and
different between groups.  Refused: a torch optimizer whose group mixes
experts with dense parameters (ValueError naming the split function), E not
dividing N (ValueError).
Usage: mpirun -np N python3 test_torch_moe.py EP [steps]"""
import os
import sys

from torch_test_util import RANK, WORLD, check, failures  # exits 77 (skipped) without torch
import torch
import torch.distributed as dist
import torch.nn as nn

import zero
import zero.torch as zt

EP = int(sys.argv[1]) if len(sys.argv) > 1 else 2
STEPS = int(sys.argv[2]) if len(sys.argv) > 2 else 12
MB = 4
LR, BETAS, EPS, WD = 1e-2, (0.9, 0.999), 1e-8, 0.01
TOL = 1e-6
JOB = os.environ.get("OMPI_MCA_ess_base_jobid", str(os.getpid()))
COLOR = RANK % EP


class MoEish(nn.Module):
    def __init__(self, ep=EP):
        super().__init__()
        torch.manual_seed(1234)
        self.inp = nn.Linear(8, 16)
        self.out = nn.Linear(16, 4)
        torch.manual_seed(5000 + COLOR)  # this rank's expert: the same on its expert-DP group
        self.expert = nn.Linear(16, 16)
        for p in self.expert.parameters():  # what deepspeed.moe.layer.MoE does to its experts
            p.allreduce = False
            p.group_name = "ep_size_%d" % ep

    def forward(self, x):
        h = torch.tanh(self.inp(x))
        return self.out(h + torch.tanh(self.expert(h)))


def shard(step):
    g = torch.Generator().manual_seed(10_000 + step * 97 + RANK)
    return torch.randn(MB, 8, generator=g), torch.randn(MB, 4, generator=g)


def config(stage):
    cfg = {"train_micro_batch_size_per_gpu": MB,
           "optimizer": {"type": "AdamW", "params": {"lr": LR, "betas": list(BETAS), "eps": EPS, "weight_decay": WD}},
           "zero_optimization": {"stage": 2 if stage == "offload" else 3 if str(stage).startswith("3") else stage}}
    if stage == "offload":
        cfg["zero_optimization"]["offload_optimizer"] = {"device": "cpu"}
    if str(stage).startswith("3"):  # gather for real: nothing persistent, nothing kept between uses
        cfg["zero_optimization"].update(stage3_param_persistence_threshold=0, stage3_max_reuse_distance=0)
    if stage == "3-offload":
        cfg["zero_optimization"]["offload_param"] = {"device": "cpu"}
        cfg["zero_optimization"]["offload_optimizer"] = {"device": "cpu"}
    return cfg


def train_reference(expert_groups):
    model = MoEish()
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=BETAS, eps=EPS, weight_decay=WD)
    mine = expert_groups[COLOR]
    for s in range(STEPS):
        x, y = shard(s)
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        for p in model.parameters():
            dist.all_reduce(p.grad, group=mine if zt.is_moe_param(p) else None)
            p.grad.div_(WORLD)
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def train_zero(stage, how):
    model = MoEish()
    kw = {}
    if how == "split":
        kw["model_parameters"] = zt.split_params_into_different_moe_groups_for_optimizer(model.parameters())
    elif how == "optimizer":
        groups = zt.split_params_into_different_moe_groups_for_optimizer({"params": list(model.parameters())})
        kw["optimizer"] = torch.optim.AdamW(groups, lr=LR, betas=BETAS, eps=EPS, weight_decay=WD)
    cfg = config(stage)
    if how == "optimizer":
        del cfg["optimizer"]
    engine, opt, _, _ = zt.initialize(model, cfg, plugin="offload" if stage == "offload" else None, **kw)
    check(len(opt.param_groups) == 2 and opt.param_groups[1].get("moe") is True
          and opt.param_groups[1].get("name") == "ep_size_%d" % EP,
          "stage %s (%s): the experts' own group, 'moe' and its name: %r" % (
              stage, how, [{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups]))
    for s in range(STEPS):
        x, y = shard(s)
        engine.backward(nn.functional.mse_loss(engine(x), y))
        r = engine.step()
        check(r.boundary and r.taken, "stage %s (%s) step %d taken" % (stage, how, s))
    with zt.GatheredParameters(list(model.parameters())):  # stage 3: the full values only inside
        out = [p.detach().clone() for p in model.parameters()]
    engine.close()
    return out


def rel(a, b):
    return [float((x.double() - y.double()).norm() / y.double().norm()) for x, y in zip(a, b)]


def expect_error(kind, needle, what, fn):
    try:
        fn()
    except kind as exc:
        check(needle in str(exc), "%s: %s lacks %r" % (what, exc, needle))
        return
    except Exception as exc:  # noqa: BLE001 - the wrong kind is the failure reported
        check(False, "%s: %s %s, expected %s" % (what, type(exc).__name__, exc, kind.__name__))
        return
    check(False, "%s: accepted, expected %s" % (what, kind.__name__))


def main():
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(20000 + int(JOB) % 20000))
    dist.init_process_group("gloo", rank=RANK, world_size=WORLD)
    # every rank makes every group (torch.distributed wants the same calls everywhere)
    expert_groups = [dist.new_group([r for r in range(WORLD) if r % EP == c]) for c in range(EP)]
    ref = train_reference(expert_groups)
    names = [n for n, _ in MoEish().named_parameters()]
    if RANK == 0:
        print("N=%d, expert-parallel %d (expert-DP groups of %d), AdamW, %d steps, fp32; relative L2 distance from "
              "torch with expert gradients reduced over their group" % (WORLD, EP, WORLD // EP, STEPS))
    for stage, how in ((0, "auto"), (1, "auto"), (2, "auto"), ("offload", "auto"), (2, "split"), (1, "optimizer"),
                       (3, "auto"), ("3-offload", "split"), (0, "optimizer")):
        got = train_zero(stage, how)
        d = rel(got, ref)
        if RANK == 0:
            print("  stage %-8s %-9s per tensor %s" % (stage, how, " ".join("%.2e" % x for x in d)))
        for name, dz in zip(names, d):
            check(dz <= TOL, "stage %s (%s), %s: %.3e from the torch reference, above %.0e" % (stage, how, name, dz,
                                                                                             TOL))
        # the expert: equal on its expert-DP group, different between groups
        w = got[names.index("expert.weight")]
        allw = [torch.empty_like(w) for _ in range(WORLD)]
        dist.all_gather(allw, w)
        for r in range(WORLD):
            same = torch.equal(allw[r], w)
            check(same == (r % EP == COLOR), "stage %s (%s): rank %d's expert %s this rank's" % (
                stage, how, r, "differs from" if r % EP == COLOR else "equals"))
    # refusals
    m = MoEish()
    expect_error(ValueError, "split_params_into_different_moe_groups_for_optimizer", "a mixed torch group",
                 lambda: zt.initialize(m, {"train_micro_batch_size_per_gpu": MB},
                                       optimizer=torch.optim.AdamW(m.parameters(), lr=LR)))
    if WORLD > 1:
        expect_error(ValueError, "does not divide", "expert-parallel size not dividing N",
                     lambda: zt.initialize(MoEish(ep=WORLD + 1), config(2)))
    dist.destroy_process_group()
    if failures:
        return 1
    if RANK == 0:
        print("test_torch_moe: stage 0, 1, 2, 3 and offload within %.0e of torch on %d ranks, expert-parallel %d"
              % (TOL, WORLD, EP))
    return 0


if __name__ == "__main__":
    sys.exit(main())
