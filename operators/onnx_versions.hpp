// ONNX's operator versions: for each standard-domain op, the opsets at which ONNX defined a
// new version of it (operators/onnx_versions_table.inc, generated from the onnx package by
// scripts/onnx_op_versions.py). A node's version is the newest of its op's versions at or
// below the model's opset; each schema states the versions Mosaic implements
// (OpSchema::versions), and the loader refuses the others (check_op_version).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/tensor.hpp"

#include "ir/status.hpp"

namespace mosaic {

struct Node;
struct OpSchema;

/// The newest opset of the ONNX release the table was generated from.
int onnx_latest_opset();
/// "1.23.2".
const char* onnx_release();
/// ONNX's versions of `op` (the opsets that introduced them, ascending); empty for an op
/// outside ONNX's standard domain.
const std::vector<int>& onnx_op_versions(const std::string& op);
/// The version of `op` in force at `opset`: its newest version at or below it; 0 where the
/// op is not defined yet at that opset (or not an ONNX op).
int onnx_op_version(const std::string& op, int64_t opset);

/// ONNX's name of a TensorProto element type code ("FLOAT16", "FLOAT8E5M2"), or
/// "code N" for one no ONNX release defines.
std::string onnx_type_name(int64_t code);
/// The DType of a TensorProto element type code; kCount for a type Mosaic has no DType for
/// (string, complex, float8e8m0, the 2-, 4- and 6-bit floats and integers).
DType dtype_of_onnx(int64_t code);
/// The TensorProto element type code of a DType.
int32_t onnx_code_of(DType dtype);

/// An inclusive range of an op's ONNX versions.
struct VersionRange {
  int first = 0, last = 0;
};
/// "versions 7 to 14" / "version 20" / "versions 2 to 18 and 21 to 28".
std::string version_ranges_str(const std::vector<VersionRange>& ranges);

/// Whether a standard-domain node's op version is one its schema implements. The error
/// (unsupported) names the node, the op, its version, the model's opset and the versions
/// Mosaic implements. An op used below the opset that introduced it is read as its first
/// version (its meaning is not in doubt: Mosaic's own fused graphs write Gelu at any opset).
Status check_op_version(const Node& node, const OpSchema& schema, int64_t opset);

}  // namespace mosaic
