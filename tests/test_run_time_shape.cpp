// Output shapes that depend on input values (core/run_time_shape.hpp): NonZero,
// NonMaxSuppression and an If whose branches differ, planned from given inputs, evaluated on
// the oracle each run and checked against the plan; the rest of the graph on the backend
// asked for. Against hand-computed indices; a run whose inputs give another shape fails,
// naming the node. Also RoiAlign's and NonMaxSuppression's edges (the node tests check their
// values against onnx's reference outputs).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "operators/detection.hpp"
#include "test_util.hpp"

namespace mosaic::test {
namespace {

/// x [2, 3] -> NonZero -> Cast(float) -> Mul(2) -> y, its input given for planning.

Graph nonzero_graph() {
  Graph g;
  g.source = "nonzero.onnx";
  g.opset = 13;
  g.inputs.push_back(ValueInfo{"x", DType::kF32, {2, 3}, {}, true});
  g.initializers["two"] = Tensor::from_f32({}, {2});
  add_node(g, make_node("NonZero"), {"x"}, {"idx"}, "nz");
  add_node(g, make_node("Cast", {{"to", Attribute::of_int(1)}}), {"idx"}, {"f"}, "cast");
  add_node(g, make_node("Mul"), {"f", "two"}, {"y"}, "twice");
  g.outputs.push_back(ValueInfo{"y", DType::kF32, {}, {}, false});
  return g;
}

Expected<PrepareReport> prepare_on(Graph& g, const std::vector<Tensor>& inputs) {
  PrepareOptions po;
  po.specialise = [inputs](const Graph&) -> Expected<std::vector<Tensor>> { return inputs; };
  return prepare_graph(g, builtin_registry(), po);
}

TEST(RunTimeShape, NonZeroWithoutInputsIsRefusedNamingTheNode) {
  Graph g = nonzero_graph();
  auto pr = prepare_graph(g, builtin_registry(), PrepareOptions{});
  ASSERT_FALSE(pr.ok());
  EXPECT_NE(pr.status().message().find("'nz' (NonZero)"), std::string::npos) << pr.status().message();
  EXPECT_NE(pr.status().message().find("depends on X's values"), std::string::npos) << pr.status().message();
}

class RunTimeShapeOn : public ::testing::TestWithParam<std::string> {};

TEST_P(RunTimeShapeOn, NonZeroIsPlannedFromTheInputsGivenAndCheckedEachRun) {
  const Tensor x1 = Tensor::from_f32({2, 3}, {0, 5, 0, -1, 0, 2});  // (0,1) (1,0) (1,2)
  Graph g = nonzero_graph();
  auto pr = prepare_on(g, {x1});
  ASSERT_TRUE(pr.ok()) << pr.status().to_string();
  EXPECT_EQ(pr.value().run_time_shapes, (std::vector<std::string>{"node 'nz' (NonZero)"}));
  EXPECT_EQ(g.value_descs.at("y").shape, (Shape{2, 3}));
  auto plan = Plan::build(g, Placement::all_on(GetParam()), builtin_registry());
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  for (const PlanStep& st : plan.value()->steps()) {
    const Node& n = plan.value()->graph().nodes[static_cast<size_t>(st.node)];
    if (n.op_type == "NonZero") {
      EXPECT_EQ(st.backend, "naive");
      if (GetParam() != "naive") {
        EXPECT_NE(st.fallback_reason.find("depend on input values"), std::string::npos);
      }
    } else if (n.op_type == "Mul") {
      EXPECT_EQ(st.backend, GetParam());  // the rest runs where it was asked to
    }
  }
  std::vector<Tensor> out;
  ASSERT_TRUE(plan.value()->run({x1}, &out).is_ok());
  EXPECT_EQ(values_of(out[0]), (std::vector<double>{0, 2, 2, 2, 0, 4}));  // rows, then columns, doubled
  // Other positions, the same count: the plan holds, the values are the new ones.
  const Tensor x2 = Tensor::from_f32({2, 3}, {7, 0, 1, 0, 0, 3});  // (0,0) (0,2) (1,2)
  ASSERT_TRUE(plan.value()->run({x2}, &out).is_ok());
  EXPECT_EQ(values_of(out[0]), (std::vector<double>{0, 0, 2, 0, 4, 4}));
  // Another count: the run fails, naming the node and both shapes.
  const Tensor x3 = Tensor::from_f32({2, 3}, {1, 1, 1, 1, 0, 0});
  const Status st = plan.value()->run({x3}, &out);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("'nz' (NonZero)"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("int64[2,4] where the plan was made for int64[2,3]"), std::string::npos)
      << st.message();
}

INSTANTIATE_TEST_SUITE_P(Backends, RunTimeShapeOn, ::testing::ValuesIn(builtin_registry().available_backends()),
                         backend_param_name);

TEST(RunTimeShape, InputsOfTheWrongShapeForPlanningAreRefused) {
  Graph g = nonzero_graph();
  auto pr = prepare_on(g, {Tensor::from_f32({3}, {1, 0, 1})});
  ASSERT_FALSE(pr.ok());
  EXPECT_NE(pr.status().message().find("input 'x' is float32[3], the graph binds float32[2,3]"), std::string::npos)
      << pr.status().message();
}

TEST(RunTimeShape, NonZeroOfEveryElementTypeOnTheOracle) {
  for (DType d : {DType::kBool, DType::kI32, DType::kU8, DType::kF16, DType::kF64, DType::kI64}) {
    const Tensor x = typed(d, {4}, {0, 1, 0, 1});
    OpCase c = op_case("NonZero", {x}, {}, 13);
    c.is_const = {true};  // folds: its shape is known from the constant
    std::vector<Tensor> out;
    ASSERT_TRUE(run_on(c, "naive", &out).is_ok()) << dtype_name(d);
    EXPECT_EQ(values_of(out[0]), (std::vector<double>{1, 3})) << dtype_name(d);
  }
}

NmsParams nms(int64_t boxes, int64_t max_per_class, float iou, bool center = false) {
  NmsParams p;
  p.batches = 1;
  p.classes = 1;
  p.boxes = boxes;
  p.max_per_class = max_per_class;
  p.iou_threshold = iou;
  p.center_point_box = center;
  return p;
}

TEST(Detection, NmsKeepsTheLowerIndexOnTiesAndRanksNaNScoresLast) {
  // Four boxes: 0 and 1 identical, 2 far away, 3 overlapping 0 by a third of the union.
  const std::vector<float> boxes = {0, 0, 1, 1, 0, 0, 1, 1, 5, 5, 6, 6, 0, 0.5f, 1, 1.5f};
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> scores = {0.9f, 0.9f, nan, 0.8f};
  // IoU(0, 3) = 0.5 / 1.5: kept at threshold 0.5, suppressed at 0.3.
  EXPECT_EQ(nms_select(nms(4, 10, 0.5f), boxes.data(), scores.data()),
            (std::vector<int64_t>{0, 0, 0, 0, 0, 3, 0, 0, 2}));
  EXPECT_EQ(nms_select(nms(4, 10, 0.3f), boxes.data(), scores.data()), (std::vector<int64_t>{0, 0, 0, 0, 0, 2}));
  EXPECT_EQ(nms_select(nms(4, 1, 0.5f), boxes.data(), scores.data()), (std::vector<int64_t>{0, 0, 0}));
  EXPECT_TRUE(nms_select(nms(4, 0, 0.5f), boxes.data(), scores.data()).empty());  // max 0: nothing
  NmsParams thresholded = nms(4, 10, 0.5f);
  thresholded.has_score_threshold = true;
  thresholded.score_threshold = 0.85f;  // strictly above: 0 and 1; 1 is suppressed by 0
  EXPECT_EQ(nms_select(thresholded, boxes.data(), scores.data()), (std::vector<int64_t>{0, 0, 0}));
  // Centre form: the same boxes as centres and sizes select the same.
  const std::vector<float> centred = {0.5f, 0.5f, 1, 1, 0.5f, 0.5f, 1, 1, 5.5f, 5.5f, 1, 1, 1, 0.5f, 1, 1};
  EXPECT_EQ(nms_select(nms(4, 10, 0.3f, true), centred.data(), scores.data()), (std::vector<int64_t>{0, 0, 0, 0, 0, 2}));
}

/// RoiAlign on a 1x1x4x4 ramp, one roi, on naive.
Status roi_align(const std::vector<float>& roi, int64_t batch_index, std::vector<Tensor>* out,
                 std::map<std::string, Attribute> attrs = {}) {
  std::vector<float> ramp(16);
  for (size_t i = 0; i < ramp.size(); ++i) ramp[i] = static_cast<float>(i);
  OpCase c = op_case("RoiAlign",
                     {Tensor::from_f32({1, 1, 4, 4}, ramp), Tensor::from_f32({1, 4}, roi),
                      Tensor::from_i64({1}, {batch_index})},
                     std::move(attrs), 16);
  return run_on(c, "naive", out);
}

TEST(Detection, RoiAlignAveragesBilinearSamples) {
  std::vector<Tensor> out;
  // The roi [0.5, 0.5, 2.5, 2.5] with half_pixel maps to [0, 2] x [0, 2]: one bin, 2x2 samples
  // at 0.5 and 1.5 a side; the ramp is 4y + x, linear, so the mean is its value at (1, 1): 5.
  ASSERT_TRUE(roi_align({0.5f, 0.5f, 2.5f, 2.5f}, 0, &out).is_ok());
  EXPECT_FLOAT_EQ(out[0].f32()[0], 5.f);
  // output_half_pixel (version 10's mapping): [0.5, 2.5] a side, samples at 1 and 2: mean 7.5.
  ASSERT_TRUE(roi_align({0.5f, 0.5f, 2.5f, 2.5f}, 0, &out,
                        {{"coordinate_transformation_mode", Attribute::of_string("output_half_pixel")}})
                  .is_ok());
  EXPECT_FLOAT_EQ(out[0].f32()[0], 7.5f);
}

TEST(Detection, RoiAlignRefusesHostileRoisAndIndices) {
  std::vector<Tensor> out;
  Status st = roi_align({0, 0, 1e30f, 1e30f}, 0, &out);  // an adaptive grid of 1e60 samples
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("samples per output element"), std::string::npos) << st.message();
  st = roi_align({0, 0, 2, 2}, 3, &out);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("batch_indices[0] = 3 is outside [0, 1)"), std::string::npos) << st.message();
  st = roi_align({0, std::numeric_limits<float>::quiet_NaN(), 2, 2}, 0, &out);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("not finite"), std::string::npos) << st.message();
  st = roi_align({0, 0, 2, 2}, 0, &out, {{"sampling_ratio", Attribute::of_int(int64_t{1} << 40)}});
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("sampling_ratio"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace mosaic::test
