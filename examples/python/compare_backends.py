"""Compare backends on one ONNX model and plot each node's median time per backend.

    PYTHONPATH=build/python python3 examples/python/compare_backends.py MODEL.onnx
    PYTHONPATH=build/python python3 examples/python/compare_backends.py --zoo alexnet-cifar --batch 16

Every backend's outputs are checked against the naive oracle first (a backend that disagrees
computes something else, and its times say nothing); then each node's median time is drawn as
one bar per backend, slowest nodes first, into a PNG (matplotlib), and the table printed.
"""
import argparse
import os
import sys
import tempfile

import matplotlib

matplotlib.use("Agg")  # files only: no display needed
import matplotlib.pyplot as plt  # noqa: E402

import mosaic  # noqa: E402


def node_times(report):
    """{backend: {node: median microseconds}} from a mosaic.bench report (views have no time)."""
    out = {}
    for run in report["runs"]:
        out[run["label"]] = {n["name"]: n["median_us"] for n in run["nodes"] if not n["view"]}
    return out


def plot(times, title, path, top):
    backends = list(times)
    slowest = max(times, key=lambda b: sum(times[b].values()))
    nodes = sorted(times[slowest], key=lambda n: -times[slowest][n])[:top]
    width = 0.8 / len(backends)
    fig, ax = plt.subplots(figsize=(max(6, 0.5 * len(nodes) + 2), 4))
    for i, b in enumerate(backends):
        ax.bar([k + i * width for k in range(len(nodes))], [times[b].get(n, 0) for n in nodes], width, label=b)
    ax.set_xticks([k + 0.4 - width / 2 for k in range(len(nodes))])
    ax.set_xticklabels(nodes, rotation=60, ha="right", fontsize=7)
    ax.set_yscale("log")  # the naive oracle is often 100x slower than the rest
    ax.set_ylabel("median time per node (us, log scale)")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return nodes


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", nargs="?", help="an ONNX file")
    p.add_argument("--zoo", help="a built-in model, exported to ONNX first (alexnet-cifar, fmnist-cnn, ...)")
    p.add_argument("--backends", default=",".join(b for b in mosaic.backends() if b != "python"))
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--iterations", type=int, default=20)
    p.add_argument("--top", type=int, default=20, help="nodes drawn (the slowest)")
    p.add_argument("--out", default="per_node_times.png", help="the PNG written")
    a = p.parse_args(argv)
    if bool(a.model) == bool(a.zoo):
        p.error("give an ONNX file or --zoo NAME")
    model = a.model
    if a.zoo:
        model = os.path.join(tempfile.mkdtemp(prefix="mosaic-compare-"), a.zoo + ".onnx")
        print("exported", model + ":", mosaic.export(a.zoo, model))
    report = mosaic.bench(model, backends=a.backends, batch=a.batch, iterations=a.iterations, warmup=3, peaks=False)
    if not report["checks_ok"]:
        bad = [r["label"] for r in report["runs"] if not r["check"]["passed"]]
        print("outputs differ from the naive oracle on:", ", ".join(bad), file=sys.stderr)
        return 1
    times = node_times(report)
    nodes = plot(times, f"{os.path.basename(model)}, batch {report['batch']}", a.out, a.top)
    print(f"{'node':24s}" + "".join(f"{b:>12s}" for b in times))
    for n in nodes:
        print(f"{n:24s}" + "".join(f"{times[b].get(n, 0):12.1f}" for b in times))
    print("whole model, median ms:", ", ".join(f"{r['label']} {r['iteration_ms']['median']:.3f}" for r in report["runs"]))
    print("plot:", a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
