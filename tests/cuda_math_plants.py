#!/usr/bin/env python3
"""The catch rate of tests/test_cuda_math.cpp, tests/test_cuda_int8_math.cpp and
tests/test_cuda_qlinear_math.cpp: plants each bug below in a copy of the cuda backend's
host-checkable headers (backends/cuda/device_*.hpp, int8_plan.hpp, qlinear_plan.hpp), builds
the CudaMath, CudaInt8Math and CudaQLinearMath tests against the copy and counts the builds
whose tests fail. No GPU needed.

usage: tests/cuda_math_plants.py [--build build] [--only HEADER ...] [--match TEXT]
       (a configured and built tree: its static libraries are linked)
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
    # The integer products and 8-bit codes (issue 52; tests/test_cuda_int8_math.cpp).
    ("device_quant.hpp", "  const float r = rintf(q) + static_cast<float>(zero_point);",
     "  const float r = roundf(q) + static_cast<float>(zero_point);", "QuantizeLinear rounding ties away from zero"),
    ("device_quant.hpp", "  return dev_mul_rn(static_cast<float>(code - zero_point), scale);",
     "  return dev_mul_rn(static_cast<float>(code), scale);", "DequantizeLinear's zero point dropped"),
    ("device_quant.hpp", "dev_exact_sum(a.c[at], e.shift - a_zp, ", "dev_exact_sum(a.c[at], e.shift, ",
     "the activations' zero point dropped from the correction"),
    ("device_quant.hpp", "a.multipliers[e.per_column ? col : 0]", "a.multipliers[0]",
     "a per-channel scale taken per tensor"),
    ("device_quant.hpp", "a.bias_i32 ? a.bias_i32[col] : 0", "0", "the int32 bias dropped"),
    ("device_quant.hpp", "if (a.bias_f32) v = dev_add_rn(v, a.bias_f32[col]);", "if (a.bias_f32) v = dev_add_rn(v, a.bias_f32[0]);",
     "MatMulIntegerToFloat's bias per tensor"),
    ("device_quant.hpp", "  *c_at = ((ch / e.n) * e.rows + r) * e.np + ch % e.n;", "  *c_at = ((ch / e.n) * e.rows + r) * e.n + ch % e.n;",
     "the sums read without the columns' padding"),
    ("device_quant.hpp", "  int code = zero_point ? dev_code(zero_point[0], p.is_signed) : p.pad_code;", "  int code = 0;",
     "a convolution's padding as code 0, not the zero point"),
    ("device_quant.hpp", "const uint8_t byte = p.transposed ? a[k * p.rows + r] : a[r * p.k + k];",
     "const uint8_t byte = a[r * p.k + k];", "QGemm's transA ignored"),
    ("device_quant.hpp", "const double v = rint(r) + zero_point;", "const double v = rint(r + zero_point);",
     "QLinear's zero point added before rounding"),
    ("int8_plan.hpp", "return codes[s.tb ? c * k + kk : kk * n + c];", "return codes[kk * n + c];", "QGemm's transB ignored"),
    ("int8_plan.hpp", "  c.stride_b = static_cast<long long>(p.e.rows) * p.kp;", "  c.stride_b = static_cast<long long>(p.e.np) * p.kp;",
     "the packed columns' group stride"),
    ("int8_plan.hpp", "const float product = s.alpha * as * b_scale[j];", "const float product = as * b_scale[j];",
     "QGemm's alpha dropped"),
    ("int8_plan.hpp", "  c.in[a] = win.in[a], c.out[a] = win.out[a], c.kernel[a] = win.k[a];",
     "  c.in[a] = win.in[a], c.out[a] = win.out[a], c.kernel[a] = win.k[2 - a];", "the kernel's axes reversed"),
    ("device_math.hpp", "    b += k * s.b_strides[d];", "    b += k * s.a_strides[d];",
     "a broadcast reading B with A's strides"),
    ("device_qlinear.hpp",
     ": dev_add_rn(dev_mul_rn(q.ra, static_cast<float>(da)), dev_mul_rn(q.rb, static_cast<float>(db)));",
     ": fmaf(q.ra, static_cast<float>(da), dev_mul_rn(q.rb, static_cast<float>(db)));",
     "QLinearAdd's products fused into one multiply-add"),
    ("device_qlinear.hpp", "  return q.relu && r < q.zc ? q.zc : r;", "  return r;", "QLinearAdd's fused Relu dropped"),
    ("device_qlinear.hpp", "const int da = dev_code(a[ia], q.is_signed) - q.za,", "const int da = dev_code(a[ia], q.is_signed),",
     "A's zero point dropped"),
    ("device_qlinear.hpp", "  const float r = rintf(v) + static_cast<float>(zero_point);",
     "  const float r = rintf(v + static_cast<float>(zero_point));", "the zero point added before rounding"),
    ("device_qlinear.hpp", "  sum -= p.spatial * p.zx;", "  sum -= p.zx;", "the global pool's zero point taken once"),
    ("device_qlinear.hpp", "x[p.channels_last ? (n * p.spatial + s) * p.channels + c : o * p.spatial + s]",
     "x[o * p.spatial + s]", "the global pool reading channels-last as NCHW"),
    ("device_qlinear.hpp", "  y[o * r.out_run + r.start + e] = out;", "  y[i + r.start] = out;",
     "a concatenated operand written as one run"),
    ("device_qlinear.hpp", "dev_div_rn(dev_mul_rn(static_cast<float>(dev_code(x[i], r.is_signed) - r.zx), r.x_scale), r.y_scale)",
     "dev_mul_rn(static_cast<float>(dev_code(x[i], r.is_signed) - r.zx), r.x_scale)", "Y's scale not divided"),
    ("device_qlinear.hpp", "  if (p.count_include_pad) {", "  if (false) {", "QLinearAveragePool's padded divisor ignored"),
    ("device_qlinear.hpp", "const int64_t i2 = at[2] * p.s[2] - p.pb[2] + c * p.d[2];",
     "const int64_t i2 = at[2] * p.s[2] - p.pb[2] + c;", "QLinearAveragePool's dilation ignored"),
    ("device_qlinear.hpp", "    y[first + k * p.inner] =", "    y[first + k] =", "QLinearSoftmax's outputs without the inner stride"),
    ("device_qlinear.hpp", "p.is_signed) - top), p.x_scale)", "p.is_signed) - top), 1.f)",
     "QLinearSoftmax's exps of codes, not values"),
    ("qlinear_plan.hpp", "  p.count_include_pad = pool.count_include_pad;", "  p.count_include_pad = false;",
     "count_include_pad not planned"),
    ("qlinear_plan.hpp", "q.ra = q.mul ? a.scale * b.scale / c.scale : a.scale / c.scale;", "q.ra = a.scale / c.scale;",
     "QLinearMul's ratio without B's scale"),
    ("qlinear_plan.hpp", "r.copy = x.scale == y.scale && x.zero_point == y.zero_point;", "r.copy = x.scale == y.scale;",
     "an operand copied whose zero point is not Y's"),
    ("qlinear_plan.hpp", "qlinear_lookup_table(ctx.node->op_type == \"QLinearSigmoid\",", "qlinear_lookup_table(true,",
     "QLinearLeakyRelu's table of the sigmoid"),
    ("qlinear_plan.hpp", "p.channels = p.channels_last ? in.back() : in[1];", "p.channels = in[1];",
     "channels-last's channels read from axis 1"),
]

# What the test files link: Mosaic's libraries as the test binary links them (the int8
# tests run the naive oracle through a plan), then gtest.
LIBS = ["libmosaic_api.a", "libmosaic_data.a", "libmosaic_validate.a", "libmosaic_onnx.a", "libmosaic_zoo.a",
        "libmosaic_metrics.a", "libmosaic_config.a", "libmosaic_backends.a", "libmosaic_backend_naive.a",
        "libmosaic_backend_im2col.a", "libmosaic_backend_onednn.a", "libmosaic_backend_common.a",
        "libmosaic_distributed.a", "libmosaic_core.a", "libmosaic_operators.a", "libmosaic_ir.a"]
SYSTEM_LIBS = ["-lonnx", "-lonnx_proto", "-lprotobuf", "-lz", "-lsqlite3", "-ldnnl", "-lyaml-cpp",
               "/usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so", "-L/usr/lib/x86_64-linux-gnu/openmpi/lib",
               "-lmpi_cxx", "-lmpi", "-lgomp", "-lpthread"]
TESTS = {"math": "tests/test_cuda_math.cpp", "int8": "tests/test_cuda_int8_math.cpp",
         "qlinear": "tests/test_cuda_qlinear_math.cpp"}
# Which test files include each header (a plant in device_math.hpp reaches all three).
READERS = {"device_math.hpp": ["math", "int8", "qlinear"], "device_unary.hpp": ["math", "qlinear"],
           "device_geometry.hpp": ["math"], "device_quant.hpp": ["int8", "qlinear"], "int8_plan.hpp": ["int8", "qlinear"],
           "device_qlinear.hpp": ["qlinear"], "qlinear_plan.hpp": ["qlinear"]}
HEADERS = list(READERS)


def compile_test(include, name, obj):
    subprocess.run(["g++", "-O1", "-std=gnu++17", "-c", "-I" + include, "-I" + ROOT, "-I" + os.path.join(ROOT, "tests"),
                    '-DMOSAIC_SOURCE_DIR="%s"' % ROOT, '-DMOSAIC_BIN="mosaic"', '-DMOSAIC_PLUGIN_DIR="."',
                    os.path.join(ROOT, TESTS[name]), "-o", obj], check=True)


def link(build_dir, out_dir, out):
    cmd = ["g++", "-rdynamic"] + [os.path.join(out_dir, n + ".o") for n in TESTS] + ["-o", out] + \
          [os.path.join(build_dir, lib) for lib in LIBS] + \
          ["/usr/lib/x86_64-linux-gnu/libgtest_main.a", "/usr/lib/x86_64-linux-gnu/libgtest.a"] + SYSTEM_LIBS
    subprocess.run(cmd, check=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--only", nargs="*", choices=HEADERS, help="plant only in these headers")
    ap.add_argument("--match", help="plant only the bugs whose description contains this")
    args = ap.parse_args()
    plants = [p for p in PLANTS if (not args.only or p[0] in args.only) and (not args.match or args.match in p[3])]
    src = os.path.join(ROOT, "backends/cuda")
    with tempfile.TemporaryDirectory() as tmp:
        copy = os.path.join(tmp, "backends/cuda")
        os.makedirs(copy)
        for f in HEADERS:
            shutil.copy(os.path.join(src, f), copy)
        binary = os.path.join(tmp, "t")
        for name in TESTS:  # the unplanted objects, kept for the files a plant does not reach
            compile_test(tmp, name, os.path.join(tmp, name + ".clean.o"))
            shutil.copy(os.path.join(tmp, name + ".clean.o"), os.path.join(tmp, name + ".o"))
        link(args.build, tmp, binary)
        if subprocess.run([binary], capture_output=True).returncode != 0:
            print("the tests fail without a planted bug", file=sys.stderr)
            return 1
        caught = 0
        for f, good, bad, what in plants:
            text = open(os.path.join(src, f)).read()
            if good not in text:
                print(f"{f} no longer has the text to plant '{what}' in", file=sys.stderr)
                return 1
            with open(os.path.join(copy, f), "w") as out:
                out.write(text.replace(good, bad))
            for name in TESTS:
                if name in READERS[f]:
                    compile_test(tmp, name, os.path.join(tmp, name + ".o"))
                else:
                    shutil.copy(os.path.join(tmp, name + ".clean.o"), os.path.join(tmp, name + ".o"))
            link(args.build, tmp, binary)
            failed = subprocess.run([binary], capture_output=True).returncode != 0
            caught += failed
            print(("caught  " if failed else "MISSED  ") + what, flush=True)
            shutil.copy(os.path.join(src, f), copy)
        print(f"{caught} of {len(plants)} planted bugs caught")
        return 0 if caught == len(plants) else 1


if __name__ == "__main__":
    sys.exit(main())
