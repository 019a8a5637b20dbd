"""TensorFlow as a peer: a chain CNN's ONNX file rebuilt as Keras layers with the file's own
weights, timed for inference (bench/compare_peers.py's `tensorflow` and `tensorflow-xla`
engines, through bench/peers_worker.py: inference_fn) and for training steps
(bench/compare_pytorch.py --tensorflow: the `train` command below).

Runs in the peers' virtual environment (tensorflow-cpu from PyPI); nothing in Mosaic's build
or tests needs it.

The Keras model is what a Keras user writes for the same network: Conv2D, ZeroPadding2D,
MaxPooling2D, Flatten and Dense layers (a Relu is the preceding layer's activation), in
TensorFlow's CPU layout, NHWC. The ONNX file's weights are copied in: a Conv's OIHW kernel
becomes HWIO, a Gemm's [out, in] becomes [in, out], and the rows of the first Dense after a
Flatten are permuted from ONNX's CHW order to Keras's HWC order, so the model computes the
same function. Inputs are given as NCHW (as to every other engine) and transposed to NHWC
before timing. The graph must be such a chain (Conv, Relu, Pad, MaxPool, Flatten, Gemm, each
reading the previous node's output); anything else is refused naming the node.

Threads: intra-op = the given count, inter-op = 1 (as ONNX Runtime is run); TensorFlow's
oneDNN optimisations stay at their default (on for x86), and both settings are reported.

  tf_peer.py train MODEL.onnx BATCH THREADS OPTIMIZER LR WARMUP ITERATIONS MAX_SECONDS [CHECK_STEPS]
      one training step per iteration (forward, softmax cross-entropy, backward, update);
      first the check: CHECK_STEPS (default three, 0 for none) steps on a fixed batch
      (seeded, as bench/compare_pytorch.py makes it) whose losses it prints beside the timings
"""
import json
import os
import resource
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402


def configure(threads):
    """TensorFlow's threads, set before anything runs; returns the settings to report."""
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    return {"tensorflow": tf.__version__, "intra_op_threads": threads, "inter_op_threads": 1,
            "onednn_opts": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "default (on)")}


def onnx_chain(path):
    """The nodes of a chain graph (each reading the previous one's output) and the values of
    its initializers and Constant nodes."""
    import onnx
    from onnx import numpy_helper
    model = onnx.load(path)
    g = model.graph
    consts = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    nodes = []
    for n in g.node:
        if n.op_type == "Constant":
            consts[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
        elif all(not i or i in consts for i in n.input):
            # Computed from constants only (PyTorch's exporter writes ZeroPad2d's pads as a
            # ConstantOfShape / Concat / Reshape / Slice chain): folded by ONNX's reference.
            consts.update(zip(n.output, fold(n, consts, model.opset_import)))
        else:
            nodes.append(n)
    inputs = [i for i in g.input if i.name not in consts]
    if len(inputs) != 1:
        raise SystemExit(f"tf_peer: {path}: {len(inputs)} graph inputs; a chain CNN has one")
    dims = [d.dim_value for d in inputs[0].type.tensor_type.shape.dim]
    current = inputs[0].name
    for n in nodes:
        if not n.input or n.input[0] != current:
            raise SystemExit(f"tf_peer: {path}: node '{n.name}' ({n.op_type}) does not read the previous "
                             "node's output: not a chain")
        current = n.output[0]
    return dims, nodes, consts


def fold(node, consts, opsets):
    """The outputs of a node whose inputs are all constants, by onnx.reference."""
    import onnx
    from onnx.reference import ReferenceEvaluator
    ins = [i for i in node.input if i]
    g = onnx.helper.make_graph([node], "fold", [onnx.helper.make_tensor_value_info(i, onnx.TensorProto.UNDEFINED, None)
                                                for i in ins],
                               [onnx.helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None) for o in node.output])
    return ReferenceEvaluator(onnx.helper.make_model(g, opset_imports=list(opsets))).run(None, {i: consts[i] for i in ins})


def attrs(node):
    import onnx
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def keras_from_onnx(path):
    """The Keras model of a chain CNN's ONNX file, with the file's weights."""
    import keras
    dims, nodes, consts = onnx_chain(path)
    c, h, w = dims[1:4]
    x = inp = keras.Input(shape=(h, w, c))
    pending = []  # (layer, weights) set once the model is built
    flat_hwc, i = None, 0
    while i < len(nodes):
        n, a = nodes[i], attrs(nodes[i])
        where = f"tf_peer: {path}: node '{n.name}' ({n.op_type})"
        # A Relu right after a Conv or Gemm is that layer's activation, as a Keras user writes it.
        relu = n.op_type in ("Conv", "Gemm") and i + 1 < len(nodes) and nodes[i + 1].op_type == "Relu"
        act = "relu" if relu else None
        bias = [consts[n.input[2]]] if len(n.input) > 2 and n.input[2] else []
        if n.op_type == "Conv":
            if a.get("group", 1) != 1 or any(d != 1 for d in a.get("dilations", [1, 1])):
                raise SystemExit(f"{where}: grouped or dilated convolutions are not rebuilt")
            pads = a.get("pads", [0, 0, 0, 0])
            if any(pads):
                x = keras.layers.ZeroPadding2D(((pads[0], pads[2]), (pads[1], pads[3])))(x)
            wt = consts[n.input[1]]
            layer = keras.layers.Conv2D(wt.shape[0], tuple(wt.shape[2:]), strides=tuple(a.get("strides", [1, 1])),
                                        activation=act, use_bias=bool(bias))
            x = layer(x)
            pending.append((layer, [wt.transpose(2, 3, 1, 0)] + bias))
        elif n.op_type == "Gemm":
            if a.get("transA", 0) or a.get("alpha", 1.0) != 1.0 or a.get("beta", 1.0) != 1.0:
                raise SystemExit(f"{where}: only Gemm(x, W) + b is rebuilt")
            wt = consts[n.input[1]]
            kernel = wt.T if a.get("transB", 0) else wt  # [in, out]
            if flat_hwc is not None:  # ONNX flattened CHW, Keras flattens HWC
                fh, fw, fc = flat_hwc
                kernel = kernel.reshape(fc, fh, fw, -1).transpose(1, 2, 0, 3).reshape(fh * fw * fc, -1)
            flat_hwc = None
            layer = keras.layers.Dense(kernel.shape[1], activation=act, use_bias=bool(bias))
            x = layer(x)
            pending.append((layer, [np.ascontiguousarray(kernel)] + bias))
        elif n.op_type == "Relu":
            x = keras.layers.ReLU()(x)
        elif n.op_type == "Pad":
            pads = consts[n.input[1]].tolist() if len(n.input) > 1 else a["pads"]
            value = float(consts[n.input[2]]) if len(n.input) > 2 and n.input[2] else 0.0
            if a.get("mode", b"constant") not in (b"constant", "constant") or value != 0.0 or any(pads[j] for j in (0, 1, 4, 5)):
                raise SystemExit(f"{where}: only zero padding of the spatial axes is rebuilt")
            x = keras.layers.ZeroPadding2D(((pads[2], pads[6]), (pads[3], pads[7])))(x)
        elif n.op_type == "MaxPool":
            if any(a.get("pads", [0])) or a.get("ceil_mode", 0) or any(d != 1 for d in a.get("dilations", [1, 1])):
                raise SystemExit(f"{where}: padded, dilated or ceil-mode pooling is not rebuilt")
            k = tuple(a["kernel_shape"])
            x = keras.layers.MaxPooling2D(k, strides=tuple(a.get("strides", k)))(x)
        elif n.op_type == "Flatten":
            if a.get("axis", 1) != 1:
                raise SystemExit(f"{where}: only axis 1 is rebuilt")
            flat_hwc = tuple(x.shape[1:]) if len(x.shape) == 4 else None
            x = keras.layers.Flatten()(x)
        else:
            raise SystemExit(f"{where}: not an op of the chain CNNs tf_peer rebuilds "
                             "(Conv, Relu, Pad, MaxPool, Flatten, Gemm)")
        i += 2 if relu else 1
    model = keras.Model(inp, x)
    for layer, weights in pending:
        layer.set_weights(weights)
    return model


def nhwc(x):
    return np.ascontiguousarray(np.asarray(x, np.float32).transpose(0, 2, 3, 1))


def inference_fn(engine, path, threads):
    """The Keras model of `path` as one tf.function (with XLA for tensorflow-xla): a function
    of an NHWC batch (feed it nhwc(x)) returning numpy logits."""
    import tensorflow as tf
    configure(threads)
    model = keras_from_onnx(path)
    call = tf.function(lambda x: model(x, training=False), jit_compile=engine == "tensorflow-xla")
    return lambda x: call(x).numpy()


def optimizer(name, lr):
    """Keras optimizers computing PyTorch's (and Mosaic's) rules with their defaults: Adam
    beta (0.9, 0.999), eps 1e-8; RMSprop alpha 0.99, eps 1e-8. Keras's own rules differ in where
    eps goes: its Adam adds eps to the uncorrected sqrt(v) ("epsilon hat"), its RMSprop divides
    by sqrt(v + eps), PyTorch's both by sqrt(v_corrected) + eps. On AlexNet-CIFAR, whose
    gradients are partly of eps's size, stock Keras's losses part from PyTorch's in the third
    digit after one step (Adam 2.2266 against 2.2589), so the two rules are PyTorch's here,
    written in Keras ops (the same operations per variable as Keras's, so the same cost)."""
    import keras
    from keras import ops

    class TorchAdam(keras.optimizers.Adam):
        def update_step(self, gradient, variable, learning_rate):
            dt = variable.dtype
            lr, g = ops.cast(learning_rate, dt), ops.cast(gradient, dt)
            t = ops.cast(self.iterations + 1, dt)
            m = self._momentums[self._get_variable_index(variable)]
            v = self._velocities[self._get_variable_index(variable)]
            self.assign_add(m, ops.multiply(ops.subtract(g, m), 1 - self.beta_1))
            self.assign_add(v, ops.multiply(ops.subtract(ops.square(g), v), 1 - self.beta_2))
            bc1 = ops.subtract(1, ops.power(ops.cast(self.beta_1, dt), t))
            bc2 = ops.subtract(1, ops.power(ops.cast(self.beta_2, dt), t))
            denom = ops.add(ops.divide(ops.sqrt(v), ops.sqrt(bc2)), self.epsilon)
            self.assign_sub(variable, ops.divide(ops.multiply(m, ops.divide(lr, bc1)), denom))

    class TorchRMSprop(keras.optimizers.RMSprop):
        def update_step(self, gradient, variable, learning_rate):
            dt = variable.dtype
            lr, g = ops.cast(learning_rate, dt), ops.cast(gradient, dt)
            v = self._velocities[self._get_variable_index(variable)]
            self.assign(v, ops.add(ops.multiply(self.rho, v), ops.multiply(1 - self.rho, ops.square(g))))
            self.assign_sub(variable, ops.divide(ops.multiply(lr, g), ops.add(ops.sqrt(v), self.epsilon)))

    if name == "sgd":
        return keras.optimizers.SGD(learning_rate=lr)
    if name == "adam":
        return TorchAdam(learning_rate=lr, beta_1=0.9, beta_2=0.999, epsilon=1e-8)
    if name == "rmsprop":
        return TorchRMSprop(learning_rate=lr, rho=0.99, epsilon=1e-8)
    raise SystemExit(f"tf_peer: optimizer '{name}' (sgd, adam, rmsprop)")


def check_batch(batch, shape, classes):
    """The fixed batch of the training loss check, NCHW (bench/compare_pytorch.py feeds
    PyTorch the same one)."""
    rng = np.random.default_rng(1234)
    return rng.random((batch,) + tuple(shape), dtype=np.float32), rng.integers(0, classes, batch)


def time_training(path, batch, threads, opt_name, lr, warmup, iterations, budget, check_steps=3):
    import keras
    import tensorflow as tf
    settings = configure(threads)
    model = keras_from_onnx(path)
    opt = optimizer(opt_name, lr)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    h, w, c = model.input_shape[1:]
    classes = model.output_shape[-1]
    cx, cy = check_batch(batch, (c, h, w), classes)
    cx, cy = tf.constant(nhwc(cx)), tf.constant(cy)
    losses = [float(step(cx, cy)) for _ in range(check_steps)]
    x = tf.constant(np.random.default_rng(0).random((batch, h, w, c), dtype=np.float32))
    y = tf.constant(np.random.default_rng(0).integers(0, classes, batch))
    start = time.perf_counter()
    for _ in range(warmup):
        step(x, y).numpy()
        if time.perf_counter() - start > budget / 4:
            break
    times = []
    start = time.perf_counter()
    for _ in range(iterations):
        t0 = time.perf_counter()
        step(x, y).numpy()
        times.append(time.perf_counter() - t0)
        if time.perf_counter() - start > budget * 3 / 4:
            break
    med = statistics.median(times)
    print(json.dumps({"images_per_s": batch / med, "median_ms": med * 1e3, "measured": len(times),
                      "check_losses": losses, "settings": settings,
                      "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def main():
    if len(sys.argv) not in (10, 11) or sys.argv[1] != "train":
        raise SystemExit(__doc__)
    path, batch, threads, opt_name, lr = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], float(sys.argv[6])
    warmup, iterations, budget = int(sys.argv[7]), int(sys.argv[8]), float(sys.argv[9])
    check_steps = int(sys.argv[10]) if len(sys.argv) == 11 else 3
    time_training(path, batch, threads, opt_name, lr, warmup, iterations, budget, check_steps)


if __name__ == "__main__":
    main()
