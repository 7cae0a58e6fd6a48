#!/usr/bin/env bash
# Every plugin built into the plugin dir exports exactly its table
# (zero_plugin_v4, the current revision; the in-tree plugins are all built
# from the current headers) and nothing else, and is loadable on its own
# (no undefined symbols beyond libc/libm/pthread: plugins never link libzero).
# Usage: check_plugin_exports.sh <plugin dir>
set -euo pipefail
dir=$1
shopt -s nullglob
plugins=("$dir"/libzero-plugin-*.so)
((${#plugins[@]})) || { echo "no plugins in $dir"; exit 1; }
fail=0
for p in "${plugins[@]}"; do
  exports=$(nm -D --defined-only "$p" | awk '{print $3}' | sed 's/@.*//' | sort -u | tr '\n' ' ')
  if [[ "$exports" != "zero_plugin_v4 " ]]; then
    echo "$(basename "$p") exports: $exports(expected only zero_plugin_v4)"; fail=1
  fi
  if nm -D --undefined-only "$p" | awk '{print $2}' | grep -q '^zero_'; then
    echo "$(basename "$p") needs libzero symbols (plugins must use the services table):"
    nm -D --undefined-only "$p" | awk '{print "  " $2}' | grep '^  zero_'; fail=1
  fi
done
echo "${#plugins[@]} plugins checked"
exit $fail
