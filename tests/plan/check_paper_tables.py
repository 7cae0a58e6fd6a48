#!/usr/bin/env python3
"""The ZeRO paper's Table 1 and Table 2 ('theoretical' columns), cell by
cell, from zero-estimate --json (Rajbhandari et al., "ZeRO: Memory
Optimizations Toward Training Trillion Parameter Models", SC'20).

Table 1: per-device model-state memory in GB, K = 12, mixed precision, for
Psi = 7.5B, 128B and 1T at N_d = 1, 4, 16, 64, 256, 1024; columns P_os,
P_os+g, P_os+g+p (stage 1, 2, 3).  Table 2: the largest model whose model
states fit 32 GB per GPU at N_d = 64 with MP = 1, 2, 4, 8, 16 (GPUs =
64 x MP): baseline (stage 0), P_os, P_os+g, P_os+g+p.  The strings below
are the paper's printed cells; the tool must print exactly these.
Usage: check_paper_tables.py <zero-estimate binary>"""
import json, subprocess, sys

tool = sys.argv[1]
ranks = [1, 4, 16, 64, 256, 1024]
table1 = {  # model -> stage -> cells at ranks
    "7.5B": {1: "120 52.5 35.6 31.4 30.4 30.1", 2: "120 41.3 21.6 16.6 15.4 15.1", 3: "120 30 7.5 1.88 0.47 0.12"},
    "128B": {1: "2048 896 608 536 518 513", 2: "2048 704 368 284 263 257", 3: "2048 512 128 32 8 2"},
    "1T": {1: "16000 7000 4750 4187 4046 4011", 2: "16000 5500 2875 2218 2054 2013",
           3: "16000 4000 1000 250 62.5 15.6"},
}
table2 = {  # MP -> baseline, P_os, P_os+g, P_os+g+p
    1: "2B 7.6B 14.4B 128B", 2: "4B 15.2B 28.8B 256B", 4: "8B 30.4B 57.6B 0.5T",
    8: "16B 60.8B 115.2B 1T", 16: "32B 121.6B 230.4B 2T",
}
bad = 0


def run(*args):
    out = subprocess.run([tool, *args, "--json"], check=True, capture_output=True, text=True).stdout
    return json.loads(out)


for model, rows in table1.items():
    j = run("--params", model, "--ranks", ",".join(map(str, ranks)), "--plugins", "stage0")
    for stage, want in rows.items():
        got = " ".join(c["gb"] for c in j["paper_model_states"]["stage%d" % stage])
        ok = got == want
        bad += not ok
        print("Table 1 %-5s stage %d: %-40s %s" % (model, stage, got, "ok" if ok else "expected " + want))
    # the baseline (stage 0) is 16 Psi at every N_d
    base = {c["gb"] for c in j["paper_model_states"]["stage0"]}
    ok = base == {table1[model][1].split()[0]}
    bad += not ok
    print("Table 1 %-5s baseline: %s %s" % (model, sorted(base), "ok" if ok else "expected 16 Psi everywhere"))

j = run("--budget", "32GB", "--ranks", "64", "--mp", "1,2,4,8,16", "--plugins", "stage0")
for e in j["paper_max_params"]:
    got = " ".join(e["paper"]["stage%d" % s]["paper"] for s in range(4))
    want = table2[e["mp"]]
    ok = got == want and e["gpus"] == 64 * e["mp"]
    bad += not ok
    print("Table 2 MP %-2d GPUs %-4d: %-28s %s" % (e["mp"], e["gpus"], got, "ok" if ok else "expected " + want))
if len(j["paper_max_params"]) != len(table2):
    bad += 1
    print("Table 2: expected %d rows" % len(table2))
print("FAIL: %d cells differ" % bad if bad else "all cells as printed in the paper")
sys.exit(1 if bad else 0)
