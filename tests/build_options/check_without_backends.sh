#!/usr/bin/env bash
# Builds Mosaic with im2col and onednn left out (-DMOSAIC_WITH_IM2COL=OFF
# -DMOSAIC_WITH_ONEDNN=OFF, and the torch and cuda plugins) and checks that the result is a working naive-only Mosaic: it
# links neither OpenBLAS nor oneDNN, its registry (and so every default and list) has naive
# alone, and it verifies, benchmarks, trains and gradchecks on it.
# usage: check_without_backends.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1 build=$2
cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOSAIC_WITH_IM2COL=OFF -DMOSAIC_WITH_ONEDNN=OFF \
      -DMOSAIC_WITH_TORCH=OFF -DMOSAIC_WITH_CUDA=OFF -DMOSAIC_BUILD_TESTS=OFF > "$build.configure.log" 2>&1 ||
  { cat "$build.configure.log"; exit 1; }
cmake --build "$build" --target mosaic > "$build.build.log" 2>&1 || { tail -n 40 "$build.build.log"; exit 1; }
m=$build/mosaic
fail() { echo "FAIL: $*"; exit 1; }

libs=$(ldd "$m")
! grep -qE 'libdnnl|libopenblas' <<<"$libs" || fail "the naive-only binary links oneDNN or OpenBLAS: $(grep -E 'dnnl|openblas' <<<"$libs")"
[ "$("$m" backends --names)" = naive ] || fail "backends --names: $("$m" backends --names)"

out=$("$m" bench zoo:fmnist-cnn --batch 2 --warmup 1 --iterations 2 --no-db 2>&1) || fail "bench: $out"
grep -q "naive" <<<"$out" || fail "bench ran no naive configuration: $out"

# A backend this build does not have is named in the error, with the ones it has.
set +e
out=$("$m" bench zoo:fmnist-cnn --backends onednn --batch 2 --no-db 2>&1); rc=$?
set -e
[ $rc -ne 0 ] || fail "bench --backends onednn exited 0 in a build without it"
grep -q "onednn" <<<"$out" && grep -q "naive" <<<"$out" || fail "the error does not name the backend and the choices: $out"
# An optional backend left out says why.
set +e
out=$("$m" bench zoo:fmnist-cnn --backends cuda --batch 2 --no-db 2>&1); rc=$?
set -e
[ $rc -eq 2 ] || fail "bench --backends cuda exited $rc in a build without it: $out"
grep -q "this build has no cuda backend: configured with -DMOSAIC_WITH_CUDA=OFF" <<<"$out" || fail "no reason for cuda: $out"

# train and gradcheck default to the fastest backend the build has: naive here.
out=$("$m" train zoo:fmnist-cnn --data synthetic:96,1,28,28,10 --batch 16 --epochs 1 --no-db 2>&1) || fail "train: $out"
grep -q "naive" <<<"$out" || fail "train does not say it runs on naive: $out"
out=$("$m" gradcheck zoo:fmnist-cnn --batch 1 2>&1) || fail "gradcheck: $out"

suite=/usr/share/libonnx-testdata/data/node
if [ -d "$suite" ]; then
  out=$("$m" verify "$suite/test_relu" "$suite/test_conv_with_strides_padding" --backend all 2>&1) || fail "verify: $out"
  tail -n 1 <<<"$out"
fi
echo "naive-only build: OK"
