// The reductions (ReduceSum, ReduceMean, ReduceMax, ...), each defined once, as the
// element-wise ops are (operators/eltwise.hpp): one row of kReduceOps holds the op's ONNX
// name, its accumulation (identity, step, finish), its derivative with respect to one
// reduced element, and its FLOPs. The schema (operators/schemas.cpp), the kernels
// (backends/common/reduce.hpp: one loop for naive, gradcheck's double reference and any
// backend without a library call) and the tests read the rows.
#pragma once

#include <array>
#include <cmath>
#include <cstddef>
#include <optional>
#include <string_view>
#include <vector>

#include "ir/status.hpp"
#include "ir/tensor.hpp"

namespace mosaic {

struct OpContext;

enum class ReduceOp {
  kSum, kMean, kMax, kMin, kProd, kL1, kL2, kLogSum, kLogSumExp, kSumSquare,
  kCount  // not an op
};

struct ReduceOpInfo {
  ReduceOp op;
  const char* name;
  const char* summary;
  double init;                              ///< the accumulator's start (the step's identity)
  double (*step)(double acc, double x);
  double (*finish)(double acc, double n);   ///< n: how many elements were reduced
  /// dy/dx for one reduced element x of an output y over n elements. Max and Min (which
  /// select) and Prod (zeros) are completed by the kernel: see `selects` and `product`.
  double (*dx)(double x, double y, double n);
  /// Max, Min: the gradient goes to the elements equal to the result, split evenly between
  /// ties (torch.amax's rule).
  bool selects;
  /// Prod: d/dx_i is the product of the others (computed without dividing by a zero).
  bool product;
  double flops, backward_flops;  ///< per input element
  /// ReduceSum takes its axes as an input from opset 13, the others from opset 18.
  int axes_input_since;
};

// clang-format off
inline constexpr std::array<ReduceOpInfo, static_cast<size_t>(ReduceOp::kCount)> kReduceOps = {{
    {ReduceOp::kSum, "ReduceSum", "sum", 0, [](double a, double x) { return a + x; },
     [](double a, double) { return a; }, [](double, double, double) { return 1.0; }, false, false, 1, 1, 13},
    {ReduceOp::kMean, "ReduceMean", "mean", 0, [](double a, double x) { return a + x; },
     [](double a, double n) { return a / n; }, [](double, double, double n) { return 1 / n; }, false, false, 1, 1, 18},
    {ReduceOp::kMax, "ReduceMax", "maximum", -INFINITY, [](double a, double x) { return x > a || std::isnan(x) ? x : a; },
     [](double a, double) { return a; }, [](double, double, double) { return 1.0; }, true, false, 1, 1, 18},
    {ReduceOp::kMin, "ReduceMin", "minimum", INFINITY, [](double a, double x) { return x < a || std::isnan(x) ? x : a; },
     [](double a, double) { return a; }, [](double, double, double) { return 1.0; }, true, false, 1, 1, 18},
    {ReduceOp::kProd, "ReduceProd", "product", 1, [](double a, double x) { return a * x; },
     [](double a, double) { return a; }, [](double x, double y, double) { return y / x; }, false, true, 1, 2, 18},
    {ReduceOp::kL1, "ReduceL1", "sum of |x|", 0, [](double a, double x) { return a + std::fabs(x); },
     [](double a, double) { return a; }, [](double x, double, double) { return x > 0 ? 1.0 : x < 0 ? -1.0 : 0.0; },
     false, false, 2, 1, 18},
    {ReduceOp::kL2, "ReduceL2", "sqrt(sum of x^2)", 0, [](double a, double x) { return a + x * x; },
     [](double a, double) { return std::sqrt(a); }, [](double x, double y, double) { return y == 0 ? 0.0 : x / y; },
     false, false, 2, 2, 18},
    {ReduceOp::kLogSum, "ReduceLogSum", "log(sum)", 0, [](double a, double x) { return a + x; },
     [](double a, double) { return std::log(a); }, [](double, double y, double) { return std::exp(-y); }, false,
     false, 1, 1, 18},
    // Accumulated as sum exp(x - max) (backends/common/reduce.hpp), so large x do not overflow.
    {ReduceOp::kLogSumExp, "ReduceLogSumExp", "log(sum of exp(x))", 0, [](double a, double x) { return a + std::exp(x); },
     [](double a, double) { return std::log(a); }, [](double x, double y, double) { return std::exp(x - y); }, false,
     false, 6, 5, 18},
    {ReduceOp::kSumSquare, "ReduceSumSquare", "sum of x^2", 0, [](double a, double x) { return a + x * x; },
     [](double a, double) { return a; }, [](double x, double, double) { return 2 * x; }, false, false, 2, 2, 18},
}};
// clang-format on

constexpr bool reduce_rows_in_enum_order() {
  for (size_t i = 0; i < kReduceOps.size(); ++i)
    if (kReduceOps[i].op != static_cast<ReduceOp>(i)) return false;
  return true;
}
static_assert(reduce_rows_in_enum_order(), "kReduceOps: one row per ReduceOp, in enum order");

inline std::optional<ReduceOp> reduce_op_of(std::string_view op_type) {
  for (const auto& r : kReduceOps)
    if (op_type == r.name) return r.op;
  return std::nullopt;
}
inline const ReduceOpInfo& reduce_info(ReduceOp op) { return kReduceOps[static_cast<size_t>(op)]; }

/// A reduction node's geometry: the input shape, the output with every reduced axis kept as
/// 1 (`kept`, which broadcasts back onto the input), the output as the node writes it
/// (`out`, without them unless keepdims), and how many elements each output reduces.
struct ReduceParams {
  Shape in, kept, out;
  std::vector<int64_t> axes;  ///< the reduced axes, ascending (empty: the identity)
  double count = 1;
};
/// Axes from the attribute (or, for ReduceSum from opset 13 and the others from 18, the
/// constant second input); none given reduces every axis, or nothing with
/// noop_with_empty_axes. Axes out of range or repeated are an error naming the node.
Expected<ReduceParams> reduce_params(const OpContext& ctx);

}  // namespace mosaic
