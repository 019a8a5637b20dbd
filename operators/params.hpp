// Typed views of ONNX attributes, shared by shape inference, FLOP counting and every
// backend's kernels, so all of them agree on what a node means.
#pragma once

#include <algorithm>
#include <array>
#include <optional>
#include <string>
#include <vector>

#include "ir/graph.hpp"
#include "operators/eltwise.hpp"
#include "operators/op_context.hpp"
#include "ir/status.hpp"

namespace mosaic {

/// N-d sliding-window geometry (Conv, MaxPool, AveragePool), auto_pad resolved.
struct Window {
  std::vector<int64_t> in, out, kernel, stride, dilation, pad_begin, pad_end;
  size_t rank() const { return in.size(); }
  int64_t in_size() const;
  int64_t out_size() const;
  int64_t kernel_size() const;
};

/// A window geometry with exactly 3 spatial axes (missing leading axes have size 1), so that
/// loops over 1-, 2- and 3-d windows share one code path.
struct Window3 {
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, k[3] = {1, 1, 1}, s[3] = {1, 1, 1}, d[3] = {1, 1, 1},
          pb[3] = {0, 0, 0}, pe[3] = {0, 0, 0};
  Window3() = default;
  /// Lifts a window of rank 1-3 (the caller has checked the rank; lift_window3 checks it).
  explicit Window3(const Window& w);
  int64_t in_size() const { return in[0] * in[1] * in[2]; }
  int64_t out_size() const { return out[0] * out[1] * out[2]; }
  /// Window cells inside input + padding: the PyTorch/ONNX divisor with count_include_pad.
  int64_t padded_cells(int64_t o0, int64_t o1, int64_t o2) const {
    const int64_t o[3] = {o0, o1, o2};
    int64_t n = 1;
    for (int a = 0; a < 3; ++a) {
      const int64_t start = o[a] * s[a] - pb[a];
      const int64_t end = std::min(start + (k[a] - 1) * d[a] + 1, in[a] + pe[a]);
      n *= (end - start + d[a] - 1) / d[a];
    }
    return n;
  }
  /// Calls f(offset) for each cell of output (o0, o1, o2)'s window that lies inside the
  /// input, in window order (offsets into one input plane/volume).
  template <class F>
  void each_cell(int64_t o0, int64_t o1, int64_t o2, F&& f) const {
    for (int64_t a = 0; a < k[0]; ++a) {
      const int64_t i0 = o0 * s[0] - pb[0] + a * d[0];
      if (i0 < 0 || i0 >= in[0]) continue;
      for (int64_t b = 0; b < k[1]; ++b) {
        const int64_t i1 = o1 * s[1] - pb[1] + b * d[1];
        if (i1 < 0 || i1 >= in[1]) continue;
        for (int64_t c = 0; c < k[2]; ++c) {
          const int64_t i2 = o2 * s[2] - pb[2] + c * d[2];
          if (i2 >= 0 && i2 < in[2]) f((i0 * in[1] + i1) * in[2] + i2);
        }
      }
    }
  }
};
/// Lifts a 1-3-d window; other ranks are unsupported (the message names the node).
Expected<Window3> lift_window3(const Window& w, const Node& node);

/// Resolves strides/pads/dilations/auto_pad (and ceil_mode for pooling) for a node.
Expected<Window> make_window(const Node& node, const Shape& in_spatial, const std::vector<int64_t>& kernel,
                             bool ceil_mode);

/// A fused activation ("mosaic.activation" set by the fusion pass, core/fuse.cpp) applied to a
/// Conv or Gemm output: an element-wise op of the table (operators/eltwise.hpp) with its
/// attributes, or none.
struct Activation {
  std::optional<UnaryOp> op;
  UnaryArgs args;
  bool active() const { return op.has_value(); }
  float apply(float v) const { return op ? unary_forward(*op, v, args) : v; }
  void apply(float* data, int64_t n) const {
    if (active())
      for (int64_t i = 0; i < n; ++i) data[i] = apply(data[i]);
  }
};
Activation fused_activation(const Node& node);

struct ConvParams {
  int64_t n = 0, c = 0, oc = 0, group = 1;
  Window win;
  bool has_bias = false;
  int64_t c_per_group() const { return c / group; }
  int64_t oc_per_group() const { return oc / group; }
};
Expected<ConvParams> conv_params(const OpContext& ctx);

struct PoolParams {
  int64_t n = 0, c = 0;
  Window win;
  bool ceil_mode = false;
  bool count_include_pad = false;
  int64_t storage_order = 0;
};
/// For MaxPool/AveragePool; Global* pools are expressed as a window over the whole input.
Expected<PoolParams> pool_params(const OpContext& ctx);

struct GemmParams {
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  float alpha = 1.f, beta = 1.f;
  bool has_c = false;
};
Expected<GemmParams> gemm_params(const OpContext& ctx);

/// numpy-style matmul: out = batch... x M x N.
struct MatMulParams {
  Shape out;
  Shape batch;                   ///< broadcast batch dims
  Shape a_batch, b_batch;        ///< operands' batch dims padded to batch.size()
  int64_t m = 0, n = 0, k = 0;
  bool a_is_vector = false, b_is_vector = false;
};
Expected<MatMulParams> matmul_params(const Shape& a, const Shape& b);

/// Multidirectional (numpy) broadcast of two shapes.
Expected<Shape> broadcast_shapes(const Shape& a, const Shape& b);
/// Normalises a possibly negative axis into [0, rank).
Expected<int64_t> normalize_axis(int64_t axis, int64_t rank, const Node& node);
/// An ints attribute of exactly `count` values, each in [lo, 2^31 - 1]; `def` each where the
/// node has none (strides, dilations, pads of the windowed ops that read no Window).
Expected<std::vector<int64_t>> bounded_ints(const Node& node, const char* name, int64_t def, int64_t lo, size_t count);

struct PadParams {
  std::string mode = "constant";
  std::vector<int64_t> pads;  ///< [begin_0..begin_r-1, end_0..end_r-1]
  float value = 0.f;
  bool value_at_run_time = false;  ///< constant_value is a run-time input (read from src[2])
};
/// Needs the pads (and value) input to be constant for opset >= 11.
Expected<PadParams> pad_params(const OpContext& ctx);

struct ClipParams {
  float lo, hi;
};
/// Bounds from attributes (opset < 11) or constant inputs; missing bounds are +-inf.
/// Runtime (non-constant) bounds are read from src by the kernels.
ClipParams clip_attr_params(const OpContext& ctx);

/// Softmax/LogSoftmax viewed as [outer, axis, inner] (opset < 13 coerces to 2-D).
struct SoftmaxParams {
  int64_t outer = 1, axis_dim = 1, inner = 1;
};
Expected<SoftmaxParams> softmax_params(const OpContext& ctx);

/// LayerNormalization (opset 17): each of `outer` rows of `inner` elements (the axes from
/// `axis` on) is normalised by its mean and variance, then scaled and shifted per element
/// of the row. Scale and B must have `inner` elements (PyTorch's normalized_shape).
struct LayerNormParams {
  int64_t outer = 1, inner = 1, axis = 0;
  float epsilon = 1e-5f;
  bool has_bias = false;
  Shape stats;  ///< the shape of the Mean and InvStdDev outputs: X's up to axis, then 1s
};
Expected<LayerNormParams> layer_norm_params(const OpContext& ctx);

/// BatchNormalization over X = [batch, channels, spatial...], as every backend, gradcheck's
/// reference and the Conv fold read it. Training updates the running statistics with ONNX's
/// momentum: running = momentum * running + (1 - momentum) * batch (PyTorch's momentum is
/// 1 - this).
struct BatchNormParams {
  int64_t batch = 1, channels = 1, spatial = 1;
  float epsilon = 1e-5f, momentum = 0.9f;
};
BatchNormParams batch_norm_params(const Node& node, const Shape& x);

struct LrnParams {
  int64_t size = 1;
  float alpha = 1e-4f, beta = 0.75f, bias = 1.f;
};
Expected<LrnParams> lrn_params(const OpContext& ctx);

/// Transpose permutation (default: reversed axes), validated.
Expected<std::vector<int64_t>> transpose_perm(const OpContext& ctx);

/// Split: the axis and each output's length along it, from the `split` input (opset 13+,
/// a constant) or attribute, else num_outputs (opset 18: ceil(d / n) each, the last the
/// rest), else equal parts (the axis must divide evenly). The lengths sum to the axis.
struct SplitParams {
  int64_t axis = 0;
  std::vector<int64_t> sizes;
};
Expected<SplitParams> split_params(const OpContext& ctx);

/// Slice resolved per input axis as {start, step, output length} (clamped as ONNX specifies).
Expected<std::vector<std::array<int64_t, 3>>> slice_ranges(const OpContext& ctx);

}  // namespace mosaic
