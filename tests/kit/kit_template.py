#!/usr/bin/env python3
"""The plugin kit from an outside author's seat (issue 32).

  1. libzero is installed into a temporary prefix (cmake --install); the
     prefix has zero_kit.h, libzero_kit.a, zero-kit.pc and zero::kit in the
     CMake package;
  2. examples/plugin-template is copied out of the source tree and built
     from the prefix alone (find_package(zero) + zero::kit, warnings as
     errors): no source-tree include on its compile line, only its table
     exported, no link to libzero; template_dp.c is at most 100 lines;
  3. pkg-config --cflags --libs zero-kit (PKG_CONFIG_PATH at the prefix)
     names the prefix's include dir and -lzero_kit and never -lzero; the
     template builds with plain cc from those flags too;
  4. the template trains through zero-demo under mpirun to bitwise the
     parameters of stage0 (demo summary digest.bits) at N = 2, 3 and 5, in
     fp32 and bf16, and with gradient accumulation and small buckets at
     N = 3; the pkg-config build at N = 2 as well.
Usage: kit_template.py --build DIR --src DIR --work DIR --demo PATH --mpirun PATH
Standard library only.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

BASE = {
    "train_micro_batch_size_per_gpu": 4,
    "gradient_accumulation_steps": 1,
    "steps_per_print": 1000,
    "gradient_clipping": 1.0,
    "optimizer": {"type": "AdamW", "params": {"lr": 0.003, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01}},
    "zero_optimization": {"stage": 0, "overlap_comm": True, "contiguous_gradients": True},
}
fails = []


def say(msg):
    print("kit-template: " + msg, flush=True)


def sh(cmd, log, env=None, cwd=None):
    with open(log, "w") as lf:
        rc = subprocess.call(cmd, stdout=lf, stderr=subprocess.STDOUT, env=env, cwd=cwd, timeout=300)
    if rc != 0:
        sys.stdout.write(open(log).read()[-4000:])
        say(f"{' '.join(cmd[:3])} ... failed (exit {rc}); log {log}")
        sys.exit(1)
    return open(log).read()


def check_so(so):
    out = subprocess.run(["nm", "-D", "--defined-only", so], capture_output=True, text=True).stdout
    # (__odr_asan.*: the indicator symbols AddressSanitizer adds beside each exported global)
    names = sorted({line.split()[-1] for line in out.splitlines()
                    if line.strip() and not line.split()[-1].startswith("__odr_asan.")})
    if names != ["zero_plugin_v4"]:
        fails.append(f"{so} exports {names}, expected only zero_plugin_v4")
    ldd = subprocess.run(["ldd", so], capture_output=True, text=True).stdout
    if "libzero.so" in ldd:
        fails.append(f"{so} links libzero (services come through the table)")


def config(a, tag, bf16=False, gas=1, bucket=0):
    cfg = json.loads(json.dumps(BASE))
    cfg["gradient_accumulation_steps"] = gas
    if bucket:
        cfg["zero_optimization"]["reduce_bucket_size"] = bucket
    if bf16:
        cfg["bf16"] = {"enabled": True}
    path = os.path.join(a.work, tag + ".json")
    json.dump(cfg, open(path, "w"), indent=1)
    return path


def run(a, tag, np_, cfg, plugin, plugin_dir):
    summ = os.path.join(a.work, tag + ".summary.json")
    log = os.path.join(a.work, tag + ".log")
    cmd = [a.mpirun, "--allow-run-as-root", "--oversubscribe", "-np", str(np_), "--mca", "btl", "self,vader",
           a.demo, "--config", cfg, "--steps", str(a.steps), "--quiet", "--summary", summ, "--plugin", plugin,
           "--no-validation"]  # digests and losses are compared, not the validation loss
    cmd += ["--data", a.data] if a.data else []
    env = dict(os.environ)
    env["ZERO_PLUGIN_PATH"] = plugin_dir + (":" + env["ZERO_PLUGIN_PATH"] if env.get("ZERO_PLUGIN_PATH") else "")
    env["ZERO_LOG_LEVEL"] = "info"
    text = sh(cmd, log, env=env)
    s = json.load(open(summ))
    if plugin != "stage0" and os.path.join(plugin_dir, "libzero-plugin-" + plugin + ".so") not in text:
        fails.append(f"{tag}: {plugin} was not loaded from {plugin_dir}")
    return s


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", required=True)
    p.add_argument("--src", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--demo", required=True)
    p.add_argument("--mpirun", default="mpirun")
    p.add_argument("--pkg-config", default="pkg-config")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--data", default="")
    a = p.parse_args()
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    prefix = os.path.join(a.work, "prefix")
    # 1. install
    sh(["cmake", "--install", a.build, "--prefix", prefix], os.path.join(a.work, "install.log"))
    libdir = os.path.dirname(next(os.path.join(d, f) for d, _, fs in os.walk(prefix) for f in fs if f == "libzero_kit.a"))
    for f in [os.path.join(prefix, "include", h) for h in ("zero_kit.h", "zero_plugin.h")] + \
             [os.path.join(libdir, "pkgconfig", "zero-kit.pc"), os.path.join(libdir, "cmake", "zero", "zeroTargets.cmake")]:
        if not os.path.exists(f):
            say(f"missing after install: {f}")
            return 1
    if "zero::kit" not in open(os.path.join(libdir, "cmake", "zero", "zeroTargets.cmake")).read():
        fails.append("the installed CMake package has no zero::kit")
    # 2. the template, copied out of the tree, built from the prefix alone
    tsrc = os.path.join(a.work, "template-src")
    shutil.copytree(os.path.join(a.src, "examples", "plugin-template"), tsrc)
    lines = sum(1 for _ in open(os.path.join(tsrc, "template_dp.c")))
    say(f"template_dp.c: {lines} lines")
    if lines > 100:
        fails.append(f"template_dp.c has {lines} lines, more than 100")
    tbuild = os.path.join(a.work, "template")
    # the libzero build's own flags (a sanitizer build's instrumented kit links only into
    # plugins built the same way; empty otherwise): tests/kit/CMakeLists.txt
    out_cflags = os.environ.get("ZERO_OUTSIDE_CFLAGS", "").split()
    out_ldflags = os.environ.get("ZERO_OUTSIDE_LDFLAGS", "").split()
    sh(["cmake", "-S", tsrc, "-B", tbuild, "-DCMAKE_PREFIX_PATH=" + prefix, "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
        "-DCMAKE_C_FLAGS=" + " ".join(["-Werror"] + out_cflags), "-DCMAKE_MODULE_LINKER_FLAGS=" + " ".join(out_ldflags),
        "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON"], os.path.join(a.work, "template-configure.log"))
    sh(["cmake", "--build", tbuild], os.path.join(a.work, "template-build.log"))
    cc = open(os.path.join(tbuild, "compile_commands.json")).read()
    for d in ("abi", "kit", "core", "plugins"):
        if "-I" + os.path.join(a.src, d) in cc or "-isystem " + os.path.join(a.src, d) in cc:
            fails.append(f"the template was compiled against the source tree's {d}/")
    if os.path.join(prefix, "include") not in cc:
        fails.append(f"the template was not compiled against {prefix}/include")
    so = os.path.join(tbuild, "libzero-plugin-template-dp.so")
    check_so(so)
    # 3. pkg-config
    env = dict(os.environ, PKG_CONFIG_PATH=os.path.join(libdir, "pkgconfig"))
    flags = subprocess.run([a.pkg_config, "--cflags", "--libs", "zero-kit"], capture_output=True, text=True, env=env)
    say(f"pkg-config --cflags --libs zero-kit: {flags.stdout.strip()}")
    words = flags.stdout.split()
    if flags.returncode != 0 or "-lzero_kit" not in words or "-lzero" in words or \
            not any(w.startswith("-I") and os.path.realpath(w[2:]) == os.path.realpath(os.path.join(prefix, "include"))
                    for w in words):
        fails.append(f"pkg-config zero-kit: exit {flags.returncode}, flags {flags.stdout.strip()!r} {flags.stderr.strip()}")
    pcdir = os.path.join(a.work, "pkgconfig-build")
    os.makedirs(pcdir)
    pcso = os.path.join(pcdir, "libzero-plugin-template-dp.so")
    sh(["cc", "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC", "-fvisibility=hidden",
        os.path.join(tsrc, "template_dp.c")] + out_cflags + words + out_ldflags + ["-Wl,--no-undefined", "-o", pcso],
       os.path.join(a.work, "pkgconfig-build.log"))
    check_so(pcso)
    # 4. bitwise stage0
    cases = [  # (tag, N, bf16, gas, bucket)
        ("n2_fp32", 2, False, 1, 0), ("n2_bf16", 2, True, 1, 0),
        ("n3_fp32", 3, False, 1, 0), ("n3_bf16", 3, True, 1, 0),
        ("n5_fp32", 5, False, 1, 0), ("n5_bf16", 5, True, 1, 0),
        ("n3_fp32_gas2_b3000", 3, False, 2, 3000),
    ]
    for tag, np_, bf16, gas, bucket in cases:
        cfg = config(a, tag, bf16, gas, bucket)
        ref = run(a, tag + "-stage0", np_, cfg, "stage0", tbuild)
        runs = [("cmake", run(a, tag + "-template", np_, cfg, "template-dp", tbuild))]
        if tag == "n2_fp32":
            runs.append(("pkg-config", run(a, tag + "-template-pc", np_, cfg, "template-dp", pcdir)))
        for how, got in runs:
            ok = got["digest"]["bits"] == ref["digest"]["bits"]
            print(f"  {tag:<20} {how:<10} stage0 {ref['digest']['bits']}  template-dp {got['digest']['bits']}  "
                  f"{'bitwise' if ok else 'DIFFERENT'}", flush=True)
            if got.get("plugin") != "template-dp":
                fails.append(f"{tag}: ran plugin {got.get('plugin')!r}, expected template-dp")
            if not ok:
                fails.append(f"{tag} ({how}): template-dp {got['digest']['bits']} != stage0 {ref['digest']['bits']} "
                             f"(losses {got['losses']} vs {ref['losses']})")
    for f in fails:
        print("FAIL:", f)
    say("PASS" if not fails else f"FAIL ({len(fails)})")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
