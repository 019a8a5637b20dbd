#!/usr/bin/env bash
# `pip install .` into a fresh virtual environment (Debian's numpy, setuptools and pip: no
# network), reusing the build tree BUILD, then `import mosaic` from elsewhere: the installed
# package, not the source or build tree, must bench (also in child processes of its own mosaic
# program), find its bundled torch plugin and run a Python optimizer. Usage: check_pip_install.sh PYTHON SOURCE BUILD SCRATCH (PYTHON: the
# interpreter the package was built for).
set -euo pipefail
python=$1 src=$2 build=$3 scratch=$4
rm -rf "$scratch"
mkdir -p "$scratch"
"$python" -m venv --system-site-packages "$scratch/venv"
MOSAIC_BUILD_DIR="$build" "$scratch/venv/bin/pip" install --no-build-isolation --no-deps --no-index -q "$src" \
  > "$scratch/pip.log" 2>&1 || { tail -n 40 "$scratch/pip.log"; exit 1; }
cd "$scratch"
env -u PYTHONPATH MOSAIC_DB=off "$scratch/venv/bin/python" - <<'PY'
import os
import numpy as np
import mosaic

where = os.path.dirname(mosaic.__file__)
assert "site-packages" in where, where
assert os.path.exists(os.path.join(where, "libmosaic.so")), os.listdir(where)
r = mosaic.bench("zoo:fmnist-cnn", backends="naive,onednn", batch=2, iterations=2, warmup=0, peaks=False)
assert r["checks_ok"], r["runs"]
if os.path.isdir(os.path.join(where, "plugins")):  # built where libtorch-dev is installed
    r = mosaic.bench("zoo:fmnist-cnn", backends="torch", batch=2, iterations=1, warmup=0, peaks=False)
    assert r["checks_ok"] and r["runs"][0]["label"] == "torch"

class Sign(mosaic.Optimizer):
    name = "installed-signsgd"
    def step(self, p, g, state, t):
        p -= self.lr * np.sign(g)

log = mosaic.train("zoo:fmnist-cnn", optimizer=Sign, lr=1e-3, steps=3, batch=8, evaluate=False)
assert len(log["steps"]) == 3
# Child processes run the package's own mosaic program (bin/mosaic beside libmosaic.so).
assert os.access(os.path.join(where, "bin", "mosaic"), os.X_OK)
r = mosaic.bench("zoo:fmnist-cnn", backends="onednn", batch=2, iterations=2, warmup=0, peaks=False, processes=2)
assert r["checks_ok"] and len(r["processes"]) == 2
print("installed:", where, mosaic.backends())
PY
