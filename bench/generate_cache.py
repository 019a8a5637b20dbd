#!/usr/bin/python3
"""Decoding with a KV cache against recomputing, on the same weights, side by side (issue 53).

Exports a GPT-2-small-shaped decoder (12 layers, hidden 768, 12 heads, 50,257 ids, 1,024
positions; seeded random weights) with PyTorch 1.13 in the two forms `mosaic generate` runs
(tests/torch/gpt_models.py): the whole sequence in (recomputed each token, its length planned
in buckets), and Hugging Face's cache interface. Then, per backend, one `mosaic generate` of
each form from the same prompt, alternating, --rounds times: TTFT, TPOT and decode tokens/s,
the tokens of both forms (they must be equal), and the cached form's share of time spent
copying the cache.

The last column relates the cached decode to the memory system: a decode step at batch 1 reads
every weight once, but for the embedding tables, of which it gathers a row (the other
parameters' float32 bytes), so bytes / TPOT is a lower bound on the bandwidth it achieved,
beside the triad bandwidth `mosaic bench` measured for this machine (its peaks cache).

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


def peaks_bandwidth(mosaic, threads):
    """The triad bandwidth of this machine at `threads`, from `mosaic bench`'s peaks (measured once, cached)."""
    doc = bench_docs.mosaic_json(mosaic, ["bench", "zoo:fmnist-cnn", "--backends", "naive", "--batch", "1",
                                          "--iterations", "1", "--warmup", "0", "--threads", str(threads), "--no-db"],
                                 "generate_cache")
    return doc.get("peaks", {}).get("bandwidth_gbs", 0.0)


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
    bandwidth = peaks_bandwidth(args.mosaic, args.threads)
    rows, doc = [], {"machine": bench_docs.cpu_description(), "threads": args.threads, "prompt": args.prompt,
                     "new_tokens": args.new, "parameters": params, "streamed_parameters": streamed,
                     "triad_bandwidth_gbs": bandwidth,
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
        weights_gbs = streamed * 4 / (med["kv-cache"]["tpot_ms"] / 1e3) / 1e9
        entry = {f: med[f] for f in med}
        entry.update({"speedup_decode": med["kv-cache"]["decode_tokens_per_s"] / med["recompute"]["decode_tokens_per_s"],
                      "same_tokens": tokens["recompute"] == tokens["kv-cache"], "cache_copy_share": copy,
                      "weights_read_gbs": weights_gbs})
        doc["backends"][backend] = entry
        rows.append("| %s | %.0f | %.0f | %.1f | %.0f | %.1f | %.2fx | %s | %.1f%% | %.1f GB/s (%.0f%%) |" % (
            backend, med["recompute"]["ttft_ms"], med["recompute"]["tpot_ms"], med["recompute"]["decode_tokens_per_s"],
            med["kv-cache"]["tpot_ms"], med["kv-cache"]["decode_tokens_per_s"], entry["speedup_decode"],
            "yes" if entry["same_tokens"] else "NO", 100 * copy, weights_gbs,
            100 * weights_gbs / bandwidth if bandwidth else 0))
    write_json(args.json, doc)
    table = ("%s, %d threads, %s; GPT-2-small shape (%s parameters, random weights), prompt %d, %d new tokens, "
             "greedy; medians of %d alternating rounds (`bench/generate_cache.py`). \"Weights read\" counts the %s "
             "parameters a decode step streams (all but the embedding tables).\n\n"
             "| backend | recompute TTFT ms | recompute TPOT ms | recompute decode tok/s | cached TPOT ms | cached decode tok/s "
             "| cached / recompute | same tokens | cache copies | weights read per token (of triad %.1f GB/s) |\n"
             "|---|---|---|---|---|---|---|---|---|---|\n" % (
                 doc["machine"], args.threads, doc["when"], format(params, ","), args.prompt, args.new, args.rounds,
                 format(streamed, ","), bandwidth) + "\n".join(rows) + "\n")
    print(table)
    if args.update_docs:
        replace_table(args.update_docs, "generate-cache", table, "generate_cache")


if __name__ == "__main__":
    main()
