#!/usr/bin/env bash
# Builds Mosaic and runs the test suite (unit, cross-backend, CLI error paths, hostile models,
# ONNX node tests, torchvision-vs-PyTorch). Set MOSAIC_SANITIZE=1 for an ASan/UBSan build.
# Usage: scripts/test.sh [--full] [ctest arguments...]
#   default: every test but the long end-to-end runs listed in tests/full_only.txt (a few
#            minutes on 2 cores after the build);
#   --full:  all of them (run it before resolving an issue).
set -euo pipefail
cd "$(dirname "$0")/.."
build=build
extra=()
if [ "${MOSAIC_SANITIZE:-0}" = 1 ]; then
  build=build-asan
  extra=(-DMOSAIC_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo)
  # Any finding fails the test that triggered it (UBSan only warns by default).
  # allocator_may_return_null: a failed allocation returns null as in production (the out-of-memory
  # message is tested), instead of ASan aborting the process.
  export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:allocator_may_return_null=1
  # Open MPI keeps allocations past MPI_Finalize (data-parallel tests run ranks under mpirun).
  # Its components stay loaded (no dlclose), and allocation stacks are unwound the slow, exact
  # way (Open MPI's libraries lack frame pointers), so that its frames are named and suppressed.
  export LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp:fast_unwind_on_malloc=0" \
         OMPI_MCA_mca_base_component_disable_dlclose=1
fi
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${extra[@]}" > /dev/null
cmake --build "$build"
full=0
if [ "${1:-}" = "--full" ]; then full=1; shift; fi
exclude=()
if [ "$full" = 0 ]; then
  pattern=$(sed -e 's/#.*//' -e 's/[[:space:]]*$//' -e '/^$/d' tests/full_only.txt | paste -sd'|')
  exclude=(-E "$pattern")
  echo "scripts/test.sh: skipping the long runs in tests/full_only.txt (scripts/test.sh --full runs them)"
fi
ctest --test-dir "$build" -j2 --output-on-failure "${exclude[@]}" "$@"
