#include "core/kernel.hpp"

#include <algorithm>

namespace mosaic {

Status KernelRegistry::add_backend(BackendInfo info) {
  if (info.name.empty() || info.name.find_first_of(", =@*\t\n") != std::string::npos)
    return Status::invalid("backend name '" + info.name + "': must be non-empty, without spaces, ',', '=', '@' or '*'");
  if (has_backend(info.name)) return Status::invalid("backend '" + info.name + "' is registered twice");
  table_[info.name];
  order_.push_back(std::move(info));
  return Status::ok();
}

Status KernelRegistry::add(const std::string& backend, const std::string& op_type, KernelFactory factory) {
  auto it = table_.find(backend);
  if (it == table_.end())
    return Status::invalid("kernel for " + op_type + ": backend '" + backend + "' is not registered");
  if (!it->second.emplace(op_type, std::move(factory)).second)
    return Status::invalid("backend '" + backend + "' registers a kernel for " + op_type + " twice");
  return Status::ok();
}

Status KernelRegistry::replace(const std::string& backend, const std::string& op_type, KernelFactory factory) {
  if (!has_kernel(backend, op_type))
    return Status::not_found("backend '" + backend + "' has no kernel for " + op_type + " to replace");
  table_[backend][op_type] = std::move(factory);
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

void KernelRegistry::add_layout_op(const std::string& backend, const std::string& op_type, bool in_training) {
  layout_ops_[backend].insert(op_type);
  if (in_training) training_layout_ops_[backend].insert(op_type);
}

bool KernelRegistry::accepts_layouts(const std::string& backend, const std::string& op_type, bool training) const {
  const auto& ops = training ? training_layout_ops_ : layout_ops_;
  auto it = ops.find(backend);
  return it != ops.end() && it->second.count(op_type) != 0;
}

std::vector<std::string> KernelRegistry::ops(const std::string& backend) const {
  std::vector<std::string> out;
  auto it = table_.find(backend);
  if (it != table_.end())
    for (const auto& [op, f] : it->second)
    if (op != kToPlainOp) out.push_back(op);
  return out;
}

Expected<std::unique_ptr<Kernel>> KernelRegistry::create(const std::string& backend, const KernelContext& ctx) const {
  auto it = table_.find(backend);
  if (it == table_.end()) return Status::not_found("unknown backend '" + backend + "'");
  auto k = it->second.find(ctx.node->op_type);
  if (k == it->second.end())
    return Status::unsupported("backend '" + backend + "' has no kernel for " + ctx.node->op_type);
  auto made = k->second(ctx);
  if (!made.ok()) return made.status().with_context(backend);
  return made;
}

BackendRegistration::BackendRegistration(KernelRegistry& registry, BackendInfo info)
    : registry_(registry), name_(info.name), status_(registry.add_backend(std::move(info))) {}

BackendRegistration& BackendRegistration::kernel(const std::string& op_type, KernelFactory factory) {
  if (status_.is_ok()) status_ = registry_.add(name_, op_type, std::move(factory));
  return *this;
}

BackendRegistration& BackendRegistration::layouts(const std::string& op_type, bool in_training) {
  if (!status_.is_ok()) return *this;
  if (!registry_.has_kernel(name_, op_type))
    status_ = Status::invalid("backend '" + name_ + "' declares layouts for " + op_type + " without a kernel for it");
  else
    registry_.add_layout_op(name_, op_type, in_training);
  return *this;
}

}  // namespace mosaic
