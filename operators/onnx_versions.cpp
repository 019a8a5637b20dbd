#include "operators/onnx_versions.hpp"

#include <algorithm>
#include <map>

#include "ir/graph.hpp"
#include "operators/schema.hpp"

namespace mosaic {
namespace {

// Plain data, constant-initialised: schemas are built from it during other files' static
// initialisation. A version list ends at its first 0.
struct OnnxOpHistory {
  const char* op;
  int versions[16];
};

#include "operators/onnx_versions_table.inc"

const std::map<std::string, std::vector<int>>& history() {
  static const std::map<std::string, std::vector<int>> h = [] {
    std::map<std::string, std::vector<int>> m;
    for (const OnnxOpHistory& e : kOnnxOpHistory)
      for (int v : e.versions)
        if (v) m[e.op].push_back(v);
    return m;
  }();
  return h;
}

}  // namespace

int onnx_latest_opset() { return kOnnxLatestOpset; }
const char* onnx_release() { return kOnnxRelease; }

const std::vector<int>& onnx_op_versions(const std::string& op) {
  static const std::vector<int> none;
  auto it = history().find(op);
  return it == history().end() ? none : it->second;
}

int onnx_op_version(const std::string& op, int64_t opset) {
  int v = 0;
  for (int since : onnx_op_versions(op))
    if (since <= opset) v = since;
  return v;
}

std::string onnx_type_name(int64_t code) {
  // TensorProto.DataType, onnx.proto (onnx 1.23).
  static const char* const kNames[] = {"UNDEFINED", "FLOAT", "UINT8", "INT8", "UINT16", "INT16", "INT32",
                                       "INT64", "STRING", "BOOL", "FLOAT16", "DOUBLE", "UINT32", "UINT64",
                                       "COMPLEX64", "COMPLEX128", "BFLOAT16", "FLOAT8E4M3FN", "FLOAT8E4M3FNUZ",
                                       "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "UINT4", "INT4", "FLOAT4E2M1",
                                       "FLOAT8E8M0", "UINT2", "INT2", "FLOAT6E2M3", "FLOAT6E3M2"};
  constexpr int64_t n = sizeof(kNames) / sizeof(kNames[0]);
  return code >= 0 && code < n ? kNames[code] : "code " + std::to_string(code);
}

DType dtype_of_onnx(int64_t code) {
  switch (code) {
    case 1: return DType::kF32;
    case 2: return DType::kU8;
    case 3: return DType::kI8;
    case 4: return DType::kU16;
    case 5: return DType::kI16;
    case 6: return DType::kI32;
    case 7: return DType::kI64;
    case 9: return DType::kBool;
    case 10: return DType::kF16;
    case 11: return DType::kF64;
    case 12: return DType::kU32;
    case 13: return DType::kU64;
    case 16: return DType::kBF16;
    case 17: return DType::kF8E4M3FN;
    case 18: return DType::kF8E4M3FNUZ;
    case 19: return DType::kF8E5M2;
    case 20: return DType::kF8E5M2FNUZ;
    case 21: return DType::kU4;
    case 22: return DType::kI4;
    case 23: return DType::kF4E2M1;
    case 24: return DType::kF8E8M0;
    case 25: return DType::kU2;
    case 26: return DType::kI2;
    default: return DType::kCount;
  }
}

int32_t onnx_code_of(DType d) {
  for (int32_t code = 1; code <= 26; ++code)
    if (dtype_of_onnx(code) == d) return code;
  return 0;
}

std::string version_ranges_str(const std::vector<VersionRange>& ranges) {
  std::string s;
  bool several = ranges.size() > 1;
  for (size_t i = 0; i < ranges.size(); ++i) {
    const VersionRange& r = ranges[i];
    if (i) s += i + 1 == ranges.size() ? " and " : ", ";
    if (r.first == r.last) s += std::to_string(r.first);
    else {
      s += std::to_string(r.first) + " to " + std::to_string(r.last);
      several = true;
    }
  }
  return (several ? "versions " : "version ") + s;
}

Status check_op_version(const Node& node, const OpSchema& schema, int64_t opset) {
  const std::vector<int>& all = onnx_op_versions(node.op_type);
  if (all.empty() || schema.versions.empty()) return Status::ok();
  int v = onnx_op_version(node.op_type, opset);
  if (v == 0) v = all.front();
  for (const VersionRange& r : schema.versions)
    if (v >= r.first && v <= r.last) return Status::ok();
  return Status::unsupported(node.label() + ": " + node.op_type + " version " + std::to_string(v) + " (opset " +
                             std::to_string(opset) + "): Mosaic implements " + node.op_type + " " +
                             version_ranges_str(schema.versions));
}

}  // namespace mosaic
