"""Python files as plugins: what `mosaic --plugin file.py` and `--optimizer-plugin file.py` run
(through the CLI's Python host, core/python_host.hpp), and mosaic.load_plugin(file.py) here."""
import os
import runpy

from .operator import Operator, register_operator
from .optimizer import Optimizer, register_optimizer


def _load_python_plugin(path, kind):
    """Runs the file and registers the classes it defines itself: kind "operators" (mosaic.Operator
    subclasses with an op_type) or "optimizers" (mosaic.Optimizer subclasses with a name).
    Returns their op types or names, in definition order."""
    if kind not in ("operators", "optimizers"):
        raise ValueError(f"kind must be 'operators' or 'optimizers', not {kind!r}")
    base, register, key = ((Operator, register_operator, "op_type") if kind == "operators"
                           else (Optimizer, register_optimizer, "name"))
    run_name = "mosaic_plugin_" + "".join(c if c.isalnum() else "_" for c in os.path.basename(path)[:-3])
    namespace = runpy.run_path(path, run_name=run_name)
    names = []
    for value in namespace.values():
        if (isinstance(value, type) and issubclass(value, base) and value.__module__ == run_name
                and getattr(value, key)):
            names.append(register(value))
    if not names:
        raise ValueError(f"{path} defines no mosaic.{base.__name__} subclass with a {key}")
    return names
