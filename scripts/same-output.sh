#!/bin/bash
# Compares the piped stdout of two collbench binaries on a few sweeps, with the
# measured numbers masked (times, bandwidths, the slowest rank): a refactor must
# print the same table. Exit 1 on a difference.
tmp=$(mktemp -d); trap "rm -rf $tmp" EXIT
old=${1:?usage: same-output.sh OLD_BINARY NEW_BINARY}; new=${2:?usage: same-output.sh OLD_BINARY NEW_BINARY}
mask() { sed -E 's/ +[0-9]+\.[0-9]+/ N/g; s/rank [0-9]+ \([0-9.]+ us\)/rank R/; s/(command|started_at|host)[^|]*//'; }
fail=0
while read -r line; do
  [ -z "$line" ] && continue
  $old $line --iters 1 --warmup 0 2>$tmp/o.err | mask > $tmp/o.txt
  $new $line --iters 1 --warmup 0 2>$tmp/n.err | mask > $tmp/n.txt
  if cmp -s $tmp/o.txt $tmp/n.txt; then echo "same ($(wc -l < $tmp/n.txt) lines): $line"; else echo "DIFF: $line"; diff $tmp/o.txt $tmp/n.txt | head -10; fail=1; fi
done <<'LIST'
all-reduce --sizes 8B:64K --ranks 2
all --sizes 1K:16K --ranks 3
broadcast --root all -v --ranks 3 --sizes 1K:4K
all-reduce --sizes 8B:64K --format nccl-tests
all-gather --sizes 8B:64K --format markdown --ranks 4
all-reduce --sizes 1K:2K -d all -o all --algo all
reduce-scatter --sizes 1K:8K --placement in --ranks 3
LIST
exit $fail
