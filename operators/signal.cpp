#include "operators/signal.hpp"

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

}  // namespace

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

void add_signal_schemas(std::map<std::string, OpSchema>& t) {
  OpSchema& s = add_schema(t, "DFT", 1, 3, infer_dft, f_dft,
                           "discrete Fourier transform along an axis: forward or inverse, full or one-sided");
  s.shape_inputs = {1, 2};
  s.backward_flops = nullptr;
}

}  // namespace mosaic
