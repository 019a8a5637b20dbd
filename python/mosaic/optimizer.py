"""User optimizers written in Python (docs/python.md#optimizers)."""
from . import _mosaic

_registered = {}  # name -> class: registered from Python (a redefinition may replace it)


class Optimizer:
    """Base class of a Python optimizer. A subclass sets

        name             the name train and optcheck know it by
        state_names      per-parameter state buffers, each as large as the parameter (PyTorch's
                         names where there is one: momentum_buffer, exp_avg, exp_avg_sq, ...)
        hyperparameters  its own keys beyond the standard ones (given as hyperparameters={...})

    and implements step(p, g, state, t): update the float32 NumPy array `p` in place from the
    read-only gradient `g`; `state` maps each state name to its array (updated in place); `t`
    counts steps from 1. The arrays are views of Mosaic's memory, valid during the call only.
    The constructor receives the hyperparameters as a dict (lr, momentum, dampening, nesterov,
    weight_decay, beta1, beta2, eps (-1: the optimizer's default), alpha, lr_decay,
    initial_accumulator_value, and the class's own keys); `self.lr` follows a learning-rate
    schedule.
    """
    name = None
    state_names = ()
    hyperparameters = ()

    def __init__(self, config):
        self.config = dict(config)
        self.lr = config["lr"]

    def initial_state(self, state_name):
        """Initial value of every element of a state buffer."""
        return 0.0

    def step(self, p, g, state, t):
        raise NotImplementedError(f"{type(self).__name__}.step")


def register_optimizer(cls):
    """Makes a mosaic.Optimizer subclass known to train and optcheck (and to the CLI's
    make_optimizer in this process) under cls.name; returns the name."""
    if not (isinstance(cls, type) and issubclass(cls, Optimizer)):
        raise TypeError(f"register_optimizer(): expected a mosaic.Optimizer subclass, not {cls!r}")
    name = cls.name
    if not isinstance(name, str) or not name:
        raise ValueError(f"register_optimizer(): {cls.__qualname__}.name must be a non-empty str")
    for attr in ("state_names", "hyperparameters"):
        value = getattr(cls, attr)
        if isinstance(value, str) or not all(isinstance(v, str) for v in value):
            raise TypeError(f"register_optimizer(): {cls.__qualname__}.{attr} must be a list of str")
    if _registered.get(name) is cls:
        return name
    if name not in _registered and name in _mosaic.optimizers():
        raise ValueError(f"register_optimizer(): optimizer '{name}' already exists (built in or from a plugin)")
    _mosaic._register_optimizer(name, cls, f"python:{cls.__module__}.{cls.__qualname__}")
    _registered[name] = cls
    return name
