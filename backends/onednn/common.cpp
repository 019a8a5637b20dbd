// What the oneDNN backend's kernel families share (onednn_internal.hpp).
#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <new>
#include <string>

#include "backends/onednn/onednn_internal.hpp"

namespace mosaic::onednn_impl {

dnnl::engine& engine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}
dnnl::stream& stream() {
  // One per thread: plans may run on several threads at once (`mosaic loadgen --workers`), and
  // oneDNN does not promise that one stream takes executions from several threads. Every
  // kernel waits on it before returning, so nothing is left in flight on a thread's stream.
  thread_local dnnl::stream s(engine());
  return s;
}

namespace {
enum class Loops { kAuto, kNever, kAlways, kUnknown };
Loops loops() {
  static const Loops l = [] {
    const char* v = std::getenv("MOSAIC_ONEDNN_LOOPS");
    if (!v || !*v || std::string(v) == "auto") return Loops::kAuto;
    if (std::string(v) == "never") return Loops::kNever;
    if (std::string(v) == "always") return Loops::kAlways;
    return Loops::kUnknown;
  }();
  return l;
}
}  // namespace

bool takes_loop(double work, double limit) {
  switch (loops()) {
    case Loops::kNever: return false;
    case Loops::kAlways: return true;
    default: return work <= limit;
  }
}

std::string loop_setting() {
  switch (loops()) {
    case Loops::kNever: return "never";
    case Loops::kAlways: return "always";
    case Loops::kAuto: return "auto";
    default: return std::string("auto (MOSAIC_ONEDNN_LOOPS='") + std::getenv("MOSAIC_ONEDNN_LOOPS") + "' not understood)";
  }
}

memory::dims to_dims(const Shape& s) { return s.empty() ? memory::dims{1} : memory::dims(s.begin(), s.end()); }

memory::desc plain(const Shape& s) {
  memory::dims d = to_dims(s);
  memory::dims strides(d.size(), 1);
  for (int i = static_cast<int>(d.size()) - 2; i >= 0; --i) strides[i] = strides[i + 1] * d[i + 1];
  return memory::desc(d, dt::f32, strides);
}

memory::desc any(const Shape& s, dt type) { return memory::desc(to_dims(s), type, tag::any); }
memory::desc dense(const memory::dims& dims, dt type) {
  memory::dims strides(dims.size());
  memory::dim step = 1;
  for (size_t i = dims.size(); i-- > 0;) {
    strides[i] = step;
    step *= dims[i];
  }
  return memory::desc(dims, type, strides);
}
memory::desc same_layout(const memory::desc& md, dt type) {
  const auto& blk = md.data.format_desc.blocking;
  if (md.data.format_kind != dnnl_blocked || blk.inner_nblks != 0) return dense(md.dims(), type);
  return memory::desc(md.dims(), type, memory::dims(blk.strides, blk.strides + md.data.ndims));
}
dt compute_type(const KernelContext& ctx) { return ctx.precision == Precision::kBF16 ? dt::bf16 : dt::f32; }

std::optional<EltwiseAlgorithm> eltwise_algorithm(UnaryOp op, const UnaryArgs& a) {
  const float alpha = static_cast<float>(a.alpha);
  switch (op) {
    case UnaryOp::kRelu: return EltwiseAlgorithm{algorithm::eltwise_relu, algorithm::eltwise_relu_use_dst_for_bwd, 0, 0, true};
    case UnaryOp::kLeakyRelu: return EltwiseAlgorithm{algorithm::eltwise_relu, algorithm::eltwise_relu, alpha, 0, false};
    case UnaryOp::kSigmoid:
      return EltwiseAlgorithm{algorithm::eltwise_logistic, algorithm::eltwise_logistic_use_dst_for_bwd, 0, 0, true};
    case UnaryOp::kTanh: return EltwiseAlgorithm{algorithm::eltwise_tanh, algorithm::eltwise_tanh_use_dst_for_bwd, 0, 0, true};
    case UnaryOp::kClip: {
      const float lo = std::isinf(a.lo) ? -FLT_MAX : static_cast<float>(a.lo);
      const float hi = std::isinf(a.hi) ? FLT_MAX : static_cast<float>(a.hi);
      return EltwiseAlgorithm{algorithm::eltwise_clip_v2, algorithm::eltwise_clip_v2, lo, hi, false};
    }
    case UnaryOp::kExp: return EltwiseAlgorithm{algorithm::eltwise_exp, algorithm::eltwise_exp_use_dst_for_bwd, 0, 0, true};
    case UnaryOp::kLog: return EltwiseAlgorithm{algorithm::eltwise_log, algorithm::eltwise_log, 0, 0, false};
    case UnaryOp::kSqrt: return EltwiseAlgorithm{algorithm::eltwise_sqrt, algorithm::eltwise_sqrt_use_dst_for_bwd, 0, 0, true};
    case UnaryOp::kNeg: return EltwiseAlgorithm{algorithm::eltwise_linear, algorithm::eltwise_linear, -1, 0, false};
    case UnaryOp::kAbs: return EltwiseAlgorithm{algorithm::eltwise_abs, algorithm::eltwise_abs, 0, 0, false};
    case UnaryOp::kReciprocal: return EltwiseAlgorithm{algorithm::eltwise_pow, algorithm::eltwise_pow, 1, -1, false};
    case UnaryOp::kSoftplus: return EltwiseAlgorithm{algorithm::eltwise_soft_relu, algorithm::eltwise_soft_relu, 0, 0, false};
    case UnaryOp::kElu: return EltwiseAlgorithm{algorithm::eltwise_elu, algorithm::eltwise_elu, alpha, 0, false};
    case UnaryOp::kHardSwish: return EltwiseAlgorithm{algorithm::eltwise_hardswish, algorithm::eltwise_hardswish, 0, 0, false};
    case UnaryOp::kMish: return EltwiseAlgorithm{algorithm::eltwise_mish, algorithm::eltwise_mish, 0, 0, false};
    case UnaryOp::kSwish: return EltwiseAlgorithm{algorithm::eltwise_swish, algorithm::eltwise_swish, alpha, 0, false};
    case UnaryOp::kGelu:
      if (a.tanh) return EltwiseAlgorithm{algorithm::eltwise_gelu_tanh, algorithm::eltwise_gelu_tanh, 0, 0, false};
      return EltwiseAlgorithm{algorithm::eltwise_gelu_erf, algorithm::eltwise_gelu_erf, 0, 0, false};
    default: return std::nullopt;  // no oneDNN algorithm: the planner places the node elsewhere
  }
}

std::optional<algorithm> binary_algorithm(BinaryOp op) {
  switch (op) {
    case BinaryOp::kAdd: return algorithm::binary_add;
    case BinaryOp::kSub: return algorithm::binary_sub;
    case BinaryOp::kMul: return algorithm::binary_mul;
    case BinaryOp::kDiv: return algorithm::binary_div;
    default: return std::nullopt;  // no oneDNN algorithm: the shared loop, or elsewhere
  }
}

Expected<dnnl::primitive_attr> activation_attr(const Activation& act, const Node& node) {
  dnnl::primitive_attr attr;
  if (!act.active()) return attr;
  const auto alg = eltwise_algorithm(*act.op, act.args);
  if (!alg)
    return Status::unsupported(node.label() + ": oneDNN has no eltwise post-op for the fused " +
                               unary_info(*act.op).name);
  dnnl::post_ops ops;
  ops.append_eltwise(1.f, alg->forward, alg->alpha, alg->beta);
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
    Slot slot[10];
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

/// Whether oneDNN's int8 products are exact for weights in [w_min, w_max] here: with VNNI (or
/// AMX) they accumulate u8 x s8 in int32; without, the AVX2/AVX-512 path adds pairs of
/// products in int16 (VPMADDUBSW), exact only while 2 x 255 x |w| fits: |w| <= 64, the
/// 7-bit weights of reduce_range (measured on this AVX2 machine: 1,173 of 2,592 outputs off by
/// up to 116 steps with weights in [-127, 127], none with [-64, 64]).
bool int8_products_exact(int64_t w_min, int64_t w_max) {
  const std::string isa = onednn_effective_isa();
  const bool vnni = isa == "avx512_core_vnni" || isa == "avx512_core_bf16" || isa == "avx512_core_amx";
  return vnni || (w_min >= -64 && w_max <= 64);
}

}  // namespace mosaic::onednn_impl
