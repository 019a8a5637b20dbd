#include "validate/planted_bugs.hpp"

#include <algorithm>
#include <cmath>
#include <exception>
#include <memory>

#include "core/registration.hpp"
#include "ir/device.hpp"

namespace mosaic {

const std::vector<PlantedBug>& planted_bugs() {
  static const std::vector<PlantedBug> bugs = {
      {"conv-dx-sign", "Conv", "convolution backward-data with the wrong sign"},
      {"conv-dw-scale", "Conv", "convolution weight gradient scaled by 1.01"},
      {"conv-db-missing", "Conv", "convolution bias gradient missing (zero)"},
      {"conv-dw-shifted", "Conv", "convolution weight gradient shifted by one element (off-by-one)"},
      {"conv-dx-dilation", "Conv", "convolution backward-data computed with dilation + 1 (pads widened to keep shapes)"},
      {"gemm-bias-missing", "Gemm", "Gemm bias (C) gradient missing (zero)"},
      {"gemm-dw-transposed", "Gemm", "Gemm weight (B) gradient written transposed"},
      {"gemm-dx-scale", "Gemm", "Gemm input (A) gradient scaled by 1.01"},
      {"maxpool-window-off-by-one", "MaxPool",
       "max-pool backward over a window one element larger per axis (two, one at each end, where the backend pads "
       "both ends alike)"},
      {"relu-mask-inverted", "Relu", "Relu backward passes the gradient where the input is negative"},
      {"add-operand-dropped", "Add", "Add backward drops the second operand's gradient"},
      {"batchnorm-no-statistics", "BatchNormalization",
       "training BatchNormalization backward ignores the batch statistics' dependence on x"},
      {"gemm-forward-scale", "Gemm", "Gemm forward output scaled by 1.01 (a forward bug)", true},
      // Sequence models: the classic mistakes in attention, normalisation, embeddings, gates.
      {"layernorm-dx-uncentred", "LayerNormalization",
       "LayerNorm backward-data without the mean and variance terms (dx = dy scale invstd)"},
      {"layernorm-dscale-missing", "LayerNormalization", "LayerNorm scale gradient missing (zero)"},
      {"softmax-dx-no-dot", "Softmax", "softmax backward without the row dot term (dx = y dy)"},
      {"gather-scatter-overwrite", "Gather",
       "embedding backward writes each row's gradient instead of adding (repeated ids keep only the last)"},
      {"lstm-gates-swapped", "LSTM", "LSTM weight gradient with the input and forget gates' rows exchanged (i f c o order)"},
      {"gru-reset-dr-missing", "GRU", "GRU recurrent weight gradient of the reset gate missing (zero)"},
  };
  return bugs;
}

namespace {

/// A node with a different window: one more element per kernel extent and end pad (pooling;
/// with `both_ends`, two more elements and a pad more at each end, for a backend that pads both
/// ends alike, cuDNN) or one more per dilation (convolution, where the pads widen by what the
/// kernel's reach grew, so the output keeps its shape). False if the node has no axis to mutate.
bool mutate_window(Node& n, const Shape& weight_or_empty, bool both_ends = false) {
  if (n.attr_string("auto_pad", "NOTSET") != "NOTSET") return false;
  std::vector<int64_t> kernel = weight_or_empty.empty() ? n.attr_ints("kernel_shape")
                                                        : Shape(weight_or_empty.begin() + 2, weight_or_empty.end());
  const size_t r = kernel.size();
  std::vector<int64_t> pads = n.attr_ints("pads", std::vector<int64_t>(2 * r, 0));
  std::vector<int64_t> dil = n.attr_ints("dilations", std::vector<int64_t>(r, 1));
  if (pads.size() != 2 * r || dil.size() != r) return false;
  bool changed = false;
  for (size_t a = 0; a < r; ++a) {
    if (weight_or_empty.empty()) {  // pooling: one more element, one more end pad (or two, and both)
      kernel[a] += both_ends ? 2 : 1;
      pads[r + a] += 1;
      if (both_ends) pads[a] += 1;
      changed = true;
    } else if (kernel[a] > 1) {  // convolution: reach grows by kernel - 1
      dil[a] += 1;
      pads[a] += (kernel[a] - 1) / 2;
      pads[r + a] += kernel[a] - 1 - (kernel[a] - 1) / 2;
      changed = true;
    }
  }
  if (weight_or_empty.empty()) n.attrs["kernel_shape"] = Attribute::of_ints(kernel);
  else n.attrs["dilations"] = Attribute::of_ints(dil);
  n.attrs["pads"] = Attribute::of_ints(pads);
  return changed;
}

/// Host copies of the tensors one call reads and writes, for a wrong result computed on the host
/// where the base computes in a device's memory: `host(t)` is t's copy (copied out on first
/// use; a copy the device fails throws, which on_host() turns into the call's error), and
/// write_back() copies the ones written into the device again.
class HostMirror {
 public:
  explicit HostMirror(Device* device) : device_(device) {}
  const Tensor* host(const Tensor* t) {
    if (!t || !device_) return t;
    for (auto& m : mirrors_)
      if (m.first == t) return m.second.get();
    mirrors_.emplace_back(t, std::make_unique<Tensor>(t->clone()));
    return mirrors_.back().second.get();
  }
  Tensor* host(Tensor* t) { return const_cast<Tensor*>(host(static_cast<const Tensor*>(t))); }
  BackwardArgs host(const BackwardArgs& a) {
    BackwardArgs h;
    for (auto* t : a.src) h.src.push_back(host(t));
    for (auto* t : a.dst) h.dst.push_back(host(t));
    for (auto* t : a.diff_dst) h.diff_dst.push_back(host(t));
    for (auto* t : a.diff_src) h.diff_src.push_back(host(t));
    return h;
  }
  /// Copies each of `written`'s host copies back into its device tensor.
  Status write_back(const std::vector<Tensor*>& written) {
    if (!device_) return Status::ok();
    for (Tensor* t : written)
      for (auto& m : mirrors_)
        if (t && m.first == t && t->bytes())
          MOSAIC_RETURN_IF_ERROR(device_->copy_to_device(t->data(), m.second->data(), t->bytes()));
    return Status::ok();
  }

 private:
  Device* device_;
  std::vector<std::pair<const Tensor*, std::unique_ptr<Tensor>>> mirrors_;
};

class BuggyKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx, const KernelRegistry& registry, const std::string& base, const std::string& bug) {
    bug_ = bug;
    const BackendInfo* info = registry.info(base);
    device_ = info ? info->device : nullptr;
    MOSAIC_ASSIGN_OR_RETURN(inner_, registry.create(base, ctx));
    if (bug == "conv-dx-dilation" || bug == "maxpool-window-off-by-one") {
      mutated_node_ = std::make_unique<Node>(*ctx.node);
      if (mutate_window(*mutated_node_, bug == "conv-dx-dilation" ? ctx.inputs[1].shape : Shape{})) {
        KernelContext c = ctx;
        c.node = mutated_node_.get();
        auto mutated = registry.create(base, c);
        if (!mutated.ok() && bug == "maxpool-window-off-by-one") {  // the base declines uneven pads
          *mutated_node_ = *ctx.node;
          mutate_window(*mutated_node_, Shape{}, /*both_ends=*/true);
          mutated = registry.create(base, c);
        }
        if (!mutated.ok()) return mutated.status();
        mutated_ = std::move(mutated).value();
        for (size_t i = 0; i < ctx.outputs.size(); ++i) {
          if (!ctx.has_output(i)) {
            scratch_.emplace_back();
            continue;
          }
          const TensorDesc desc(ctx.outputs[i].dtype, ctx.outputs[i].shape);
          if (!device_) {
            scratch_.push_back(Tensor::empty(desc));
            continue;
          }
          MOSAIC_ASSIGN_OR_RETURN(auto buffer, device_buffer(device_, desc.bytes(), nullptr));
          scratch_.push_back(Tensor::on_buffer(desc, std::move(buffer)));
        }
      }
    }
    if (bug == "batchnorm-no-statistics" || bug == "layernorm-dx-uncentred")
      eps_ = ctx.node->attr_float("epsilon", 1e-5f);
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    MOSAIC_RETURN_IF_ERROR(inner_->forward(src, dst));
    if (bug_ == "gemm-forward-scale") {
      MOSAIC_RETURN_IF_ERROR(on_host([&](HostMirror& mirror) {
        Tensor* y = mirror.host(dst[0]);
        for (int64_t i = 0; i < y->numel(); ++i) y->f32()[i] *= 1.01f;
        return mirror.write_back({dst[0]});
      }));
    }
    if (!mutated_) return Status::ok();
    std::vector<Tensor*> sdst;
    for (auto& t : scratch_) sdst.push_back(t.defined() ? &t : nullptr);
    return mutated_->forward(src, sdst);  // its backward may need its own workspace
  }
  bool has_backward() const override { return inner_->has_backward(); }
  bool backward_reads_input(size_t i) const override {
    return inner_->backward_reads_input(i) || bug_ == "batchnorm-no-statistics" || bug_ == "layernorm-dx-uncentred" ||
           bug_ == "gather-scatter-overwrite" || mutated_;
  }
  bool backward_reads_output(size_t i) const override {
    return inner_->backward_reads_output(i) || bug_ == "softmax-dx-no-dot";
  }
  bool updates_input(size_t i) const override { return inner_->updates_input(i); }
  bool aliases_input() const override { return inner_->aliases_input(); }
  size_t workspace_bytes() const override { return inner_->workspace_bytes(); }

  Status backward(const BackwardArgs& args) override {
    MOSAIC_RETURN_IF_ERROR(inner_->backward(args));
    if (mutated_ && !args.diff_src.empty() && args.diff_src[0]) {  // the base's own kernel, in its memory
      BackwardArgs m = args;
      for (size_t i = 0; i < m.dst.size(); ++i) m.dst[i] = scratch_[i].defined() ? &scratch_[i] : nullptr;
      for (size_t i = 1; i < m.diff_src.size(); ++i) m.diff_src[i] = nullptr;
      return mutated_->backward(m);
    }
    // The wrong gradients are computed on the host: on a device's base, over host copies.
    return on_host([&](HostMirror& mirror) {
      plant(mirror.host(args));
      return mirror.write_back(args.diff_src);
    });
  }

 private:
  /// `work` over host copies of the base's device tensors (the tensors themselves on the host);
  /// a device's failed copy is the error it returns, not an exception out of the kernel.
  template <class Work>
  Status on_host(Work work) {
    try {
      HostMirror mirror(device_.get());
      return work(mirror);
    } catch (const std::exception& e) {
      return Status::internal("planted bug '" + bug_ + "': " + e.what());
    }
  }
  /// Makes `a`'s gradients (host memory) wrong in the bug's way.
  void plant(const BackwardArgs& a) {
    auto grad = [&](size_t i) -> Tensor* { return i < a.diff_src.size() ? a.diff_src[i] : nullptr; };
    auto scale = [](Tensor* t, float f) {
      if (t)
        for (int64_t i = 0; i < t->numel(); ++i) t->f32()[i] *= f;
    };
    if (bug_ == "conv-dx-sign") scale(grad(0), -1.f);
    else if (bug_ == "conv-dw-scale") scale(grad(1), 1.01f);
    else if (bug_ == "conv-db-missing" || bug_ == "gemm-bias-missing") scale(grad(2), 0.f);
    else if (bug_ == "gemm-dx-scale") scale(grad(0), 1.01f);
    else if (bug_ == "add-operand-dropped") scale(grad(1), 0.f);
    else if (bug_ == "conv-dw-shifted" && grad(1)) {
      float* w = grad(1)->f32();
      std::rotate(w, w + 1, w + grad(1)->numel());
    } else if (bug_ == "gemm-dw-transposed" && grad(1)) {
      Tensor* g = grad(1);
      const int64_t r = g->dim(0), c = g->dim(1);
      Tensor copy = g->clone();
      for (int64_t i = 0; i < r; ++i)
        for (int64_t j = 0; j < c; ++j) g->f32()[j * r + i] = copy.f32()[i * c + j];
    } else if (bug_ == "relu-mask-inverted" && grad(0)) {
      for (int64_t i = 0; i < grad(0)->numel(); ++i) grad(0)->f32()[i] = a.diff_dst[0]->f32()[i] - grad(0)->f32()[i];
    } else if (bug_ == "batchnorm-no-statistics" && grad(0)) {
      batch_norm_without_statistics(a);
    } else if (bug_ == "layernorm-dscale-missing") {
      scale(grad(1), 0.f);
    } else if (bug_ == "layernorm-dx-uncentred" && grad(0)) {
      layer_norm_uncentred(a);
    } else if (bug_ == "softmax-dx-no-dot" && grad(0)) {  // dx = y dy, from the forward's output
      for (int64_t i = 0; i < grad(0)->numel(); ++i) grad(0)->f32()[i] = a.dst[0]->f32()[i] * a.diff_dst[0]->f32()[i];
    } else if (bug_ == "gather-scatter-overwrite" && grad(0)) {
      gather_overwrite(a);
    } else if (bug_ == "lstm-gates-swapped" && grad(1)) {  // rows [0, H) and [2H, 3H) per direction
      Tensor* g = grad(1);
      const int64_t dirs = g->dim(0), rows = g->dim(1), cols = g->dim(2), h = rows / 4;
      for (int64_t d = 0; d < dirs; ++d)
        std::swap_ranges(g->f32() + (d * rows) * cols, g->f32() + (d * rows + h) * cols,
                         g->f32() + (d * rows + 2 * h) * cols);
    } else if (bug_ == "gru-reset-dr-missing" && grad(2)) {  // rows [H, 2H) per direction
      Tensor* g = grad(2);
      const int64_t dirs = g->dim(0), rows = g->dim(1), cols = g->dim(2), h = rows / 3;
      for (int64_t d = 0; d < dirs; ++d) std::fill(g->f32() + (d * rows + h) * cols, g->f32() + (d * rows + 2 * h) * cols, 0.f);
    }
  }

  /// dx = dy scale / sqrt(var_batch + eps): the batch mean and variance treated as constants.
  void batch_norm_without_statistics(const BackwardArgs& a) {
    const Tensor& x = *a.src[0];
    const int64_t n = x.dim(0), c = x.dim(1), sp = x.numel() / std::max<int64_t>(n * c, 1);
    for (int64_t ch = 0; ch < c; ++ch) {
      double sum = 0, sq = 0;
      for (int64_t b = 0; b < n; ++b)
        for (int64_t i = 0; i < sp; ++i) sum += x.f32()[(b * c + ch) * sp + i];
      const double mean = sum / static_cast<double>(n * sp);
      for (int64_t b = 0; b < n; ++b)
        for (int64_t i = 0; i < sp; ++i) sq += std::pow(x.f32()[(b * c + ch) * sp + i] - mean, 2);
      const double inv = 1.0 / std::sqrt(sq / static_cast<double>(n * sp) + eps_);
      for (int64_t b = 0; b < n; ++b)
        for (int64_t i = 0; i < sp; ++i) {
          const int64_t o = (b * c + ch) * sp + i;
          a.diff_src[0]->f32()[o] = static_cast<float>(a.diff_dst[0]->f32()[o] * a.src[1]->f32()[ch] * inv);
        }
    }
  }

  /// dx = dy scale invstd over the normalised (trailing) axes: the statistics treated as
  /// constants.
  void layer_norm_uncentred(const BackwardArgs& a) {
    const Tensor& x = *a.src[0];
    const int64_t inner = a.src[1]->numel(), rows = x.numel() / std::max<int64_t>(inner, 1);
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x.f32() + r * inner;
      double sum = 0, sq = 0;
      for (int64_t i = 0; i < inner; ++i) sum += xr[i];
      const double mean = sum / static_cast<double>(inner);
      for (int64_t i = 0; i < inner; ++i) sq += (xr[i] - mean) * (xr[i] - mean);
      const double inv = 1.0 / std::sqrt(sq / static_cast<double>(inner) + eps_);
      for (int64_t i = 0; i < inner; ++i)
        a.diff_src[0]->f32()[r * inner + i] =
            static_cast<float>(a.diff_dst[0]->f32()[r * inner + i] * a.src[1]->f32()[i] * inv);
    }
  }
  /// The table's gradient with each gathered row written, not added (axis 0).
  void gather_overwrite(const BackwardArgs& a) {
    Tensor* dx = a.diff_src[0];
    std::fill(dx->f32(), dx->f32() + dx->numel(), 0.f);
    const int64_t rows = dx->dim(0), inner = dx->numel() / std::max<int64_t>(rows, 1);
    const Tensor& ids = *a.src[1];
    for (int64_t j = 0; j < ids.numel(); ++j) {
      int64_t i = ids.i64()[j];
      if (i < 0) i += rows;
      std::copy(a.diff_dst[0]->f32() + j * inner, a.diff_dst[0]->f32() + (j + 1) * inner, dx->f32() + i * inner);
    }
  }

  std::string bug_;
  std::unique_ptr<Kernel> inner_, mutated_;
  std::unique_ptr<Node> mutated_node_;
  std::vector<Tensor> scratch_;
  double eps_ = 1e-5;
  std::shared_ptr<Device> device_;  // the base's: its kernels read and write that memory
};

}  // namespace

Status register_planted_bug(KernelRegistry& registry, const std::string& base, const std::string& bug) {
  if (!registry.has_backend(base)) return Status::not_found("planted bug: unknown backend '" + base + "'");
  const auto& bugs = planted_bugs();
  auto it = std::find_if(bugs.begin(), bugs.end(), [&](const PlantedBug& b) { return b.name == bug; });
  if (it == bugs.end()) {
    std::string known;
    for (const auto& b : bugs) known += (known.empty() ? "" : ", ") + b.name;
    return Status::not_found("unknown planted bug '" + bug + "' (known: " + known + ")");
  }
  const std::string name = base + "+" + bug;
  if (registry.has_backend(name)) return Status::ok();
  // The base's device, availability and precisions: a device base's kernels compute in its
  // memory, and the planner must copy to and from it as for the base.
  BackendInfo info = *registry.info(base);
  info.name = name;
  info.summary = base + " with a planted bug: " + it->description;
  DirectRegistrar direct(registry);
  BackendRegistration r(direct, std::move(info));
  for (const auto& op : registry.ops(base)) {
    KernelTraits traits;  // plain layouts: the wrong gradients are computed on plain tensors
    if (const KernelTraits* t = registry.traits(base, op)) traits.supports = t->supports;
    if (op == it->op) {
      r.kernel(
          op,
          [&registry, base, bug](const KernelContext& ctx) -> Expected<std::unique_ptr<Kernel>> {
            auto k = std::make_unique<BuggyKernel>();
            MOSAIC_RETURN_IF_ERROR(k->init(ctx, registry, base, bug));
            return std::unique_ptr<Kernel>(std::move(k));
          },
          traits);
    } else {
      r.kernel(op, [&registry, base](const KernelContext& ctx) { return registry.create(base, ctx); }, traits);
    }
  }
  return r.status();
}

}  // namespace mosaic
