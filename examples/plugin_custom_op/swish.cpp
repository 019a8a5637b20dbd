// A custom-domain operator as a Mosaic plugin: com.example.mosaic.Swish,
// y = x * sigmoid(beta * x) (Ramachandran et al., "Searching for Activation Functions",
// 2017), with its schema (shape inference, forward and backward FLOPs) and its reference
// forward and backward on the naive backend. make_model.py writes a model that uses it,
// with an expected output computed by numpy; then:
//   python3 examples/plugin_custom_op/make_model.py /tmp/swish
//   mosaic verify /tmp/swish --plugin build/examples/plugin_custom_op/libmosaic_swish.so --backend all
//   mosaic gradcheck /tmp/swish/model.onnx --plugin .../libmosaic_swish.so --batch 2
//   mosaic bench /tmp/swish/model.onnx --plugin .../libmosaic_swish.so --batch 16
// Without --plugin, Mosaic refuses the model and names the node and the domain.
#include <cmath>

#include "backends/plugin.hpp"

namespace {

using mosaic::Status;

constexpr const char* kDomain = "com.example.mosaic";

mosaic::Expected<std::vector<mosaic::TensorDesc>> infer_swish(const mosaic::OpContext& ctx) {
  if (ctx.inputs[0].dtype != mosaic::DType::kF32)
    return Status::invalid(ctx.node->label() + ": Swish takes a float32 input");
  return std::vector<mosaic::TensorDesc>{ctx.inputs[0]};
}
// exp, add, divide, two multiplies per element.
double swish_flops(const mosaic::OpContext& ctx) { return 5.0 * static_cast<double>(ctx.outputs[0].numel()); }
// dy * (s + beta x s (1 - s)), with s recomputed: 9 per element.
std::vector<double> swish_backward_flops(const mosaic::OpContext& ctx) {
  return {9.0 * static_cast<double>(ctx.outputs[0].numel())};
}

class NaiveSwish final : public mosaic::Kernel {
 public:
  Status init(const mosaic::KernelContext& ctx) {
    beta_ = ctx.node->attr_float("beta", 1.f);
    return Status::ok();
  }
  Status forward(const std::vector<const mosaic::Tensor*>& src, const std::vector<mosaic::Tensor*>& dst) override {
    const float* x = src[0]->f32();
    float* y = dst[0]->f32();
    for (int64_t i = 0, n = src[0]->numel(); i < n; ++i) y[i] = x[i] * sigmoid(beta_ * x[i]);
    return Status::ok();
  }
  bool has_backward() const override { return true; }
  bool backward_reads_output(size_t) const override { return false; }
  Status backward(const mosaic::BackwardArgs& a) override {
    const float* x = a.src[0]->f32();
    const float* dy = a.diff_dst[0]->f32();
    float* dx = a.diff_src[0]->f32();
    for (int64_t i = 0, n = a.src[0]->numel(); i < n; ++i) {
      const float s = sigmoid(beta_ * x[i]);
#ifndef MOSAIC_SWISH_PLANTED_BUG
      dx[i] = dy[i] * (s + beta_ * x[i] * s * (1.f - s));
#else  // tests/: a backward that forgets the sigmoid's derivative must FAIL gradcheck
      dx[i] = dy[i] * s;
#endif
    }
    return Status::ok();
  }

 private:
  static float sigmoid(float v) { return 1.f / (1.f + std::exp(-v)); }
  float beta_ = 1.f;
};

Status register_swish(mosaic::Registrar& r) {
  mosaic::OpSchema s;
  s.op_type = "Swish";
  s.domain = kDomain;
  s.infer = infer_swish;
  s.flops = swish_flops;
  s.backward_flops = swish_backward_flops;
  s.summary = "x * sigmoid(beta * x) (example plugin)";
  MOSAIC_RETURN_IF_ERROR(r.add_operator(std::move(s)));
  // Its reference kernel, added to the naive oracle.
  return mosaic::BackendRegistration::extend(r, "naive").kernel("Swish", mosaic::make_factory<NaiveSwish>()).status();
}

}  // namespace

MOSAIC_PLUGIN(register_swish)
