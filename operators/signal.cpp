#include "operators/signal.hpp"

#include <cmath>

#include "ir/checked.hpp"
#include "operators/params.hpp"
#include "operators/schema.hpp"

namespace mosaic {
namespace {

Expected<std::vector<TensorDesc>> infer_dft(const OpContext& c) {
  if (!dtype_is_float(c.inputs[0].dtype))
    return Status::invalid(c.node->label() + ": DFT takes a float signal, got " + dtype_name(c.inputs[0].dtype));
  MOSAIC_ASSIGN_OR_RETURN(DftParams p, dft_params(c));
  return std::vector<TensorDesc>{{c.inputs[0].dtype, p.out}};
}

// A direct transform: n complex multiply-adds per output element.
double f_dft(const OpContext& c) {
  auto p = dft_params(c);
  if (!p.ok()) return 0;
  return 8.0 * static_cast<double>(p->outer * p->inner) * static_cast<double>(p->out_len) *
         static_cast<double>(p->length);
}

/// A scalar integer input that must be known at load time.
Expected<int64_t> constant_scalar(const OpContext& c, size_t i, const char* what) {
  const Tensor* t = c.constant(i);
  if (!t) return Status::unsupported(c.node->label() + ": " + what + " must be a constant known at load time");
  if (t->numel() != 1 || !dtype_is_integer(t->dtype()))
    return Status::invalid(c.node->label() + ": " + what + " must be one integer");
  return t->get_i64(0);
}

Expected<std::vector<TensorDesc>> infer_stft(const OpContext& c) {
  if (!dtype_is_float(c.inputs[0].dtype))
    return Status::invalid(c.node->label() + ": STFT takes a float signal, got " + dtype_name(c.inputs[0].dtype));
  MOSAIC_ASSIGN_OR_RETURN(StftParams p, stft_params(c));
  return std::vector<TensorDesc>{{c.inputs[0].dtype, p.out}};
}

double f_stft(const OpContext& c) {
  auto p = stft_params(c);
  if (!p.ok()) return 0;
  return 8.0 * static_cast<double>(p->batch * p->frames * p->bins) * static_cast<double>(p->frame_length);
}

}  // namespace

Expected<StftParams> stft_params(const OpContext& ctx) {
  const Node& n = *ctx.node;
  const Shape& x = ctx.inputs[0].shape;
  if (x.size() != 3 || (x[2] != 1 && x[2] != 2))
    return Status::invalid(n.label() + ": the signal must be [batch, length, 1 or 2], got " + shape_str(x));
  StftParams p;
  p.batch = x[0];
  p.length = x[1];
  p.parts = x[2];
  MOSAIC_ASSIGN_OR_RETURN(p.step, constant_scalar(ctx, 1, "frame_step"));
  p.has_window = ctx.has_input(2);
  if (p.has_window && ctx.inputs[2].shape.size() != 1)
    return Status::invalid(n.label() + ": the window must be 1-D, got " + shape_str(ctx.inputs[2].shape));
  p.frame_length = p.has_window ? ctx.inputs[2].shape[0] : p.length;
  if (ctx.has_input(3)) {
    MOSAIC_ASSIGN_OR_RETURN(p.frame_length, constant_scalar(ctx, 3, "frame_length"));
  }
  if (p.has_window && ctx.inputs[2].shape[0] != p.frame_length)
    return Status::invalid(n.label() + ": the window has " + std::to_string(ctx.inputs[2].shape[0]) +
                           " values for frames of " + std::to_string(p.frame_length));
  if (p.step < 1 || p.frame_length < 1 || p.frame_length > p.length)
    return Status::invalid(n.label() + ": frame_step " + std::to_string(p.step) + " and frame_length " +
                           std::to_string(p.frame_length) + " do not fit a signal of " + std::to_string(p.length));
  p.onesided = n.attr_int("onesided", 1) != 0;
  p.frames = 1 + (p.length - p.frame_length) / p.step;
  p.bins = p.onesided ? p.frame_length / 2 + 1 : p.frame_length;
  p.out = {p.batch, p.frames, p.bins, 2};
  return p;
}

Expected<DftParams> dft_params(const OpContext& ctx) {
  const Node& n = *ctx.node;
  const Shape& x = ctx.inputs[0].shape;
  const int64_t rank = static_cast<int64_t>(x.size());
  if (rank < 2 || (x.back() != 1 && x.back() != 2))
    return Status::invalid(n.label() + ": the signal must be [..., 1] (real) or [..., 2] (complex), got " + shape_str(x));
  DftParams p;
  p.in_parts = x.back();
  int64_t axis = ctx.opset >= 20 ? -2 : 1;
  if (ctx.opset >= 20) {
    if (ctx.has_input(2)) {
      MOSAIC_ASSIGN_OR_RETURN(axis, constant_scalar(ctx, 2, "axis"));
    }
  } else {
    axis = n.attr_int("axis", 1);
  }
  MOSAIC_ASSIGN_OR_RETURN(p.axis, normalize_axis(axis, rank, n));
  if (p.axis == rank - 1) return Status::invalid(n.label() + ": the axis cannot be the last (the parts)");
  p.inverse = n.attr_int("inverse", 0) != 0;
  p.onesided = n.attr_int("onesided", 0) != 0;
  p.in_len = x[static_cast<size_t>(p.axis)];
  p.length = p.inverse && p.onesided ? 2 * (p.in_len - 1) : p.in_len;
  if (ctx.has_input(1)) {
    MOSAIC_ASSIGN_OR_RETURN(p.length, constant_scalar(ctx, 1, "dft_length"));
  }
  if (p.length < 1 || p.length > kMaxDim)
    return Status::invalid(n.label() + ": DFT length " + std::to_string(p.length) + " outside [1, 2^31 - 1]");
  p.out_len = !p.inverse && p.onesided ? p.length / 2 + 1 : p.length;
  p.out_parts = p.inverse && p.onesided ? 1 : 2;
  for (int64_t d = 0; d < p.axis; ++d) p.outer *= x[static_cast<size_t>(d)];
  for (int64_t d = p.axis + 1; d < rank - 1; ++d) p.inner *= x[static_cast<size_t>(d)];
  p.out = x;
  p.out[static_cast<size_t>(p.axis)] = p.out_len;
  p.out.back() = p.out_parts;
  return p;
}

Expected<MelParams> mel_params(const OpContext& ctx) {
  const Node& n = *ctx.node;
  MelParams p;
  MOSAIC_ASSIGN_OR_RETURN(p.mel_bins, constant_scalar(ctx, 0, "num_mel_bins"));
  MOSAIC_ASSIGN_OR_RETURN(int64_t dft, constant_scalar(ctx, 1, "dft_length"));
  MOSAIC_ASSIGN_OR_RETURN(int64_t rate, constant_scalar(ctx, 2, "sample_rate"));
  const Tensor *lo_t = ctx.constant(3), *hi_t = ctx.constant(4);
  if (!lo_t || !hi_t) return Status::unsupported(n.label() + ": the edges in hertz must be constants known at load time");
  if (lo_t->numel() != 1 || hi_t->numel() != 1) return Status::invalid(n.label() + ": the edges in hertz must be one value each");
  const double lo = lo_t->get(0), hi = hi_t->get(0);
  if (p.mel_bins < 1 || p.mel_bins > kMaxDim || dft < 1 || dft > kMaxDim || rate < 1)
    return Status::invalid(n.label() + ": num_mel_bins " + std::to_string(p.mel_bins) + ", dft_length " + std::to_string(dft) +
                           " and sample_rate " + std::to_string(rate) + " must be positive and at most 2^31 - 1");
  if (!(lo >= 0 && lo < hi && std::isfinite(hi)))
    return Status::invalid(n.label() + ": the edges must satisfy 0 <= lower_edge_hertz < upper_edge_hertz (finite)");
  p.spectrum_bins = dft / 2 + 1;
  if (p.spectrum_bins * p.mel_bins > kMaxTensorBytes) return Status::invalid(n.label() + ": the matrix is too large");
  const int64_t code = n.attr_int("output_datatype", 1);
  p.dtype = dtype_of_onnx(code);
  if (p.dtype == DType::kCount || dtype_packed_bits(p.dtype))
    return Status::unsupported(n.label() + ": output_datatype " + onnx_type_name(code));
  const double ln10 = std::log(10.0), lo_mel = 2595 * std::log1p(lo / 700) / ln10, hi_mel = 2595 * std::log1p(hi / 700) / ln10;
  const double step = (hi_mel - lo_mel) / static_cast<double>(p.mel_bins + 2);
  for (int64_t i = 0; i < p.mel_bins + 2; ++i) {
    const double hz = 700 * std::expm1((static_cast<double>(i) * step + lo_mel) / 2595 * ln10);
    const double bin = std::floor(static_cast<double>(dft + 1) * hz / static_cast<double>(rate));
    if (!(bin >= 0 && bin < static_cast<double>(p.spectrum_bins)))
      return Status::invalid(n.label() + ": mel point " + std::to_string(i) + " (" + std::to_string(hz) +
                             " Hz) falls outside the " + std::to_string(p.spectrum_bins) +
                             " spectrum bins (upper_edge_hertz above sample_rate / 2?)");
    p.corners.push_back(static_cast<int64_t>(bin));
  }
  return p;
}

double mel_weight(const MelParams& p, int64_t bin, int64_t mel) {
  const auto at = [&](int64_t i) { return p.corners[static_cast<size_t>(mel + i)]; };
  const int64_t left = at(0), centre = at(1), right = at(2);
  // The falling side (from the centre to the right corner) is written after the rising one.
  if (bin >= centre && bin < right) return static_cast<double>(right - bin) / static_cast<double>(right - centre);
  if (left == centre) return bin == centre ? 1.0 : 0.0;
  if (bin >= left && bin <= centre) return static_cast<double>(bin - left) / static_cast<double>(centre - left);
  return 0.0;
}

namespace {

Expected<std::vector<TensorDesc>> infer_mel(const OpContext& c) {
  MOSAIC_ASSIGN_OR_RETURN(MelParams p, mel_params(c));
  return std::vector<TensorDesc>{{p.dtype, {p.spectrum_bins, p.mel_bins}}};
}

double f_mel(const OpContext&) { return 0; }

}  // namespace

void add_signal_schemas(std::map<std::string, OpSchema>& t) {
  OpSchema& m = add_schema(t, "MelWeightMatrix", 5, 5, infer_mel, f_mel,
                           "triangular mel filters over a one-sided spectrum's bins, [dft_length / 2 + 1, num_mel_bins]");
  m.shape_inputs = {0, 1, 2, 3, 4};
  m.non_trainable_inputs = {0, 1, 2, 3, 4};
  m.backward_flops = nullptr;
  OpSchema& s = add_schema(t, "DFT", 1, 3, infer_dft, f_dft,
                           "discrete Fourier transform along an axis: forward or inverse, full or one-sided");
  s.shape_inputs = {1, 2};
  s.backward_flops = nullptr;
  OpSchema& st = add_schema(t, "STFT", 2, 4, infer_stft, f_stft,
                            "the DFT of each windowed frame of a signal, frame_step apart (one-sided by default)");
  st.shape_inputs = {1, 3};
  st.backward_flops = nullptr;
}

}  // namespace mosaic
