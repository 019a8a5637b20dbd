// A QDQ model's float stretches as 8-bit codes (core/fuse_qdq_codes.cpp): DequantizeLinear ->
// Relu/Clip/LeakyRelu, Pad, MaxPool, Reshape -> QuantizeLinear becomes a CodeLookup and the
// moving steps on codes, which must give the codes naive gives for the stretch as written, bit
// for bit, on every backend that takes it; what it must not rewrite stays; the byte kernels
// against hand-computed values.
#include <gtest/gtest.h>

#include <cstring>

#include "backends/common/pooling.hpp"
#include "core/fuse.hpp"
#include "test_util.hpp"

namespace mosaic::test {
namespace {

int count_op(const Graph& g, const std::string& op) {
  int n = 0;
  for (const auto& node : g.nodes) n += node.op_type == op;
  return n;
}

Tensor scalar_of(DType t, double v) {
  Tensor s = Tensor::empty({t, {}});
  store_f64(t, s.data(), 0, v);
  return s;
}

/// codes x [2, 3, 7, 7] of `in` -> DequantizeLinear (0.05, zero point z1) -> `ops` ->
/// QuantizeLinear (0.037, z2) of `out` -> y, where ops are (op, attributes, constant inputs)
/// in order; prepared.
struct Step {
  std::string op;
  std::map<std::string, Attribute> attrs;
  std::vector<Tensor> constants;
};
Graph stretch(DType in, DType out, const std::vector<Step>& ops, double z1 = 131, double z2 = 7) {
  Graph g;
  g.source = "qdq-stretch";
  g.opset = 17;
  g.inputs.push_back(ValueInfo{"x", in, {2, 3, 7, 7}, {}, true});
  g.outputs.push_back(ValueInfo{"y", out, {}, {}, false});
  g.initializers["s1"] = Tensor::from_f32({}, {0.05f});
  g.initializers["z1"] = scalar_of(in, in == DType::kI8 ? z1 - 128 : z1);
  g.initializers["s2"] = Tensor::from_f32({}, {0.037f});
  g.initializers["z2"] = scalar_of(out, z2);
  add_node(g, make_node("DequantizeLinear"), {"x", "s1", "z1"}, {"v0"}, "dq");
  std::string cur = "v0";
  for (size_t i = 0; i < ops.size(); ++i) {
    std::vector<std::string> inputs{cur};
    for (size_t k = 0; k < ops[i].constants.size(); ++k) {
      const std::string c = "c" + std::to_string(i) + "_" + std::to_string(k);
      if (ops[i].constants[k].defined()) g.initializers[c] = ops[i].constants[k];
      inputs.push_back(ops[i].constants[k].defined() ? c : "");
    }
    const std::string next = "v" + std::to_string(i + 1);
    add_node(g, make_node(ops[i].op, ops[i].attrs), inputs, {next}, ops[i].op + std::to_string(i));
    cur = next;
  }
  add_node(g, make_node("QuantizeLinear"), {cur, "s2", "z2"}, {"y"}, "q");
  EXPECT_TRUE(prepare_graph(g, builtin_registry(), PrepareOptions{}).ok());
  return g;
}

/// Every code of x's type, in a random order, as x [2, 3, 7, 7].
Tensor all_codes(DType t) {
  Tensor x = Tensor::empty({t, {2, 3, 7, 7}});
  const Tensor r = random_tensor({2, 3, 7, 7}, 9, 0.f, 256.f);
  for (int64_t i = 0; i < x.numel(); ++i)
    static_cast<uint8_t*>(x.data())[i] = static_cast<uint8_t>(i < 256 ? i : static_cast<int>(r.f32()[i]));
  return x;
}

/// y of `g` on `backend` (fused as plans fuse it) and on naive (as written): equal byte for byte.
void same_codes(const Graph& g, const std::string& backend, const Tensor& x, bool expect_lookup) {
  Graph fused = g;
  fuse_graph(fused, fuse_options_for(Placement::all_on(backend, {}), builtin_registry(), false));
  EXPECT_EQ(count_op(fused, "CodeLookup"), expect_lookup ? 1 : 0) << backend;
  if (expect_lookup) {
    EXPECT_EQ(count_op(fused, "DequantizeLinear") + count_op(fused, "QuantizeLinear"), 0) << backend;
    for (const char* op : {"Relu", "Clip", "LeakyRelu"}) EXPECT_EQ(count_op(fused, op), 0) << backend << " " << op;
  }
  std::vector<Tensor> got, want;
  auto plan = Plan::build(fused, Placement::all_on(backend, {}), builtin_registry());
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  for (const auto& step : plan.value()->steps())
    EXPECT_TRUE(step.fallback_reason.empty()) << plan.value()->graph().nodes[step.node].name << ": " << step.fallback_reason;
  ASSERT_TRUE(plan.value()->run({x}, &got).is_ok());
  ASSERT_TRUE(Plan::build(g, Placement::all_on("naive", {}), builtin_registry()).value()->run({x}, &want).is_ok());
  ASSERT_EQ(got[0].shape(), want[0].shape());
  ASSERT_EQ(got[0].dtype(), want[0].dtype());
  EXPECT_EQ(std::memcmp(got[0].data(), want[0].data(), static_cast<size_t>(want[0].numel())), 0) << backend;
}

Attribute ints(std::vector<int64_t> v) { return Attribute::of_ints(std::move(v)); }

TEST(QdqCodes, AStretchBecomesALookupAndPoolsOnCodesBitForBitTheOracles) {
  const Step relu{"Relu", {}, {}};
  const Step pad{"Pad", {}, {Tensor::from_i64({8}, {0, 0, 1, 2, 0, 0, 2, 1})}};  // value 0 by default
  const Step pool{"MaxPool", {{"kernel_shape", ints({2, 2})}, {"strides", ints({2, 2})}}, {}};
  const Step padded_pool{"MaxPool", {{"kernel_shape", ints({3, 3})}, {"strides", ints({2, 2})}, {"pads", ints({1, 1, 1, 1})}}, {}};
  const Step clip{"Clip", {}, {Tensor::from_f32({}, {-0.3f}), Tensor::from_f32({}, {2.5f})}};
  const Step leaky{"LeakyRelu", {{"alpha", Attribute::of_float(0.1f)}}, {}};
  const Step flatten{"Flatten", {{"axis", Attribute::of_int(1)}}, {}};
  const Step dilated_pool{"MaxPool", {{"kernel_shape", ints({2, 2})}, {"dilations", ints({2, 2})}}, {}};
  const std::vector<std::vector<Step>> cases = {
      {relu, pad, pool},                 // VGG's stretch
      {relu, padded_pool},               // its Pad folded into the pool (-inf padding)
      {clip, pad, leaky},                // a pad whose value goes through the steps after it
      {leaky, pool, flatten},
      {relu, dilated_pool},              // the general window walk
      {},                                // a requantisation alone
  };
  for (DType in : {DType::kU8, DType::kI8})
    for (DType out : {DType::kU8, DType::kI8})
      for (size_t c = 0; c < cases.size(); ++c) {
        SCOPED_TRACE("case " + std::to_string(c) + ", " + dtype_name(in) + " -> " + dtype_name(out));
        const Graph g = stretch(in, out, cases[c], 131, out == DType::kI8 ? -5 : 7);
        for (const char* backend : {"onednn", "im2col"}) same_codes(g, backend, all_codes(in), true);
      }
}

TEST(QdqCodes, WhatIsNotAMonotoneMapOfOneValueStays) {
  const Tensor x = all_codes(DType::kU8);
  // Abs is not monotone (a maximum of codes is not the code of the maximum); a negative slope
  // neither; a second reader of the float value keeps it; naive, the oracle, runs it as written.
  for (const auto& ops : std::vector<std::vector<Step>>{
           {{"Abs", {}, {}}},
           {{"LeakyRelu", {{"alpha", Attribute::of_float(-0.5f)}}, {}}},
       }) {
    const Graph g = stretch(DType::kU8, DType::kU8, ops);
    same_codes(g, "onednn", x, false);
  }
  Graph two_readers = stretch(DType::kU8, DType::kU8, {{"Relu", {}, {}}});
  two_readers.outputs.push_back(ValueInfo{"v1", DType::kF32, {}, {}, false});
  Graph fused = two_readers;
  fuse_graph(fused, fuse_options_for(Placement::all_on("onednn", {}), builtin_registry(), false));
  EXPECT_EQ(count_op(fused, "CodeLookup"), 0);
  fused = stretch(DType::kU8, DType::kU8, {{"Relu", {}, {}}});
  fuse_graph(fused, fuse_options_for(Placement::all_on("naive", {}), builtin_registry(), false));
  EXPECT_EQ(count_op(fused, "CodeLookup"), 0) << "the oracle runs the stretch as written";
  fused = stretch(DType::kU8, DType::kU8, {{"Relu", {}, {}}});
  fuse_graph(fused, fuse_options_for(Placement::all_on("onednn", {}), builtin_registry(), true));
  EXPECT_EQ(count_op(fused, "CodeLookup"), 0) << "training plans";
}

/// The optimised backends' QLinearAdd (a QDQ residual Add) against naive's on every pair of
/// codes, uint8 and int8, with and without the fused Relu: the same arithmetic, the same codes.
/// The second scales put (92, -80) and (-92, 80) from the zero points on ties that a fused
/// multiply-add would round the other way (MsQuantize.QLinearAddRoundsEachScaledDifferenceBeforeTheSum).
TEST(QdqCodes, TheFastQLinearAddIsTheOraclesOnEveryPairOfCodes) {
  for (DType t : {DType::kU8, DType::kI8})
    for (int ties = 0; ties < 2; ++ties)
      for (bool relu : {false, true}) {
        SCOPED_TRACE(std::string(dtype_name(t)) + (relu ? ", Relu" : "") + (ties ? ", ties" : ""));
        OpCase c;
        c.node = make_node("QLinearAdd");
        c.node.domain = "com.microsoft";
        if (relu) c.node.attrs["mosaic.activation"] = Attribute::of_string("Relu");
        Tensor a = Tensor::empty({t, {256, 256}}), b = Tensor::empty({t, {256, 256}});
        for (int i = 0; i < 256; ++i)
          for (int j = 0; j < 256; ++j) {
            a.u8()[i * 256 + j] = static_cast<uint8_t>(i);
            b.u8()[i * 256 + j] = static_cast<uint8_t>(j);
          }
        const bool s8 = t == DType::kI8;
        const int64_t za = ties ? (s8 ? 0 : 128) : (s8 ? -3 : 125), zb = ties ? za : (s8 ? 9 : 131);
        const int64_t zc = ties ? za : (s8 ? -11 : 101);
        c.inputs = {a, Tensor::from_f32({}, {ties ? 0x1.bf9f9cp-5f : 0.043f}), scalar_of(t, za),
                    b, Tensor::from_f32({}, {ties ? 0x1.592e58p-5f : 0.031f}), scalar_of(t, zb),
                    Tensor::from_f32({}, {ties ? 0x1.aeb1dp-5f : 0.057f}), scalar_of(t, zc)};
        c.is_const = {false, true, true, false, true, true, true, true};
        std::vector<Tensor> want;
        ASSERT_TRUE(run_on(c, "naive", &want).is_ok());
        if (ties) {
          // Row a, column b of the 256 x 256 table: codes as bytes.
          auto at = [&](int64_t da, int64_t db) { return want[0].get_i64(((da + za) & 255) * 256 + ((db + zb) & 255)); };
          EXPECT_EQ(at(92, -80), zc + 32);
          EXPECT_EQ(at(-92, 80), relu ? zc : zc - 32);
        }
        int64_t at_zero_point = 0;
        for (int64_t i = 0; i < want[0].numel(); ++i) at_zero_point += want[0].get_i64(i) == zc;
        if (relu) {
          EXPECT_GT(at_zero_point, 1000) << "the Relu clamps the negative sums to C's zero point";
        }
        for (const char* backend : {"im2col", "onednn"}) {
          std::vector<Tensor> got;
          ASSERT_TRUE(run_on(c, backend, &got).is_ok()) << backend;
          EXPECT_EQ(std::memcmp(got[0].data(), want[0].data(), 65536), 0) << backend;
        }
      }
}

/// CodeLookup and the 8-bit MaxPool by hand, on every CPU backend.
TEST(QdqCodes, TheByteKernelsByHand) {
  OpCase lookup;
  lookup.node = make_node("CodeLookup");
  lookup.node.domain = "mosaic";
  Tensor x = Tensor::empty({DType::kI8, {5}});
  const int8_t xs[5] = {-128, -1, 0, 1, 127};
  std::memcpy(x.data(), xs, 5);
  Tensor table = Tensor::empty({DType::kU8, {256}});
  for (int i = 0; i < 256; ++i) table.u8()[i] = static_cast<uint8_t>(255 - i);
  lookup.inputs = {x, table};
  lookup.is_const = {false, true};
  // int8 code c reads table[c + 128]: 255 - (c + 128).
  const std::vector<int> want_lookup = {255, 128, 127, 126, 0};
  OpCase pool;
  pool.node = make_node("MaxPool", {{"kernel_shape", ints({2, 2})}, {"strides", ints({2, 2})}, {"pads", ints({1, 1, 1, 1})}});
  Tensor p = Tensor::empty({DType::kU8, {1, 1, 3, 3}});
  const uint8_t ps[9] = {9, 200, 3, 4, 5, 250, 7, 8, 1};
  std::memcpy(p.data(), ps, 9);
  pool.inputs = {p};
  // Windows over the padded 5x5 (padding never wins): {9}, {200, 3}, {4, 7}, {5, 250, 8, 1}.
  const std::vector<int> want_pool = {9, 200, 7, 250};
  for (const char* backend : {"naive", "im2col", "onednn"}) {
    std::vector<Tensor> out;
    ASSERT_TRUE(run_on(lookup, backend, &out).is_ok()) << backend;
    for (int i = 0; i < 5; ++i) EXPECT_EQ(out[0].u8()[i], want_lookup[i]) << backend << " " << i;
    ASSERT_TRUE(run_on(pool, backend, &out).is_ok()) << backend;
    ASSERT_EQ(out[0].numel(), 4);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(out[0].u8()[i], want_pool[i]) << backend << " " << i;
  }
  // Windows wholly in the padding (pads as wide as the kernel) write 0, as the oracle does.
  OpCase outside;
  outside.node = make_node("MaxPool", {{"kernel_shape", ints({2, 2})}, {"pads", ints({2, 2, 2, 2})}});
  outside.inputs = {p};
  std::vector<Tensor> want_outside;
  ASSERT_TRUE(run_on(outside, "naive", &want_outside).is_ok());
  for (const char* backend : {"im2col", "onednn"}) {
    std::vector<Tensor> got;
    ASSERT_TRUE(run_on(outside, backend, &got).is_ok()) << backend;
    ASSERT_EQ(got[0].numel(), want_outside[0].numel());
    EXPECT_EQ(got[0].u8()[0], 0) << backend << ": the corner window holds padding only";
    EXPECT_EQ(std::memcmp(got[0].data(), want_outside[0].data(), static_cast<size_t>(got[0].numel())), 0) << backend;
  }
  // Rows wider than a vector register (70 codes) take the scalar rows, against naive too.
  OpCase wide;
  wide.node = make_node("MaxPool", {{"kernel_shape", ints({3, 3})}, {"strides", ints({2, 2})}, {"pads", ints({1, 1, 1, 1})}});
  Tensor wx = Tensor::empty({DType::kU8, {1, 2, 5, 70}});
  const Tensor wr = random_tensor({1, 2, 5, 70}, 17, 0.f, 256.f);
  for (int64_t i = 0; i < wx.numel(); ++i) wx.u8()[i] = static_cast<uint8_t>(wr.f32()[i]);
  wide.inputs = {wx};
  std::vector<Tensor> want_wide;
  ASSERT_TRUE(run_on(wide, "naive", &want_wide).is_ok());
  for (const char* backend : {"im2col", "onednn"}) {
    std::vector<Tensor> got;
    ASSERT_TRUE(run_on(wide, backend, &got).is_ok()) << backend;
    EXPECT_EQ(std::memcmp(got[0].data(), want_wide[0].data(), static_cast<size_t>(got[0].numel())), 0) << backend;
  }
  // The table must have 256 entries, one per code.
  lookup.inputs[1] = Tensor::empty({DType::kU8, {255}});
  std::vector<Tensor> out;
  const Status st = run_on(lookup, "naive", &out);
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("Table must be [256]"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace mosaic::test
