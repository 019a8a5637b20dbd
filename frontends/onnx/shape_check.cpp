#include "frontends/onnx/shape_check.hpp"

#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include <map>

#include "frontends/onnx/onnx_io.hpp"

namespace mosaic {
namespace {

/// The value's shape where every dimension is a number; false otherwise.
bool static_shape(const onnx::ValueInfoProto& v, Shape* out) {
  if (!v.type().has_tensor_type() || !v.type().tensor_type().has_shape()) return false;
  out->clear();
  for (const auto& d : v.type().tensor_type().shape().dim()) {
    if (!d.has_dim_value()) return false;
    out->push_back(d.dim_value());
  }
  return true;
}

/// Sets the graph input's dimensions to `shape`.
void bind(onnx::ValueInfoProto* v, const Shape& shape) {
  auto* s = v->mutable_type()->mutable_tensor_type()->mutable_shape();
  s->clear_dim();
  for (int64_t d : shape) s->add_dim()->set_dim_value(d);
}

}  // namespace

Expected<ShapeCheck> check_shapes_against_onnx(const std::string& path, const Graph& prepared) {
  ShapeCheck check;
  MOSAIC_ASSIGN_OR_RETURN(std::string bytes, read_model_bytes(path));
  onnx::ModelProto model;
  if (bytes.empty() || !model.ParseFromString(bytes)) return check;  // the loader reports what is wrong
  bytes.clear();
  auto* g = model.mutable_graph();
  // Only ONNX's inference is compared: the exporter's annotations and declared output shapes
  // may name another batch than the one bound.
  g->clear_value_info();
  for (auto& out : *g->mutable_output()) out.mutable_type()->mutable_tensor_type()->clear_shape();
  for (auto& in : *g->mutable_input()) {
    const auto it = prepared.value_descs.find(in.name());
    if (it != prepared.value_descs.end() && in.type().has_tensor_type()) bind(&in, it->second.shape);
  }
  // Initializers' bytes are not needed beyond the constant inputs of shape arithmetic, which
  // ONNX reads from them (Reshape targets, Slice bounds): they stay.
  try {
    onnx::ShapeInferenceOptions options{false, 0, true};  // no type check, best effort, data propagation
    onnx::shape_inference::InferShapes(model, onnx::OpSchemaRegistry::Instance(), options);
  } catch (const std::exception&) {
    return check;  // ONNX could not infer this model at all: nothing to compare
  }
  std::map<std::string, Shape> onnx_shapes;
  for (const auto& v : g->value_info()) {
    Shape s;
    if (static_shape(v, &s)) onnx_shapes[v.name()] = s;
  }
  for (const auto& v : g->output()) {
    Shape s;
    if (static_shape(v, &s)) onnx_shapes[v.name()] = s;
  }
  for (const Node& node : prepared.nodes)
    for (const std::string& out : node.outputs) {
      if (out.empty()) continue;
      const auto mine = prepared.value_descs.find(out);
      if (mine == prepared.value_descs.end()) continue;
      const auto theirs = onnx_shapes.find(out);
      if (theirs == onnx_shapes.end()) {
        ++check.skipped;
        continue;
      }
      ++check.compared;
      if (theirs->second != mine->second.shape)
        return Status::invalid(path + ": " + node.label() + ": Mosaic infers shape " + shape_str(mine->second.shape) +
                               " for '" + out + "', ONNX's own shape inference " + shape_str(theirs->second) +
                               "; the run is stopped, since every backend (the naive oracle among them) would "
                               "compute Mosaic's shape and agree with each other");
    }
  return check;
}

}  // namespace mosaic
