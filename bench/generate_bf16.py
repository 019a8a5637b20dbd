#!/usr/bin/env python3
"""`mosaic generate` in float32 and in bf16 side by side: the decode speed-up of bfloat16
weights and what it costs in tokens (issue 53, item 5: bf16 weights for the memory-bound
decode; the mission's "accuracy cost beside the speed").

Per model and batch, --rounds rounds, each a fresh process per precision, the two alternating
(their order swapped every round); the same seeded prompt and greedy decoding, so that the two
precisions' tokens can be compared position by position. Not sampling: on random weights the
logits are small and the distribution nearly uniform over tens of thousands of ids, so a draw
from it moves with any perturbation of the logits (in a first try at temperature 1 the very first
token differed in every row). The table gives the median TPOT of
each precision, their ratio, the weight bytes a decode step reads, and the agreement of the
tokens: the share of rows whose --new tokens are all the float32 run's, and the mean
position of the first token that differs (a changed token changes every later one's context, so
the positions after it are not counted as errors of their own). Random weights (the zoo's
decoders): a trained model's logits are more peaked, and its agreement is its own to measure.

usage: bench/generate_bf16.py [--mosaic build/mosaic] [--models gpt2-small-kv,llama-1b]
         [--batches 1,8] [--prompt 16] [--new 64] [--rounds 3] [--threads 2] [--temperature 0] [--json FILE]
         [--update-docs docs/generation.md]
"""
import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from bench_docs import cpu_description, mosaic_json, replace_table, write_json  # noqa: E402


def generation(args, model, batch, precision):
    doc = mosaic_json(args.mosaic, ["generate", f"zoo:{model}", "--backend", "onednn", "--batch", str(batch),
                                    "--prompt-tokens", str(args.prompt), "--new-tokens", str(args.new), "--runs",
                                    str(args.runs), "--threads", str(args.threads), "--precision", precision,
                                    "--temperature", str(args.temperature), "--seed", "5", "--no-db"], "generate_bf16")
    return {"tpot_ms": doc["summary"]["tpot_ms"], "ttft_ms": doc["summary"]["ttft_ms"],
            "step_weight_bytes": (doc.get("bandwidth") or {}).get("step_weight_bytes"),
            "share": (doc.get("bandwidth") or {}).get("share"), "generated": doc["generated"]}


def agreement(ref, got):
    """Rows whose tokens all agree, and the mean first position (1-based) that differs, rows
    that agree throughout counted at len + 1."""
    same, firsts = 0, []
    for a, b in zip(ref, got):
        first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
        same += first is None
        firsts.append(len(a) + 1 if first is None else first + 1)
    return same / len(ref), statistics.mean(firsts)


def markdown(doc):
    lines = [f"{doc['cpu']}, {doc['threads']} threads, {doc['date']}; onednn, prompt {doc['prompt']}, {doc['new']} "
             f"new tokens, {'greedy' if doc['temperature'] == 0 else 'sampled at temperature %g (seed 5)' % doc['temperature']}, random weights; medians of {doc['rounds']} alternating rounds x {doc['runs']} runs "
             f"(`bench/generate_bf16.py`).", "",
             "| model | batch | f32 TPOT ms | bf16 TPOT ms | bf16 speed-up | weight MB a step, f32 / bf16 | "
             "bf16 share of read bandwidth | rows with every token the f32 run's | mean first differing token |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in doc["rows"]:
        f, b = r["f32"], r["bf16"]
        mb = (f"{f['step_weight_bytes'] / 1e6:.0f} / {b['step_weight_bytes'] / 1e6:.0f}"
              if f["step_weight_bytes"] and b["step_weight_bytes"] else "-")
        share = f"{b['share'] * 100:.0f}%" if b.get("share") else "-"
        lines.append(f"| {r['model']} | {r['batch']} | {f['tpot_ms']:.1f} | {b['tpot_ms']:.1f} | "
                     f"**{f['tpot_ms'] / b['tpot_ms']:.2f}x** | {mb} | {share} | {r['rows_equal'] * 100:.0f}% | "
                     f"{r['first_difference']:.1f} of {doc['new']} |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mosaic", default=os.path.join(ROOT, "build", "mosaic"))
    ap.add_argument("--models", default="gpt2-small-kv,llama-1b")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--temperature", type=float, default=0.0, help="0: greedy (the default; module doc)")
    ap.add_argument("--json", default="")
    ap.add_argument("--update-docs", default="")
    args = ap.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    if args.new < 2 or args.prompt < 1 or args.runs < 1 or args.rounds < 1 or args.threads < 1 or min(batches) < 1:
        sys.exit("generate_bf16: --new must be at least 2; --prompt, --runs, --rounds, --threads and batches positive")
    rows = []
    for model in args.models.split(","):
        for batch in batches:
            got = {"f32": [], "bf16": []}
            for rnd in range(args.rounds):
                for p in (["f32", "bf16"] if rnd % 2 == 0 else ["bf16", "f32"]):
                    got[p].append(generation(args, model, batch, p))
                    print(f"round {rnd + 1}: {model} batch {batch} {p}: TPOT {got[p][-1]['tpot_ms']:.1f} ms",
                          file=sys.stderr, flush=True)
            row = {"model": model, "batch": batch}
            for p in got:
                row[p] = {"tpot_ms": statistics.median(g["tpot_ms"] for g in got[p]),
                          "ttft_ms": statistics.median(g["ttft_ms"] for g in got[p]),
                          "step_weight_bytes": got[p][0]["step_weight_bytes"],
                          "share": statistics.median(g["share"] for g in got[p]) if got[p][0]["share"] else None,
                          "rounds_tpot_ms": [g["tpot_ms"] for g in got[p]]}
            # Seeded decoding repeats itself run to run: one run's tokens per precision.
            row["rows_equal"], row["first_difference"] = agreement(got["f32"][0]["generated"], got["bf16"][0]["generated"])
            rows.append(row)
    doc = {"schema": "mosaic.generate_bf16/1", "cpu": cpu_description(), "threads": args.threads,
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "prompt": args.prompt, "new": args.new,
           "temperature": args.temperature, "runs": args.runs, "rounds": args.rounds, "rows": rows}
    table = markdown(doc)
    print(table)
    if args.json:
        write_json(args.json, doc)
    if args.update_docs:
        replace_table(args.update_docs, "generate-bf16", table, "generate_bf16")


if __name__ == "__main__":
    main()
