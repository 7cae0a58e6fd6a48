#!/usr/bin/env python3
"""zero.torch training step of a GPT-2-shaped model vs plain torch AdamW (issue 35).

A benchmark, not a test: it prints figures and exits 0 (a missing torch,
CUDA, or a libzero built without CUDA prints SKIPPED); only a crash exits
non-zero.

Model: a GPT-2-shaped causal LM in plain torch, random init (normal 0.02,
residual projections 0.02/sqrt(2L), as GPT-2): token + position embedding,
--layers pre-LN blocks (causal self-attention through
scaled_dot_product_attention(is_causal=True) where torch has it, else a
masked softmax; MLP 4x with GELU), final LN, LM head tied to the token
embedding (as GPT-2).  No dropout (the variants must see the same
computation).  The vocabulary defaults to 8192 (GPT-2's is 50257) to keep
the run short.

Variants, one after another in the same process, each on a model rebuilt
from the same seed and the same batches:
  torch    plain torch: torch.optim.AdamW (fused=True on CUDA where torch has
           it) at N = 1; DistributedDataParallel over gloo + AdamW at N > 1
  stage0..stage3, offload
           zero.torch.initialize (stage 2 + offload_optimizer cpu for
           offload); a "z" suffix (stage2z) uses param_storage="libzero"
--dtype bf16: zero.torch runs DeepSpeed's "bf16": {"enabled": true} (bf16
model, fp32 master in libzero); the torch baseline keeps fp32 parameters and
runs forward/backward under torch.autocast(bf16) (AdamW on fp32).

Per variant: median step time (forward + backward + step, synchronised) over
the measured steps, max over ranks (gathered through torch.distributed/gloo
when N > 1); peak device memory per rank = torch.cuda.max_memory_allocated()
+ libzero's device-tier peak (zero_memory_stats peak_total["device"]), and
the ZeRO paper's model-state bytes per rank for the stage.

Usage:
  python3 bench/gpu/bench_torch_gpt2.py [--device cuda|cpu] [--dtype fp32|bf16] ...
  mpirun -np 2 python3 bench/gpu/bench_torch_gpt2.py ...   (ranks share a GPU: libzero comm "mpi")
"""
import argparse
import gc
import json
import math
import os
import statistics
import sys
import time

RANK = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK", os.environ.get("RANK", 0))))
WORLD = int(os.environ.get("OMPI_COMM_WORLD_SIZE", os.environ.get("PMI_SIZE", os.environ.get("WORLD_SIZE", 1))))
LOCAL = int(os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", os.environ.get("MPI_LOCALRANKID",
                                                                         os.environ.get("LOCAL_RANK", RANK))))
MIB = 1024.0 * 1024.0
LR, BETAS, EPS, WD = 1e-4, (0.9, 0.999), 1e-8, 0.01
SEED = 1234


def mib(b):
    """bytes as MiB, with decimals where the figure is small"""
    m = b / MIB
    return "%.0f" % m if m >= 100 else "%.1f" % m if m >= 1 else "%.3f" % m


def say(*a):
    if RANK == 0:
        print(*a, flush=True)


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--d", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--batch", type=int, default=8, help="micro-batch per rank")
    ap.add_argument("--vocab", type=int, default=8192, help="default 8192 (GPT-2: 50257) to keep it quick")
    ap.add_argument("--steps", type=int, default=10, help="measured steps per variant")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--stages", default="torch,stage0,stage1,stage2,stage3,offload")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32")
    ap.add_argument("--tf32", action="store_true", help="CUDA: allow TF32 matmuls (torch's default: off)")
    ap.add_argument("--max-variant-s", type=float, default=15.0,
                    help="measured steps are cut (to >= 3) where the last warmup step says a variant "
                         "would take longer than this")
    ap.add_argument("--json", default=None, help="write the results to this file (rank 0)")
    return ap.parse_args()


def main():
    args = parse_args()
    variants = [v.strip() for v in args.stages.split(",") if v.strip()]
    for v in variants:
        b = v[:-1] if v.endswith("z") else v
        if v != "torch" and b not in ("stage0", "stage1", "stage2", "stage3", "offload"):
            raise SystemExit("unknown variant %r (torch, stage0..stage3, offload; a z suffix: libzero storage)" % v)
    try:
        import torch
    except ImportError:
        say("SKIPPED: torch not importable by %s" % sys.executable)
        return 0
    import torch.distributed as dist
    import torch.nn as nn
    import torch.nn.functional as F

    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        say("SKIPPED: torch %s has no usable CUDA (torch.cuda.is_available() is False)" % torch.__version__)
        return 0
    import zero
    import zero.torch as zt

    comm = "auto"
    if cuda:
        try:
            zero.Engine({"train_micro_batch_size_per_gpu": 1}, comm="self", device="cuda").close()
        except zero.ZeroError as ex:
            if "built without CUDA" in ex.message:
                say("SKIPPED: %s" % ex.message)
                return 0
            raise
        dev = torch.device("cuda", LOCAL % torch.cuda.device_count())
        torch.cuda.set_device(dev)
        if torch.cuda.device_count() < WORLD:
            comm = "mpi"  # NCCL refuses two ranks on one GPU: device buffers staged through host memory
        dev_name = torch.cuda.get_device_name(dev)
        torch.backends.cuda.matmul.allow_tf32 = bool(args.tf32)
    else:
        dev = torch.device("cpu")
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // WORLD))
        import platform
        dev_name = "CPU (%s, %d threads per rank)" % (platform.processor() or platform.machine(),
                                                       torch.get_num_threads())
    bf16 = args.dtype == "bf16"
    if WORLD > 1:
        job = os.environ.get("OMPI_MCA_ess_base_jobid", os.environ.get("MASTER_PORT", "0"))
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(21000 + int(job) % 20000 if job.isdigit() else 29517))
        dist.init_process_group("gloo", rank=RANK, world_size=WORLD)
    has_sdpa = hasattr(F, "scaled_dot_product_attention")
    if args.d % args.heads:
        raise SystemExit("--d %d is not a multiple of --heads %d" % (args.d, args.heads))

    # ------------------------------------------------------------------ model
    class Attention(nn.Module):
        def __init__(self, d, heads, seq, dev):
            super().__init__()
            self.qkv = nn.Linear(d, 3 * d, device=dev)
            self.proj = nn.Linear(d, d, device=dev)
            self.heads = heads
            if not has_sdpa:  # a plain attribute, not a buffer: DDP's gloo broadcast refuses bool buffers
                self.mask = torch.ones(seq, seq, dtype=torch.bool, device=dev).triu(1)

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.qkv(x).split(d, dim=2)
            q, k, v = [z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v)]
            if has_sdpa:
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.shape[-1]))
                att = att.masked_fill(self.mask[:t, :t], float("-inf")).softmax(dim=-1)
                y = att @ v
            return self.proj(y.transpose(1, 2).reshape(b, t, d))

    class Block(nn.Module):
        def __init__(self, d, heads, seq, dev):
            super().__init__()
            self.ln1 = nn.LayerNorm(d, device=dev)
            self.attn = Attention(d, heads, seq, dev)
            self.ln2 = nn.LayerNorm(d, device=dev)
            self.fc = nn.Linear(d, 4 * d, device=dev)
            self.act = nn.GELU()
            self.fc_proj = nn.Linear(4 * d, d, device=dev)

        def forward(self, x):
            x = x + self.attn(self.ln1(x))
            return x + self.fc_proj(self.act(self.fc(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self, a, dev):
            super().__init__()
            self.wte = nn.Embedding(a.vocab, a.d, device=dev)
            self.wpe = nn.Embedding(a.seq, a.d, device=dev)
            self.blocks = nn.ModuleList([Block(a.d, a.heads, a.seq, dev) for _ in range(a.layers)])
            self.ln_f = nn.LayerNorm(a.d, device=dev)
            self.head = nn.Linear(a.d, a.vocab, bias=False, device=dev)
            self.head.weight = self.wte.weight  # tied, as GPT-2
            self.pos = torch.arange(a.seq, device=dev)  # not a buffer: nothing for DDP to broadcast

        def forward(self, ids):
            x = self.wte(ids) + self.wpe(self.pos[:ids.shape[1]])
            for blk in self.blocks:
                x = blk(x)
            return self.head(self.ln_f(x))

    def build():
        torch.manual_seed(SEED)  # seeds CUDA too: every rank and variant builds the same model
        m = GPT(args, dev)
        with torch.no_grad():
            for name, p in m.named_parameters():
                if name.endswith("bias"):
                    p.zero_()
                elif "ln" in name:
                    p.fill_(1.0)
                elif name.endswith("proj.weight"):
                    p.normal_(0.0, 0.02 / math.sqrt(2 * args.layers))
                else:
                    p.normal_(0.0, 0.02)
        return m

    # batches: the same for every variant, one stream per rank, made before any timing
    nsteps_max = args.warmup + args.steps
    g = torch.Generator().manual_seed(SEED + 7919 * RANK)
    batches = []
    for _ in range(nsteps_max):
        ids = torch.randint(0, args.vocab, (args.batch, args.seq + 1), generator=g)
        batches.append((ids[:, :-1].contiguous().to(dev), ids[:, 1:].contiguous().to(dev)))

    def sync():
        if cuda:
            torch.cuda.synchronize(dev)

    def loss_of(logits, y):
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), y.view(-1))

    def allmax(vals):
        if WORLD == 1:
            return list(vals)
        t = torch.tensor([float(v) for v in vals], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t.tolist()

    # ------------------------------------------------------------------ baseline optimizer
    adamw_kind = "default"
    adamw_kw = {}
    if cuda:
        import inspect
        if "fused" in inspect.signature(torch.optim.AdamW.__init__).parameters:
            try:  # a probe: some torch versions refuse fused for some setups
                torch.optim.AdamW([torch.zeros(1, device=dev, requires_grad=True)], fused=True)
                adamw_kw, adamw_kind = {"fused": True}, "fused=True"
            except (RuntimeError, TypeError, ValueError) as ex:
                adamw_kind = "default (fused refused: %s)" % str(ex).split("\n")[0][:80]
        else:
            adamw_kind = "default (this torch has no fused AdamW)"
    else:
        adamw_kind = "default (CPU)"

    # ------------------------------------------------------------------ header
    n_params = sum(p.numel() for p in build().parameters())
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    psi = n_params
    say("bench_torch_gpt2: GPT-2-shaped causal LM, random init, tied LM head, no dropout")
    say("config: layers %d d %d heads %d seq %d batch %d/rank vocab %d%s | params %.2fM | N=%d | dtype %s | "
        "steps %d measured + %d warmup | lr %g AdamW wd %g"
        % (args.layers, args.d, args.heads, args.seq, args.batch, args.vocab,
           " (default 8192, GPT-2 has 50257)" if args.vocab == 8192 else "", psi / 1e6, WORLD, args.dtype,
           args.steps, args.warmup, LR, WD))
    say("device: %s%s | torch %s | attention: %s | libzero comm: %s%s"
        % (dev_name, " x%d visible, TF32 matmul %s" % (torch.cuda.device_count(), "on" if args.tf32 else "off")
           if cuda else "", torch.__version__,
           "scaled_dot_product_attention(is_causal=True)" if has_sdpa else "manual causal mask + softmax",
           comm, " (ranks share a GPU: device buffers staged through host memory)" if comm == "mpi" else ""))
    say("baseline: %s + torch.optim.AdamW %s%s"
        % ("plain torch" if WORLD == 1 else "DistributedDataParallel (gloo)", adamw_kind,
           "; bf16 = torch.autocast(bf16) forward/backward, fp32 params/grads/AdamW" if bf16 else ""))
    say("timing: median of per-step wall times (%s), max over ranks %s"
        % ("torch.cuda.synchronize before and after" if cuda else "CPU wall clock",
           "via torch.distributed all_reduce(MAX) over gloo" if WORLD > 1 else "(one rank)"))
    if cuda:
        say("memory: peak per rank = torch.cuda.max_memory_allocated() + libzero peak_total['device'] "
            "(libzero allocates outside torch's allocator)")
    else:
        say("memory (CPU): libzero's peak_total (device arena + host tiers) and the process's max RSS so far "
            "(ru_maxrss, monotone over variants: only a rough figure)")

    # ZeRO paper, bytes per parameter per rank of model states (params P, grads G, optimizer K)
    P, G, K = (2, 2, 12) if bf16 else (4, 4, 8)

    def expected(variant):
        n = WORLD
        base = variant.rstrip("z")
        if base == "torch":
            return (4 + 4 + 8) * psi, None  # fp32 params, grads, m + v (autocast keeps fp32 params)
        if base == "stage0":
            return (P + G + K) * psi, None
        if base == "stage1":
            return (P + G + K / n) * psi, None
        if base == "stage2":
            return (P + (G + K) / n) * psi, None
        if base == "stage3":
            return (P + G + K) / n * psi, None
        if base == "offload":  # stage 2 + offload_optimizer: params + grad partition on device, the rest host
            return (P + G / n) * psi, (G + K) / n * psi
        return None, None

    def proc_status(key):
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
        return 0

    def rss_now():
        return proc_status("VmRSS")

    def rss_peak():
        return proc_status("VmHWM")

    def rss_reset():
        """The peak resident set back to the current one (Linux >= 4.0); False where not allowed."""
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            return True
        except OSError:
            return False

    if not cuda:  # glibc: mmap every block over 64 KiB, so that freed tensors leave the resident set
        try:
            import ctypes
            ctypes.CDLL(None).mallopt(-3, 64 * 1024)  # M_MMAP_THRESHOLD
        except (OSError, AttributeError):
            pass

    def maxrss_mib():
        import resource
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0

    # ------------------------------------------------------------------ one variant
    def run_variant(variant):
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(dev)
        model = build()
        engine = None
        autocast = None
        if variant == "torch":
            net = nn.parallel.DistributedDataParallel(model) if WORLD > 1 else model
            opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=BETAS, eps=EPS, weight_decay=WD, **adamw_kw)
            if bf16:
                autocast = lambda: torch.autocast(device_type=dev.type, dtype=torch.bfloat16)  # noqa: E731

            def forward(x, y):
                opt.zero_grad(set_to_none=True)
                if autocast:
                    with autocast():
                        return loss_of(net(x), y)
                return loss_of(net(x), y)

            def backward(loss):
                loss.backward()

            def opt_step():
                opt.step()
        else:
            base = variant[:-1] if variant.endswith("z") else variant
            cfg = {"train_micro_batch_size_per_gpu": args.batch,
                   "optimizer": {"type": "AdamW",
                                 "params": {"lr": LR, "betas": list(BETAS), "eps": EPS, "weight_decay": WD}},
                   "zero_optimization": {"stage": 2 if base == "offload" else int(base[len("stage"):])}}
            if base == "offload":
                cfg["zero_optimization"]["offload_optimizer"] = {"device": "cpu"}
            if bf16:
                cfg["bf16"] = {"enabled": True}
            engine, _, _, _ = zt.initialize(model, cfg, plugin="offload" if base == "offload" else None,
                                            comm=comm,
                                            param_storage="libzero" if variant.endswith("z") else "host")

            def forward(x, y):
                return loss_of(engine(x), y)

            def backward(loss):
                engine.backward(loss)

            def opt_step():
                engine.step()

        def step(x, y):
            loss = forward(x, y)
            backward(loss)
            opt_step()
            return loss
        times, losses = [], []

        def timed(k):
            x, y = batches[k]
            sync()
            t0 = time.perf_counter()
            loss = step(x, y)
            sync()
            times.append(time.perf_counter() - t0)
            losses.append(loss.detach())

        for k in range(args.warmup):
            timed(k)
        steps = args.steps
        if args.warmup:
            per = allmax([times[-1]])[0]
            if per * steps > args.max_variant_s:
                steps = max(3, min(steps, int(args.max_variant_s / per)))
        for k in range(args.warmup, args.warmup + steps):
            timed(k)
        measured = times[args.warmup:]
        med = statistics.median(measured) * 1e3
        torch_peak = torch.cuda.max_memory_allocated(dev) if cuda else 0
        torch_reserved = torch.cuda.max_memory_reserved(dev) if cuda else 0
        # where torch's peak lies: one more (untimed) step with the peak reset
        # before each phase; the phases' maxima are torch's peak of that step
        phases = {}
        if not cuda and rss_reset():  # the CPU's stand-in: the resident set over the step's start
            x, y = batches[0]
            gc.collect()
            start = rss_now()
            loss = forward(x, y)
            phases["forward"] = rss_peak() - start
            rss_reset()
            backward(loss)
            del loss
            phases["backward"] = rss_peak() - start
            rss_reset()
            opt_step()
            phases["step"] = rss_peak() - start
        if cuda:
            x, y = batches[0]
            sync()
            torch.cuda.reset_peak_memory_stats(dev)
            loss = forward(x, y)
            sync()
            phases["forward"] = torch.cuda.max_memory_allocated(dev)
            torch.cuda.reset_peak_memory_stats(dev)
            backward(loss)
            del loss
            sync()
            phases["backward"] = torch.cuda.max_memory_allocated(dev)
            torch.cuda.reset_peak_memory_stats(dev)
            opt_step()
            sync()
            phases["step"] = torch.cuda.max_memory_allocated(dev)
        lz = engine.memory_stats() if engine is not None else None
        lz_dev = lz["peak_total"]["device"] if lz else 0
        lz_host = lz["peak_total"]["host"] if lz else 0
        # model states as they stand now: torch's own tensors (params not viewing libzero's
        # memory, .grad, optimizer state) + libzero's params/grads/master/optim peaks
        torch_states = 0
        if variant == "torch":
            torch_states = sum(p.numel() * p.element_size() for p in model.parameters())
            torch_states += sum(p.grad.numel() * p.grad.element_size() for p in model.parameters()
                                if p.grad is not None)
            torch_states += sum(t.numel() * t.element_size() for s in opt.state.values() for t in s.values()
                                if torch.is_tensor(t) and t.dim() > 0)
        elif not variant.endswith("z"):
            torch_states = sum(p.numel() * p.element_size() for p in model.parameters())  # stage 3: 0 (empty)
        lz_states = sum(lz["peak"]["device"][t] for t in ("params", "grads", "master", "optim")) if lz else 0
        lz_states_host = sum(lz["peak"]["host"][t] for t in ("params", "grads", "master", "optim")) if lz else 0
        tags = lz["peak"]["device"] if lz else None
        rss = maxrss_mib() if not cuda else 0.0
        per_rank = [med, torch_peak, lz_dev, lz_host, torch_states + lz_states, lz_states_host, rss]
        agg = allmax(per_rank)
        if engine is not None:
            engine.close()
        loss_vals = [float(v) for v in losses]
        return {"variant": variant, "steps": len(measured), "step_ms": med, "step_ms_max_ranks": agg[0],
                "step_ms_all": [t * 1e3 for t in measured],
                "torch_peak": torch_peak, "torch_reserved_peak": torch_reserved, "libzero_device_peak": lz_dev,
                "libzero_host_peak": lz_host, "libzero_device_peak_tags": tags,
                "model_states": torch_states + lz_states, "model_states_host": lz_states_host,
                "torch_phase_peaks": phases,
                "max_ranks": {"torch_peak": agg[1], "libzero_device_peak": agg[2], "libzero_host_peak": agg[3],
                              "model_states": agg[4], "model_states_host": agg[5], "maxrss_mib": agg[6]},
                "maxrss_mib": rss, "losses": loss_vals}

    results = []
    t_all = time.perf_counter()
    for v in variants:
        t0 = time.perf_counter()
        r = run_variant(v)
        r["wall_s"] = time.perf_counter() - t0
        results.append(r)
        say("  (%s: %d measured steps%s, %.1f s with build and warmup)"
            % (v, r["steps"], " -- cut by --max-variant-s %g" % args.max_variant_s if r["steps"] < args.steps
               else "", r["wall_s"]))

    # ------------------------------------------------------------------ report
    ref = next((r for r in results if r["variant"] == "torch"), None)
    say("")
    say("step_ms: the max over ranks of each rank's median (then rank 0's own); memory: rank 0's, "
        "then the max over ranks; MiB = 2^20 bytes")
    for r in results:
        ratio = r["step_ms_max_ranks"] / ref["step_ms_max_ranks"] if ref else float("nan")
        mx = r["max_ranks"]
        if cuda:
            say("RESULT %s N=%d step_ms %.1f ratio_vs_torch %.2f peak_dev_MiB %s (torch %s + libzero %s) "
                "| rank 0 step_ms %.1f | max over ranks peak_dev_MiB %s%s"
                % (r["variant"], WORLD, r["step_ms_max_ranks"], ratio,
                   mib(r["torch_peak"] + r["libzero_device_peak"]), mib(r["torch_peak"]),
                   mib(r["libzero_device_peak"]), r["step_ms"], mib(mx["torch_peak"] + mx["libzero_device_peak"]),
                   " | libzero host MiB %s" % mib(r["libzero_host_peak"]) if r["libzero_host_peak"] else ""))
        else:
            say("RESULT %s N=%d step_ms %.1f ratio_vs_torch %.2f peak_host_MiB libzero %s (device arena %s + "
                "host %s) process maxrss %.0f | rank 0 step_ms %.1f"
                % (r["variant"], WORLD, r["step_ms_max_ranks"], ratio,
                   mib(r["libzero_device_peak"] + r["libzero_host_peak"]), mib(r["libzero_device_peak"]),
                   mib(r["libzero_host_peak"]), r["maxrss_mib"], r["step_ms"]))
    say("")
    say("model states per rank (MiB, rank 0), ZeRO paper (%s: params %d + grads %d + optimizer %d bytes/param, "
        "psi %.2fM, N=%d) vs measured (torch's params/.grad/AdamW state + libzero's params/grads/master/optim "
        "peaks):" % ("bf16 mixed precision" if bf16 else "fp32", P, G, K, psi / 1e6, WORLD))
    for r in results:
        e_dev, e_host = expected(r["variant"])
        extra = ""
        if r["variant"].endswith("z"):
            extra = " (libzero storage: the model's tensors are views of libzero's params)"
        elif r["variant"] not in ("torch", "stage3"):
            extra = " (host-owned: the model's tensors and libzero's copy, params counted twice)"
        if r["variant"] == "torch" and bf16:
            extra = " (autocast: fp32 params, the paper's mixed-precision figure does not apply)"
        tags = r["libzero_device_peak_tags"]
        tag_s = (" | libzero device peaks: " + " ".join("%s %s" % (t, mib(b)) for t, b in tags.items() if b)
                 if tags else "")
        say("MODEL_STATES %s expected %s%s measured %s%s%s%s"
            % (r["variant"], mib(e_dev), " + host %s" % mib(e_host) if e_host else "",
               mib(r["model_states"]), " + host %s" % mib(r["model_states_host"])
               if r["model_states_host"] else "", extra, tag_s))

    if any(r.get("torch_phase_peaks") for r in results):
        say("")
        say("torch's peak per phase of one more step (MiB, rank 0, torch's allocator only; libzero's memory is "
            "outside it):" if cuda else
            "the process's resident-set peak per phase of one more step, over the step's start (MiB, rank 0; "
            "torch's and libzero's memory together):")
        for r in results:
            ph = r.get("torch_phase_peaks") or {}
            if ph:
                say("%s %s forward %s backward %s step %s"
                    % ("TORCH_PEAKS" if cuda else "RSS_PEAKS", r["variant"], mib(ph.get("forward", 0)),
                       mib(ph.get("backward", 0)), mib(ph.get("step", 0))))

    # losses: all variants saw the same batches; compare at the last step they all ran
    say("")
    common = min(len(r["losses"]) for r in results)
    anchor = ref or results[0]
    warn = False
    for r in results:
        a, b = r["losses"][common - 1], anchor["losses"][common - 1]
        rel = abs(a - b) / max(abs(b), 1e-12)
        bad = rel > 5e-2 or not math.isfinite(a)
        warn |= bad
        say("LOSS %s step 1 %.5f step %d %.5f rel_vs_%s %.2e%s"
            % (r["variant"], r["losses"][0], common, a, anchor["variant"], rel, "  WARN (> 5e-2)" if bad else ""))
    say("losses: %s (rank 0's batches; tolerance 5e-2 relative)" % ("WARN: a variant disagrees" if warn else "agree"))
    if ref:
        goal = [r for r in results if r["variant"] in ("stage1", "stage2")]
        if goal:
            ok = all(r["step_ms_max_ranks"] <= 1.1 * ref["step_ms_max_ranks"] for r in goal)
            say("GOAL stage1/2 step within 1.1x of torch: %s (%s)"
                % ("met" if ok else "NOT met", ", ".join("%s %.2fx" % (r["variant"], r["step_ms_max_ranks"] /
                                                                     ref["step_ms_max_ranks"]) for r in goal)))
    if cuda:
        zs = [r for r in results if r["variant"] in ("stage0", "stage1", "stage2", "stage3")]
        if len(zs) > 1:
            if WORLD == 1:
                say("(N=1: ZeRO partitions nothing, so by the table stages 0-3 hold the same model states; "
                    "the fall with the stage shows at N > 1)")
            tot = [r["max_ranks"]["torch_peak"] + r["max_ranks"]["libzero_device_peak"] for r in zs]
            falls = all(b <= a for a, b in zip(tot, tot[1:]))
            say("GOAL peak device memory falls with the stage (max over ranks): %s (%s MiB)"
                % ("yes" if falls else "NO", ", ".join("%s %s" % (r["variant"], mib(t)) for r, t in zip(zs, tot))))
    say("total %.1f s" % (time.perf_counter() - t_all))
    if args.json and RANK == 0:
        with open(args.json, "w") as f:
            json.dump({"config": vars(args), "world": WORLD, "device": dev_name, "torch": torch.__version__,
                       "params": psi, "comm": comm, "adamw": adamw_kind, "sdpa": has_sdpa,
                       "variants": results}, f, indent=1)
    if WORLD > 1:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
