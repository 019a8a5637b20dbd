// RNN, GRU and LSTM: backpropagation through time and the kernel (backends/common/rnn.hpp).
#include "backends/common/rnn.hpp"

namespace mosaic {

Status check_rnn_lens(const RnnParams& p, const int64_t* lens, const std::string& label) {
  if (!lens) return Status::ok();
  const int64_t lo = p.seq > 0 ? 1 : 0;  // a sequence of 0 steps has only lengths 0
  for (int64_t b = 0; b < p.batch; ++b)
    if (lens[b] < lo || lens[b] > p.seq)
      return Status::invalid(label + ": sequence_lens[" + std::to_string(b) + "] = " + std::to_string(lens[b]) +
                             " is outside [" + std::to_string(lo) + ", " + std::to_string(p.seq) +
                             "] (the sequence length)");
  return Status::ok();
}

namespace {

/// Element j of an LSTM step backwards through its gates i, o, f, c (and the peepholes P, whose
/// gradients add to dP): dH and dC_next the gradients reaching h and c, c and cprev the cell
/// states after and before. Writes the gates' pre-activation gradients to gx and gr (the rows of
/// d(XW) and d(HR)) and returns the gradient of the previous cell state.
float lstm_element_backward(const RnnParams& p, const Activation& f, const Activation& g, const Activation& h, const float* P,
                            float* dP, int64_t j, float dH, float dC_next, float c, float cprev, const float* pr, const float* a,
                            float* gx, float* gr) {
  using namespace rnn_detail;
  const int64_t H = p.hidden;
  const float hc = apply(h, c);
  const float ai = a[j], ao = a[H + j], af = a[2 * H + j], ac = a[3 * H + j];
  const float dpo = dH * hc * slope(p, f, pr[H + j], ao);
  float dC = dC_next + dH * ao * static_cast<float>(unary_info(*h.op).df(c, hc, h.args));
  if (P) dC += dpo * P[H + j];
  const float dpi = dC * ac * slope(p, f, pr[j], ai);
  const float dpf = dC * cprev * slope(p, f, pr[2 * H + j], af);
  const float dpc = dC * ai * slope(p, g, pr[3 * H + j], ac);
  float dCp = dC * af;
  if (P) {
    dCp += dpi * P[j] + dpf * P[2 * H + j];
    if (dP) {
      dP[j] += dpi * cprev;
      dP[H + j] += dpo * c;
      dP[2 * H + j] += dpf * cprev;
    }
  }
  gx[j] = gr[j] = dpi;
  gx[H + j] = gr[H + j] = dpo;
  gx[2 * H + j] = gr[2 * H + j] = dpf;
  gx[3 * H + j] = gr[3 * H + j] = dpc;
  return dCp;
}

}  // namespace

void rnn_backward(const RnnParams& p, const RnnIO<float>& io, const RnnTape<float>& s, const float* dy,
                  const float* dyh, const float* dyc, const RnnGrads& out, const GemmFn& gemm) {
  using namespace rnn_detail;
  const int64_t S = p.seq, B = p.batch, H = p.hidden, I = p.input, G = p.gate_width();
  const bool gru_late = p.cell == RnnCell::kGru && !p.linear_before_reset;
  const int64_t Gr = gru_late ? 2 * H : G;
  auto zero = [](float* v, int64_t n) {
    if (v) std::fill(v, v + n, 0.f);
  };
  zero(out.dw, p.dirs * G * I);
  zero(out.dr, p.dirs * G * H);
  zero(out.db, p.dirs * 2 * G);
  zero(out.dp, p.dirs * 3 * H);
  std::vector<float> dxw(static_cast<size_t>(S * B * G)), dhr(static_cast<size_t>(B * G));
  std::vector<float> dh(static_cast<size_t>(B * H)), dc(static_cast<size_t>(B * H));
  std::vector<float> dhp(static_cast<size_t>(B * H)), dcp(static_cast<size_t>(B * H));
  std::vector<float> dph(gru_late ? static_cast<size_t>(B * H) : 0), drh(dph.size());
  for (int d = 0; d < p.dirs; ++d) {
    const float* W = io.w + d * G * I;
    const float* R = io.r + d * G * H;
    const float* P = io.p ? io.p + d * 3 * H : nullptr;
    float* dR = out.dr ? out.dr + d * G * H : nullptr;
    float* dWb = out.db ? out.db + d * 2 * G : nullptr;
    float* dRb = out.db ? dWb + G : nullptr;
    float* dP = out.dp ? out.dp + d * 3 * H : nullptr;
    const Activation &f = p.act(d, 0), &g = p.act(d, p.acts_per_dir > 1 ? 1 : 0),
                     &h = p.act(d, p.acts_per_dir > 2 ? 2 : 0);
    std::fill(dxw.begin(), dxw.end(), 0.f);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < H; ++j) {
        dh[b * H + j] = dyh ? dyh[state_at(p, d, b) + j] : 0.f;
        dc[b * H + j] = dyc ? dyc[state_at(p, d, b) + j] : 0.f;
      }
    const float* H0 = s.h.data() + d * (S + 1) * B * H;
    const float* C0 = s.c.empty() ? nullptr : s.c.data() + d * (S + 1) * B * H;
    for (int64_t k = S; k-- > 0;) {
      const float* hp = H0 + k * B * H;
      const float* cp = C0 ? C0 + k * B * H : nullptr;
      const float* cn = C0 ? C0 + (k + 1) * B * H : nullptr;
      const float* pre = s.pre.data() + (d * S + k) * B * G;
      const float* act = s.act.data() + (d * S + k) * B * G;
      const float* extra = s.extra.empty() ? nullptr : s.extra.data() + (d * S + k) * B * H;
      auto time = [&](int64_t b) { return backwards(p, d) ? s.lens[b] - 1 - k : k; };
      std::fill(dhr.begin(), dhr.end(), 0.f);
      for (int64_t b = 0; b < B; ++b) {
        float* dhb = dh.data() + b * H;
        if (k >= s.lens[b]) {  // the state carried over this step: so does its gradient
          std::copy(dhb, dhb + H, dhp.data() + b * H);
          std::copy(dc.data() + b * H, dc.data() + (b + 1) * H, dcp.data() + b * H);
          if (gru_late) std::fill(dph.data() + b * H, dph.data() + (b + 1) * H, 0.f);
          continue;
        }
        if (dy)
          for (int64_t j = 0; j < H; ++j) dhb[j] += dy[y_at(p, time(b), d, b) + j];
        const float* pr = pre + b * G;
        const float* a = act + b * G;
        float* gx = dxw.data() + x_row(p, time(b), b) * G;  // d(XW row)
        float* gr = dhr.data() + b * G;                      // d(HR row)
        for (int64_t j = 0; j < H; ++j) {
          const float dH = dhb[j], hprev = hp[b * H + j];
          if (p.cell == RnnCell::kRnn) {
            gx[j] = gr[j] = dH * slope(p, f, pr[j], a[j]);
            dhp[b * H + j] = 0.f;
          } else if (p.cell == RnnCell::kLstm) {
            dcp[b * H + j] = lstm_element_backward(p, f, g, h, P, dP, j, dH, dc[b * H + j], cn[b * H + j], cp[b * H + j], pr, a,
                                                   gx, gr);
            dhp[b * H + j] = 0.f;
          } else {  // GRU
            const float az = a[j], ah = a[2 * H + j];
            const float dph_ = dH * (1.f - az) * slope(p, g, pr[2 * H + j], ah);
            gx[j] = gr[j] = dH * (hprev - ah) * slope(p, f, pr[j], az);
            gx[2 * H + j] = dph_;
            dhp[b * H + j] = dH * az;
            if (gru_late) {  // r waits for d((r . H) R_h^T)
              dph[b * H + j] = dph_;
              continue;
            }
            const float ar = a[H + j];
            gr[2 * H + j] = dph_ * ar;
            gx[H + j] = gr[H + j] = dph_ * extra[b * H + j] * slope(p, f, pr[H + j], ar);
          }
        }
      }
      if (gru_late) {  // d(r . H) = dpre_h R_h; R_h's gradient from (r . H)
        gemm(false, false, B, H, H, dph.data(), H, R + 2 * H * H, H, 0.f, drh.data(), H);
        if (dR) gemm(true, false, H, H, B, dph.data(), H, extra, H, 1.f, dR + 2 * H * H, H);
        for (int64_t b = 0; b < B; ++b) {
          if (k >= s.lens[b]) continue;
          const float* a = act + b * G;
          float* gx = dxw.data() + x_row(p, time(b), b) * G;
          float* gr = dhr.data() + b * G;
          for (int64_t j = 0; j < H; ++j) {
            const float hprev = hp[b * H + j], ar = a[H + j];
            dhp[b * H + j] += drh[b * H + j] * ar;
            gx[H + j] = gr[H + j] = drh[b * H + j] * hprev * slope(p, f, pre[b * G + H + j], ar);
            if (dRb) dRb[2 * H + j] += dph[b * H + j];
          }
        }
      }
      // The recurrence: dH_{k-1} = direct terms + dHR R; R's gradient dHR^T H_{k-1}.
      gemm(false, false, B, H, Gr, dhr.data(), G, R, H, 1.f, dhp.data(), H);
      if (dR) gemm(true, false, Gr, H, B, dhr.data(), G, hp, H, 1.f, dR, H);
      if (dRb)
        for (int64_t b = 0; b < B; ++b)
          for (int64_t j = 0; j < Gr; ++j) dRb[j] += dhr[b * G + j];
      std::swap(dh, dhp);
      if (C0) std::swap(dc, dcp);
    }
    for (int64_t b = 0; b < B; ++b) {
      if (out.dh0) std::copy(dh.data() + b * H, dh.data() + (b + 1) * H, out.dh0 + state_at(p, d, b));
      if (out.dc0) std::copy(dc.data() + b * H, dc.data() + (b + 1) * H, out.dc0 + state_at(p, d, b));
    }
    // The input side, every step at once: dX = dXW W, dW = dXW^T X, dWb = column sums.
    if (out.dx) gemm(false, false, S * B, I, G, dxw.data(), G, W, I, d > 0 ? 1.f : 0.f, out.dx, I);
    if (out.dw) gemm(true, false, G, I, S * B, dxw.data(), G, io.x, I, 0.f, out.dw + d * G * I, I);
    if (dWb)
      for (int64_t row = 0; row < S * B; ++row)
        for (int64_t j = 0; j < G; ++j) dWb[j] += dxw[row * G + j];
  }
}

namespace {

class RnnKernel final : public Kernel {
 public:
  explicit RnnKernel(GemmFn gemm) : gemm_(std::move(gemm)) {}
  Status init(const KernelContext& ctx) {
    MOSAIC_ASSIGN_OR_RETURN(p_, rnn_params(ctx));
    label_ = ctx.node->label() + ": input '" + (ctx.node->has_input(4) ? ctx.node->inputs[4] : std::string()) + "'";
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const RnnIO<float> io = tensors(src, dst);
    MOSAIC_RETURN_IF_ERROR(check_rnn_lens(p_, io.lens, label_));
    rnn_forward(p_, io, tape_, gemm_);
    return Status::ok();
  }
  bool has_backward() const override { return true; }
  bool backward_reads_input(size_t) const override { return true; }
  bool backward_reads_output(size_t) const override { return false; }
  Status backward(const BackwardArgs& a) override {
    const RnnIO<float> io = tensors(a.src, {});
    auto grad_out = [&](size_t i) -> const float* {
      return i < a.diff_dst.size() && a.diff_dst[i] ? a.diff_dst[i]->f32() : nullptr;
    };
    auto grad_in = [&](size_t i) -> float* {
      return i < a.diff_src.size() && a.diff_src[i] ? a.diff_src[i]->f32() : nullptr;
    };
    RnnGrads g{grad_in(0), grad_in(1), grad_in(2), grad_in(3), grad_in(5), grad_in(6), grad_in(7)};
    rnn_backward(p_, io, tape_, grad_out(0), grad_out(1), grad_out(2), g, gemm_);
    if (float* dl = grad_in(4)) std::fill(dl, dl + a.diff_src[4]->numel(), 0.f);  // lengths: none
    return Status::ok();
  }

 private:
  RnnIO<float> tensors(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) const {
    auto in = [&](size_t i) -> const float* { return i < src.size() && src[i] ? src[i]->f32() : nullptr; };
    auto out = [&](size_t i) -> float* { return i < dst.size() && dst[i] ? dst[i]->f32() : nullptr; };
    RnnIO<float> io;
    io.x = in(0);
    io.w = in(1);
    io.r = in(2);
    io.b = in(3);
    io.lens = src.size() > 4 && src[4] ? src[4]->i64() : nullptr;
    io.h0 = in(5);
    io.c0 = in(6);
    io.p = in(7);
    io.y = out(0);
    io.yh = out(1);
    io.yc = out(2);
    return io;
  }
  GemmFn gemm_;
  RnnParams p_;
  RnnTape<float> tape_;
  std::string label_;
};

KernelFactory rnn_kernel_factory(GemmFn gemm) {
  return [gemm](const KernelContext& ctx) -> Expected<std::unique_ptr<Kernel>> {
    auto k = std::make_unique<RnnKernel>(gemm);
    MOSAIC_RETURN_IF_ERROR(k->init(ctx));
    return std::unique_ptr<Kernel>(std::move(k));
  };
}

}  // namespace

void add_rnn_kernels(BackendRegistration& r, GemmFn gemm, SupportCheck supports) {
  for (const char* op : {"RNN", "GRU", "LSTM"}) r.kernel(op, rnn_kernel_factory(gemm), {LayoutUse::kNone, supports});
}

}  // namespace mosaic
