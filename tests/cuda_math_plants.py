#!/usr/bin/env python3
"""The catch rate of tests/test_cuda_math.cpp: plants each bug below in a copy of the cuda
backend's host-checkable headers (backends/cuda/device_*.hpp), builds the CudaMath tests
against the copy and counts the builds whose tests fail. No GPU needed.

usage: tests/cuda_math_plants.py [--build build]   (a configured and built tree: its static
                                                    libraries are linked)
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (file, the correct text, the bug, what it is)
PLANTS = [
    ("device_math.hpp", "case DevUnary::kSigmoid: return y * (1.f - y);", "case DevUnary::kSigmoid: return y * (1.f + y);",
     "Sigmoid's derivative, a sign"),
    ("device_math.hpp", "(1.f + 3.f * 0.044715f * x * x)", "(1.f + 0.044715f * x * x)", "Gelu (tanh)'s factor 3 dropped"),
    ("device_math.hpp", "case DevUnary::kLeakyRelu: return x > 0.f ? 1.f : f.alpha;",
     "case DevUnary::kLeakyRelu: return x >= 0.f ? 1.f : f.alpha;", "LeakyRelu's choice at its kink"),
    ("device_math.hpp", "const int64_t own = which == 0 ? s.a_strides[d] : s.b_strides[d];",
     "const int64_t own = s.a_strides[d];", "b's gradient summed over a's broadcast dimensions"),
    ("device_math.hpp", "case DevBinary::kDiv: return which == 0 ? g / b : -g * a / (b * b);",
     "case DevBinary::kDiv: return which == 0 ? g / b : -g * a / b;", "Div's db"),
    ("device_math.hpp", "case DevReduce::kMin: return x == y && s0 > 0 ? static_cast<float>(g / s0) : 0.f;",
     "case DevReduce::kMin: return x == y ? dy : 0.f;", "Max/Min's ties not split"),
    ("device_math.hpp", "return s0 == 1 ? static_cast<float>(g * s1) : 0.f;",
     "return s0 == 0 ? static_cast<float>(g * s1) : 0.f;", "Prod's rule at a zero"),
    ("device_math.hpp", "for (int d = 0; d < s.rank; ++d) off += s.sources[d][at[d]] * s.dy_strides[d];",
     "for (int d = 0; d < s.rank; ++d) off += s.sources[d][lo[d]] * s.dy_strides[d];",
     "the scatter reading one source per axis"),
    ("device_math.hpp", "    if (c >= 0 && c < in_dim) ++offsets[static_cast<size_t>(c) + 1];",
     "    if (c > 0 && c < in_dim) ++offsets[static_cast<size_t>(c) + 1];", "an inverse map dropping coordinate 0"),
    ("device_unary.hpp", "if (c.rank > 0 && c.a_strides[c.rank - 1] == sa * n && c.b_strides[c.rank - 1] == sb * n) {",
     "if (c.rank > 0 && c.a_strides[c.rank - 1] == sa * n) {", "the collapse ignoring b"),
    ("device_geometry.hpp", "b.out_strides[a] = p.kept[a] == 1 && p.in[a] != 1 ? 0 : out[a];",
     "b.out_strides[a] = out[a];", "a reduced axis's stride"),
    ("device_math.hpp", "case DevReduce::kLogSumExp: return static_cast<float>(g * exp(static_cast<double>(x) - y));",
     "case DevReduce::kLogSumExp: return static_cast<float>(g * exp(static_cast<double>(x)));",
     "LogSumExp's shift"),
    ("device_math.hpp", "const int64_t i = indices[j] < 0 ? indices[j] + g.axis : indices[j];",
     "const int64_t i = indices[j];", "Gather's negative ids not wrapped"),
    ("device_math.hpp", "return i >= 0 && i < g.axis ? i : -1;", "return i >= 0 && i <= g.axis ? i : -1;",
     "Gather letting an id equal to the axis's size through"),
    ("device_geometry.hpp", "    g.strides[perm[d]] = dy[d];", "    g.strides[d] = dy[perm[d]];",
     "Transpose's backward permuting the wrong way"),
    ("device_geometry.hpp", "e.crop[2 + a].push_back(c + w.pad_begin[a]);", "e.crop[2 + a].push_back(c + w.pad_end[a]);",
     "the explicit padding's crop at the end pad's offset"),
    ("device_math.hpp", "if (src < 0) inside = false;", "if (src < -1) inside = false;",
     "the gather reading the fill positions"),
    ("device_math.hpp", "*p = static_cast<float>(*p - o.lr * (g + o.weight_decay * *p));",
     "*p = static_cast<float>(*p - o.lr * g - o.weight_decay * *p);", "SGD's weight decay outside the learning rate"),
    ("device_math.hpp", "take = o.step == 1 ? 1 : 1 - o.dampening;", "take = 1 - o.dampening;",
     "SGD's momentum buffer started from the dampened gradient"),
    ("device_math.hpp", "const double own = o.nesterov ? 1 : 0, ahead = o.nesterov ? o.momentum : 1;",
     "const double own = 0, ahead = 1;", "Nesterov's look-ahead dropped"),
    ("device_math.hpp", "*p = static_cast<float>(pi - step * (m / (sqrtf(v) / bc2_sqrt + eps)));",
     "*p = static_cast<float>(pi - step * (m / (sqrtf(v) + eps)));", "Adam's second bias correction dropped"),
    ("device_math.hpp", "const double shrink = o.decoupled ? 1 - o.lr * o.weight_decay : 1,",
     "const double shrink = 1,", "AdamW's decoupled decay dropped"),
    ("device_math.hpp", "const int64_t end = (c + 1) * ch.per < rows ? (c + 1) * ch.per : rows;",
     "const int64_t end = (c + 1) * ch.per < rows ? (c + 1) * ch.per - 1 : rows;",
     "LayerNorm's chunks each dropping their last row"),
    ("device_math.hpp", "  c.chunks = (rows + c.per - 1) / c.per;\n", "  c.chunks = rows / c.per;\n",
     "LayerNorm's short last chunk dropped"),
    ("device_math.hpp", "    s += g * (x[r * cols + j] - stats[2 * r]) * stats[2 * r + 1];",
     "    s += g * x[r * cols + j] * stats[2 * r + 1];", "LayerNorm's dscale without the mean"),
    ("device_math.hpp", "    if (x[j] > x[arg]) arg = j;", "    if (x[j] >= x[arg]) arg = j;",
     "the loss's arg-max taking the last of tied maxima"),
    ("device_math.hpp", "return static_cast<float>((exp(x - lse) - (is_label ? 1.0 : 0.0)) * r.scale);",
     "return static_cast<float>((exp(x - lse) - (is_label ? 1.0 : 0.0)));", "cross-entropy's gradient not averaged"),
    ("device_math.hpp", "return static_cast<float>(2.0 * (static_cast<double>(x) - (is_label ? 1.0 : 0.0)) * r.scale);",
     "return static_cast<float>((static_cast<double>(x) - (is_label ? 1.0 : 0.0)) * r.scale);",
     "the squared error's gradient without its factor 2"),
    ("device_math.hpp", "      for (int64_t j = 0; j < r.classes; ++j) d[j] = 0.f;\n",
     "      for (int64_t j = 0; j < r.classes; ++j) d[j] = d[j];\n", "an ignored row's gradient left as it was"),
    ("device_math.hpp", "return r.kind == LossRule::kCrossEntropy ? lse - x_label : sum;",
     "return r.kind == LossRule::kCrossEntropy ? lse : sum;", "cross-entropy's row loss without the label's logit"),
    ("device_unary.hpp", "case BinaryOp::kSub: return DevBinary::kSub;", "case BinaryOp::kSub: return DevBinary::kAdd;",
     "Sub's row mapped to the device's Add"),
    ("device_geometry.hpp", "case ReduceOp::kL1: return DevReduce::kL1;", "case ReduceOp::kL1: return DevReduce::kL2;",
     "ReduceL1's row mapped to the device's L2"),
]

LIBS = ["libmosaic_backend_common.a", "libmosaic_core.a", "libmosaic_operators.a", "libmosaic_ir.a",
        "libmosaic_backend_common.a", "libmosaic_core.a", "libmosaic_ir.a"]


def build(build_dir, include, out):
    cmd = ["g++", "-O1", "-std=gnu++17", "-I" + include, "-I" + ROOT, "-I" + os.path.join(ROOT, "tests"),
           '-DMOSAIC_SOURCE_DIR="%s"' % ROOT, '-DMOSAIC_BIN="mosaic"', '-DMOSAIC_PLUGIN_DIR="."',
           os.path.join(ROOT, "tests/test_cuda_math.cpp"), "-o", out] + \
          [os.path.join(build_dir, lib) for lib in LIBS] + \
          ["/usr/lib/x86_64-linux-gnu/libgtest_main.a", "/usr/lib/x86_64-linux-gnu/libgtest.a", "-lgomp", "-lpthread"]
    subprocess.run(cmd, check=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    args = ap.parse_args()
    src = os.path.join(ROOT, "backends/cuda")
    with tempfile.TemporaryDirectory() as tmp:
        copy = os.path.join(tmp, "backends/cuda")
        os.makedirs(copy)
        for f in ("device_math.hpp", "device_unary.hpp", "device_geometry.hpp"):
            shutil.copy(os.path.join(src, f), copy)
        binary = os.path.join(tmp, "t")
        build(args.build, tmp, binary)
        if subprocess.run([binary], capture_output=True).returncode != 0:
            print("the tests fail without a planted bug", file=sys.stderr)
            return 1
        caught = 0
        for f, good, bad, what in PLANTS:
            text = open(os.path.join(src, f)).read()
            if good not in text:
                print(f"{f} no longer has the text to plant '{what}' in", file=sys.stderr)
                return 1
            with open(os.path.join(copy, f), "w") as out:
                out.write(text.replace(good, bad))
            build(args.build, tmp, binary)
            failed = subprocess.run([binary], capture_output=True).returncode != 0
            caught += failed
            print(("caught  " if failed else "MISSED  ") + what)
            shutil.copy(os.path.join(src, f), copy)
        print(f"{caught} of {len(PLANTS)} planted bugs caught")
        return 0 if caught == len(PLANTS) else 1


if __name__ == "__main__":
    sys.exit(main())
