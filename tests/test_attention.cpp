// FusedAttention: PyTorch's scaled dot-product attention ops recognised as one node
// (core/fuse_attention.cpp) where the placement's backend has the kernel, computing what the
// unfused graph computes (backends/common/attention.hpp), counting the same FLOPs, and
// refusing malformed nodes by name. Near misses are left alone.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "api/bench.hpp"
#include "backends/common/fast_exp.hpp"
#include "core/fuse.hpp"
#include "core/plan.hpp"
#include "core/prepare.hpp"
#include "metrics/compare.hpp"
#include "operators/attention.hpp"
#include "operators/schema.hpp"
#include "test_util.hpp"

namespace mosaic::test {
namespace {

using A = Attribute;

enum class Form { kDivMask, kMulNoMask, kMaskFirst, kNoScale, kCausal, kRuntimeMaskFirst };

struct Dims {
  int64_t b = 2, h = 3, tq = 5, tk = 6, d = 4, dv = 3;
};

/// Q [b, h, tq, d], Kt [b, h, d, tk], V [b, h, tk, dv] (graph inputs) through the chain
/// PyTorch exports, in one of its forms.
Graph attention_graph(Form form, const Dims& s = {}) {
  Graph g;
  g.source = "attention";
  g.opset = 17;
  g.inputs.push_back(ValueInfo{"q", DType::kF32, {s.b, s.h, s.tq, s.d}, {}, true});
  g.inputs.push_back(ValueInfo{"kt", DType::kF32, {s.b, s.h, s.d, s.tk}, {}, true});
  g.inputs.push_back(ValueInfo{"v", DType::kF32, {s.b, s.h, s.tk, s.dv}, {}, true});
  g.initializers["c"] = Tensor::from_f32({}, {2.f});
  add_node(g, make_node("MatMul"), {"q", "kt"}, {"s"}, "scores");
  std::string x = "s";
  if (form == Form::kDivMask || form == Form::kMaskFirst || form == Form::kCausal || form == Form::kRuntimeMaskFirst) {
    add_node(g, make_node("Div"), {"s", "c"}, {"sd"}, "scale");
    x = "sd";
  } else if (form == Form::kMulNoMask) {
    add_node(g, make_node("Mul"), {"c", "s"}, {"sd"}, "scale");
    x = "sd";
  }
  if (form == Form::kDivMask || form == Form::kMaskFirst) {  // a padding mask [b, 1, 1, tk]
    Tensor m = Tensor::empty({DType::kF32, {s.b, 1, 1, s.tk}});
    for (int64_t i = 0; i < m.numel(); ++i) m.f32()[i] = i % 4 == 3 ? -10000.f : 0.f;
    g.initializers["mask"] = m;
    add_node(g, make_node("Add"), form == Form::kMaskFirst ? std::vector<std::string>{"mask", x} : std::vector<std::string>{x, "mask"},
             {"sm"}, "mask");
    x = "sm";
  } else if (form == Form::kRuntimeMaskFirst) {  // BERT's order: Add(Mul(keep, -10000), scores)
    g.inputs.push_back(ValueInfo{"keep", DType::kF32, {s.b, 1, 1, s.tk}, {}, true});
    g.initializers["big"] = Tensor::from_f32({}, {-10000.f});
    add_node(g, make_node("Mul"), {"keep", "big"}, {"m"}, "mask_scale");
    add_node(g, make_node("Add"), {"m", x}, {"sm"}, "mask");
    x = "sm";
  } else if (form == Form::kCausal) {  // [tq, tk] with -inf above the diagonal
    Tensor m = Tensor::empty({DType::kF32, {s.tq, s.tk}});
    for (int64_t i = 0; i < s.tq; ++i)
      for (int64_t j = 0; j < s.tk; ++j) m.f32()[i * s.tk + j] = j > i ? -std::numeric_limits<float>::infinity() : 0.f;
    g.initializers["mask"] = m;
    add_node(g, make_node("Add"), {x, "mask"}, {"sm"}, "mask");
    x = "sm";
  }
  add_node(g, make_node("Softmax", {{"axis", A::of_int(-1)}}), {x}, {"p"}, "softmax");
  add_node(g, make_node("MatMul"), {"p", "v"}, {"y"}, "context");
  g.outputs.push_back(ValueInfo{"y", DType::kF32, {}, {}, false});
  return g;
}

std::vector<Tensor> inputs_for(const Dims& s, Form form = Form::kDivMask) {
  std::vector<Tensor> in{random_tensor({s.b, s.h, s.tq, s.d}, 11, -2.f, 2.f),
                         random_tensor({s.b, s.h, s.d, s.tk}, 12, -2.f, 2.f), random_tensor({s.b, s.h, s.tk, s.dv}, 13)};
  if (form == Form::kRuntimeMaskFirst) {  // 1 where a position is masked out, 0 where kept
    Tensor keep = Tensor::empty({DType::kF32, {s.b, 1, 1, s.tk}});
    for (int64_t i = 0; i < keep.numel(); ++i) keep.f32()[i] = i % 3 == 2 ? 1.f : 0.f;
    in.push_back(keep);
  }
  return in;
}

Tensor run_on(const Graph& g, const std::string& backend, const std::vector<Tensor>& in) {
  auto plan = Plan::build(g, Placement::all_on(backend, {}), builtin_registry());
  EXPECT_TRUE(plan.ok()) << plan.status().to_string();
  std::vector<Tensor> out;
  if (plan.ok()) {
    EXPECT_TRUE(plan.value()->run(in, &out).is_ok());
  }
  return out.empty() ? Tensor{} : out[0];
}

Graph prepared(Graph g) {
  EXPECT_TRUE(prepare_graph(g, builtin_registry(), PrepareOptions{}).ok());
  return g;
}

/// The backends that register a FusedAttention kernel (from the registry).
std::vector<std::string> fused_backends() {
  std::vector<std::string> v;
  for (const auto& b : builtin_registry().backends())
    if (builtin_registry().has_kernel(b, kAttentionOp)) v.push_back(b);
  return v;
}

TEST(FuseAttention, EachFormBecomesOneNodeThatMatchesTheGraph) {
  ASSERT_GE(fused_backends().size(), 2u);  // naive and onednn at least
  for (Form form :
       {Form::kDivMask, Form::kMulNoMask, Form::kMaskFirst, Form::kNoScale, Form::kCausal, Form::kRuntimeMaskFirst}) {
    const Dims s;
    const Graph plain = prepared(attention_graph(form, s));
    const std::vector<Tensor> in = inputs_for(s, form);
    const Tensor want = run_on(plain, "naive", in);
    for (const auto& b : fused_backends()) {
      Graph f = plain;
      const FuseReport r = fuse_graph(f, fuse_options_for(Placement::all_on(b, {}), builtin_registry(), false));
      // Everything but the runtime mask's own Mul becomes one node.
      ASSERT_EQ(f.nodes.size(), form == Form::kRuntimeMaskFirst ? 2u : 1u) << static_cast<int>(form) << " " << b;
      const Node& fn = f.nodes.back();
      EXPECT_EQ(fn.op_type, kAttentionOp);
      EXPECT_EQ(fn.domain, kAttentionDomain);
      EXPECT_EQ(r.fused.size(), 1u);
      const Tensor got = run_on(f, b, in);
      ASSERT_TRUE(got.defined());
      const Agreement a = compare_tensors(got, want, 1e-5, 1e-6);
      EXPECT_TRUE(a.ok) << static_cast<int>(form) << " on " << b << ": " << a.message;
    }
  }
}

TEST(FuseAttention, MatchesTheFormulaByHand) {
  const Dims s;
  Graph f = prepared(attention_graph(Form::kDivMask, s));
  fuse_graph(f, fuse_options_for(Placement::all_on("naive", {}), builtin_registry(), false));
  const std::vector<Tensor> in = inputs_for(s);
  const Tensor& mask = f.initializers.at("mask");
  for (const auto& b : fused_backends()) {
    const Tensor y = run_on(f, b, in);
    ASSERT_TRUE(y.defined());
    for (int64_t m = 0; m < s.b * s.h; ++m)
      for (int64_t i = 0; i < s.tq; ++i) {
        std::vector<double> p(static_cast<size_t>(s.tk));
        double mx = -1e300, sum = 0;
        for (int64_t j = 0; j < s.tk; ++j) {
          double dot = 0;
          for (int64_t k = 0; k < s.d; ++k)
            dot += static_cast<double>(in[0].f32()[(m * s.tq + i) * s.d + k]) * in[1].f32()[(m * s.d + k) * s.tk + j];
          p[j] = dot / 2 + mask.f32()[(m / s.h) * s.tk + j];
          mx = std::max(mx, p[j]);
        }
        for (auto& e : p) sum += (e = std::exp(e - mx));
        for (int64_t c = 0; c < s.dv; ++c) {
          double o = 0;
          for (int64_t j = 0; j < s.tk; ++j) o += p[j] / sum * in[2].f32()[(m * s.tk + j) * s.dv + c];
          EXPECT_NEAR(y.f32()[(m * s.tq + i) * s.dv + c], o, 2e-6) << b << " matrix " << m << " row " << i;
        }
      }
  }
}

TEST(FuseAttention, RowBlocksAtBatchOneMatch) {
  // One matrix of 70 rows: the threaded kernels split it into blocks of rows, the last one
  // partial.
  Dims s;
  s.b = 1;
  s.h = 1;
  s.tq = 70;
  s.tk = 33;
  s.d = 8;
  s.dv = 5;
  const Graph plain = prepared(attention_graph(Form::kCausal, s));
  const std::vector<Tensor> in = inputs_for(s);
  const Tensor want = run_on(plain, "naive", in);
  for (const auto& b : fused_backends()) {
    Graph f = plain;
    fuse_graph(f, fuse_options_for(Placement::all_on(b, {}), builtin_registry(), false));
    ASSERT_EQ(f.nodes.size(), 1u);
    const Agreement a = compare_tensors(run_on(f, b, in), want, 1e-5, 1e-6);
    EXPECT_TRUE(a.ok) << b << ": " << a.message;
  }
}

TEST(FuseAttention, CountsTheFlopsOfTheUnfusedGraph) {
  const Graph plain = prepared(attention_graph(Form::kDivMask));
  Graph f = plain;
  fuse_graph(f, fuse_options_for(Placement::all_on("naive", {}), builtin_registry(), false));
  auto total = [](const Graph& g) {
    PlanOptions po;
    po.allocate = false;
    auto plan = Plan::build(g, Placement::all_on("naive", {}), builtin_registry(), po);
    EXPECT_TRUE(plan.ok());
    double sum = 0;
    for (const auto& s : plan.value()->steps()) sum += s.flops;
    return sum;
  };
  const double want = 2 * 3 * 5 * 6 * (2.0 * 4 + 1 + 1 + 4 + 2.0 * 3);  // by hand: matrices x scores x per-score
  EXPECT_DOUBLE_EQ(total(plain), want);
  EXPECT_DOUBLE_EQ(total(f), want);
}

TEST(FuseAttention, NearMissesAndOtherBackendsAreLeftAlone) {
  const auto fo = fuse_options_for(Placement::all_on("naive", {}), builtin_registry(), false);
  {  // no predicate: nothing fuses (the default options)
    Graph g = prepared(attention_graph(Form::kDivMask));
    fuse_graph(g);
    EXPECT_EQ(g.nodes.size(), 5u);
  }
  {  // training plans keep the plain graph (the fused node has no backward)
    Graph g = prepared(attention_graph(Form::kDivMask));
    fuse_graph(g, fuse_options_for(Placement::all_on("naive", {}), builtin_registry(), true));
    EXPECT_EQ(g.nodes.size(), 5u);
  }
  for (const auto& b : builtin_registry().backends()) {  // a backend without the kernel
    if (builtin_registry().has_kernel(b, kAttentionOp)) continue;
    Graph g = prepared(attention_graph(Form::kDivMask));
    fuse_graph(g, fuse_options_for(Placement::all_on(b, {}), builtin_registry(), false));
    EXPECT_EQ(g.nodes.size(), 5u) << b;
  }
  {  // Softmax over another axis
    Graph g = attention_graph(Form::kNoScale);
    g.nodes[1].attrs["axis"] = A::of_int(2);
    g = prepared(g);
    fuse_graph(g, fo);
    EXPECT_EQ(g.nodes.size(), 3u);
  }
  {  // the scale is a tensor, not a scalar
    Graph g = attention_graph(Form::kMulNoMask);
    g.initializers["c"] = random_tensor({6}, 3);
    g = prepared(g);
    fuse_graph(g, fo);
    EXPECT_EQ(g.nodes.size(), 4u);
  }
  {  // the probabilities are read twice
    Graph g = attention_graph(Form::kNoScale);
    add_node(g, make_node("Relu"), {"p"}, {"r"}, "extra");
    g.outputs.push_back(ValueInfo{"r", DType::kF32, {}, {}, false});
    g = prepared(g);
    fuse_graph(g, fo);
    EXPECT_EQ(g.nodes.size(), 4u);
  }
}

TEST(FuseAttention, MalformedNodesAreRefusedByName) {
  Node n = make_node(kAttentionOp, {{"scale", A::of_float(2.f)}});
  n.name = "att";
  n.domain = kAttentionDomain;
  n.inputs = {"q", "kt", "v"};
  n.outputs = {"y"};
  auto infer = [&](std::vector<Shape> shapes) {
    OpContext c;
    c.node = &n;
    for (const auto& s : shapes) {
      c.inputs.push_back({DType::kF32, s});
      c.input_present.push_back(true);
      c.constants.push_back(nullptr);
    }
    n.inputs.resize(shapes.size(), "m");
    return infer_node(c);
  };
  EXPECT_TRUE(infer({{2, 5, 4}, {2, 4, 6}, {2, 6, 3}}).ok());
  auto chain = infer({{2, 5, 4}, {2, 3, 6}, {2, 6, 3}});  // Kt's rows are not Q's columns
  ASSERT_FALSE(chain.ok());
  EXPECT_NE(chain.status().message().find("att"), std::string::npos) << chain.status().message();
  EXPECT_FALSE(infer({{2, 5, 4}, {3, 4, 6}, {3, 6, 3}}).ok());               // leading axes differ
  EXPECT_FALSE(infer({{2, 5, 4}, {2, 4, 6}, {2, 6, 3}, {2, 5, 7}}).ok());    // mask does not broadcast
  EXPECT_TRUE(infer({{2, 5, 4}, {2, 4, 6}, {2, 6, 3}, {1, 1, 6}}).ok());     // it does
  n.attrs["scale"] = A::of_float(0.f);
  EXPECT_FALSE(infer({{2, 5, 4}, {2, 4, 6}, {2, 6, 3}}).ok());
  // An ONNX-domain node of that type is not ours.
  n.attrs["scale"] = A::of_float(2.f);
  n.domain = "";
  EXPECT_FALSE(infer({{2, 5, 4}, {2, 4, 6}, {2, 6, 3}}).ok());
}

TEST(AttentionMemory, ScoresLiveAtOnceUntilFused) {
  const Dims s;
  const int64_t one = s.b * s.h * s.tq * s.tk * 4;  // bytes of one [2, 3, 5, 6] float tensor
  const Graph plain = prepared(attention_graph(Form::kDivMask, s));
  PlanOptions po;
  po.allocate = false;
  auto inference = Plan::build(plain, Placement::all_on("naive", {}), builtin_registry(), po);
  ASSERT_TRUE(inference.ok());
  // Each element-wise step of the chain holds its input and its output: two at once.
  EXPECT_EQ(inference.value()->attention_bytes(), 2 * one);
  Graph fused = plain;
  fuse_graph(fused, fuse_options_for(Placement::all_on("naive", {}), builtin_registry(), false));
  auto f = Plan::build(fused, Placement::all_on("naive", {}), builtin_registry(), po);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f.value()->attention_bytes(), 0) << "fused: the scores are the kernel's blocks";
  // Training with Q a parameter: the scores Div reads in backward and the probabilities
  // Softmax and the context MatMul read are kept; at Softmax's step the masked scores (its
  // input) are live too: three at once.
  Graph t = attention_graph(Form::kDivMask, s);
  t.inputs.erase(t.inputs.begin());
  t.initializers["q"] = random_tensor({s.b, s.h, s.tq, s.d}, 11);
  t = prepared(t);
  po.training = true;
  auto training = Plan::build(t, Placement::all_on("naive", {}), builtin_registry(), po);
  ASSERT_TRUE(training.ok()) << training.status().to_string();
  EXPECT_EQ(training.value()->attention_bytes(), 3 * one);
}

TEST(FastExp, ExpSigmoidTanhMatchLibmToAboutOneUlp) {
  std::vector<float> x;
  for (float v = -87.f; v <= 88.f; v += 0.0137f) x.push_back(v);
  std::vector<float> y(x.size());
  exp_array(x.data(), y.data(), static_cast<int64_t>(x.size()));
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(y[i] / std::exp(static_cast<double>(x[i])) - 1));
  EXPECT_LT(worst, 4e-7);
  float edge[4] = {-std::numeric_limits<float>::infinity(), -100.f, 0.f, std::numeric_limits<float>::quiet_NaN()};
  exp_array(edge, edge, 4);
  EXPECT_EQ(edge[0], 0.f);
  EXPECT_EQ(edge[1], 0.f);
  EXPECT_EQ(edge[2], 1.f);
  EXPECT_TRUE(std::isnan(edge[3]));
  // sigmoid and tanh, against libm in double, NaN propagated.
  std::vector<float> t(x.size()), sg(x.size());
  tanh_array(x.data(), t.data(), static_cast<int64_t>(x.size()));
  sigmoid_array(x.data(), sg.data(), static_cast<int64_t>(x.size()));
  double worst_t = 0, worst_s = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = x[i], tv = std::tanh(v), sv = 1 / (1 + std::exp(-v));
    worst_t = std::max(worst_t, std::abs(t[i] - tv) / std::max(std::abs(tv), 1e-30));
    worst_s = std::max(worst_s, std::abs(sg[i] - sv) / sv);
  }
  EXPECT_LT(worst_t, 4e-7);
  EXPECT_LT(worst_s, 4e-7);
  float small[2] = {1e-6f, std::numeric_limits<float>::quiet_NaN()};  // no cancellation near 0
  tanh_array(small, small, 2);
  EXPECT_NEAR(small[0], 1e-6f, 1e-12f);
  EXPECT_TRUE(std::isnan(small[1]));
}

TEST(BenchAttention, BothTimesTheFusedAndUnfusedGraphSideBySide) {
  api::BenchOptions o;
  o.model = "zoo:bert-tiny";
  o.backends = {"onednn"};
  o.attention = "both";
  o.common.batch = 1;
  o.config.iterations = 2;
  o.config.warmup = 0;
  o.config.repeats = 1;
  o.peaks = false;
  testing::internal::CaptureStdout();
  auto r = api::bench(o);
  testing::internal::GetCapturedStdout();
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->report.configs.size(), 2u);
  EXPECT_EQ(r->report.configs[0].label, "onednn");
  EXPECT_EQ(r->report.configs[1].label, "onednn-unfused-attention");
  for (const auto& c : r->report.configs) EXPECT_TRUE(c.checked && c.check_ok) << c.label << ": " << c.check_message;
  int fused = 0, plain = 0;
  for (const auto& n : r->report.configs[0].nodes) fused += n.op == kAttentionOp;
  for (const auto& n : r->report.configs[1].nodes) plain += n.op == kAttentionOp;
  EXPECT_GT(fused, 0);
  EXPECT_EQ(plain, 0);
  // A backend without the fused kernel (im2col) times the graph as it is, gets no unfused
  // twin, and is not among those the note says run attention fused.
  o.backends = {"im2col", "onednn"};
  o.check = false;
  testing::internal::CaptureStdout();
  r = api::bench(o);
  testing::internal::GetCapturedStdout();
  ASSERT_TRUE(r.ok()) << r.status().message();
  std::vector<std::string> labels;
  for (const auto& c : r->report.configs) labels.push_back(c.label);
  EXPECT_EQ(labels, (std::vector<std::string>{"im2col", "onednn", "onednn-unfused-attention"})) << join(labels);
  std::string note;
  for (const auto& n : r->report.notes)
    if (n.rfind("attention: ", 0) == 0) note = n;
  EXPECT_NE(note.find("FusedAttention node on onednn ("), std::string::npos) << note;
  EXPECT_EQ(note.find("im2col"), std::string::npos) << note;
  o.attention = "sideways";
  EXPECT_FALSE(api::bench(o).ok());
}

}  // namespace
}  // namespace mosaic::test
