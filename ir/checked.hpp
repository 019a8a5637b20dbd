// Checked size arithmetic: the one place where element and byte counts that come from a
// model, a flag or a data file are multiplied. Every size a hostile file can choose goes
// through these before anything is allocated or indexed (docs/architecture.md, "Sizes").
#pragma once

#include <cstdint>
#include <string>

#include "ir/status.hpp"
#include "ir/tensor.hpp"

namespace mosaic {

/// The largest dimension Mosaic accepts (2^31 - 1): BLAS and several kernels index with
/// 32-bit integers per dimension, and no layer of a real network comes near it.
inline constexpr int64_t kMaxDim = (int64_t{1} << 31) - 1;
/// The largest tensor, workspace or file region Mosaic accepts: 2^44 bytes (16 TiB), far
/// above any machine it runs on (`info` may still size a model at an absurd batch), and low
/// enough that the sums over a graph's values (memory totals, arenas) stay far from 2^63.
inline constexpr int64_t kMaxTensorBytes = int64_t{1} << 44;
/// The largest rank Mosaic accepts (ONNX sets none; real models stay below 8).
inline constexpr int64_t kMaxRank = 64;

/// a * b into *out; false (and *out untouched) when the product overflows int64.
inline bool checked_mul(int64_t a, int64_t b, int64_t* out) { return !__builtin_mul_overflow(a, b, out); }
/// a + b into *out; false when the sum overflows int64.
inline bool checked_add(int64_t a, int64_t b, int64_t* out) { return !__builtin_add_overflow(a, b, out); }

/// "1.5 TiB", "64 B": a size a person can read (no 20-digit numbers in messages).
std::string human_bytes(double bytes);

/// Checks a shape that a model, flag or file asks for: at most kMaxRank dims, each in [0, kMaxDim], and
/// the tensor at most kMaxTensorBytes. The error names `what` (a tensor, input or node output)
/// and the shape, e.g. "initializer 'W': shape [4,4611686018427387908] is too large: ...".
Status check_shape(const Shape& shape, DType dtype, const std::string& what);
/// The byte count of `count` elements of `element_bytes` each, refused above kMaxTensorBytes
/// (or on overflow), naming `what`. For workspaces and file regions.
Expected<int64_t> checked_bytes(int64_t count, int64_t element_bytes, const std::string& what);

}  // namespace mosaic
