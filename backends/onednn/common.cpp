// What the oneDNN backend's kernel families share (onednn_internal.hpp).
#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <new>

#include "backends/onednn/onednn_internal.hpp"

namespace mosaic::onednn_impl {

dnnl::engine& engine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}
dnnl::stream& stream() {
  static dnnl::stream s(engine());
  return s;
}

memory::dims to_dims(const Shape& s) { return s.empty() ? memory::dims{1} : memory::dims(s.begin(), s.end()); }

memory::desc plain(const Shape& s) {
  memory::dims d = to_dims(s);
  memory::dims strides(d.size(), 1);
  for (int i = static_cast<int>(d.size()) - 2; i >= 0; --i) strides[i] = strides[i + 1] * d[i + 1];
  return memory::desc(d, dt::f32, strides);
}

memory::desc any(const Shape& s) { return memory::desc(to_dims(s), dt::f32, tag::any); }

dnnl::primitive_attr activation_attr(const Activation& act) {
  dnnl::primitive_attr attr;
  if (!act.active()) return attr;
  dnnl::post_ops ops;
  switch (act.kind) {
    case Activation::Kind::kRelu: ops.append_eltwise(1.f, algorithm::eltwise_relu, 0.f, 0.f); break;
    case Activation::Kind::kLeakyRelu: ops.append_eltwise(1.f, algorithm::eltwise_relu, act.alpha, 0.f); break;
    case Activation::Kind::kClip:
      ops.append_eltwise(1.f, algorithm::eltwise_clip_v2, std::isinf(act.lo) ? -FLT_MAX : act.lo,
                         std::isinf(act.hi) ? FLT_MAX : act.hi);
      break;
    case Activation::Kind::kNone: break;
  }
  attr.set_post_ops(ops);
  return attr;
}

memory::desc input_md(const KernelContext& ctx, size_t i) {
  if (auto* l = dynamic_cast<const DnnlLayout*>(ctx.input_layout(i))) return l->md();
  return plain(ctx.inputs[i].shape);
}

std::shared_ptr<const Layout> layout_of(const memory::desc& md, const Shape& shape) {
  if (md == plain(shape)) return nullptr;
  return std::make_shared<DnnlLayout>(md);
}

int channel_lanes(const memory::desc& md) {
  const auto& d = md.data;
  if (d.format_kind != dnnl_blocked || d.ndims < 3 || d.offset0 != 0) return 0;
  const auto& blk = d.format_desc.blocking;
  if (blk.inner_nblks != 1 || blk.inner_idxs[0] != 1) return 0;
  const memory::dim lanes = blk.inner_blks[0];
  memory::dim stride = lanes;
  for (int i = d.ndims - 1; i >= 2; --i) {
    if (blk.strides[i] != stride || d.padded_dims[i] != d.dims[i]) return 0;
    stride *= d.dims[i];
  }
  if (blk.strides[1] != stride) return 0;
  if (d.dims[0] > 1 && blk.strides[0] != stride * (d.padded_dims[1] / lanes)) return 0;
  return static_cast<int>(lanes);
}

void* transient_slot(int slot, size_t bytes, MemoryTracker* tracker) {
  struct Slot {
    void* data = nullptr;
    size_t bytes = 0;
  };
  struct Slots {
    Slot slot[8];
    ~Slots() {
      for (Slot& s : slot) std::free(s.data);
    }
  };
  thread_local Slots slots;
  Slot& s = slots.slot[slot];
  if (s.bytes < bytes) {
    std::free(s.data);
    const size_t rounded = (bytes + 63) / 64 * 64;
    s.data = std::aligned_alloc(64, rounded);
    if (!s.data) throw std::bad_alloc();
    if (tracker) tracker->on_alloc(rounded - s.bytes);
    s.bytes = rounded;
  }
  return s.data;
}

}  // namespace mosaic::onednn_impl
