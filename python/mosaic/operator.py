"""Operators written in Python (docs/python.md#operators-in-python)."""
import math

from . import _mosaic

_registered = {}  # op type -> class


class Operator:
    """Base class of a Python operator. A subclass sets

        op_type   the ONNX node type it computes ("Swish", or an ONNX op such as "Relu")
        domain    a custom domain ("com.example.mosaic"): a new operator, computed by this class
                  on the naive backend (the reference every other backend is checked against).
                  "" (default): an ONNX operator, computed by this class on the backend "python",
                  which placements choose per op type or node name (assign="Relu=python" or
                  "@relu1=python") and which is checked against naive like any backend.
        inputs, outputs   the arity of a custom operator (default 1 and 1)

    and implements forward(*inputs) -> array or tuple of arrays (float32, the shapes infer()
    gives), and for training and gradcheck backward(inputs, outputs, grad_outputs) -> one
    gradient per input (None where the input needs none). Inputs arrive as read-only float32
    NumPy views of Mosaic's buffers. The constructor gets the node's attributes as a dict.
    A custom operator may override infer(input_shapes) -> list of output shapes (default: the
    first input's) and flops()/backward_flops() (default: 1 and 2 per output element).
    """
    op_type = None
    domain = ""
    inputs = 1
    outputs = 1

    def __init__(self, attrs):
        self.attrs = dict(attrs)

    def infer(self, input_shapes):
        return [tuple(input_shapes[0])] * self.outputs

    def flops(self, input_shapes, output_shapes):
        return float(sum(math.prod(s) for s in output_shapes))

    def backward_flops(self, input_shapes, output_shapes):
        return 2.0 * self.flops(input_shapes, output_shapes)

    def forward(self, *inputs):
        raise NotImplementedError(f"{type(self).__name__}.forward")

    def backward(self, inputs, outputs, grad_outputs):
        raise NotImplementedError(f"{type(self).__name__}.backward")


def register_operator(cls):
    """Makes a mosaic.Operator subclass known to every later call (bench, verify, gradcheck,
    train) in this process; returns its op type. Registering a redefined class of the same op
    type replaces it."""
    if not (isinstance(cls, type) and issubclass(cls, Operator)):
        raise TypeError(f"register_operator(): expected a mosaic.Operator subclass, not {cls!r}")
    op_type = cls.op_type
    if not isinstance(op_type, str) or not op_type:
        raise ValueError(f"register_operator(): {cls.__qualname__}.op_type must be a non-empty str")
    if not isinstance(cls.domain, str):
        raise TypeError(f"register_operator(): {cls.__qualname__}.domain must be a str")
    for attr in ("inputs", "outputs"):
        value = getattr(cls, attr)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"register_operator(): {cls.__qualname__}.{attr} must be an int >= 1")
    previous = _registered.get(op_type)
    if previous is not None and previous.domain != cls.domain:
        raise ValueError(f"register_operator(): {op_type} is registered with domain '{previous.domain}'")
    summary = (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else f"Python {cls.__qualname__}"
    _mosaic._register_operator(op_type, cls.domain, cls.inputs, cls.outputs, cls,
                               f"python:{cls.__module__}.{cls.__qualname__}", summary)
    _registered[op_type] = cls
    return op_type
