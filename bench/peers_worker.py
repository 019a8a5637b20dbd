"""One engine, one measurement, in its own process: the worker behind bench/compare_peers.py.

Runs inside the peers' virtual environment (PyTorch 2, ONNX Runtime, OpenVINO from PyPI).

  peers_worker.py export MODEL DIR        the architecture of bench/compare_pytorch.py, seeded:
                                          DIR/model.onnx, DIR/state.pt, and an ONNX test case
                                          (DIR/case/test_data_set_0: one batch and PyTorch's output)
  peers_worker.py time ENGINE DIR BATCH THREADS WARMUP ITERATIONS
                                          prints one JSON line: per-batch times (ms) and the
                                          largest difference from PyTorch's output at batch 1
  peers_worker.py time-file ENGINE CASE THREADS WARMUP ITERATIONS
                                          any ONNX file: CASE/model.onnx run on the inputs of
                                          CASE/test_data_set_0 (all of them, at their own shapes);
                                          the difference is from CASE's expected output 0

ENGINE: onnxruntime, openvino-latency, openvino-throughput, torch-eager, torch-compile,
tensorflow, tensorflow-xla (bench/tf_peer.py: Keras layers rebuilt from DIR/case/model.onnx).
"""
import json
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def module(name):
    import torch
    sys.path.insert(0, HERE)
    from compare_pytorch import MODELS  # one definition of the architectures
    torch.manual_seed(0)
    return MODELS[name]().eval()


def image_shape(name):
    """(C, H, W) of an architecture's input."""
    sys.path.insert(0, HERE)
    from compare_pytorch import IMAGE
    return IMAGE[name]


def tensor_proto(array, name):
    from onnx import numpy_helper
    return numpy_helper.from_array(array, name).SerializeToString()


def export(name, out):
    import torch
    os.makedirs(os.path.join(out, "case", "test_data_set_0"), exist_ok=True)
    m = module(name)
    x = torch.rand(1, *image_shape(name), generator=torch.Generator().manual_seed(1))
    kwargs = dict(input_names=["images"], output_names=["logits"], opset_version=13,
                  dynamic_axes={"images": {0: "N"}, "logits": {0: "N"}})
    try:
        torch.onnx.export(m, x, os.path.join(out, "model.onnx"), dynamo=False, **kwargs)
    except TypeError:  # PyTorch before 2.5 has no dynamo argument
        torch.onnx.export(m, x, os.path.join(out, "model.onnx"), **kwargs)
    torch.save(m.state_dict(), os.path.join(out, "state.pt"))
    with torch.inference_mode():
        y = m(x).numpy()
    case = os.path.join(out, "case")
    os.replace(os.path.join(out, "model.onnx"), os.path.join(case, "model.onnx"))
    os.symlink(os.path.join("case", "model.onnx"), os.path.join(out, "model.onnx"))
    with open(os.path.join(case, "test_data_set_0", "input_0.pb"), "wb") as f:
        f.write(tensor_proto(x.numpy(), "images"))
    with open(os.path.join(case, "test_data_set_0", "output_0.pb"), "wb") as f:
        f.write(tensor_proto(y, "logits"))
    np.save(os.path.join(out, "x1.npy"), x.numpy())
    np.save(os.path.join(out, "y1.npy"), y)


def ort_session(path, threads):
    """ONNX Runtime with all graph optimisations, `threads` intra-op threads, one inter-op."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def runner(engine, d, batch, threads):
    """A function running one batch (as given by feed())."""
    path = os.path.join(d, "case", "model.onnx")
    if engine.startswith("tensorflow"):
        import tf_peer
        return tf_peer.inference_fn(engine, path, threads)
    if engine == "onnxruntime":
        s = ort_session(path, threads)
        return lambda x: s.run(None, {"images": x})[0]
    if engine == "openvino-latency":
        c = openvino_model(d, "LATENCY", threads)
        req = c.create_infer_request()
        return lambda x: req.infer({0: x})[c.output(0)].copy()
    if engine.startswith("torch"):
        import torch
        torch.set_num_threads(threads)
        m = module(os.path.basename(d.rstrip("/")))
        m.load_state_dict(torch.load(os.path.join(d, "state.pt")))
        if engine == "torch-compile":
            m = torch.compile(m)

        def run(x):
            with torch.inference_mode():
                return m(torch.from_numpy(x)).numpy()
        return run
    raise SystemExit(f"peers_worker: unknown engine {engine}")


def feed(engine, x):
    """An NCHW batch as `engine` takes it: TensorFlow's CPU layout is NHWC, converted here,
    before timing."""
    if engine.startswith("tensorflow"):
        import tensorflow as tf
        import tf_peer
        return tf.constant(tf_peer.nhwc(x))
    return x


def openvino_compiled(path, hint, threads):
    """An ONNX file compiled for OpenVINO's CPU plugin under `hint`, in f32 (on a CPU with
    bf16 OpenVINO would otherwise compute in bf16, its CPU default there)."""
    import openvino as ov
    core = ov.Core()
    return core.compile_model(core.read_model(path), "CPU", {"PERFORMANCE_HINT": hint, "INFERENCE_NUM_THREADS": threads,
                                                             "INFERENCE_PRECISION_HINT": "f32"})


def openvino_model(d, hint, threads):
    """The exported architecture's model (DIR/case/model.onnx) under `hint`."""
    return openvino_compiled(os.path.join(d, "case", "model.onnx"), hint, threads)


def throughput_openvino(d, batch, threads, warmup, iterations):
    """OpenVINO's throughput hint: as many requests in flight as it asks for; images/s from
    the wall time over `iterations` batches (no per-batch time exists in this mode)."""
    import openvino as ov
    c = openvino_model(d, "THROUGHPUT", threads)
    q = ov.AsyncInferQueue(c, c.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS"))
    shape = np.load(os.path.join(d, "x1.npy")).shape[1:]
    x = np.random.default_rng(0).random((batch,) + shape, dtype=np.float32)
    for _ in range(warmup):
        q.start_async({0: x})
    q.wait_all()
    walls = []
    for _ in range(3):  # three passes: a median of the per-batch averages
        t0 = time.perf_counter()
        for _ in range(iterations):
            q.start_async({0: x})
        q.wait_all()
        walls.append((time.perf_counter() - t0) * 1e3 / iterations)
    return walls, len(q)


def case_arrays(case, kind):
    """The arrays of CASE/test_data_set_0/KIND_*.pb, in order, with their names."""
    import glob
    from onnx import TensorProto, numpy_helper
    out = []
    files = sorted(glob.glob(os.path.join(case, "test_data_set_0", f"{kind}_*.pb")),
                   key=lambda f: int(f.rsplit("_", 1)[1].split(".")[0]))
    for f in files:
        t = TensorProto()
        with open(f, "rb") as fh:
            t.ParseFromString(fh.read())
        out.append((t.name, numpy_helper.to_array(t)))
    return out


def file_runner(engine, case, threads):
    """A function running the case's inputs (a dict by graph input name) on one engine."""
    path = os.path.join(case, "model.onnx")
    if engine == "onnxruntime":
        s = ort_session(path, threads)
        return lambda feeds: s.run(None, feeds)[0]
    if engine == "openvino-latency":
        c = openvino_compiled(path, "LATENCY", threads)
        req = c.create_infer_request()
        return lambda feeds: req.infer(feeds)[c.output(0)].copy()
    raise SystemExit(f"peers_worker: {engine} does not run ONNX files (no PyTorch module behind them)")


def time_file(engine, case, threads, warmup, iterations):
    import onnx
    model = onnx.load(os.path.join(case, "model.onnx"), load_external_data=False)
    inits = {i.name for i in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in inits]
    arrays = case_arrays(case, "input")
    feeds = {(name or names[k]): a for k, (name, a) in enumerate(arrays)}
    run = file_runner(engine, case, threads)
    for _ in range(warmup):
        run(feeds)
    times = []
    for _ in range(iterations):
        t0 = time.perf_counter()
        y = run(feeds)
        times.append((time.perf_counter() - t0) * 1e3)
    expected = case_arrays(case, "output")
    info = {"engine": engine, "median_ms": statistics.median(times), "min_ms": min(times), "samples": len(times)}
    if expected:
        ref = expected[0][1].astype(np.float64)
        info["max_abs_diff"] = float(np.max(np.abs(np.asarray(y, np.float64) - ref))) if ref.size else 0.0
        info["ref_scale"] = float(np.max(np.abs(ref))) if ref.size else 0.0
    else:
        info["max_abs_diff"], info["ref_scale"] = 0.0, 1.0
    print(json.dumps(info))


def main():
    if sys.argv[1] == "export":
        export(sys.argv[2], sys.argv[3])
        return
    if sys.argv[1] == "time-file":
        time_file(sys.argv[2], sys.argv[3], *map(int, sys.argv[4:7]))
        return
    engine, d, batch, threads, warmup, iterations = sys.argv[2], sys.argv[3], *map(int, sys.argv[4:8])
    ref_x, ref_y = np.load(os.path.join(d, "x1.npy")), np.load(os.path.join(d, "y1.npy"))
    info = {"engine": engine}
    if engine == "openvino-throughput":
        times, requests = throughput_openvino(d, batch, threads, warmup, iterations)
        info["requests"] = requests
        run = runner("openvino-latency", d, 1, threads)
    else:
        run = runner(engine, d, batch, threads)
        x = feed(engine, np.random.default_rng(0).random((batch,) + ref_x.shape[1:], dtype=np.float32))
        for _ in range(warmup):
            run(x)
        times = []
        for _ in range(iterations):
            t0 = time.perf_counter()
            run(x)
            times.append((time.perf_counter() - t0) * 1e3)
    y = run(feed(engine, ref_x))
    info["max_abs_diff"] = float(np.max(np.abs(y - ref_y)))
    info["ref_scale"] = float(np.max(np.abs(ref_y)))
    info["median_ms"] = statistics.median(times)
    info["min_ms"] = min(times)
    info["samples"] = len(times)
    print(json.dumps(info))


if __name__ == "__main__":
    main()
