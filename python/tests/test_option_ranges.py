"""Python refuses exactly what the command line refuses (issue 50, W2 and W3).

One table of (command, option, value): each row is given to the mosaic program as a flag and
to the Python function as a keyword argument. Both must refuse it with the same reason ("must be
a positive integer, got -2"), read from the one table of ranges (api/option_rules.cpp); before,
Python ran bench with rtol=nan, passed a wrong operator and reported batch -2 with exit 0.
"""
import math
import subprocess

import pytest

import mosaic

RELU = "/usr/share/libonnx-testdata/data/node/test_relu"

# (command, keyword, value, the reason both must give)
REFUSED = [
    ("bench", "rtol", float("nan"), "must be a finite number"),
    ("bench", "atol", float("nan"), "must be a finite number"),
    ("bench", "atol", float("inf"), "must be a finite number"),
    ("bench", "rtol", -1.0, "must be >= 0, got -1"),
    ("bench", "batch", -1, "must be a positive integer, got -1"),
    ("bench", "batch", 0, "must be a positive integer, got 0"),
    ("bench", "iterations", -3, "must be a positive integer, got -3"),
    ("bench", "iterations", 0, "must be a positive integer, got 0"),
    ("bench", "warmup", -5, "must be a non-negative integer, got -5"),
    ("bench", "threads", -2, "must be a non-negative integer, got -2"),
    ("bench", "processes", -1, "must be a positive integer, got -1"),
    ("bench", "repeats", 0, "must be a positive integer, got 0"),
    ("bench", "max_seconds", float("inf"), "must be a finite number"),
    ("bench", "max_seconds", -3.0, "must be > 0, got -3"),
    ("bench", "min_seconds", -1.0, "must be >= 0, got -1"),
    ("bench", "auto_budget", 0.0, "must be > 0, got 0"),
    ("bench", "lr", 0.0, "must be > 0, got 0"),
    ("gradcheck", "batch", -2, "must be a positive integer, got -2"),
    ("gradcheck", "tolerance", float("nan"), "must be a finite number"),
    ("gradcheck", "eps", -1.0, "must be > 0, got -1"),
    ("gradcheck", "directions", -1, "must be a non-negative integer, got -1"),
    ("verify", "rtol", float("nan"), "must be a finite number"),
    ("verify", "atol", -1.0, "must be >= 0, got -1"),
    ("verify", "threads", -1, "must be a non-negative integer, got -1"),
    ("info", "batch", -4, "must be a positive integer, got -4"),
    ("plan", "batch", 0, "must be a positive integer, got 0"),
]

MODEL = {"bench": "zoo:fmnist-cnn", "gradcheck": "zoo:fmnist-cnn", "verify": RELU, "info": "zoo:fmnist-cnn",
         "plan": "zoo:fmnist-cnn"}


def flag_value(v):
    if isinstance(v, float) and math.isnan(v):
        return "nan"
    if isinstance(v, float) and math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return str(int(v)) if isinstance(v, float) and v == int(v) else str(v)


@pytest.mark.parametrize("command,key,value,reason", REFUSED,
                         ids=["%s-%s=%s" % (c, k, flag_value(v)) for c, k, v, _ in REFUSED])
def test_python_refuses_what_the_cli_refuses(cli, command, key, value, reason):
    flag = "--" + key.replace("_", "-")
    r = subprocess.run([cli, command, MODEL[command], flag, flag_value(value), "--no-db"] if command == "bench" else
                       [cli, command, MODEL[command], flag, flag_value(value)],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    assert r.returncode == 2, r.stdout
    assert flag in r.stdout and reason.split(",")[0] in r.stdout, r.stdout
    with pytest.raises(ValueError) as e:
        getattr(mosaic, command)(MODEL[command], **{key: value})
    message = str(e.value)
    assert "'%s'" % key in message and reason in message, message


def test_the_library_checks_its_options_itself():
    # A caller of the library API (here through the same functions) gets the same refusals
    # where the keyword layer lets a value through unchanged: every value a keyword accepts
    # is one the library accepts.
    r = mosaic.bench("zoo:fmnist-cnn", backends="naive", batch=1, iterations=1, warmup=0, peaks=False,
                     max_seconds=30.0, rtol=0.0, atol=1e-4)
    assert r["checks_ok"] is True
    assert r["batch"] == 1
