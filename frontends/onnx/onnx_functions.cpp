#include "frontends/onnx/onnx_functions.hpp"

#include <onnx/onnx_pb.h>

#include <google/protobuf/unknown_field_set.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "operators/onnx_versions.hpp"

namespace mosaic {
namespace {

// Fields newer than the onnx 1.12 headers Mosaic builds against, read from the message's
// unknown fields (their numbers are fixed by onnx.proto).
constexpr int kNodeOverloadField = 8;          // NodeProto.overload (IR 10)
constexpr int kFunctionAttributeProtoField = 11;  // FunctionProto.attribute_proto (IR 9): defaults
constexpr int kFunctionOverloadField = 13;     // FunctionProto.overload (IR 10)

std::string unknown_string(const google::protobuf::Message& m, int field) {
  const auto& u = m.GetReflection()->GetUnknownFields(m);
  for (int i = 0; i < u.field_count(); ++i)
    if (u.field(i).number() == field && u.field(i).type() == google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED)
      return u.field(i).length_delimited();
  return "";
}

bool standard_domain(const std::string& d) { return d.empty() || d == "ai.onnx"; }

std::string key(const std::string& domain, const std::string& name, const std::string& overload) {
  return domain + '\n' + name + '\n' + overload;
}

struct Function {
  const onnx::FunctionProto* proto = nullptr;
  std::map<std::string, onnx::AttributeProto> defaults;  // attribute_proto, by name
  std::set<std::string> attributes;                      // every attribute the function declares
  std::string label;                                     // "function 'pkg.torch.Block'"
};

class Inliner {
 public:
  Inliner(const onnx::ModelProto& model, const std::string& path) : path_(path) {
    for (const auto& op : model.opset_import())
      if (standard_domain(op.domain())) opset_ = op.version();
  }

  Status add(const onnx::FunctionProto& f) {
    Function fn;
    fn.proto = &f;
    fn.label = "function '" + f.domain() + (f.domain().empty() ? "" : ".") + f.name() + "'";
    for (const std::string& a : f.attribute()) fn.attributes.insert(a);
    const auto& u = f.GetReflection()->GetUnknownFields(f);
    for (int i = 0; i < u.field_count(); ++i) {
      if (u.field(i).number() != kFunctionAttributeProtoField) continue;
      onnx::AttributeProto a;
      if (u.field(i).type() != google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED ||
          !a.ParseFromString(u.field(i).length_delimited()) || a.name().empty())
        return Status::invalid(path_ + ": " + fn.label + ": an attribute default does not parse");
      fn.attributes.insert(a.name());
      fn.defaults[a.name()] = std::move(a);
    }
    MOSAIC_RETURN_IF_ERROR(check_opset(fn));
    const std::string k = key(f.domain(), f.name(), unknown_string(f, kFunctionOverloadField));
    if (!functions_.emplace(k, std::move(fn)).second)
      return Status::invalid(path_ + ": function '" + f.domain() + "." + f.name() + "' is defined twice");
    return Status::ok();
  }

  /// Counts the nodes the graph has once every call is inlined, before anything is copied:
  /// refuses a function that calls itself and a graph beyond kMaxInlinedNodes.
  Status check_size(const onnx::GraphProto& g) {
    size_t total = 0;
    for (const auto& n : g.node()) {
      size_t k = 1;
      if (const Function* f = find(n)) {
        MOSAIC_ASSIGN_OR_RETURN(k, inlined_size(*f, "node '" + n.name() + "' (" + n.op_type() + ")"));
      }
      total = std::min(total + k, kMaxInlinedNodes + 1);
    }
    if (total > kMaxInlinedNodes)
      return Status::invalid(path_ + ": more than " + std::to_string(kMaxInlinedNodes) +
                             " nodes once its function calls are inlined");
    return Status::ok();
  }

  /// Appends `n` to `out`, or, for a call, its body, recursively. `top`: the graph's node
  /// that the expansion started from, which errors name.
  Status expand(const onnx::NodeProto& n, int depth, google::protobuf::RepeatedPtrField<onnx::NodeProto>* out,
                std::string top = "") {
    if (top.empty()) top = "node '" + n.name() + "' (" + n.op_type() + ")";
    const Function* found = find(n);
    if (!found) {
      if (static_cast<size_t>(out->size()) >= kMaxInlinedNodes)
        return Status::invalid(path_ + ": " + top + ": more than " + std::to_string(kMaxInlinedNodes) +
                               " nodes once its function calls are inlined");
      *out->Add() = n;
      return Status::ok();
    }
    const Function& fn = *found;
    const std::string call = depth == 0 ? top : top + ", inside it node '" + n.name() + "' (" + n.op_type() + ")";
    if (depth >= kMaxFunctionDepth)
      return Status::invalid(path_ + ": " + top + ": " + fn.label + " calls nest deeper than " +
                             std::to_string(kMaxFunctionDepth) + " (a function that calls itself?)");
    const onnx::FunctionProto& f = *fn.proto;
    if (n.input_size() > f.input_size() || n.output_size() > f.output_size())
      return Status::invalid(path_ + ": " + call + ": " + std::to_string(n.input_size()) + " inputs and " +
                             std::to_string(n.output_size()) + " outputs; " + fn.label + " has " +
                             std::to_string(f.input_size()) + " and " + std::to_string(f.output_size()));
    for (const auto& a : n.attribute())
      if (!fn.attributes.count(a.name()))
        return Status::invalid(path_ + ": " + call + ": attribute '" + a.name() + "' is not one of " + fn.label + "'s");
    const std::string prefix = (n.name().empty() ? n.op_type() : n.name()) + "/" + std::to_string(calls_++) + "/";
    std::map<std::string, std::string> names;  // formal -> actual
    for (int i = 0; i < f.input_size(); ++i) names[f.input(i)] = i < n.input_size() ? n.input(i) : "";
    for (int i = 0; i < f.output_size(); ++i)
      names[f.output(i)] = i < n.output_size() && !n.output(i).empty() ? n.output(i) : prefix + f.output(i);
    auto rename = [&](const std::string& v) {
      if (v.empty()) return v;
      auto m = names.find(v);
      return m != names.end() ? m->second : prefix + v;
    };
    std::map<std::string, const onnx::AttributeProto*> given;
    for (const auto& a : n.attribute()) given[a.name()] = &a;
    for (const onnx::NodeProto& body : f.node()) {
      onnx::NodeProto b = body;
      b.set_name(prefix + (body.name().empty() ? body.op_type() : body.name()));
      for (int i = 0; i < b.input_size(); ++i) b.set_input(i, rename(b.input(i)));
      for (int i = 0; i < b.output_size(); ++i) b.set_output(i, rename(b.output(i)));
      MOSAIC_RETURN_IF_ERROR(bind_attributes(&b, fn, given, call));
      MOSAIC_RETURN_IF_ERROR(expand(b, depth + 1, out, top));
    }
    return Status::ok();
  }

 private:
  // An attribute that refers to the function's (ref_attr_name) takes the call's value, else
  // the function's default, else is left out (the op's own default applies, as ONNX says).
  Status bind_attributes(onnx::NodeProto* b, const Function& fn,
                         const std::map<std::string, const onnx::AttributeProto*>& given, const std::string& call) {
    google::protobuf::RepeatedPtrField<onnx::AttributeProto> bound;
    for (const auto& a : b->attribute()) {
      if (a.ref_attr_name().empty()) {
        *bound.Add() = a;
        continue;
      }
      const onnx::AttributeProto* v = nullptr;
      if (auto g = given.find(a.ref_attr_name()); g != given.end()) v = g->second;
      else if (auto d = fn.defaults.find(a.ref_attr_name()); d != fn.defaults.end()) v = &d->second;
      else if (!fn.attributes.count(a.ref_attr_name()))
        return Status::invalid(path_ + ": " + call + ": " + fn.label + " refers to attribute '" + a.ref_attr_name() +
                               "', which it does not declare");
      if (!v) continue;
      if (v->type() != a.type() && a.type() != onnx::AttributeProto::UNDEFINED)
        return Status::invalid(path_ + ": " + call + ": attribute '" + a.ref_attr_name() + "' has the wrong type for " +
                               fn.label);
      onnx::AttributeProto c = *v;
      c.set_name(a.name());
      *bound.Add() = std::move(c);
    }
    b->mutable_attribute()->Swap(&bound);
    return Status::ok();
  }

  // Mosaic computes a graph at one opset: a function imported at another is inlined only
  // where each of its ops has the same version under both.
  Status check_opset(const Function& fn) {
    int64_t own = -1;
    for (const auto& op : fn.proto->opset_import())
      if (standard_domain(op.domain())) own = op.version();
    if (own < 0 || own == opset_) return Status::ok();
    for (const auto& b : fn.proto->node()) {
      if (!standard_domain(b.domain())) continue;
      const int mine = onnx_op_version(b.op_type(), own), model = onnx_op_version(b.op_type(), opset_);
      if (mine != model)
        return Status::unsupported(path_ + ": " + fn.label + " imports opset " + std::to_string(own) +
                                   ", the model " + std::to_string(opset_) + ": its " + b.op_type() + " is version " +
                                   std::to_string(mine) + " there and " + std::to_string(model) +
                                   " in the model (Mosaic computes a graph at one opset)");
    }
    return Status::ok();
  }

  const Function* find(const onnx::NodeProto& n) const {
    auto it = functions_.find(key(n.domain(), n.op_type(), unknown_string(n, kNodeOverloadField)));
    return it == functions_.end() ? nullptr : &it->second;
  }

  // Nodes in f's body once inlined (saturating past the limit); a cycle of calls is an error.
  Expected<size_t> inlined_size(const Function& f, const std::string& top) {
    if (auto it = sizes_.find(&f); it != sizes_.end()) {
      if (it->second == kVisiting)
        return Status::invalid(path_ + ": " + top + ": " + f.label + " calls itself, directly or through others");
      return it->second;
    }
    sizes_[&f] = kVisiting;
    size_t total = 0;
    for (const auto& b : f.proto->node()) {
      size_t k = 1;
      if (const Function* callee = find(b)) {
        MOSAIC_ASSIGN_OR_RETURN(k, inlined_size(*callee, top));
      }
      total = std::min(total + k, kMaxInlinedNodes + 1);
    }
    sizes_[&f] = total;
    return total;
  }

  static constexpr size_t kVisiting = SIZE_MAX;
  std::map<const Function*, size_t> sizes_;
  std::string path_;
  int64_t opset_ = 0;
  std::map<std::string, Function> functions_;
  size_t calls_ = 0;
};

}  // namespace

Status inline_local_functions(onnx::ModelProto& model, const std::string& path) {
  if (model.functions_size() == 0) return Status::ok();
  Inliner inliner(model, path);
  for (const auto& f : model.functions()) MOSAIC_RETURN_IF_ERROR(inliner.add(f));
  MOSAIC_RETURN_IF_ERROR(inliner.check_size(model.graph()));
  google::protobuf::RepeatedPtrField<onnx::NodeProto> nodes;
  for (const auto& n : model.graph().node()) MOSAIC_RETURN_IF_ERROR(inliner.expand(n, 0, &nodes));
  model.mutable_graph()->mutable_node()->Swap(&nodes);
  model.clear_functions();
  return Status::ok();
}

}  // namespace mosaic
