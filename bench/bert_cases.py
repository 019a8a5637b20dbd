#!/usr/bin/env python3
"""BERT-Base as ONNX test case folders for bench/compare_peers.py (docs/performance.md).

Exports `mosaic export bert-base` once (436 MB, outside the tree) and writes one case folder
per batch: model.onnx (a link to the export) and test_data_set_0 with seeded token ids
[N, 128] and ONNX Runtime's logits for them, so that compare_peers checks every engine's
output against ONNX Runtime's before timing it.

usage: bench/bert_cases.py OUT_DIR [--batches 1,8] [--mosaic build/mosaic] [--threads 2]
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
    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    session = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    name_in, name_out = session.get_inputs()[0].name, session.get_outputs()[0].name
    for n in map(int, args.batches.split(",")):
        case = os.path.join(args.out, f"b{n}")
        data = os.path.join(case, "test_data_set_0")
        os.makedirs(data, exist_ok=True)
        link = os.path.join(case, "model.onnx")
        if not os.path.lexists(link):
            os.symlink(os.path.relpath(model, case), link)
        ids = np.random.default_rng(n).integers(0, 30522, size=(n, 128)).astype(np.int64)
        logits = session.run(None, {name_in: ids})[0]
        with open(os.path.join(data, "input_0.pb"), "wb") as f:
            f.write(numpy_helper.from_array(ids, name_in).SerializeToString())
        with open(os.path.join(data, "output_0.pb"), "wb") as f:
            f.write(numpy_helper.from_array(logits, name_out).SerializeToString())
        print(f"wrote {case}: ids {list(ids.shape)} -> logits {list(logits.shape)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
