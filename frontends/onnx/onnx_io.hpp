// ONNX frontend: load a model (with external data) into a Graph, save a Graph as ONNX,
// and read/write single TensorProto files (backend-test data sets).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "ir/graph.hpp"
#include "ir/status.hpp"

namespace mosaic {

/// A model file's bytes: a regular file only (a FIFO or a device would block), with errors
/// naming it.
Expected<std::string> read_model_bytes(const std::string& path);
/// Loads an ONNX model file. Errors name the file (and node/tensor where relevant).
Expected<Graph> load_onnx(const std::string& path);
/// Writes a graph as an ONNX model (opset graph.opset, weights as raw data).
Status save_onnx(const Graph& graph, const std::string& path);
/// Reads a serialized TensorProto (e.g. test_data_set_0/input_0.pb).
Expected<Tensor> load_tensor_pb(const std::string& path, std::string* name = nullptr);
Status save_tensor_pb(const Tensor& tensor, const std::string& name, const std::string& path);
/// Versions of the ONNX and protobuf libraries the frontend was built with.
std::vector<std::pair<std::string, std::string>> onnx_library_versions();

}  // namespace mosaic
