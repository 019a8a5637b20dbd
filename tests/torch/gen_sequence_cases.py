#!/usr/bin/python3
"""Exports everyday sequence models with PyTorch 1.13's ONNX exporter as ONNX backend-test cases.

The models a user would bring: a BERT-style encoder fed token ids (int64) with a padding
mask, a GPT-style causal decoder, a ViT, torch's own nn.TransformerEncoder, and LSTM and GRU
classifiers, each at opsets 13, 14 and 17 (17 is the first where PyTorch exports
LayerNormalization as one node). Each case is OUT/test_<name>_op<N>/model.onnx plus
test_data_set_0/{input_*,output_0}.pb with PyTorch's own eval-mode output, so
`mosaic verify OUT --backend all` checks every backend against PyTorch.

usage: gen_sequence_cases.py OUT [--only NAME,...] [--opsets 13,14,17]
"""
import argparse
import math
import os
import sys

import torch
import torch.nn as nn
from onnx import numpy_helper

VOCAB, SEQ, HIDDEN, HEADS, LAYERS = 97, 16, 32, 4, 2


class SelfAttention(nn.Module):
    """Multi-head attention written out as users write it (and as HuggingFace's BERT and GPT-2
    are): Q/K/V projections, view/transpose into heads, QK^T scaled, mask added, softmax, V."""

    def __init__(self, hidden, heads):
        super().__init__()
        self.heads, self.dim = heads, hidden // heads
        self.q, self.k, self.v = nn.Linear(hidden, hidden), nn.Linear(hidden, hidden), nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, hidden)

    def split(self, x):
        b, t, _ = x.shape
        return x.view(b, t, self.heads, self.dim).transpose(1, 2)

    def forward(self, x, mask):
        q, k, v = self.split(self.q(x)), self.split(self.k(x)), self.split(self.v(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.dim) + mask
        ctx = torch.matmul(torch.softmax(scores, dim=-1), v)
        b, h, t, d = ctx.shape
        return self.out(ctx.transpose(1, 2).reshape(b, t, h * d))


class Block(nn.Module):
    def __init__(self, hidden, heads, pre_norm, gelu_approx="none"):
        super().__init__()
        self.pre_norm = pre_norm
        self.attn = SelfAttention(hidden, heads)
        self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.ff1, self.ff2 = nn.Linear(hidden, 4 * hidden), nn.Linear(4 * hidden, hidden)
        self.gelu_approx = gelu_approx

    def ffn(self, x):
        return self.ff2(nn.functional.gelu(self.ff1(x), approximate=self.gelu_approx))

    def forward(self, x, mask):
        if self.pre_norm:  # GPT-2
            x = x + self.attn(self.ln1(x), mask)
            return x + self.ffn(self.ln2(x))
        x = self.ln1(x + self.attn(x, mask))  # BERT
        return self.ln2(x + self.ffn(x))


class BertLike(nn.Module):
    """Token, position and segment embeddings; the padding mask built from the ids (id 0 is
    padding) inside the graph, as HuggingFace does: Equal/Cast/Unsqueeze/Mul."""

    def __init__(self):
        super().__init__()
        self.tok, self.pos, self.seg = nn.Embedding(VOCAB, HIDDEN), nn.Embedding(SEQ, HIDDEN), nn.Embedding(2, HIDDEN)
        self.ln = nn.LayerNorm(HIDDEN)
        self.blocks = nn.ModuleList(Block(HIDDEN, HEADS, pre_norm=False) for _ in range(LAYERS))
        self.pool = nn.Linear(HIDDEN, HIDDEN)
        self.cls = nn.Linear(HIDDEN, 3)

    def forward(self, ids):
        t = ids.shape[1]
        pos = torch.arange(t, device=ids.device).unsqueeze(0)
        x = self.ln(self.tok(ids) + self.pos(pos) + self.seg(torch.zeros_like(ids)))
        mask = (1.0 - (ids != 0).float())[:, None, None, :] * -10000.0
        for b in self.blocks:
            x = b(x, mask)
        return self.cls(torch.tanh(self.pool(x[:, 0])))


class GptLike(nn.Module):
    """Pre-norm causal decoder with a tanh-GELU and a weight-tied LM head: logits over the
    vocabulary for every position. The causal mask is GPT-2's: a lower-triangular buffer
    sliced to the sequence length (Shape/Slice at run time) and applied with Where."""

    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, HIDDEN), nn.Embedding(SEQ, HIDDEN)
        self.register_buffer("causal", torch.tril(torch.ones(SEQ, SEQ, dtype=torch.bool)))
        self.blocks = nn.ModuleList(Block(HIDDEN, HEADS, pre_norm=True, gelu_approx="tanh") for _ in range(LAYERS))
        self.ln = nn.LayerNorm(HIDDEN)

    def forward(self, ids):
        t = ids.shape[1]
        x = self.tok(ids) + self.pos(torch.arange(t, device=ids.device))
        causal = torch.where(self.causal[:t, :t], torch.tensor(0.0), torch.tensor(-1e4))
        for b in self.blocks:
            x = b(x, causal)
        return torch.matmul(self.ln(x), self.tok.weight.t())


class VitTiny(nn.Module):
    def __init__(self, image=32, patch=8, classes=10):
        super().__init__()
        self.patch = nn.Conv2d(3, HIDDEN, patch, stride=patch)
        n = (image // patch) ** 2
        self.cls_token = nn.Parameter(torch.randn(1, 1, HIDDEN) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, n + 1, HIDDEN) * 0.02)
        self.blocks = nn.ModuleList(Block(HIDDEN, HEADS, pre_norm=True) for _ in range(LAYERS))
        self.ln = nn.LayerNorm(HIDDEN)
        self.head = nn.Linear(HIDDEN, classes)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        zero = torch.zeros(1, device=x.device)
        for b in self.blocks:
            x = b(x, zero)
        return self.head(self.ln(x)[:, 0])


class TorchEncoder(nn.Module):
    """torch.nn.TransformerEncoder (batch_first, GELU), mean-pooled."""

    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, HIDDEN)
        layer = nn.TransformerEncoderLayer(HIDDEN, HEADS, 2 * HIDDEN, dropout=0.0, activation="gelu",
                                           batch_first=True)
        self.enc = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
        self.head = nn.Linear(HIDDEN, 5)

    def forward(self, ids):
        return self.head(self.enc(self.tok(ids)).mean(dim=1))


class RecurrentClassifier(nn.Module):
    def __init__(self, cell, bidirectional):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, HIDDEN)
        self.rnn = cell(HIDDEN, HIDDEN, num_layers=2, batch_first=True, bidirectional=bidirectional)
        self.head = nn.Linear(HIDDEN * (2 if bidirectional else 1), 4)

    def forward(self, ids):
        out, _ = self.rnn(self.tok(ids))
        return self.head(out[:, -1])


def models():
    return {
        "bert_like": (BertLike, "ids"),
        "gpt_like": (GptLike, "ids"),
        "vit_tiny": (VitTiny, "image"),
        "torch_transformer_encoder": (TorchEncoder, "ids"),
        "lstm_classifier": (lambda: RecurrentClassifier(nn.LSTM, bidirectional=True), "ids"),
        "gru_classifier": (lambda: RecurrentClassifier(nn.GRU, bidirectional=False), "ids"),
    }


def make_input(kind, gen, batch=2):
    if kind == "image":
        return torch.rand(batch, 3, 32, 32, generator=gen)
    ids = torch.randint(1, VOCAB, (batch, SEQ), generator=gen)
    ids[1, SEQ - 3:] = 0  # padding at the end of the second sequence
    return ids


def export_case(name, make, kind, opset, out_dir):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    model = make()
    model.eval()
    x = make_input(kind, gen)
    with torch.no_grad():
        y = model(x)
    case = os.path.join(out_dir, "test_%s_op%d" % (name, opset))
    os.makedirs(os.path.join(case, "test_data_set_0"), exist_ok=True)
    torch.onnx.export(model, x, os.path.join(case, "model.onnx"), opset_version=opset,
                      input_names=["input"], output_names=["output"],
                      dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
    for kind_, t in (("input_0", x), ("output_0", y)):
        with open(os.path.join(case, "test_data_set_0", kind_ + ".pb"), "wb") as f:
            f.write(numpy_helper.from_array(t.numpy()).SerializeToString())
    print("exported", case)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--only", default="")
    ap.add_argument("--opsets", default="13,14,17")
    args = ap.parse_args()
    torch.set_num_threads(2)
    only = set(filter(None, args.only.split(",")))
    for name, (make, kind) in models().items():
        if only and name not in only:
            continue
        for opset in (int(o) for o in args.opsets.split(",")):
            export_case(name, make, kind, opset, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
