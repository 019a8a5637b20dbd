#!/usr/bin/python3
"""Side-by-side inference throughput: Mosaic's backends vs PyTorch 1.13 (Debian python3-torch).

Both run with the same thread count and the same OpenBLAS settings (OPENBLAS_CORETYPE is
inherited by both, and printed). PyTorch runs the same architectures (built with torch.nn,
random weights) with the seeds' methodology: warm-up, then measured iterations, median time
per batch, in a fresh subprocess per configuration, twice: with Debian's default BLAS
(pthreads OpenBLAS behind libblas.so.3) and with the OpenMP build of OpenBLAS that Mosaic
links (LD_LIBRARY_PATH). The better of the two is the baseline for the ratios, so the
claims are conservative. Mosaic runs `mosaic bench --json`.

Prints a Markdown table of images/s (sequences/s for bert-base, seed 001's sentences/s at
sequence 128) and the ratios the project tracks: onednn / PyTorch, im2col / onednn, per-node
overhead, and the largest Conv (bert-base: MatMul) and Gemm layers' GFLOP/s as a fraction of
the machine's measured OpenBLAS sgemm peak. Training steps use SGD for the CNNs and AdamW for
BERT, with a label per token.

Training of the image models (`--mode training`) has an optimizer axis, `--optimizers
sgd,adam,rmsprop` (seed 000's Figure 3), at the seed's learning rates unless `--lr` is given,
with PyTorch's defaults for the rest (Adam beta (0.9, 0.999), eps 1e-8; RMSprop alpha 0.99,
eps 1e-8), as Mosaic's built-in rules have them. There PyTorch and TensorFlow (`--tensorflow
PYTHON`: an interpreter with tensorflow-cpu, such as bench/compare_peers.py's .peers-venv;
bench/tf_peer.py) start from the weights of the ONNX file Mosaic times, and before timing each
takes three steps on one fixed batch: their losses must agree (relative 1e-3), so the compared
steps compute the same update. Run it with the venv's interpreter for PyTorch 2.

usage: bench/compare_pytorch.py [--mosaic build/mosaic] [--models alexnet-cifar,vgg16-cifar]
                                [--batches 1,64,250] [--threads 2] [--json results/perf.json]
                                [--mode training [--optimizers sgd,adam,rmsprop] [--tensorflow PYTHON]]
"""
import argparse
import resource
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tf_peer import check_batch  # noqa: E402  (one definition; tf_peer loads no TensorFlow on import)


def alexnet_cifar():
    return nn.Sequential(
        nn.Conv2d(3, 192, 3, stride=2), nn.ReLU(), nn.ZeroPad2d(1), nn.MaxPool2d(3, 2),
        nn.Conv2d(192, 384, 3), nn.ReLU(), nn.ZeroPad2d(1), nn.MaxPool2d(2, 2),
        nn.Conv2d(384, 256, 3), nn.ReLU(), nn.ZeroPad2d(1),
        nn.Conv2d(256, 256, 3), nn.ReLU(), nn.ZeroPad2d(1),
        nn.Conv2d(256, 256, 3), nn.ReLU(), nn.ZeroPad2d(1), nn.MaxPool2d(2, 2),
        nn.Flatten(), nn.Linear(1024, 8192), nn.ReLU(), nn.Linear(8192, 8192), nn.ReLU(), nn.Linear(8192, 10))


def vgg16_cifar():
    layers, cin = [], 3
    for block in ([64, 64], [128, 128], [256, 256, 256], [512, 512, 512]):
        for cout in block:
            layers += [nn.Conv2d(cin, cout, 3), nn.ReLU(), nn.ZeroPad2d(1)]
            cin = cout
        layers.append(nn.MaxPool2d(2, 2))
    layers += [nn.Flatten(), nn.Linear(2048, 512), nn.ReLU(), nn.Linear(512, 100)]
    return nn.Sequential(*layers)


def dp_mnist_small():
    """Seed 004's small CNN (its code's PyTorch model): 402,442 parameters."""
    return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2, 2), nn.Flatten(),
                         nn.Linear(6272, 64), nn.ReLU(), nn.Linear(64, 10))


def dp_mnist_large():
    """Seed 004's large CNN as its code defines it: 4,104,202 parameters."""
    layers, cin = [], 1
    for cout in (128, 256, 512):
        layers += [nn.Conv2d(cin, cout, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2, 2)]
        cin = cout
    return nn.Sequential(*layers, nn.Flatten(), nn.Linear(4608, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                         nn.Linear(512, 10))


class BertLayer(nn.Module):
    """zoo:bert-base's post-norm block (frontends/zoo/zoo_sequence.cpp), op for op."""

    def __init__(self, h=768, heads=12, ff=3072):
        super().__init__()
        self.heads, self.d = heads, h // heads
        self.q, self.k, self.v, self.o = (nn.Linear(h, h) for _ in range(4))
        self.ln1, self.ln2 = nn.LayerNorm(h), nn.LayerNorm(h)
        self.ff1, self.ff2 = nn.Linear(h, ff), nn.Linear(ff, h)

    def forward(self, x):
        b, t, h = x.shape
        split = lambda z: z.view(b, t, self.heads, self.d).transpose(1, 2)
        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        p = torch.softmax(q @ k.transpose(-1, -2) / self.d ** 0.5, dim=-1)
        x = self.ln1(x + self.o((p @ v).transpose(1, 2).reshape(b, t, h)))
        return self.ln2(x + self.ff2(nn.functional.gelu(self.ff1(x))))


class BertBase(nn.Module):
    """zoo:bert-base: word and position embeddings, 12 blocks, a masked-LM head tied to the
    word embeddings: ids [N, 128] -> logits [N, 128, 30522]."""

    def __init__(self, vocab=30522, seq=128, h=768):
        super().__init__()
        self.word, self.pos = nn.Embedding(vocab, h), nn.Parameter(torch.zeros(seq, h))
        self.ln = nn.LayerNorm(h)
        self.blocks = nn.ModuleList(BertLayer() for _ in range(12))
        self.transform, self.ln_head = nn.Linear(h, h), nn.LayerNorm(h)
        self.bias = nn.Parameter(torch.zeros(vocab))

    def forward(self, ids):
        x = self.ln(self.word(ids) + self.pos)
        for blk in self.blocks:
            x = blk(x)
        return self.ln_head(nn.functional.gelu(self.transform(x))) @ self.word.weight.t() + self.bias


class LstmClassifier(nn.Module):
    """zoo:lstm-classifier: 128-d embeddings of 10,000 ids, one bidirectional LSTM (hidden
    256, batch first), the two final states -> 4 classes."""

    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(10000, 128)
        self.lstm = nn.LSTM(128, 256, batch_first=True, bidirectional=True)
        self.classifier = nn.Linear(512, 4)

    def forward(self, ids):
        _, (h, _) = self.lstm(self.embedding(ids))
        return self.classifier(h.transpose(0, 1).reshape(ids.shape[0], 512))


MODELS = {"alexnet-cifar": alexnet_cifar, "vgg16-cifar": vgg16_cifar, "dp-mnist-small": dp_mnist_small,
          "dp-mnist-large": dp_mnist_large, "bert-base": BertBase, "lstm-classifier": LstmClassifier}
# PyTorch's LSTM has two bias vectors per gate as ONNX's does: the counts agree.
PARAMS = {"alexnet-cifar": 78330250, "vgg16-cifar": 8735652, "dp-mnist-small": 402442, "dp-mnist-large": 4104202,
          "bert-base": 109217850, "lstm-classifier": 2072580}
SEQUENCE = {"bert-base": (128, 30522), "lstm-classifier": (64, 10000)}  # token models: sequence length, vocabulary
IMAGE = {"alexnet-cifar": (3, 32, 32), "vgg16-cifar": (3, 32, 32), "dp-mnist-small": (1, 28, 28),
         "dp-mnist-large": (1, 28, 28)}  # image models: (C, H, W)
CLASSES = {"alexnet-cifar": 10, "vgg16-cifar": 100, "dp-mnist-small": 10, "dp-mnist-large": 10,
           "lstm-classifier": 4}  # the others predict every token


LR = {"sgd": 0.01, "adam": 0.001, "rmsprop": 0.001}  # seed 000 tried 0.01, 0.001 and 0.0001 for each


def torch_optimizer(name, params, lr):
    """PyTorch's optimizer `name` with its defaults (the rules Mosaic's built-ins follow)."""
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, betas=(0.9, 0.999), eps=1e-8)
    if name == "rmsprop":
        return torch.optim.RMSprop(params, lr=lr, alpha=0.99, eps=1e-8)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr)
    raise SystemExit(f"compare_pytorch: optimizer '{name}' (sgd, adam, rmsprop, adamw)")


def load_onnx_weights(model, path):
    """The weights of a chain CNN's ONNX file (its Conv and Gemm nodes, in order) copied into
    the module's Conv2d and Linear layers, in order; shapes must agree."""
    import onnx
    from onnx import numpy_helper
    g = onnx.load(path).graph
    inits = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    tensors = []
    for n in g.node:
        if n.op_type not in ("Conv", "Gemm"):
            continue
        w = inits[n.input[1]]
        if n.op_type == "Gemm" and not any(a.name == "transB" and a.i for a in n.attribute):
            w = w.T
        tensors += [w] + ([inits[n.input[2]]] if len(n.input) > 2 else [])
    params = list(model.parameters())
    if len(params) != len(tensors):
        raise SystemExit(f"compare_pytorch: {path} has {len(tensors)} weight tensors, the module {len(params)}")
    with torch.no_grad():
        for p, t in zip(params, tensors):
            if tuple(p.shape) != t.shape:
                raise SystemExit(f"compare_pytorch: {path}: a weight of shape {t.shape} for a parameter {tuple(p.shape)}")
            p.copy_(torch.from_numpy(t.copy()))


def time_pytorch(name, batch, warmup, iterations, budget, training=False, optimizer="sgd", lr=0.01, onnx_path="",
                 check_steps=3):
    torch.manual_seed(0)
    model = MODELS[name]().eval()
    assert sum(p.numel() for p in model.parameters()) == PARAMS[name]
    check = {}
    if onnx_path:
        load_onnx_weights(model, onnx_path)
    seq = SEQUENCE.get(name)
    x = torch.randint(0, seq[1], (batch, seq[0])) if seq else torch.rand(batch, *IMAGE[name])
    times = []
    if training:
        # One training step per iteration: forward, cross-entropy, backward, update (SGD for
        # the CNNs; AdamW for BERT, as it trains, with a label per token).
        model.train()
        per_token = name not in CLASSES
        classes = seq[1] if per_token else CLASSES[name]
        y = torch.randint(0, classes, (batch, seq[0]) if per_token else (batch,))
        opt = torch_optimizer(optimizer, model.parameters(), lr)
        loss_fn = nn.CrossEntropyLoss()

        def step(x=x, y=y):
            opt.zero_grad()
            loss = loss_fn(model(x).reshape(-1, classes), y.reshape(-1))
            loss.backward()
            opt.step()
            return loss

        if onnx_path and not seq and check_steps:  # steps on the fixed batch: the cross-framework check
            cx, cy = check_batch(batch, IMAGE[name], classes)
            cx, cy = torch.from_numpy(cx), torch.from_numpy(cy)
            check["check_losses"] = [float(step(cx, cy)) for _ in range(check_steps)]

        start = time.perf_counter()
        for _ in range(warmup):
            step()
            if time.perf_counter() - start > budget / 4:
                break
        start = time.perf_counter()
        for _ in range(iterations):
            t0 = time.perf_counter()
            step()
            times.append(time.perf_counter() - t0)
            if time.perf_counter() - start > budget * 3 / 4:
                break
        med = statistics.median(times)
        return {"images_per_s": batch / med, "median_ms": med * 1e3, "measured": len(times),
                "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, **check}
    with torch.no_grad():
        start = time.perf_counter()
        for _ in range(warmup):
            model(x)
            if time.perf_counter() - start > budget / 4:
                break
        start = time.perf_counter()
        for _ in range(iterations):
            t0 = time.perf_counter()
            model(x)
            times.append(time.perf_counter() - t0)
            if time.perf_counter() - start > budget * 3 / 4:
                break
    med = statistics.median(times)
    return {"images_per_s": batch / med, "median_ms": med * 1e3, "measured": len(times),
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


OPENMP_BLAS_DIR = "/usr/lib/x86_64-linux-gnu/openblas-openmp"


def pytorch_subprocess(name, batch, args, openmp_blas, optimizer="sgd", lr=0.01, onnx_path=""):
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    if openmp_blas:
        env["LD_LIBRARY_PATH"] = OPENMP_BLAS_DIR
    cmd = [sys.executable, os.path.abspath(__file__), "--pytorch-worker", name, str(batch), "--threads",
           str(args.threads), "--warmup", str(args.warmup), "--iterations", str(args.iterations),
           "--max-seconds", str(args.max_seconds), "--mode", args.mode, "--optimizers", optimizer, "--lr", str(lr),
           "--onnx", onnx_path]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def tensorflow_subprocess(python, onnx_path, batch, args, optimizer, lr):
    """bench/tf_peer.py's training steps in `python` (an interpreter with tensorflow-cpu)."""
    cmd = [python, os.path.join(os.path.dirname(os.path.abspath(__file__)), "tf_peer.py"), "train", onnx_path,
           str(batch), str(args.threads), optimizer, str(lr), str(args.warmup), str(args.iterations),
           str(args.max_seconds)]
    r = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS=str(args.threads)))
    if r.returncode:
        return {"error": (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1][:300]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def losses_agree(a, b, rel=1e-3):
    """Whether two check_losses lists agree (relative `rel` of the larger)."""
    return bool(a) and len(a) == len(b) and all(abs(x - y) <= rel * max(abs(x), abs(y), 1e-6) for x, y in zip(a, b))


def run_mosaic(mosaic, model_path, batch, backends, threads, warmup, iterations, budget, mode="inference",
               optimizer="sgd", lr=0.01):
    """One `mosaic bench` process per backend, so each one's peak RSS is its own."""
    runs = []
    for backend in backends:
        with tempfile.NamedTemporaryFile(suffix=".json") as tmp:
            cmd = [mosaic, "bench", model_path, "--batch", str(batch), "--backends", backend,
                   "--threads", str(threads), "--warmup", str(warmup), "--iterations", str(iterations),
                   "--max-seconds", str(budget), "--no-check", "--mode", mode, "--json", tmp.name]
            if mode == "training":
                cmd += ["--optimizer", optimizer, "--lr", str(lr)]
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            _, status, usage = os.wait4(proc.pid, 0)
            if status != 0:
                raise RuntimeError(" ".join(cmd) + " failed")
            with open(tmp.name) as f:
                run = json.load(f)["runs"][0]
            run["peak_rss_mb"] = usage.ru_maxrss / 1024
            runs.append(run)
    return {"runs": runs}


def gemm_peak(mosaic, threads):
    exe = os.path.join(os.path.dirname(os.path.abspath(mosaic)), "mosaic_gemm_peak")
    out = subprocess.run([exe, "4096", "5"], check=True, capture_output=True, text=True,
                         env=dict(os.environ, OMP_NUM_THREADS=str(threads))).stdout
    return json.loads(out)["gflops"]


def compare_row(args, name, path, batch, backends, peak, opt, lr, same_weights, training, tf_col):
    """One row of the table (printed) and its record: PyTorch (both BLAS builds), Mosaic's
    backends and, with tf_col, TensorFlow, on one model, batch and optimizer."""
    pt_default = pytorch_subprocess(name, batch, args, False, opt, lr, same_weights)
    pt_openmp = pytorch_subprocess(name, batch, args, True, opt, lr, same_weights)
    pt = max(pt_default, pt_openmp, key=lambda r: r["images_per_s"])
    rep = run_mosaic(args.mosaic, path, batch, backends, args.threads, args.warmup, args.iterations,
                     args.max_seconds, args.mode, opt, lr)
    runs = {r["label"]: r for r in rep["runs"]}
    ips = {b: runs[b]["summary"]["images_per_s"] for b in backends}
    row = {"model": name, "batch": batch, "pytorch": pt, "pytorch_default_blas": pt_default,
           "pytorch_openmp_blas": pt_openmp, "mosaic": {b: runs[b]["summary"] for b in backends},
           "peak_rss_mb": {b: runs[b]["peak_rss_mb"] for b in backends}}
    if training:
        row.update(optimizer=opt, lr=lr)
    cells = [name, str(batch)] + ([opt] if training else [])
    cells += [f"{pt_default['images_per_s']:.0f} / {pt_openmp['images_per_s']:.0f}"]
    cells += [f"{ips[b]:.0f}" for b in backends]
    if tf_col:
        tfr = tensorflow_subprocess(args.tensorflow, path, batch, args, opt, lr)
        row["tensorflow"] = tfr
        if "error" in tfr:
            cells += ["failed", "-", "-"]
        else:
            agree = losses_agree(pt.get("check_losses"), tfr.get("check_losses"))
            row["losses_agree"] = agree
            cells += [f"{tfr['images_per_s']:.0f}",
                      f"{ips['onednn'] / tfr['images_per_s']:.2f}x" if "onednn" in ips else "-",
                      "yes" if agree else "NO (" + ", ".join(f"{a:.5g}/{b:.5g}" for a, b in
                                                             zip(pt.get("check_losses", []), tfr["check_losses"])) + ")"]
    if "onednn" in runs:
        od = runs["onednn"]
        row["onednn_vs_pytorch"] = ips["onednn"] / pt["images_per_s"]
        cells.append(f"{row['onednn_vs_pytorch']:.2f}x")
        if "im2col" in runs:
            row["im2col_vs_onednn"] = ips["im2col"] / ips["onednn"]
            cells.append(f"{row['im2col_vs_onednn']:.2f}x")
        else:
            cells.append("-")
        cells.append(f"{od['summary']['overhead_per_node_us']:.2f}")
        for op in ("MatMul", "Gemm") if name in SEQUENCE else ("Conv", "Gemm"):
            nodes = [n for n in od["nodes"] if n["op"] == op]
            if not nodes:
                cells.append("-")
                continue
            big = max(nodes, key=lambda n: n["flops"])
            row[f"largest_{op.lower()}"] = {"node": big["name"], "gflops": big["gflops"],
                                            "fraction_of_peak": big["gflops"] / peak}
            cells.append(f"{big['name']} {100 * big['gflops'] / peak:.0f}%")
    cells.append(" / ".join(f"{runs[b]['peak_rss_mb']:.0f}" for b in backends) + f" vs {pt['peak_rss_mb']:.0f}")
    print("| " + " | ".join(cells) + " |", flush=True)
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mosaic", default="build/mosaic")
    ap.add_argument("--models", default="alexnet-cifar,vgg16-cifar")
    ap.add_argument("--batches", default="1,64,250")
    ap.add_argument("--backends", default="im2col,onednn")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--iterations", type=int, default=100)
    ap.add_argument("--max-seconds", type=float, default=40)
    ap.add_argument("--json", default="")
    ap.add_argument("--mode", default="inference", choices=["inference", "training"])
    ap.add_argument("--optimizers", default="", help="training: sgd,adam,rmsprop (default: sgd for the CNNs, "
                    "adamw for BERT)")
    ap.add_argument("--lr", type=float, default=0.0, help="training: the learning rate (default: seed 000's per "
                    "optimizer, sgd 0.01, adam and rmsprop 0.001)")
    ap.add_argument("--tensorflow", default="", help="training: time TensorFlow's steps too, in this Python "
                    "(with tensorflow-cpu), from the same weights")
    ap.add_argument("--onnx", default="", help=argparse.SUPPRESS)
    ap.add_argument("--check-steps", type=int, default=3, help=argparse.SUPPRESS)
    ap.add_argument("--pytorch-worker", nargs=2, metavar=("MODEL", "BATCH"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.pytorch_worker:
        name, batch = args.pytorch_worker[0], int(args.pytorch_worker[1])
        print(json.dumps(time_pytorch(name, batch, args.warmup, args.iterations, args.max_seconds,
                                      args.mode == "training", args.optimizers or "sgd", args.lr or 0.01, args.onnx,
                                      args.check_steps)))
        return 0
    unknown = [o for o in args.optimizers.split(",") if args.optimizers and o not in LR]
    if unknown:
        sys.exit(f"compare_pytorch: unknown optimizers {unknown} (known: {', '.join(LR)})")
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    backends = args.backends.split(",")
    peak = gemm_peak(args.mosaic, args.threads)
    print(f"mode {args.mode}, threads {args.threads}, OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(autodetect)')}, "
          f"torch {torch.__version__}, OpenBLAS sgemm 4096^3 peak {peak:.1f} GFLOP/s\n")
    results = {"threads": args.threads, "gemm_peak_gflops": peak,
               "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE", ""), "rows": []}
    training = args.mode == "training"
    tf_col = training and bool(args.tensorflow)
    header = "| model | batch |" + (" optimizer |" if training else "") + \
        " PyTorch img/s (default BLAS / OpenMP BLAS) | " + " | ".join(f"{b} img/s" for b in backends)
    if tf_col:
        header += " | TensorFlow img/s | onednn / TensorFlow | losses PyTorch = TensorFlow"
    header += (" | onednn / PyTorch | im2col / onednn | overhead us/node (onednn) | largest Conv (MatMul) % peak | largest Gemm % peak"
               " | peak RSS MB (" + " / ".join(backends) + " vs PyTorch) |")
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            path = os.path.join(tmp, name + ".onnx")
            subprocess.run([args.mosaic, "export", name, "-o", path], check=True, stdout=subprocess.DEVNULL)
            default_opt = "adamw" if name in SEQUENCE else "sgd"
            optimizers = args.optimizers.split(",") if training and args.optimizers and name in IMAGE else [default_opt]
            for batch in map(int, args.batches.split(",")):
                for opt in optimizers:
                    lr = args.lr or (1e-4 if opt == "adamw" else LR[opt])
                    same_weights = path if training and name in IMAGE else ""
                    results["rows"].append(compare_row(args, name, path, batch, backends, peak, opt, lr, same_weights,
                                                       training, tf_col))
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
