"""bench_torch_adamw: libzero's fused AdamW against torch.optim.AdamW(fused=True)
on the same shapes, in one run on one GPU (issue 35).

    python3 bench_torch_adamw.py BENCH_GPU_KERNELS [elements (default 64M)]

Runs BENCH_GPU_KERNELS (libzero's kernel bench, same element count) and reads
its median kernel time per AdamW case, then times torch's fused AdamW step on
the same shapes: one tensor of n elements, and 512 tensors of n/512 (a model's
many parameters in one step).  Each torch case: 3 warm-up steps, then the
median of 21 steps timed with CUDA events.  Printed per case:

    RESULT <case>  libzero <ms>  torch <ms>  libzero/torch throughput <x>

(> 1.0: libzero's step takes less time for the same parameters).

What each side does per element differs with 16-bit parameters, and the
lines say so: libzero keeps an fp32 master weight and fp32 moments and
writes the bf16 model copy (mixed precision as ZeRO does it); torch's fused
AdamW on bf16 parameters keeps bf16 moments and no master.  The like-for-like
torch mixed-precision step is therefore also timed: fused AdamW on fp32
master weights plus a copy into the bf16 model parameters
(torch._foreach_copy_ where present).

Then the gradient norm's sum of squares: libzero's ordered kernel (the CPU's
bits, fp64 lanes) against torch.linalg.vector_norm on the same tensor
(torch's tuned, unordered reduction; fp32 accumulation, and fp64 with
dtype=torch.float64), each as a ratio to a device-to-device copy moving the
same DRAM traffic (copy time / kernel time, the ratio bench_gpu_kernels
prints), the copy timed by torch in the same run:

    RESULT sumsq <dtype>  libzero ratio <r>  torch vector_norm ratio <r> (fp32 sums) <r> (fp64 sums)

What a tuned reduction that ignores the order reaches on this GPU is the
fair measure of what libzero's order costs (issue 35's 0.9 goal).  Not a
test: prints figures, exits 0; without CUDA it says so and exits 0.
"""
import re
import subprocess
import sys


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 0
    kbench = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 64 << 20
    try:
        import torch
    except ImportError:
        print("SKIPPED: torch not importable by %s" % sys.executable)
        return 0
    if not torch.cuda.is_available():
        print("SKIPPED: torch %s sees no CUDA device" % torch.__version__)
        return 0

    # libzero's side: its own bench, same element count, same GPU
    out = subprocess.run([kbench, str(n)], capture_output=True, text=True, timeout=300).stdout
    lz = {}
    lz_sumsq = {}
    for line in out.splitlines():
        m = re.match(r"RESULT (adamw \w+ params, \d+ tensors?)\s+ratio .*kernel ([0-9.]+) ms", line)
        if m:
            lz[m.group(1)] = float(m.group(2))
        m = re.match(r"RESULT sumsq (\w+)\s+ratio ([0-9.]+) .*kernel ([0-9.]+) ms", line)
        if m:
            lz_sumsq[m.group(1)] = (float(m.group(2)), float(m.group(3)))
    if not lz:
        print("bench_torch_adamw: no AdamW lines from %s:\n%s" % (kbench, out))
        return 0

    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    print("bench_torch_adamw: %s; torch %s; %d elements per case; torch median of 21 steps after 3 warm-ups"
          % (props.name, torch.__version__, n))
    fused_ok = "fused" in torch.optim.AdamW.__init__.__code__.co_varnames
    if not fused_ok:
        print("NOTE: this torch's AdamW has no fused=True; timing foreach=True instead")

    def time_steps(step, reps=21, warm=3):
        for _ in range(warm):
            step()
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
        for a, b in ev:
            a.record()
            step()
            b.record()
        torch.cuda.synchronize()
        t = sorted(a.elapsed_time(b) for a, b in ev)
        return t[reps // 2]

    def adamw(params):
        kw = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
        if fused_ok:
            kw["fused"] = True
        else:
            kw["foreach"] = True
        return torch.optim.AdamW(params, **kw)

    def make(count, dtype):
        each = n // count
        ps = [torch.nn.Parameter(torch.randn(each, device=dev, dtype=torch.float32).mul_(0.02).to(dtype))
              for _ in range(count)]
        for p in ps:
            p.grad = torch.randn_like(p).mul_(1e-3)
        return ps

    for dt_name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        for count in (1, 512):
            case = "adamw %s params, %d tensor%s" % (dt_name, count, "" if count == 1 else "s")
            if case not in lz:
                continue
            ps = make(count, dtype)
            opt = adamw(ps)
            t_torch = time_steps(opt.step)
            line = "RESULT %-28s libzero %.3f ms  torch %.3f ms  libzero/torch throughput %.2f" % (
                case, lz[case], t_torch, t_torch / lz[case])
            if dtype != torch.float32:
                line += "  (torch: bf16 moments, no master)"
            print(line, flush=True)
            del opt, ps
            if dtype != torch.float32:
                # torch's mixed precision: fp32 master + moments, copy into the bf16 model
                master = make(count, torch.float32)
                model = [m.detach().to(dtype) for m in master]
                opt = adamw(master)
                copy = getattr(torch, "_foreach_copy_", None)

                def mp_step():
                    opt.step()
                    with torch.no_grad():
                        if copy is not None:
                            copy(model, master)
                        else:
                            for d, s in zip(model, master):
                                d.copy_(s)
                t_mp = time_steps(mp_step)
                print("RESULT %-28s libzero %.3f ms  torch %.3f ms  libzero/torch throughput %.2f"
                      "  (torch: fp32 master AdamW + copy to bf16, the same work as libzero)"
                      % (case + " mp", lz[case], t_mp, t_mp / lz[case]), flush=True)
                del opt, master, model
            torch.cuda.empty_cache()

    # the sum of squares: libzero's ordered kernel vs torch's vector_norm,
    # each against a copy of the same DRAM traffic (a norm reads its input once)
    for dt_name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        if dt_name not in lz_sumsq:
            continue
        x = torch.randn(n, device=dev, dtype=torch.float32).to(dtype)
        half = x.numel() * x.element_size() // 2
        src = torch.empty(half, device=dev, dtype=torch.uint8)
        dst = torch.empty_like(src)
        t_copy = time_steps(lambda: dst.copy_(src))
        t32 = time_steps(lambda: torch.linalg.vector_norm(x))
        try:
            t64 = time_steps(lambda: torch.linalg.vector_norm(x, dtype=torch.float64))
            r64 = "%.3f (fp64 sums, %.3f ms)" % (t_copy / t64, t64)
        except (RuntimeError, TypeError) as e:
            r64 = "n/a (fp64 sums: %s)" % str(e).splitlines()[0][:80]
        r_lz, t_lz = lz_sumsq[dt_name]
        print("RESULT sumsq %-5s libzero ratio %.3f (%.3f ms, ordered)  torch vector_norm ratio %.3f (fp32 sums, "
              "%.3f ms) %s  copy %.3f ms" % (dt_name, r_lz, t_lz, t_copy / t32, t32, r64, t_copy), flush=True)
        del x, src, dst
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
