#!/usr/bin/env bash
# lint.no_asprintf: libzero and its plugins never call asprintf/vasprintf.
# Why: the ASan runs unwind allocation stacks with frame pointers, which
# stop inside glibc's vasprintf, so tests/sanitizers/lsan.supp suppresses
# every leak allocated there as Open MPI's (its strings); a libzero leak
# through asprintf would be hidden.  Usage: check_no_asprintf.sh NM PATH...
# (a shared library: its dynamic symbols; a directory: every object file
# and shared library under it -- the plugins' build directory, the contrib
# plugins' objects that lint compiles -- so a new plugin is checked too).
set -u
nm=$1
shift
bad=0
checked=0
files=()
for p in "$@"; do
    if [ -d "$p" ]; then
        while IFS= read -r o; do files+=("$o"); done < <(find "$p" -name '*.o' -o -name '*.so')
    elif [ -e "$p" ]; then
        files+=("$p")
    fi
done
for f in "${files[@]}"; do
    checked=$((checked + 1))
    case "$f" in *.o) dyn=() ;; *) dyn=(-D) ;; esac
    hits=$("$nm" "${dyn[@]}" --undefined-only "$f" 2>/dev/null | grep -Ew '(__)?v?asprintf(_chk)?(@.*)?$')
    if [ -n "$hits" ]; then
        echo "lint.no_asprintf: $f calls: $hits (use snprintf into a sized buffer; see tests/sanitizers/lsan.supp)" >&2
        bad=1
    fi
done
if [ "$checked" -eq 0 ]; then
    echo "lint.no_asprintf: none of the files exist: $*" >&2
    exit 1
fi
[ "$bad" -ne 0 ] || echo "lint.no_asprintf: $checked libraries and objects, no asprintf/vasprintf"
exit $bad
