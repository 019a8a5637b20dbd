#!/usr/bin/env python3
"""Quantised corpus models: ONNX Runtime's own quantiser applied to corpus models, written as
ONNX test cases whose expected outputs are ONNX Runtime's with its graph optimisations off
(the graph computed as written: with them on, ONNX Runtime fuses QDQ groups into integer
kernels with a quantised bias and differs by about one quantisation step).

Forms: QDQ static per-channel (`.qdq`), dynamic (`.dyn`: DynamicQuantizeLinear +
MatMulInteger/ConvInteger) and QOperator static per-channel (`.qop`: QLinearConv,
QLinearMatMul and the com.microsoft QLinear ops and QGemm, written to cases_qoperator/: their
kernels are ONNX Runtime's own, which round some ties and approximate the sigmoid and the
softmax, so those cases are compared within a tolerance, docs/conformance.md). bert's dynamic form is left out: ONNX Runtime's MatMulInteger
saturates uint8 x int8 pairs to int16 on CPUs without VNNI, so its output is not the exact
one (bench/ort_int8_saturation.py, docs/conformance.md). bert's QOperator form is left out
too: the quantiser writes a uint8 bias into a QGemm (its initializers deduplicated by the
exporter), which ONNX Runtime itself refuses to load, as Mosaic does.

Weight-only (`.nbitsB`, in cases_nbits/): ONNX Runtime's MatMulNBitsQuantizer rewrites the
constant-weight MatMuls of four decoders into com.microsoft MatMulNBits at 2, 4 and 8 bits,
symmetric and not; expected outputs are ONNX Runtime's float32 ones (accuracy_level unset).

Besides corpus cases, Mosaic's own fmnist-cnn (`mosaic export`, $MOSAIC or build/mosaic) in all
three forms; its dynamic form with reduce_range, since ONNX Runtime's ConvInteger saturates
uint8 x int8 pairs on CPUs without VNNI just as its MatMulInteger does.

Mosaic's own quantiser (`.mosaic_METHOD`, in cases_mosaic/): `mosaic quantize` writes the QDQ form of
fmnist-cnn (calibrated on synthetic images) and of two corpus models (on random inputs), with
each calibration method and both activation types between them; the expected outputs are ONNX
Runtime's on that model, so these cases say that the QDQ model Mosaic writes is one ONNX
Runtime reads and computes as Mosaic does.

Needs onnx and onnxruntime from PyPI; the cases are committed, so the tests do not.
usage: tests/corpus/quantised/make_quantised.py [--only mosaic] [OUT]   (default: next to this script)
"""
import glob
import os
import shutil
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic, quantize_static
from onnxruntime.quantization.shape_inference import quant_pre_process

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "..", "cases")
ARGS = sys.argv[1:]
ONLY = ""
if ARGS[:1] == ["--only"]:
    ONLY, ARGS = ARGS[1], ARGS[2:]
OUT = ARGS[0] if ARGS else HERE
MOSAIC = os.environ.get("MOSAIC", os.path.join(HERE, "..", "..", "..", "build", "mosaic"))
CASES = [("resnet_hf.torchscript", "qdq"), ("resnet_hf.torchscript", "dyn"), ("bert.torchscript", "qdq")]
# QOperator: between them every com.microsoft op the quantiser writes for these families, and
# MaxPool on uint8.
CASES += [(m + ".torchscript", "qop") for m in ("resnet_hf", "timm_mobilenetv3", "timm_efficientnet", "tv_shufflenet", "vit")]
# Mosaic's own fmnist-cnn (zoo, random weights) in all three forms.
CASES += [("zoo:fmnist-cnn", form) for form in ("qdq", "dyn", "qop")]


def model_path(case):
    """A corpus case's model, or a Mosaic zoo model ("zoo:fmnist-cnn") written by `mosaic export`
    ($MOSAIC, default build/mosaic) with its default seed."""
    if not case.startswith("zoo:"):
        return os.path.join(CORPUS, case, "model.onnx")
    out = os.path.join(OUT, ".work", case[4:] + ".onnx")
    if not os.path.exists(out):
        subprocess.run([MOSAIC, "export", case[4:], "-o", out], check=True, stdout=subprocess.DEVNULL)
    return out


def inputs(case):
    if case.startswith("zoo:"):  # seeded images in [0, 1)
        m = onnx.load(model_path(case))
        i = m.graph.input[0]
        dims = [d.dim_value or 1 for d in i.type.tensor_type.shape.dim]
        return {i.name: np.random.default_rng(0).random(dims, dtype=np.float32)}
    m = onnx.load(os.path.join(CORPUS, case, "model.onnx"))
    inits = {i.name for i in m.graph.initializer}
    names = [i.name for i in m.graph.input if i.name not in inits]
    feeds = {}
    for k, f in enumerate(sorted(glob.glob(os.path.join(CORPUS, case, "test_data_set_0", "input_*.pb")))):
        t = onnx.TensorProto()
        with open(f, "rb") as fh:
            t.ParseFromString(fh.read())
        feeds[names[k]] = numpy_helper.to_array(t)
    return feeds


class OneBatch(CalibrationDataReader):
    """Calibration on the case's own input (the corpus models have random weights)."""

    def __init__(self, feeds):
        self.left = [feeds]

    def get_next(self):
        return self.left.pop() if self.left else None


def write_case(name, model_path, feeds, folder):
    d = os.path.join(OUT, folder, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(os.path.join(d, "test_data_set_0"))
    shutil.copy(model_path, os.path.join(d, "model.onnx"))
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    s = ort.InferenceSession(os.path.join(d, "model.onnx"), so, providers=["CPUExecutionProvider"])
    outs = s.run(None, feeds)
    for k, (n, a) in enumerate(feeds.items()):
        with open(os.path.join(d, "test_data_set_0", f"input_{k}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(a, n).SerializeToString())
    for k, (o, a) in enumerate(zip(s.get_outputs(), outs)):
        with open(os.path.join(d, "test_data_set_0", f"output_{k}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(a, o.name).SerializeToString())


# (corpus case, bits, block size, symmetric): between them packed zero points, none (the default
# 2^(bits-1)), one block and several per row.
NBITS = [("llama.dynamo", 4, 32, False), ("gpt2.torchscript", 4, 16, True), ("qwen2.dynamo", 8, 32, False),
         ("phi.dynamo", 2, 16, False)]


# `mosaic quantize` (case, method, further flags).
MOSAIC_CASES = [("zoo:fmnist-cnn", "minmax", ["--data", "synthetic:256,1,28,28,10"]),
                ("zoo:fmnist-cnn", "entropy", ["--data", "synthetic:256,1,28,28,10", "--activation-type", "int8"]),
                ("resnet_hf.torchscript", "percentile", ["--samples", "2"]),
                ("bert.torchscript", "minmax", ["--samples", "2", "--activation-type", "int8", "--symmetric-activations"])]


def mosaic_cases(tmp):
    for case, method, flags in MOSAIC_CASES:
        feeds = inputs(case)
        name = case.replace("zoo:", "zoo_") + ".mosaic_" + method
        out = os.path.join(tmp, name + ".onnx")
        subprocess.run([MOSAIC, "quantize", model_path(case), "--method", method, "--backend", "naive", "-o", out] + flags,
                       check=True, stdout=subprocess.DEVNULL)
        write_case(name, out, feeds, "cases_mosaic")


def main():
    tmp = os.path.join(OUT, ".work")
    os.makedirs(tmp, exist_ok=True)
    if ONLY == "mosaic":
        mosaic_cases(tmp)
        shutil.rmtree(tmp)
        print(f"{len(MOSAIC_CASES)} cases in {OUT} (onnxruntime {ort.__version__})")
        return
    mosaic_cases(tmp)
    for case, form in CASES:
        feeds = inputs(case)
        source = model_path(case)
        case = case.replace("zoo:", "zoo_")
        pre = os.path.join(tmp, case + ".pre.onnx")
        quant_pre_process(source, pre)
        out = os.path.join(tmp, f"{case}.{form}.onnx")
        if form in ("qdq", "qop"):
            quantize_static(pre, out, OneBatch(feeds), quant_format=QuantFormat.QDQ if form == "qdq" else QuantFormat.QOperator,
                            per_channel=True, activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                            reduce_range=form == "qop")
        else:
            quantize_dynamic(pre, out, weight_type=QuantType.QInt8, reduce_range=case.startswith("zoo_"))
        write_case(f"{case}.{form}", out, feeds, "cases_qoperator" if form == "qop" else "cases")
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer
    for case, bits, block, symmetric in NBITS:
        q = MatMulNBitsQuantizer(onnx.load(os.path.join(CORPUS, case, "model.onnx")), bits=bits, block_size=block,
                                 is_symmetric=symmetric)
        q.process()
        out = os.path.join(tmp, f"{case}.nbits{bits}.onnx")
        q.model.save_model_to_file(out)
        write_case(f"{case}.nbits{bits}", out, inputs(case), "cases_nbits")
    shutil.rmtree(tmp)
    print(f"{len(MOSAIC_CASES) + len(CASES) + len(NBITS)} cases in {OUT} (onnxruntime {ort.__version__})")


if __name__ == "__main__":
    main()
