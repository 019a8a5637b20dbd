#!/usr/bin/env bash
# Runs the official ONNX node tests on every backend: no case may fail, and every case
# listed in the expected-pass file must pass on the naive oracle. Quantised outputs are compared
# exactly (--exact-quantised): ONNX's reference rounds every tie one way, and so must Mosaic.
set -euo pipefail
mosaic=$1 suite=$2 expected=$3
if [ ! -d "$suite" ]; then echo "ONNX node tests not installed at $suite (apt-get install libonnx-testdata)"; exit 77; fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
status=0
"$mosaic" verify "$suite" --backend all --exact-quantised > "$out" || status=$?
grep -E '^FAILED' "$out" || true
tail -n 1 "$out"
missing=$(comm -23 "$expected" <(grep -E '^PASSED .* \[naive\]' "$out" | awk '{print $2}' | sort))
if [ -n "$missing" ]; then echo "expected to pass on naive but did not:"; echo "$missing"; exit 1; fi
for b in $("$mosaic" backends --names --available); do echo "$b: $(grep -c "^PASSED .* \[$b\]" "$out") passed"; done
exit $status
