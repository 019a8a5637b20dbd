// Training: backward of every naive op vs finite differences, gradcheck verdicts (and that
// planted bugs FAIL), optimizers vs hand-computed PyTorch steps, datasets, losses.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "backends/common/pooling.hpp"
#include "backends/naive/naive.hpp"
#include "validate/gradcheck.hpp"
#include "core/loss.hpp"
#include "core/optimizer.hpp"
#include "operators/eltwise.hpp"
#include "operators/reduce.hpp"
#include "core/schedule.hpp"
#include "frontends/zoo/zoo.hpp"
#include "frontends/data/dataset.hpp"
#include "test_util.hpp"

namespace mosaic::test {
namespace {

using A = Attribute;

/// Builds the case's graph with every constant float input as a trainable parameter.
Graph prepared(const OpCase& c) {
  Graph g = make_graph(c);
  EXPECT_TRUE(prepare_graph(g, builtin_registry(), {}).ok());
  return g;
}

GradcheckReport check_op(const OpCase& c, const KernelRegistry& reg, double tol = 2e-2,
                         const std::string& backend = "naive") {
  Graph g = prepared(c);
  GradcheckOptions o;
  o.loss = GradcheckLoss::kProjection;
  // Data inputs inside the op's domain (Log, Sqrt, ...: positive).
  const auto [lo, hi] = unary_op_of(c.node.op_type) ? test_domain(c.node.op_type)
                        : c.node.op_type == "ReduceLogSum" ? std::pair{0.25f, 2.f}
                                                           : std::pair{-1.f, 1.f};
  o.input_lo = lo;
  o.input_hi = hi;
  o.tolerance = tol;
  o.eps = 1e-2;
  auto r = gradcheck(g, reg, Placement::all_on(backend, {}), o);
  EXPECT_TRUE(r.ok()) << c.label << ": " << r.status().to_string();
  return r.ok() ? r.value() : GradcheckReport{};
}

std::string failures(const GradcheckReport& r) {
  std::string s;
  for (const auto& t : r.tensors)
    if (!t.passed())
      s += t.name + " " + verdict_name(t.verdict) + " " + t.reason + " (" + t.worst.what + ": analytic " + std::to_string(t.worst.analytic) + " numeric " +
           std::to_string(t.worst.numeric) + ") ";
  return s;
}

std::vector<OpCase> backward_cases() {
  std::vector<OpCase> v;
  uint64_t seed = 100;
  auto add = [&](std::string label, Node n, std::vector<Shape> shapes, std::vector<bool> is_const = {}) {
    OpCase c;
    c.label = std::move(label);
    c.node = std::move(n);
    for (const auto& s : shapes) c.inputs.push_back(random_tensor(s, seed++, -1.f, 1.f));
    c.is_const = std::move(is_const);
    v.push_back(std::move(c));
  };
  add("conv_pad_stride", make_node("Conv", {{"pads", A::of_ints({1, 1, 1, 1})}, {"strides", A::of_ints({2, 2})}}),
      {{2, 3, 6, 6}, {4, 3, 3, 3}, {4}}, {false, true, true});
  // A larger image: im2col's forward unfolds it in several bands of rows, its backward whole.
  add("conv_bands", make_node("Conv", {{"pads", A::of_ints({1, 1, 1, 1})}}), {{2, 3, 24, 24}, {4, 3, 3, 3}, {4}},
      {false, true, true});
  // Stride-1 "same" layers (im2col's shifted-copy unfolding and its adjoint): several small
  // images per GEMM, and bands of a larger one with asymmetric pads.
  add("conv_same_chunked", make_node("Conv", {{"pads", A::of_ints({1, 1, 1, 1})}}), {{3, 4, 9, 9}, {5, 4, 3, 3}, {5}},
      {false, true, true});
  add("conv_same_asym", make_node("Conv", {{"pads", A::of_ints({2, 1, 0, 2})}}), {{1, 2, 20, 21}, {3, 2, 3, 4}},
      {false, true});
  add("conv_groups_dilated", make_node("Conv", {{"group", A::of_int(2)}, {"dilations", A::of_ints({2, 2})}, {"pads", A::of_ints({2, 2, 2, 2})}}),
      {{1, 4, 5, 5}, {6, 2, 3, 3}}, {false, true});
  add("gemm_transB", make_node("Gemm", {{"transB", A::of_int(1)}, {"alpha", A::of_float(0.7f)}, {"beta", A::of_float(1.3f)}}),
      {{3, 5}, {4, 5}, {4}}, {false, true, true});
  add("gemm_transA", make_node("Gemm", {{"transA", A::of_int(1)}}), {{5, 3}, {5, 4}, {3, 4}}, {false, true, true});
  add("matmul_broadcast", make_node("MatMul"), {{2, 3, 4}, {4, 5}}, {false, true});
  add("avgpool_pad", make_node("AveragePool", {{"kernel_shape", A::of_ints({3, 3})}, {"pads", A::of_ints({1, 1, 1, 1})}, {"strides", A::of_ints({2, 2})}}),
      {{2, 2, 5, 5}});
  add("avgpool_include_pad", make_node("AveragePool", {{"kernel_shape", A::of_ints({2, 2})}, {"pads", A::of_ints({1, 1, 0, 0})}, {"count_include_pad", A::of_int(1)}}),
      {{1, 2, 4, 4}});
  add("maxpool", make_node("MaxPool", {{"kernel_shape", A::of_ints({2, 2})}, {"strides", A::of_ints({2, 2})}}), {{2, 2, 4, 4}});
  add("maxpool_overlap_pad", make_node("MaxPool", {{"kernel_shape", A::of_ints({3, 3})}, {"pads", A::of_ints({1, 1, 1, 1})}}),
      {{1, 2, 5, 5}});
  add("maxpool_1d", make_node("MaxPool", {{"kernel_shape", A::of_ints({3})}, {"strides", A::of_ints({2})}}), {{2, 3, 7}});
  add("maxpool_dilated", make_node("MaxPool", {{"kernel_shape", A::of_ints({2, 2})}, {"dilations", A::of_ints({2, 2})}}),
      {{1, 2, 5, 5}});
  add("maxpool_3d", make_node("MaxPool", {{"kernel_shape", A::of_ints({2, 2, 2})}, {"strides", A::of_ints({2, 2, 2})}}),
      {{1, 2, 4, 4, 4}});
  add("globalavg", make_node("GlobalAveragePool"), {{2, 3, 3, 3}});
  add("add_broadcast", make_node("Add"), {{2, 3, 4}, {3, 1}}, {false, true});
  add("sub_broadcast", make_node("Sub"), {{2, 3}, {3}});
  add("mul_broadcast", make_node("Mul"), {{2, 3, 4}, {4}});
  add("mul_same_shape", make_node("Mul"), {{2, 3, 4}, {2, 3, 4}});
  add("matmul_batch_both", make_node("MatMul"), {{2, 1, 3, 4}, {3, 4, 5}});
  add("matmul_shared_weight", make_node("MatMul"), {{2, 3, 4}, {4, 5}}, {false, true});  // nn.Linear on 3-D
  add("add_bias_trailing", make_node("Add"), {{2, 3, 4}, {4}}, {false, true});
  add("sub_bias_first", make_node("Sub"), {{3, 4}, {2, 3, 4}}, {true, false});
  add("globalmax", make_node("GlobalMaxPool"), {{2, 3, 3, 3}});
  add("lrn5", make_node("LRN", {{"size", A::of_int(5)}, {"alpha", A::of_float(0.3f)}, {"beta", A::of_float(0.6f)}, {"bias", A::of_float(2.f)}}),
      {{2, 7, 3, 1}});
  {
    OpCase c;
    c.label = "div_broadcast";
    c.node = make_node("Div");
    c.inputs = {random_tensor({2, 3, 4}, 31, -1, 1), random_tensor({3, 1}, 32, 0.5f, 1.5f)};
    v.push_back(c);
  }
  // Every element-wise op of the table (operators/eltwise.hpp), inside its domain.
  for (const auto& u : kUnaryOps) {
    const auto [lo, hi] = test_domain(u.name);
    OpCase c;
    c.label = u.name;
    c.node = make_node(u.name);
    c.inputs = {random_tensor({3, 7}, 40 + static_cast<uint64_t>(u.op), lo, hi)};
    v.push_back(std::move(c));
  }
  // Every reduction of the table (operators/reduce.hpp), over two axes.
  for (const auto& r : kReduceOps) {
    OpCase c;
    c.label = r.name;
    c.node = make_node(r.name);
    c.inputs = {random_tensor({2, 3, 4}, 60 + static_cast<uint64_t>(r.op)), Tensor::from_i64({2}, {0, 2})};
    c.is_const = {false, true};
    c.opset = 18;
    v.push_back(std::move(c));
  }
  for (const char* op : {"Sum", "Mean", "Max", "Min"}) add(std::string("variadic_") + op, make_node(op), {{2, 3}, {3}, {2, 1}});
  add("expand", make_node("Expand"), {{3, 1}}, {});
  v.back().inputs.push_back(Tensor::from_i64({2}, {3, 4}));
  v.back().is_const = {false, true};
  add("trilu_lower", make_node("Trilu", {{"upper", A::of_int(0)}}), {{2, 3, 3}});
  // The recurrent cells (backends/common/rnn.hpp): backpropagation through time for every
  // input, with the options PyTorch exports and ONNX allows.
  auto recurrent = [&](std::string label, const std::string& op, std::map<std::string, Attribute> attrs, int gates,
                       int dirs, bool batch_first, bool lens, bool states, bool peepholes) {
    const int64_t S = 3, B = 2, I = 3, H = 2, G = gates * H;
    OpCase c;
    c.label = std::move(label);
    attrs["hidden_size"] = A::of_int(H);
    if (batch_first) attrs["layout"] = A::of_int(1);
    c.node = make_node(op, attrs);
    uint64_t seed = 70;
    c.inputs = {random_tensor(batch_first ? Shape{B, S, I} : Shape{S, B, I}, seed++),
                random_tensor({dirs, G, I}, seed++, -0.8f, 0.8f), random_tensor({dirs, G, H}, seed++, -0.8f, 0.8f),
                random_tensor({dirs, 2 * G}, seed++, -0.5f, 0.5f)};
    c.is_const = {false, true, true, true};
    c.inputs.push_back(lens ? Tensor::from_i64({B}, {3, 2}) : Tensor());
    c.is_const.push_back(true);
    const Shape state = batch_first ? Shape{B, dirs, H} : Shape{dirs, B, H};
    c.inputs.push_back(states ? random_tensor(state, seed++) : Tensor());
    c.is_const.push_back(false);
    if (op == "LSTM") {
      c.inputs.push_back(states ? random_tensor(state, seed++) : Tensor());
      c.is_const.push_back(false);
      c.inputs.push_back(peepholes ? random_tensor({dirs, 3 * H}, seed++, -0.5f, 0.5f) : Tensor());
      c.is_const.push_back(true);
    }
    c.opset = 14;
    v.push_back(std::move(c));
  };
  recurrent("rnn_tanh", "RNN", {}, 1, 1, false, false, true, false);
  recurrent("rnn_reverse_lens", "RNN", {{"direction", A::of_string("reverse")}}, 1, 1, false, true, false, false);
  recurrent("gru_linear_before_reset", "GRU", {{"linear_before_reset", A::of_int(1)}}, 3, 1, true, false, true, false);
  recurrent("gru_bidirectional_lens", "GRU", {{"direction", A::of_string("bidirectional")}}, 3, 2, false, true, true,
            false);
  recurrent("lstm_peepholes", "LSTM", {}, 4, 1, false, false, true, true);
  recurrent("lstm_bidirectional_batch_first_lens", "LSTM", {{"direction", A::of_string("bidirectional")}}, 4, 2, true,
            true, true, false);
  recurrent("gru_no_states", "GRU", {}, 3, 1, false, false, false, false);
  recurrent("lstm_no_states", "LSTM", {}, 4, 1, false, false, false, false);
  recurrent("lstm_clip_softsign", "LSTM",
            {{"clip", A::of_float(0.6f)}, {"activations", A::of_strings({"Sigmoid", "Tanh", "Softsign"})}}, 4, 1, false,
            false, false, false);
  {  // Split (fused QKV projections): each part's gradient into its slab
    OpCase c;
    c.label = "split";
    c.node = make_node("Split", {{"axis", A::of_int(1)}});
    c.node.outputs = {"q", "k", "v"};
    c.inputs = {random_tensor({2, 7, 3}, 42), Tensor::from_i64({3}, {2, 2, 3})};
    c.is_const = {false, true};
    v.push_back(c);
  }
  {  // a strided slice, one axis backwards: the gradient lands on the picked elements only
    OpCase c;
    c.label = "slice_steps";
    c.node = make_node("Slice");
    c.inputs = {random_tensor({4, 3, 5}, 41), Tensor::from_i64({2}, {1, 4}), Tensor::from_i64({2}, {4, 0}),
                Tensor::from_i64({2}, {0, 2}), Tensor::from_i64({2}, {2, -2})};
    c.is_const = {false, true, true, true, true};
    v.push_back(c);
  }
  {  // an embedding lookup: the table's gradient is the scatter-add of the rows' (ids repeat)
    OpCase c;
    c.label = "gather_embedding";
    c.node = make_node("Gather");
    c.inputs = {random_tensor({6, 4}, 32), Tensor::from_i64({2, 3}, {0, 5, 2, 5, -1, 3})};
    c.is_const = {false, true};
    v.push_back(c);
  }
  {  // Where with a constant mask (as a causal attention mask): both operands' gradients
    OpCase c;
    c.label = "where";
    c.node = make_node("Where");
    Tensor mask = Tensor::empty({DType::kBool, {3, 1}});
    for (int i = 0; i < 3; ++i) mask.u8()[i] = i != 1;
    c.inputs = {mask, random_tensor({3, 4}, 33), random_tensor({4}, 34)};
    c.is_const = {true, false, false};
    v.push_back(c);
  }
  {
    OpCase c;
    c.label = "layernorm";
    c.node = make_node("LayerNormalization", {{"axis", A::of_int(-1)}});
    c.inputs = {random_tensor({2, 3, 6}, 35), random_tensor({6}, 36, 0.5f, 1.5f), random_tensor({6}, 37)};
    c.is_const = {false, true, true};
    c.opset = 17;
    v.push_back(c);
  }
  {
    OpCase c;
    c.label = "pow";
    c.node = make_node("Pow");
    // The base a parameter (positive: the exponent's gradient reads log(a)), the exponent data.
    c.inputs = {random_tensor({2, 3}, 38, 0.25f, 2.f), random_tensor({3}, 39, -1.5f, 1.5f)};
    c.is_const = {true, false};
    v.push_back(c);
  }
  add("leakyrelu", make_node("LeakyRelu", {{"alpha", A::of_float(0.2f)}}), {{3, 7}});
  add("softmax_axis1", make_node("Softmax", {{"axis", A::of_int(1)}}), {{2, 4, 3}});
  add("logsoftmax", make_node("LogSoftmax"), {{3, 6}});
  add("lrn", make_node("LRN", {{"size", A::of_int(3)}, {"alpha", A::of_float(0.1f)}, {"beta", A::of_float(0.75f)}, {"bias", A::of_float(1.f)}}),
      {{1, 5, 2, 2}});
  add("concat", make_node("Concat", {{"axis", A::of_int(1)}}), {{2, 2, 3}, {2, 3, 3}});
  add("transpose", make_node("Transpose", {{"perm", A::of_ints({2, 0, 1})}}), {{2, 3, 4}});
  add("flatten", make_node("Flatten", {{"axis", A::of_int(1)}}), {{2, 3, 2}});
  {
    OpCase c;
    c.label = "batchnorm";
    c.node = make_node("BatchNormalization");
    c.inputs = {random_tensor({2, 3, 2, 2}, 7, -1, 1), random_tensor({3}, 8, 0.5f, 1.5f), random_tensor({3}, 9),
                random_tensor({3}, 10), random_tensor({3}, 11, 0.5f, 1.5f)};
    c.is_const = {false, true, true, true, true};
    v.push_back(c);
  }
  for (const char* mode : {"constant", "reflect", "edge"}) {
    OpCase c;
    c.label = std::string("pad_") + mode;
    c.node = make_node("Pad", {{"mode", A::of_string(mode)}});
    c.inputs = {random_tensor({1, 2, 3, 4}, 12, -1, 1), Tensor::from_i64({8}, {0, 0, 1, 2, 0, 0, 2, 1})};
    c.is_const = {false, true};
    v.push_back(c);
  }
  return v;
}

/// Every case's backward on naive against finite differences (one test: a failure names the
/// case).
TEST(NaiveBackward, EveryCaseMatchesFiniteDifferences) {
  for (const OpCase& c : backward_cases()) {
    SCOPED_TRACE(c.label);
    GradcheckReport r = check_op(c, builtin_registry());
    EXPECT_TRUE(r.passed()) << c.label << ": " << failures(r);
    int checked = 0;
    for (const auto& t : r.tensors) checked += t.checked;
    EXPECT_GT(checked, 0) << c.label << ": nothing was checked";
  }
}

/// The same cases on the optimised backends: every case a backend runs forward must have a
/// backward there (only cases it declines outright, like oneDNN's reflect padding, skip).
class OptimisedBackward : public ::testing::TestWithParam<std::string> {};

TEST_P(OptimisedBackward, EveryCaseMatchesFiniteDifferences) {
  const std::string& backend = GetParam();
  int checked = 0;
  for (const OpCase& c : backward_cases()) {
    SCOPED_TRACE(c.label + " on " + backend);
    PlanOptions po;
    po.training = true;
    po.input_grads = true;
    Graph g = prepared(c);
    if (!Plan::build(g, Placement::all_on(backend, {}), builtin_registry(), po).ok()) {
      // Only a case the backend declines outright may lack a backward.
      EXPECT_FALSE(Plan::build(g, Placement::all_on(backend, {}), builtin_registry(), PlanOptions{}).ok())
          << backend << " runs " << c.label << " forward but has no backward for it";
      continue;
    }
    GradcheckReport r = check_op(c, builtin_registry(), 2e-2, backend);
    EXPECT_TRUE(r.passed()) << c.label << " on " << backend << ": " << failures(r);
    ++checked;
  }
  EXPECT_GT(checked, 30) << backend << " ran too few cases";
}

INSTANTIATE_TEST_SUITE_P(Ops, OptimisedBackward, ::testing::ValuesIn(training_backends(false)),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

/// An empty graph named `source` with one float input "x" of shape `dims`.
Graph graph_with_input(const std::string& source, std::vector<int64_t> dims) {
  Graph g;
  g.source = source;
  ValueInfo in;
  in.name = "x";
  in.dims = std::move(dims);
  in.has_shape = true;
  g.inputs.push_back(in);
  return g;
}

TEST(Autodiff, AccumulatesWhereAValueFeedsSeveralNodes) {
  // y = x * x + x: x is used three times (twice by one node), dy/dx = 2x + 1.
  Graph g = graph_with_input("accumulate", {5});
  Node mul = make_node("Mul"), add = make_node("Add");
  mul.inputs = {"x", "x"};
  mul.outputs = {"m"};
  add.inputs = {"m", "x"};
  add.outputs = {"y"};
  g.nodes = {mul, add};
  g.outputs.push_back({"y", DType::kF32, {}, {}, false});
  ASSERT_TRUE(prepare_graph(g, builtin_registry(), {}).ok());
  for (const std::string& backend : builtin_registry().available_backends()) {
    PlanOptions po;
    po.training = true;
    po.input_grads = true;
    auto plan = Plan::build(g, Placement::all_on(backend, {"naive"}), builtin_registry(), po);
    ASSERT_TRUE(plan.ok()) << plan.status().to_string();
    Tensor x = Tensor::from_f32({5}, {-2, -0.5f, 0, 1, 3});
    ASSERT_TRUE(plan.value()->run({x}, nullptr).is_ok());
    ASSERT_TRUE(plan.value()->backward({Tensor::from_f32({5}, {1, 1, 1, 1, 1})}).is_ok());
    const Tensor* dx = plan.value()->input_grad(0);
    ASSERT_NE(dx, nullptr);
    for (int i = 0; i < 5; ++i) EXPECT_FLOAT_EQ(dx->f32()[i], 2 * x.f32()[i] + 1) << backend << " element " << i;
    // A second backward gives the same gradient (buffers are reset, not accumulated across calls).
    ASSERT_TRUE(plan.value()->backward({Tensor::from_f32({5}, {1, 1, 1, 1, 1})}).is_ok());
    EXPECT_FLOAT_EQ(plan.value()->input_grad(0)->f32()[4], 7.f) << backend;
  }
}

TEST(Autodiff, PooledIntermediateGradientsAreResetPerBackward) {
  // h1 = x w1, h2 = h1^2 + h1, h3 = h2 w2, y = h3^2 + h3 (elementwise): h1 and h3 feed three
  // input slots, so their gradients accumulate; all intermediate gradients share buffers.
  Graph g = graph_with_input("pooled", {5});
  g.initializers["w1"] = Tensor::from_f32({5}, {0.5f, -1, 2, 0.25f, 1.5f});
  g.initializers["w2"] = Tensor::from_f32({5}, {1, 0.5f, -0.5f, 2, -1});
  auto node = [](const std::string& op, std::vector<std::string> ins, const std::string& out) {
    Node n = make_node(op);
    n.inputs = std::move(ins);
    n.outputs = {out};
    return n;
  };
  g.nodes = {node("Mul", {"x", "w1"}, "h1"), node("Mul", {"h1", "h1"}, "s1"), node("Add", {"s1", "h1"}, "h2"),
             node("Mul", {"h2", "w2"}, "h3"), node("Mul", {"h3", "h3"}, "s3"), node("Add", {"s3", "h3"}, "y")};
  g.outputs.push_back({"y", DType::kF32, {}, {}, false});
  ASSERT_TRUE(prepare_graph(g, builtin_registry(), {}).ok());
  const Tensor x = Tensor::from_f32({5}, {1, -2, 0.5f, 3, -0.75f});
  for (const std::string& backend : builtin_registry().available_backends()) {
    PlanOptions po;
    po.training = true;
    auto plan = Plan::build(g, Placement::all_on(backend, {"naive"}), builtin_registry(), po);
    ASSERT_TRUE(plan.ok()) << plan.status().to_string();
    Plan& P = *plan.value();
    // Intermediate gradients (h1, s1, h2, h3, s3) live at different times and share buffers.
    std::set<const void*> buffers;
    int pooled = 0;
    for (const auto& v : P.values())
      if (v.grad_pooled) ++pooled, buffers.insert(v.grad.data());
    EXPECT_EQ(pooled, 5) << backend;
    EXPECT_LT(buffers.size(), 5u) << backend;
    // Pass 2 computes the parameter gradients into memory the plan does not own (as the
    // shared-memory all-reduce has them: tensors in a window other processes map).
    auto outside = std::make_shared<std::vector<float>>(32, -7.f);
    for (int pass = 0; pass < 3; ++pass) {
      if (pass == 2) {
        const auto before = P.parameters();
        EXPECT_FALSE(P.bind_parameter_grads({before[0].grad}).is_ok()) << "one gradient for two parameters";
        auto small = std::make_shared<Buffer>(outside->data(), 4 * sizeof(float), outside, nullptr);
        const Status wrong = P.bind_parameter_grads({Tensor::on_buffer(before[0].grad.desc(), small), before[1].grad});
        EXPECT_NE(wrong.to_string().find("the gradient of 'w1' needs 20 bytes"), std::string::npos) << wrong.to_string();
        std::vector<Tensor> grads;
        for (size_t k = 0; k < 2; ++k)
          grads.push_back(Tensor::on_buffer(before[k].grad.desc(),
                                            std::make_shared<Buffer>(outside->data() + 16 * k, 5 * sizeof(float), outside,
                                                                     nullptr)));
        ASSERT_TRUE(P.bind_parameter_grads(grads).is_ok());
        EXPECT_EQ(P.parameters()[1].grad.data(), outside->data() + 16) << backend;
      }
      ASSERT_TRUE(P.run({x}, nullptr).is_ok());
      ASSERT_TRUE(P.backward({Tensor::from_f32({5}, {1, 1, 1, 1, 1})}).is_ok());
      const auto params = P.parameters();  // sorted by name: w1, w2
      ASSERT_EQ(params.size(), 2u);
      for (int i = 0; i < 5; ++i) {
        const double w1 = g.initializers["w1"].f32()[i], w2 = g.initializers["w2"].f32()[i], xi = x.f32()[i];
        const double h1 = xi * w1, h2 = h1 * h1 + h1, h3 = h2 * w2;
        const double dh3 = 2 * h3 + 1, dh2 = dh3 * w2, dh1 = dh2 * (2 * h1 + 1);
        EXPECT_NEAR(params[1].grad.f32()[i], dh3 * h2, 1e-4 * std::fabs(dh3 * h2) + 1e-5) << backend << " dw2 " << i;
        EXPECT_NEAR(params[0].grad.f32()[i], dh1 * xi, 1e-4 * std::fabs(dh1 * xi) + 1e-5) << backend << " dw1 " << i;
      }
    }
  }
}

TEST(TrainingMemory, KeepsOnlyWhatBackwardReads) {
  // x -> Conv -> Relu -> Conv -> y -> Flatten. Conv backward reads its input and weights, Relu its
  // output: the first Conv's output is dead once Relu ran, and the second Conv's output
  // reuses its buffer. Gradients stay right (gradcheck), which they would not if a kept
  // tensor had been overwritten.
  Graph g = graph_with_input("keeps", {2, 3, 5, 5});
  g.initializers["w1"] = random_tensor({3, 3, 3, 3}, 41, -0.5f, 0.5f);
  g.initializers["w2"] = random_tensor({3, 3, 3, 3}, 42, -0.5f, 0.5f);
  auto conv = [](const std::string& x, const std::string& w, const std::string& y) {
    Node n = make_node("Conv", {{"kernel_shape", A::of_ints({3, 3})}, {"pads", A::of_ints({1, 1, 1, 1})}});
    n.inputs = {x, w};
    n.outputs = {y};
    return n;
  };
  Node relu = make_node("Relu");
  relu.inputs = {"c1"};
  relu.outputs = {"r1"};
  Node flatten = make_node("Flatten");  // gradcheck wants an [N, C] output
  flatten.inputs = {"y"};
  flatten.outputs = {"out"};
  g.nodes = {conv("x", "w1", "c1"), relu, conv("r1", "w2", "y"), flatten};
  g.outputs.push_back({"out", DType::kF32, {}, {}, false});
  ASSERT_TRUE(prepare_graph(g, builtin_registry(), {}).ok());
  for (const std::string& backend : builtin_registry().available_backends()) {
    PlanOptions po;
    po.training = true;
    auto plan = Plan::build(g, Placement::all_on(backend, {}), builtin_registry(), po);
    ASSERT_TRUE(plan.ok()) << plan.status().to_string();
    std::map<std::string, int> storage;
    for (const auto& v : plan.value()->values()) storage[v.name] = v.storage;
    EXPECT_EQ(storage.at("c1"), storage.at("y")) << backend << ": the dead Conv output's buffer is reused";
    EXPECT_NE(storage.at("r1"), storage.at("y")) << backend << ": Relu's output is kept for backward";
    EXPECT_NE(storage.at("x"), storage.at("y")) << backend;
    GradcheckOptions o;
    o.directions = 2;
    o.elements = 3;
    auto r = gradcheck(g, builtin_registry(), Placement::all_on(backend, {}), o);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_TRUE(r->passed()) << backend << ": " << failures(r.value());
  }
}

TEST(BatchNormTraining, BatchStatisticsAndRunningAverages) {
  // One channel, values 1 and 3: batch mean 2, biased variance 1 (unbiased 2).
  OpCase c;
  c.label = "bn_train";
  c.node = make_node("BatchNormalization", {{"epsilon", A::of_float(0.f)}, {"momentum", A::of_float(0.9f)}});
  c.inputs = {Tensor::from_f32({2, 1, 1, 1}, {1, 3}), Tensor::from_f32({1}, {2}), Tensor::from_f32({1}, {0.5f}),
              Tensor::from_f32({1}, {0}), Tensor::from_f32({1}, {1})};
  c.is_const = {false, true, true, true, true};
  Graph g = prepared(c);
  PlanOptions po;
  po.training = true;
  for (const std::string& backend : builtin_registry().available_backends()) {
    auto plan = Plan::build(g, Placement::all_on(backend, {}), builtin_registry(), po);
    ASSERT_TRUE(plan.ok()) << backend << ": " << plan.status().to_string();
    EXPECT_EQ(plan.value()->steps()[0].backend, backend);
    ASSERT_TRUE(plan.value()->run({Tensor::from_f32({2, 1, 1, 1}, {1, 3})}, nullptr).is_ok());
    const Tensor& y = plan.value()->output(0);
    EXPECT_NEAR(y.f32()[0], 2 * -1 + 0.5f, 1e-6) << backend;
    EXPECT_NEAR(y.f32()[1], 2 * 1 + 0.5f, 1e-6) << backend;
    int seen = 0;
    for (const auto& v : plan.value()->values()) {
      if (v.name == "x3") {
        EXPECT_NEAR(v.tensor.f32()[0], 0.2f, 1e-6) << backend << ": running mean 0.9 * 0 + 0.1 * 2";
        ++seen;
      }
      if (v.name == "x4") {
        EXPECT_NEAR(v.tensor.f32()[0], 1.1f, 1e-6) << backend << ": running var 0.9 * 1 + 0.1 * 2";
        ++seen;
      }
    }
    EXPECT_EQ(seen, 2);
    // Only scale and bias are parameters; the statistics are not trained.
    std::vector<std::string> names;
    for (const auto& p : plan.value()->parameters()) names.push_back(p.name);
    EXPECT_EQ(names, (std::vector<std::string>{"x1", "x2"})) << backend;
  }
}

// ---- planted bugs ------------------------------------------------------------------------

/// Relu whose backward has the wrong sign.
class WrongSignRelu final : public Kernel {
 public:
  Status init(const KernelContext&) { return Status::ok(); }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    for (int64_t i = 0; i < src[0]->numel(); ++i) dst[0]->f32()[i] = std::max(src[0]->f32()[i], 0.f);
    return Status::ok();
  }
  bool has_backward() const override { return true; }
  Status backward(const BackwardArgs& a) override {
    for (int64_t i = 0; i < a.src[0]->numel(); ++i)
      a.diff_src[0]->f32()[i] = a.src[0]->f32()[i] > 0 ? -a.diff_dst[0]->f32()[i] : 0.f;
    return Status::ok();
  }
};

/// Gemm (transB, no scaling) whose backward forgets the bias term.
class MissingBiasGemm final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    m_ = ctx.inputs[0].shape[0];
    k_ = ctx.inputs[0].shape[1];
    n_ = ctx.inputs[1].shape[0];
    return ctx.node->attr_int("transB", 0) ? Status::ok() : Status::unsupported("test kernel needs transB");
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    for (int64_t i = 0; i < m_; ++i)
      for (int64_t j = 0; j < n_; ++j) {
        float acc = src[2]->f32()[j];
        for (int64_t k = 0; k < k_; ++k) acc += src[0]->f32()[i * k_ + k] * src[1]->f32()[j * k_ + k];
        dst[0]->f32()[i * n_ + j] = acc;
      }
    return Status::ok();
  }
  bool has_backward() const override { return true; }
  Status backward(const BackwardArgs& a) override {
    const float* dy = a.diff_dst[0]->f32();
    for (int i = 0; i < 3; ++i)
      if (a.diff_src[i]) std::fill(a.diff_src[i]->f32(), a.diff_src[i]->f32() + a.diff_src[i]->numel(), 0.f);
    for (int64_t i = 0; i < m_; ++i)
      for (int64_t j = 0; j < n_; ++j)
        for (int64_t k = 0; k < k_; ++k) {
          if (a.diff_src[0]) a.diff_src[0]->f32()[i * k_ + k] += dy[i * n_ + j] * a.src[1]->f32()[j * k_ + k];
          if (a.diff_src[1]) a.diff_src[1]->f32()[j * k_ + k] += dy[i * n_ + j] * a.src[0]->f32()[i * k_ + k];
        }
    return Status::ok();  // the bias gradient stays zero: the planted bug
  }

 private:
  int64_t m_ = 0, k_ = 0, n_ = 0;
};

TEST(Gradcheck, WholeNetworkPassesOnNaive) {
  Graph g = build_zoo_model("fmnist-cnn", 3).value();
  PrepareOptions po;
  po.batch = 2;
  ASSERT_TRUE(prepare_graph(g, builtin_registry(), po).ok());
  GradcheckOptions o;
  o.directions = 2;
  o.elements = 2;
  auto r = gradcheck(g, builtin_registry(), Placement::all_on("naive", {}), o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(r->passed()) << failures(r.value());
  EXPECT_EQ(r->tensors.size(), 9u) << "8 parameters and the input";
}

class WholeNetwork : public ::testing::TestWithParam<std::string> {};

TEST_P(WholeNetwork, GradcheckPasses) {
  const std::string backend = GetParam();
  Graph g = build_zoo_model("fmnist-cnn", 4).value();
  PrepareOptions po;
  po.batch = 3;
  ASSERT_TRUE(prepare_graph(g, builtin_registry(), po).ok());
  PlanOptions train;
  train.training = true;
  auto plan = Plan::build(g, Placement::all_on(backend, {}), builtin_registry(), train);
  ASSERT_TRUE(plan.ok()) << "every fmnist-cnn node trains on " << backend << ": " << plan.status().to_string();
  GradcheckOptions o;
  o.directions = 2;
  o.elements = 2;
  auto r = gradcheck(g, builtin_registry(), Placement::all_on(backend, {}), o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(r->passed()) << failures(r.value());
}

// Every backend but the naive oracle (WholeNetworkPassesOnNaive checks that one alone).
INSTANTIATE_TEST_SUITE_P(Backends, WholeNetwork, ::testing::ValuesIn(training_backends(false)), backend_param_name);

/// Gradchecks fmnist-cnn on naive with `op`'s kernel replaced by a planted bug.
Expected<GradcheckReport> with_planted_bug(const std::string& op, KernelFactory buggy) {
  KernelRegistry reg;
  MOSAIC_RETURN_IF_ERROR(register_backend(reg, register_naive));
  MOSAIC_RETURN_IF_ERROR(reg.replace("naive", op, std::move(buggy)));
  Graph g = build_zoo_model("fmnist-cnn", 3).value();
  PrepareOptions po;
  po.batch = 2;
  MOSAIC_RETURN_IF_ERROR(prepare_graph(g, reg, po).status());
  return gradcheck(g, reg, Placement::all_on("naive", {}), GradcheckOptions{});
}

TEST(Gradcheck, CatchesWrongSignBackward) {
  auto r = with_planted_bug("Relu", make_factory<WrongSignRelu>());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_FALSE(r->passed());
  // fc2 is after the last ReLU: its gradients are still right; everything before is wrong.
  for (const auto& t : r->tensors) {
    if (t.name.rfind("fc2", 0) == 0) {
      EXPECT_TRUE(t.passed()) << t.name;
    }
    if (t.name == "conv1.weight" || t.name == "fc1.bias") {
      EXPECT_FALSE(t.passed()) << t.name;
    }
  }
}

TEST(Gradcheck, CatchesMissingTerm) {
  auto r = with_planted_bug("Gemm", make_factory<MissingBiasGemm>());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  for (const auto& t : r->tensors) {
    if (t.name == "fc1.bias" || t.name == "fc2.bias") {
      EXPECT_FALSE(t.passed()) << t.name;
    }
    if (t.name == "fc2.weight" || t.name == "conv1.weight") {
      EXPECT_TRUE(t.passed()) << t.name;
    }
  }
}

// ---- losses and optimizers ---------------------------------------------------------------

TEST(Loss, CrossEntropyByHand) {
  Tensor logits = Tensor::from_f32({2, 3}, {1, 2, 3, 0, 0, 0});
  Tensor labels = Tensor::from_i64({2}, {2, 0});
  Tensor d = Tensor::empty({DType::kF32, {2, 3}});
  auto l = softmax_cross_entropy(logits, labels, &d);
  ASSERT_TRUE(l.ok());
  // Row 1: -log softmax(3) = 0.4076059; row 2: log 3 = 1.0986123.
  EXPECT_NEAR(l->loss, (0.4076059 + 1.0986123) / 2, 1e-6);
  EXPECT_EQ(l->correct, 2) << "row 2 ties; the first maximum (index 0) is the label";
  EXPECT_NEAR(d.f32()[2], (0.6652410 - 1) / 2, 1e-6);
  EXPECT_NEAR(d.f32()[3], (1.0 / 3 - 1) / 2, 1e-6);
  EXPECT_FALSE(softmax_cross_entropy(logits, Tensor::from_i64({2}, {3, 0}), nullptr).ok()) << "label out of range";
}

TEST(Loss, TokenCrossEntropyIgnoresPaddedPositions) {
  // [N = 1, T = 3, V = 3]: the same two rows as above plus an ignored one; the mean is over
  // the two counted rows, the ignored row's gradient is zero.
  Tensor logits = Tensor::from_f32({1, 3, 3}, {1, 2, 3, 9, -9, 4, 0, 0, 0});
  Tensor labels = Tensor::from_i64({1, 3}, {2, kIgnoreIndex, 0});
  Tensor d = Tensor::empty({DType::kF32, {1, 3, 3}});
  auto l = softmax_cross_entropy(logits, labels, &d);
  ASSERT_TRUE(l.ok()) << l.status().message();
  EXPECT_NEAR(l->loss, (0.4076059 + 1.0986123) / 2, 1e-6);
  EXPECT_EQ(l->counted, 2);
  EXPECT_EQ(l->correct, 2);
  for (int j = 3; j < 6; ++j) EXPECT_EQ(d.f32()[j], 0.f);
  EXPECT_NEAR(d.f32()[6], (1.0 / 3 - 1) / 2, 1e-6);
  // A label shape that does not match the rows, and an out-of-range label, name the problem.
  auto bad = softmax_cross_entropy(logits, Tensor::from_i64({2}, {0, 0}), nullptr);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("2 labels for 3 rows"), std::string::npos) << bad.status().message();
  bad = softmax_cross_entropy(logits, Tensor::from_i64({1, 3}, {0, 7, 0}), nullptr);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("label 7 (element 1)"), std::string::npos) << bad.status().message();
}

TEST(Loss, MseAgainstOneHotByHandAndByFiniteDifferences) {
  // [N = 1, T = 3, C = 3] with the middle row ignored: row 1 (1, 2, 3) against (0, 0, 1)
  // gives 1 + 4 + 4, row 3 (0, 0, 0) against (1, 0, 0) gives 1: mean over 2 rows x 3 = 10 / 6.
  Tensor logits = Tensor::from_f32({1, 3, 3}, {1, 2, 3, 9, -9, 4, 0, 0, 0});
  Tensor labels = Tensor::from_i64({1, 3}, {2, kIgnoreIndex, 0});
  Tensor d = Tensor::empty({DType::kF32, {1, 3, 3}});
  auto l = mse_one_hot(logits, labels, &d);
  ASSERT_TRUE(l.ok()) << l.status().message();
  EXPECT_NEAR(l->loss, 10.0 / 6, 1e-6);
  EXPECT_EQ(l->counted, 2);
  EXPECT_EQ(l->correct, 2);
  const float want[9] = {2.f / 6, 4.f / 6, 4.f / 6, 0, 0, 0, -2.f / 6, 0, 0};
  for (int j = 0; j < 9; ++j) EXPECT_NEAR(d.f32()[j], want[j], 1e-7) << j;
  for (int j : {0, 2, 6, 7}) {  // central differences of the loss
    Tensor p = logits.clone(), m = logits.clone();
    p.f32()[j] += 1e-2f;
    m.f32()[j] -= 1e-2f;
    const double fd = (mse_one_hot(p, labels, nullptr)->loss - mse_one_hot(m, labels, nullptr)->loss) / 2e-2;
    EXPECT_NEAR(fd, d.f32()[j], 1e-5) << j;
  }
  EXPECT_NEAR(class_loss("mse", logits, labels, nullptr)->loss, 10.0 / 6, 1e-6);
  EXPECT_NEAR(class_loss("cross-entropy", logits, labels, nullptr)->loss, (0.4076059 + 1.0986123) / 2, 1e-6);
  auto bad = class_loss("hinge", logits, labels, nullptr);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--loss"), std::string::npos);
  bad = mse_one_hot(logits, Tensor::from_i64({1, 3}, {0, 7, 0}), nullptr);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("mse: label 7 (element 1)"), std::string::npos) << bad.status().message();
}

/// Runs `steps` updates of one scalar parameter with the given gradients.
std::vector<double> trajectory(const std::string& name, OptimizerConfig c, float p0, const std::vector<float>& grads) {
  auto opt = make_optimizer(name, c);
  EXPECT_TRUE(opt.ok());
  std::vector<ParamRef> params{{"p", Tensor::from_f32({1}, {p0}), Tensor::from_f32({1}, {0})}};
  std::vector<double> out;
  for (float g : grads) {
    params[0].grad.f32()[0] = g;
    EXPECT_TRUE(opt.value()->step(params).is_ok());
    out.push_back(params[0].value.f32()[0]);
  }
  return out;
}

TEST(Optimizers, MatchPyTorchStepsByHand) {
  OptimizerConfig c;
  c.lr = 0.1;
  // SGD with weight decay 0.5: g' = g + 0.5 p.
  c.weight_decay = 0.5;
  auto sgd = trajectory("sgd", c, 1.f, {1.f});
  EXPECT_NEAR(sgd[0], 1 - 0.1 * 1.5, 1e-6);
  c.weight_decay = 0;
  // Momentum 0.9: b1 = g1; b2 = 0.9 b1 + g2.
  c.momentum = 0.9;
  auto mom = trajectory("sgd", c, 1.f, {1.f, 2.f});
  EXPECT_NEAR(mom[0], 0.9, 1e-6);
  EXPECT_NEAR(mom[1], 0.9 - 0.1 * 2.9, 1e-6);
  // Nesterov: update g + 0.9 b.
  auto nest = trajectory("nesterov", c, 1.f, {1.f, 2.f});
  EXPECT_NEAR(nest[0], 1 - 0.1 * 1.9, 1e-6);
  EXPECT_NEAR(nest[1], nest[0] - 0.1 * (2 + 0.9 * 2.9), 1e-6);
  c.momentum = 0;
  // Adam, first step: m_hat = g, v_hat = g^2 -> p -= lr * g / (|g| + eps).
  auto adam = trajectory("adam", c, 1.f, {2.f, -1.f});
  EXPECT_NEAR(adam[0], 1 - 0.1 * 2 / (2 + 1e-8), 1e-6);
  {  // second step by hand
    const double m = 0.9 * 0.1 * 2 + 0.1 * -1, v = 0.999 * 0.001 * 4 + 0.001 * 1;
    const double mh = m / (1 - 0.81), vh = v / (1 - 0.999 * 0.999);
    EXPECT_NEAR(adam[1], adam[0] - 0.1 * mh / (std::sqrt(vh) + 1e-8), 1e-6);
  }
  // AdamW decays the weight before the Adam step: p = p (1 - lr wd).
  c.weight_decay = 0.5;
  auto adamw = trajectory("adamw", c, 1.f, {2.f});
  EXPECT_NEAR(adamw[0], 1 * (1 - 0.05) - 0.1 * 2 / (2 + 1e-8), 1e-6);
  c.weight_decay = 0;
  // RMSprop: v = 0.01 g^2; p -= lr g / (sqrt(v) + eps) = lr * 10 sign(g).
  auto rms = trajectory("rmsprop", c, 1.f, {3.f});
  EXPECT_NEAR(rms[0], 1 - 0.1 * 3 / (std::sqrt(0.09) + 1e-8), 1e-5);
  // Adagrad: s = g^2; p -= lr g / (sqrt(s) + 1e-10).
  auto ada = trajectory("adagrad", c, 1.f, {4.f, 3.f});
  EXPECT_NEAR(ada[0], 0.9, 1e-6);
  EXPECT_NEAR(ada[1], 0.9 - 0.1 * 3 / 5, 1e-6);
  EXPECT_FALSE(make_optimizer("sgdd", c).ok());
}

TEST(Schedules, StepAndCosineByHand) {
  auto step = make_schedule("step:2:0.5", 10);
  ASSERT_TRUE(step.ok());
  EXPECT_DOUBLE_EQ(step.value()->lr(0.1, 0), 0.1);
  EXPECT_DOUBLE_EQ(step.value()->lr(0.1, 1), 0.1);
  EXPECT_DOUBLE_EQ(step.value()->lr(0.1, 2), 0.05);
  EXPECT_DOUBLE_EQ(step.value()->lr(0.1, 5), 0.025);
  auto cosine = make_schedule("cosine", 4);
  ASSERT_TRUE(cosine.ok());
  EXPECT_DOUBLE_EQ(cosine.value()->lr(0.1, 0), 0.1);
  EXPECT_NEAR(cosine.value()->lr(0.1, 2), 0.05, 1e-12);
  EXPECT_NEAR(cosine.value()->lr(0.1, 4), 0.0, 1e-12);
  for (const char* bad : {"step:0:0.5", "step:2", "linear", "step:2:x"}) EXPECT_FALSE(make_schedule(bad, 3).ok()) << bad;
}

// ---- datasets --------------------------------------------------------------------------

void write_gz(const std::string& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(f);
}

std::string be(uint32_t v) {
  return std::string{static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8), static_cast<char>(v)};
}

TEST(Datasets, IdxGzAndErrors) {
  const auto dir = std::filesystem::temp_directory_path() / ("mosaic_idx_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::string img = be(0x803) + be(2) + be(2) + be(3);
  for (int i = 0; i < 12; ++i) img.push_back(static_cast<char>(i * 20));
  std::string lab = be(0x801) + be(2) + std::string{3, 7};
  write_gz((dir / "train-images-idx3-ubyte.gz").string(), img);
  write_gz((dir / "train-labels-idx1-ubyte.gz").string(), lab);
  write_gz((dir / "t10k-images-idx3-ubyte.gz").string(), img);
  write_gz((dir / "t10k-labels-idx1-ubyte.gz").string(), lab);
  auto d = load_data("idx:" + dir.string(), 0);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->train.images.shape(), (Shape{2, 1, 2, 3}));
  EXPECT_FLOAT_EQ(d->train.images.f32()[11], 220.f / 255.f);
  EXPECT_EQ(d->train.labels.i64()[1], 7);
  EXPECT_EQ(d->train.classes, 8);
  // Truncated images and bad magic name the file.
  write_gz((dir / "train-images-idx3-ubyte.gz").string(), img.substr(0, img.size() - 1));
  auto bad = load_data("idx:" + dir.string(), 0);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("train-images-idx3-ubyte.gz: truncated"), std::string::npos) << bad.status().message();
  write_gz((dir / "train-images-idx3-ubyte.gz").string(), be(0x801) + img.substr(4));
  bad = load_data("idx:" + dir.string(), 0);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("not an IDX image file"), std::string::npos);
  // A header whose counts multiply past 2^64 (2^32-1 cubed) is refused before any arithmetic.
  write_gz((dir / "train-images-idx3-ubyte.gz").string(), be(0x803) + be(0xffffffff) + be(0xffffffff) + be(0xffffffff));
  bad = load_data("idx:" + dir.string(), 0);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("IDX header: shape [4294967295,1,4294967295,4294967295]"), std::string::npos)
      << bad.status().message();
  EXPECT_FALSE(load_data("idx:/nonexistent/dir", 0).ok());
  EXPECT_FALSE(load_data("cifar-1000", 0).ok());
  std::filesystem::remove_all(dir);
}

TEST(Datasets, CifarBinary) {
  const auto dir = std::filesystem::temp_directory_path() / ("mosaic_cifar_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto record = [](int label, int fill) {
    std::string r(1, static_cast<char>(label));
    r += std::string(3072, static_cast<char>(fill));
    return r;
  };
  for (int k = 1; k <= 5; ++k) {
    std::ofstream f(dir / ("data_batch_" + std::to_string(k) + ".bin"), std::ios::binary);
    f << record(k, 51) << record(9, 255);
  }
  {
    std::ofstream f(dir / "test_batch.bin", std::ios::binary);
    f << record(3, 0);
  }
  auto d = load_data("cifar10:" + dir.string(), 0);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->train.images.shape(), (Shape{10, 3, 32, 32}));
  EXPECT_EQ(d->train.labels.i64()[2], 2);
  EXPECT_FLOAT_EQ(d->train.images.f32()[5], 0.2f);
  EXPECT_EQ(d->test.size(), 1);
  {
    std::ofstream f(dir / "test_batch.bin", std::ios::binary);
    f << record(3, 0).substr(0, 100);
  }
  auto bad = load_data("cifar10:" + dir.string(), 0);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("test_batch.bin"), std::string::npos) << bad.status().message();
  std::filesystem::remove_all(dir);
}

TEST(Datasets, SeededShuffleIsAPermutation) {
  auto d = load_data("synthetic:60,1,2,2,3", 5);
  ASSERT_TRUE(d.ok());
  BatchIterator a(d->train, 10, true, 9), b(d->train, 10, true, 9);
  a.start_epoch();
  b.start_epoch();
  Tensor ia = Tensor::empty({DType::kF32, {10, 1, 2, 2}}), ib = ia.clone();
  Tensor la = Tensor::empty({DType::kI64, {10}}), lb = la.clone();
  EXPECT_EQ(a.batches_per_epoch(), 5);
  std::multiset<float> seen;
  for (int64_t k = 0; k < a.batches_per_epoch(); ++k) {
    a.fill(k, ia, la);
    b.fill(k, ib, lb);
    for (int64_t i = 0; i < 40; ++i) ASSERT_EQ(ia.f32()[i], ib.f32()[i]) << "same seed, same order";
    for (int64_t i = 0; i < 10; ++i) seen.insert(ia.f32()[i * 4]);
  }
  std::multiset<float> all;
  for (int64_t i = 0; i < 50; ++i) all.insert(d->train.images.f32()[i * 4]);
  EXPECT_EQ(seen, all) << "every image exactly once";
}

}  // namespace
}  // namespace mosaic::test

namespace mosaic::test {
namespace {

TEST(MaxPoolBackward, NearTiesGoToTheFirstAsInExactArithmetic) {
  // One 1x4 plane, window 1x2 stride 2 (two windows) and a 2x2 window over a 2x2 plane.
  Window w;
  w.in = {1, 4};
  w.out = {1, 2};
  w.kernel = {1, 2};
  w.stride = {1, 2};
  w.dilation = {1, 1};
  w.pad_begin = w.pad_end = {0, 0};
  const float one_up = std::nextafter(std::nextafter(1.f, 2.f), 2.f);  // 2 ulp above 1
  const float x[4] = {1.f, one_up, 0.5f, 0.5001f};
  const float dy[2] = {3.f, 7.f};
  float dx[4];
  max_pool_backward(x, dy, dx, 1, w);
  // Window 1: 2 ulp apart is a tie (rounding), the first takes it. Window 2: a real maximum.
  EXPECT_EQ(dx[0], 3.f);
  EXPECT_EQ(dx[1], 0.f);
  EXPECT_EQ(dx[2], 0.f);
  EXPECT_EQ(dx[3], 7.f);
  // With no tolerance the strict maximum wins.
  max_pool_backward(x, dy, dx, 1, w, 0.f);
  EXPECT_EQ(dx[0], 0.f);
  EXPECT_EQ(dx[1], 3.f);
  // Padding: windows that overlap the border only see real elements; negative values.
  Window p = w;
  p.in = {2, 2};
  p.out = {2, 2};
  p.kernel = {2, 2};
  p.stride = {1, 1};
  p.pad_begin = {1, 1};
  const float xn[4] = {-4.f, -1.f, -2.f, -3.f};
  const float g[4] = {1.f, 2.f, 4.f, 8.f};
  float dn[4];
  max_pool_backward(xn, g, dn, 1, p);
  // Windows (top-left corners at -1,-1 / -1,0 / 0,-1 / 0,0) hold {-4}, {-4,-1}, {-4,-2}, all.
  EXPECT_EQ(dn[0], 1.f);
  EXPECT_EQ(dn[1], 2.f + 8.f);
  EXPECT_EQ(dn[2], 4.f);
  EXPECT_EQ(dn[3], 0.f);
  // 2x2 windows tiling a 2x6 plane (the vectorised path): a near-tie goes to the first in
  // window order, a real maximum in the lower row wins, a NaN never takes the gradient.
  Window t = w;
  t.in = {2, 6};
  t.out = {1, 3};
  t.kernel = {2, 2};
  t.stride = {2, 2};
  t.pad_begin = t.pad_end = {0, 0};
  const float nan = std::nanf("");
  const float xt[12] = {0.5f, 0.2f, -1.f, -3.f, nan, 1.f,  //
                        0.2f, 0.5f * one_up, -0.5f, -0.6f, 2.f, 0.f};
  const float gt[3] = {1.f, 2.f, 4.f};
  float dt[12];
  max_pool_backward(xt, gt, dt, 1, t);
  const float want[12] = {1.f, 0.f, 0.f, 0.f, 0.f, 0.f,  //
                          0.f, 0.f, 2.f, 0.f, 4.f, 0.f};
  for (int i = 0; i < 12; ++i) EXPECT_EQ(dt[i], want[i]) << "element " << i;
}

TEST(MaxPoolBackward, ChannelBlockedLanesMatchThePlainRule) {
  // [outer][spatial][lanes] (oneDNN's nChw16c) against the plain routine run on each lane's
  // plane: 2x2 tiles (the vectorised path), overlapping padded windows, 1-d, dilated 3-d.
  // Values come from a few levels, with near-ties 1 ulp apart, so ties are common.
  auto window = [](Shape in, Shape k, Shape s, Shape d, Shape pb, Shape pe) {
    Window w;
    w.in = in, w.kernel = k, w.stride = s, w.dilation = d, w.pad_begin = pb, w.pad_end = pe;
    for (size_t i = 0; i < in.size(); ++i) w.out.push_back((in[i] + pb[i] + pe[i] - (k[i] - 1) * d[i] - 1) / s[i] + 1);
    return w;
  };
  const std::vector<Window> windows = {
      window({6, 8}, {2, 2}, {2, 2}, {1, 1}, {0, 0}, {0, 0}),
      window({7, 5}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}),
      window({9}, {3}, {2}, {1}, {0}, {1}),
      window({3, 4, 5}, {2, 2, 2}, {1, 2, 1}, {2, 1, 2}, {0, 1, 0}, {0, 1, 1}),
  };
  for (const int lanes : {16, 8, 5}) {
    for (const Window& w : windows) {
      const int64_t outer = 3, in_sp = w.in_size(), out_sp = w.out_size();
      std::vector<float> x(outer * in_sp * lanes), dy(outer * out_sp * lanes), dx(x.size());
      uint64_t state = 7;
      auto next = [&]() { return (state = state * 6364136223846793005ull + 1442695040888963407ull) >> 33; };
      for (float& v : x) v = std::nextafter(static_cast<float>(next() % 4) * 0.25f, next() % 2 ? 2.f : -2.f);
      for (float& v : dy) v = static_cast<float>(next() % 100) / 10.f;
      max_pool_backward_lanes(x.data(), dy.data(), dx.data(), outer, lanes, w);
      for (int64_t c = 0; c < outer; ++c)
        for (int l = 0; l < lanes; ++l) {
          std::vector<float> px(in_sp), pdy(out_sp), pdx(in_sp);
          for (int64_t i = 0; i < in_sp; ++i) px[i] = x[(c * in_sp + i) * lanes + l];
          for (int64_t i = 0; i < out_sp; ++i) pdy[i] = dy[(c * out_sp + i) * lanes + l];
          max_pool_backward(px.data(), pdy.data(), pdx.data(), 1, w);
          for (int64_t i = 0; i < in_sp; ++i)
            ASSERT_EQ(dx[(c * in_sp + i) * lanes + l], pdx[i])
                << "lanes " << lanes << " rank " << w.rank() << " plane " << c << " lane " << l << " element " << i;
        }
    }
  }
}

/// x [2,3,9,9] -> Conv(20) -> Relu -> Pad(bottom/right 1, `pad_mode`) -> MaxPool 2x2 -> Conv(24) ->
/// Relu -> MaxPool 3x3/2 pad 1 -> Conv 1x1(16) -> Relu [-> MaxPool 2x2/1 if `pool_tail`] ->
/// Flatten: a CNN chain whose channel counts are not whole 16-channel blocks, ending in a Relu
/// or a pool that reads blocked and must write plain for Flatten.
Graph blocked_chain(const std::string& pad_mode, bool pool_tail) {
  Graph g = graph_with_input("chain_" + pad_mode, {2, 3, 9, 9});
  g.initializers["w1"] = random_tensor({20, 3, 3, 3}, 51, -0.5f, 0.5f);
  g.initializers["b1"] = random_tensor({20}, 52, -0.1f, 0.1f);
  g.initializers["w2"] = random_tensor({24, 20, 3, 3}, 53, -0.2f, 0.2f);
  g.initializers["w3"] = random_tensor({16, 24, 1, 1}, 54, -0.3f, 0.3f);
  std::vector<Node> nodes;
  auto add = [&](Node n, std::vector<std::string> in, std::string out) {
    n.name = out;
    n.inputs = std::move(in);
    n.outputs = {std::move(out)};
    nodes.push_back(std::move(n));
  };
  add(make_node("Conv", {{"kernel_shape", A::of_ints({3, 3})}, {"pads", A::of_ints({1, 1, 1, 1})}}), {"x", "w1", "b1"}, "c1");
  add(make_node("Relu"), {"c1"}, "r1");
  g.initializers["pads"] = Tensor::from_i64({8}, {0, 0, 0, 0, 0, 0, 1, 1});
  add(make_node("Pad", {{"mode", A::of_string(pad_mode)}}), {"r1", "pads"}, "p1");
  add(make_node("MaxPool", {{"kernel_shape", A::of_ints({2, 2})}, {"strides", A::of_ints({2, 2})}}), {"p1"}, "m1");
  add(make_node("Conv", {{"kernel_shape", A::of_ints({3, 3})}, {"pads", A::of_ints({1, 1, 1, 1})}}), {"m1", "w2"}, "c2");
  add(make_node("Relu"), {"c2"}, "r2");
  add(make_node("MaxPool", {{"kernel_shape", A::of_ints({3, 3})}, {"strides", A::of_ints({2, 2})},
                            {"pads", A::of_ints({1, 1, 1, 1})}}),
      {"r2"}, "m2");
  add(make_node("Conv", {{"kernel_shape", A::of_ints({1, 1})}}), {"m2", "w3"}, "c3");
  add(make_node("Relu"), {"c3"}, "r3");
  if (pool_tail) add(make_node("MaxPool", {{"kernel_shape", A::of_ints({2, 2})}}), {"r3"}, "m3");
  add(make_node("Flatten"), {pool_tail ? "m3" : "r3"}, "out");
  g.nodes = nodes;
  g.outputs.push_back({"out", DType::kF32, {}, {}, false});
  EXPECT_TRUE(prepare_graph(g, builtin_registry(), {}).ok());
  return g;
}

TEST(TrainingLayouts, OneDnnChainsStayBlockedAndMatchNaive) {
  // onednn training plans keep a CNN chain in oneDNN's blocked layouts, gradients included;
  // parameter and input gradients must equal naive's (plain loops) and pass gradcheck.
  // Where oneDNN cannot run the Pad, it falls back to naive, two ways: a reflect Pad, which
  // onednn's capability query declines before anything is built, so the Relu in front of
  // it writes plain; and a constant Pad whose kernel declines only when built (a test
  // registry's, standing for oneDNN's "no implementation for this configuration"), so the
  // Relu's output is blocked by then and a conversion goes in, whose backward turns the
  // plain gradient back into the layout.
  const Tensor x = random_tensor({2, 3, 9, 9}, 55);
  KernelRegistry declining = builtin_registry();
  ASSERT_TRUE(declining
                  .replace("onednn", "Pad",
                           [](const KernelContext& ctx) -> Expected<std::unique_ptr<Kernel>> {
                             return Status::unsupported(ctx.node->label() + ": declined when built (test)");
                           })
                  .is_ok());
  enum class Pad { kBlocked, kDeclinedByQuery, kDeclinedWhenBuilt };
  for (const auto& [pad, pool_tail] : std::vector<std::pair<Pad, bool>>{
           {Pad::kBlocked, true}, {Pad::kBlocked, false}, {Pad::kDeclinedByQuery, true}, {Pad::kDeclinedWhenBuilt, true}}) {
    const std::string mode = pad == Pad::kDeclinedByQuery ? "reflect" : "constant";
    const KernelRegistry& reg = pad == Pad::kDeclinedWhenBuilt ? declining : builtin_registry();
    SCOPED_TRACE(mode + (pad == Pad::kDeclinedWhenBuilt ? " declined when built" : "") +
                 (pool_tail ? ", pool tail" : ", relu tail"));
    Graph g = blocked_chain(mode, pool_tail);
    std::map<std::string, std::map<std::string, Tensor>> grads;
    for (const std::string backend : {"naive", "onednn"}) {
      PlanOptions po;
      po.training = true;
      po.input_grads = true;
      auto plan = Plan::build(g, Placement::all_on(backend, {"naive"}), reg, po);
      ASSERT_TRUE(plan.ok()) << plan.status().to_string();
      Plan& P = *plan.value();
      if (backend == "onednn") {
        std::map<std::string, bool> blocked;
        for (const auto& v : P.values()) blocked[v.name] = v.desc.layout != nullptr;
        for (const char* name : {"c1", "c2", "r2", "m2", "c3"})
          EXPECT_TRUE(blocked.at(name)) << name << " should stay blocked";
        EXPECT_EQ(blocked.at("r1"), pad != Pad::kDeclinedByQuery) << "the Relu writes plain for a Pad known to fall back";
        // Flatten reads the last node's output, so it is plain (read blocked, written plain).
        EXPECT_EQ(blocked.at("r3"), pool_tail);
        if (pool_tail) {
          EXPECT_FALSE(blocked.at("m3"));
        }
        // The fallback Pad writes plain, so the pool after it reads and writes plain.
        EXPECT_EQ(blocked.at("p1"), pad == Pad::kBlocked);
        EXPECT_EQ(blocked.at("m1"), pad == Pad::kBlocked);
        EXPECT_EQ(P.conversion_count(), pad == Pad::kDeclinedWhenBuilt ? 1 : 0);
        EXPECT_EQ(P.fallback_count(), pad == Pad::kBlocked ? 0 : 1);
      }
      // Two steps: the second backward must not see the first's gradients.
      Tensor dy = random_tensor({2, pool_tail ? 64 : 144}, 56);
      for (int step = 0; step < 2; ++step) {
        ASSERT_TRUE(P.run({x}, nullptr).is_ok());
        ASSERT_TRUE(P.backward({dy}).is_ok());
      }
      for (const auto& p : P.parameters()) grads[backend][p.name] = p.grad.clone();
      grads[backend]["x"] = P.input_grad(0)->clone();
    }
    for (const auto& [name, want] : grads["naive"]) {
      const Tensor& got = grads["onednn"].at(name);
      ASSERT_EQ(got.shape(), want.shape()) << name;
      float scale = 0.f, worst = 0.f;
      for (int64_t i = 0; i < want.numel(); ++i) scale = std::max(scale, std::fabs(want.f32()[i]));
      for (int64_t i = 0; i < want.numel(); ++i) worst = std::max(worst, std::fabs(got.f32()[i] - want.f32()[i]));
      EXPECT_GT(scale, 0.f) << mode << " " << name;
      EXPECT_LE(worst, 1e-4f * scale) << mode << ": gradient of " << name;
    }
    GradcheckOptions o;
    o.directions = 2;
    o.elements = 3;
    o.check_input = true;
    auto r = gradcheck(g, reg, Placement::all_on("onednn", {"naive"}), o);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_TRUE(r->passed()) << mode << ": " << failures(r.value());
  }
}

}  // namespace
}  // namespace mosaic::test

namespace mosaic::test {
namespace {

TEST(DropoutTraining, SeededMaskScalesAndRoutesGradients) {
  OpCase c;
  c.label = "dropout_train";
  c.node = make_node("Dropout", {{"seed", A::of_int(5)}});
  c.inputs = {random_tensor({100, 100}, 3, 0.5f, 1.5f), Tensor::from_f32({}, {0.25f})};
  c.is_const = {false, true};
  Graph g = prepared(c);
  PlanOptions po;
  po.training = true;
  po.seed = 11;
  po.input_grads = true;
  std::vector<float> first_mask;
  int ran = 0;
  for (const std::string& backend : builtin_registry().available_backends()) {
    auto plan = Plan::build(g, Placement::all_on(backend, {}), builtin_registry(), po);
    // A plugin's backend may have no Dropout that draws a mask (torch, loaded where a test
    // filter names it); the built-ins all do (counted below).
    if (!plan.ok() && plan.status().code() == StatusCode::kUnsupported) continue;
    ASSERT_TRUE(plan.ok()) << backend << ": " << plan.status().to_string();
    ++ran;
    Plan& P = *plan.value();
    const Tensor x = c.inputs[0];
    ASSERT_TRUE(P.run({x}, nullptr).is_ok());
    const Tensor& y = P.output(0);
    int64_t dropped = 0;
    std::vector<float> mask;
    for (int64_t i = 0; i < y.numel(); ++i) {
      // Kept elements are scaled by 1 / (1 - ratio), the others are zero.
      if (y.f32()[i] == 0.f) ++dropped;
      else EXPECT_NEAR(y.f32()[i], x.f32()[i] / 0.75f, 1e-6);
      mask.push_back(y.f32()[i] != 0.f);
    }
    EXPECT_NEAR(static_cast<double>(dropped) / y.numel(), 0.25, 0.02) << backend;
    // The same seed gives the same mask on every backend.
    if (first_mask.empty()) first_mask = mask;
    else EXPECT_EQ(mask, first_mask) << backend;
    Tensor dy = random_tensor({100, 100}, 4);
    ASSERT_TRUE(P.backward({dy}).is_ok());
    const Tensor* dx = P.input_grad(0);
    ASSERT_NE(dx, nullptr);
    for (int64_t i = 0; i < dy.numel(); ++i)
      ASSERT_NEAR(dx->f32()[i], mask[static_cast<size_t>(i)] ? dy.f32()[i] / 0.75f : 0.f, 1e-6) << backend << " " << i;
  }
  EXPECT_GE(ran, 3) << "naive, im2col and onednn draw the mask";
}

}  // namespace
}  // namespace mosaic::test
