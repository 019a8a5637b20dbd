// Einsum: an equation over the inputs' axes ("ij,jk->ik", "bhid,bhjd->bhij", "ii->i",
// "...ij->...ji"), the output given after "->" or, without one, the labels used once in
// alphabetical order. An ellipsis stands for the same broadcast axes in every operand;
// a label repeated within one operand takes its diagonal. Labels absent from the output are
// summed over.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "operators/op_context.hpp"
#include "ir/status.hpp"

namespace mosaic {

struct OpSchema;

struct EinsumParams {
  /// Every label's extent; labels are numbered 0.. (ellipsis axes first, as their own labels).
  std::vector<int64_t> extent;
  /// Per operand, the label of each of its axes (broadcast axes of size 1 keep their label).
  std::vector<std::vector<int>> operand;
  std::vector<int> output;  ///< the output's labels, in order
  Shape out;
};

Expected<EinsumParams> einsum_params(const OpContext& ctx);
void add_einsum_schema(std::map<std::string, OpSchema>& table);

}  // namespace mosaic
