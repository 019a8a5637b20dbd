// The cuda backend's arithmetic, written once for the device and the host: the element-wise
// functions and their derivatives (operators/eltwise.hpp's rows, in float), the binary ops'
// gradients, and the index arithmetic of the gradient reductions over broadcast dimensions.
// The CUDA kernels (eltwise.cu) call these as __device__ functions; the host's tests
// (tests/test_cuda_math.cpp) call the same functions against the rows and the naive oracle,
// so the formulas and the indexing are checked on every machine, GPU or not. No CUDA header
// is needed to include it.
#pragma once

#include <math.h>

#include <cstdint>

#include "ir/device.hpp"  // OptimizerRule, LossRule: plain data, read by the device's kernels

#if defined(__CUDACC__)
#define MOSAIC_HD __host__ __device__ inline
#else
#define MOSAIC_HD inline
#endif

namespace mosaic::cuda_backend {

/// The element-wise functions the device computes, with their parameters (operators/eltwise.hpp's
/// UnaryArgs). kNone: the identity (no fused activation).
enum class DevUnary : int {
  kNone, kRelu, kLeakyRelu, kSigmoid, kTanh, kClip, kExp, kLog, kSqrt, kErf, kNeg, kAbs, kReciprocal,
  kSoftplus, kSoftsign, kElu, kSelu, kHardSigmoid, kHardSwish, kGelu, kGeluTanh, kSin, kCos
};
struct DevUnaryArgs {
  DevUnary op = DevUnary::kNone;
  float alpha = 0, beta = 0, gamma = 0, lo = 0, hi = 0;
};

/// f(x).
MOSAIC_HD float dev_apply(const DevUnaryArgs& f, float x) {
  switch (f.op) {
    case DevUnary::kNone: return x;
    case DevUnary::kRelu: return x > 0.f ? x : 0.f;
    case DevUnary::kLeakyRelu: return x >= 0.f ? x : f.alpha * x;
    case DevUnary::kSigmoid: return 1.f / (1.f + expf(-x));
    case DevUnary::kTanh: return tanhf(x);
    case DevUnary::kClip: return fminf(fmaxf(x, f.lo), f.hi);
    case DevUnary::kExp: return expf(x);
    case DevUnary::kLog: return logf(x);
    case DevUnary::kSqrt: return sqrtf(x);
    case DevUnary::kErf: return erff(x);
    case DevUnary::kNeg: return -x;
    case DevUnary::kAbs: return fabsf(x);
    case DevUnary::kReciprocal: return 1.f / x;
    case DevUnary::kSoftplus: return x > 20.f ? x : log1pf(expf(x));
    case DevUnary::kSoftsign: return x / (1.f + fabsf(x));
    case DevUnary::kElu: return x > 0.f ? x : f.alpha * expm1f(x);
    case DevUnary::kSelu: return f.gamma * (x > 0.f ? x : f.alpha * expm1f(x));
    case DevUnary::kHardSigmoid: return fmaxf(0.f, fminf(1.f, f.alpha * x + f.beta));
    case DevUnary::kHardSwish: return x * fmaxf(0.f, fminf(1.f, x / 6.f + 0.5f));
    case DevUnary::kGelu: return 0.5f * x * (1.f + erff(x * 0.70710678118654752f));
    case DevUnary::kGeluTanh:
      return 0.5f * x * (1.f + tanhf(0.79788456080286535588f * (x + 0.044715f * x * x * x)));
    case DevUnary::kSin: return sinf(x);
    case DevUnary::kCos: return cosf(x);
  }
  return x;
}

/// Whether the derivative reads the forward input x, or its output y (the rows' own
/// backward_reads_input/output: a plan keeps only what backward reads).
MOSAIC_HD bool dev_derivative_reads_output(DevUnary op) {
  return op == DevUnary::kRelu || op == DevUnary::kSigmoid || op == DevUnary::kTanh || op == DevUnary::kExp ||
         op == DevUnary::kSqrt || op == DevUnary::kReciprocal;
}
MOSAIC_HD bool dev_derivative_reads_input(DevUnary op) {
  return op != DevUnary::kNone && op != DevUnary::kNeg && !dev_derivative_reads_output(op);
}

/// dy/dx at x, y = f(x), PyTorch's choices at kinks (the rows' df); x or y is whichever the
/// function reads (the other may be anything).
MOSAIC_HD float dev_derivative(const DevUnaryArgs& f, float x, float y) {
  switch (f.op) {
    case DevUnary::kNone: return 1.f;
    case DevUnary::kRelu: return y > 0.f ? 1.f : 0.f;
    case DevUnary::kLeakyRelu: return x > 0.f ? 1.f : f.alpha;
    case DevUnary::kSigmoid: return y * (1.f - y);
    case DevUnary::kTanh: return 1.f - y * y;
    case DevUnary::kClip: return x >= f.lo && x <= f.hi ? 1.f : 0.f;
    case DevUnary::kExp: return y;
    case DevUnary::kLog: return 1.f / x;
    case DevUnary::kSqrt: return 0.5f / y;
    case DevUnary::kErf: return 1.12837916709551257f * expf(-x * x);  // 2 / sqrt(pi)
    case DevUnary::kNeg: return -1.f;
    case DevUnary::kAbs: return x > 0.f ? 1.f : x < 0.f ? -1.f : 0.f;
    case DevUnary::kReciprocal: return -y * y;
    case DevUnary::kSoftplus: return 1.f / (1.f + expf(-x));
    case DevUnary::kSoftsign: {
      const float d = 1.f + fabsf(x);
      return 1.f / (d * d);
    }
    case DevUnary::kElu: return x > 0.f ? 1.f : f.alpha * expf(x);
    case DevUnary::kSelu: return f.gamma * (x > 0.f ? 1.f : f.alpha * expf(x));
    case DevUnary::kHardSigmoid: {
      const float v = f.alpha * x + f.beta;
      return v > 0.f && v < 1.f ? f.alpha : 0.f;
    }
    case DevUnary::kHardSwish: return x < -3.f ? 0.f : x <= 3.f ? x / 3.f + 0.5f : 1.f;
    case DevUnary::kGelu:  // Phi(x) + x phi(x)
      return 0.5f * (1.f + erff(x * 0.70710678118654752f)) + x * expf(-0.5f * x * x) * 0.39894228040143268f;
    case DevUnary::kGeluTanh: {
      const float t = tanhf(0.79788456080286535588f * (x + 0.044715f * x * x * x));
      return 0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * 0.79788456080286535588f * (1.f + 3.f * 0.044715f * x * x);
    }
    case DevUnary::kSin: return cosf(x);
    case DevUnary::kCos: return -sinf(x);
  }
  return 1.f;
}

/// One element of one optimizer step (ir/device.hpp's OptimizerRule): parameter *p with gradient g and its state *s0, *s1
/// (SGD's momentum buffer; Adam's averages), as core/optimizer.cpp computes them: PyTorch's
/// rules in double, rounded to float once per stored value, Adam's square root and the
/// division by it in float.
MOSAIC_HD void dev_optimizer_update(const OptimizerRule& o, float* p, float g, float* s0, float* s1) {
  if (o.kind != OptimizerRule::kAdam) {
    if (o.momentum == 0) {
      *p = static_cast<float>(*p - o.lr * (g + o.weight_decay * *p));
      return;
    }
    const double keep = o.step == 1 ? 0 : o.momentum, take = o.step == 1 ? 1 : 1 - o.dampening;
    const double own = o.nesterov ? 1 : 0, ahead = o.nesterov ? o.momentum : 1;
    const double d = g + o.weight_decay * *p;
    const float b = static_cast<float>(keep * *s0 + take * d);
    *s0 = b;
    *p = static_cast<float>(*p - o.lr * (own * d + ahead * b));
    return;
  }
  const double bc1 = 1 - pow(o.beta1, static_cast<double>(o.step)), bc2 = 1 - pow(o.beta2, static_cast<double>(o.step));
  const double step = o.lr / bc1;
  const float bc2_sqrt = static_cast<float>(sqrt(bc2)), eps = static_cast<float>(o.eps);
  const double shrink = o.decoupled ? 1 - o.lr * o.weight_decay : 1, coupled = o.decoupled ? 0 : o.weight_decay;
  const double pi = *p * shrink, d = g + coupled * *p;
  const float m = static_cast<float>(o.beta1 * *s0 + (1 - o.beta1) * d);
  const float v = static_cast<float>(o.beta2 * *s1 + (1 - o.beta2) * d * d);
  *s0 = m;
  *s1 = v;
  *p = static_cast<float>(pi - step * (m / (sqrtf(v) / bc2_sqrt + eps)));
}

enum class DevBinary : int { kAdd, kSub, kMul, kDiv };

MOSAIC_HD float dev_combine(DevBinary op, float u, float v) {
  switch (op) {
    case DevBinary::kAdd: return u + v;
    case DevBinary::kSub: return u - v;
    case DevBinary::kMul: return u * v;
    case DevBinary::kDiv: return u / v;
  }
  return 0.f;
}

/// Whether the gradients of a OP b read the operands (Add and Sub read neither).
MOSAIC_HD bool dev_binary_grad_reads_operands(DevBinary op) { return op == DevBinary::kMul || op == DevBinary::kDiv; }

/// The gradient of a OP b with respect to operand `which` (0: a, 1: b) at one output element
/// whose incoming gradient is g (the rows' da and db).
MOSAIC_HD float dev_binary_grad(DevBinary op, int which, float g, float a, float b) {
  switch (op) {
    case DevBinary::kAdd: return g;
    case DevBinary::kSub: return which == 0 ? g : -g;
    case DevBinary::kMul: return which == 0 ? g * b : g * a;
    case DevBinary::kDiv: return which == 0 ? g / b : -g * a / (b * b);
  }
  return 0.f;
}

/// Shapes of a broadcast binary op, right-aligned to `rank` <= 6 dimensions: the output's,
/// and each operand's strides (0 along the dimensions it is broadcast over).
struct Broadcast {
  int rank = 0;
  int64_t dims[6] = {};
  int64_t a_strides[6] = {}, b_strides[6] = {};
};

/// Where output element i of a broadcast op reads each operand.
MOSAIC_HD void broadcast_offsets(const Broadcast& s, int64_t i, int64_t* ia, int64_t* ib) {
  int64_t rest = i, a = 0, b = 0;
  for (int d = s.rank - 1; d >= 0; --d) {
    const int64_t k = rest % s.dims[d];
    rest /= s.dims[d];
    a += k * s.a_strides[d];
    b += k * s.b_strides[d];
  }
  *ia = a;
  *ib = b;
}

/// The gradient of one operand of a broadcast op, as a sum: operand element o (its own
/// packed order) adds up the `count` output elements that read it. Its dimensions split into
/// the kept ones (where the operand has the output's extent; o runs over them row-major) and
/// the reduced ones (broadcast: extent 1 in the operand); each has its strides in the
/// output's gradient and in both operands.
struct GradReduce {
  int kept_rank = 0, red_rank = 0;
  int64_t kept_dims[6] = {}, red_dims[6] = {};
  int64_t kept_y[6] = {}, kept_a[6] = {}, kept_b[6] = {};
  int64_t red_y[6] = {}, red_a[6] = {}, red_b[6] = {};
  int64_t count = 1;    ///< output elements per operand element (the reduced dimensions' product)
  int64_t elements = 1; ///< operand elements (the kept dimensions' product)
};

/// The gradient sum of operand `which` of `s` (uncollapsed or collapsed alike: dimensions of
/// extent 1 are dropped).
MOSAIC_HD GradReduce make_grad_reduce(const Broadcast& s, int which) {
  GradReduce g;
  int64_t y_stride = 1;
  for (int d = s.rank - 1; d >= 0; --d) {
    const int64_t n = s.dims[d];
    if (n != 1) {
      const int64_t own = which == 0 ? s.a_strides[d] : s.b_strides[d];
      if (own != 0) {
        g.kept_dims[g.kept_rank] = n;
        g.kept_y[g.kept_rank] = y_stride;
        g.kept_a[g.kept_rank] = s.a_strides[d];
        g.kept_b[g.kept_rank] = s.b_strides[d];
        ++g.kept_rank;
        g.elements *= n;
      } else {
        g.red_dims[g.red_rank] = n;
        g.red_y[g.red_rank] = y_stride;
        g.red_a[g.red_rank] = s.a_strides[d];
        g.red_b[g.red_rank] = s.b_strides[d];
        ++g.red_rank;
        g.count *= n;
      }
    }
    y_stride *= n;
  }
  // Filled innermost first: o and r decompose innermost first too (grad_reduce_offsets).
  return g;
}

/// Where the r-th output element read by operand element o is: its offset in the output's
/// gradient, in a and in b.
MOSAIC_HD void grad_reduce_offsets(const GradReduce& g, int64_t o, int64_t r, int64_t* y, int64_t* a, int64_t* b) {
  int64_t oy = 0, oa = 0, ob = 0;
  for (int d = 0; d < g.kept_rank; ++d) {  // innermost first
    const int64_t k = o % g.kept_dims[d];
    o /= g.kept_dims[d];
    oy += k * g.kept_y[d];
    oa += k * g.kept_a[d];
    ob += k * g.kept_b[d];
  }
  for (int d = 0; d < g.red_rank; ++d) {
    const int64_t k = r % g.red_dims[d];
    r /= g.red_dims[d];
    oy += k * g.red_y[d];
    oa += k * g.red_a[d];
    ob += k * g.red_b[d];
  }
  *y = oy;
  *a = oa;
  *b = ob;
}

/// One term of that sum: the gradient of operand `which` at the r-th output element that
/// operand element o reads (a and b may be nullptr where the op's gradient reads neither).
MOSAIC_HD float grad_reduce_term(DevBinary op, int which, const GradReduce& g, int64_t o, int64_t r, const float* dy,
                                 const float* a, const float* b) {
  int64_t iy = 0, ia = 0, ib = 0;
  grad_reduce_offsets(g, o, r, &iy, &ia, &ib);
  const bool reads = dev_binary_grad_reads_operands(op);
  return dev_binary_grad(op, which, dy[iy], reads ? a[ia] : 0.f, reads ? b[ib] : 0.f);
}

// ---- reductions (operators/reduce.hpp's rows) ----

/// The reductions of operators/reduce.hpp the device computes, in their rows' order.
enum class DevReduce : int { kSum, kMean, kMax, kMin, kProd, kL1, kL2, kLogSum, kLogSumExp, kSumSquare };
/// Output element o (over the kept axes, `out_dims`, with `kept_strides` into the input)
/// reduces the `count` input elements of the reduced axes (`red_dims`, `red_strides`), in
/// double precision. Both lists are outermost first.
struct ReduceGeometry {
  int kept_rank = 0, red_rank = 0;
  int64_t out_dims[8] = {}, kept_strides[8] = {};
  int64_t red_dims[8] = {}, red_strides[8] = {};
  int64_t count = 1;
};

/// The input offset of the j-th element output o reduces.
MOSAIC_HD int64_t reduce_input_offset(const ReduceGeometry& g, int64_t o, int64_t j) {
  int64_t off = 0;
  for (int d = g.kept_rank - 1; d >= 0; --d) {
    off += (o % g.out_dims[d]) * g.kept_strides[d];
    o /= g.out_dims[d];
  }
  for (int d = g.red_rank - 1; d >= 0; --d) {
    off += (j % g.red_dims[d]) * g.red_strides[d];
    j /= g.red_dims[d];
  }
  return off;
}

/// What backward needs of a whole output's group besides y: Max and Min, how many elements
/// equal y (*s0: the gradient is split evenly between ties, torch.amax's rule); Prod, how
/// many are zero (*s0) and the product of the others (*s1: the product of the others is then
/// found without dividing by a zero). Nothing for the other rows.
MOSAIC_HD void dev_reduce_stats(DevReduce op, const ReduceGeometry& g, int64_t o, const float* x, float y, double* s0,
                                double* s1) {
  double a = 0, b = 1;
  if (op == DevReduce::kMax || op == DevReduce::kMin) {
    for (int64_t j = 0; j < g.count; ++j) a += x[reduce_input_offset(g, o, j)] == y ? 1 : 0;
  } else if (op == DevReduce::kProd) {
    for (int64_t j = 0; j < g.count; ++j) {
      const double v = x[reduce_input_offset(g, o, j)];
      if (v == 0) a += 1;
      else b *= v;
    }
  }
  *s0 = a;
  *s1 = b;
}

/// d(loss)/dx for one reduced element x of output y (incoming gradient dy) over `count`
/// elements, with the group's statistics (dev_reduce_stats): the rows' dx.
MOSAIC_HD float dev_reduce_grad(DevReduce op, float x, float y, float dy, double count, double s0, double s1) {
  const double g = dy;
  switch (op) {
    case DevReduce::kSum: return dy;
    case DevReduce::kMean: return static_cast<float>(g / count);
    case DevReduce::kMax:
    case DevReduce::kMin: return x == y && s0 > 0 ? static_cast<float>(g / s0) : 0.f;
    case DevReduce::kProd:
      if (x != 0) return s0 == 0 ? static_cast<float>(g * s1 / x) : 0.f;
      return s0 == 1 ? static_cast<float>(g * s1) : 0.f;
    case DevReduce::kL1: return x > 0 ? dy : x < 0 ? -dy : 0.f;
    case DevReduce::kL2: return y == 0 ? 0.f : static_cast<float>(g * x / y);
    case DevReduce::kLogSum: return static_cast<float>(g * exp(-static_cast<double>(y)));
    case DevReduce::kLogSumExp: return static_cast<float>(g * exp(static_cast<double>(x) - y));
    case DevReduce::kSumSquare: return static_cast<float>(2 * g * x);
  }
  return 0.f;
}

/// Backward of a reduction, an input element at a time: input element i (over `in_dims`,
/// outermost first) belongs to the output at sum of its coordinates times `out_strides`
/// (0 along the reduced axes).
struct ReduceBack {
  int rank = 0;
  int64_t in_dims[8] = {}, out_strides[8] = {};
};
MOSAIC_HD int64_t reduce_output_of(const ReduceBack& g, int64_t i) {
  int64_t o = 0;
  for (int d = g.rank - 1; d >= 0; --d) {
    o += (i % g.in_dims[d]) * g.out_strides[d];
    i /= g.in_dims[d];
  }
  return o;
}

// ---- a per-axis gather (Pad, Slice, Transpose) and its adjoint (Pad and Slice backward) ----

/// Output element o of a copy over up to 8 axes reads input element sum_d maps[d][o_d] *
/// strides[d], where o_d is o's index along output axis d; maps[d] (device memory) is nullptr
/// for the identity, and an entry of -1 reads the fill value. Pad and Slice are such per-axis
/// maps, Transpose permuted strides.
struct AxisGather {
  int rank = 0;
  int64_t out_dims[8] = {};
  int64_t strides[8] = {};
  const int64_t* maps[8] = {};
};

/// The input offset output element i reads, or -1 for the fill value.
MOSAIC_HD int64_t axis_gather_offset(const AxisGather& g, int64_t i) {
  int64_t offset = 0;
  bool inside = true;
  for (int d = g.rank - 1; d >= 0; --d) {
    const int64_t o = i % g.out_dims[d];
    i /= g.out_dims[d];
    const int64_t src = g.maps[d] ? g.maps[d][o] : o;
    if (src < 0) inside = false;
    offset += src * g.strides[d];
  }
  return inside ? offset : -1;
}


/// A gather over per-axis maps (output coordinate -> input coordinate, -1: the fill) read
/// backwards: dx element i (over `in_dims`, outermost first) adds up dy at every output
/// position whose coordinates each map to its own. Per axis, input coordinate c's output
/// coordinates are sources[d][offsets[d][c] .. offsets[d][c + 1]) (none: no gradient). Pad's
/// reflect and edge modes read an input coordinate several times; Slice and constant Pad
/// once or never.
struct AxisScatter {
  int rank = 0;
  int64_t in_dims[8] = {}, dy_strides[8] = {};
  const int64_t* offsets[8] = {};
  const int64_t* sources[8] = {};
};

MOSAIC_HD float axis_scatter_at(const AxisScatter& s, int64_t i, const float* dy) {
  int64_t lo[8], hi[8], at[8];
  for (int d = s.rank - 1; d >= 0; --d) {
    const int64_t c = i % s.in_dims[d];
    i /= s.in_dims[d];
    lo[d] = s.offsets[d][c];
    hi[d] = s.offsets[d][c + 1];
    if (lo[d] == hi[d]) return 0.f;
    at[d] = lo[d];
  }
  float sum = 0.f;
  for (;;) {  // every combination of the axes' output coordinates, the last axis fastest
    int64_t off = 0;
    for (int d = 0; d < s.rank; ++d) off += s.sources[d][at[d]] * s.dy_strides[d];
    sum += dy[off];
    int d = s.rank - 1;
    while (d >= 0 && ++at[d] == hi[d]) {
      at[d] = lo[d];
      --d;
    }
    if (d < 0) break;
  }
  return sum;
}

/// One axis's inverse lists (AxisScatter::offsets and sources) from its gather map
/// (`map[o]`: the input coordinate output coordinate o reads, -1 for the fill; empty: the
/// identity over `in_dim` coordinates); `offsets` gets in_dim + 1 entries.
template <class Vec>
void invert_axis_map(const Vec& map, int64_t in_dim, Vec& offsets, Vec& sources) {
  offsets.assign(static_cast<size_t>(in_dim) + 1, 0);
  sources.clear();
  if (map.empty()) {
    for (int64_t c = 0; c <= in_dim; ++c) offsets[static_cast<size_t>(c)] = c;
    for (int64_t c = 0; c < in_dim; ++c) sources.push_back(c);
    return;
  }
  for (int64_t c : map)
    if (c >= 0 && c < in_dim) ++offsets[static_cast<size_t>(c) + 1];
  for (int64_t c = 0; c < in_dim; ++c) offsets[static_cast<size_t>(c) + 1] += offsets[static_cast<size_t>(c)];
  sources.assign(static_cast<size_t>(offsets.back()), 0);
  Vec next(offsets.begin(), offsets.end() - 1);
  for (int64_t o = 0; o < static_cast<int64_t>(map.size()); ++o) {
    const int64_t c = map[static_cast<size_t>(o)];
    if (c >= 0 && c < in_dim) sources[static_cast<size_t>(next[static_cast<size_t>(c)]++)] = o;
  }
}

// ---- Gather (embedding lookups) ----

/// Gather along an axis: data [outer, axis, inner] (the axes before, the gathered one, those
/// after), `indices` of `count` elements; output element o is (outer row, index position j,
/// inner k).
struct GatherGeometry {
  int64_t outer = 1, axis = 1, inner = 1, count = 0;
};

/// Index position j's row of the gathered axis, wrapped as ONNX says (negative counts from
/// the end); -1 where it lies outside the axis.
MOSAIC_HD int64_t gather_row(const GatherGeometry& g, const int64_t* indices, int64_t j) {
  const int64_t i = indices[j] < 0 ? indices[j] + g.axis : indices[j];
  return i >= 0 && i < g.axis ? i : -1;
}

/// The data offset output element o reads, or -1 (its index lies outside the axis; *bad_j
/// is then its index position).
MOSAIC_HD int64_t gather_offset(const GatherGeometry& g, const int64_t* indices, int64_t o, int64_t* bad_j) {
  const int64_t k = o % g.inner;
  const int64_t j = (o / g.inner) % g.count;
  const int64_t row = o / (g.inner * g.count);
  const int64_t i = gather_row(g, indices, j);
  if (i < 0) {
    *bad_j = j;
    return -1;
  }
  return (row * g.axis + i) * g.inner + k;
}

/// How LayerNormalization's backward splits its rows for the parameters' gradients: `chunks`
/// chunks of `per` rows (the last may be shorter, none empty), at most 64 rows each unless
/// that would take more than 256 chunks; each chunk's sums are taken on their own, then the chunks' added in order
/// (deterministic, and enough blocks to fill the GPU where a thread per column would not).
struct LayerNormChunks {
  int64_t per = 1, chunks = 1;
};
MOSAIC_HD LayerNormChunks layer_norm_chunks(int64_t rows) {
  LayerNormChunks c;
  if (rows <= 0) return c;
  c.chunks = rows <= 64 ? 1 : (rows + 63) / 64;
  if (c.chunks > 256) c.chunks = 256;
  c.per = (rows + c.chunks - 1) / c.chunks;
  c.chunks = (rows + c.per - 1) / c.per;
  return c;
}

/// Chunk c's share of column j's parameter gradients: *ds = sum of dy xhat, *db = sum of dy
/// over its rows, xhat = (x - mean) inv_std from `stats` (mean, inverse deviation per row).
MOSAIC_HD void layer_norm_chunk_sums(const float* x, const float* dy, const float* stats, int64_t rows, int64_t cols,
                                     LayerNormChunks ch, int64_t c, int64_t j, float* ds, float* db) {
  const int64_t end = (c + 1) * ch.per < rows ? (c + 1) * ch.per : rows;
  float s = 0.f, b = 0.f;
  for (int64_t r = c * ch.per; r < end; ++r) {
    const float g = dy[r * cols + j];
    s += g * (x[r * cols + j] - stats[2 * r]) * stats[2 * r + 1];
    b += g;
  }
  *ds = s;
  *db = b;
}

/// The training losses' arithmetic (core/loss.cpp's, per element and per row): a row's arg-max
/// (the first of equal maxima) and maximum come from the caller; a term of its sum (cross-
/// entropy: exp(x - max), summed in double to the log-sum-exp; squared error: (x - onehot)^2);
/// the row's loss from the sum; and an element's gradient.
MOSAIC_HD double dev_loss_term(const LossRule& r, float x, float mx, bool is_label) {
  if (r.kind == LossRule::kCrossEntropy) return exp(static_cast<double>(x) - mx);
  const double diff = static_cast<double>(x) - (is_label ? 1.0 : 0.0);
  return diff * diff;
}
/// The row's log-sum-exp (cross-entropy; 0 for the squared error, which does not need it).
MOSAIC_HD double dev_loss_lse(const LossRule& r, double sum, float mx) {
  return r.kind == LossRule::kCrossEntropy ? mx + log(sum) : 0.0;
}
MOSAIC_HD double dev_loss_row(const LossRule& r, double sum, double lse, float x_label) {
  return r.kind == LossRule::kCrossEntropy ? lse - x_label : sum;
}
MOSAIC_HD float dev_loss_grad(const LossRule& r, float x, double lse, bool is_label) {
  if (r.kind == LossRule::kCrossEntropy) return static_cast<float>((exp(x - lse) - (is_label ? 1.0 : 0.0)) * r.scale);
  return static_cast<float>(2.0 * (static_cast<double>(x) - (is_label ? 1.0 : 0.0)) * r.scale);
}
/// One row on one thread, as the device's kernel computes it with a block: `x` the row's
/// logits, `d` its gradient (nullptr: none asked for).
MOSAIC_HD void dev_loss_row_serial(const LossRule& r, const float* x, int64_t label, float* d, double* loss, int32_t* hit) {
  if (label == r.ignore_index) {
    if (d)
      for (int64_t j = 0; j < r.classes; ++j) d[j] = 0.f;
    *loss = 0;
    *hit = 0;
    return;
  }
  int64_t arg = 0;
  for (int64_t j = 1; j < r.classes; ++j)
    if (x[j] > x[arg]) arg = j;
  const float mx = x[arg];
  double sum = 0;
  for (int64_t j = 0; j < r.classes; ++j) sum += dev_loss_term(r, x[j], mx, j == label);
  const double lse = dev_loss_lse(r, sum, mx);
  if (d)
    for (int64_t j = 0; j < r.classes; ++j) d[j] = dev_loss_grad(r, x[j], lse, j == label);
  *loss = dev_loss_row(r, sum, lse, x[label]);
  *hit = arg == label ? 1 : 0;
}

}  // namespace mosaic::cuda_backend
