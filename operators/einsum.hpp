// Einsum: an equation over the inputs' axes ("ij,jk->ik", "bhid,bhjd->bhij", "ii->i",
// "...ij->...ji"), the output given after "->" or, without one, the labels used once in
// alphabetical order. An ellipsis stands for the same broadcast axes in every operand;
// a label repeated within one operand takes its diagonal. Labels absent from the output are
// summed over.
// Det: the determinant of each trailing square matrix, by LU factorisation with partial
// pivoting in double.
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

/// Det on [..., M, M]: how many matrices and their order M.
struct DetParams {
  int64_t matrices = 1, order = 0;
};
Expected<DetParams> det_params(const OpContext& ctx);

/// The determinant of the M x M row-major matrix `a` (overwritten by its LU factors):
/// Gaussian elimination with partial pivoting, in double; 1 for M = 0.
double determinant_in_place(double* a, int64_t m);

}  // namespace mosaic
