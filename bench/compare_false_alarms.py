#!/usr/bin/python3
"""Measures `mosaic compare`: its false-alarm rate on A/A pairs and its power on known slowdowns.

Every pair is two fresh `mosaic bench` processes, A then B, compared with `mosaic compare A B`
at the default alpha and threshold (docs/metrics.md#comparing-runs).
  aa       A and B identical: any "SLOWER" or "faster" verdict is a false alarm; the gate's
           false-alarm rate is the share of pairs that exit 1 (some backend SLOWER).
  threads  A --threads 2, B --threads 1: a real slowdown where the second core helps.
  batch    A --batch B0, B --batch B0*9/8: 12.5% more work per iteration (a small slowdown).
Results go one JSON line per pair to --results; --table prints the Markdown table of
docs/metrics.md from them.

With --generate every run is `mosaic generate MODEL --backend onednn` (--new-tokens, --runs; the
kinds aa and threads: compare refuses generations of different batches), and the configurations
compared are the decode step and the first token (docs/generation.md#comparing-generations-and-the-report).

With --processes K every run is `bench --processes K` or `generate --processes K` (K >= 3:
compare's process-level test).

usage: compare_false_alarms.py MOSAIC OUTDIR [--pairs 30] [--models zoo:fmnist-cnn,zoo:alexnet-cifar]
                               [--kinds aa,threads,batch] [--processes K] [--results FILE] [--table]
                               [--generate [--new-tokens 32] [--runs 3]]
"""
import argparse
import json
import os
import subprocess
import time


def bench(mosaic, out, model, batch, threads, iterations, path, processes):
    cmd = [mosaic, "bench", model, "--backends", "im2col,onednn", "--batch", str(batch), "--iterations", str(iterations),
           "--no-check", "--no-db", "--json", path]
    if processes > 1:
        cmd += ["--processes", str(processes)]
    if threads:
        cmd += ["--threads", str(threads)]
    r = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, MOSAIC_PROGRESS="0"))
    if r.returncode != 0:
        raise SystemExit("bench failed: %s\n%s" % (" ".join(cmd), r.stderr))


def generate(mosaic, model, threads, new_tokens, runs, path, processes):
    cmd = [mosaic, "generate", model, "--backend", "onednn", "--prompt-tokens", "16", "--new-tokens", str(new_tokens),
           "--runs", str(runs), "--no-db", "--json", path]
    if processes > 1:
        cmd += ["--processes", str(processes)]
    if threads:
        cmd += ["--threads", str(threads)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit("generate failed: %s\n%s" % (" ".join(cmd), r.stderr))


def compare(mosaic, a, b, path):
    r = subprocess.run([mosaic, "compare", a, b, "--json", path], capture_output=True, text=True)
    if r.returncode not in (0, 1):
        raise SystemExit("compare failed:\n" + r.stderr)
    doc = json.load(open(path))
    key = "time_ms" if doc.get("kind") == "generate" else "iteration_ms"
    return r.returncode, {c["label"]: (c[key]["verdict"], c[key]["change"]) for c in doc["configs"]}


def table(path):
    rows = [json.loads(l) for l in open(path)]
    print("| model | processes per run | A vs B | pairs | gate exits 1 (any configuration SLOWER) | per configuration: SLOWER / faster / within threshold / no difference | median \\|change\\| |")
    print("|---|---|---|---|---|---|---|")
    groups = sorted({(r["model"], r.get("processes", 1)) for r in rows})
    label = lambda model: model + (" (generate)" if any(r.get("generate") for r in rows if r["model"] == model) else "")
    for kind in ["aa", "threads", "batch"]:
        for model, procs in groups:
            rs = [r for r in rows if r["kind"] == kind and r["model"] == model and r.get("processes", 1) == procs]
            if not rs:
                continue
            gate = sum(r["exit"] == 1 for r in rs)
            verdicts = [v for r in rs for v, _ in r["configs"].values()]
            changes = sorted(abs(c) for r in rs for _, c in r["configs"].values())
            count = lambda name: sum(v == name for v in verdicts)
            what = {"aa": "same command (A/A)", "threads": "--threads 2 vs 1", "batch": "batch 16 vs 18"}[kind]
            print("| %s | %d | %s | %d | %d (%.0f%%) | %d / %d / %d / %d of %d | %.1f%% |" % (
                label(model), procs, what, len(rs), gate, 100.0 * gate / len(rs), count("SLOWER"), count("faster"),
                count("within threshold"), count("no detectable difference"), len(verdicts),
                100 * changes[len(changes) // 2] if changes else 0))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mosaic")
    ap.add_argument("out")
    ap.add_argument("--pairs", type=int, default=30)
    ap.add_argument("--models", default="zoo:fmnist-cnn,zoo:alexnet-cifar")
    ap.add_argument("--kinds", default="aa,threads,batch")
    ap.add_argument("--iterations", type=int, default=60)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--processes", type=int, default=1, help="bench --processes K for every run (K >= 3: process-level test)")
    ap.add_argument("--results", default="")
    ap.add_argument("--table", action="store_true")
    ap.add_argument("--generate", action="store_true", help="pairs of generate runs (decode step, first token)")
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    path = a.results or os.path.join(a.out, "compare_pairs.jsonl")
    if a.table:
        table(path)
        return
    os.makedirs(a.out, exist_ok=True)
    pa, pb, pc = (os.path.join(a.out, n) for n in ("a.json", "b.json", "cmp.json"))
    with open(path, "a") as f:
        for model in a.models.split(","):
            for kind in a.kinds.split(","):
                for i in range(a.pairs):
                    t0 = time.time()
                    if a.generate:
                        if kind not in ("aa", "threads"):
                            raise SystemExit("--generate takes the kinds aa and threads")
                        threads = (2, 1) if kind == "threads" else (0, 0)
                        generate(a.mosaic, model, threads[0], a.new_tokens, a.runs, pa, a.processes)
                        generate(a.mosaic, model, threads[1], a.new_tokens, a.runs, pb, a.processes)
                    elif kind == "aa":
                        bench(a.mosaic, a.out, model, a.batch, 0, a.iterations, pa, a.processes)
                        bench(a.mosaic, a.out, model, a.batch, 0, a.iterations, pb, a.processes)
                    elif kind == "threads":
                        bench(a.mosaic, a.out, model, a.batch, 2, a.iterations, pa, a.processes)
                        bench(a.mosaic, a.out, model, a.batch, 1, a.iterations, pb, a.processes)
                    else:
                        bench(a.mosaic, a.out, model, a.batch, 0, a.iterations, pa, a.processes)
                        bench(a.mosaic, a.out, model, a.batch * 9 // 8, 0, a.iterations, pb, a.processes)
                    code, configs = compare(a.mosaic, pa, pb, pc)
                    row = {"kind": kind, "model": model, "processes": a.processes, "pair": i, "exit": code, "configs": configs,
                           "seconds": round(time.time() - t0, 1)}
                    if a.generate:
                        row["generate"] = {"new_tokens": a.new_tokens, "runs": a.runs}
                    f.write(json.dumps(row) + "\n")
                    f.flush()
                    print(kind, model, i, code, configs, flush=True)


if __name__ == "__main__":
    main()
