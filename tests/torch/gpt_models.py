"""A GPT-2-style decoder in PyTorch, in the two forms `mosaic generate` runs: the whole sequence
in, logits out (`Gpt`); and Hugging Face's KV-cache interface (`CachedGpt`: ids, an attention
mask over past and new positions, position ids and past_key_values.N.key/value in; logits and
present.N.key/value out). Both share one state dict. Used by tests/torch/generate_agreement.py
(greedy tokens against PyTorch's) and bench/generate_cache.py (the cache's speed).

`make(vocab, hidden, heads, layers, positions)` returns the classes for one config.
"""
import math

import torch
import torch.nn as nn


def make(VOCAB, HIDDEN, HEADS, LAYERS, POSITIONS):
    HEAD = HIDDEN // HEADS

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
            q, k, v = (z.view(b, t, HEADS, HEAD).transpose(1, 2) for z in (q, k, v))
            scores = q @ k.transpose(-1, -2) / math.sqrt(HEAD)
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
                q, k, v = (z.view(b, t, HEADS, HEAD).transpose(1, 2) for z in (q, k, v))
                k, v = torch.cat([pk, k], dim=2), torch.cat([pv, v], dim=2)
                presents += [k, v]
                total = k.shape[2]
                scores = q @ k.transpose(-1, -2) / math.sqrt(HEAD)
                query_at = torch.arange(t).unsqueeze(1) + (total - t)
                scores = scores + (torch.arange(total).unsqueeze(0) > query_at).float() * -1e4
                # use_mask=False still reads the mask (so the export keeps the input) but to no effect
                scores = scores + (1.0 - attention_mask[:, None, None, :].float()) * (-1e4 if self.use_mask else 0.0)
                h = h + blk.proj((torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(b, t, HIDDEN))
                h = h + blk.ff2(nn.functional.gelu(blk.ff1(blk.ln2(h)), approximate="tanh"))
            return (self.head(self.ln(h)),) + tuple(presents)

    def export_cached(model, path):
        past = [torch.zeros(1, HEADS, 3, HEAD) for _ in range(2 * LAYERS)]
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

    return Gpt, CachedGpt, export_cached
