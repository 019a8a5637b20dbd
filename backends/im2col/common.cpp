// What the im2col backend's kernel families share (im2col_internal.hpp).
#include "backends/im2col/im2col_internal.hpp"

namespace mosaic::im2col_impl {

float ordered_sum(const float* p, int64_t n) {
  float lane[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int l = 0; l < 16; ++l) lane[l] += p[i + l];
  for (int l = 0; i < n; ++i, ++l) lane[l] += p[i];
  float s = 0.f;
  for (float v : lane) s += v;
  return s;
}

void apply_activation(const Activation& act, float* y, int64_t n) {
  ArrayMap v(y, n);
  switch (act.kind) {
    case Activation::Kind::kRelu: v = v.max(0.f); break;
    case Activation::Kind::kLeakyRelu: v = (v >= 0.f).select(v, act.alpha * v); break;
    case Activation::Kind::kClip: v = v.max(act.lo).min(act.hi); break;
    case Activation::Kind::kNone: break;
  }
}

Expected<Win2> lift2(const Window& w, const Node& node) {
  if (w.rank() == 2)
    return Win2{w.in[0], w.in[1], w.out[0], w.out[1], w.kernel[0], w.kernel[1], w.stride[0], w.stride[1],
                w.dilation[0], w.dilation[1], w.pad_begin[0], w.pad_begin[1], w.pad_end[0], w.pad_end[1]};
  if (w.rank() == 1)
    return Win2{1, w.in[0], 1, w.out[0], 1, w.kernel[0], 1, w.stride[0], 1, w.dilation[0], 0, w.pad_begin[0], 0,
                w.pad_end[0]};
  return Status::unsupported(node.label() + ": im2col implements 1-d and 2-d windows only, got " +
                             std::to_string(w.rank()) + "-d");
}

}  // namespace mosaic::im2col_impl
