// Normalisations: InstanceNormalization (each channel of each image over its spatial
// positions), GroupNormalization (each group of channels of each image over the group's
// channels and spatial positions), RMSNormalization (opset 23: each row over the axes from `axis` on, by its
// root mean square), LpNormalization (along one axis, by its L1 or L2 norm) and
// MeanVarianceNormalization (over a set of axes, to mean 0 and variance 1). Schemas and the parameters every kernel reads; LayerNormalization and
// BatchNormalization are in operators/params.hpp and schemas.cpp.
#pragma once

#include <map>
#include <string>

#include "ir/status.hpp"
#include "operators/op_context.hpp"

namespace mosaic {

struct OpSchema;

/// GroupNormalization on [N, C, spatial...]: N * groups groups of C / groups channels each,
/// normalised over their channels and spatial positions, then scaled and shifted per channel
/// (opset 21) or per group (opset 18, whose scale and bias have one value per group).
/// InstanceNormalization is the case groups == C with per-channel scale and bias.
struct GroupNormParams {
  int64_t batch = 1, channels = 1, groups = 1, spatial = 1;
  bool affine_per_group = false;  // opset 18's scale and bias
  float epsilon = 1e-5f;
};
Expected<GroupNormParams> group_norm_params(const OpContext& ctx);
/// InstanceNormalization on [N, C, spatial...]: GroupNormalization's parameters with one
/// channel a group (N * C groups of `spatial` elements), scale and B per channel.
Expected<GroupNormParams> instance_norm_params(const OpContext& ctx);

/// RMSNormalization: `outer` rows of `inner` elements; scale has `inner` elements or one.
struct RmsNormParams {
  int64_t outer = 1, inner = 1;
  bool scalar_scale = false;
  float epsilon = 1e-5f;
};
Expected<RmsNormParams> rms_norm_params(const OpContext& ctx);

/// LpNormalization: `outer` x `axis_dim` x `inner`, normalised along the middle axis.
struct LpNormParams {
  int64_t outer = 1, axis_dim = 1, inner = 1;
  int p = 2;
};
Expected<LpNormParams> lp_norm_params(const OpContext& ctx);

/// MeanVarianceNormalization: which axes of x are normalised over (default 0, 2, 3).
struct MvnParams {
  std::vector<bool> reduced;
};
Expected<MvnParams> mvn_params(const OpContext& ctx);

void add_normalization_schemas(std::map<std::string, OpSchema>& table);

}  // namespace mosaic
