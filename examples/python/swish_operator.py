"""An operator written in Python: com.example.mosaic.Swish, y = x * sigmoid(beta x)
(Ramachandran et al., 2017), the same operator as the C++ plugin in examples/plugin_custom_op/.
The script validates it against ONNX-style expected outputs (computed by NumPy in double by
make_model.py) and against finite differences, then runs it in one graph with an onednn
convolution and an im2col Gemm, the layout conversions timed like any other node.

    PYTHONPATH=build/python python3 examples/python/swish_operator.py [DIR]
"""
import os
import subprocess
import sys
import tempfile

import numpy as np

import mosaic

HERE = os.path.dirname(os.path.abspath(__file__))
MAKE_MODEL = os.path.join(HERE, "..", "plugin_custom_op", "make_model.py")


class Swish(mosaic.Operator):
    """x * sigmoid(beta * x), in NumPy"""
    op_type = "Swish"
    domain = "com.example.mosaic"

    def __init__(self, attrs):
        super().__init__(attrs)
        self.beta = np.float32(attrs.get("beta", 1.0))

    def flops(self, input_shapes, output_shapes):
        return 5.0 * np.prod(output_shapes[0])

    def backward_flops(self, input_shapes, output_shapes):
        return 9.0 * np.prod(output_shapes[0])

    def forward(self, x):
        return x / (1 + np.exp(-self.beta * x))

    def backward(self, inputs, outputs, grad_outputs):
        (x,), (dy,) = inputs, grad_outputs
        s = 1 / (1 + np.exp(-self.beta * x))
        return (dy * (s + self.beta * x * s * (1 - s)),)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="mosaic-swish-")
    subprocess.run([sys.executable, MAKE_MODEL, out], check=True, stdout=subprocess.DEVNULL)
    mosaic.register_operator(Swish)
    model = os.path.join(out, "model.onnx")

    # Other backends run the rest of the graph; Swish falls back to naive, where the class runs.
    v = mosaic.verify([out], backend="all", fallback="naive")
    for c in v["cases"]:
        print(f"verify  {c['verdict']:<11} [{c['backend']}] {c['detail']}")
    g = mosaic.gradcheck(model, batch=2)
    print(f"gradcheck: {g['summary']['passed']} passed, {g['summary']['failed']} failed "
          f"(exit code {g['exit_code']})")

    r = mosaic.bench(model, assign="Conv=onednn,Gemm=im2col,*=naive", batch=64, iterations=50, peaks=False)
    run = r["runs"][0]
    print(f"mixed graph, batch 64: {run['iteration_ms']['median']:.3f} ms per iteration, check "
          f"{'passed' if run['check']['passed'] else 'FAILED'}")
    for n in run["nodes"]:
        time = "view" if n["median_us"] is None else f"{n['median_us']:.1f} us"
        print(f"  {n['name']:<28} {n['op']:<16} {n['backend']:<7} {time:>10}")
    ok = v["failed"] == 0 and v["passed"] > 0 and g["exit_code"] == 0 and r["checks_ok"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
