// The host side of the cuda backend's geometry: what its reduction, transpose and padding
// kernels (and their backward) read, built from the ops' parameters. Header-only and free of
// CUDA headers, so that tests/test_cuda_math.cpp checks it with device_math.hpp's bodies on
// any machine.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "backends/common/movement.hpp"
#include "backends/cuda/device_math.hpp"
#include "operators/params.hpp"
#include "operators/reduce.hpp"

namespace mosaic::cuda_backend {

/// The device form of reduction row `op` (reduce_step, dev_reduce_grad); nullopt where it has
/// none, so that the backend registers only the rows it computes (a row added to
/// operators/reduce.hpp is declined by name until it has a case here).
inline std::optional<DevReduce> device_reduce(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return DevReduce::kSum;
    case ReduceOp::kMean: return DevReduce::kMean;
    case ReduceOp::kMax: return DevReduce::kMax;
    case ReduceOp::kMin: return DevReduce::kMin;
    case ReduceOp::kProd: return DevReduce::kProd;
    case ReduceOp::kL1: return DevReduce::kL1;
    case ReduceOp::kL2: return DevReduce::kL2;
    case ReduceOp::kLogSum: return DevReduce::kLogSum;
    case ReduceOp::kLogSumExp: return DevReduce::kLogSumExp;
    case ReduceOp::kSumSquare: return DevReduce::kSumSquare;
    default: return std::nullopt;
  }
}

/// The kept and the reduced axes of `p` (at most 8 dimensions: the caller checks), outermost
/// first, with their strides in the input.
inline ReduceGeometry reduce_geometry(const ReduceParams& p) {
  ReduceGeometry g;
  const std::vector<int64_t> strides = row_major_strides(p.in);
  size_t next = 0;
  for (size_t a = 0; a < p.in.size(); ++a) {
    const bool reduced = next < p.axes.size() && p.axes[next] == static_cast<int64_t>(a);
    if (reduced) {
      ++next;
      g.red_dims[g.red_rank] = p.in[a];
      g.red_strides[g.red_rank++] = strides[a];
    } else {
      g.out_dims[g.kept_rank] = p.in[a];
      g.kept_strides[g.kept_rank++] = strides[a];
    }
  }
  g.count = static_cast<int64_t>(p.count);
  return g;
}

/// Where each input element of a reduction sends its gradient from: its coordinates times
/// the output's strides, 0 along the reduced axes (the output kept as `p.kept`).
inline ReduceBack reduce_back(const ReduceParams& p) {
  ReduceBack b;
  b.rank = static_cast<int>(p.in.size());
  const std::vector<int64_t> out = row_major_strides(p.kept);
  for (size_t a = 0; a < p.in.size(); ++a) {
    b.in_dims[a] = p.in[a];
    b.out_strides[a] = p.kept[a] == 1 && p.in[a] != 1 ? 0 : out[a];
  }
  return b;
}

/// Transpose of `in` by `perm` as a gather (output axis d walks input axis perm[d]; no maps),
/// and its backward: the inverse permutation, input axis perm[d] walking dy's axis d.
inline AxisGather transpose_gather(const Shape& in, const std::vector<int64_t>& perm) {
  AxisGather g;
  g.rank = static_cast<int>(perm.size());
  const std::vector<int64_t> strides = row_major_strides(in);
  for (size_t d = 0; d < perm.size(); ++d) {
    g.out_dims[d] = in[static_cast<size_t>(perm[d])];
    g.strides[d] = strides[static_cast<size_t>(perm[d])];
  }
  return g;
}
inline AxisGather transpose_back_gather(const Shape& in, const std::vector<int64_t>& perm) {
  AxisGather g;
  g.rank = static_cast<int>(perm.size());
  Shape out;
  for (int64_t a : perm) out.push_back(in[static_cast<size_t>(a)]);
  const std::vector<int64_t> dy = row_major_strides(out);
  for (size_t d = 0; d < perm.size(); ++d) {
    g.out_dims[perm[d]] = in[static_cast<size_t>(perm[d])];
    g.strides[perm[d]] = dy[d];
  }
  return g;
}

/// A convolution whose pads differ between an axis's ends, which cuDNN cannot express, padded
/// explicitly instead: the zero-padded input's shape, the maps that gather the input into it
/// (`pad`, over `padded`) and its gradient back out (`crop`, over the input's shape).
struct ExplicitPad {
  Shape padded;
  AxisMaps pad, crop;
};
/// For input `in` and window `w` (its pads made 0 and its input extents the padded ones);
/// an error naming `label` for a negative pad.
inline Expected<ExplicitPad> explicit_pad(const Shape& in, Window& w, const std::string& label) {
  const size_t r = in.size();
  ExplicitPad e;
  e.padded = in;
  e.crop.assign(r, {});
  PadParams pad;
  pad.pads.assign(2 * r, 0);
  for (size_t a = 0; a < w.rank(); ++a) {
    if (w.pad_begin[a] < 0 || w.pad_end[a] < 0) return Status::unsupported(label + ": negative pads");
    pad.pads[2 + a] = w.pad_begin[a];
    pad.pads[r + 2 + a] = w.pad_end[a];
    e.padded[2 + a] += w.pad_begin[a] + w.pad_end[a];
    for (int64_t c = 0; c < in[2 + a]; ++c) e.crop[2 + a].push_back(c + w.pad_begin[a]);
    w.in[a] = e.padded[2 + a];
    w.pad_begin[a] = w.pad_end[a] = 0;
  }
  e.pad = pad_axis_maps(pad, in, e.padded);
  return e;
}

}  // namespace mosaic::cuda_backend
