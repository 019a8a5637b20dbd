// RNN, GRU and LSTM's one definition of their arithmetic (operators/rnn.hpp has the node's
// parameters): the recurrence forward in float or double (naive, im2col and gradcheck's
// double reference) and backpropagation through time in float. The matrix products are
// the backend's: a GEMM passed in (naive's loops, im2col's OpenBLAS sgemm), so the
// recurrence is written once and each backend brings its own products:
//   XW = X W^T + Wb          one product over every step, before the recurrence
//   HR = H_{t-1} R^T + Rb    one product per step
// then the cell's element-wise update (ONNX's equations, operators/rnn.hpp's gate order).
// With sequence_lens, batch entry b runs steps 0..len_b-1 (reverse: from len_b-1 down);
// its Y is zero past its length and its state carries over unchanged.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "core/registration.hpp"
#include "backends/common/fast_exp.hpp"
#include "backends/common/grad.hpp"
#include "operators/rnn.hpp"

namespace mosaic {

/// The tensors of one node (absent optional ones are null).
template <class T>
struct RnnIO {
  const T *x = nullptr, *w = nullptr, *r = nullptr, *b = nullptr, *h0 = nullptr, *c0 = nullptr, *p = nullptr;
  const int64_t* lens = nullptr;
  T *y = nullptr, *yh = nullptr, *yc = nullptr;
};

/// What the forward keeps for backward (and works in): per direction, per processed step k
/// (time k, or len_b - 1 - k in reverse), per batch entry.
template <class T>
struct RnnTape {
  std::vector<int64_t> lens;
  std::vector<T> xw;     ///< [D, seq * batch, G]: X W^T + Wb, rows in X's storage order
  std::vector<T> pre;    ///< [D, seq, B, G]: each gate's activation input, before clipping
  std::vector<T> act;    ///< [D, seq, B, G]: each gate's activation output
  std::vector<T> h, c;   ///< [D, seq + 1, B, H]: the state before step k (c: LSTM)
  std::vector<T> extra;  ///< [D, seq, B, H]: GRU's H R_h^T + Rb_h (linear_before_reset) or r (.) H
};

/// sequence_lens in [1, seq], or an error naming the input.
Status check_rnn_lens(const RnnParams& p, const int64_t* lens, const std::string& label);

namespace rnn_detail {

template <class T>
inline T clipped(const RnnParams& p, T x) {
  return p.clip > 0 ? std::min(std::max(x, static_cast<T>(-p.clip)), static_cast<T>(p.clip)) : x;
}
template <class T>
inline T apply(const Activation& a, T x) {
  return static_cast<T>(unary_info(*a.op).f(static_cast<double>(x), a.args));
}
/// d act / d pre at pre (0 where the clip cut it), given act.
inline float slope(const RnnParams& p, const Activation& a, float pre, float act) {
  if (p.clip > 0 && (pre < -p.clip || pre > p.clip)) return 0.f;
  return static_cast<float>(unary_info(*a.op).df(clipped(p, pre), act, a.args));
}
/// Row of X (and of XW) for time t and batch entry b.
inline int64_t x_row(const RnnParams& p, int64_t t, int64_t b) { return p.batch_first ? b * p.seq + t : t * p.batch + b; }
/// Offset of direction d, batch entry b in initial_h / Y_h (layout 1: [B, D, H]).
inline int64_t state_at(const RnnParams& p, int d, int64_t b) {
  return (p.batch_first ? b * p.dirs + d : d * p.batch + b) * p.hidden;
}
inline int64_t y_at(const RnnParams& p, int64_t t, int d, int64_t b) {
  return (p.batch_first ? (b * p.seq + t) * p.dirs + d : (t * p.dirs + d) * p.batch + b) * p.hidden;
}
inline bool backwards(const RnnParams& p, int d) { return p.reverse || d == 1; }

/// The cells the float kernels evaluate as arrays: ONNX's default activations (RNN tanh,
/// LSTM sigmoid/tanh/tanh, GRU sigmoid/tanh), no clip, no peepholes (LSTM) and
/// linear_before_reset (GRU), as PyTorch exports them.
enum class FastCell { kNone, kRnn, kLstm, kGru };
inline FastCell fast_cell(const RnnParams& p, const Activation& f, const Activation& g, const Activation& h,
                          bool peepholes) {
  const auto is = [](const Activation& a, UnaryOp op) { return a.op && *a.op == op; };
  if (p.clip > 0) return FastCell::kNone;
  if (p.cell == RnnCell::kRnn) return is(f, UnaryOp::kTanh) ? FastCell::kRnn : FastCell::kNone;
  if (!is(f, UnaryOp::kSigmoid) || !is(g, UnaryOp::kTanh)) return FastCell::kNone;
  if (p.cell == RnnCell::kLstm && !peepholes && is(h, UnaryOp::kTanh)) return FastCell::kLstm;
  if (p.cell == RnnCell::kGru && p.linear_before_reset) return FastCell::kGru;
  return FastCell::kNone;
}

/// One batch entry's step of the configurations PyTorch exports (RNN tanh, LSTM, GRU with
/// linear_before_reset) in float32, gates as arrays through the vectorised sigmoid and tanh of
/// backends/common/fast_exp.hpp: x and r the entry's input and recurrent products, pr and a its
/// pre-activations and activations, hp/hn (cp/cn) its previous and next state. False for
/// another configuration (the caller evaluates each gate's table row).
inline bool fast_step(FastCell fast, int64_t H, int64_t G, const float* x, const float* r, float* pr, float* a,
                      const float* hp, float* hn, const float* cp, float* cn, float* extra) {
  if (fast == FastCell::kRnn) {
    for (int64_t j = 0; j < H; ++j) pr[j] = x[j] + r[j];
    tanh_array(pr, a, H);
    std::copy(a, a + H, hn);
    return true;
  }
  if (fast == FastCell::kLstm) {  // gates i, o, f sigmoid, c tanh; h = o tanh(c)
    for (int64_t j = 0; j < G; ++j) pr[j] = x[j] + r[j];
    sigmoid_array(pr, a, 3 * H);
    tanh_array(pr + 3 * H, a + 3 * H, H);
    float* c = cn;
    for (int64_t j = 0; j < H; ++j) c[j] = a[2 * H + j] * cp[j] + a[j] * a[3 * H + j];
    tanh_array(c, hn, H);
    for (int64_t j = 0; j < H; ++j) hn[j] *= a[H + j];
    return true;
  }
  if (fast == FastCell::kGru) {  // z, r sigmoid; h tanh(x + r (.) (H R_h^T + Rb_h))
    for (int64_t j = 0; j < 2 * H; ++j) pr[j] = x[j] + r[j];
    sigmoid_array(pr, a, 2 * H);
    for (int64_t j = 0; j < H; ++j) {
      extra[j] = r[2 * H + j];
      pr[2 * H + j] = x[2 * H + j] + a[H + j] * r[2 * H + j];
    }
    tanh_array(pr + 2 * H, a + 2 * H, H);
    for (int64_t j = 0; j < H; ++j) hn[j] = (1.f - a[j]) * a[2 * H + j] + a[j] * hp[j];
    return true;
  }
  return false;
}

/// One batch entry's step, each gate's table row applied per element (the double reference,
/// and configurations without a fast path: peepholes, clipping, other activations, GRU's
/// (r . H) R_h^T, whose h gate the caller completes after a second product).
template <class T>
void cell_step(const RnnParams& p, const Activation& f, const Activation& g, const Activation& h, const T* P, bool gru_late,
               const T* x, const T* r, T* pr, T* a, const T* hp, T* hn, const T* cp, T* cn, T* extra) {
  const int64_t H = p.hidden;
  for (int64_t j = 0; j < H; ++j) {
    const T hprev = hp[j];
    if (p.cell == RnnCell::kRnn) {
      pr[j] = x[j] + r[j];
      a[j] = apply(f, clipped(p, pr[j]));
      hn[j] = a[j];
    } else if (p.cell == RnnCell::kLstm) {  // gates i, o, f, c
      const T cprev = cp[j];
      pr[j] = x[j] + r[j] + (P ? P[j] * cprev : T(0));
      pr[2 * H + j] = x[2 * H + j] + r[2 * H + j] + (P ? P[2 * H + j] * cprev : T(0));
      pr[3 * H + j] = x[3 * H + j] + r[3 * H + j];
      a[j] = apply(f, clipped(p, pr[j]));
      a[2 * H + j] = apply(f, clipped(p, pr[2 * H + j]));
      a[3 * H + j] = apply(g, clipped(p, pr[3 * H + j]));
      const T c = a[2 * H + j] * cprev + a[j] * a[3 * H + j];
      cn[j] = c;
      pr[H + j] = x[H + j] + r[H + j] + (P ? P[H + j] * c : T(0));
      a[H + j] = apply(f, clipped(p, pr[H + j]));
      hn[j] = a[H + j] * apply(h, c);
    } else {  // GRU: gates z, r, h
      pr[j] = x[j] + r[j];
      pr[H + j] = x[H + j] + r[H + j];
      a[j] = apply(f, clipped(p, pr[j]));
      a[H + j] = apply(f, clipped(p, pr[H + j]));
      if (gru_late) {
        extra[j] = a[H + j] * hprev;  // the h gate waits for (r . H) R_h^T
        continue;
      }
      extra[j] = r[2 * H + j];
      pr[2 * H + j] = x[2 * H + j] + a[H + j] * r[2 * H + j];
      a[2 * H + j] = apply(g, clipped(p, pr[2 * H + j]));
      hn[j] = (T(1) - a[j]) * a[2 * H + j] + a[j] * hprev;
    }
  }
}

}  // namespace rnn_detail

/// Runs the node forward. `gemm(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc)` is row-major
/// C = op(A) op(B) + beta C. The lengths must have been checked (check_rnn_lens).
template <class T, class Gemm>
void rnn_forward(const RnnParams& p, const RnnIO<T>& io, RnnTape<T>& s, const Gemm& gemm) {
  using namespace rnn_detail;
  const int64_t S = p.seq, B = p.batch, H = p.hidden, I = p.input, G = p.gate_width();
  s.lens.assign(static_cast<size_t>(B), S);
  if (io.lens) s.lens.assign(io.lens, io.lens + B);
  s.xw.assign(static_cast<size_t>(p.dirs * S * B * G), T(0));
  s.pre.assign(s.xw.size(), T(0));
  s.act.assign(s.xw.size(), T(0));
  s.h.assign(static_cast<size_t>(p.dirs * (S + 1) * B * H), T(0));
  s.c.assign(p.cell == RnnCell::kLstm ? s.h.size() : 0, T(0));
  s.extra.assign(p.cell == RnnCell::kGru ? static_cast<size_t>(p.dirs * S * B * H) : 0, T(0));
  if (io.y) std::fill(io.y, io.y + S * p.dirs * B * H, T(0));
  const bool gru_late = p.cell == RnnCell::kGru && !p.linear_before_reset;  // (r . H) R_h^T after r
  const int64_t Gr = gru_late ? 2 * H : G;  // columns of H R^T computed at the step's start
  std::vector<T> hr(static_cast<size_t>(B * G)), rh(gru_late ? static_cast<size_t>(B * H) : 0);
  for (int d = 0; d < p.dirs; ++d) {
    const T* W = io.w + d * G * I;
    const T* R = io.r + d * G * H;
    const T* Wb = io.b ? io.b + d * 2 * G : nullptr;
    const T* Rb = io.b ? Wb + G : nullptr;
    const T* P = io.p ? io.p + d * 3 * H : nullptr;
    const Activation &f = p.act(d, 0), &g = p.act(d, p.acts_per_dir > 1 ? 1 : 0),
                     &h = p.act(d, p.acts_per_dir > 2 ? 2 : 0);
    const FastCell fast = fast_cell(p, f, g, h, P != nullptr);
    T* xw = s.xw.data() + d * S * B * G;
    gemm(false, true, S * B, G, I, io.x, I, W, I, T(0), xw, G);
    if (Wb)
      for (int64_t row = 0; row < S * B; ++row)
        for (int64_t j = 0; j < G; ++j) xw[row * G + j] += Wb[j];
    T* H0 = s.h.data() + d * (S + 1) * B * H;
    T* C0 = s.c.empty() ? nullptr : s.c.data() + d * (S + 1) * B * H;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < H; ++j) {
        H0[b * H + j] = io.h0 ? io.h0[state_at(p, d, b) + j] : T(0);
        if (C0) C0[b * H + j] = io.c0 ? io.c0[state_at(p, d, b) + j] : T(0);
      }
    for (int64_t k = 0; k < S; ++k) {
      const T* hp = H0 + k * B * H;
      T* hn = H0 + (k + 1) * B * H;
      const T* cp = C0 ? C0 + k * B * H : nullptr;
      T* cn = C0 ? C0 + (k + 1) * B * H : nullptr;
      T* pre = s.pre.data() + (d * S + k) * B * G;
      T* act = s.act.data() + (d * S + k) * B * G;
      T* extra = s.extra.empty() ? nullptr : s.extra.data() + (d * S + k) * B * H;
      gemm(false, true, B, Gr, H, hp, H, R, H, T(0), hr.data(), G);
      if (Rb)
        for (int64_t b = 0; b < B; ++b)
          for (int64_t j = 0; j < Gr; ++j) hr[b * G + j] += Rb[j];
      auto time = [&](int64_t b) { return backwards(p, d) ? s.lens[b] - 1 - k : k; };
      // Batch entries are independent within a step: their cell updates run in parallel
      // (where the including target builds with OpenMP: the kernels do, the reference not).
      // The float kernels run the configurations PyTorch exports (RNN tanh, LSTM, GRU
      // with linear_before_reset) with gates as arrays through the vectorised sigmoid and tanh of
      // backends/common/fast_exp.hpp; the double reference and other configurations
      // evaluate each gate's table row per element.
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (B * H >= 2048)
#endif
      for (int64_t b = 0; b < B; ++b) {
        if (k >= s.lens[b]) {  // past this sequence's end: the state carries over
          std::copy(hp + b * H, hp + (b + 1) * H, hn + b * H);
          if (cn) std::copy(cp + b * H, cp + (b + 1) * H, cn + b * H);
          continue;
        }
        const T* x = xw + x_row(p, time(b), b) * G;
        const T* r = hr.data() + b * G;
        T* pr = pre + b * G;
        T* a = act + b * G;
        if constexpr (std::is_same_v<T, float>) {
          if (fast_step(fast, H, G, x, r, pr, a, hp + b * H, hn + b * H, cp ? cp + b * H : nullptr, cn ? cn + b * H : nullptr,
                        extra ? extra + b * H : nullptr))
            continue;
        }
        cell_step(p, f, g, h, P, gru_late, x, r, pr, a, hp + b * H, hn + b * H, cp ? cp + b * H : nullptr,
                  cn ? cn + b * H : nullptr, extra ? extra + b * H : nullptr);
      }
      if (gru_late) {
        gemm(false, true, B, H, H, extra, H, R + 2 * H * H, H, T(0), rh.data(), H);
        for (int64_t b = 0; b < B; ++b) {
          if (k >= s.lens[b]) continue;
          const T* x = xw + x_row(p, time(b), b) * G;
          T* pr = pre + b * G;
          T* a = act + b * G;
          for (int64_t j = 0; j < H; ++j) {
            pr[2 * H + j] = x[2 * H + j] + rh[b * H + j] + (Rb ? Rb[2 * H + j] : T(0));
            a[2 * H + j] = apply(g, clipped(p, pr[2 * H + j]));
            hn[b * H + j] = (T(1) - a[j]) * a[2 * H + j] + a[j] * hp[b * H + j];
          }
        }
      }
      if (io.y)
        for (int64_t b = 0; b < B; ++b)
          if (k < s.lens[b]) std::copy(hn + b * H, hn + (b + 1) * H, io.y + y_at(p, time(b), d, b));
    }
    for (int64_t b = 0; b < B; ++b) {
      if (io.yh) std::copy(H0 + (S * B + b) * H, H0 + (S * B + b + 1) * H, io.yh + state_at(p, d, b));
      if (io.yc) std::copy(C0 + (S * B + b) * H, C0 + (S * B + b + 1) * H, io.yc + state_at(p, d, b));
    }
  }
}

/// The gradients backpropagation through time gives (each may be null; all overwritten).
struct RnnGrads {
  float *dx = nullptr, *dw = nullptr, *dr = nullptr, *db = nullptr, *dh0 = nullptr, *dc0 = nullptr, *dp = nullptr;
};

/// Backward from dY, dY_h, dY_c (each may be null: no gradient) and the forward's tape.
void rnn_backward(const RnnParams& p, const RnnIO<float>& io, const RnnTape<float>& s, const float* dy,
                  const float* dyh, const float* dyc, const RnnGrads& g, const GemmFn& gemm);

/// Row-major C = op(A) op(B) + beta C by loops (naive; the double reference).
template <class T>
void loop_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb,
               T beta, T* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t q = 0; q < k; ++q)
        acc += static_cast<double>(ta ? a[q * lda + i] : a[i * lda + q]) * (tb ? b[j * ldb + q] : b[q * ldb + j]);
      c[i * ldc + j] = static_cast<T>(acc + (beta != T(0) ? static_cast<double>(beta) * c[i * ldc + j] : 0.0));
    }
}

/// Registers RNN, GRU and LSTM (forward and backward) on a backend, with its GEMM (the
/// built-ins' own; the torch plugin's, ATen's).
void add_rnn_kernels(BackendRegistration& r, GemmFn gemm, SupportCheck supports);

}  // namespace mosaic
