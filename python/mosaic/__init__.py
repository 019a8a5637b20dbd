"""Mosaic from Python: the library API (api/mosaic.hpp) as functions returning plain objects.

    import mosaic
    report = mosaic.bench("zoo:alexnet-cifar", backends=["naive", "onednn"], batch=8)
    for config in report["configs"]:
        print(config["label"], config["time_ms"]["median"])

Every function takes the options of the CLI command of the same name as keyword arguments
(underscores for dashes; the docstrings list them), returns the report the CLI writes as JSON
(docs/json-schema.md) as dicts and lists, and raises mosaic.InvalidArgument (a ValueError) for
bad input, mosaic.Error for the rest, TypeError for an unknown keyword or a wrong type.
Long calls release the GIL, and Ctrl-C stops them at the next safe point (KeyboardInterrupt).
User optimizers are Python classes (mosaic.Optimizer), validated by mosaic.optcheck and used
by mosaic.train; user operators too (mosaic.Operator), validated by mosaic.gradcheck and run in
one graph with the other backends' nodes. docs/python.md has the whole story.
"""
import os as _os
import sys as _sys

# Plugins (C++ shared libraries loaded with load_plugin) resolve Mosaic's functions against
# the library already in the process: load it with global symbols, as the CLI exports its own.
_flags = _sys.getdlopenflags()
_sys.setdlopenflags(_flags | _os.RTLD_GLOBAL)
try:
    from . import _mosaic
finally:
    _sys.setdlopenflags(_flags)

from ._mosaic import (Error, InvalidArgument, backends, bench, compare, export, generate, gradcheck, history, info,  # noqa: F401
                      loadgen, optimizers, plan, quantize, report, run_document, simulate, sweep, verify, verify_determinism,
                      verify_per_node, version)
from .operator import Operator, register_operator  # noqa: F401
from .optimizer import Optimizer, register_optimizer  # noqa: F401
from .plugin_files import _load_python_plugin  # noqa: F401

__version__ = version()


def _optimizer_name(optimizer, function):
    """A name, or an Optimizer subclass (registered on first use)."""
    if isinstance(optimizer, str):
        return optimizer
    if isinstance(optimizer, type) and issubclass(optimizer, Optimizer):
        return register_optimizer(optimizer)
    raise TypeError(f"{function}(): argument 'optimizer' must be a str or a mosaic.Optimizer subclass, "
                    f"not {type(optimizer).__name__}")


def train(model, optimizer="sgd", hyperparameters=None, **options):
    """Trains `model` (an ONNX file or zoo:NAME) and returns the training log (the CLI's --json).

    optimizer: a built-in's name, a registered one's, or a mosaic.Optimizer subclass.
    hyperparameters: {name: float} for the optimizer's own keys (its `hyperparameters`).
    progress=True draws the progress line on stderr. The other options: _mosaic._train's doc.
    """
    return _mosaic._train(model, hyperparameters, optimizer=_optimizer_name(optimizer, "train"), **options)


def optcheck(optimizer, hyperparameters=None, **options):
    """Verdicts on an optimizer (validate/optcheck.hpp): trajectories against `reference`, ONNX
    training-op data, convergence, a real network. Returns {"checks": [...], "passed", "failed",
    "skipped", "inconclusive"}. optimizer: a name or a mosaic.Optimizer subclass."""
    return _mosaic._optcheck(_optimizer_name(optimizer, "optcheck"), hyperparameters, **options)


def load_plugin(path):
    """Loads an operator/backend plugin: a C++ shared library (backends/plugin.hpp), or a Python
    file whose mosaic.Operator subclasses are registered. Returns nothing."""
    path = _os.fspath(path)
    if path.endswith(".py"):
        _load_python_plugin(path, "operators")
    else:
        _mosaic.load_plugin(path)


def load_optimizer_plugin(path):
    """Loads an optimizer plugin: a C++ shared library, or a Python file whose mosaic.Optimizer
    subclasses are registered. Returns the (first) optimizer's name."""
    path = _os.fspath(path)
    if path.endswith(".py"):
        return _load_python_plugin(path, "optimizers")[0]
    return _mosaic.load_optimizer_plugin(path)
