#!/usr/bin/python3
"""Greedy continuations of a tiny GPT: `mosaic generate` on every backend vs PyTorch 1.13.

Builds a small pre-norm causal decoder (token and position embeddings, causal self-attention,
a tanh-GELU MLP, LayerNorm, an LM head) with seeded random weights, and exports it twice with
PyTorch's ONNX exporter:

- `dynamic.onnx`: the sequence axis symbolic, so Mosaic plans lengths 16, 32, ... and the
  prompt plus the new tokens (buckets, each checked for causality before it is used);
- `fixed.onnx`: 48 positions, so every step is padded to them;
- `cached.onnx`: the same weights with Hugging Face's KV-cache interface (attention mask over
  past and new positions, position ids, past_key_values.N.key/value -> present.N.key/value), so
  Mosaic runs the prompt once and then one token at a time, the past padded and masked.

PyTorch's own greedy loop (argmax of the last position's logits, appended, repeated) gives 24
reference tokens (the symbolic export then plans 16 and 29 positions). `mosaic generate --prompt-ids ... --new-tokens N --json` must give the same
ids, token for token, for the three exports on every backend. A variant without the causal mask
must be refused ("not causal"), and a cache model that ignores its attention mask too (on the
first two backends: the check is the same code whatever computes the logits).

usage: generate_agreement.py MOSAIC [--backends A,B] [--new-tokens 40]
exit 0 when every backend agrees; 1 otherwise; 77 if torch is missing.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

VOCAB, HIDDEN, HEADS, LAYERS, POSITIONS, FIXED = 96, 32, 4, 2, 64, 48
PROMPT = [5, 17, 42, 8, 77, 3]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mosaic")
    ap.add_argument("--backends", default="")
    ap.add_argument("--new-tokens", type=int, default=24)
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("python3-torch not installed: skipping")
        return 77
    backends = args.backends.split(",") if args.backends else subprocess.run(
        [args.mosaic, "backends", "--names", "--available"], capture_output=True, text=True, check=True).stdout.split()

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import gpt_models
    Gpt, CachedGpt, export_cached = gpt_models.make(VOCAB, HIDDEN, HEADS, LAYERS, POSITIONS)

    torch.manual_seed(0)
    torch.set_num_threads(2)
    model = Gpt().eval()
    with torch.no_grad():  # weights large enough that the greedy continuation does not repeat one token
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.3)
    tmp = tempfile.mkdtemp(prefix="mosaic_generate_")
    dynamic, fixed = os.path.join(tmp, "dynamic.onnx"), os.path.join(tmp, "fixed.onnx")
    example = torch.tensor([PROMPT], dtype=torch.long)
    torch.onnx.export(model, example, dynamic, opset_version=17, input_names=["input_ids"], output_names=["logits"],
                      dynamic_axes={"input_ids": {0: "batch", 1: "sequence"}, "logits": {0: "batch", 1: "sequence"}})
    torch.onnx.export(model, torch.zeros(1, FIXED, dtype=torch.long), fixed, opset_version=17,
                      input_names=["input_ids"], output_names=["logits"])
    bidirectional = Gpt(causal=False).eval()
    bidirectional.load_state_dict(model.state_dict())
    not_causal = os.path.join(tmp, "not_causal.onnx")
    torch.onnx.export(bidirectional, torch.zeros(1, FIXED, dtype=torch.long), not_causal, opset_version=17,
                      input_names=["input_ids"], output_names=["logits"])

    cached_model = CachedGpt().eval()
    cached_model.load_state_dict(model.state_dict())
    cached = os.path.join(tmp, "cached.onnx")
    export_cached(cached_model, cached)
    maskless = CachedGpt(use_mask=False).eval()
    maskless.load_state_dict(model.state_dict())
    ignores_mask = os.path.join(tmp, "ignores_mask.onnx")
    export_cached(maskless, ignores_mask)

    ref = list(PROMPT)
    with torch.no_grad():
        for _ in range(args.new_tokens):
            ref.append(int(model(torch.tensor([ref]))[0, -1].argmax()))
    ref = ref[len(PROMPT):]
    print("PyTorch: %s" % " ".join(map(str, ref)))
    if len(set(ref)) < 4:  # a continuation that repeats one token would hide most bugs
        print("the reference repeats itself: the weights make a weak test")
        return 1

    ok = True
    ids = ",".join(map(str, PROMPT))
    for backend in backends:
        for name, path in (("dynamic", dynamic), ("fixed", fixed), ("cached", cached)):
            out = os.path.join(tmp, "%s_%s.json" % (backend, name))
            cmd = [args.mosaic, "generate", path, "--backend", backend, "--prompt-ids", ids, "--new-tokens",
                   str(args.new_tokens), "--runs", "2", "--threads", "2", "--no-peaks", "--json", out]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                print("%s %s: mosaic generate failed (%d): %s" % (backend, name, r.returncode, (r.stderr or r.stdout).strip()))
                ok = False
                continue
            doc = json.load(open(out))
            got = doc["generated"][0]
            if any("not deterministic" in n for n in doc["notes"]):  # a timed run generated other tokens
                print("%s %s: the timed runs differ from the warm-up: %s" % (backend, name, doc["notes"]))
                ok = False
            lengths = [(l["length"], l["past"]) if l["past"] else l["length"] for l in doc["lengths"]]
            same = got == ref
            first = next((i for i, (a, b) in enumerate(zip(got, ref)) if a != b), None)
            ok = ok and same
            print("%-7s %-7s %s: %d tokens, planned lengths %s%s" % (
                backend, name, "agrees" if same else "DIFFERS", len(got), lengths,
                "" if same else " (first difference at token %s: %s)" % (first, " ".join(map(str, got)))))
        if backend not in backends[:2]:  # the refusals: the check is the same code whatever computes the logits
            continue
        r = subprocess.run([args.mosaic, "generate", not_causal, "--backend", backend, "--prompt-ids", ids,
                            "--new-tokens", "4", "--runs", "1"], capture_output=True, text=True)
        refused = r.returncode != 0 and "not causal" in (r.stdout + r.stderr)
        ok = ok and refused
        print("%-7s without the causal mask: %s" % (backend, "refused" if refused else "NOT REFUSED: " + (r.stdout + r.stderr)[-300:]))
        r = subprocess.run([args.mosaic, "generate", ignores_mask, "--backend", backend, "--prompt-ids", ids,
                            "--new-tokens", "4", "--runs", "1"], capture_output=True, text=True)
        text = r.stdout + r.stderr
        refused = r.returncode != 0 and "does not obey its attention mask" in text
        ok = ok and refused
        print("%-7s a cache model that ignores its mask: %s" % (backend, "refused" if refused else "NOT REFUSED: " + text[-300:]))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
