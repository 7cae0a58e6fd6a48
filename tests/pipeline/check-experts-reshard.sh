#!/usr/bin/env bash
# (libzero 1.13) A checkpoint of stage0 (and of stage1-pp) with a two-stage pipeline and an
# expert group (each stage's experts a record of its own in the manifest)
# written at 2 ranks per stage (expert-DP groups of one rank) loads at 4
# ranks per stage (groups of two), each rank's expert found by name in its
# stage's record and equal, bitwise, to what the saver's rank of that color
# held; zero-ckpt info names each stage's record.
# usage: check-experts-reshard.sh TEST_PP_ENGINE ZERO_CKPT
set -u
bin=$1 ckpt=$2
dir=$(mktemp -d /tmp/zero-pp-experts-XXXXXX)
trap 'rm -rf "$dir"' EXIT
mpirun=(mpirun --allow-run-as-root --oversubscribe --mca btl self,vader)
for plugin in stage0 stage1-pp; do
  rm -rf "${dir:?}"/*
  "${mpirun[@]}" -np 4 "$bin" --experts-save "$dir" $plugin || { echo "check-experts-reshard: $plugin: the save run failed"; exit 1; }
  "${mpirun[@]}" -np 8 "$bin" --experts-load "$dir" $plugin ||
    { echo "check-experts-reshard: $plugin: the load at 8 ranks failed"; exit 1; }
  info=$("$ckpt" info "$dir")
  for s in 0 1; do
    printf '%s\n' "$info" | grep -q "experts      group 1 of pipeline stage $s: 1 parameters on each of 2" ||
      { echo "check-experts-reshard: zero-ckpt info lacks stage $s's expert record:"; printf '%s\n' "$info"; exit 1; }
  done
done
echo "check-experts-reshard: ok"
