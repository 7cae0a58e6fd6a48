#!/usr/bin/env python3
"""tools/zero-ckpt on the checkpoints ckpt_tool_save wrote.

usage: ckpt_tool.py ZERO_CKPT DIR

- info (text and --json) describes DIR/small (stage3, 10 steps);
- verify passes, and fails (exit 1, naming the file) after one flipped byte;
- consolidate writes a safetensors file that a 20-line reader (below; the
  safetensors package is used too when installed) loads, and its tensors
  are bitwise the parameters the engine gathered (DIR/small.params.f32);
- consolidating DIR/big (largest tensor 16 MiB, model 64 MiB) peaks below
  the RSS of `zero-ckpt info` on it + 2 x the largest tensor + 8 MiB;
- convert: DIR/small (stage3 x3) to stage2 x2 verifies and consolidates
  to the same tensors; a full disk mid-blob (ZERO_CKPT_FAULT) is exit 2
  naming ENOSPC with nothing left behind; converting DIR/big to stage2 at 3
  ranks peaks below info's RSS + 8 MiB (streamed), and the output verifies.
"""
import json, os, resource, shutil, struct, subprocess, sys

tool, d = sys.argv[1], sys.argv[2]
fails = 0


def check(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what)
    fails += 0 if ok else 1


def read_safetensors(path):
    """The whole format: u64 LE header size, JSON header, raw tensor bytes."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        base = 8 + n
        out = {}
        for name, t in header.items():
            if name == "__metadata__":
                continue
            assert t["dtype"] == "F32", t
            a, b = t["data_offsets"]
            f.seek(base + a)
            data = f.read(b - a)
            count = 1
            for s in t["shape"]:
                count *= s
            assert len(data) == 4 * count, name
            out[name] = data
        return header, out


def peak_rss_kib(cmd):
    """Peak RSS of one process, in KiB: GNU time's %M where installed (exact),
    else getrusage of a child (which also counts the forking interpreter's
    pages before exec: an overestimate)."""
    if os.path.exists("/usr/bin/time"):
        r = subprocess.run(["/usr/bin/time", "-f", "%M"] + cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           text=True)
        return r.returncode, int(r.stderr.strip().splitlines()[-1])
    code = ("import resource, subprocess, sys\n"
            "r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL)\n"
            "print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n")
    out = subprocess.run([sys.executable, "-c", code] + cmd, capture_output=True, text=True).stdout.split()
    return int(out[0]), int(out[1])


small = os.path.join(d, "small")
r = subprocess.run([tool, "info", small], capture_output=True, text=True)
check(r.returncode == 0 and "plugin stage3" in r.stdout and "global 10" in r.stdout, "info names plugin and step")
print(r.stdout, end="")
r = subprocess.run([tool, "info", small, "--json"], capture_output=True, text=True)
info = json.loads(r.stdout)
check(info["plugin"] == "stage3" and info["global_step"] == 10 and info["params"] == len(info["param_list"]),
      "info --json")
r = subprocess.run([tool, "verify", small], capture_output=True, text=True)
check(r.returncode == 0 and "OK" in r.stdout, "verify: " + r.stdout.strip())

out = os.path.join(d, "small.safetensors")
r = subprocess.run([tool, "consolidate", small, out], capture_output=True, text=True)
check(r.returncode == 0, "consolidate: " + (r.stdout + r.stderr).strip())
header, tensors = read_safetensors(out)
with open(os.path.join(d, "small.params.f32"), "rb") as f:
    gathered = f.read()
joined = b"".join(tensors[p["name"]] for p in info["param_list"])
check(joined == gathered, "consolidated tensors == gathered parameters, bitwise (%d bytes)" % len(gathered))
check([k for k in header if k != "__metadata__"] == [p["name"] for p in info["param_list"]],
      "tensor names in registration order")
# (1.8) info --json and consolidate give each tensor the shape in the manifest ([numel]: this host
# registers none), whose product is its element count
check(all(header[p["name"]]["shape"] == p["shape"] and p["shape"] == [p["numel"]] for p in info["param_list"]),
      "shapes in info --json and the safetensors header")
try:
    from safetensors import safe_open  # optional: the reference reader
    with safe_open(out, framework="numpy") as f:
        check(sorted(f.keys()) == sorted(tensors), "safetensors package reads it")
except ImportError:
    print("note: safetensors package not installed; the 20-line reader above is the check")

# a flipped byte: verify names the file and exits 1
ck = os.path.join(small, open(os.path.join(small, "latest")).read().strip())
victim = os.path.join(ck, "stage3.state0.rank1.bin")
with open(victim, "r+b") as f:
    f.seek(40)
    b = f.read(1)
    f.seek(40)
    f.write(bytes([b[0] ^ 1]))
r = subprocess.run([tool, "verify", small], capture_output=True, text=True)
check(r.returncode == 1 and "stage3.state0.rank1.bin is corrupted" in r.stdout, "verify finds a flipped byte")
r = subprocess.run([tool, "consolidate", small, out + "2"], capture_output=True, text=True)
check(r.returncode == 0, "consolidate reads only params/master (an optimizer-state flip does not matter)")
with open(victim, "r+b") as f:  # restored: the script can run again
    f.seek(40)
    f.write(b)

# convert from a stage3 checkpoint (no params blobs: the fp32 master serves
# them) to stage2 x2: verifies, and consolidates to the same tensors.
c2 = os.path.join(d, "small-x2")
shutil.rmtree(c2, ignore_errors=True)
r = subprocess.run([tool, "convert", small, c2, "--ranks", "2", "--plugin", "stage2"], capture_output=True, text=True)
check(r.returncode == 0 and "stage3 x3 -> stage2 x2" in r.stdout, "convert stage3 x3 -> stage2 x2: " + (r.stdout + r.stderr).strip())
r = subprocess.run([tool, "verify", c2], capture_output=True, text=True)
check(r.returncode == 0 and "OK, 10 files" in r.stdout, "verify the converted: " + r.stdout.strip())
r = subprocess.run([tool, "consolidate", c2, out + "3"], capture_output=True, text=True)
_, t3 = read_safetensors(out + "3")
check(r.returncode == 0 and b"".join(t3[p["name"]] for p in info["param_list"]) == gathered,
      "converted checkpoint consolidates to the same parameters, bitwise")
# a full disk in the middle of a streamed blob (the third blob: rank 0's
# stage2.state0): exit 2 naming ENOSPC, nothing left (no tag, staging or latest)
c3 = os.path.join(d, "small-enospc")
shutil.rmtree(c3, ignore_errors=True)
env = dict(os.environ, ZERO_CKPT_FAULT="enospc:3")
r = subprocess.run([tool, "convert", small, c3, "--ranks", "2", "--plugin", "stage2"], capture_output=True, text=True,
                   env=env)
check(r.returncode == 2 and "No space left on device" in r.stderr, "convert onto a full disk: " + r.stderr.strip())
check(os.listdir(c3) == [] if os.path.isdir(c3) else True, "full disk: nothing left in DST: %s"
      % (os.listdir(c3) if os.path.isdir(c3) else []))
print("convert onto a full disk: " + r.stderr.strip())
# a staging directory an earlier run left (DST/<tag>.partial) holding a file
# that is not a checkpoint's: exit 2 naming it, the file left as it was (the
# checkpoint's own leftover beside it removed), nothing published
c4 = os.path.join(d, "small-kept")
shutil.rmtree(c4, ignore_errors=True)
tag = open(os.path.join(small, "latest")).read().strip()
stage = os.path.join(c4, tag + ".partial")
os.makedirs(stage)
notes = os.path.join(stage, "notes.txt")
with open(notes, "w") as f:
    f.write("the host's\n")
with open(os.path.join(stage, "manifest.json"), "w") as f:
    f.write("{}")
r = subprocess.run([tool, "convert", small, c4, "--ranks", "2", "--plugin", "stage2"], capture_output=True, text=True)
check(r.returncode == 2 and "holds 1 file(s) that are not a checkpoint's" in r.stderr and stage in r.stderr,
      "convert into a root whose leftover staging dir holds a host file: " + (r.stdout + r.stderr).strip())
check(open(notes).read() == "the host's\n", "the host's file in the leftover staging dir kept as it was")
check(not os.path.exists(os.path.join(stage, "manifest.json")), "the checkpoint's own leftover removed")
check(sorted(os.listdir(c4)) == [tag + ".partial"], "nothing published: %s" % sorted(os.listdir(c4)))
print("convert with a host file in a leftover staging dir: " + r.stderr.strip())
shutil.rmtree(c2, ignore_errors=True)
shutil.rmtree(c3, ignore_errors=True)
shutil.rmtree(c4, ignore_errors=True)

big = os.path.join(d, "big")
largest_kib = 4 * (4 << 20) // 1024
rc0, base = peak_rss_kib([tool, "info", big])
rc1, peak = peak_rss_kib([tool, "consolidate", big, os.path.join(d, "big.safetensors")])
bound = base + 2 * largest_kib + 8192
print("consolidate of a 64 MiB model, largest tensor %d KiB: peak RSS %d KiB (info: %d KiB, bound %d KiB)"
      % (largest_kib, peak, base, bound))
check(rc0 == 0 and rc1 == 0 and peak <= bound, "consolidate memory bounded by the largest tensor")
check(os.path.getsize(os.path.join(d, "big.safetensors")) > 64 << 20, "big consolidated file complete")
os.remove(os.path.join(d, "big.safetensors"))

# convert streams: the 64 MiB model (192 MiB with its Adam state) resharded
# to 3 ranks of stage2 peaks at info's RSS + 8 MiB (a 1 MiB piece, a 1 MiB
# verified chunk), far below one tensor (16 MiB) or the optimizer state.
conv = os.path.join(d, "big-x3")
shutil.rmtree(conv, ignore_errors=True)
rc2, peak2 = peak_rss_kib([tool, "convert", big, conv, "--ranks", "3", "--plugin", "stage2"])
bound2 = base + 8192
print("convert of a 64 MiB model (192 MiB of optimizer state) to stage2 x3: peak RSS %d KiB (info: %d KiB, bound %d KiB)"
      % (peak2, base, bound2))
check(rc2 == 0 and peak2 <= bound2, "convert memory bounded by a piece, not the model")
r = subprocess.run([tool, "verify", conv], capture_output=True, text=True)
check(r.returncode == 0 and "OK, 15 files" in r.stdout, "verify of the converted checkpoint: " + r.stdout.strip())
r = subprocess.run([tool, "info", conv, "--json"], capture_output=True, text=True)
ci = json.loads(r.stdout)
check(ci["plugin"] == "stage2" and ci["world_size"] == 3, "converted: stage2 at 3 ranks")
shutil.rmtree(conv, ignore_errors=True)
sys.exit(1 if fails else 0)
