"""Python operators validated as C++ ones are: a custom op against ONNX-style expected outputs
(computed by NumPy in double, examples/plugin_custom_op/make_model.py) and finite differences,
planted bugs caught, an ONNX op on the backend "python" checked against naive in a mixed graph,
and bad results reported with the node's name."""
import os
import subprocess
import sys

import numpy as np
import pytest

import mosaic
from swish_operator import MAKE_MODEL, Swish


@pytest.fixture(scope="module")
def swish_case(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("swish"))
    subprocess.run([sys.executable, MAKE_MODEL, out], check=True, stdout=subprocess.DEVNULL)
    return out


def use(cls):
    """Registers cls for its op type (replacing an earlier class of the same op type)."""
    mosaic.register_operator(cls)
    return cls


class Relu(mosaic.Operator):
    op_type = "Relu"

    def forward(self, x):
        return np.maximum(x, 0)

    def backward(self, inputs, outputs, grad_outputs):
        return (grad_outputs[0] * (inputs[0] > 0),)


def test_custom_operator_matches_expected_outputs_on_every_backend(swish_case):
    use(Swish)
    r = mosaic.verify([swish_case], backend="all", fallback="naive")
    runnable = mosaic.backends(available=True)
    assert r["failed"] == 0 and r["unsupported"] == 0 and r["passed"] == len(runnable) - (
        1 if "python" in runnable else 0)


def test_custom_operator_backward_passes_gradcheck_and_a_planted_bug_fails(swish_case):
    model = os.path.join(swish_case, "model.onnx")
    use(Swish)
    assert mosaic.gradcheck(model, batch=2)["exit_code"] == 0

    class ForgetsTheSigmoidsDerivative(Swish):
        def backward(self, inputs, outputs, grad_outputs):
            return (grad_outputs[0] / (1 + np.exp(-self.beta * inputs[0])),)

    class WrongBeta(Swish):
        def backward(self, inputs, outputs, grad_outputs):
            self.beta = self.beta * 1.1
            return super().backward(inputs, outputs, grad_outputs)

    try:
        for bug in (ForgetsTheSigmoidsDerivative, WrongBeta):
            use(bug)
            r = mosaic.gradcheck(model, batch=2)
            assert r["exit_code"] == 1, bug.__name__
            failed = [t["name"] for t in r["tensors"] if t["verdict"] == "FAIL"]
            assert "w1" in failed, (bug.__name__, failed)
    finally:
        use(Swish)


def test_onnx_op_on_the_python_backend_in_a_mixed_graph():
    use(Relu)
    assert "python" in mosaic.backends()
    r = mosaic.bench("zoo:fmnist-cnn", assign="Relu=python,Gemm=im2col,*=onednn", batch=4, iterations=3,
                     warmup=1, peaks=False)
    assert r["checks_ok"]
    backends = {n["name"]: n["backend"] for n in r["runs"][0]["nodes"]}
    assert backends["relu1"] == "python" and backends["conv1"] == "onednn" and backends["fc1"] == "im2col"
    # By node name, in training: forward and backward checked against naive.
    r = mosaic.bench("zoo:fmnist-cnn", assign="@relu2=python,*=onednn", mode="training", batch=4, iterations=3,
                     warmup=1, peaks=False)
    assert r["checks_ok"] and r["checked"] == "loss and gradients"
    g = mosaic.gradcheck("zoo:fmnist-cnn", assign="Relu=python")
    assert g["exit_code"] == 0


def test_a_wrong_python_forward_fails_the_check_against_naive():
    class Leaky(Relu):
        def forward(self, x):
            return np.where(x > 0, x, np.float32(0.01) * x)

    use(Leaky)
    try:
        r = mosaic.bench("zoo:fmnist-cnn", assign="Relu=python,*=onednn", batch=4, iterations=1, warmup=0,
                         peaks=False)
        assert r["checks_ok"] is False
        assert r["runs"][0]["check"]["passed"] is False
    finally:
        use(Relu)


@pytest.mark.parametrize("result,message", [
    (lambda x: x[..., :-1], r"node 'swish1' \(Swish\) on naive: Python .*Bad.forward: output 0 has shape \[2,4,8,7\], expected \[2,4,8,8\]"),
    (lambda x: x.astype(np.float64), r"node 'swish1' \(Swish\) on naive: Python .*Bad.forward: output 0 has dtype float64, expected float32"),
    (lambda x: [x, x], r"node 'swish1' \(Swish\) on naive: Python .*Bad.forward returned 2 outputs, expected 1"),
    (lambda x: float(x.sum()), r"output 0 is a float, not a NumPy array"),
])
def test_a_bad_result_is_an_error_naming_the_node(swish_case, result, message):
    class Bad(Swish):
        def forward(self, x):
            return result(x)

    use(Bad)
    try:
        with pytest.raises(mosaic.Error, match=message):
            mosaic.bench(os.path.join(swish_case, "model.onnx"), backends=["naive"], batch=2, iterations=1,
                         warmup=0, peaks=False)
    finally:
        use(Swish)


def test_an_exception_in_forward_surfaces_with_its_traceback_and_the_node(swish_case):
    class Raises(Swish):
        def forward(self, x):
            raise KeyError("planted in forward")

    use(Raises)
    try:
        with pytest.raises(mosaic.Error, match=r"node 'swish1' \(Swish\) on naive: Python .*Raises.forward raised KeyError") as info:
            mosaic.bench(os.path.join(swish_case, "model.onnx"), backends=["naive"], batch=2, iterations=1,
                         warmup=0, peaks=False)
        assert isinstance(info.value.__cause__, KeyError)
        assert info.value.__cause__.__traceback__ is not None
    finally:
        use(Swish)


def test_python_operator_under_several_threads(swish_case):
    use(Swish)
    r = mosaic.bench(os.path.join(swish_case, "model.onnx"), assign="Conv=onednn,Gemm=im2col,*=naive", batch=8,
                     iterations=3, warmup=1, threads=2, peaks=False)
    assert r["checks_ok"]


def test_registration_checks_the_class():
    with pytest.raises(TypeError, match="mosaic.Operator subclass"):
        mosaic.register_operator(int)

    class NoType(mosaic.Operator):
        pass

    with pytest.raises(ValueError, match="op_type must be a non-empty str"):
        mosaic.register_operator(NoType)

    class NotAnOp(mosaic.Operator):
        op_type = "NoSuchOnnxOp"

    with pytest.raises(ValueError, match="no operator NoSuchOnnxOp"):
        mosaic.register_operator(NotAnOp)

    class SwishElsewhere(Swish):
        domain = "org.other"

    with pytest.raises(ValueError, match="registered with domain 'com.example.mosaic'"):
        mosaic.register_operator(SwishElsewhere)


def test_python_files_load_as_plugins_here_too(tmp_path):
    path = tmp_path / "clip_plugin.py"
    path.write_text("import numpy as np\nimport mosaic\n\n"
                    "class Sign(mosaic.Optimizer):\n    name = 'py-signsgd-file'\n\n"
                    "    def step(self, p, g, state, t):\n        p -= self.lr * np.sign(g)\n")
    assert mosaic.load_optimizer_plugin(path) == "py-signsgd-file"
    assert "py-signsgd-file" in mosaic.optimizers()
    empty = tmp_path / "empty.py"
    empty.write_text("x = 1\n")
    with pytest.raises(ValueError, match="defines no mosaic.Operator subclass"):
        mosaic.load_plugin(empty)
