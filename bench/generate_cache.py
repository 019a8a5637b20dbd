#!/usr/bin/python3
"""Decoding with a KV cache against recomputing, on the same weights, side by side (issue 53).

Exports a GPT-2-small-shaped decoder (12 layers, hidden 768, 12 heads, 50,257 ids, 1,024
positions; seeded random weights) with PyTorch 1.13 in the two forms `mosaic generate` runs
(tests/torch/gpt_models.py): the whole sequence in (recomputed each token, its length planned
in buckets), and Hugging Face's cache interface. Then, per backend, one `mosaic generate` of
each form from the same prompt, alternating, --rounds times: TTFT, TPOT and decode tokens/s,
the tokens of both forms (they must be equal), and the cached form's share of time spent
copying the cache.

The last column relates the cached decode to the memory system, as `mosaic generate` reports it
(its "bandwidth" section): a decode step at batch 1 reads every weight once, but for the
embedding tables, of which it gathers a row, and the cache's past; those bytes over TPOT are a
lower bound on the bandwidth it achieved, beside the machine's read bandwidth (peaks cache).

usage: bench/generate_cache.py [--mosaic build/mosaic] [--backends onednn,im2col] [--prompt 64]
         [--new 48] [--threads 2] [--rounds 2] [--json docs/perf_generate.json]
         [--update-docs docs/generation.md]
"""
import argparse
import importlib.util
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "torch"))
import bench_docs  # noqa: E402
from bench_docs import replace_table, write_json  # noqa: E402

CONFIG = dict(VOCAB=50257, HIDDEN=768, HEADS=12, LAYERS=12, POSITIONS=1024)


def export(work):
    import torch
    import gpt_models
    Gpt, CachedGpt, export_cached = gpt_models.make(**CONFIG)
    torch.manual_seed(0)
    model = Gpt().eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.02)
    whole, cached = os.path.join(work, "whole.onnx"), os.path.join(work, "cached.onnx")
    torch.onnx.export(model, torch.tensor([[1, 2, 3]]), whole, opset_version=17, input_names=["input_ids"],
                      output_names=["logits"], dynamic_axes={"input_ids": {0: "batch", 1: "sequence"},
                                                             "logits": {0: "batch", 1: "sequence"}})
    c = CachedGpt().eval()
    c.load_state_dict(model.state_dict())
    export_cached(c, cached)
    params = sum(p.numel() for p in model.parameters())
    # What a decode step streams: every weight but the two embedding tables, of which it
    # gathers one row each.
    streamed = sum(p.numel() for n, p in model.named_parameters() if n not in ("tok.weight", "pos.weight"))
    return whole, cached, params, streamed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mosaic", default=os.path.join(ROOT, "build", "mosaic"))
    ap.add_argument("--backends", default="onednn,im2col")
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--new", type=int, default=48)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", default=os.path.join(ROOT, "docs", "perf_generate.json"))
    ap.add_argument("--update-docs", default=os.path.join(ROOT, "docs", "generation.md"))
    args = ap.parse_args()
    if importlib.util.find_spec("torch") is None:
        sys.exit("generate_cache: needs python3-torch (PyTorch 1.13 from Debian) for the exports")
    work = tempfile.mkdtemp(prefix="mosaic_generate_cache_")
    whole, cached, params, streamed = export(work)
    rows, doc = [], {"machine": bench_docs.cpu_description(), "threads": args.threads, "prompt": args.prompt,
                     "new_tokens": args.new, "parameters": params, "streamed_parameters": streamed,
                     "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "backends": {}}
    for backend in args.backends.split(","):
        got = {"recompute": [], "kv-cache": []}
        tokens = {}
        for _ in range(args.rounds):  # alternating, so both forms see the same machine
            for form, path in (("recompute", whole), ("kv-cache", cached)):
                r = bench_docs.mosaic_json(args.mosaic, ["generate", path, "--backend", backend, "--prompt-tokens",
                                                         str(args.prompt), "--new-tokens", str(args.new), "--runs", "2",
                                                         "--threads", str(args.threads)], "generate_cache")
                got[form].append(r)
                tokens[form] = r["generated"]
        med = {f: {k: statistics.median(r["summary"][k] for r in got[f])
                   for k in ("ttft_ms", "tpot_ms", "decode_tokens_per_s")} for f in got}
        copy = statistics.median(r["cache"]["copy_share"] for r in got["kv-cache"])
        step_gbs = statistics.median(r["bandwidth"]["step_gbs"] for r in got["kv-cache"])
        read_gbs = statistics.median(r["bandwidth"]["read_bandwidth_gbs"] for r in got["kv-cache"])
        share = statistics.median(r["bandwidth"]["share"] for r in got["kv-cache"])
        entry = {f: med[f] for f in med}
        entry.update({"speedup_decode": med["kv-cache"]["decode_tokens_per_s"] / med["recompute"]["decode_tokens_per_s"],
                      "same_tokens": tokens["recompute"] == tokens["kv-cache"], "cache_copy_share": copy,
                      "step_read_gbs": step_gbs, "read_bandwidth_gbs": read_gbs, "bandwidth_share": share})
        doc["backends"][backend] = entry
        rows.append("| %s | %.0f | %.0f | %.1f | %.0f | %.1f | %.2fx | %s | %.1f%% | %.1f GB/s: %.0f%% of %.1f |" % (
            backend, med["recompute"]["ttft_ms"], med["recompute"]["tpot_ms"], med["recompute"]["decode_tokens_per_s"],
            med["kv-cache"]["tpot_ms"], med["kv-cache"]["decode_tokens_per_s"], entry["speedup_decode"],
            "yes" if entry["same_tokens"] else "NO", 100 * copy, step_gbs, 100 * share, read_gbs))
    write_json(args.json, doc)
    table = ("%s, %d threads, %s; GPT-2-small shape (%s parameters, random weights), prompt %d, %d new tokens, "
             "greedy; medians of %d alternating rounds (`bench/generate_cache.py`). A decode step reads %s of the "
             "parameters whole (all but the embedding tables, of which it gathers a row) and the cache's past: "
             "the last column is those bytes over TPOT, and their share of the machine's read bandwidth "
             "(`mosaic generate`'s \"bandwidth\").\n\n"
             "| backend | recompute TTFT ms | recompute TPOT ms | recompute decode tok/s | cached TPOT ms | cached decode tok/s "
             "| cached / recompute | same tokens | cache copies | a cached step reads (of the read bandwidth, GB/s) |\n"
             "|---|---|---|---|---|---|---|---|---|---|\n" % (
                 doc["machine"], args.threads, doc["when"], format(params, ","), args.prompt, args.new, args.rounds,
                 format(streamed, ",")) + "\n".join(rows) + "\n")
    print(table)
    if args.update_docs:
        replace_table(args.update_docs, "generate-cache", table, "generate_cache")


if __name__ == "__main__":
    main()
