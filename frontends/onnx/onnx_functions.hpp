// ONNX local functions (ModelProto.functions: PyTorch's torch.export-based exporter writes
// its modules as functions when asked to), inlined at load: each call becomes the
// function's body, its values renamed under the calling node's name, its attribute
// references bound to the call's attributes or the function's defaults.
#pragma once

#include <string>

#include "ir/status.hpp"

namespace onnx {
class ModelProto;
}

namespace mosaic {

/// Limits that keep a hostile model from expanding without end: calls nested deeper than
/// kMaxFunctionDepth (a function calling itself, directly or not), or more than
/// kMaxInlinedNodes nodes after inlining, are refused naming the function.
constexpr int kMaxFunctionDepth = 64;
constexpr size_t kMaxInlinedNodes = size_t{1} << 20;

/// Replaces every call to one of `model`'s local functions in its main graph by the
/// function's body. A function whose standard-domain opset differs from the model's is
/// accepted when every op of its body has the same version under both, else refused
/// (unsupported) naming the function and the op. Errors name `path`, the calling node and
/// the function.
Status inline_local_functions(onnx::ModelProto& model, const std::string& path);

}  // namespace mosaic
