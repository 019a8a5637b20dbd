// Element-wise ops as plain float32 loops, shared by the CPU backends:
//   - the broadcast binary ops (every row of kBinaryOps), walked row by row over the
//     output's trailing axes; im2col runs all of its binary ops with them;
//   - the unary ops in blocks over the threads: loops the compiler vectorises for the cheap
//     ones, common/fast_exp.hpp's polynomial for exp, sigmoid and tanh, the table row's
//     double-precision rule for the others (im2col passes Eigen's blocks instead).
// onednn runs small plain tensors with them: a oneDNN primitive call costs 2-5 us of fixed
// overhead (argument map, stream wait, thread fork), more than these loops take for a few
// thousand elements (docs/performance.md, "Small tensors").
#pragma once

#include <cstdint>

#include "core/kernel.hpp"
#include "operators/eltwise.hpp"

namespace mosaic {

/// The kernel of any broadcast binary op on plain float32 tensors, forward and backward.
/// Pow by a constant 2 squares (exactly what the row's pow computes: a float's square is
/// exact in double).
KernelFactory binary_loop_factory();
/// y = op(x) over n contiguous floats (y may be x).
using UnaryForwardBlock = void (*)(UnaryOp op, const UnaryArgs& args, const float* x, float* y, int64_t n);
/// dx = dy * op'(x) over n floats; x and y as the row's backward_reads_* say (else null).
using UnaryBackwardBlock = void (*)(UnaryOp op, const UnaryArgs& args, const float* x, const float* y,
                                    const float* dy, float* dx, int64_t n);
/// The kernel of any unary op on plain float32 tensors, forward and backward, in blocks
/// over the threads: by `forward` and `backward` where given (im2col's Eigen blocks), else
/// by the loops' own.
KernelFactory unary_loop_factory(UnaryForwardBlock forward = nullptr, UnaryBackwardBlock backward = nullptr);
/// Whether unary_loop_factory's own kernel computes `op` at about the memory's speed (Relu,
/// Neg, Abs, Sqrt, Reciprocal, LeakyRelu: one instruction or two per element, vectorised);
/// the others take 5-15 ns per element (exp, erf, the row's scalar rule in double).
bool unary_loop_vectorised(UnaryOp op);

/// y (plain NCHW) = max(x, 0) of x in a channel-blocked layout (nChw{block}c: [N][C / block]
/// [H x W][block], C a multiple of block): a Relu and the reorder to plain in one pass, for a
/// Relu at a layout boundary (onednn: a training plan's Relu between a blocked MaxPool and a
/// Flatten, where oneDNN's eltwise in the blocked layout and a reorder after it took 2.6 ms
/// forward on 12.85 MB). NaN stays NaN.
void relu_to_plain(const float* x, float* y, int64_t n, int64_t c, int64_t hw, int64_t block);
/// Its backward from the output: dx (blocked as x was) = dy where y > 0, else 0; y and dy
/// plain. One pass, instead of reordering y and dy into the blocked layout first.
void relu_grad_to_blocked(const float* y, const float* dy, float* dx, int64_t n, int64_t c, int64_t hw, int64_t block);

/// How many elements an op may have for onednn to run it with these loops rather than a
/// primitive, whose fixed cost dominates below (bench/small_ops.py, docs/performance.md:
/// on the 2-core development VM the loops win up to 65,536 elements for binary ops, by
/// 1.5x there and 2-4x below).
inline constexpr int64_t kLoopMaxElements = 65536;
/// The same for the unary ops that are not vectorised (Sigmoid, Tanh, Exp, Gelu's erf...):
/// oneDNN's jit kernels compute them 3-10x faster per element, so only tiny tensors.
inline constexpr int64_t kScalarLoopMaxElements = 256;

}  // namespace mosaic
