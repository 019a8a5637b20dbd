// Indexing and accumulation ops: CumSum, Tile, GatherElements, GatherND, ScatterElements,
// ScatterND and TopK. Their schemas (shape inference, FLOPs) and the parameters every kernel
// reads (backends/common/indexing.cpp).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ir/status.hpp"
#include "ir/tensor.hpp"
#include "operators/op_context.hpp"

namespace mosaic {

struct OpSchema;

/// CumSum along `axis` (a constant input), viewed as [outer, axis, inner].
struct CumSumParams {
  int64_t outer = 1, axis_dim = 1, inner = 1;
  bool exclusive = false, reverse = false;
};
Expected<CumSumParams> cumsum_params(const OpContext& ctx);

/// Tile: each axis repeated `repeats[d]` times (a constant input).
Expected<std::vector<int64_t>> tile_repeats(const OpContext& ctx);

/// GatherElements' axis (normalised).
Expected<int64_t> gather_elements_axis(const OpContext& ctx);

/// GatherND: `batch` leading axes shared by data and indices, then each index tuple (the
/// last axis of indices, `depth` long) picks a slice of `slice` elements of data.
struct GatherNDParams {
  int64_t batch_dims = 0, batches = 1, depth = 0, tuples = 0, slice = 1;
  Shape data;
};
Expected<GatherNDParams> gather_nd_params(const OpContext& ctx);

/// ScatterElements and ScatterND's `reduction`: none (the last update wins where indices
/// repeat, which ONNX leaves undefined), add, mul, max, min.
enum class ScatterReduction { kNone, kAdd, kMul, kMax, kMin };
Expected<ScatterReduction> scatter_reduction(const OpContext& ctx);

/// TopK along `axis` viewed as [outer, axis_dim, inner]: the k largest (or smallest),
/// sorted, ties by lower index first.
struct TopKParams {
  int64_t outer = 1, axis_dim = 1, inner = 1, k = 0;
  bool largest = true;
};
Expected<TopKParams> topk_params(const OpContext& ctx);

/// Adds the schemas of the ops above to the table (operators/schemas.cpp).
void add_indexing_schemas(std::map<std::string, OpSchema>& table);

}  // namespace mosaic
