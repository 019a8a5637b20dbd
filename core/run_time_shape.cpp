#include "core/run_time_shape.hpp"

#include <cstring>

#include "core/prepare.hpp"

namespace mosaic {

bool has_run_time_shape(const Node& node) { return node.attrs.count(kRunTimeShapeAttr) > 0; }

namespace {

class RunTimeShapeKernel final : public Kernel {
 public:
  RunTimeShapeKernel(const KernelContext& ctx, const KernelRegistry& registry, std::string backend)
      : node_(*ctx.node), opset_(ctx.opset), planned_(ctx.outputs), registry_(registry), backend_(std::move(backend)) {
    node_.attrs.erase(kRunTimeShapeAttr);
  }

  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    Graph g;
    g.source = "run-time evaluation";
    g.opset = opset_;
    for (size_t i = 0; i < node_.inputs.size(); ++i) {
      if (node_.inputs[i].empty() || !src[i]) continue;
      g.initializers[node_.inputs[i]] = *src[i];
      g.constants.insert(node_.inputs[i]);
    }
    for (size_t o = 0; o < node_.outputs.size(); ++o)
      if (node_.has_output(o)) g.outputs.push_back(ValueInfo{node_.outputs[o], planned_[o].dtype, planned_[o].shape, {}, true});
    g.nodes = {node_};
    PrepareOptions po;
    po.fold_backend = backend_;
    auto folded = prepare_graph(g, registry_, po);
    if (!folded.ok()) return folded.status().with_context(node_.label() + " at run time");
    if (!g.nodes.empty()) return Status::internal(node_.label() + ": did not fold on its run-time inputs");
    for (size_t o = 0; o < node_.outputs.size(); ++o) {
      if (!node_.has_output(o) || !dst[o]) continue;
      const Tensor& v = g.initializers.at(node_.outputs[o]);
      if (v.dtype() != planned_[o].dtype || v.shape() != planned_[o].shape)
        return Status::invalid(node_.label() + ": output " + std::to_string(o) + " is " + v.desc().str() +
                               " where the plan was made for " + planned_[o].str() +
                               " (its shape depends on input values; plan again with these inputs)");
      if (v.bytes()) std::memcpy(dst[o]->data(), v.data(), v.bytes());
    }
    return Status::ok();
  }

 private:
  Node node_;
  int64_t opset_;
  std::vector<TensorDesc> planned_;
  const KernelRegistry& registry_;
  std::string backend_;
};

}  // namespace

Expected<std::unique_ptr<Kernel>> make_run_time_shape_kernel(const KernelContext& ctx, const KernelRegistry& registry,
                                                             const std::string& backend) {
  return std::unique_ptr<Kernel>(std::make_unique<RunTimeShapeKernel>(ctx, registry, backend));
}

}  // namespace mosaic
