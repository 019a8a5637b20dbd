#!/usr/bin/env python3
"""Mosaic beside the engines a user would pick instead, on the same ONNX files, in one run.

Engines: Mosaic's onednn and im2col backends, ONNX Runtime (all graph optimisations,
intra-op threads = Mosaic's, one inter-op thread), OpenVINO (f32, latency and throughput
hints), PyTorch 2 eager and torch.compile (the same architectures and weights as the ONNX
file: it is exported from them), TensorFlow (Keras layers rebuilt from the ONNX file with its
weights, bench/tf_peer.py; tf.function, and tf.function with XLA as tensorflow-xla). The peers come from PyPI into a virtual environment (made on
first use); nothing in Mosaic's build or tests depends on them. A peer that fails to install,
load or run stays in the table as "missing" with the reason.

Method (seed 001): per engine and configuration a fresh process, 20 warm-up batches, 100
measured, the median; `--rounds` independent rounds, the engines interleaved (their order
rotates each round), and the table gives the median over rounds (and the spread), and for
ONNX Runtime a paired ratio (the median of the rounds' onednn / ORT ratios, each round's two
processes back to back, with a 90% bootstrap interval). `--pool A.json,B.json` pools the
rounds of several runs of one build into that paired ratio, measuring nothing. Before
timing, every engine's output on one fixed input is compared with PyTorch's (`mosaic verify`
for Mosaic), so that the compared computations are the same.

Any ONNX file: a --models entry that is a path (an ONNX test case folder: model.onnx and
test_data_set_0, as tests/corpus/cases/* are; or a file of a folder holding one) is timed at
the shapes of its test data (--batches does not apply: the row's batch is the first input's
leading dimension), by Mosaic, ONNX Runtime and OpenVINO (the PyTorch engines have no
module behind a file and are left out); outputs are checked against the case's expected
ones. `--corpus DIR` adds every case folder under DIR.

usage: bench/compare_peers.py [--mosaic build/mosaic] [--models alexnet-cifar,vgg16-cifar]
          [--batches 1,64] [--threads N (all cores)] [--rounds 3] [--warmup 20] [--iterations 100]
          [--engines ...] [--venv .peers-venv | --python python3] [--no-install] [--json docs/perf_peers.json]
          [--update-docs docs/performance.md]
Runs unchanged on a many-core machine (--threads defaults to every core).
"""
import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_docs import replace_table, write_json  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PEERS = ["onnxruntime", "openvino-latency", "openvino-throughput", "torch-eager", "torch-compile", "tensorflow",
         "tensorflow-xla"]
MOSAIC = ["mosaic-onednn", "mosaic-im2col"]
PACKAGES = {"onnxruntime": "onnxruntime", "openvino": "openvino", "torch": "torch", "numpy": "numpy", "onnx": "onnx",
            "tensorflow": "tensorflow-cpu"}
NEEDS = {"onnxruntime": "onnxruntime", "openvino-latency": "openvino", "openvino-throughput": "openvino",
         "torch-eager": "torch", "torch-compile": "torch", "tensorflow": "tensorflow", "tensorflow-xla": "tensorflow"}


QUIET = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")  # TensorFlow's start-up messages off


def sh(cmd, **kw):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)


def ensure_venv(venv, install):
    """The peers' virtual environment, made and filled from PyPI when `install`: its python,
    {package: version} and why each missing package is."""
    py = os.path.join(venv, "bin", "python")
    if not os.path.exists(py):
        if not install:
            return py, {}, {p: f"no virtual environment at {venv} (run without --no-install)" for p in PACKAGES}
        r = sh([sys.executable if "venv" not in sys.executable else "/usr/bin/python3", "-m", "venv", venv])
        if r.returncode:
            return py, {}, {p: "python3 -m venv failed: " + r.stdout.strip()[-200:] for p in PACKAGES}
    return probe_packages(py, venv if install else None)


def probe_packages(py, install_into=None):
    """{package: version} of what `py` imports, and why each missing package is; with
    `install_into` (a virtual environment) a missing one is first installed from PyPI."""
    versions, missing = {}, {}
    for pkg in PACKAGES:
        probe = sh([py, "-c", f"import {pkg}; print({pkg}.__version__)"], env=QUIET)
        if probe.returncode and install_into:
            print(f"installing {pkg} from PyPI into {install_into} ...", file=sys.stderr, flush=True)
            r = sh([py, "-m", "pip", "install", "--progress-bar", "off", PACKAGES[pkg]])
            if r.returncode:
                missing[pkg] = "pip install failed: " + r.stdout.strip().splitlines()[-1][:200]
                continue
            probe = sh([py, "-c", f"import {pkg}; print({pkg}.__version__)"], env=QUIET)
        if probe.returncode:
            missing[pkg] = f"does not import in {py}: " + (probe.stdout.strip().splitlines() or ["?"])[-1][:200]
        else:
            versions[pkg] = probe.stdout.strip().splitlines()[-1]  # the version, after any log lines
    return py, versions, missing


def document(args, versions, missing_engines, results, complete):
    return {"schema": "mosaic.peers/1", "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cpu": cpu_model(),
            "cores": os.cpu_count(), "threads": args.threads, "rounds": args.rounds, "warmup": args.warmup,
            "iterations": args.iterations, "models": args.models.split(","),
            "batches": [int(b) for b in args.batches.split(",")], "engines": args.engines, "versions": versions,
            "missing": missing_engines, "results": results, "complete": complete}


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def time_mosaic(mosaic, backend, model_dir, batch, threads, warmup, iterations):
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        r = sh([mosaic, "bench", os.path.join(model_dir, "case", "model.onnx"), "--backends", backend, "--batch",
                str(batch), "--threads", str(threads), "--warmup", str(warmup), "--iterations", str(iterations),
                "--max-seconds", "600", "--no-check", "--no-db", "--no-peaks", "--json", f.name],
               env=dict(os.environ, MOSAIC_PROGRESS="0"))
        if r.returncode:
            raise RuntimeError(r.stdout.strip().splitlines()[-1][:300])
        run = json.load(open(f.name))["runs"][0]
        return {"median_ms": run["summary"]["median_ms"], "min_ms": run["summary"]["min_ms"],
                "samples": run["iterations"]["measured"]}


def time_mosaic_file(mosaic, backend, case, batch, threads, warmup, iterations):
    """Mosaic on an ONNX test case at its own shapes (`batch`: its inputs' leading dimension,
    for a model whose batch dimension is symbolic)."""
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        r = sh([mosaic, "bench", os.path.join(case, "model.onnx"), "--backends", backend, "--batch", str(batch),
                "--threads", str(threads),
                "--warmup", str(warmup), "--iterations", str(iterations), "--max-seconds", "600", "--no-check",
                "--no-db", "--no-peaks", "--json", f.name], env=dict(os.environ, MOSAIC_PROGRESS="0"))
        if r.returncode:
            raise RuntimeError(r.stdout.strip().splitlines()[-1][:300])
        run = json.load(open(f.name))["runs"][0]
        return {"median_ms": run["summary"]["median_ms"], "min_ms": run["summary"]["min_ms"],
                "samples": run["iterations"]["measured"]}


def time_peer_file(py, engine, case, threads, warmup, iterations):
    r = sh([py, os.path.join(HERE, "peers_worker.py"), "time-file", engine, case, str(threads), str(warmup),
            str(iterations)], env=dict(os.environ, OMP_NUM_THREADS=str(threads)))
    if r.returncode:
        raise RuntimeError((r.stdout.strip().splitlines() or ["exit %d" % r.returncode])[-1][:300])
    return json.loads(r.stdout.strip().splitlines()[-1])


def case_of(entry):
    """The ONNX test case folder a --models entry names, or None for an architecture name."""
    if os.sep not in entry and not entry.endswith(".onnx"):
        return None
    path = os.path.abspath(entry)
    case = os.path.dirname(path) if path.endswith(".onnx") else path
    if not os.path.exists(os.path.join(case, "model.onnx")):
        sys.exit(f"compare_peers: {entry}: no model.onnx there")
    return case


def case_batch(case):
    """The leading dimension of the case's first input (1 without test data)."""
    import glob
    first = sorted(glob.glob(os.path.join(case, "test_data_set_0", "input_*.pb")))
    if not first:
        return 1
    data = open(first[0], "rb").read()
    # dims are field 1 (varint, packed or not) of the TensorProto: read them without onnx.
    dims, i = [], 0
    while i < len(data):
        key, i = varint(data, i)
        field, wire = key >> 3, key & 7
        if field == 1 and wire == 0:
            v, i = varint(data, i)
            dims.append(v)
        elif field == 1 and wire == 2:
            n, i = varint(data, i)
            end = i + n
            while i < end:
                v, i = varint(data, i)
                dims.append(v)
        elif wire == 0:
            _, i = varint(data, i)
        elif wire == 2:
            n, i = varint(data, i)
            i += n
        elif wire == 5:
            i += 4
        elif wire == 1:
            i += 8
        else:
            break
    return dims[0] if dims else 1


def varint(data, i):
    v, shift = 0, 0
    while True:
        b = data[i]
        i += 1
        v |= (b & 0x7F) << shift
        if not b & 0x80:
            return v, i
        shift += 7


def time_peer(py, engine, model_dir, batch, threads, warmup, iterations):
    r = sh([py, os.path.join(HERE, "peers_worker.py"), "time", engine, model_dir, str(batch), str(threads), str(warmup),
            str(iterations)], env=dict(os.environ, OMP_NUM_THREADS=str(threads)))
    if r.returncode:
        raise RuntimeError((r.stdout.strip().splitlines() or ["exit %d" % r.returncode])[-1][:300])
    return json.loads(r.stdout.strip().splitlines()[-1])


def markdown(doc, engines_asked):
    """The peer table of a document (document()): one row per model and batch measured."""
    results, versions, missing_engines = doc["results"], doc["versions"], doc["missing"]
    lines = [f"Images/s (median of {doc['rounds']} interleaved rounds; each round a fresh process, {doc['warmup']} "
             f"warm-up and {doc['iterations']} measured batches, the median batch), {doc['threads']} threads, "
             f"{doc['cpu']} ({doc['cores']} logical cores); `bench/compare_peers.py`, {doc['date'][:10]}. Versions: " +
             ", ".join(f"{k} {v}" for k, v in sorted(versions.items())) + ".", ""]
    args = argparse.Namespace(engines=engines_asked)
    engines = [e for e in args.engines if any(e in r["engines"] for r in results)] + \
              [e for e in args.engines if e in missing_engines and not any(e in r["engines"] for r in results)]
    lines.append("| model, batch | " + " | ".join(engines) + " | onednn / best peer | median / min (onednn) |")
    lines.append("|---" * (len(engines) + 3) + "|")
    for r in results:
        cells, best = [], 0
        for e in engines:
            v = r["engines"].get(e)
            if v is None:
                cells.append("missing")
                continue
            if "error" in v:
                cells.append("failed")
                continue
            cells.append(f"{v['images_per_s']:.0f}")
            if e not in MOSAIC:
                best = max(best, v["images_per_s"])
        one = r["engines"].get("mosaic-onednn", {})
        ratio = f"{one['images_per_s'] / best:.2f}x" if best and "images_per_s" in one else "-"
        jitter = f"{one['median_ms'] / one['min_ms']:.2f}" if "min_ms" in one else "-"
        lines.append(f"| {r['model']}, {r['batch']} | " + " | ".join(cells) + f" | {ratio} | {jitter} |")
    ratios = sorted(r["engines"]["mosaic-onednn"]["images_per_s"] / r["engines"]["onnxruntime"]["images_per_s"]
                    for r in results if "images_per_s" in r["engines"].get("mosaic-onednn", {})
                    and "images_per_s" in r["engines"].get("onnxruntime", {}))
    paired = [(r, r["engines"]["onnxruntime"]["paired_onednn"]) for r in results
              if "paired_onednn" in r["engines"].get("onnxruntime", {})]
    if paired:
        lines += [""] + [f"Paired, {r['model']} batch {r['batch']}: onednn / ONNX Runtime round by round (each round "
                         f"both engines back to back) median {p['median']:.2f}x, 90% bootstrap interval "
                         f"{p['ci90'][0]:.2f}-{p['ci90'][1]:.2f}x over {len(p['ratios'])} rounds." for r, p in paired]
    if len(ratios) > 1:
        lines += ["", f"onednn / ONNX Runtime over the {len(ratios)} rows both ran: median "
                      f"{statistics.median(ratios):.2f}x, lowest {ratios[0]:.2f}x, highest {ratios[-1]:.2f}x; "
                      f"onednn ahead in {sum(x >= 1 for x in ratios)}."]
    notes = []
    for e, why in sorted(missing_engines.items()):
        notes.append(f"- {e}: missing ({why})")
    for r in results:
        for e, v in r["engines"].items():
            if "error" in v:
                notes.append(f"- {e} on {r['model']} batch {r['batch']}: failed ({v['error']})")
            elif v.get("check") and not v["check"]["ok"]:
                notes.append(f"- {e} on {r['model']}: output differs from PyTorch's ({v['check']['detail']})")
    if not doc.get("complete", True):
        planned = [f"{m}, {b}" for m in doc.get("models", []) for b in doc.get("batches", [])
                   if not any(r["model"] == m and r["batch"] == b for r in results)]
        notes.append("- the run was cut short by its time limit" +
                     (": not measured " + "; ".join(planned) if planned else " after the rows above"))
    if notes:
        lines += [""] + notes
    return "\n".join(lines) + "\n"


def paired_ratio(one_ms, peer_ms):
    """onednn's speed over a peer's, round by round: each round ran both engines back to back,
    so a round's ratio cancels the drift of this machine's speed between rounds (a VM here moves
    15-20% from minute to minute). The median of the rounds' ratios, and a 90% bootstrap
    interval of that median (2,000 resamples, fixed seed: the same rounds give the same
    interval)."""
    ratios = [p / o for o, p in zip(one_ms, peer_ms)]
    rng = random.Random(0)
    meds = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(2000))
    return {"ratios": [round(x, 4) for x in ratios], "median": statistics.median(ratios),
            "ci90": [meds[100], meds[1899]]}


def pooled(paths):
    """onednn / ONNX Runtime over the rounds of several runs (--json files) together, per model
    and batch: every round of every run, none left out. A markdown table."""
    rows = {}
    for path in paths:
        for r in json.load(open(path))["results"]:
            one, peer = r["engines"].get("mosaic-onednn", {}), r["engines"].get("onnxruntime", {})
            if "rounds_ms" not in one or "rounds_ms" not in peer or len(one["rounds_ms"]) != len(peer["rounds_ms"]):
                continue
            row = rows.setdefault((r["model"], r["batch"]), {"runs": 0, "one": [], "peer": []})
            row["runs"] += 1
            row["one"] += one["rounds_ms"]
            row["peer"] += peer["rounds_ms"]
    lines = ["| model, batch | runs | rounds | onednn / ORT, medians of the rounds | paired median | 90% interval "
             "| rounds at 1.1x or more |", "|---|---|---|---|---|---|---|"]
    for (model, batch), row in sorted(rows.items()):
        p = paired_ratio(row["one"], row["peer"])
        lines.append(f"| {model}, {batch} | {row['runs']} | {len(row['one'])} | "
                     f"{statistics.median(row['peer']) / statistics.median(row['one']):.2f}x | {p['median']:.2f}x | "
                     f"{p['ci90'][0]:.2f}-{p['ci90'][1]:.2f}x | {sum(x >= 1.1 for x in p['ratios'])} |")
    return "\n".join(lines) + "\n"


def interleaved_rounds(args, engines, row, checks, label, time_one):
    """Times each engine in `engines` over args.rounds rounds, interleaved and rotated, with
    time_one(engine) -> measurement; fills row["engines"] (images/s from the median of the
    rounds' medians, or the error) and checks[engine] for the peers' output comparison."""
    runs = {e: [] for e in engines}
    for rnd in range(args.rounds):
        order = engines[rnd % len(engines):] + engines[:rnd % len(engines)] if engines else []
        for e in order:
            if runs[e] is None:
                continue
            print(f"{label} round {rnd + 1}/{args.rounds}: {e} ...", file=sys.stderr, flush=True)
            try:
                m = time_one(e)
                if e not in MOSAIC:
                    ok = m["max_abs_diff"] <= 1e-3 * max(m["ref_scale"], 1.0)
                    checks[e] = {"ok": ok, "detail": f"max abs diff {m['max_abs_diff']:.3g} of scale {m['ref_scale']:.3g}"}
                runs[e].append(m)
            except RuntimeError as err:
                row["engines"][e] = {"error": str(err)}
                runs[e] = None
    for e, ms in runs.items():
        if not ms:
            continue
        med = statistics.median(x["median_ms"] for x in ms)
        row["engines"][e] = {"images_per_s": row["batch"] / (med / 1e3), "median_ms": med,
                             "min_ms": min(x["min_ms"] for x in ms), "rounds_ms": [x["median_ms"] for x in ms],
                             "check": checks.get(e)}
        if "requests" in ms[0]:
            row["engines"][e]["requests"] = ms[0]["requests"]
    one = runs.get("mosaic-onednn")
    for e, ms in runs.items():
        if e not in MOSAIC and ms and one and len(ms) == len(one):
            row["engines"][e]["paired_onednn"] = paired_ratio([x["median_ms"] for x in one], [x["median_ms"] for x in ms])
    print(json.dumps({k: (round(v["images_per_s"], 1) if "images_per_s" in v else v) for k, v in row["engines"].items()}),
          file=sys.stderr, flush=True)


FILE_ENGINES = ["mosaic-onednn", "mosaic-im2col", "onnxruntime", "openvino-latency"]


def time_case(args, py, missing_engines, case):
    """One row for an ONNX test case: every engine that runs files, interleaved over rounds."""
    name = os.path.basename(case.rstrip("/"))
    batch = case_batch(case)
    row = {"model": name, "batch": batch, "engines": {}}
    engines = [e for e in args.engines if e in FILE_ENGINES and e not in missing_engines]
    checks = {}
    for e in engines:
        if e in MOSAIC:
            v = sh([args.mosaic, "verify", case, "--backend", e.split("-")[1], "--fallback", "naive"])
            checks[e] = {"ok": v.returncode == 0, "detail": v.stdout.strip().splitlines()[-1][:200] if v.stdout else ""}
    def time_one(e):
        if e in MOSAIC:
            return time_mosaic_file(args.mosaic, e.split("-")[1], case, batch, args.threads, args.warmup, args.iterations)
        return time_peer_file(py, e, case, args.threads, args.warmup, args.iterations)

    interleaved_rounds(args, engines, row, checks, name, time_one)
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mosaic", default=os.path.join(ROOT, "build", "mosaic"))
    ap.add_argument("--models", default="alexnet-cifar,vgg16-cifar")
    ap.add_argument("--corpus", default="", help="add every ONNX test case folder under this folder to --models")
    ap.add_argument("--batches", default="1,64")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--iterations", type=int, default=100)
    ap.add_argument("--engines", default=",".join(MOSAIC + PEERS))
    ap.add_argument("--venv", default=os.path.join(ROOT, ".peers-venv"))
    ap.add_argument("--python", default="", help="use this interpreter's packages as they are (no virtual "
                    "environment, nothing installed): a machine that cannot reach PyPI")
    ap.add_argument("--no-install", action="store_true")
    ap.add_argument("--json", default="")
    ap.add_argument("--update-docs", default="", help="replace the table between the peers markers of this file")
    ap.add_argument("--table-from", default="", help="print (and with --update-docs write) the table of an earlier "
                    "run's --json, measuring nothing: a run made elsewhere, or one cut short")
    ap.add_argument("--pool", default="", help="comma-separated --json files of earlier runs: print, per model "
                    "and batch, onednn / ONNX Runtime over all their rounds together (paired, with the interval), "
                    "measuring nothing: runs of one build on a machine whose speed drifts")
    ap.add_argument("--marker", default="peers", help="the name of the --update-docs markers (<!-- NAME:begin -->)")
    args = ap.parse_args()
    args.engines = args.engines.split(",")
    if args.corpus:
        cases = sorted(os.path.join(args.corpus, c) for c in os.listdir(args.corpus)
                       if os.path.exists(os.path.join(args.corpus, c, "model.onnx")))
        args.models = ",".join(([args.models] if args.models and args.models != ap.get_default("models") else []) + cases)
    if args.pool:
        print(pooled(args.pool.split(",")), end="")
        return 0
    if args.table_from:
        doc = json.load(open(args.table_from))
        table = markdown(doc, doc.get("engines", MOSAIC + PEERS))
        print(table)
        if args.update_docs:
            replace_table(args.update_docs, args.marker, table, "compare_peers")
        return 0
    unknown = [e for e in args.engines if e not in MOSAIC + PEERS]
    if unknown:
        sys.exit(f"compare_peers: unknown engines {unknown}; known: {MOSAIC + PEERS}")
    if args.threads < 1 or args.rounds < 1 or args.warmup < 0 or args.iterations < 1:
        sys.exit("compare_peers: --threads, --rounds and --iterations must be positive, --warmup >= 0")
    if not os.access(args.mosaic, os.X_OK):
        sys.exit(f"compare_peers: {args.mosaic} not found: build Mosaic first (scripts/setup.sh)")
    if args.python:
        py, versions, missing_pkgs = probe_packages(args.python)
    else:
        py, versions, missing_pkgs = ensure_venv(args.venv, not args.no_install)
    missing_engines = {e: f"{NEEDS[e]}: {missing_pkgs[NEEDS[e]]}" for e in args.engines
                       if e in NEEDS and NEEDS[e] in missing_pkgs}
    # torch exports the zoo models; ONNX files (case folders) need only numpy and onnx.
    needed = ("numpy", "onnx") + (() if all(case_of(m) for m in args.models.split(",")) else ("torch",))
    for p in needed:
        if p in missing_pkgs:
            sys.exit(f"compare_peers: {p} is needed to export the models and check outputs: {missing_pkgs[p]}")
    r = sh([args.mosaic, "--version"])
    versions["mosaic"] = r.stdout.strip().split("\n")[0].replace("mosaic ", "") if r.returncode == 0 else "?"
    work = tempfile.mkdtemp(prefix="mosaic-peers-")
    results = []
    for model in args.models.split(","):
        case = case_of(model)
        if case:
            results.append(time_case(args, py, missing_engines, case))
            if args.json:
                write_json(args.json, document(args, versions, missing_engines, results, complete=False))
            continue
        d = os.path.join(work, model)
        os.makedirs(d)
        r = sh([py, os.path.join(HERE, "peers_worker.py"), "export", model, d])
        if r.returncode:
            sys.exit(f"compare_peers: exporting {model} failed:\n{r.stdout[-2000:]}")
        # Mosaic computes what PyTorch computes (ONNX test case: PyTorch's output at batch 1).
        checks = {}
        for e in args.engines:
            if e in MOSAIC:
                v = sh([args.mosaic, "verify", os.path.join(d, "case"), "--backend", e.split("-")[1]])
                checks[e] = {"ok": v.returncode == 0, "detail": v.stdout.strip().splitlines()[-1][:200] if v.stdout else ""}
        for batch in map(int, args.batches.split(",")):
            row = {"model": model, "batch": batch, "engines": {}}
            def time_one(e, batch=batch, d=d):
                if e in MOSAIC:
                    return time_mosaic(args.mosaic, e.split("-")[1], d, batch, args.threads, args.warmup,
                                       args.iterations)
                return time_peer(py, e, d, batch, args.threads, args.warmup, args.iterations)

            interleaved_rounds(args, [e for e in args.engines if e not in missing_engines], row, checks,
                               f"{model} batch {batch}", time_one)
            results.append(row)
            if args.json:  # what is measured so far survives a run cut short
                write_json(args.json, document(args, versions, missing_engines, results, complete=False))
    doc = document(args, versions, missing_engines, results, complete=True)
    table = markdown(doc, args.engines)
    print(table)
    if args.json:
        write_json(args.json, doc)
    if args.update_docs:
        replace_table(args.update_docs, args.marker, table, "compare_peers")
    bad = [e for r in results for e, v in r["engines"].items() if v.get("check") and not v["check"]["ok"]]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
