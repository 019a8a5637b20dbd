// The CPU backends' shared loops against plain index arithmetic: the broadcast walk that
// merges axes (each_broadcast), the small matrix product (small_gemm) and the one-row product
// from packed panels (gemv_panels), on shapes that reach every merge, block and edge.
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <random>

#include "backends/common/broadcast.hpp"
#include "backends/common/gemv.hpp"
#include "ir/elements.hpp"

namespace mosaic {
namespace {

/// The element of `in` (numpy-broadcast onto `out`) that output element i reads, from i's
/// coordinates: no strides, no merging.
int64_t source_index(const Shape& in, const Shape& out, int64_t i) {
  std::vector<int64_t> coord(out.size());
  for (int64_t d = static_cast<int64_t>(out.size()) - 1; d >= 0; --d) {
    coord[static_cast<size_t>(d)] = i % out[static_cast<size_t>(d)];
    i /= out[static_cast<size_t>(d)];
  }
  int64_t idx = 0;
  const size_t off = out.size() - in.size();
  for (size_t d = 0; d < in.size(); ++d) idx = idx * in[d] + (in[d] == 1 ? 0 : coord[d + off]);
  return idx;
}

TEST(SharedLoops, EachBroadcastVisitsEveryElementInOrderWithItsOperands) {
  const std::vector<std::array<Shape, 3>> cases = {
      // out, a, b
      {{{2, 3, 4, 5}, {2, 3, 4, 5}, {2, 3, 4, 5}}},  // all merge into one row
      {{{2, 3, 4, 5}, {2, 3, 4, 5}, {1, 3, 1, 1}}},  // channel broadcast
      {{{2, 3, 4, 5}, {1, 3, 1, 5}, {2, 3, 4, 5}}},  // first operand broadcast
      {{{2, 3, 4, 6}, {2, 1, 4, 1}, {3, 1, 6}}},     // both broadcast, different ranks
      {{{7, 1, 5}, {7, 1, 1}, {5}}},                 // a size-1 output axis
      {{{1, 1}, {1}, {}}},                           // one element
      {{{3, 4}, {}, {3, 4}}},                        // a scalar operand
      {{{4, 1, 3, 1}, {4, 1, 3, 1}, {1, 1, 3, 1}}},  // size-1 axes between and after
  };
  for (const auto& c : cases) {
    const Shape& out = c[0];
    std::array<Shape, 2> in{c[1], c[2]};
    int64_t expected_i = 0;
    each_broadcast<2>(out, in, [&](int64_t i, const std::array<int64_t, 2>& o) {
      ASSERT_EQ(i, expected_i);
      ++expected_i;
      EXPECT_EQ(o[0], source_index(in[0], out, i)) << "element " << i;
      EXPECT_EQ(o[1], source_index(in[1], out, i)) << "element " << i;
    });
    EXPECT_EQ(expected_i, shape_numel(out));
  }
  int calls = 0;  // an empty output: no call
  each_broadcast<1>({2, 0, 3}, std::array<Shape, 1>{Shape{2, 0, 3}}, [&](int64_t, const std::array<int64_t, 1>&) { ++calls; });
  EXPECT_EQ(calls, 0);
}

TEST(SharedLoops, SmallGemmMatchesTheTripleLoop) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  // Full 4x16 blocks, row and column edges, both, one element, strided operands.
  for (const auto& [m, n, k] : std::vector<std::array<int64_t, 3>>{
           {8, 32, 16}, {7, 37, 19}, {3, 5, 1}, {1, 1, 1}, {5, 16, 33}, {4, 17, 8}, {12, 64, 7}}) {
    const int64_t lda = k + 3, ldb = n + 2, ldc = n + 1;  // row strides wider than the rows
    std::vector<float> a(static_cast<size_t>(m * lda)), b(static_cast<size_t>(k * ldb)), c(static_cast<size_t>(m * ldc), -7.f);
    for (float& v : a) v = u(rng);
    for (float& v : b) v = u(rng);
    small_gemm(m, n, k, a.data(), lda, b.data(), ldb, c.data(), ldc);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double want = 0;
        for (int64_t p = 0; p < k; ++p) want += static_cast<double>(a[i * lda + p]) * b[p * ldb + j];
        EXPECT_NEAR(c[i * ldc + j], want, 1e-5 * (1 + k)) << m << "x" << n << "x" << k << " at " << i << "," << j;
      }
      EXPECT_EQ(c[i * ldc + n], -7.f) << "wrote past the row";  // the padding between rows
    }
  }
}

TEST(SharedLoops, GemvPanelsMatchTheDoubleLoop) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  // Fewer outputs than a panel, one panel, a panel and one, the streams' partial last round,
  // one input, none, and sizes that split over the threads (n * k >= 65536).
  for (const auto& [n, k] : std::vector<std::array<int64_t, 2>>{
           {1, 5}, {7, 33}, {8, 16}, {9, 3}, {65, 1}, {203, 517}, {1300, 64}, {5, 0}, {4099, 17}}) {
    for (bool trans_b : {false, true}) {
      SCOPED_TRACE(std::to_string(n) + " x " + std::to_string(k) + (trans_b ? ", B [n, k]" : ", B [k, n]"));
      std::vector<float> b(static_cast<size_t>(n * k)), x(static_cast<size_t>(k)), y(static_cast<size_t>(n) + 1, -7.f);
      for (float& v : b) v = u(rng);
      for (float& v : x) v = u(rng);
      std::vector<float> panels(static_cast<size_t>(gemv_panel_floats(n, k)), -3.f);
      pack_gemv_panels(b.data(), trans_b, n, k, panels.data());
      gemv_panels(panels.data(), x.data(), y.data(), n, k, 0.5f);
      for (int64_t j = 0; j < n; ++j) {
        double want = 0;
        for (int64_t p = 0; p < k; ++p) want += static_cast<double>(x[p]) * (trans_b ? b[j * k + p] : b[p * n + j]);
        ASSERT_NEAR(y[j], 0.5 * want, 1e-5 * (1 + k)) << "output " << j;
      }
      EXPECT_EQ(y[n], -7.f) << "wrote past the outputs";
    }
  }
}

/// A few rows against the panels: every row count up to kPanelRowsMax (four rows at a time, and
/// the remainders 1-3), panel counts that leave a thread's second stream one short, strided
/// rows of A and Y, and sizes that split over the threads.
TEST(SharedLoops, GemmPanelsMatchTheDoubleLoopForAFewRows) {
  std::mt19937 rng(12);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (const auto& [n, k] : std::vector<std::array<int64_t, 2>>{{7, 33}, {9, 3}, {24, 16}, {203, 517}, {4099, 17}, {5, 0}}) {
    for (int64_t m = 1; m <= kPanelRowsMax; ++m) {
      SCOPED_TRACE(std::to_string(m) + " x " + std::to_string(n) + " x " + std::to_string(k));
      const int64_t lda = k + 2, ldy = n + 3;
      std::vector<float> b(static_cast<size_t>(n * k)), a(static_cast<size_t>(m * lda));
      std::vector<float> y(static_cast<size_t>(m * ldy), -7.f);
      for (float& v : b) v = u(rng);
      for (float& v : a) v = u(rng);
      std::vector<float> panels(static_cast<size_t>(gemv_panel_floats(n, k)), -3.f);
      pack_gemv_panels(b.data(), false, n, k, panels.data());
      gemm_panels(panels.data(), a.data(), lda, y.data(), ldy, m, n, k, 0.5f);
      for (int64_t r = 0; r < m; ++r) {
        for (int64_t j = 0; j < n; ++j) {
          double want = 0;
          for (int64_t p = 0; p < k; ++p) want += static_cast<double>(a[r * lda + p]) * b[p * n + j];
          ASSERT_NEAR(y[r * ldy + j], 0.5 * want, 1e-5 * (1 + k)) << "row " << r << ", output " << j;
        }
        for (int64_t j = n; j < ldy; ++j) EXPECT_EQ(y[r * ldy + j], -7.f) << "wrote past row " << r;
      }
    }
  }
}

/// The bfloat16 panels (bf16 plans): one row and every row count up to kPanelRowsMax against
/// the double loop over the operands rounded to bfloat16 (nearest even) as the caller rounds
/// A: what is left is float32's summation error. Rounding the weights by truncation, or
/// reading a panel element off by one, is far outside it.
TEST(SharedLoops, Bf16PanelsMatchTheDoubleLoopOfTheRoundedOperands) {
  std::mt19937 rng(13);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  auto round16 = [](float v) { return bf16_to_f32(f32_to_bf16(v)); };
  for (const auto& [n, k] : std::vector<std::array<int64_t, 2>>{{7, 33}, {9, 3}, {203, 517}, {4099, 17}, {5, 0}}) {
    for (int64_t m = 1; m <= kPanelRowsMax; m += (m < 3 ? 1 : 6)) {
      SCOPED_TRACE(std::to_string(m) + " x " + std::to_string(n) + " x " + std::to_string(k));
      std::vector<float> b(static_cast<size_t>(n * k)), a(static_cast<size_t>(m * k)), y(static_cast<size_t>(m * n) + 1, -7.f);
      for (float& v : b) v = u(rng);
      for (float& v : a) v = round16(u(rng));
      std::vector<uint16_t> panels(static_cast<size_t>(gemv_panel_floats(n, k)), 0xffff);
      pack_gemv_panels_bf16(b.data(), false, n, k, panels.data());
      if (m == 1) gemv_panels_bf16(panels.data(), a.data(), y.data(), n, k, 0.5f);
      else gemm_panels_bf16(panels.data(), a.data(), k, y.data(), n, m, n, k, 0.5f);
      for (int64_t r = 0; r < m; ++r)
        for (int64_t j = 0; j < n; ++j) {
          double want = 0;
          for (int64_t p = 0; p < k; ++p) want += static_cast<double>(a[r * k + p]) * round16(b[p * n + j]);
          ASSERT_NEAR(y[r * n + j], 0.5 * want, 1e-6 * (1 + k)) << "row " << r << ", output " << j;
        }
      EXPECT_EQ(y[m * n], -7.f) << "wrote past the outputs";
    }
  }
  // Shared bf16 panels are the bf16 packing, apart from the float32 ones of the same weights.
  Tensor w = Tensor::empty({DType::kF32, {33, 7}});
  for (int64_t i = 0; i < 33 * 7; ++i) w.f32()[i] = u(rng);
  auto f32 = shared_gemv_panels(w, false, 7, 33), bf16 = shared_gemv_panels(w, false, 7, 33, DType::kBF16);
  ASSERT_NE(f32.get(), bf16.get());
  EXPECT_EQ(bf16->dtype(), DType::kBF16);
  std::vector<uint16_t> want(static_cast<size_t>(gemv_panel_floats(7, 33)));
  pack_gemv_panels_bf16(w.f32(), false, 7, 33, want.data());
  EXPECT_EQ(std::memcmp(bf16->data(), want.data(), want.size() * sizeof(uint16_t)), 0);
}

/// The panels of one constant are packed once while a kernel holds them: the same tensor (or a
/// copy sharing its buffer) gets the same panels; weights written in place since, or a
/// different layout, get panels of their own, packed from what the weights hold now.
TEST(SharedLoops, SharedPanelsArePackedOnceAndNeverStale) {
  const int64_t k = 37, n = 21;
  Tensor w = Tensor::empty({DType::kF32, {k, n}});
  for (int64_t i = 0; i < k * n; ++i) w.f32()[i] = static_cast<float>(i % 13) - 6.f;
  auto first = shared_gemv_panels(w, false, n, k);
  const Tensor copy = w;  // a Graph copy: the same buffer
  auto again = shared_gemv_panels(copy, false, n, k);
  EXPECT_EQ(first.get(), again.get()) << "packed twice";
  EXPECT_NE(shared_gemv_panels(w, true, k, n).get(), first.get()) << "another layout shares panels";
  std::vector<float> want(static_cast<size_t>(gemv_panel_floats(n, k)));
  pack_gemv_panels(w.f32(), false, n, k, want.data());
  EXPECT_EQ(std::memcmp(first->f32(), want.data(), want.size() * sizeof(float)), 0);

  w.f32()[5 * n + 3] = 100.f;  // written in place while the first panels live
  auto fresh = shared_gemv_panels(w, false, n, k);
  EXPECT_NE(fresh.get(), first.get()) << "stale panels reused";
  pack_gemv_panels(w.f32(), false, n, k, want.data());
  EXPECT_EQ(std::memcmp(fresh->f32(), want.data(), want.size() * sizeof(float)), 0);
  EXPECT_NE(std::memcmp(first->f32(), want.data(), want.size() * sizeof(float)), 0) << "the first kernel's panels changed";
}

}  // namespace
}  // namespace mosaic
