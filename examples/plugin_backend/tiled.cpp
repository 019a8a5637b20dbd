// A small backend as a Mosaic plugin: "tiled", a cache-blocked Gemm (forward and backward,
// with the fused activations of the fusion pass) and Relu, single-threaded plain C++.
// Every other op falls back to the next backend (--fallback, naive by default). Build with
// mosaic_add_plugin (CMakeLists.txt here), then:
//   mosaic backends --plugin build/examples/plugin_backend/libmosaic_tiled.so
//   mosaic bench zoo:fmnist-cnn --plugin .../libmosaic_tiled.so --backends tiled,im2col
//   mosaic bench zoo:fmnist-cnn --plugin .../libmosaic_tiled.so --assign Gemm=tiled,*=onednn
//   mosaic gradcheck zoo:fmnist-cnn --plugin .../libmosaic_tiled.so --backend tiled
// Each run checks the tiled kernels against the naive oracle like the built-in ones.
#include <algorithm>
#include <cstring>
#include <vector>

#include "backends/plugin.hpp"
#include "operators/params.hpp"

namespace {

using mosaic::Status;

constexpr int64_t kBlockM = 64, kBlockN = 256, kBlockK = 256;

/// A read-only matrix view with arbitrary row and column strides (a transpose is a swap).
struct View {
  const float* p;
  int64_t row, col;
  float at(int64_t i, int64_t j) const { return p[i * row + j * col]; }
  View t() const { return {p, col, row}; }
};

/// out[M,N] (row-major, leading dimension ldo) = alpha * a[M,K] b[K,N] (+ out if accumulate).
/// Blocks of a and b are packed contiguous first, so the inner loop streams both.
void blocked_gemm(int64_t m, int64_t n, int64_t k, float alpha, View a, View b, float* out, int64_t ldo,
                  bool accumulate) {
  if (!accumulate)
    for (int64_t i = 0; i < m; ++i) std::fill(out + i * ldo, out + i * ldo + n, 0.f);
  std::vector<float> pa(static_cast<size_t>(kBlockM * kBlockK)), pb(static_cast<size_t>(kBlockK * kBlockN));
  for (int64_t k0 = 0; k0 < k; k0 += kBlockK) {
    const int64_t kb = std::min(kBlockK, k - k0);
    for (int64_t j0 = 0; j0 < n; j0 += kBlockN) {
      const int64_t nb = std::min(kBlockN, n - j0);
      for (int64_t kk = 0; kk < kb; ++kk)
        for (int64_t jj = 0; jj < nb; ++jj) pb[kk * nb + jj] = b.at(k0 + kk, j0 + jj);
      for (int64_t i0 = 0; i0 < m; i0 += kBlockM) {
        const int64_t mb = std::min(kBlockM, m - i0);
        for (int64_t ii = 0; ii < mb; ++ii)
          for (int64_t kk = 0; kk < kb; ++kk) pa[ii * kb + kk] = alpha * a.at(i0 + ii, k0 + kk);
        for (int64_t ii = 0; ii < mb; ++ii) {
          float* o = out + (i0 + ii) * ldo + j0;
          for (int64_t kk = 0; kk < kb; ++kk) {
            const float s = pa[ii * kb + kk];
            const float* row = pb.data() + kk * nb;
            for (int64_t jj = 0; jj < nb; ++jj) o[jj] += s * row[jj];
          }
        }
      }
    }
  }
}

/// How C (shape [], [N], [1|M, 1|N]) broadcasts over [M, N]: its strides along rows and columns.
struct Bias {
  int64_t row = 0, col = 0;
};

class TiledGemm final : public mosaic::Kernel {
 public:
  Status init(const mosaic::KernelContext& ctx) {
    for (size_t i = 0; i < ctx.inputs.size(); ++i)
      if (ctx.has_input(i) && ctx.inputs[i].dtype != mosaic::DType::kF32)
        return Status::unsupported(ctx.node->label() + ": tiled computes float32 only");
    auto p = mosaic::gemm_params(ctx);
    if (!p.ok()) return p.status();
    p_ = *p;
    act_ = mosaic::fused_activation(*ctx.node);
    if (act_.active() && ctx.training)
      return Status::unsupported(ctx.node->label() + ": backward of a fused activation");
    if (p_.has_c) {
      const mosaic::Shape& c = ctx.inputs[2].shape;
      const int64_t rows = c.size() == 2 ? c[0] : 1, cols = c.empty() ? 1 : c.back();
      bias_ = {rows == 1 ? 0 : cols, cols == 1 ? 0 : 1};
    }
    return Status::ok();
  }

  Status forward(const std::vector<const mosaic::Tensor*>& src, const std::vector<mosaic::Tensor*>& dst) override {
    float* y = dst[0]->f32();
    const int64_t m = p_.m, n = p_.n;
    if (p_.has_c && p_.beta != 0) {
      const float* c = src[2]->f32();
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) y[i * n + j] = p_.beta * c[i * bias_.row + j * bias_.col];
    }
    blocked_gemm(m, n, p_.k, p_.alpha, a_view(src[0]), b_view(src[1]), y, n, p_.has_c && p_.beta != 0);
    act_.apply(y, m * n);
    return Status::ok();
  }

  bool has_backward() const override { return true; }
  bool backward_reads_output(size_t) const override { return false; }
  bool backward_reads_input(size_t i) const override { return i < 2; }

  Status backward(const mosaic::BackwardArgs& a) override {
    const int64_t m = p_.m, n = p_.n, k = p_.k;
    const View dy{a.diff_dst[0]->f32(), n, 1};
    // Y = alpha A' B' with A' = op(A) [M,K], B' = op(B) [K,N].
    if (a.diff_src[0]) {  // dA' = alpha dY B'^T; dA is its transpose when transA
      float* da = a.diff_src[0]->f32();
      if (p_.trans_a) blocked_gemm(k, m, n, p_.alpha, b_view(a.src[1]), dy.t(), da, m, false);
      else blocked_gemm(m, k, n, p_.alpha, dy, b_view(a.src[1]).t(), da, k, false);
    }
    if (a.diff_src[1]) {  // dB' = alpha A'^T dY; dB is its transpose when transB
      float* db = a.diff_src[1]->f32();
      if (p_.trans_b) blocked_gemm(n, k, m, p_.alpha, dy.t(), a_view(a.src[0]), db, k, false);
      else blocked_gemm(k, n, m, p_.alpha, a_view(a.src[0]).t(), dy, db, n, false);
    }
    if (a.diff_src.size() > 2 && a.diff_src[2]) {  // dC = beta dY summed over C's broadcast axes
      mosaic::Tensor* dc = a.diff_src[2];
      std::memset(dc->data(), 0, dc->bytes());
      float* g = dc->f32();
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) g[i * bias_.row + j * bias_.col] += p_.beta * dy.at(i, j);
    }
    return Status::ok();
  }

 private:
  View a_view(const mosaic::Tensor* t) const {
    return p_.trans_a ? View{t->f32(), 1, p_.m} : View{t->f32(), p_.k, 1};
  }
  View b_view(const mosaic::Tensor* t) const {
    return p_.trans_b ? View{t->f32(), 1, p_.k} : View{t->f32(), p_.n, 1};
  }

  mosaic::GemmParams p_;
  mosaic::Activation act_;
  Bias bias_;
};

class TiledRelu final : public mosaic::Kernel {
 public:
  Status init(const mosaic::KernelContext& ctx) {
    if (ctx.inputs[0].dtype != mosaic::DType::kF32)
      return Status::unsupported(ctx.node->label() + ": tiled computes float32 only");
    return Status::ok();
  }
  Status forward(const std::vector<const mosaic::Tensor*>& src, const std::vector<mosaic::Tensor*>& dst) override {
    const float* x = src[0]->f32();
    float* y = dst[0]->f32();
    for (int64_t i = 0, n = src[0]->numel(); i < n; ++i) y[i] = x[i] > 0.f ? x[i] : 0.f;
    return Status::ok();
  }
  bool has_backward() const override { return true; }
  bool backward_reads_input(size_t) const override { return false; }
  Status backward(const mosaic::BackwardArgs& a) override {
    const float* y = a.dst[0]->f32();
    const float* dy = a.diff_dst[0]->f32();
    float* dx = a.diff_src[0]->f32();
    for (int64_t i = 0, n = a.dst[0]->numel(); i < n; ++i) dx[i] = y[i] > 0.f ? dy[i] : 0.f;
    return Status::ok();
  }
};

// The backend's registration function, as every backend has one (core/registration.hpp).
Status register_tiled(mosaic::Registrar& registrar) {
  mosaic::BackendRegistration r(registrar, {"tiled", "example plugin: cache-blocked Gemm and Relu, one thread", nullptr, nullptr});
  r.kernel("Gemm", mosaic::make_factory<TiledGemm>()).kernel("Relu", mosaic::make_factory<TiledRelu>());
  return r.status();
}

}  // namespace

MOSAIC_PLUGIN(register_tiled)
