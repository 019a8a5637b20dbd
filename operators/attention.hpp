// FusedAttention (domain "mosaic"), defined once: softmax(S + mask) V with S = Q Kt * scale
// (or / scale) over the last two axes. It is the scaled dot-product attention PyTorch
// exports as MatMul -> Div|Mul -> [Add mask] -> Softmax(last axis) -> MatMul, which
// core/fuse_attention.cpp rewrites into this node for backends that have a fused kernel.
//
// Inputs: Q [..., Tq, d], Kt [..., d, Tk] (K already transposed, as exported), V [..., Tk,
// dv], optional mask (float, numpy-broadcastable to [..., Tq, Tk]). Q, Kt and V share
// their leading axes. Output [..., Tq, dv]. Attributes: scale (float, default 1) and
// divide (int: 1 divides S by scale, as the exported Div does; 0 multiplies).
// The arithmetic is backends/common/attention.hpp.
#pragma once

#include <cstdint>
#include <vector>

#include "ir/status.hpp"
#include "operators/op_context.hpp"

namespace mosaic {

/// The op type and domain of the fused node.
inline constexpr const char* kAttentionOp = "FusedAttention";
inline constexpr const char* kAttentionDomain = "mosaic";

struct AttentionParams {
  int64_t batch = 1;  ///< matrices: the product of the leading axes
  int64_t tq = 0, tk = 0, d = 0, dv = 0;
  float scale = 1.f;
  bool divide = false;
  bool has_mask = false;
  /// The mask element of (matrix b, row i, column j) is mask_offset[b] + i * mask_row +
  /// j * mask_col (0 strides where the mask is broadcast).
  std::vector<int64_t> mask_offset;
  int64_t mask_row = 0, mask_col = 0;
  Shape out;
  /// S's element after scaling: s * scale or s / scale.
  float scaled(float s) const { return divide ? s / scale : s * scale; }
};

/// Checks the node (shapes, dtypes, attributes) and computes its sizes.
Expected<AttentionParams> attention_params(const OpContext& ctx);
Expected<std::vector<TensorDesc>> infer_attention(const OpContext& ctx);
/// The unfused ops' FLOPs summed (two MatMuls, the scale, the mask add, Softmax), so a
/// fused graph counts what the graph as loaded counts.
double attention_flops(const OpContext& ctx);

}  // namespace mosaic
