// The cuda backend's arithmetic, checked on the host (any machine, GPU or not): its CUDA
// kernels call the functions of backends/cuda/device_math.hpp for every element, and their
// geometry comes from device_unary.hpp and device_geometry.hpp, so these tests run the
// kernels' own formulas and indexing against independent values: the rows of
// operators/eltwise.hpp and operators/reduce.hpp (the naive oracle's definitions) and plain
// loops over broadcast and gathered indices. What they cannot reach is the library calls
// (cuDNN, cuBLAS) and the launches; tests/test_cuda.cpp runs those on a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "backends/common/movement.hpp"
#include "backends/common/reduce.hpp"
#include "backends/cuda/device_geometry.hpp"
#include "backends/cuda/device_unary.hpp"
#include "core/loss.hpp"
#include "core/optimizer.hpp"
#include "core/plan.hpp"
#include "test_util.hpp"

namespace mosaic::cuda_backend {
namespace {
using test::random_tensor;
using test::test_domain;

bool close(double got, double want, double rel, double abs) {
  return std::fabs(got - want) <= abs + rel * std::fabs(want);
}

/// Every element-wise row the device computes: its value and its derivative in float against
/// the row's (double) at 401 points across the op's test domain and at 0 (kinks included),
/// with the arguments far from their defaults; and what the derivative reads against what the row's backward
/// reads (a plan frees the rest before backward).
TEST(CudaMath, UnaryFunctionsAndDerivativesAreTheRows) {
  int checked = 0;
  for (const UnaryOpInfo& row : kUnaryOps)
    for (bool tanh : {false, true}) {
      if (tanh && row.op != UnaryOp::kGelu) continue;
      UnaryArgs args;
      args.alpha = 0.2;
      args.beta = 0.6;
      args.gamma = 1.05;
      args.lo = -0.5;
      args.hi = 0.7;
      args.tanh = tanh;
      const auto dev = device_unary(row.op, args);
      if (!dev) continue;
      SCOPED_TRACE(std::string(row.name) + (tanh ? " (tanh)" : ""));
      EXPECT_EQ(dev_derivative_reads_input(dev->op), row.backward_reads_input);
      EXPECT_EQ(dev_derivative_reads_output(dev->op), row.backward_reads_output);
      const auto [lo, hi] = test_domain(row.name);
      std::vector<float> xs;
      for (int i = 0; i <= 400; ++i) xs.push_back(lo + (hi - lo) * static_cast<float>(i) / 400.f);
      if (lo < 0 && hi > 0) xs.push_back(0.f);
      for (float x : xs) {
        const double want_y = row.f(x, args);
        const float y = dev_apply(*dev, x);
        EXPECT_TRUE(close(y, want_y, 2e-6, 2e-6)) << row.name << "(" << x << ") = " << y << ", the row says " << want_y;
        // Kinks are compared too (PyTorch's choices there: Relu, Abs, Clip, HardSwish at
        // theirs), except HardSigmoid's, which its float arguments move by a rounding
        // (alpha x + beta at x = -3 is 0 in double, 1.5e-8 in float): its sides are covered.
        bool moved_kink = false;
        for (int k = 0; k < row.kinks; ++k)
          moved_kink = moved_kink || (row.op == UnaryOp::kHardSigmoid && std::fabs(x - row.kink(k, args)) < 1e-5);
        if (moved_kink) continue;
        const double want_d = row.df(x, want_y, args);
        const float d = dev_derivative(*dev, x, y);
        EXPECT_TRUE(close(d, want_d, 2e-5, 2e-5)) << row.name << "'(" << x << ") = " << d << ", the row says " << want_d;
      }
      ++checked;
    }
  EXPECT_EQ(checked, 22) << "the device's element-wise functions (21 rows, Gelu in both forms)";
}

/// Every binary row the device computes (device_binary, the one mapping its registration and
/// kernel read): its value and both operands' gradients against the row's at points of both
/// signs; the rows it has no form for are not registered.
TEST(CudaMath, BinaryFunctionsAndGradientsAreTheRows) {
  int checked = 0;
  for (const BinaryOpInfo& row : kBinaryOps) {
    const auto dev = device_binary(row.op);
    if (!dev) continue;
    SCOPED_TRACE(row.name);
    EXPECT_EQ(dev_binary_grad_reads_operands(*dev), row.backward_reads_inputs);
    for (float a : {-2.5f, -0.75f, 0.5f, 3.f})
      for (float b : {-1.5f, 0.25f, 2.f}) {
        const double y = row.f(a, b);
        EXPECT_TRUE(close(dev_combine(*dev, a, b), y, 1e-6, 1e-6)) << row.name << "(" << a << ", " << b << ")";
        const float g = 0.7f;
        EXPECT_TRUE(close(dev_binary_grad(*dev, 0, g, a, b), row.da(g, a, b, y), 1e-6, 1e-6)) << "da at " << a << ", " << b;
        EXPECT_TRUE(close(dev_binary_grad(*dev, 1, g, a, b), row.db(g, a, b, y), 1e-6, 1e-6)) << "db at " << a << ", " << b;
      }
    ++checked;
  }
  EXPECT_EQ(checked, 4) << "the device's binary ops (Add, Sub, Mul, Div; Pow has no device form)";
}

/// A plain numpy broadcast of operand shape `s` onto `out`: the operand's offset of output
/// element i.
int64_t broadcast_offset(const Shape& s, const Shape& out, int64_t i) {
  int64_t off = 0, step = 1;
  for (int d = static_cast<int>(out.size()) - 1, k = static_cast<int>(s.size()) - 1; d >= 0; --d, --k) {
    const int64_t c = i % out[d];
    i /= out[d];
    if (k >= 0) {
      if (s[k] != 1) off += c * step;
      step *= s[k];
    }
  }
  return off;
}

/// Each operand's gradient of Add, Sub, Mul and Div over broadcast shapes (both sides
/// broadcast, scalars, equal shapes, dimensions that merge), as the device sums it
/// (make_broadcast, make_grad_reduce, grad_reduce_term), against a loop over the output
/// adding the rows' da and db into the operands' elements.
TEST(CudaMath, BroadcastGradientsAreTheRowsSummed) {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{2, 3, 4}, {3, 1}}, {{2, 3}, {3}},      {{2, 3, 4}, {4}},          {{2, 3, 4}, {2, 3, 4}},
      {{3, 4}, {2, 3, 4}}, {{}, {2, 3}},       {{1, 5, 1, 3}, {4, 1, 2, 1}}, {{2, 1, 3, 1, 2}, {1, 4, 3, 5, 1}},
      {{6, 1}, {1, 70}},   {{64, 2, 2}, {1}}};
  const std::pair<BinaryOp, DevBinary> ops[] = {{BinaryOp::kAdd, DevBinary::kAdd},
                                                {BinaryOp::kSub, DevBinary::kSub},
                                                {BinaryOp::kMul, DevBinary::kMul},
                                                {BinaryOp::kDiv, DevBinary::kDiv}};
  uint64_t seed = 1;
  for (const auto& [sa, sb] : cases) {
    Shape out;
    const size_t rank = std::max(sa.size(), sb.size());
    for (size_t d = 0; d < rank; ++d) {
      const int64_t da = d + sa.size() >= rank ? sa[d + sa.size() - rank] : 1;
      const int64_t db = d + sb.size() >= rank ? sb[d + sb.size() - rank] : 1;
      out.push_back(std::max(da, db));
    }
    const Tensor a = random_tensor(sa, seed++), b = random_tensor(sb, seed++, 0.5f, 1.5f), dy = random_tensor(out, seed++);
    const Broadcast shape = make_broadcast(sa, sb, out);
    for (const auto& [host_op, dev_op] : ops) {
      SCOPED_TRACE(shape_str(sa) + " " + binary_info(host_op).name + " " + shape_str(sb));
      std::vector<double> want_a(static_cast<size_t>(a.numel()), 0.0), want_b(static_cast<size_t>(b.numel()), 0.0);
      for (int64_t i = 0; i < shape_numel(out); ++i) {
        const int64_t ia = broadcast_offset(sa, out, i), ib = broadcast_offset(sb, out, i);
        const float av = a.f32()[ia], bv = b.f32()[ib], g = dy.f32()[i];
        want_a[ia] += binary_grad_a(host_op, g, av, bv);
        want_b[ib] += binary_grad_b(host_op, g, av, bv);
        // The forward's indexing too: the collapsed shape reaches the same operand elements.
        int64_t rest = i, ca = 0, cb = 0;
        for (int d = shape.rank - 1; d >= 0; --d) {
          ca += (rest % shape.dims[d]) * shape.a_strides[d];
          cb += (rest % shape.dims[d]) * shape.b_strides[d];
          rest /= shape.dims[d];
        }
        ASSERT_EQ(ca, ia);
        ASSERT_EQ(cb, ib);
      }
      for (int which = 0; which < 2; ++which) {
        const GradReduce g = make_grad_reduce(shape, which);
        const std::vector<double>& want = which == 0 ? want_a : want_b;
        ASSERT_EQ(g.elements, static_cast<int64_t>(want.size()));
        ASSERT_EQ(g.elements * g.count, shape_numel(out));
        for (int64_t o = 0; o < g.elements; ++o) {
          float sum = 0.f;
          for (int64_t r = 0; r < g.count; ++r) sum += grad_reduce_term(dev_op, which, g, o, r, dy.f32(), a.f32(), b.f32());
          EXPECT_TRUE(close(sum, want[o], 1e-5, 1e-5)) << (which ? "db[" : "da[") << o << "] = " << sum << ", want " << want[o];
        }
      }
    }
  }
}

/// Every reduction's backward (dev_reduce_stats, dev_reduce_grad, reduce_back) against the
/// naive oracle's (backends/common/reduce.hpp), over several axis sets, with ties for Max and
/// Min and zeros for Prod (one and two in a group).
TEST(CudaMath, ReductionGradientsAreTheOraclesRules) {
  int checked = 0;
  const Shape in = {2, 3, 4};
  const std::vector<std::vector<int64_t>> axis_sets = {{0, 2}, {1}, {2}, {0, 1, 2}};
  for (const ReduceOpInfo& row : kReduceOps)
    for (const auto& axes : axis_sets) {
      SCOPED_TRACE(std::string(row.name) + " over " + std::to_string(axes.size()) + " axes from " + std::to_string(axes[0]));
      ReduceParams p;
      p.in = in;
      p.kept = in;
      p.axes = axes;
      p.count = 1;
      for (int64_t a : axes) {
        p.kept[a] = 1;
        p.count *= static_cast<double>(in[a]);
      }
      p.out = p.kept;
      Tensor x = random_tensor(in, 90 + static_cast<uint64_t>(row.op), row.op == ReduceOp::kLogSum ? 0.1f : -1.f, 1.f);
      float* xv = x.f32();
      if (row.selects) xv[5] = xv[6] = xv[7] = row.op == ReduceOp::kMax ? 2.f : -2.f;  // ties
      if (row.op == ReduceOp::kProd) {
        xv[0] = 0.f;             // one zero
        xv[13] = xv[14] = 0.f;   // two
      }
      const int64_t n_out = shape_numel(p.kept);
      std::vector<float> y(static_cast<size_t>(n_out)), want(static_cast<size_t>(x.numel()));
      reduce_forward(row, p, xv, y.data());
      const Tensor dy = random_tensor(p.kept, 7);
      reduce_backward(row, p, xv, y.data(), dy.f32(), want.data());
      const ReduceGeometry g = reduce_geometry(p);
      const ReduceBack back = reduce_back(p);
      const auto mapped = device_reduce(row.op);
      if (!mapped) continue;  // not registered on cuda
      const DevReduce op = *mapped;
      ++checked;
      std::vector<double> stats(2 * static_cast<size_t>(n_out));
      for (int64_t o = 0; o < n_out; ++o) dev_reduce_stats(op, g, o, xv, y[o], &stats[2 * o], &stats[2 * o + 1]);
      for (int64_t i = 0; i < x.numel(); ++i) {
        const int64_t o = reduce_output_of(back, i);
        ASSERT_LT(o, n_out);
        const float got = dev_reduce_grad(op, xv[i], y[o], dy.f32()[o], static_cast<double>(g.count), stats[2 * o],
                                          stats[2 * o + 1]);
        EXPECT_TRUE(close(got, want[i], 1e-5, 1e-6)) << "dx[" << i << "] = " << got << ", the oracle says " << want[i];
      }
    }
  EXPECT_EQ(checked, 10 * 4) << "the device's reductions (every row of operators/reduce.hpp) over four axis sets";
}

/// Pad (constant with a crop, reflect, edge) and Slice (steps, a reversed axis) backward
/// through the inverse lists (invert_axis_map, axis_scatter_at) against a loop over the
/// output adding dy into the element each output position copied.
TEST(CudaMath, PadAndSliceGradientsGoBackThroughTheirMaps) {
  struct Case {
    std::string label;
    Shape in, out;
    AxisMaps maps;
  };
  std::vector<Case> cases;
  const Shape in = {2, 3, 5};
  for (const char* mode : {"constant", "reflect", "edge"}) {
    PadParams p;
    p.mode = mode;
    p.pads = {0, 2, 1, 1, std::string(mode) == "constant" ? -1 : 2, 3};  // begins, then ends
    Shape out;
    for (size_t d = 0; d < in.size(); ++d) out.push_back(in[d] + p.pads[d] + p.pads[d + in.size()]);
    cases.push_back({std::string("pad ") + mode, in, out, pad_axis_maps(p, in, out)});
  }
  // Slice [:, ::-1, 1:5:2] written as maps: axis 0 whole (identity), 1 reversed, 2 every other.
  cases.push_back({"slice", in, {2, 3, 2}, {{}, {2, 1, 0}, {1, 3}}});
  for (const Case& c : cases) {
    SCOPED_TRACE(c.label);
    const Tensor dy = random_tensor(c.out, 11);
    std::vector<double> want(static_cast<size_t>(shape_numel(c.in)), 0.0);
    const std::vector<int64_t> in_strides = row_major_strides(c.in);
    for (int64_t o = 0; o < shape_numel(c.out); ++o) {
      int64_t rest = o, off = 0;
      bool inside = true;
      for (int d = static_cast<int>(c.out.size()) - 1; d >= 0; --d) {
        const int64_t k = rest % c.out[d];
        rest /= c.out[d];
        const int64_t src = static_cast<size_t>(d) < c.maps.size() && !c.maps[d].empty() ? c.maps[d][k] : k;
        if (src < 0) inside = false;
        off += src * in_strides[d];
      }
      if (inside) want[off] += dy.f32()[o];
    }
    std::vector<std::vector<int64_t>> offsets(c.in.size()), sources(c.in.size());
    AxisScatter s;
    s.rank = static_cast<int>(c.in.size());
    const std::vector<int64_t> dy_strides = row_major_strides(c.out);
    for (size_t d = 0; d < c.in.size(); ++d) {
      invert_axis_map(d < c.maps.size() ? c.maps[d] : std::vector<int64_t>{}, c.in[d], offsets[d], sources[d]);
      s.in_dims[d] = c.in[d];
      s.dy_strides[d] = dy_strides[d];
      s.offsets[d] = offsets[d].data();
      s.sources[d] = sources[d].data();
    }
    for (int64_t i = 0; i < shape_numel(c.in); ++i) {
      const float got = axis_scatter_at(s, i, dy.f32());
      EXPECT_TRUE(close(got, want[i], 1e-6, 1e-6)) << "dx[" << i << "] = " << got << ", want " << want[i];
    }
  }
}

/// Gather's index arithmetic (gather_offset, gather_row) against the host's loop: rows of a
/// [2, 5, 3] table (axis 1) by ids with negative ones, every output element's source; and an
/// id outside the axis reported at its position, on either side.
TEST(CudaMath, GatherReadsTheRowsTheHostReadsAndReportsIdsOutsideTheAxis) {
  GatherGeometry g;
  g.outer = 2;
  g.axis = 5;
  g.inner = 3;
  const std::vector<int64_t> ids = {0, 4, -1, 2, -5, 3};
  g.count = static_cast<int64_t>(ids.size());
  int64_t o = 0;
  for (int64_t row = 0; row < g.outer; ++row)
    for (int64_t j = 0; j < g.count; ++j)
      for (int64_t k = 0; k < g.inner; ++k, ++o) {
        const int64_t i = ids[j] < 0 ? ids[j] + g.axis : ids[j];
        int64_t bad = -1;
        EXPECT_EQ(gather_offset(g, ids.data(), o, &bad), (row * g.axis + i) * g.inner + k) << o;
        EXPECT_EQ(bad, -1) << o;
      }
  for (int64_t wrong : {int64_t{5}, int64_t{-6}, int64_t{1} << 40}) {
    std::vector<int64_t> with = ids;
    with[4] = wrong;
    int64_t bad = -1;
    EXPECT_EQ(gather_offset(g, with.data(), 2 * g.count * g.inner - 2 * g.inner + 1, &bad), -1) << wrong;
    EXPECT_EQ(bad, 4) << wrong;
    EXPECT_EQ(gather_row(g, with.data(), 4), -1) << wrong;
  }
}

/// The device's optimizer step on a resident parameter (dev_optimizer_update) against the
/// host's optimizers (core/optimizer.cpp, PyTorch's rules): SGD plain, with momentum and
/// dampening, with Nesterov momentum; Adam and AdamW; weight decay in each, four steps.
TEST(CudaMath, TheDevicesOptimizerStepsAreTheOptimizers) {
  struct Case {
    const char* name;
    double momentum, dampening;
    bool nesterov;
  };
  for (const Case& c : {Case{"sgd", 0, 0, false}, Case{"sgd", 0.9, 0.1, false}, Case{"sgd", 0.8, 0, true},
                        Case{"adam", 0, 0, false}, Case{"adamw", 0, 0, false}}) {
    SCOPED_TRACE(std::string(c.name) + " momentum " + std::to_string(c.momentum) + (c.nesterov ? " nesterov" : ""));
    OptimizerConfig config;
    config.lr = 0.05;
    config.weight_decay = 0.02;
    config.momentum = c.momentum;
    config.dampening = c.dampening;
    config.nesterov = c.nesterov;
    auto opt = make_optimizer(c.name, config);
    ASSERT_TRUE(opt.ok()) << opt.status().to_string();
    Tensor host = random_tensor({37}, 31);
    std::vector<float> p(host.f32(), host.f32() + host.numel()), s0(p.size(), 0.f), s1(p.size(), 0.f);
    OptimizerRule o;
    o.kind = c.name[0] == 'a' ? OptimizerRule::kAdam : OptimizerRule::kSgd;
    o.decoupled = std::string(c.name) == "adamw";
    o.lr = config.lr;
    o.weight_decay = config.weight_decay;
    o.momentum = c.momentum;
    o.dampening = c.dampening;
    o.nesterov = c.nesterov;
    for (int step = 1; step <= 4; ++step) {
      const Tensor grad = random_tensor({37}, 40 + static_cast<uint64_t>(step));
      std::vector<ParamRef> params{{"w", host, grad}};
      ASSERT_TRUE(opt.value()->step(params).is_ok());
      o.step = step;
      for (size_t i = 0; i < p.size(); ++i) dev_optimizer_update(o, &p[i], grad.f32()[i], &s0[i], &s1[i]);
      for (int64_t i = 0; i < host.numel(); ++i) ASSERT_FLOAT_EQ(p[i], host.f32()[i]) << "step " << step << ", " << i;
    }
  }
}

/// Every output element of a gather (axis_gather_offset) over `g`, from x.
std::vector<float> gather_all(const AxisGather& g, const float* x, int64_t n) {
  std::vector<float> y(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t at = axis_gather_offset(g, i);
    y[static_cast<size_t>(i)] = at >= 0 ? x[at] : 0.f;
  }
  return y;
}

/// Transpose (transpose_gather) against a loop over the input's coordinates, and its
/// backward (transpose_back_gather) taking the result back to the input.
TEST(CudaMath, TransposeAndItsBackwardAreInversePermutations) {
  const Shape in = {2, 3, 4, 5};
  const Tensor x = random_tensor(in, 21);
  for (const std::vector<int64_t>& perm :
       {std::vector<int64_t>{0, 2, 3, 1}, std::vector<int64_t>{3, 2, 1, 0}, std::vector<int64_t>{1, 0, 3, 2}}) {
    SCOPED_TRACE(std::to_string(perm[0]) + std::to_string(perm[1]) + std::to_string(perm[2]) + std::to_string(perm[3]));
    Shape out;
    for (int64_t a : perm) out.push_back(in[a]);
    const std::vector<float> y = gather_all(transpose_gather(in, perm), x.f32(), x.numel());
    const std::vector<int64_t> in_strides = row_major_strides(in), out_strides = row_major_strides(out);
    for (int64_t i = 0; i < x.numel(); ++i) {  // input element i lands where its permuted coordinates say
      int64_t o = 0;
      for (size_t d = 0; d < perm.size(); ++d) o += (i / in_strides[perm[d]] % in[perm[d]]) * out_strides[d];
      ASSERT_EQ(y[o], x.f32()[i]) << i;
    }
    const std::vector<float> back = gather_all(transpose_back_gather(in, perm), y.data(), x.numel());
    for (int64_t i = 0; i < x.numel(); ++i) ASSERT_EQ(back[i], x.f32()[i]) << i;
  }
}

/// A convolution's explicit padding (pads differing between an axis's ends): the padded
/// buffer holds x at the pads' offsets and zeros around it, and the crop takes the padded
/// gradient back to x's shape, element for element.
TEST(CudaMath, ExplicitPaddingPlacesTheInputAndCropsItsGradientBack) {
  const Shape in = {2, 3, 5, 4};
  const Tensor x = random_tensor(in, 22);
  Window w;
  w.in = {5, 4};
  w.kernel = {3, 3};
  w.stride = {2, 2};
  w.dilation = {1, 1};
  w.pad_begin = {0, 2};
  w.pad_end = {1, 1};
  auto e = explicit_pad(in, w, "conv");
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  EXPECT_EQ(e.value().padded, (Shape{2, 3, 6, 7}));
  EXPECT_EQ(w.pad_begin, (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(w.pad_end, (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(w.in, (std::vector<int64_t>{6, 7}));
  std::vector<std::vector<int64_t>> pad_maps = e.value().pad, crop_maps = e.value().crop;
  auto geometry = [](const Shape& out, const Shape& from, const AxisMaps& maps) {
    AxisGather g;
    g.rank = static_cast<int>(out.size());
    const std::vector<int64_t> strides = row_major_strides(from);
    for (size_t d = 0; d < out.size(); ++d) {
      g.out_dims[d] = out[d];
      g.strides[d] = strides[d];
      g.maps[d] = maps[d].empty() ? nullptr : maps[d].data();
    }
    return g;
  };
  const Shape& padded = e.value().padded;
  const std::vector<float> p = gather_all(geometry(padded, in, pad_maps), x.f32(), shape_numel(padded));
  const std::vector<int64_t> ps = row_major_strides(padded), xs = row_major_strides(in);
  for (int64_t i = 0; i < shape_numel(padded); ++i) {
    const int64_t n = i / ps[0], c = i / ps[1] % 3, h = i / ps[2] % 6 - 0, wd = i % 7 - 2;
    const bool inside = h >= 0 && h < 5 && wd >= 0 && wd < 4;
    ASSERT_EQ(p[i], inside ? x.f32()[n * xs[0] + c * xs[1] + h * xs[2] + wd] : 0.f) << i;
  }
  const std::vector<float> back = gather_all(geometry(in, padded, crop_maps), p.data(), x.numel());
  for (int64_t i = 0; i < x.numel(); ++i) ASSERT_EQ(back[i], x.f32()[i]) << i;
  Window negative = w;
  negative.pad_begin = {-1, 0};
  EXPECT_FALSE(explicit_pad(in, negative, "conv").ok());
}

/// LayerNormalization's parameter gradients as the device splits them: the chunks cover every
/// row once (none empty, at most 256, at most 64 rows each below that cap), and the chunks'
/// sums added in order are the column sums over every row, dscale = sum dy xhat and
/// dbias = sum dy, taken here in double from the rows' own statistics.
TEST(CudaMath, LayerNormParameterGradientsAreTheColumnSumsOverEveryRow) {
  for (int64_t rows : {1, 2, 63, 64, 65, 129, 1000, 8192, 16385, 100000, 1000003}) {
    const LayerNormChunks ch = layer_norm_chunks(rows);
    EXPECT_GE(ch.chunks, 1) << rows;
    EXPECT_LE(ch.chunks, 256) << rows;
    EXPECT_GE(ch.chunks * ch.per, rows) << rows;
    EXPECT_LT((ch.chunks - 1) * ch.per, rows) << rows << ": the last chunk is not empty";
    if ((rows + 63) / 64 <= 256) {  // 64 rows a chunk fit in 256 chunks
      EXPECT_LE(ch.per, 64) << rows;
    }
  }
  const int64_t rows = 300, cols = 7;
  const Tensor x = random_tensor({rows, cols}, 31), dy = random_tensor({rows, cols}, 32);
  std::vector<float> stats(2 * rows);
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t j = 0; j < cols; ++j) mean += x.f32()[r * cols + j];
    mean /= cols;
    for (int64_t j = 0; j < cols; ++j) var += std::pow(x.f32()[r * cols + j] - mean, 2);
    stats[2 * r] = static_cast<float>(mean);
    stats[2 * r + 1] = static_cast<float>(1 / std::sqrt(var / cols + 1e-5));
  }
  const LayerNormChunks ch = layer_norm_chunks(rows);
  ASSERT_GT(ch.chunks, 1);
  for (int64_t j = 0; j < cols; ++j) {
    float ds = 0, db = 0;
    for (int64_t c = 0; c < ch.chunks; ++c) {
      float s = 0, b = 0;
      layer_norm_chunk_sums(x.f32(), dy.f32(), stats.data(), rows, cols, ch, c, j, &s, &b);
      ds += s;
      db += b;
    }
    double want_s = 0, want_b = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const double g = dy.f32()[r * cols + j];
      want_s += g * (x.f32()[r * cols + j] - stats[2 * r]) * stats[2 * r + 1];
      want_b += g;
    }
    EXPECT_TRUE(close(ds, want_s, 1e-5, 1e-5)) << "dscale " << j << ": " << ds << " vs " << want_s;
    EXPECT_TRUE(close(db, want_b, 1e-5, 1e-5)) << "dbias " << j << ": " << db << " vs " << want_b;
  }
}

/// The training losses as the device computes a row (dev_loss_row_serial, the arithmetic its
/// kernel's block runs): the rows' losses summed and scaled, the hits and every gradient are
/// core/loss.cpp's softmax_cross_entropy and mse_one_hot, with ignored rows, ties for the
/// maximum (the first counts) and a row whose label holds the maximum.
TEST(CudaMath, TheLossRowsAreTheHostsLosses) {
  const int64_t rows = 37, classes = 11;
  Tensor logits = random_tensor({rows, classes}, 41);
  std::vector<int64_t> ids(rows);
  for (int64_t r = 0; r < rows; ++r) ids[r] = (r * 7) % classes;
  ids[3] = ids[20] = kIgnoreIndex;
  for (int64_t j = 0; j < classes; ++j) logits.f32()[5 * classes + j] = 0.25f;  // all tied: the first is the arg-max
  logits.f32()[6 * classes + 2] = logits.f32()[6 * classes + 9] = 9.f;          // two tied maxima
  ids[6] = 9;
  logits.f32()[7 * classes + ids[7]] = 5.f;  // the label holds the maximum
  const Tensor labels = Tensor::from_i64({rows}, ids);
  for (const std::string name : {"cross-entropy", "mse"}) {
    SCOPED_TRACE(name);
    Tensor want_d = Tensor::empty({DType::kF32, {rows, classes}});
    auto want = class_loss(name, logits, labels, &want_d);
    ASSERT_TRUE(want.ok()) << want.status().to_string();
    int64_t counted = 0;
    auto rule = loss_rule(name, logits.shape(), labels, &counted);
    ASSERT_TRUE(rule.ok()) << rule.status().to_string();
    EXPECT_EQ(counted, rows - 2);
    std::vector<float> d(rows * classes, 7.f);
    double total = 0;
    int64_t hits = 0;
    for (int64_t r = 0; r < rows; ++r) {
      double loss = -1;
      int32_t hit = -1;
      dev_loss_row_serial(rule.value(), logits.f32() + r * classes, ids[r], d.data() + r * classes, &loss, &hit);
      total += loss;
      hits += hit;
      if (r == 5 || r == 6) {
        EXPECT_EQ(hit, 0) << "ties go to the first maximum (not the label), row " << r;
      }
      if (r == 7) {
        EXPECT_EQ(hit, 1);
      }
    }
    EXPECT_TRUE(close(total * rule->scale, want->loss, 1e-12, 1e-12)) << total * rule->scale << " vs " << want->loss;
    EXPECT_EQ(hits, want->correct);
    for (int64_t i = 0; i < rows * classes; ++i)
      ASSERT_TRUE(close(d[i], want_d.f32()[i], 1e-6, 1e-9)) << i << ": " << d[i] << " vs " << want_d.f32()[i];
  }
  int64_t counted = 0;
  const auto bad = loss_rule("cross-entropy", logits.shape(), Tensor::from_i64({rows}, std::vector<int64_t>(rows, 11)), &counted);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("label 11 (element 0) outside [0, 11)"), std::string::npos) << bad.status().to_string();
  EXPECT_FALSE(loss_rule("hinge", logits.shape(), labels, &counted).ok());
}

}  // namespace
}  // namespace mosaic::cuda_backend
