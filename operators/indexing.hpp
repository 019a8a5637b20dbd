// Indexing and accumulation ops: CumSum, Tile and GatherElements. Their schemas (shape
// inference, FLOPs) and the parameters every kernel reads (backends/common/indexing.cpp).
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

/// Adds CumSum's, Tile's, GatherElements' and GatherND's schemas to the table (operators/schemas.cpp).
void add_indexing_schemas(std::map<std::string, OpSchema>& table);

}  // namespace mosaic
