#include "backends/common/loss_ops.hpp"

#include <cmath>
#include <vector>

#include "operators/loss_ops.hpp"

namespace mosaic {
namespace {

class LossOpKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_ASSIGN_OR_RETURN(p_, loss_op_params(ctx));
    label_ = ctx.node->label();
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const LossOpParams& p = p_;
    const float* x = src[0]->f32();
    const int64_t* target = src[1]->i64();
    const float* weight = p.has_weight ? src[2]->f32() : nullptr;
    const int64_t C = p.classes, D = p.inner;
    // log_softmax over the classes where asked (and kept as output 1 if present).
    std::vector<double> logp;
    if (p.softmax) {
      logp.resize(static_cast<size_t>(p.n * C * D));
      for (int64_t i = 0; i < p.n; ++i)
        for (int64_t d = 0; d < D; ++d) {
          double mx = -INFINITY, sum = 0;
          for (int64_t c = 0; c < C; ++c) mx = std::max(mx, static_cast<double>(x[(i * C + c) * D + d]));
          for (int64_t c = 0; c < C; ++c) sum += std::exp(x[(i * C + c) * D + d] - mx);
          const double lse = mx + std::log(sum);
          for (int64_t c = 0; c < C; ++c) logp[static_cast<size_t>((i * C + c) * D + d)] = x[(i * C + c) * D + d] - lse;
        }
      if (dst.size() > 1 && dst[1] && dst[1]->numel() == static_cast<int64_t>(logp.size()))
        for (size_t k = 0; k < logp.size(); ++k) dst[1]->f32()[k] = static_cast<float>(logp[k]);
    }
    double total = 0, weights = 0;
    float* out = dst[0]->f32();
    for (int64_t i = 0; i < p.n; ++i)
      for (int64_t d = 0; d < D; ++d) {
        const int64_t t = target[i * D + d];
        double loss = 0, w = 0;
        if (!(p.has_ignore && t == p.ignore_index)) {
          if (t < 0 || t >= C)
            return Status::invalid(label_ + ": target " + std::to_string(t) + " (element " + std::to_string(i * D + d) +
                                   ") is outside the " + std::to_string(C) + " classes");
          w = weight ? weight[t] : 1.0;
          const int64_t at = (i * C + t) * D + d;
          loss = -w * (p.softmax ? logp[static_cast<size_t>(at)] : static_cast<double>(x[at]));
        }
        if (p.reduction == LossReduction::kNone) out[i * D + d] = static_cast<float>(loss);
        total += loss;
        weights += w;
      }
    if (p.reduction == LossReduction::kSum) out[0] = static_cast<float>(total);
    if (p.reduction == LossReduction::kMean) {
      // Without weights or ignore_index, every target counts once: the plain mean.
      const double count = p.has_weight || p.has_ignore ? weights : static_cast<double>(p.n * D);
      out[0] = static_cast<float>(total / count);
    }
    return Status::ok();
  }

 private:
  LossOpParams p_;
  std::string label_;
};

}  // namespace

void add_loss_op_kernels(BackendRegistration& r) {
  for (const char* op : {"NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"}) r.kernel(op, make_factory<LossOpKernel>());
}

}  // namespace mosaic
