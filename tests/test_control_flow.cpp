// If, Loop and Scan (core/control_flow.hpp) from the file up: models written as ONNX protos,
// loaded (subgraphs, and the outer values they read found and appended to the node's
// inputs), prepared and run on the naive oracle, against values computed by hand; and the
// refusals: branches that disagree in shape, scan outputs without a trip count, a loop that
// stops before the rows it was planned for, subgraphs nested too deep. The ONNX node tests
// (test_if, test_scan9_*) check them against onnx's reference outputs too.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <fstream>

#include "frontends/onnx/onnx_io.hpp"
#include "test_util.hpp"

namespace mosaic::test {
namespace {

void set_type(onnx::ValueInfoProto* v, int elem, const std::vector<int64_t>& dims) {
  auto* tt = v->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(elem);
  auto* shape = tt->mutable_shape();
  for (int64_t d : dims) shape->add_dim()->set_dim_value(d);
}

void add_input(onnx::GraphProto* g, const std::string& name, int elem, const std::vector<int64_t>& dims) {
  auto* v = g->add_input();
  v->set_name(name);
  set_type(v, elem, dims);
}

onnx::NodeProto* add_node(onnx::GraphProto* g, const std::string& op, std::vector<std::string> in,
                          std::vector<std::string> out) {
  auto* n = g->add_node();
  n->set_op_type(op);
  n->set_name(op + "_" + std::to_string(g->node_size()));
  for (const auto& i : in) n->add_input(i);
  for (const auto& o : out) n->add_output(o);
  return n;
}

void add_floats(onnx::GraphProto* g, const std::string& name, const std::vector<int64_t>& dims, std::vector<float> v) {
  auto* t = g->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims) t->add_dims(d);
  for (float x : v) t->add_float_data(x);
}

void add_scalar(onnx::GraphProto* g, const std::string& name, int elem, int64_t v) {
  auto* t = g->add_initializer();
  t->set_name(name);
  t->set_data_type(elem);
  if (elem == onnx::TensorProto::INT64) t->add_int64_data(v);
  else t->add_int32_data(static_cast<int32_t>(v));
}

onnx::GraphProto* graph_attr(onnx::NodeProto* n, const std::string& name) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::GRAPH);
  a->mutable_g()->set_name(name);
  return a->mutable_g();
}

void int_attr(onnx::NodeProto* n, const std::string& name, int64_t v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}

class ControlFlow : public ScratchDirTest {
 protected:
  ControlFlow() : ScratchDirTest("mosaic_control_flow_") {
    model_.set_ir_version(8);
    model_.add_opset_import()->set_version(16);
  }
  onnx::GraphProto* main() { return model_.mutable_graph(); }
  /// Saves, loads, prepares and plans the model on naive; runs it on `inputs`.
  /// With `specialise`, shapes that depend on input values are planned from `inputs`.
  Status run(const std::vector<Tensor>& inputs, std::vector<Tensor>* out, Graph* loaded = nullptr,
             bool specialise = false) {
    auto plan = build(inputs, loaded, specialise);
    if (!plan.ok()) return plan.status();
    return plan.value()->run(inputs, out);
  }
  Expected<std::unique_ptr<Plan>> build(const std::vector<Tensor>& inputs, Graph* loaded, bool specialise) {
    const std::string file = path("m.onnx");
    {
      std::ofstream f(file, std::ios::binary);
      model_.SerializeToOstream(&f);
    }
    auto g = load_onnx(file);
    if (!g.ok()) return g.status();
    if (loaded) *loaded = *g;
    PrepareOptions po;
    if (specialise) po.specialise = [inputs](const Graph&) -> Expected<std::vector<Tensor>> { return inputs; };
    auto pr = prepare_graph(*g, builtin_registry(), po);
    if (!pr.ok()) return pr.status();
    return Plan::build(*g, Placement::all_on("naive", {}), builtin_registry());
  }
  onnx::ModelProto model_;
};

Tensor bool_scalar(bool v) {
  Tensor t = Tensor::empty({DType::kBool, {}});
  static_cast<uint8_t*>(t.data())[0] = v;
  return t;
}

TEST_F(ControlFlow, IfRunsTheBranchTheConditionPicksReadingOuterValues) {
  add_input(main(), "cond", onnx::TensorProto::BOOL, {});
  add_input(main(), "x", onnx::TensorProto::FLOAT, {2});
  auto* n = add_node(main(), "If", {"cond"}, {"y"});
  auto* then_g = graph_attr(n, "then_branch");
  add_floats(then_g, "one", {1}, {1});
  add_node(then_g, "Add", {"x", "one"}, {"t"});  // x comes from the enclosing graph
  then_g->add_output()->set_name("t");
  auto* else_g = graph_attr(n, "else_branch");
  add_node(else_g, "Mul", {"x", "x"}, {"e"});
  else_g->add_output()->set_name("e");
  main()->add_output()->set_name("y");
  std::vector<Tensor> out;
  Graph g;
  const Tensor x = Tensor::from_f32({2}, {1, 2});
  ASSERT_TRUE(run({bool_scalar(true), x}, &out, &g).is_ok());
  EXPECT_EQ(values_of(out[0]), (std::vector<double>{2, 3}));
  // The loader found x in the branches and made it an input of the node.
  ASSERT_EQ(g.nodes.size(), 1u);
  EXPECT_EQ(g.nodes[0].inputs, (std::vector<std::string>{"cond", "x"}));
  EXPECT_EQ(g.nodes[0].outer_scope_inputs(), 1u);
  ASSERT_TRUE(run({bool_scalar(false), x}, &out).is_ok());
  EXPECT_EQ(values_of(out[0]), (std::vector<double>{1, 4}));
}

TEST_F(ControlFlow, IfWhoseBranchesDisagreeInShapeIsRefusedByName) {
  add_input(main(), "cond", onnx::TensorProto::BOOL, {});
  auto* n = add_node(main(), "If", {"cond"}, {"y"});
  add_floats(graph_attr(n, "then_branch"), "a", {2}, {1, 2});
  n->mutable_attribute(0)->mutable_g()->add_output()->set_name("a");
  add_floats(graph_attr(n, "else_branch"), "b", {3}, {1, 2, 3});
  n->mutable_attribute(1)->mutable_g()->add_output()->set_name("b");
  main()->add_output()->set_name("y");
  std::vector<Tensor> out;
  const Status st = run({bool_scalar(true)}, &out);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("output 0 is float32 [2] from then_branch and float32 [3] from else_branch"),
            std::string::npos)
      << st.message();
}

TEST_F(ControlFlow, IfWhoseBranchesDisagreeIsPlannedFromTheConditionGivenAndCheckedEachRun) {
  add_input(main(), "cond", onnx::TensorProto::BOOL, {});
  add_input(main(), "x", onnx::TensorProto::FLOAT, {2});
  auto* n = add_node(main(), "If", {"cond"}, {"y"});
  add_node(graph_attr(n, "then_branch"), "Neg", {"x"}, {"a"});  // [2]
  n->mutable_attribute(0)->mutable_g()->add_output()->set_name("a");
  auto* else_g = graph_attr(n, "else_branch");
  add_node(else_g, "Concat", {"x", "x"}, {"b"});  // [4]
  int_attr(else_g->mutable_node(0), "axis", 0);
  else_g->add_output()->set_name("b");
  add_node(main(), "Shape", {"y"}, {"s"});  // folds to the planned shape
  main()->add_output()->set_name("y");
  main()->add_output()->set_name("s");
  const Tensor x = Tensor::from_f32({2}, {1, 2});
  auto plan = build({bool_scalar(false), x}, nullptr, true);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  std::vector<Tensor> out;
  ASSERT_TRUE(plan.value()->run({bool_scalar(false), Tensor::from_f32({2}, {3, 4})}, &out).is_ok());
  EXPECT_EQ(values_of(out[0]), (std::vector<double>{3, 4, 3, 4}));
  EXPECT_EQ(values_of(out[1]), (std::vector<double>{4}));
  const Status st = plan.value()->run({bool_scalar(true), x}, &out);  // the other branch: [2]
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("output 0 is float32[2] where the plan was made for float32[4]"), std::string::npos)
      << st.message();
  // Planned from the other condition, it runs that branch.
  plan = build({bool_scalar(true), x}, nullptr, true);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  ASSERT_TRUE(plan.value()->run({bool_scalar(true), x}, &out).is_ok());
  EXPECT_EQ(values_of(out[0]), (std::vector<double>{-1, -2}));
}

/// Loop(M = 3, cond = true, v = x): v += i; scan output v * scale, scale from the outer graph.
void loop_model(onnx::GraphProto* m, bool stop_after_two, bool with_trip_count) {
  add_input(m, "x", onnx::TensorProto::FLOAT, {2});
  if (with_trip_count) add_scalar(m, "M", onnx::TensorProto::INT64, 3);
  add_scalar(m, "go", onnx::TensorProto::BOOL, 1);
  add_floats(m, "scale", {1}, {2});
  auto* n = add_node(m, "Loop", {with_trip_count ? "M" : "", "go", "x"}, {"v_final", "rows"});
  auto* body = graph_attr(n, "body");
  add_input(body, "i", onnx::TensorProto::INT64, {});
  add_input(body, "c", onnx::TensorProto::BOOL, {});
  add_input(body, "v", onnx::TensorProto::FLOAT, {2});
  int_attr(add_node(body, "Cast", {"i"}, {"fi"}), "to", onnx::TensorProto::FLOAT);
  add_node(body, "Add", {"v", "fi"}, {"v1"});
  add_node(body, "Mul", {"v1", "scale"}, {"s"});
  if (stop_after_two) {
    add_scalar(body, "one", onnx::TensorProto::INT64, 1);
    add_node(body, "Less", {"i", "one"}, {"c_out"});  // false at i = 1: two iterations
  } else {
    add_node(body, "Identity", {"c"}, {"c_out"});
  }
  for (const char* o : {"c_out", "v1", "s"}) body->add_output()->set_name(o);
  m->add_output()->set_name("v_final");
  m->add_output()->set_name("rows");
}

TEST_F(ControlFlow, LoopCarriesValuesAndStacksScanOutputs) {
  loop_model(main(), false, true);
  std::vector<Tensor> out;
  const Status st = run({Tensor::from_f32({2}, {1, 2})}, &out);
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  // v: [1,2] -> +0 [1,2] -> +1 [2,3] -> +2 [4,5]; rows: 2v after each step.
  EXPECT_EQ(values_of(out[0]), (std::vector<double>{4, 5}));
  EXPECT_EQ(out[1].shape(), (Shape{3, 2}));
  EXPECT_EQ(values_of(out[1]), (std::vector<double>{2, 4, 4, 6, 8, 10}));
}

TEST_F(ControlFlow, ALoopThatStopsEarlyOrHasNoTripCountIsRefusedNotCutShort) {
  loop_model(main(), true, true);
  std::vector<Tensor> out;
  Status st = run({Tensor::from_f32({2}, {1, 2})}, &out);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("the loop stopped after 2 of 3 iterations"), std::string::npos) << st.message();
  model_.clear_graph();
  loop_model(main(), false, false);
  st = run({Tensor::from_f32({2}, {1, 2})}, &out);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("scan outputs without a trip count"), std::string::npos) << st.message();
}

/// Loop(M = 3, v = x [1]) over an outer table [10, 20, 30, 40]: each iteration slices the table
/// at its iteration number (a Slice whose starts are values known only as the loop runs,
/// onnx's test_loop11), [i, i + 1) or, `growing`, [0, i + 1); v += the slice, scan output the slice.
void slicing_loop_model(onnx::GraphProto* m, bool growing) {
  add_input(m, "x", onnx::TensorProto::FLOAT, {1});
  add_scalar(m, "M", onnx::TensorProto::INT64, 3);
  add_floats(m, "table", {4}, {10, 20, 30, 40});
  auto* n = add_node(m, "Loop", {"M", "", "x"}, {"v_final", "rows"});
  auto* body = graph_attr(n, "body");
  add_input(body, "i", onnx::TensorProto::INT64, {});
  add_input(body, "c", onnx::TensorProto::BOOL, {});
  add_input(body, "v", onnx::TensorProto::FLOAT, {1});
  add_scalar(body, "one", onnx::TensorProto::INT64, 1);
  auto* axes = body->add_initializer();
  axes->set_name("axes");
  axes->set_data_type(onnx::TensorProto::INT64);
  axes->add_dims(1);
  axes->add_int64_data(0);
  add_node(body, "Add", {"i", "one"}, {"e"});
  add_node(body, "Unsqueeze", {"e", "axes"}, {"end"});
  if (growing) {
    auto* zero = body->add_initializer();
    zero->set_name("start");
    zero->set_data_type(onnx::TensorProto::INT64);
    zero->add_dims(1);
    zero->add_int64_data(0);
  } else {
    add_node(body, "Unsqueeze", {"i", "axes"}, {"start"});
  }
  add_node(body, "Slice", {"table", "start", "end"}, {"s"});
  if (growing) add_node(body, "Identity", {"v"}, {"v1"});
  else add_node(body, "Add", {"v", "s"}, {"v1"});
  add_node(body, "Identity", {"c"}, {"c_out"});
  for (const char* o : {"c_out", "v1", "s"}) body->add_output()->set_name(o);
  m->add_output()->set_name("v_final");
  m->add_output()->set_name("rows");
}

TEST_F(ControlFlow, ALoopBodyThatSlicesAtTheIterationNumberIsPlannedPerIteration) {
  // Rows of one: planned as at iteration 0, each iteration prepared with its own values.
  slicing_loop_model(main(), false);
  std::vector<Tensor> out;
  Status st = run({Tensor::from_f32({1}, {1})}, &out);
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  EXPECT_EQ(values_of(out[0]), (std::vector<double>{61}));
  EXPECT_EQ(out[1].shape(), (Shape{3, 1}));
  EXPECT_EQ(values_of(out[1]), (std::vector<double>{10, 20, 30}));
  // Rows that grow ([0, i + 1)) cannot be stacked into the static shape planned from
  // iteration 0: refused at the iteration that differs, naming both shapes.
  model_.clear_graph();
  slicing_loop_model(main(), true);
  st = run({Tensor::from_f32({1}, {1})}, &out);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("scan output 0 is float32 [2] at iteration 1, planned as rows of float32 [3,1]"),
            std::string::npos)
      << st.message();
}

TEST_F(ControlFlow, ScanCarriesStateOverReversedSlices) {
  add_input(main(), "s0", onnx::TensorProto::FLOAT, {2});
  add_input(main(), "X", onnx::TensorProto::FLOAT, {3, 2});
  auto* n = add_node(main(), "Scan", {"s0", "X"}, {"s_final", "Y"});
  int_attr(n, "num_scan_inputs", 1);
  auto* dirs = n->add_attribute();
  dirs->set_name("scan_input_directions");
  dirs->set_type(onnx::AttributeProto::INTS);
  dirs->add_ints(1);  // the last row first
  auto* body = graph_attr(n, "body");
  add_input(body, "s", onnx::TensorProto::FLOAT, {2});
  add_input(body, "x", onnx::TensorProto::FLOAT, {2});
  add_node(body, "Add", {"s", "x"}, {"s1"});
  add_node(body, "Identity", {"s1"}, {"y"});
  body->add_output()->set_name("s1");
  body->add_output()->set_name("y");
  main()->add_output()->set_name("s_final");
  main()->add_output()->set_name("Y");
  std::vector<Tensor> out;
  const Status st = run({Tensor::from_f32({2}, {0, 0}), Tensor::from_f32({3, 2}, {1, 2, 3, 4, 5, 6})}, &out);
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  EXPECT_EQ(values_of(out[0]), (std::vector<double>{9, 12}));
  EXPECT_EQ(values_of(out[1]), (std::vector<double>{5, 6, 8, 10, 9, 12}));  // running sums from the end
}

TEST_F(ControlFlow, SubgraphsNestedTooDeepAreRefused) {
  add_input(main(), "cond", onnx::TensorProto::BOOL, {});
  onnx::GraphProto* g = main();
  for (int depth = 0; depth < 20; ++depth) {  // protobuf itself refuses past about 33
    auto* n = add_node(g, "If", {"cond"}, {"y"});
    auto* e = graph_attr(n, "else_branch");
    add_floats(e, "z", {1}, {0});
    e->add_output()->set_name("z");
    g->add_output()->set_name("y");
    g = graph_attr(n, "then_branch");
  }
  add_floats(g, "z", {1}, {0});
  g->add_output()->set_name("z");
  std::vector<Tensor> out;
  const Status st = run({bool_scalar(true)}, &out);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("nests deeper than 16 graphs"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace mosaic::test
