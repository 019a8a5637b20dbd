#!/usr/bin/python3
"""The zoo's KV-cache decoders against PyTorch: greedy tokens of `mosaic generate` on every backend
equal those of an independent PyTorch implementation with the same weights.

For each of zoo:llama-tiny (RMSNorm, rotary embeddings, grouped-query attention, SwiGLU, untied
head) and zoo:gpt2-tiny-kv (LayerNorm, learned positions, GELU, biases, tied head):

1. `mosaic export` writes the zoo's graph as ONNX.
2. Its weight matrices are redrawn with a larger spread (N(0, 0.3); the zoo's N(0, 0.02) makes
   logits so flat that greedy picks near-ties and repeats one token, a weak test), and the
   model is saved again: the graph stays the zoo's.
3. PyTorch computes the same architecture from the equations (written here, from Hugging Face's
   LlamaForCausalLM and GPT2LMHeadModel, not from the ONNX graph), reading the weights by name,
   and generates greedily twice: recomputing the whole sequence each token, and with its own KV
   cache. Both must agree with each other first.
4. `mosaic generate MODEL.onnx --prompt-ids ... --new-tokens 64` on every backend must give the
   same 64 ids.

usage: zoo_decoder_agreement.py MOSAIC [--backends A,B] [--new-tokens 64]
exit 0 when every backend agrees; 1 otherwise; 77 if torch or onnx is missing.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

PROMPT = [5, 17, 42, 8, 77, 3, 250, 11]


def llama_forward(torch, w, cfg, ids, positions, past):
    """Logits and the grown cache; past is a list of (k, v) per layer, [B, kv heads, P, d]."""
    layers, hidden, heads, kv_heads = cfg["layers"], cfg["hidden"], cfg["heads"], cfg["kv_heads"]
    d = hidden // heads

    def rms(x, name):
        return w[name + ".weight"] * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5))

    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    freqs = positions.float()[:, :, None] * inv_freq[None, None, :]
    emb = torch.cat([freqs, freqs], dim=-1)
    cos, sin = emb.cos()[:, None], emb.sin()[:, None]

    def rotate(x):
        half = torch.cat([-x[..., d // 2:], x[..., :d // 2]], dim=-1)
        return x * cos + half * sin

    b, s = ids.shape
    x = w["embed_tokens.weight"][ids]
    total = past[0][0].shape[2] + s
    causal = torch.arange(total)[None, :] > (torch.arange(s)[:, None] + total - s)
    presents = []
    for l in range(layers):
        p = "layers.%d" % l
        h = rms(x, p + ".input_norm")
        q = (h @ w[p + ".attn.q_proj.weight"]).view(b, s, heads, d).transpose(1, 2)
        k = (h @ w[p + ".attn.k_proj.weight"]).view(b, s, kv_heads, d).transpose(1, 2)
        v = (h @ w[p + ".attn.v_proj.weight"]).view(b, s, kv_heads, d).transpose(1, 2)
        q, k = rotate(q), rotate(k)
        k, v = torch.cat([past[l][0], k], 2), torch.cat([past[l][1], v], 2)
        presents.append((k, v))
        k, v = k.repeat_interleave(heads // kv_heads, 1), v.repeat_interleave(heads // kv_heads, 1)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(d)
        scores = scores.masked_fill(causal, float("-inf"))
        c = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, s, hidden)
        x = x + c @ w[p + ".attn.o_proj.weight"]
        h = rms(x, p + ".post_attention_norm")
        g = h @ w[p + ".mlp.gate_proj.weight"]
        x = x + (torch.nn.functional.silu(g) * (h @ w[p + ".mlp.up_proj.weight"])) @ w[p + ".mlp.down_proj.weight"]
    return rms(x, "norm") @ w["lm_head.weight"], presents


def gpt2_forward(torch, w, cfg, ids, positions, past):
    layers, hidden, heads = cfg["layers"], cfg["hidden"], cfg["heads"]
    d = hidden // heads

    def ln(x, name):
        return torch.nn.functional.layer_norm(x, (hidden,), w[name + ".weight"], w[name + ".bias"], 1e-5)

    def lin(x, name):
        return x @ w[name + ".weight"] + w[name + ".bias"]

    b, s = ids.shape
    x = w["wte"][ids] + w["wpe"][positions]
    total = past[0][0].shape[2] + s
    causal = torch.arange(total)[None, :] > (torch.arange(s)[:, None] + total - s)
    presents = []
    for l in range(layers):
        p = "layers.%d" % l
        h = ln(x, p + ".input_norm")
        q, k, v = (lin(h, p + ".attn.%s_proj" % n).view(b, s, heads, d).transpose(1, 2) for n in "qkv")
        k, v = torch.cat([past[l][0], k], 2), torch.cat([past[l][1], v], 2)
        presents.append((k, v))
        scores = ((q @ k.transpose(-1, -2)) / math.sqrt(d)).masked_fill(causal, float("-inf"))
        x = x + lin((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, s, hidden), p + ".attn.o_proj")
        h = ln(x, p + ".post_attention_norm")
        x = x + lin(torch.nn.functional.gelu(lin(h, p + ".mlp.fc1")), p + ".mlp.fc2")
    return ln(x, "norm") @ w["wte"].t(), presents


CONFIGS = {
    "llama-tiny": (llama_forward, {"layers": 2, "hidden": 64, "heads": 4, "kv_heads": 2}),
    "gpt2-tiny-kv": (gpt2_forward, {"layers": 2, "hidden": 64, "heads": 2, "kv_heads": 2}),
}


def greedy(torch, forward, w, cfg, new_tokens, cached):
    d = cfg["hidden"] // cfg["heads"]
    empty = [(torch.zeros(1, cfg["kv_heads"], 0, d), torch.zeros(1, cfg["kv_heads"], 0, d)) for _ in range(cfg["layers"])]
    seq = list(PROMPT)
    with torch.no_grad():
        if not cached:
            for _ in range(new_tokens):
                logits, _ = forward(torch, w, cfg, torch.tensor([seq]), torch.arange(len(seq))[None], empty)
                seq.append(int(logits[0, -1].argmax()))
            return seq[len(PROMPT):]
        logits, past = forward(torch, w, cfg, torch.tensor([seq]), torch.arange(len(seq))[None], empty)
        seq.append(int(logits[0, -1].argmax()))
        while len(seq) < len(PROMPT) + new_tokens:
            logits, past = forward(torch, w, cfg, torch.tensor([[seq[-1]]]), torch.tensor([[len(seq) - 1]]), past)
            seq.append(int(logits[0, -1].argmax()))
    return seq[len(PROMPT):]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mosaic")
    ap.add_argument("--backends", default="")
    ap.add_argument("--new-tokens", type=int, default=64)
    args = ap.parse_args()
    try:
        import numpy as np
        import onnx
        from onnx import numpy_helper
        import torch
    except ImportError as e:
        print("%s: skipping" % e)
        return 77
    torch.set_num_threads(2)
    backends = args.backends.split(",") if args.backends else subprocess.run(
        [args.mosaic, "backends", "--names", "--available"], capture_output=True, text=True, check=True).stdout.split()
    tmp = tempfile.mkdtemp(prefix="mosaic_zoo_decoders_")
    ok = True
    for name, (forward, cfg) in CONFIGS.items():
        exported = os.path.join(tmp, name + ".onnx")
        subprocess.run([args.mosaic, "export", name, "-o", exported], check=True, capture_output=True)
        model = onnx.load(exported)
        rng = np.random.default_rng(0)
        w = {}
        for init in model.graph.initializer:
            a = numpy_helper.to_array(init)
            if a.dtype == np.float32 and a.ndim == 2:
                a = rng.normal(0, 0.3, a.shape).astype(np.float32)
                init.CopyFrom(numpy_helper.from_array(a, init.name))
            if a.dtype == np.float32:
                w[init.name] = torch.from_numpy(a.copy())
        spread = os.path.join(tmp, name + ".spread.onnx")
        onnx.save(model, spread)
        ref = greedy(torch, forward, w, cfg, args.new_tokens, cached=False)
        cached = greedy(torch, forward, w, cfg, args.new_tokens, cached=True)
        print("%s PyTorch: %s" % (name, " ".join(map(str, ref))))
        if cached != ref:
            print("%s: PyTorch's cached loop differs from its recomputing one: %s" % (name, cached))
            return 1
        if len(set(ref)) < 8:  # a continuation that repeats a few tokens would hide most bugs
            print("%s: the reference repeats itself: the weights make a weak test" % name)
            return 1
        for backend in backends:
            out = os.path.join(tmp, "%s_%s.json" % (name, backend))
            r = subprocess.run([args.mosaic, "generate", spread, "--backend", backend, "--prompt-ids", ",".join(map(str, PROMPT)),
                                "--new-tokens", str(args.new_tokens), "--runs", "1", "--threads", "2", "--no-db",
                                "--no-peaks", "--json", out], capture_output=True, text=True)
            if r.returncode != 0:
                print("%s %s: mosaic generate failed (%d): %s" % (name, backend, r.returncode, (r.stderr or r.stdout).strip()))
                ok = False
                continue
            got = json.load(open(out))["generated"][0]
            first = next((i for i, (a, b) in enumerate(zip(got, ref)) if a != b), None)
            ok = ok and got == ref
            print("%-13s %-7s %s%s" % (name, backend, "agrees, %d tokens" % len(got) if got == ref else "DIFFERS",
                                       "" if got == ref else " from token %s: %s" % (first, " ".join(map(str, got)))))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
