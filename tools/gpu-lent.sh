#!/usr/bin/env bash
# tools/gpu-lent.sh: run tools/gpu-check.sh on a lent GPU machine in one
# command, from a checkout that carries what the machine's image lacks.
#
#   tools/gpu-lent.sh fetch          here (a Debian machine with apt): put the
#                                    Jansson runtime and headers (.deb) into
#                                    .gpudeps/ (git-ignored)
#   tools/gpu-lent.sh run [OUTDIR]   on the GPU machine: add Jansson where the
#                                    image has none, then tools/gpu-check.sh OUTDIR
#   tools/gpu-lent.sh packed OUT     the same into a scratch folder, then into
#                                    OUT only summary.txt, summary.json,
#                                    results.tsv and gpu-check-logs.tgz (every
#                                    log): the device tool returns at most 8
#                                    files from $OUT, and the check writes ~150
#
# Why: the lent machines (image 'cuda', 2026-11) have nvcc, Open MPI, CMake
# and torch but no Jansson headers (docs/gpu.md).  Unpacking a .deb straight
# into / (or Debian's Open MPI over the image's) once broke the image's
# linker, so `run` unpacks into a scratch folder and copies a file only where
# nothing exists yet; it never overwrites a file of the image.  Device time is
# short (15 minutes per task, starts included): the device tool's command is
#   bash tools/gpu-lent.sh packed "$OUT"      (carry: .gpudeps; timeout_s 600)
# and the summary, the results and one archive of the logs come back
# (gpu-check's own deadline, GPU_CHECK_DEADLINE, ends it inside 10 minutes).
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
deps=$here/.gpudeps
cmd=${1:-}

case $cmd in
  fetch)
    mkdir -p "$deps"
    if ls "$deps"/libjansson4_*.deb "$deps"/libjansson-dev_*.deb >/dev/null 2>&1; then
      echo "gpu-lent: $deps already holds the Jansson packages"
      exit 0
    fi
    (cd "$deps" && apt-get download libjansson4 libjansson-dev 2>&1 | grep -v '^W: Download is performed unsandboxed') ||
      { echo "gpu-lent: apt-get download failed" >&2; exit 1; }
    ls "$deps"
    ;;
  run)
    out=${2:-gpu-check-$(date +%Y%m%d-%H%M%S)}
    root=${GPU_LENT_ROOT:-} # where to add the files (empty: /; set only to try this script)
    if [[ ! -e $root/usr/include/jansson.h ]]; then
      debs=$(ls "$deps"/*.deb 2>/dev/null)
      [[ -n $debs ]] || echo "gpu-lent: no jansson.h and no $deps/*.deb (run 'tools/gpu-lent.sh fetch' and carry .gpudeps)" >&2
      scratch=$(mktemp -d /tmp/gpudeps.XXXXXX)
      for d in $debs; do dpkg -x "$d" "$scratch"; done
      added=0
      # files and symlinks only, each where nothing exists yet
      while IFS= read -r -d '' f; do
        rel=$root${f#"$scratch"}
        [[ -e $rel || -L $rel ]] && continue
        mkdir -p "$(dirname "$rel")" && cp -a "$f" "$rel" && added=$((added + 1))
      done < <(find "$scratch" \( -type f -o -type l \) -print0)
      rm -rf "$scratch"
      [[ -z $root ]] && { ldconfig 2>/dev/null || true; }
      echo "gpu-lent: added $added Jansson file(s) the image lacked"
    fi
    [[ -n $root ]] && exit 0
    exec bash "$here/tools/gpu-check.sh" "$out"
    ;;
  packed)
    dest=${2:?usage: tools/gpu-lent.sh packed OUT}
    mkdir -p "$dest" || exit 1
    scratch=$(mktemp -d /tmp/gpu-check.XXXXXX)
    bash "$here/tools/gpu-lent.sh" run "$scratch/gpu-check"
    rc=$?
    for f in summary.txt summary.json results.tsv; do
      [[ -e $scratch/gpu-check/$f ]] && cp "$scratch/gpu-check/$f" "$dest/"
    done
    tar czf "$dest/gpu-check-logs.tgz" -C "$scratch" gpu-check
    rm -rf "$scratch"
    echo "gpu-lent: $dest holds summary.txt, summary.json, results.tsv and gpu-check-logs.tgz (exit $rc)"
    exit $rc
    ;;
  *)
    echo "usage: tools/gpu-lent.sh fetch | run [OUTDIR] | packed OUT" >&2
    exit 2
    ;;
esac
