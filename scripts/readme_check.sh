#!/usr/bin/env bash
# Pastes the README's "What you can do" block into a scratch folder, one command at a time, the
# way a newcomer would, and checks each one's exit code (0, except the planted bug's 1 and
# compare's 0 or 1). Run after scripts/setup.sh (it uses build/).
#
# Usage: scripts/readme_check.sh [--full-size] [--keep]
#   default      reduced sizes: batch 4, 3 timed iterations, 8 training steps, one sweep cell,
#                a 10 s --assign auto budget (a few minutes on 2 cores)
#   --full-size  every command exactly as written (an hour or more on 2 cores: the naive oracle
#                on AlexNet, the sweep's 12 training runs)
#   --keep       keep the scratch folder (its path is printed)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
full=0
keep=0
for a in "$@"; do
  case "$a" in
    --full-size) full=1 ;;
    --keep) keep=1 ;;
    *) echo "usage: $0 [--full-size] [--keep]" >&2; exit 2 ;;
  esac
done
[ -x "$root/build/mosaic" ] || { echo "readme_check: build/mosaic is missing: run scripts/setup.sh first" >&2; exit 2; }
work=$(mktemp -d /tmp/mosaic-readme-XXXXXX)
[ "$keep" = 1 ] || trap 'rm -rf "$work"' EXIT
# The folder looks like the repository root to the commands: build/ and tests/ are links, the sweep
# files a copy (their output, ../../sweeps/NAME, must land in the scratch folder: through a
# link, '..' would climb out of the repository's examples/ instead).
ln -s "$root/build" "$work/build"
ln -s "$root/tests" "$work/tests"  # the exporter scripts the README runs
mkdir -p "$work/examples"
cp -r "$root/examples/sweeps" "$work/examples/sweeps"
cd "$work"
export MOSAIC_PROGRESS=0 MOSAIC_CACHE_DIR="$work/cache"

# The block: from "## What you can do" to the end of its first ```sh fence, continuation lines joined.
mapfile -t commands < <(awk '/^## What you can do/ {f = 1} f && /^```sh/ {g = 1; next} g && /^```/ {exit} g' \
  "$root/README.md" | sed -e ':a' -e '/\\$/N; s/\\\n//; ta')
[ "${#commands[@]}" -gt 10 ] || { echo "readme_check: no command block found in README.md" >&2; exit 2; }

reduce() {  # the command, smaller; comments dropped
  local c="${1%%  #*}"
  [ "$full" = 1 ] && { echo "$c"; return; }
  c="${c//--batch 64/--batch 4}"
  c="${c//--batch 32/--batch 4}"
  c="${c//torch.randn(1, 3, 224, 224)/torch.randn(1, 3, 64, 64)}"
  case "$c" in
    *" bench "*" --assign auto"*) c="$c --iterations 3 --warmup 1 --max-seconds 10 --auto-budget 10" ;;
    *" bench "*"--processes"*) c="$c --iterations 3 --warmup 1 --max-seconds 10 --batch 4" ;;
    *" bench "*) c="$c --iterations 3 --warmup 1 --max-seconds 10" ;;
  esac
  case "$c" in
    *" bench "*" --batch "*) ;;
    *" bench "*) c="$c --batch 4" ;;
  esac
  case "$c" in
    *" train "*) c="$c --steps 8 --no-eval" ;;
    *" sweep "*) c="$c --max-cells 1" ;;
  esac
  echo "$c"
}

pass=0
fail=0
start_all=$(date +%s)
for raw in "${commands[@]}"; do
  [ -n "${raw// }" ] || continue
  cmd=$(reduce "$raw")
  want="0"
  case "$cmd" in
    *"--plant "*) want="1" ;;
    *" compare "*) want="0|1" ;;
  esac
  t0=$(date +%s)
  bash -c "$cmd" > step.log 2>&1
  rc=$?
  t1=$(date +%s)
  if [[ "$rc" =~ ^($want)$ ]]; then
    pass=$((pass + 1))
    printf 'ok    %4ss  %s\n' "$((t1 - t0))" "$cmd"
  else
    fail=$((fail + 1))
    printf 'FAIL  %4ss  %s  (exit %s, expected %s)\n' "$((t1 - t0))" "$cmd" "$rc" "$want"
    tail -n 15 step.log | sed 's/^/      /'
  fi
done
echo "readme_check: $(( $(date +%s) - start_all )) s in all$( [ "$keep" = 1 ] && echo ", kept in $work")"
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
