// Max pooling shared by the optimised backends: the forward over windows inside the input,
// and the backward.
#pragma once

#include <cstdint>

#include "core/kernel.hpp"
#include "operators/params.hpp"

namespace mosaic {

/// Values within this relative distance of a window's maximum count as tied with it.
/// GEMM and JIT convolutions round identical input patches differently depending on
/// where an output falls in their blocking (vector body or tail, FMA order), so
/// activations that are equal in exact arithmetic (flat image regions) arrive a few ulp
/// apart. Treating them as tied and routing the gradient to the first in window order —
/// PyTorch's rule for exact ties — makes the optimised backends pick the subgradient
/// PyTorch picks. The naive oracle's backward uses the same rule. 2^-18 (about 32 ulp)
/// covers the spread measured on Fashion-MNIST (oneDNN's 288-term sums need more than
/// 2^-20; tolerances of 2^-19 to 2^-17 all agree with PyTorch, see docs/training.md); a
/// real difference that small changes the loss by less than float rounding does.
constexpr float kMaxPoolTieRtol = 0x1p-18f;

/// dx = scatter of dy to each window's first (near-)maximum, for nc planes of a 1-3-d
/// window over x (plain layout, NC then spatial). dx is overwritten.
void max_pool_backward(const float* x, const float* dy, float* dx, int64_t nc, const Window& w,
                       float tie_rtol = kMaxPoolTieRtol);

/// The same for channel-blocked tensors laid out [outer][spatial][lanes] (oneDNN's nChw16c:
/// outer = N * C / 16 with C padded to whole blocks, lanes = 16). Each lane is its own plane.
void max_pool_backward_lanes(const float* x, const float* dy, float* dx, int64_t outer, int lanes, const Window& w,
                             float tie_rtol = kMaxPoolTieRtol);

/// Whether every window of a 1-d or 2-d pool lies inside the input (no padding reaches
/// one): the windows max_pool_forward_interior computes.
bool max_pool_is_interior(const Window& w);

/// y = the maximum of each window, for a 1-d or 2-d window over x laid out [outer][H][W][lanes]:
/// lanes 1 is plain NCHW (outer = N * C), 8 or 16 oneDNN's channel blocks (outer = N * C
/// padded to whole blocks / lanes; zero padding lanes stay zero). Windows in window order, the
/// first maximum kept (a NaN first in its window propagates, a later one does not, as in the
/// oracle). Requires max_pool_is_interior(w). OpenMP over outer and output rows.
void max_pool_forward_interior(const float* x, float* y, int64_t outer, int lanes, const Window& w);

/// The same from channel blocks of `lanes` (8 or 16) into a plain NCHW output of `c`
/// channels (the padding lanes dropped): the pool and the reorder to plain in one pass.
void max_pool_forward_interior_unblock(const float* x, float* y, int64_t n, int64_t c, int lanes, const Window& w);

/// 2x2 windows at stride 2 without dilation, at most one padded row and column on each side
/// (a zero Pad folded into the pool): the windows max_pool_forward_2x2 computes.
bool max_pool_is_2x2_stride_2(const Window& w);
/// MaxPool of plain [outer][H][W] planes over such windows: the windows inside the maps
/// branch-free along W, those the borders clip over their real cells (padding is -inf, a NaN
/// never the maximum, as in the general loop). Requires max_pool_is_2x2_stride_2(w).
void max_pool_forward_2x2(const float* x, float* y, int64_t outer, const Window& w);

/// MaxPool of int8 or uint8 codes in plain layout (inference, no Indices): each window's
/// first maximum, padding never a candidate (backends/common/pooling_bytes.cpp). The optimised
/// backends run a QDQ model's pools on codes with it (core/fuse_qdq_codes.cpp).
KernelFactory codes_max_pool_factory();
/// A MaxPool registration of an optimised backend with the codes beside its float kernel:
/// `float_factory` for float32, codes_max_pool_factory for int8 and uint8.
KernelFactory with_codes_max_pool(KernelFactory float_factory);
/// Its check: float32_pool's for float32; for 8-bit codes, inference without Indices.
Status float32_pool_or_codes(const KernelContext& ctx);
/// The element types such a registration takes: float32 (and the base types the float check
/// refuses by name), int8 and uint8.
inline constexpr DTypeSet kPoolOrCodesDTypes = kBaseDTypes | dtype_bit(DType::kU8) | dtype_bit(DType::kI8);

}  // namespace mosaic
