#include "core/kernel.hpp"

#include <algorithm>
#include <cstring>

#include "ir/device.hpp"

namespace mosaic {

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::kBF16: return "bf16";
    case Precision::kTF32: return "tf32";
    case Precision::kF16: return "fp16";
    default: return "f32";
  }
}

Expected<Precision> parse_precision(const std::string& text) {
  if (text == "f32" || text == "fp32" || text == "float32") return Precision::kF32;
  if (text == "bf16" || text == "bfloat16") return Precision::kBF16;
  if (text == "tf32") return Precision::kTF32;
  if (text == "fp16" || text == "f16" || text == "float16" || text == "half") return Precision::kF16;
  return Status::invalid("--precision: '" + text + "' is not a precision (f32, bf16, tf32 or fp16)");
}

std::string precision_declined(const BackendInfo& info, Precision p) {
  if (info.declines_precision) return info.declines_precision(p);
  return p == Precision::kF32 ? "" : "it computes in float32 only";
}

std::string backend_unavailable(const BackendInfo& info) { return info.unavailable ? info.unavailable() : ""; }

Status KernelRegistry::add_backend(BackendInfo info) {
  if (info.name.empty() || info.name.find_first_of(", =@*\t\n") != std::string::npos)
    return Status::invalid("backend name '" + info.name + "': must be non-empty, without spaces, ',', '=', '@' or '*'");
  if (has_backend(info.name)) return Status::invalid("backend '" + info.name + "' is registered twice");
  table_[info.name];
  order_.push_back(std::move(info));
  return Status::ok();
}

Status KernelRegistry::add(const std::string& backend, const std::string& op_type, KernelFactory factory,
                           KernelTraits traits) {
  auto it = table_.find(backend);
  if (it == table_.end())
    return Status::invalid("kernel for " + op_type + ": backend '" + backend + "' is not registered");
  if (!it->second.emplace(op_type, Entry{std::move(factory), std::move(traits)}).second)
    return Status::invalid("backend '" + backend + "' registers a kernel for " + op_type + " twice");
  return Status::ok();
}

Status KernelRegistry::replace(const std::string& backend, const std::string& op_type, KernelFactory factory) {
  if (!has_kernel(backend, op_type))
    return Status::not_found("backend '" + backend + "' has no kernel for " + op_type + " to replace");
  table_[backend][op_type].factory = std::move(factory);
  return Status::ok();
}

const BackendInfo* KernelRegistry::info(const std::string& backend) const {
  for (const auto& b : order_)
    if (b.name == backend) return &b;
  return nullptr;
}

bool KernelRegistry::has_backend(const std::string& backend) const { return table_.count(backend) != 0; }

bool KernelRegistry::has_kernel(const std::string& backend, const std::string& op_type) const {
  auto it = table_.find(backend);
  return it != table_.end() && it->second.count(op_type) != 0;
}

std::vector<std::string> KernelRegistry::backends() const {
  std::vector<std::string> names;
  for (const auto& b : order_) names.push_back(b.name);
  return names;
}

std::string KernelRegistry::unavailable(const std::string& backend) const {
  const BackendInfo* b = info(backend);
  return b ? backend_unavailable(*b) : "";
}

std::vector<std::string> KernelRegistry::available_backends() const {
  std::vector<std::string> names;
  for (const auto& b : order_)
    if (backend_unavailable(b).empty()) names.push_back(b.name);
  return names;
}

std::vector<std::string> KernelRegistry::ops(const std::string& backend) const {
  std::vector<std::string> out;
  auto it = table_.find(backend);
  if (it != table_.end())
    for (const auto& [op, f] : it->second)
    if (op != kToPlainOp) out.push_back(op);
  return out;
}

const KernelRegistry::Entry* KernelRegistry::entry(const std::string& backend, const std::string& op_type) const {
  auto it = table_.find(backend);
  if (it == table_.end()) return nullptr;
  auto k = it->second.find(op_type);
  return k == it->second.end() ? nullptr : &k->second;
}

const KernelTraits* KernelRegistry::traits(const std::string& backend, const std::string& op_type) const {
  const Entry* e = entry(backend, op_type);
  return e ? &e->traits : nullptr;
}

namespace {

/// Whether every present input and output of the node has a type in `set`.
Status check_dtypes(DTypeSet set, const KernelContext& ctx) {
  auto check = [&](const std::vector<TensorDesc>& descs, const std::vector<bool>& present, const char* what) {
    for (size_t i = 0; i < descs.size(); ++i) {
      if (i < present.size() && !present[i]) continue;
      if (!(set & dtype_bit(descs[i].dtype)))
        return Status::unsupported(ctx.node->label() + ": " + what + " " + std::to_string(i) + " is " +
                                   dtype_name(descs[i].dtype) + "; its kernel takes " + dtype_set_str(set));
    }
    return Status::ok();
  };
  MOSAIC_RETURN_IF_ERROR(check(ctx.inputs, ctx.input_present, "input"));
  return check(ctx.outputs, ctx.output_present, "output");
}

}  // namespace

Capability KernelRegistry::query(const std::string& backend, const KernelContext& ctx) const {
  Capability cap;
  if (!has_backend(backend)) {
    cap.status = Status::not_found("unknown backend '" + backend + "'");
    return cap;
  }
  if (const std::string why = unavailable(backend); !why.empty()) {
    cap.status = Status::unsupported("backend '" + backend + "' is unavailable here: " + why);
    return cap;
  }
  const Entry* e = entry(backend, ctx.node->op_key());
  if (!e) {
    cap.status = Status::unsupported("backend '" + backend + "' has no kernel for " + ctx.node->op_key());
    return cap;
  }
  if (Status st = check_dtypes(e->traits.dtypes, ctx); !st.is_ok()) {
    cap.status = st.with_context(backend);
    return cap;
  }
  if (e->traits.supports) {
    cap.status = e->traits.supports(ctx);
    if (!cap.status.is_ok()) {
      cap.status = cap.status.with_context(backend);
      return cap;
    }
  }
  cap.layouts = e->traits.layouts == LayoutUse::kTraining || (e->traits.layouts == LayoutUse::kInference && !ctx.training);
  return cap;
}

namespace {

/// Stands in for a node whose every output is empty: there is nothing to compute, and the
/// gradient of each input is zero (no element of it reaches the loss).
class EmptyOutputsKernel final : public Kernel {
 public:
  Status forward(const std::vector<const Tensor*>&, const std::vector<Tensor*>&) override { return Status::ok(); }
  bool has_backward() const override { return true; }
  bool backward_reads_input(size_t) const override { return false; }
  bool backward_reads_output(size_t) const override { return false; }
  Status backward(const BackwardArgs& a) override {
    for (Tensor* d : a.diff_src) {
      if (!d || !d->bytes()) continue;
      if (Device* device = d->device()) MOSAIC_RETURN_IF_ERROR(device->zero(d->data(), d->bytes()));
      else std::memset(d->data(), 0, d->bytes());
    }
    return Status::ok();
  }
};

bool every_output_empty(const KernelContext& ctx) {
  if (ctx.node->op_type == kToDeviceOp || ctx.node->op_type == kToHostOp) return false;
  int present = 0;
  for (size_t i = 0; i < ctx.outputs.size(); ++i) {
    if (i < ctx.output_present.size() && !ctx.output_present[i]) continue;  // an omitted optional output
    ++present;
    if (ctx.outputs[i].numel() != 0) return false;
  }
  return present > 0;
}

}  // namespace

Expected<std::unique_ptr<Kernel>> KernelRegistry::create(const std::string& backend, const KernelContext& ctx) const {
  Capability cap = query(backend, ctx);
  if (!cap.accepted()) return cap.status;
  // A node whose outputs are all empty (ONNX allows zero-sized tensors: an exporter's x[:, 4:]
  // of a width-4 x) computes nothing: its kernel is not built, since a backend's set-up may
  // divide by an extent of 0 or hand a library a zero-sized primitive, and no backend needs
  // code for it. The backend that accepted the node is still the one the plan names.
  if (every_output_empty(ctx)) return std::unique_ptr<Kernel>(new EmptyOutputsKernel());
  auto made = entry(backend, ctx.node->op_key())->factory(ctx);
  if (!made.ok()) return made.status().with_context(backend);
  return made;
}

}  // namespace mosaic
