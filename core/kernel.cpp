#include "core/kernel.hpp"

#include <algorithm>

namespace mosaic {

void KernelRegistry::add(const std::string& backend, const std::string& op_type, KernelFactory factory) {
  if (!table_.count(backend)) order_.push_back(backend);
  table_[backend][op_type] = std::move(factory);
}

bool KernelRegistry::has_backend(const std::string& backend) const { return table_.count(backend) != 0; }

bool KernelRegistry::has_kernel(const std::string& backend, const std::string& op_type) const {
  auto it = table_.find(backend);
  return it != table_.end() && it->second.count(op_type) != 0;
}

std::vector<std::string> KernelRegistry::backends() const { return order_; }

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

}  // namespace mosaic
