// The reductions' one loop (rows of operators/reduce.hpp): the naive oracle runs it in float
// with double accumulators, gradcheck's reference in double, and any backend without a
// library call for a reduction can register it too.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "backends/common/broadcast.hpp"
#include "core/registration.hpp"
#include "operators/reduce.hpp"

namespace mosaic {

/// Calls f(i, o) for every input element i with the offset o of the output it reduces into
/// (p.kept broadcast onto p.in).
template <class F>
void each_reduced(const ReduceParams& p, F&& f) {
  const std::vector<int64_t> st = broadcast_strides(p.kept, p.in);
  const int64_t n = shape_numel(p.in);
  std::vector<int64_t> idx(p.in.size(), 0);
  int64_t o = 0;
  for (int64_t i = 0; i < n; ++i) {
    f(i, o);
    for (int64_t d = static_cast<int64_t>(p.in.size()) - 1; d >= 0; --d) {
      o += st[d];
      if (++idx[d] < p.in[d]) break;
      o -= st[d] * p.in[d];
      idx[d] = 0;
    }
  }
}

/// y = the reduction of x (T: float, double or int64), accumulated in double.
template <class T>
void reduce_forward(const ReduceOpInfo& r, const ReduceParams& p, const T* x, T* y) {
  const size_t nout = static_cast<size_t>(shape_numel(p.kept));
  std::vector<double> acc(nout, r.init);
  if (r.op == ReduceOp::kLogSumExp) {
    // log sum exp(x) = m + log sum exp(x - m), m the maximum: no overflow.
    std::vector<double> m(nout, -INFINITY);
    each_reduced(p, [&](int64_t i, int64_t o) { m[o] = std::fmax(m[o], static_cast<double>(x[i])); });
    each_reduced(p, [&](int64_t i, int64_t o) {
      if (std::isfinite(m[o])) acc[o] += std::exp(static_cast<double>(x[i]) - m[o]);
    });
    for (size_t o = 0; o < nout; ++o) y[o] = static_cast<T>(std::isfinite(m[o]) ? m[o] + std::log(acc[o]) : m[o]);
    return;
  }
  each_reduced(p, [&](int64_t i, int64_t o) { acc[o] = r.step(acc[o], static_cast<double>(x[i])); });
  for (size_t o = 0; o < nout; ++o) y[o] = static_cast<T>(r.finish(acc[o], p.count));
}

/// dx (overwritten) from dy and the forward's x and y: the row's derivative, with Max/Min's
/// gradient split evenly between the elements equal to the result and Prod's computed as
/// the product of the others where an element is zero.
inline void reduce_backward(const ReduceOpInfo& r, const ReduceParams& p, const float* x, const float* y,
                            const float* dy, float* dx) {
  const size_t nout = static_cast<size_t>(shape_numel(p.kept));
  if (r.selects) {
    std::vector<double> ties(nout, 0);
    each_reduced(p, [&](int64_t i, int64_t o) { ties[o] += x[i] == y[o]; });
    each_reduced(p, [&](int64_t i, int64_t o) { dx[i] = x[i] == y[o] ? static_cast<float>(dy[o] / ties[o]) : 0.f; });
    return;
  }
  if (r.product) {
    std::vector<double> zeros(nout, 0), others(nout, 1);  // per output: zeros, product of the non-zeros
    each_reduced(p, [&](int64_t i, int64_t o) {
      if (x[i] == 0) zeros[o] += 1;
      else others[o] *= x[i];
    });
    each_reduced(p, [&](int64_t i, int64_t o) {
      const double g = x[i] != 0 ? (zeros[o] > 0 ? 0.0 : others[o] / x[i]) : (zeros[o] == 1 ? others[o] : 0.0);
      dx[i] = static_cast<float>(dy[o] * g);
    });
    return;
  }
  each_reduced(p, [&](int64_t i, int64_t o) { dx[i] = static_cast<float>(dy[o] * r.dx(x[i], y[o], p.count)); });
}

/// A reduction kernel's backward: input 0's gradient by reduce_backward, the axes' (input
/// 1, never differentiable) zeroed where asked.
Status reduce_kernel_backward(ReduceOp op, const ReduceParams& p, const BackwardArgs& a);

/// Registers the loop above as the kernel of every reduction (forward in float32 and int64,
/// backward in float32) on a backend: the naive oracle's, and im2col's.
void add_reduce_loop_kernels(BackendRegistration& r, SupportCheck supports);
/// ArgMax and ArgMin (float32 in, int64 indices out; no gradient), the naive oracle's.
void add_arg_extreme_kernels(BackendRegistration& r);

}  // namespace mosaic
