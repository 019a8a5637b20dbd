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

PyTorch's own greedy loop (argmax of the last position's logits, appended, repeated) gives the
reference tokens. `mosaic generate --prompt-ids ... --new-tokens N --json` must give the same
ids, token for token, for the three exports on every backend. A variant without the causal mask
must be refused ("not causal"), and a cache model that ignores its attention mask too.

usage: generate_agreement.py MOSAIC [--backends A,B] [--new-tokens 40]
exit 0 when every backend agrees; 1 otherwise; 77 if torch is missing.
"""
import argparse
import json
import math
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
    ap.add_argument("--new-tokens", type=int, default=40)
    args = ap.parse_args()
    try:
        import torch
        import torch.nn as nn
    except ImportError:
        print("python3-torch not installed: skipping")
        return 77
    backends = args.backends.split(",") if args.backends else subprocess.run(
        [args.mosaic, "backends", "--names", "--available"], capture_output=True, text=True, check=True).stdout.split()

    class Block(nn.Module):
        def __init__(self, causal):
            super().__init__()
            self.causal = causal
            self.ln1, self.ln2 = nn.LayerNorm(HIDDEN), nn.LayerNorm(HIDDEN)
            self.qkv, self.proj = nn.Linear(HIDDEN, 3 * HIDDEN), nn.Linear(HIDDEN, HIDDEN)
            self.ff1, self.ff2 = nn.Linear(HIDDEN, 4 * HIDDEN), nn.Linear(4 * HIDDEN, HIDDEN)
            self.register_buffer("mask", torch.triu(torch.full((POSITIONS, POSITIONS), -1e4), diagonal=1))

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(HIDDEN, dim=2)
            q, k, v = (z.view(b, t, HEADS, HIDDEN // HEADS).transpose(1, 2) for z in (q, k, v))
            scores = q @ k.transpose(-1, -2) / math.sqrt(HIDDEN // HEADS)
            if self.causal:
                scores = scores + self.mask[:t, :t]
            x = x + self.proj((torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(b, t, HIDDEN))
            return x + self.ff2(nn.functional.gelu(self.ff1(self.ln2(x)), approximate="tanh"))

    class Gpt(nn.Module):
        def __init__(self, causal=True):
            super().__init__()
            self.tok, self.pos = nn.Embedding(VOCAB, HIDDEN), nn.Embedding(POSITIONS, HIDDEN)
            self.blocks = nn.ModuleList(Block(causal) for _ in range(LAYERS))
            self.ln, self.head = nn.LayerNorm(HIDDEN), nn.Linear(HIDDEN, VOCAB)

        def forward(self, ids):
            h = self.tok(ids) + self.pos(torch.arange(ids.shape[1]))
            for blk in self.blocks:
                h = blk(h)
            return self.head(self.ln(h))

    class CachedGpt(Gpt):
        """The same weights with Hugging Face's cache interface: ids, an attention mask over past and
        new positions, position ids and past_key_values.N.key/value in; logits and present.N.key/value
        out. `use_mask=False` reads the mask to no effect (a model generate must refuse to pad)."""

        def __init__(self, use_mask=True):
            super().__init__()
            self.use_mask = use_mask

        def forward(self, ids, attention_mask, position_ids, *past):
            b, t = ids.shape
            h = self.tok(ids) + self.pos(position_ids)
            presents = []
            for i, blk in enumerate(self.blocks):
                pk, pv = past[2 * i], past[2 * i + 1]
                q, k, v = blk.qkv(blk.ln1(h)).split(HIDDEN, dim=2)
                q, k, v = (z.view(b, t, HEADS, HIDDEN // HEADS).transpose(1, 2) for z in (q, k, v))
                k, v = torch.cat([pk, k], dim=2), torch.cat([pv, v], dim=2)
                presents += [k, v]
                total = k.shape[2]
                scores = q @ k.transpose(-1, -2) / math.sqrt(HIDDEN // HEADS)
                query_at = torch.arange(t).unsqueeze(1) + (total - t)
                scores = scores + (torch.arange(total).unsqueeze(0) > query_at).float() * -1e4
                # use_mask=False still reads the mask (so the export keeps the input) but to no effect
                scores = scores + (1.0 - attention_mask[:, None, None, :].float()) * (-1e4 if self.use_mask else 0.0)
                h = h + blk.proj((torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(b, t, HIDDEN))
                h = h + blk.ff2(nn.functional.gelu(blk.ff1(blk.ln2(h)), approximate="tanh"))
            return (self.head(self.ln(h)),) + tuple(presents)

    def export_cached(model, path):
        past = [torch.zeros(1, HEADS, 3, HIDDEN // HEADS) for _ in range(2 * LAYERS)]
        names = []
        for i in range(LAYERS):
            names += ["past_key_values.%d.key" % i, "past_key_values.%d.value" % i]
        outputs = ["logits"] + [n.replace("past_key_values", "present") for n in names]
        axes = {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "total"},
                "position_ids": {0: "batch", 1: "sequence"}, "logits": {0: "batch", 1: "sequence"}}
        for n in names:
            axes[n] = {0: "batch", 2: "past"}
            axes[n.replace("past_key_values", "present")] = {0: "batch", 2: "total"}
        torch.onnx.export(model, (torch.tensor([[1, 2]]), torch.ones(1, 5, dtype=torch.long), torch.tensor([[3, 4]]), *past),
                          path, opset_version=17, input_names=["input_ids", "attention_mask", "position_ids"] + names,
                          output_names=outputs, dynamic_axes=axes)

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
    if len(set(ref)) < 4:
        print("the reference repeats itself: the weights make a weak test")
        return 1

    ok = True
    ids = ",".join(map(str, PROMPT))
    for backend in backends:
        for name, path in (("dynamic", dynamic), ("fixed", fixed), ("cached", cached)):
            out = os.path.join(tmp, "%s_%s.json" % (backend, name))
            cmd = [args.mosaic, "generate", path, "--backend", backend, "--prompt-ids", ids, "--new-tokens",
                   str(args.new_tokens), "--runs", "1", "--threads", "2", "--json", out]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                print("%s %s: mosaic generate failed (%d): %s" % (backend, name, r.returncode, (r.stderr or r.stdout).strip()))
                ok = False
                continue
            doc = json.load(open(out))
            got = doc["generated"][0]
            lengths = [(l["length"], l["past"]) if l["past"] else l["length"] for l in doc["lengths"]]
            same = got == ref
            first = next((i for i, (a, b) in enumerate(zip(got, ref)) if a != b), None)
            ok = ok and same
            print("%-7s %-7s %s: %d tokens, planned lengths %s%s" % (
                backend, name, "agrees" if same else "DIFFERS", len(got), lengths,
                "" if same else " (first difference at token %s: %s)" % (first, " ".join(map(str, got)))))
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
