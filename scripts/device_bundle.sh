#!/usr/bin/env bash
# Packs a Mosaic build into one xz archive that runs on a machine without Debian's packages
# (the GPU machine: Ubuntu 24.04, no oneDNN, OpenBLAS, protobuf or Open MPI; docs/gpu.md):
#   bin/mosaic       a wrapper that sets LD_LIBRARY_PATH for Mosaic alone
#   bin/mosaic.bin   the executable
#   lib/             every shared library it links but the C and C++ runtimes (glibc, the
#                    loader, libstdc++, libgcc_s, libgomp, libm: the newer ones there serve),
#                    under their sonames
#   lib/mosaic/plugins/libmosaic_cuda.so  the cuda backend, where the build has it (it links the
#                    target's own CUDA runtime, cuBLAS and cuDNN)
#   bin/mosaic_tests.bin  the test binary, where the build has it (scripts/gpu-check.sh runs
#                    its cuda tests there)
#   BUILD.txt        what was packed: the commit, the compiler flags, the libraries
# The wrapper keeps these libraries out of everything else on that machine (its Python and
# PyTorch load their own).
#
# usage: scripts/device_bundle.sh BUILD_DIR OUT.tar.xz
#   e.g. cmake -S . -B build-device -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOSAIC_NATIVE=OFF \
#          -DCMAKE_CXX_FLAGS=-march=sapphirerapids && cmake --build build-device --target mosaic
#        scripts/device_bundle.sh build-device .device/mosaic.tar.xz
# and there:  mkdir -p /tmp/m && tar -xJf .device/mosaic.tar.xz -C /tmp/m && /tmp/m/bin/mosaic --version
set -euo pipefail
if [ $# -ne 2 ]; then
  echo "usage: $0 BUILD_DIR OUT.tar.xz" >&2
  exit 2
fi
build=$1 out=$2
exe="$build/mosaic"
if [ ! -x "$exe" ]; then
  echo "$0: $exe is not an executable (build the mosaic target first)" >&2
  exit 1
fi
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
cp "$exe" "$stage/bin/mosaic.bin"
programs=("$exe")
if [ -x "$build/mosaic_tests" ]; then
  cp "$build/mosaic_tests" "$stage/bin/mosaic_tests.bin"
  programs+=("$build/mosaic_tests")
fi
# The runtimes left out: those of the C library and the compiler, which the target has newer.
skip='^(linux-vdso|ld-linux|libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|libgomp)\.'
for program in "${programs[@]}"; do
  ldd "$program" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | while read -r soname path; do
    if [[ "$soname" =~ $skip ]]; then continue; fi
    cp -L "$path" "$stage/lib/$soname"
  done
  if ldd "$program" | grep -q "not found"; then
    echo "$0: $program has unresolved libraries here:" >&2
    ldd "$program" | grep "not found" >&2
    exit 1
  fi
done
# The cuda plugin, where it was built, as a bundled plugin (lib/mosaic/plugins beside bin/):
# the CUDA runtime, cuBLAS and cuDNN it links are the GPU machine's own.
if [ -f "$build/plugins/libmosaic_cuda.so" ]; then
  mkdir -p "$stage/lib/mosaic/plugins"
  cp "$build/plugins/libmosaic_cuda.so" "$stage/lib/mosaic/plugins/"
fi
cat > "$stage/bin/mosaic" <<'EOF'
#!/bin/sh
# Mosaic with the libraries packed beside it (scripts/device_bundle.sh).
here=$(dirname "$(readlink -f "$0")")
LD_LIBRARY_PATH="$here/../lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$here/mosaic.bin" "$@"
EOF
chmod +x "$stage/bin/mosaic"
{
  echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (dirty)')"
  echo "packed: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -m), $(. /etc/os-release && echo "$PRETTY_NAME")"
  echo "flags: $(grep -m1 '^CMAKE_CXX_FLAGS:' "$build/CMakeCache.txt" 2>/dev/null | cut -d= -f2-)" \
       "native: $(grep -m1 '^MOSAIC_NATIVE:' "$build/CMakeCache.txt" 2>/dev/null | cut -d= -f2-)"
  echo "libraries:"
  (cd "$stage/lib" && ls -1)
} > "$stage/BUILD.txt"
mkdir -p "$(dirname "$out")"
tar -C "$stage" -cf - . | xz -9 -T0 > "$out.tmp"
mv "$out.tmp" "$out"
echo "$out: $(du -h "$out" | cut -f1), $(ls "$stage/lib" | wc -l) libraries"
