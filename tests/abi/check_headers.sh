#!/usr/bin/env bash
# The public headers (abi/) compile alone in C99/C11 and C++11/C++20 with
# -Wall -Wextra -pedantic -Werror, and run (every *_INIT sets struct_size);
# they never include a Jansson, MPI, NCCL or CUDA header; and no public
# struct has implicit padding.
# Usage: check_headers.sh <abi dir> <C compiler> [C++ compiler]
set -euo pipefail
abi=$1 cc=$2 cxx=${3:-}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0

if grep -nE '#\s*include\s*[<"](jansson|mpi|nccl|cuda|cuda_runtime)[^>"]*[>"]' "$abi"/*.h; then
  echo "a public header includes a dependency's header"; fail=1
fi
for std in c99 c11; do
  if "$cc" -std=$std -Wall -Wextra -pedantic -Werror -I"$abi" "$here/headers_standalone.c" -o "$tmp/c-$std" &&
     "$tmp/c-$std"; then echo "C $std: ok"; else echo "C $std: FAILED"; fail=1; fi
done
# No implicit padding in any public struct (1.7.7): C does not promise that
# an initializer zeroes padding bytes, and libzero reads the bytes past its
# own sizeof of a longer (newer) struct as fields the host set
# (base/struct_in.c); a gap is an explicit reserved field instead.
printf '#include "zero.h"\n#include "zero_plugin.h"\n' >"$tmp/padded.c"
if "$cc" -std=c11 -Wpadded -Werror -I"$abi" -c "$tmp/padded.c" -o "$tmp/padded.o"; then echo "no padding: ok"
else echo "no padding: FAILED (a public struct has implicit padding: make it a reserved field)"; fail=1; fi
if [[ -n "$cxx" ]] && command -v "$cxx" >/dev/null; then
  for std in c++11 c++20; do
    if "$cxx" -x c++ -std=$std -Wall -Wextra -pedantic -Werror -I"$abi" "$here/headers_standalone.c" \
         -o "$tmp/cxx-$std" && "$tmp/cxx-$std"; then echo "C++ $std: ok"; else echo "C++ $std: FAILED"; fail=1; fi
  done
else
  echo "no C++ compiler: C++ checks skipped"
fi
exit $fail
