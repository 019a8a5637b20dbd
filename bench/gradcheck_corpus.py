#!/usr/bin/python3
"""Measures gradcheck's verdicts: false alarms on correct models, catches of planted bugs.

Corpus (docs/gradcheck.md#measured):
  correct  the zoo models; torchvision exports (resnet18, squeezenet1_1, mobilenet_v2,
           googlenet at small inputs, the last two also as "-bnstats": BatchNorm statistics
           measured before the export, a living base point); plain PyTorch CNNs and MLPs
           with PyTorch's default initialisation and various depths, paddings, strides and
           pooling; each with --seed S on every backend. Any FAIL is a false alarm.
  planted  every planted bug (mosaic gradcheck --plant) on every backend, on every model
           that has the op it breaks. Anything but FAIL is a miss; --summary and --table
           count the misses apart where the correct model's run (same model, backend and
           seed) does not PASS every tensor, since there no bug can be expected to show.

Results are appended one JSON line per run to --results (default OUT/results.jsonl); a
rerun skips what is there (the corpus takes hours: run it in pieces with --only / --seeds).
The recorded run is docs/gradcheck_corpus.jsonl: pass it as --results to continue it.
--table prints the Markdown tables of docs/gradcheck.md from the results.

usage: gradcheck_corpus.py MOSAIC OUT [--results FILE] [--seeds 1-20] [--backends A,B,...]
                           [--only NAME,...] [--kind correct|planted|both] [--table] [--no-shared]
                           [--threads 1] [--summary] [--merge FILE] [--sequence CASES]
--sequence CASES runs the corpus over the sequence models of tests/torch/gen_sequence_cases.py
(BERT-, GPT-, ViT-style, nn.TransformerEncoder, LSTM and GRU exports at opsets 13, 14, 17) with
the planted bugs of their ops (LayerNorm, Softmax, Gather, LSTM, GRU, Gemm, Add, ...); the
recorded run is docs/gradcheck_sequence.jsonl.
Correct models run every pending backend of a seed in one gradcheck (--backend a,b,c), which
shares the reference evaluations and gives each backend the verdicts of a separate run; so
does each planted bug (every backend carries it).
--summary prints the totals and what is still to run; --merge FILE replaces the rows that
FILE reruns (e.g. with a newer binary: run into FILE, then merge) and appends its others.
"""
import argparse
import json
import os
import subprocess
import sys
import time

ZOO = {"fmnist-cnn": 2, "alexnet-cifar": 2, "vgg16-cifar": 2}
TORCHVISION = {"resnet18": 32, "squeezenet1_1": 64, "mobilenet_v2": 32, "googlenet": 64,
               "mobilenet_v2-bnstats": 32, "googlenet-bnstats": 64}
# "-bnstats": BatchNorm's running statistics measured on gradcheck-like inputs (uniform in
# [-1, 1]) before the eval export folds them. With torchvision's initial statistics (mean 0,
# variance 1) mobilenet_v2 and googlenet are nearly dead at initialisation: activations shrink
# layer by layer and every gradient but the classifier's is below 1e-8, under gradcheck's
# error floor, where it can neither pass nor catch anything (INCONCLUSIVE). Measured
# statistics, as a trained checkpoint would have, keep each layer's activations at unit scale.
# Plain nets: (name, layers, input channels, input size); a layer is conv:C:K:S:P, pool:max|avg:K:S, fc:N.
PLAIN = [
    ("cnn2-nopad", ["conv:8:3:1:0", "conv:16:3:1:0", "pool:max:2:2", "fc:64", "fc:10"], 1, 28),
    ("cnn3-pad-stride", ["conv:8:3:2:1", "conv:16:3:1:1", "pool:max:3:2", "conv:16:3:1:1", "fc:10"], 3, 32),
    ("cnn4-avg", ["conv:6:5:1:2", "pool:avg:2:2", "conv:12:3:1:1", "pool:max:2:2", "conv:12:3:1:0", "fc:10"], 3, 24),
    ("cnn-deep", ["conv:8:3:1:1"] * 3 + ["pool:max:2:2"] + ["conv:16:3:1:1"] * 3 + ["pool:max:2:2", "fc:10"], 3, 16),
    ("cnn-k1-k5", ["conv:8:1:1:0", "conv:8:5:1:2", "pool:max:2:1", "conv:4:3:2:0", "fc:10"], 2, 15),
    ("mlp2", ["fc:64", "fc:10"], 1, 12),
    ("mlp4", ["fc:128", "fc:64", "fc:32", "fc:10"], 1, 16),
]

EXPORT = r'''
import sys, torch, torch.nn as nn, torchvision
kind, name, path, spec = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
torch.manual_seed(0)
if kind == "torchvision":
    size, arch = int(spec), name.split("-")[0]
    m = getattr(torchvision.models, arch)(weights=None, **({"aux_logits": False, "init_weights": True} if arch == "googlenet" else {}))
    shape = (1, 3, size, size)
    if name.endswith("-bnstats"):
        for b in m.modules():
            if isinstance(b, nn.BatchNorm2d):
                b.reset_running_stats()
                b.momentum = None  # a plain average over the batches below
        m.train()
        with torch.no_grad():
            for _ in range(4):
                m(torch.rand(32, *shape[1:]) * 2 - 1)
else:
    layers, c, size = spec.split(";")[0].split(","), int(spec.split(";")[1]), int(spec.split(";")[2])
    mods, ch, hw, flat = [], c, size, False
    for l in layers:
        p = l.split(":")
        if p[0] == "conv":
            o, k, s, pad = map(int, p[1:]); mods += [nn.Conv2d(ch, o, k, s, pad), nn.ReLU()]
            ch, hw = o, (hw + 2 * pad - k) // s + 1
        elif p[0] == "pool":
            k, s = int(p[2]), int(p[3]); mods.append(nn.MaxPool2d(k, s) if p[1] == "max" else nn.AvgPool2d(k, s))
            hw = (hw - k) // s + 1
        else:
            if not flat: mods.append(nn.Flatten()); ch, flat = ch * hw * hw, True
            mods += [nn.Linear(ch, int(p[1])), nn.ReLU()]; ch = int(p[1])
    m = nn.Sequential(*mods[:-1])  # no ReLU after the logits
    shape = (1, c, size, size)
m.eval()
torch.onnx.export(m, torch.zeros(*shape), path, input_names=["x"], output_names=["y"],
                  dynamic_axes={"x": {0: "N"}, "y": {0: "N"}}, opset_version=13, do_constant_folding=True)
'''


def sequence_models(cases):
    """(name, model path, batch) of tests/torch/gen_sequence_cases.py's exports under CASES."""
    found = []
    for d in sorted(os.listdir(cases)):
        path = os.path.join(cases, d, "model.onnx")
        if os.path.exists(path):
            found.append((d[len("test_"):] if d.startswith("test_") else d, path, 2))
    return found


def models(out):
    """(name, model path or zoo:NAME, batch) for the whole corpus, exporting what is missing."""
    os.makedirs(out, exist_ok=True)
    found = [(n, "zoo:" + n, b) for n, b in ZOO.items()]
    todo = [("torchvision", n, str(s)) for n, s in TORCHVISION.items()]
    todo += [("plain", n, ",".join(l) + ";%d;%d" % (c, s)) for n, l, c, s in PLAIN]
    for kind, name, spec in todo:
        path = os.path.join(out, name + ".onnx")
        if not os.path.exists(path):
            subprocess.run([sys.executable, "-c", EXPORT, kind, name, path, spec], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        found.append((name, path, 2))
    return found


def ops_of(mosaic, model, batch):
    r = subprocess.run([mosaic, "info", model, "--batch", str(batch)], capture_output=True, text=True)
    ops = set()
    for line in r.stdout.splitlines():
        if line.startswith("nodes:"):
            parts = line.split(":", 2)[2].split()
            ops.update(parts[0::2])
    return ops


def bugs(mosaic):
    r = subprocess.run([mosaic, "gradcheck", "zoo:fmnist-cnn", "--plant", "?"], capture_output=True, text=True)
    known = r.stderr.split("(known: ")[1].rstrip(")\n").split(", ")
    return {b: {"conv": "Conv", "gemm": "Gemm", "maxpool": "MaxPool", "relu": "Relu", "add": "Add",
                "batchnorm": "BatchNormalization", "layernorm": "LayerNormalization", "softmax": "Softmax",
                "gather": "Gather", "lstm": "LSTM", "gru": "GRU"}[b.split("-")[0]] for b in known}


def commit_of(doc):
    """The binary's commit, from the run's provenance ("+dirty" for an uncommitted tree)."""
    try:
        build = doc["provenance"]["build"]
        return build["git_commit"] + ("+dirty" if build.get("git_dirty") else "")
    except (KeyError, TypeError):
        return None


# Threads per gradcheck (--threads; 0: every core). Several corpus processes at once with a
# thread each use the cores fully; several threads each oversubscribe them, and OpenMP's
# spinning barriers then make a run many times slower.
THREADS = 1


def gradcheck(mosaic, model, batch, backend, seed, plant=None):
    """Runs one gradcheck (--backend may list several); returns (exit code, its JSON report or
    None, seconds, the tail of stderr)."""
    cmd = [mosaic, "gradcheck", model, "--batch", str(batch), "--backend", backend, "--seed", str(seed),
           "--threads", str(THREADS), "--json", "/dev/stdout"]
    if plant:
        cmd += ["--plant", plant]
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True)
    doc = None
    start = r.stdout.find("{\n")
    if start >= 0:
        try:
            doc = json.loads(r.stdout[start:])
        except ValueError:
            doc = None
    return r.returncode, doc, round(time.time() - t0, 1), r.stderr.strip()[-300:]


def run(mosaic, model, batch, backend, seed, plant=None):
    code, doc, seconds, err = gradcheck(mosaic, model, batch, backend, seed, plant)
    return row_of(doc, code, seconds, err if code == 2 else "")


def row_of(doc, exit_code, seconds, error=""):
    return {"exit": exit_code, "seconds": seconds,
            "summary": doc["summary"] if doc else None,
            "worst": max((t["worst"]["rel_error"] for t in doc["tensors"] if "worst" in t), default=None) if doc else None,
            "ambiguous": doc.get("ambiguous_decisions") if doc else None,
            "resolved": doc.get("ambiguous_resolved", []) if doc else [],
            "commit": commit_of(doc), "threads": THREADS,
            "error": error}


def run_set(mosaic, model, batch, backends, seed, plant=None):
    """One gradcheck over several backends (--backend a,b,c), which shares the reference's
    evaluations and gives each backend the verdicts of a separate run (with --plant, each
    backend carries the bug); a row per backend, `seconds` being that backend's own check
    (the first pays for the shared evaluations)."""
    code, doc, seconds, err = gradcheck(mosaic, model, batch, ",".join(backends), seed, plant)
    if code == 2 or not doc:
        return [dict(row_of(None, 2, seconds, err), shared=True) for _ in backends]
    rows = []
    for run_doc in doc["runs"]:
        s = run_doc["summary"]
        code = 1 if s["failed"] else 3 if s["inconclusive"] else 0
        rows.append(dict(row_of(run_doc, code, round(run_doc["seconds"], 1)), shared=True,
                         shared_evaluations=run_doc.get("shared_evaluations", 0)))
    return rows


SMALL = {"fmnist-cnn"} | {n for n, *_ in PLAIN}


def load(path):
    return [json.loads(l) for l in open(path)]


def key(r):
    return (r["kind"], r["model"], r["backend"], r["seed"], r.get("bug"))


def key_of_base(r):
    """The correct run a planted run is measured against: same model, backend and seed."""
    return (r["model"], r["backend"], r["seed"])


def verifying_base_points(rows):
    """(model, backend, seed) whose correct run PASSes every tensor. Only there can a planted
    bug be expected to FAIL: where the correct model is INCONCLUSIVE (gradients below the
    error floor, as mobilenet_v2 and googlenet at initialisation), a wrong backward is
    INCONCLUSIVE too, which is a miss but not a false PASS."""
    return {key_of_base(r) for r in rows if r["kind"] == "correct" and r["exit"] == 0}


def table(path):
    rows = load(path)
    print("### Correct models (false alarms)\n")
    print("| model | backend | runs | PASS (all tensors) | INCONCLUSIVE runs | FAIL runs | worst rel err | s/run |")
    print("|---|---|---|---|---|---|---|---|")
    keys = sorted({(r["model"], r["backend"]) for r in rows if r["kind"] == "correct"})
    for m, b in keys:
        rs = [r for r in rows if r["kind"] == "correct" and r["model"] == m and r["backend"] == b]
        ok = sum(r["exit"] == 0 for r in rs)
        inc = sum(r["exit"] == 3 for r in rs)
        bad = sum(r["exit"] == 1 for r in rs)
        err = sum(r["exit"] == 2 for r in rs)
        worst = max((r["worst"] for r in rs if r["worst"] is not None), default=0)
        print("| %s | %s | %d | %d | %d | %d%s | %.1e | %.0f |" % (m, b, len(rs), ok, inc, bad,
              " (%d errors)" % err if err else "", worst, sum(r["seconds"] for r in rs) / len(rs)))
    planted = [r for r in rows if r["kind"] == "planted"]
    verified = verifying_base_points(rows)
    if planted:
        print("\n### Planted bugs (catch rate)\n")
        print("| bug | backend | runs | FAIL (caught) | missed |")
        print("|---|---|---|---|---|")
        for bug, b in sorted({(r["bug"], r["backend"]) for r in planted}):
            rs = [r for r in planted if r["bug"] == bug and r["backend"] == b]
            caught = sum(r["exit"] == 1 for r in rs)
            missed = ", ".join(r["model"] + ("" if key_of_base(r) in verified else " (correct run not verified)")
                               for r in rs if r["exit"] != 1)
            print("| %s | %s | %d | %d | %s |" % (bug, b, len(rs), caught, missed or "-"))


def merge(path, newer):
    """Replaces the rows of `path` that `newer` has again (same kind, model, backend, seed and
    bug: a rerun, e.g. with a newer binary) in place, and appends the rest of `newer`."""
    fresh = {key(r): r for r in load(newer)}
    rows, replaced = [], 0
    for r in load(path):
        if key(r) in fresh:
            r, replaced = fresh.pop(key(r)), replaced + 1
        rows.append(r)
    rows += fresh.values()
    with open(path + ".tmp", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    os.replace(path + ".tmp", path)
    print("%s: %d rows replaced, %d added" % (path, replaced, len(fresh)))


def summary(path, seeds, backends):
    """The totals of docs/gradcheck.md's corpus section, and what is still to run."""
    rows = load(path)
    commits = sorted({(r.get("commit") or "none")[:7] + ("+dirty" if (r.get("commit") or "").endswith("+dirty") else "")
                      for r in rows})
    print("- Binaries (`commit`): %s." % ", ".join(commits))
    for title, names in (("Small models (fmnist-cnn and the plain nets)", SMALL),
                         ("Zoo and torchvision models", {r["model"] for r in rows} - SMALL)):
        rs = [r for r in rows if r["kind"] == "correct" and r["model"] in names]
        tot = lambda k: sum((r["summary"] or {}).get(k, 0) for r in rs)
        print("- %s (%s): %d runs, %d tensor PASS, %d INCONCLUSIVE, %d FAIL (%d FAIL runs, %d errors); "
              "worst error %.1e." % (title, ", ".join(sorted({r["model"] for r in rs})), len(rs), tot("passed"),
                                     tot("inconclusive"), tot("failed"), sum(r["exit"] == 1 for r in rs),
                                     sum(r["exit"] == 2 for r in rs),
                                     max((r["worst"] or 0 for r in rs), default=0)))
    planted = [r for r in rows if r["kind"] == "planted"]
    print("- Planted bugs: %d runs (%d kinds, on %s): %d FAIL, %d INCONCLUSIVE, %d PASS, %d errors." % (
        len(planted), len({r["bug"] for r in planted}), ", ".join(sorted({r["model"] for r in planted})),
        sum(r["exit"] == 1 for r in planted), sum(r["exit"] == 3 for r in planted),
        sum(r["exit"] == 0 for r in planted), sum(r["exit"] == 2 for r in planted)))
    verified = verifying_base_points(rows)
    for title, rs in (("where the correct model PASSes every tensor (same model, backend and seed)",
                       [r for r in planted if key_of_base(r) in verified]),
                      ("where the correct model is not verified there (INCONCLUSIVE, or no correct row)",
                       [r for r in planted if key_of_base(r) not in verified])):
        if rs:
            print("  - %s: %d of %d FAIL (%s)." % (title, sum(r["exit"] == 1 for r in rs), len(rs),
                                                ", ".join(sorted({r["model"] for r in rs}))))
    have = {key(r) for r in rows}
    missing = {}
    for m in sorted({r["model"] for r in rows if r["kind"] == "correct"}):
        for b in backends:
            todo = [s for s in seeds if ("correct", m, b, s, None) not in have]
            if todo:
                missing.setdefault((m, tuple(todo)), []).append(b)
    if missing:
        print("- Still to run: " + "; ".join("%s seeds %s on %s" % (m, ",".join(map(str, s)), "/".join(b))
                                            for (m, s), b in sorted(missing.items())) + ".")
    else:
        print("- Every model, seed and backend of the corpus has its row.")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mosaic")
    ap.add_argument("out")
    ap.add_argument("--seeds", default="1-20")
    ap.add_argument("--backends", default="", help="comma-separated (default: every backend the binary registers)")
    ap.add_argument("--only", default="")
    ap.add_argument("--sequence", default="", metavar="CASES",
                    help="the corpus is instead the sequence models tests/torch/gen_sequence_cases.py exported to CASES")
    ap.add_argument("--kind", default="both", choices=["correct", "planted", "both"])
    ap.add_argument("--table", action="store_true")
    ap.add_argument("--results", default="")
    ap.add_argument("--summary", action="store_true", help="print the totals and what is still to run")
    ap.add_argument("--merge", default="", metavar="FILE",
                    help="replace the rows of --results that FILE reruns, append its other rows")
    ap.add_argument("--threads", type=int, default=1,
                    help="threads per gradcheck (default 1: run one corpus process per core; 0: every core)")
    ap.add_argument("--no-shared", dest="shared", action="store_false",
                    help="one gradcheck per backend instead of one per seed over every pending backend")
    a = ap.parse_args()
    global THREADS
    THREADS = a.threads
    path = a.results or os.path.join(a.out, "results.jsonl")
    if a.table:
        table(path)
        return
    if a.merge:
        merge(path, a.merge)
        return
    lo, _, hi = a.seeds.partition("-")
    seeds = list(range(int(lo), int(hi or lo) + 1))
    backends = a.backends.split(",") if a.backends else subprocess.run(
        [a.mosaic, "backends", "--names", "--available"], capture_output=True, text=True, check=True).stdout.split()
    if a.summary:
        summary(path, seeds, backends)
        return
    only = set(a.only.split(",")) if a.only else None
    done = {key(r) for r in load(path)} if os.path.exists(path) else set()
    corpus = [m for m in (sequence_models(a.sequence) if a.sequence else models(a.out)) if not only or m[0] in only]
    planted = bugs(a.mosaic)
    with open(path, "a") as f:
        def record(r, kind, name, backend, seed, bug):
            r.update({"kind": kind, "model": name, "backend": backend, "seed": seed, "bug": bug})
            f.write(json.dumps(r) + "\n")
            f.flush()
            done.add(key(r))
            print("%-8s %-16s %-7s seed %-2d %-28s exit %d  %s  %.0fs" % (
                kind, name, backend, seed, bug or "", r["exit"], r["summary"], r["seconds"]), flush=True)

        for name, model, batch in corpus:
            ops = ops_of(a.mosaic, model, batch)
            jobs = []
            if a.kind in ("correct", "both"):
                jobs += [("correct", s, None) for s in seeds]
            if a.kind in ("planted", "both"):
                jobs += [("planted", 1, bug) for bug, op in planted.items() if op in ops]
            # Every pending backend of a job in one gradcheck (shared reference; a planted
            # bug is carried by each backend), then what is left one backend at a time.
            for kind, seed, bug in jobs:
                pending = [b for b in backends if (kind, name, b, seed, bug) not in done]
                if a.shared and len(pending) >= 2:
                    for backend, r in zip(pending, run_set(a.mosaic, model, batch, pending, seed, bug)):
                        record(r, kind, name, backend, seed, bug)
            for backend in backends:
                for kind, seed, bug in jobs:
                    if (kind, name, backend, seed, bug) not in done:
                        record(run(a.mosaic, model, batch, backend, seed, bug), kind, name, backend, seed, bug)

if __name__ == "__main__":
    main()
