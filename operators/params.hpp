// Typed views of ONNX attributes, shared by shape inference, FLOP counting and every
// backend's kernels, so all of them agree on what a node means.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "core/graph.hpp"
#include "core/kernel.hpp"
#include "core/status.hpp"

namespace mosaic {

/// N-d sliding-window geometry (Conv, MaxPool, AveragePool), auto_pad resolved.
struct Window {
  std::vector<int64_t> in, out, kernel, stride, dilation, pad_begin, pad_end;
  size_t rank() const { return in.size(); }
  int64_t in_size() const;
  int64_t out_size() const;
  int64_t kernel_size() const;
};

/// Resolves strides/pads/dilations/auto_pad (and ceil_mode for pooling) for a node.
Expected<Window> make_window(const Node& node, const Shape& in_spatial, const std::vector<int64_t>& kernel,
                             bool ceil_mode);

/// A fused activation ("mosaic.activation" set by the fusion pass) applied to a Conv or
/// Gemm output: none, Relu, LeakyRelu(alpha) or Clip(lo, hi).
struct Activation {
  enum class Kind { kNone, kRelu, kLeakyRelu, kClip } kind = Kind::kNone;
  float alpha = 0.f, lo = 0.f, hi = 0.f;
  bool active() const { return kind != Kind::kNone; }
  float apply(float v) const {
    switch (kind) {
      case Kind::kNone: return v;
      case Kind::kRelu: return v > 0.f ? v : 0.f;
      case Kind::kLeakyRelu: return v >= 0.f ? v : alpha * v;
      case Kind::kClip: return v < lo ? lo : (v > hi ? hi : v);
    }
    return v;
  }
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
Expected<ConvParams> conv_params(const KernelContext& ctx);

struct PoolParams {
  int64_t n = 0, c = 0;
  Window win;
  bool ceil_mode = false;
  bool count_include_pad = false;
  int64_t storage_order = 0;
};
/// For MaxPool/AveragePool; Global* pools are expressed as a window over the whole input.
Expected<PoolParams> pool_params(const KernelContext& ctx);

struct GemmParams {
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  float alpha = 1.f, beta = 1.f;
  bool has_c = false;
};
Expected<GemmParams> gemm_params(const KernelContext& ctx);

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

struct PadParams {
  std::string mode = "constant";
  std::vector<int64_t> pads;  ///< [begin_0..begin_r-1, end_0..end_r-1]
  float value = 0.f;
  bool value_at_run_time = false;  ///< constant_value is a run-time input (read from src[2])
};
/// Needs the pads (and value) input to be constant for opset >= 11.
Expected<PadParams> pad_params(const KernelContext& ctx);

struct ClipParams {
  float lo, hi;
};
/// Bounds from attributes (opset < 11) or constant inputs; missing bounds are +-inf.
/// Runtime (non-constant) bounds are read from src by the kernels.
ClipParams clip_attr_params(const KernelContext& ctx);

/// Softmax/LogSoftmax viewed as [outer, axis, inner] (opset < 13 coerces to 2-D).
struct SoftmaxParams {
  int64_t outer = 1, axis_dim = 1, inner = 1;
};
Expected<SoftmaxParams> softmax_params(const KernelContext& ctx);

struct LrnParams {
  int64_t size = 1;
  float alpha = 1e-4f, beta = 0.75f, bias = 1.f;
};
Expected<LrnParams> lrn_params(const KernelContext& ctx);

/// Transpose permutation (default: reversed axes), validated.
Expected<std::vector<int64_t>> transpose_perm(const KernelContext& ctx);

/// Slice resolved per input axis as {start, step, output length} (clamped as ONNX specifies).
Expected<std::vector<std::array<int64_t, 3>>> slice_ranges(const KernelContext& ctx);

}  // namespace mosaic
