// A convolution on a map no larger than its kernel as one dense matrix product, shared by the
// CPU backends (onednn in NHWC, im2col in NCHW). On such a map every output pixel reads every
// input pixel through exactly one tap, so the layer is a linear map from the input's
// (pixel, channel) vector to the output's: Y[N, out] = X[N, in] x W', W' built once from the
// weights (zero where a tap falls in the padding). The product does in-pixels/taps of the
// convolution's multiply-adds (4/9 for 3x3 kernels on 2x2 maps) as one large GEMM, where a
// direct convolution or im2col spends most of its work on padding; the schema's FLOP count
// stays the convolution's.
#pragma once

#include "core/kernel.hpp"
#include "operators/params.hpp"

namespace mosaic {

/// Whether the node takes the dense product: an inference plan in float32, a 2-d convolution
/// with constant weights, of one group at batch 8 and more (smaller batches are bound by
/// reading W', which holds in-pixels x out-pixels / taps times the weights' values: 1.8x for
/// 3x3 kernels on 2x2 maps) or, where `grouped` (the caller's direct kernel for this shape
/// would be a GEMM per group), of several groups at any batch (W' zero between groups), an
/// input map no larger than the kernel (on VGG16-CIFAR's 4x4 -> 2x2 layer, twice the kernel, it measured slower:
/// docs/performance.md), and W' at most 64 MB.
bool small_map_dense_applies(const KernelContext& ctx, const ConvParams& p, bool grouped = false);

/// W' of a convolution with weights `w` ([OC, C / group, KH, KW]), row-major [in, out]: rows
/// (pixel, channel) and columns (pixel, channel) for channels-last activations (NHWC), rows
/// (channel, pixel) and columns (channel, pixel) for channels-first ones (NCHW).
Tensor small_map_dense_weights(const ConvParams& p, const float* w, bool channels_last, MemoryTracker* tracker);

}  // namespace mosaic
