// cuda: Pad, Slice and Transpose as one gather over per-axis index maps (the maps the host
// backends use, backends/common/movement.hpp, uploaded once), Concat as strided device copies,
// and the reductions of operators/reduce.hpp (movement.cu).
#include <cstdint>

#include "backends/common/movement.hpp"
#include "backends/cuda/cuda_internal.hpp"
#include "backends/cuda/device_geometry.hpp"
#include "operators/reduce.hpp"

namespace mosaic::cuda_backend {

constexpr size_t kMaxAxes = 8;

Status DeviceGather::set(const Shape& out, const std::vector<int64_t>& strides,
                         const std::vector<std::vector<int64_t>>& maps, const std::string& label) {
  if (out.size() > kMaxAxes) return Status::unsupported(label + ": the cuda backend moves up to 8 dimensions");
  g_ = AxisGather{};
  g_.rank = static_cast<int>(out.size());
  elements_ = shape_numel(out);
  std::vector<int64_t> flat;
  std::vector<size_t> at(out.size(), SIZE_MAX);
  for (size_t d = 0; d < out.size(); ++d) {
    g_.out_dims[d] = out[d];
    g_.strides[d] = strides[d];
    if (d < maps.size() && !maps[d].empty()) {
      at[d] = flat.size();
      flat.insert(flat.end(), maps[d].begin(), maps[d].end());
    }
  }
  MOSAIC_RETURN_IF_ERROR(maps_.resize(flat.size() * sizeof(int64_t)));
  if (!flat.empty())
    MOSAIC_RETURN_IF_ERROR(CudaDevice::instance()->copy_to_device(maps_.data(), flat.data(), flat.size() * sizeof(int64_t)));
  for (size_t d = 0; d < out.size(); ++d)
    g_.maps[d] = at[d] == SIZE_MAX ? nullptr : static_cast<const int64_t*>(maps_.data()) + at[d];
  return Status::ok();
}

cudaError_t DeviceGather::run(cudaStream_t stream, const float* x, float* y, float fill, const float* fill_device) const {
  return launch_axis_gather(stream, g_, x, y, elements_, fill, fill_device);
}

namespace {

/// A gather over per-axis maps (DeviceGather), and for Pad and Slice its adjoint.
class AxisGatherKernel : public CudaKernel {
 protected:
  Status set_geometry(const Shape& out, const std::vector<int64_t>& strides, const AxisMaps& maps) {
    return gather_.set(out, strides, maps, label_);
  }
  /// Backward of a gather through `maps` that keeps the rank (Pad, Slice): the inverse lists
  /// of every axis (device_math.hpp, invert_axis_map), uploaded once.
  Status set_adjoint(const Shape& in, const Shape& out, const AxisMaps& maps) {
    if (in.size() != out.size() || in.size() > kMaxAxes)
      return Status::internal(label_ + ": a gather's backward needs the input's rank");
    s_.rank = static_cast<int>(in.size());
    const std::vector<int64_t> dy_strides = row_major_strides(out);
    std::vector<int64_t> flat, offsets, sources;
    std::vector<size_t> at_offsets(in.size()), at_sources(in.size());
    for (size_t d = 0; d < in.size(); ++d) {
      s_.in_dims[d] = in[d];
      s_.dy_strides[d] = dy_strides[d];
      invert_axis_map(d < maps.size() ? maps[d] : std::vector<int64_t>{}, in[d], offsets, sources);
      at_offsets[d] = flat.size();
      flat.insert(flat.end(), offsets.begin(), offsets.end());
      at_sources[d] = flat.size();
      flat.insert(flat.end(), sources.begin(), sources.end());
    }
    if (!flat.empty()) {
      MOSAIC_RETURN_IF_ERROR(lists_.resize(flat.size() * sizeof(int64_t)));
      MOSAIC_RETURN_IF_ERROR(device().copy_to_device(lists_.data(), flat.data(), flat.size() * sizeof(int64_t)));
    }
    const auto* base = static_cast<const int64_t*>(lists_.data());
    for (size_t d = 0; d < in.size(); ++d) {
      s_.offsets[d] = base + at_offsets[d];
      s_.sources[d] = base + at_sources[d];
    }
    return Status::ok();
  }
  /// The index maps and their inverse lists, in device memory (the plan reports them under
  /// the device's workspace).
  size_t workspace_bytes() const override { return gather_.bytes() + lists_.bytes(); }
  Status gather(const float* x, Tensor* y, float fill, const float* fill_device) const {
    return check(gather_.run(device().stream(), x, y->f32(), fill, fill_device), "launch");
  }
  /// Pad's and Slice's backward: dx from dy through the inverse lists (padding and
  /// sliced-away elements get nothing; reflect and edge padding add up); the fill value (a
  /// run-time input) gets none, as on the host.
  Status scatter_backward(const BackwardArgs& a) const {
    MOSAIC_RETURN_IF_ERROR(zero_grads_from(a, 1));
    float* dx = grad_of(a, 0);
    if (!dx) return Status::ok();
    return check(launch_axis_scatter(device().stream(), s_, a.diff_dst[0]->f32(), dx, a.diff_src[0]->numel()),
                 "backward");
  }

 private:
  DeviceGather gather_;
  AxisScatter s_;
  DeviceMemory lists_;
};

/// Pad (constant, reflect, edge; negative pads crop), the constant a run-time input or not.
class PadKernel final : public AxisGatherKernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_RETURN_IF_ERROR(init_base(ctx));
    MOSAIC_ASSIGN_OR_RETURN(const PadParams p, pad_params(ctx));
    value_ = p.value;
    value_input_ = p.value_at_run_time;
    const Shape& in = ctx.inputs[0].shape;
    const AxisMaps maps = pad_axis_maps(p, in, ctx.outputs[0].shape);
    MOSAIC_RETURN_IF_ERROR(set_geometry(ctx.outputs[0].shape, row_major_strides(in), maps));
    return ctx.training ? set_adjoint(in, ctx.outputs[0].shape, maps) : Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const float* fill = value_input_ && src.size() > 2 && src[2] ? src[2]->f32() : nullptr;
    return gather(src[0]->f32(), dst[0], value_, fill);
  }
  bool has_backward() const override { return true; }
  bool backward_reads_input(size_t) const override { return false; }
  bool backward_reads_output(size_t) const override { return false; }
  Status backward(const BackwardArgs& a) override { return scatter_backward(a); }

 private:
  float value_ = 0.f;
  bool value_input_ = false;
};

/// Slice with constant starts, ends, axes and steps.
class SliceKernel final : public AxisGatherKernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_RETURN_IF_ERROR(init_base(ctx));
    MOSAIC_ASSIGN_OR_RETURN(const AxisMaps maps, slice_axis_maps(ctx));
    MOSAIC_RETURN_IF_ERROR(set_geometry(ctx.outputs[0].shape, row_major_strides(ctx.inputs[0].shape), maps));
    return ctx.training ? set_adjoint(ctx.inputs[0].shape, ctx.outputs[0].shape, maps) : Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    return gather(src[0]->f32(), dst[0], 0.f, nullptr);
  }
  bool has_backward() const override { return true; }
  bool backward_reads_input(size_t) const override { return false; }
  bool backward_reads_output(size_t) const override { return false; }
  Status backward(const BackwardArgs& a) override { return scatter_backward(a); }
};

/// Transpose: output axis d walks input axis perm[d].
class TransposeKernel final : public AxisGatherKernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_RETURN_IF_ERROR(init_base(ctx));
    MOSAIC_ASSIGN_OR_RETURN(const std::vector<int64_t> perm, transpose_perm(ctx));
    if (perm.size() > kMaxAxes) return Status::unsupported(label_ + ": the cuda backend moves up to 8 dimensions");
    const AxisGather g = transpose_gather(ctx.inputs[0].shape, perm);
    MOSAIC_RETURN_IF_ERROR(set_geometry(ctx.outputs[0].shape, std::vector<int64_t>(g.strides, g.strides + g.rank), {}));
    back_ = transpose_back_gather(ctx.inputs[0].shape, perm);
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    return gather(src[0]->f32(), dst[0], 0.f, nullptr);
  }
  bool has_backward() const override { return true; }
  bool backward_reads_input(size_t) const override { return false; }
  bool backward_reads_output(size_t) const override { return false; }
  Status backward(const BackwardArgs& a) override {
    float* dx = grad_of(a, 0);
    if (!dx) return Status::ok();
    return check(launch_axis_gather(device().stream(), back_, a.diff_dst[0]->f32(), dx, a.diff_src[0]->numel(), 0.f,
                                    nullptr),
                 "backward");
  }

 private:
  AxisGather back_;
};

/// Concat: each input's rows (the axes from `axis` on) copied into the output's, one strided
/// device-to-device copy per input.
class ConcatKernel final : public CudaKernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_RETURN_IF_ERROR(init_base(ctx));
    const Shape& out = ctx.outputs[0].shape;
    MOSAIC_ASSIGN_OR_RETURN(const int64_t axis,
                            normalize_axis(ctx.node->attr_int("axis", 0), static_cast<int64_t>(out.size()), *ctx.node));
    for (int64_t a = 0; a < axis; ++a) rows_ *= out[a];
    int64_t inner = 1;
    for (size_t a = static_cast<size_t>(axis) + 1; a < out.size(); ++a) inner *= out[a];
    out_row_ = out[axis] * inner;
    for (size_t i = 0; i < ctx.inputs.size(); ++i) in_rows_.push_back(ctx.has_input(i) ? ctx.inputs[i].shape[axis] * inner : 0);
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    float* y = dst[0]->f32();
    int64_t offset = 0;
    for (size_t i = 0; i < src.size(); ++i) {
      if (!src[i] || in_rows_[i] == 0 || rows_ == 0) continue;
      const size_t f = sizeof(float);
      MOSAIC_RETURN_IF_ERROR(check(cudaMemcpy2DAsync(y + offset, out_row_ * f, src[i]->f32(), in_rows_[i] * f,
                                                     in_rows_[i] * f, rows_, cudaMemcpyDeviceToDevice, device().stream()),
                                   "copy"));
      offset += in_rows_[i];
    }
    return Status::ok();
  }
  bool has_backward() const override { return true; }
  bool backward_reads_input(size_t) const override { return false; }
  bool backward_reads_output(size_t) const override { return false; }
  /// Each input's gradient is its slab of dy: forward's copies reversed.
  Status backward(const BackwardArgs& a) override {
    const float* dy = a.diff_dst[0]->f32();
    int64_t offset = 0;
    const size_t f = sizeof(float);
    for (size_t i = 0; i < in_rows_.size(); ++i) {
      float* dx = grad_of(a, i);
      if (dx && in_rows_[i] > 0 && rows_ > 0)
        MOSAIC_RETURN_IF_ERROR(check(cudaMemcpy2DAsync(dx, in_rows_[i] * f, dy + offset, out_row_ * f, in_rows_[i] * f,
                                                       rows_, cudaMemcpyDeviceToDevice, device().stream()),
                                     "backward copy"));
      offset += in_rows_[i];
    }
    return Status::ok();
  }

 private:
  int64_t rows_ = 1, out_row_ = 0;
  std::vector<int64_t> in_rows_;
};

/// Gather of float32 data by int64 indices (embedding lookups: token ids into a table).
/// Constant indices are checked when the kernel is built (the planner keeps their resident
/// copy on the device). Run-time ones
/// (token ids copied in with the batch) are checked on the device as they are read: an index
/// outside the axis gives 0 and reports its position, and the kernel waits for that report
/// after each launch (one round trip to the device per Gather and run) to fail with the
/// host's message, naming the input, the index and its position. Backward scatter-adds
/// dy's rows with atomic adds (repeated ids add up in no fixed order: declined in a
/// deterministic plan, whose Gather then trains on the host).
class GatherKernel final : public CudaKernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_RETURN_IF_ERROR(init_base(ctx));
    const Shape& x = ctx.inputs[0].shape;
    MOSAIC_ASSIGN_OR_RETURN(const int64_t axis, normalize_axis(ctx.node->attr_int("axis", 0),
                                                               static_cast<int64_t>(x.size()), *ctx.node));
    for (int64_t i = 0; i < axis; ++i) g_.outer *= x[i];
    g_.axis = x[axis];
    for (size_t i = static_cast<size_t>(axis) + 1; i < x.size(); ++i) g_.inner *= x[i];
    g_.count = shape_numel(ctx.inputs[1].shape);
    index_label_ = label_ + ": input '" + ctx.node->inputs[1] + "'";
    deterministic_ = ctx.deterministic;
    if (const Tensor* c = ctx.constant(1)) {
      const int64_t* idx = c->i64();
      for (int64_t j = 0; j < g_.count; ++j)
        if (gather_row(g_, idx, j) < 0) return gather_index_error(index_label_, idx[j], j, g_.axis);
      return Status::ok();
    }
    return first_bad_.resize(sizeof(unsigned long long));
  }
  size_t workspace_bytes() const override { return first_bad_.bytes(); }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const cudaStream_t stream = device().stream();
    const int64_t* idx = src[1]->i64();
    auto* first_bad = static_cast<unsigned long long*>(first_bad_.data());
    if (first_bad) MOSAIC_RETURN_IF_ERROR(check(cudaMemsetAsync(first_bad, 0xFF, sizeof(*first_bad), stream), "reset"));
    MOSAIC_RETURN_IF_ERROR(check(launch_gather(stream, g_, src[0]->f32(), idx, dst[0]->f32(), first_bad), "launch"));
    if (!first_bad) return Status::ok();
    unsigned long long bad = 0;
    MOSAIC_RETURN_IF_ERROR(check(cudaMemcpyAsync(&bad, first_bad, sizeof(bad), cudaMemcpyDeviceToHost, stream), "report"));
    MOSAIC_RETURN_IF_ERROR(check(cudaStreamSynchronize(stream), "report"));
    if (bad == ~0ull) return Status::ok();
    int64_t value = 0;
    MOSAIC_RETURN_IF_ERROR(check(cudaMemcpy(&value, idx + bad, sizeof(value), cudaMemcpyDeviceToHost), "report"));
    return gather_index_error(index_label_, value, static_cast<int64_t>(bad), g_.axis);
  }
  bool has_backward() const override { return !deterministic_; }
  bool backward_reads_input(size_t i) const override { return i == 1; }
  bool backward_reads_output(size_t) const override { return false; }
  Status backward(const BackwardArgs& a) override {
    float* dx = grad_of(a, 0);
    if (!dx) return Status::ok();
    return check(launch_gather_backward(device().stream(), g_, a.src[1]->i64(), a.diff_dst[0]->f32(), dx,
                                        a.diff_src[0]->numel()),
                 "backward");
  }

 private:
  GatherGeometry g_;
  std::string index_label_;
  bool deterministic_ = false;
  DeviceMemory first_bad_;  // run-time indices: the first position outside the axis (none: constant ones)
};

class ReduceKernel final : public CudaKernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_RETURN_IF_ERROR(init_base(ctx));
    const auto row = reduce_op_of(ctx.node->op_type);
    const auto op = row ? device_reduce(*row) : std::nullopt;
    if (!op) return Status::unsupported(label_ + ": the cuda backend has no kernel for " + ctx.node->op_type);
    op_ = *op;
    MOSAIC_ASSIGN_OR_RETURN(const ReduceParams p, reduce_params(ctx));
    if (p.axes.empty()) return Status::unsupported(label_ + ": no axis to reduce (noop_with_empty_axes), a copy");
    if (p.in.size() > kMaxAxes) return Status::unsupported(label_ + ": the cuda backend reduces up to 8 dimensions");
    g_ = reduce_geometry(p);
    back_ = reduce_back(p);
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    return check(launch_reduce(device().stream(), op_, g_, src[0]->f32(), dst[0]->f32(), dst[0]->numel()), "launch");
  }
  bool has_backward() const override { return true; }
  bool backward_reads_input(size_t i) const override { return i == 0 && reads_forward(); }
  bool backward_reads_output(size_t) const override { return reads_forward(); }
  size_t workspace_bytes() const override { return stats_.bytes(); }
  /// The rows' dx per input element; Max, Min and Prod first gather their groups' ties or
  /// zeros (dev_reduce_stats). The axes input gets no gradient.
  Status backward(const BackwardArgs& a) override {
    MOSAIC_RETURN_IF_ERROR(zero_grads_from(a, 1));
    float* dx = grad_of(a, 0);
    if (!dx) return Status::ok();
    const int64_t n_out = a.diff_dst[0]->numel();
    double* stats = nullptr;
    if (op_ == DevReduce::kMax || op_ == DevReduce::kMin || op_ == DevReduce::kProd) {
      const size_t need = 2 * static_cast<size_t>(n_out) * sizeof(double);
      if (stats_.bytes() < need) MOSAIC_RETURN_IF_ERROR(stats_.resize(need));
      stats = static_cast<double*>(stats_.data());
    }
    const float* x = reads_forward() ? a.src[0]->f32() : nullptr;
    const float* y = reads_forward() ? a.dst[0]->f32() : nullptr;
    return check(launch_reduce_backward(device().stream(), op_, g_, back_, x, y, a.diff_dst[0]->f32(), stats, dx,
                                        a.diff_src[0]->numel(), n_out),
                 "backward");
  }

 private:
  /// Sum's and Mean's gradients read neither x nor y.
  bool reads_forward() const { return op_ != DevReduce::kSum && op_ != DevReduce::kMean; }
  DevReduce op_ = DevReduce::kSum;
  ReduceGeometry g_;
  ReduceBack back_;
  DeviceMemory stats_;  // backward of Max, Min, Prod: each output's ties or zeros
};

}  // namespace

void add_movement_kernels(BackendRegistration& r) {
  r.kernel("Pad", make_factory<PadKernel>())
      .kernel("Slice", make_factory<SliceKernel>())
      .kernel("Transpose", make_factory<TransposeKernel>())
      .kernel("Concat", make_factory<ConcatKernel>());
  for (const ReduceOpInfo& info : kReduceOps)
    if (device_reduce(info.op)) r.kernel(info.name, make_factory<ReduceKernel>());
  // Gather takes float32 data and int64 indices, run-time ones too (its own check, in place of
  // float32_kernels').
  r.kernel("Gather", make_factory<GatherKernel>(), KernelTraits{LayoutUse::kNone, [](const KernelContext& ctx) {
             if (ctx.inputs[0].dtype != DType::kF32 || ctx.inputs[1].dtype != DType::kI64)
               return Status::unsupported(ctx.node->label() + ": the cuda backend gathers float32 data by int64 indices");
             return Status::ok();
           }});
}

}  // namespace mosaic::cuda_backend
