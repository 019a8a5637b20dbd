#!/usr/bin/env bash
# The corpus of today's exports (tests/corpus/make_corpus.py): no case FAILED on any backend,
# every case of the expected list passes on the naive oracle alone, and on every other
# backend with the oracle as fallback for the nodes it has no kernel for.
set -euo pipefail
mosaic=$1 cases=$2 expected=$3
out=$(mktemp)
trap 'rm -f "$out"' EXIT
status=0
"$mosaic" verify "$cases" --backend all > "$out" || status=$?
if grep -E '^FAILED' "$out"; then exit 1; fi
missing=$(comm -23 "$expected" <(grep -E '^PASSED .* \[naive\]' "$out" | awk '{print $2}' | sort))
if [ -n "$missing" ]; then echo "expected to pass on naive but did not:"; echo "$missing"; exit 1; fi
for b in $("$mosaic" backends --names --available); do
  alone=$(grep -c "^PASSED .* \[$b\]" "$out" || true)
  [ "$b" = naive ] && { echo "naive: $alone passed"; continue; }
  "$mosaic" verify "$cases" --backend "$b" --fallback naive > "$out.$b" || status=$?
  if grep -E '^FAILED' "$out.$b"; then rm -f "$out.$b"; exit 1; fi
  missing=$(comm -23 "$expected" <(grep -E "^PASSED .* \[$b\]" "$out.$b" | awk '{print $2}' | sort))
  rm -f "$out.$b"
  if [ -n "$missing" ]; then echo "expected to pass on $b with --fallback naive but did not:"; echo "$missing"; exit 1; fi
  echo "$b: $alone passed alone, all $(wc -l < "$expected") expected with --fallback naive"
done
exit $status
