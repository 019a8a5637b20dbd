#!/usr/bin/env python3
"""BERT-Base as ONNX test case folders for bench/compare_peers.py (docs/performance.md).

Exports `mosaic export bert-base` once (436 MB, outside the tree) and writes one case folder
per batch: model.onnx (a link to the export) and test_data_set_0 with seeded token ids
[N, 128] and ONNX Runtime's logits for them, so that compare_peers checks every engine's
output against ONNX Runtime's before timing it.

With --dynamic, also ONNX Runtime's dynamic int8 form of the export (quantize_dynamic, int8
weights per tensor: DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul for every MatMul by
constant weights) as bert-base-dyn.onnx, and a case folder dyn-bN per batch with ONNX
Runtime's logits on it (its graph optimisations off: the chain as written); and prints what int8 costs in ONNX Runtime's hands (its int8 logits
against its float32 ones: top-1 agreement of the masked-LM predictions and SQNR).

usage: bench/bert_cases.py OUT_DIR [--batches 1,8] [--dynamic] [--mosaic build/mosaic] [--threads 2]
  (run with a Python that has numpy, onnx and onnxruntime, e.g. the peers' environment)
then:  bench/compare_peers.py --models OUT_DIR/b1,OUT_DIR/b8 --engines mosaic-onednn,onnxruntime ...
"""
import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--mosaic", default=os.path.join(os.path.dirname(HERE), "build", "mosaic"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dynamic", action="store_true", help="also ONNX Runtime's dynamic int8 form (dyn-bN cases)")
    args = ap.parse_args()
    try:
        import numpy as np
        import onnxruntime as ort
        from onnx import numpy_helper
    except ImportError as e:
        sys.exit(f"bert_cases: needs numpy, onnx and onnxruntime in this Python: {e}")
    os.makedirs(args.out, exist_ok=True)
    model = os.path.join(args.out, "bert-base.onnx")
    if not os.path.exists(model):
        r = subprocess.run([args.mosaic, "export", "bert-base", "-o", model])
        if r.returncode:
            sys.exit("bert_cases: mosaic export bert-base failed")
    forms = [("b", model)]
    if args.dynamic:
        dyn = os.path.join(args.out, "bert-base-dyn.onnx")
        if not os.path.exists(dyn):
            from onnxruntime.quantization import QuantType, quantize_dynamic
            quantize_dynamic(model, dyn, weight_type=QuantType.QInt8)
        forms.append(("dyn-b", dyn))
    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    logits_of = {}
    for prefix, path in forms:
        # The dynamic form's expected logits: ONNX Runtime with its graph optimisations off, so
        # that it computes the chain as written (with them on, it fuses each MatMulInteger chain
        # into its own DynamicQuantizeMatMul, which differs by quantisation steps).
        so.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_DISABLE_ALL if prefix == "dyn-b"
                                       else ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
        session = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        name_in, name_out = session.get_inputs()[0].name, session.get_outputs()[0].name
        for n in map(int, args.batches.split(",")):
            case = os.path.join(args.out, f"{prefix}{n}")
            data = os.path.join(case, "test_data_set_0")
            os.makedirs(data, exist_ok=True)
            link = os.path.join(case, "model.onnx")
            if not os.path.lexists(link):
                os.symlink(os.path.relpath(path, case), link)
            ids = np.random.default_rng(n).integers(0, 30522, size=(n, 128)).astype(np.int64)
            logits = session.run(None, {name_in: ids})[0]
            logits_of[(prefix, n)] = logits
            with open(os.path.join(data, "input_0.pb"), "wb") as f:
                f.write(numpy_helper.from_array(ids, name_in).SerializeToString())
            with open(os.path.join(data, "output_0.pb"), "wb") as f:
                f.write(numpy_helper.from_array(logits, name_out).SerializeToString())
            print(f"wrote {case}: ids {list(ids.shape)} -> logits {list(logits.shape)}")
    if args.dynamic:
        for n in map(int, args.batches.split(",")):
            f32, i8 = logits_of[("b", n)], logits_of[("dyn-b", n)]
            agree = float(np.mean(np.argmax(f32, -1) == np.argmax(i8, -1)))
            sqnr = 10 * np.log10(np.sum(f32.astype(np.float64) ** 2) / np.sum((i8 - f32).astype(np.float64) ** 2))
            print(f"ONNX Runtime, batch {n}: dynamic int8 against float32: top-1 agreement {100 * agree:.2f}% of "
                  f"{f32.shape[0] * f32.shape[1]} positions, SQNR {sqnr:.1f} dB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
