#!/usr/bin/env bash
# Installs Mosaic's build and test dependencies (Debian 12) and builds it in ./build.
# Usage: scripts/setup.sh [--no-build]
# libdnnl-dev only *recommends* ocl-icd-opencl-dev, but Debian's dnnl-config.cmake calls
# find_package(OpenCL REQUIRED): it is listed explicitly because of --no-install-recommends.
# libtorch-dev (PyTorch 1.13's C++ library) is what the torch backend plugin builds against.
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends \
  build-essential cmake ninja-build pkg-config \
  libdnnl-dev ocl-icd-opencl-dev libopenblas-openmp-dev libeigen3-dev \
  libonnx-dev libprotobuf-dev protobuf-compiler \
  libgtest-dev libcli11-dev nlohmann-json3-dev \
  libyaml-cpp-dev libsqlite3-dev sqlite3 zlib1g-dev libopenmpi-dev openmpi-bin python3-matplotlib chromium libonnx-testdata dataset-fashion-mnist python3-torch python3-torchvision python3-onnx libtorch-dev pybind11-dev python3-dev python3-numpy python3-pytest python3-venv python3-pip python3-setuptools python3-wheel
if [ "${1:-}" = "--no-build" ]; then exit 0; fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build
