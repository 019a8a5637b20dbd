#!/usr/bin/env python3
"""Two Mosaic builds side by side on one `mosaic bench` (or `generate`) command: A and B alternate, round by round.

For a change no flag switches off (a graph rewrite, a kernel), the honest comparison is the
build before it against the build after it on the same command, interleaved so that the
machine's drift falls on both: each round runs A and B once each (the order alternating), every
run a fresh process writing --json; the table gives per configuration the median over rounds of
each build's median iteration and the ratio A/B of the medians (above 1: B is faster).

usage: bench/ab_binaries.py --a /tmp/mosaic-before --b build/mosaic [--rounds 5] [--json out.json]
                            -- bench zoo:resnet50 --backends onednn --batch 8 --iterations 20 --no-check
       (or -- generate zoo:llama-1b --backend onednn --batch 8 --new-tokens 16 --runs 2)
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def run_once(binary, args):
    """{configuration label: median ms} of one `binary bench ... --json` run; of a `generate`
    run, its time per output token and time to first token (medians over its timed runs)."""
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        cmd = [binary] + args + ["--no-db", "--json", f.name]
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           env=dict(os.environ, MOSAIC_PROGRESS="0", MOSAIC_DB="off"))
        if r.returncode:
            sys.exit(f"ab_binaries: {' '.join(cmd)} failed (exit {r.returncode}):\n{r.stdout[-2000:]}")
        doc = json.load(open(f.name))
        if doc.get("schema") == "mosaic.generate/1":
            return {"TPOT (decode step)": doc["summary"]["tpot_ms"], "TTFT (first token)": doc["summary"]["ttft_ms"]}
        return {run["label"]: run["summary"]["median_ms"] for run in doc["runs"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--a", required=True, help="the build before (a mosaic executable)")
    ap.add_argument("--b", required=True, help="the build after")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", default="")
    ap.add_argument("args", nargs=argparse.REMAINDER, help="-- then the mosaic command (bench ...)")
    o = ap.parse_args()
    args = o.args[1:] if o.args[:1] == ["--"] else o.args
    if not args or args[0] not in ("bench", "generate"):
        sys.exit("ab_binaries: give the mosaic command after --, starting with bench or generate")
    if o.rounds < 1:
        sys.exit("ab_binaries: --rounds must be positive")
    for b in (o.a, o.b):
        if not os.access(b, os.X_OK):
            sys.exit(f"ab_binaries: {b} is not an executable")
    samples = {"a": [], "b": []}
    for rnd in range(o.rounds):
        for side in (("a", "b") if rnd % 2 == 0 else ("b", "a")):
            samples[side].append(run_once(getattr(o, side), args))
            print(f"round {rnd + 1}/{o.rounds}: {side} {samples[side][-1]}", file=sys.stderr, flush=True)
    rows = []
    for label in samples["a"][0]:
        a = statistics.median(s[label] for s in samples["a"])
        b = statistics.median(s[label] for s in samples["b"] if label in s)
        rows.append({"label": label, "a_median_ms": a, "b_median_ms": b, "a_over_b": a / b,
                     "a_ms": [s[label] for s in samples["a"]], "b_ms": [s.get(label) for s in samples["b"]]})
    print(f"mosaic {' '.join(args)}; {o.rounds} rounds, A and B alternating; median ms over rounds\n")
    print("| configuration | A ms | B ms | A / B |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {r['label']} | {r['a_median_ms']:.2f} | {r['b_median_ms']:.2f} | {r['a_over_b']:.3f}x |")
    if o.json:
        with open(o.json, "w") as f:
            json.dump({"a": o.a, "b": o.b, "command": args, "rounds": o.rounds, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
