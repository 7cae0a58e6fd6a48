#!/usr/bin/env python3
"""Read an abidiff report (run with --no-added-syms) on stdin and exit 0 if
every change it describes is allowed by libzero's ABI rules, else print the
offending lines and exit 1.

Allowed: a struct that grew by data members inserted at or after its old end
(public structs start with struct_size and grow append-only), and new
enumerators.  Everything else (removed or changed functions, a member that
moved, changed type or disappeared, an enumerator whose value changed) is an
incompatible change.  abidiff's own suppression rules are not used because
`has_data_member_inserted_at = end` also hides a reorder that comes with an
append."""
import re
import sys

CONTEXT = [
    r'^Functions changes summary: 0 Removed(?: \(\d+ filtered out\))?, \d+ Changed.*$',
    r'^Variables changes summary: 0 Removed(?: \(\d+ filtered out\))?, \d+ Changed.*$',
    r'^\d+ functions? with some indirect sub-type changes?:$',
    r"^\[C\] '.*' .*has some indirect sub-type changes:$",
    r'^parameter \d+ of type .* has sub-type changes:$',
    r'^return type changed:$',
    r"^in pointed to type .*:$",
    r"^in unqualified underlying type .*:$",
    r"^underlying type .* changed:$",
    r"^type of .* changed:$",
    r'^(?:\'.*\' )?details (?:were|was) reported earlier$',
]
CONTEXT = [re.compile(p) for p in CONTEXT]

bad = []
old_size = None
mode = None  # 'insert' or 'enum' while reading the items of such a block
for raw in sys.stdin:
    line = raw.strip()
    if not line:
        continue
    m = re.match(r'^type size changed from (\d+) to (\d+) \(in bits\)$', line)
    if m:
        old_size, new_size = int(m.group(1)), int(m.group(2))
        if new_size < old_size:
            bad.append(line)
        mode = None
        continue
    if re.match(r'^\d+ data member insertions?:$', line):
        mode = 'insert'
        continue
    if re.match(r'^\d+ enumerator insertions?:$', line):
        mode = 'enum'
        continue
    if mode == 'insert':
        m = re.match(r"^'.*', at offset (\d+) \(in bits\)", line)
        if m:
            if old_size is None or int(m.group(1)) < old_size:
                bad.append(line + '   <- not appended at the end')
            continue
    if mode == 'enum' and re.match(r"^'.*' value '.*'$", line):
        continue
    mode = None
    if any(p.match(line) for p in CONTEXT):
        continue
    bad.append(line)

if bad:
    print('abidiff_allowed: incompatible change(s):')
    for b in bad:
        print('  ' + b)
    sys.exit(1)
sys.exit(0)
