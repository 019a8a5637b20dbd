// Post-training quantisation (`mosaic quantize`): the range estimators (metrics/calibration.hpp)
// against hand-computed ranges, the QDQ rewrite (core/qdq.hpp) against a fake-quantised
// convolution computed here from the formulas, and the command end to end: the written model
// reloads and runs as the in-memory one, and bad options are refused by name.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "api/quantize.hpp"
#include "core/qdq.hpp"
#include "frontends/onnx/onnx_io.hpp"
#include "metrics/calibration.hpp"
#include "test_util.hpp"

namespace mosaic::test {
namespace {

std::pair<float, float> range_of(CalibrationMethod m, const std::vector<float>& x, double percentile = 99.999) {
  RangeCollector c;
  c.observe_extent(x.data(), static_cast<int64_t>(x.size()));
  if (c.needs_histogram(m)) c.observe_histogram(m, x.data(), static_cast<int64_t>(x.size()));
  auto r = c.range(m, percentile);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? r.value() : std::pair<float, float>{NAN, NAN};
}

TEST(Calibration, MinMaxIsTheExtentWidenedToHoldZero) {
  EXPECT_EQ(range_of(CalibrationMethod::kMinMax, {-1.f, 0.5f, 3.f}), (std::pair<float, float>{-1.f, 3.f}));
  EXPECT_EQ(range_of(CalibrationMethod::kMinMax, {1.f, 2.f}), (std::pair<float, float>{0.f, 2.f}));
  EXPECT_EQ(range_of(CalibrationMethod::kMinMax, {-2.f, -1.f}), (std::pair<float, float>{-2.f, 0.f}));
}

TEST(Calibration, PercentileClipsTheTailsItIsAskedTo) {
  // 0, 1, ..., 20479: p = 90 clips 5% at each end: [1024, 19456] within a bin (10 values).
  std::vector<float> x(20480);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i);
  const auto [lo, hi] = range_of(CalibrationMethod::kPercentile, x, 90);
  EXPECT_EQ(lo, 0.f);  // widened to hold 0
  EXPECT_NEAR(hi, 19456, 11);
  // One outlier in 100,001 values is clipped at p = 99.99, kept at p = 100.
  std::vector<float> y(100000, 0.f);
  for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<float>(i % 1000) / 1000.f;
  y.push_back(1000.f);
  EXPECT_LT(range_of(CalibrationMethod::kPercentile, y, 99.99).second, 1.5f);
  EXPECT_EQ(range_of(CalibrationMethod::kPercentile, y, 100).second, 1000.f);
}

TEST(Calibration, EntropyThresholdKeepsTheBulkAndDropsAFarOutlier) {
  // Hand-made: 128 equal bins, nothing else: Q equals P at i = 128 (KL 0), the first minimum.
  std::vector<double> flat(2048, 0.0);
  for (int i = 0; i < 128; ++i) flat[static_cast<size_t>(i)] = 1;
  EXPECT_EQ(entropy_threshold_bins(flat, 128), 128);
  // The same with one count in the last bin: clipping below it puts it in bin i - 1, where Q
  // has nothing: only i = 2048 (128 groups of 16 bins, each as P) has KL 0.
  flat[2047] = 1;
  EXPECT_EQ(entropy_threshold_bins(flat, 128), 2048);
  // Normal values (sigma 1) and one at 100: the threshold is a few sigma, far below 100 (and
  // at least 128 of the 2048 bins: 6.25).
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> x(200000);
  for (auto& v : x) v = normal(rng);
  x.push_back(100.f);
  const auto [lo, hi] = range_of(CalibrationMethod::kEntropy, x);
  EXPECT_GE(hi, 6.25f);
  EXPECT_LT(hi, 15.f);
  EXPECT_EQ(lo, -hi);  // signed values: symmetric
  // Uniform values with no outlier: nothing to clip, the threshold stays near the maximum.
  std::vector<float> u(100000);
  for (size_t i = 0; i < u.size(); ++i) u[i] = static_cast<float>(i) / static_cast<float>(u.size());
  const auto ru = range_of(CalibrationMethod::kEntropy, u);
  EXPECT_EQ(ru.first, 0.f);  // never negative: [0, t]
  EXPECT_GT(ru.second, 0.9f);
  // A ReLU's output: half-normal values and twice as many exact zeros. The zeros are coded
  // exactly whatever the range, so they leave the threshold where the values alone put it.
  std::vector<float> relu, values;
  for (int i = 0; i < 100000; ++i) values.push_back(std::fabs(normal(rng)));
  relu = values;
  relu.resize(3 * values.size(), 0.f);
  const float alone = range_of(CalibrationMethod::kEntropy, values).second;
  EXPECT_NEAR(range_of(CalibrationMethod::kEntropy, relu).second, alone, 1e-6f);
  EXPECT_GT(alone, 2.f);
}

TEST(Calibration, NonFiniteValuesAndUnknownMethodsAreRefused) {
  RangeCollector c;
  const float bad[3] = {1.f, NAN, INFINITY};
  c.observe_extent(bad, 3);
  EXPECT_FALSE(c.range(CalibrationMethod::kMinMax, 100).ok());
  EXPECT_FALSE(RangeCollector().range(CalibrationMethod::kMinMax, 100).ok());
  auto m = parse_calibration_method("kl");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("minmax, percentile or entropy"), std::string::npos);
}

TEST(Calibration, SqnrInDecibels) {
  const float ref[2] = {3.f, 4.f}, got[2] = {3.f, 4.5f};  // signal 25, noise 0.25: 20 dB
  EXPECT_NEAR(sqnr_db(got, ref, 2), 20.0, 1e-9);
  EXPECT_TRUE(std::isinf(sqnr_db(ref, ref, 2)));
}

TEST(Qdq, ActivationParamsFromARange) {
  QuantParams u = activation_params(-1.f, 3.f, DType::kU8, false);  // 4 / 255; zero point 63.75 -> 64
  EXPECT_FLOAT_EQ(u.scale, 4.f / 255.f);
  EXPECT_EQ(u.zero_point, 64);
  QuantParams s = activation_params(-1.f, 3.f, DType::kI8, false);
  EXPECT_EQ(s.zero_point, -64);
  QuantParams y = activation_params(-1.f, 3.f, DType::kI8, true);
  EXPECT_FLOAT_EQ(y.scale, 3.f / 127.f);
  EXPECT_EQ(y.zero_point, 0);
  QuantParams z = activation_params(0.f, 0.f, DType::kU8, false);  // always 0
  EXPECT_EQ(z.scale, 1.f);
  EXPECT_EQ(z.zero_point, 0);
}

/// The fake quantisation the QDQ form computes, from the formulas: q = clamp(round(x / s) + zp),
/// then (q - zp) s.
float fake_quant(float x, float s, int zp, int lo, int hi) {
  const float q = std::clamp(std::nearbyint(x / s) + static_cast<float>(zp), static_cast<float>(lo), static_cast<float>(hi));
  return (q - static_cast<float>(zp)) * s;
}

TEST(Qdq, ConvRewriteComputesTheFakeQuantisedConvolution) {
  // x [1, 2, 5, 5] -> Conv (W [3, 2, 3, 3], B [3], pads 1) -> Relu -> y.
  Graph g;
  g.source = "conv";
  g.opset = 13;
  g.inputs.push_back(ValueInfo{"x", DType::kF32, {1, 2, 5, 5}, {}, true});
  g.outputs.push_back(ValueInfo{"y", DType::kF32, {}, {}, false});
  const Tensor w = random_tensor({3, 2, 3, 3}, 1, -0.5f, 0.5f), b = random_tensor({3}, 2, -0.2f, 0.2f);
  g.initializers["w"] = w.clone();
  g.initializers["b"] = b.clone();
  add_node(g, make_node("Conv", {{"pads", Attribute::of_ints({1, 1, 1, 1})}}), {"x", "w", "b"}, {"c"}, "conv");
  add_node(g, make_node("Relu"), {"c"}, {"y"}, "relu");
  Graph prepared = g;
  ASSERT_TRUE(prepare_graph(prepared, builtin_registry(), PrepareOptions{}).ok());
  auto targets = qdq_targets(g, prepared.value_descs, QdqOptions{});
  ASSERT_TRUE(targets.ok()) << targets.status().to_string();
  EXPECT_EQ(targets->activations, (std::vector<std::string>{"x", "c"}));
  Graph q = g;
  auto rw = apply_qdq(q, targets.value(), {{"x", {-1.f, 1.f}}, {"c", {-3.f, 4.f}}}, QdqOptions{});
  ASSERT_TRUE(rw.ok()) << rw.status().to_string();
  EXPECT_EQ(rw->weights, 1);
  EXPECT_EQ(rw->biases, 1);
  ASSERT_TRUE(q.initializers.count("w_quantized"));
  EXPECT_EQ(q.initializers.at("w_quantized").dtype(), DType::kI8);
  EXPECT_EQ(q.initializers.at("w_scale").shape(), (Shape{3}));
  EXPECT_EQ(q.initializers.at("b_quantized").dtype(), DType::kI32);
  EXPECT_FALSE(q.initializers.count("w"));  // the float weight is gone
  const Tensor bq = q.initializers.at("b_quantized"), bs = q.initializers.at("b_scale");  // before folding

  const Tensor x = random_tensor({1, 2, 5, 5}, 3, -1.2f, 1.2f);  // some values saturate
  ASSERT_TRUE(prepare_graph(q, builtin_registry(), PrepareOptions{}).ok());
  auto plan = Plan::build(q, Placement::all_on("naive", {}), builtin_registry());
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  std::vector<Tensor> out;
  ASSERT_TRUE(plan.value()->run({x}, &out).is_ok());

  // The reference: every value through its fake quantisation, the convolution in double.
  const float sx = 2.f / 255.f, sc = 7.f / 255.f;
  const int zx = 128, zc = static_cast<int>(std::nearbyint(3.f / sc));  // round(127.5) = 128; round(109.29) = 109
  float ws[3];
  for (int m = 0; m < 3; ++m) {
    float amax = 0;
    for (int k = 0; k < 18; ++k) amax = std::max(amax, std::fabs(w.f32()[m * 18 + k]));
    ws[m] = amax / 127.f;
  }
  // The bias: int32 codes at x_scale * w_scale[m], zero point 0.
  for (int m = 0; m < 3; ++m) {
    EXPECT_FLOAT_EQ(bs.f32()[m], sx * ws[m]) << m;
    EXPECT_EQ(static_cast<const int32_t*>(bq.data())[m], static_cast<int32_t>(std::nearbyint(b.f32()[m] / (sx * ws[m])))) << m;
  }
  int exact = 0, within_step = 0;
  for (int m = 0; m < 3; ++m)
    for (int i = 0; i < 5; ++i)
      for (int j = 0; j < 5; ++j) {
        double acc = 0;
        for (int c = 0; c < 2; ++c)
          for (int ki = 0; ki < 3; ++ki)
            for (int kj = 0; kj < 3; ++kj) {
              const int yi = i + ki - 1, xj = j + kj - 1;
              if (yi < 0 || yi >= 5 || xj < 0 || xj >= 5) continue;
              const float xv = fake_quant(x.f32()[(c * 5 + yi) * 5 + xj], sx, zx, 0, 255);
              const float wv = fake_quant(w.f32()[((m * 2 + c) * 3 + ki) * 3 + kj], ws[m], 0, -127, 127);
              acc += static_cast<double>(xv) * wv;
            }
        const float bs = sx * ws[m];
        acc += std::nearbyint(b.f32()[m] / bs) * bs;
        const float want = std::max(0.f, fake_quant(static_cast<float>(acc), sc, zc, 0, 255));
        const float got = out[0].f32()[(m * 5 + i) * 5 + j];
        exact += std::fabs(got - want) <= 1e-6f;
        within_step += std::fabs(got - want) <= sc * 1.0001f;  // a float sum on the rounding edge
      }
  EXPECT_EQ(within_step, 75);
  EXPECT_GE(exact, 70);  // the others: a sum on a rounding edge, in float here and in double above
}

TEST(Qdq, TargetsRefuseWhatCannotBeRewritten) {
  Graph g;
  g.source = "m";
  g.opset = 12;
  g.inputs.push_back(ValueInfo{"x", DType::kF32, {2, 4}, {}, true});
  g.outputs.push_back(ValueInfo{"y", DType::kF32, {}, {}, false});
  g.initializers["w"] = random_tensor({4, 3}, 1);
  add_node(g, make_node("MatMul"), {"x", "w"}, {"y"}, "mm");
  Graph prepared = g;
  ASSERT_TRUE(prepare_graph(prepared, builtin_registry(), PrepareOptions{}).ok());
  auto per_channel = qdq_targets(g, prepared.value_descs, QdqOptions{});  // opset 12: no axis
  ASSERT_FALSE(per_channel.ok());
  EXPECT_NE(per_channel.status().message().find("opset 12"), std::string::npos);
  QdqOptions o;
  o.per_channel = false;
  auto t = qdq_targets(g, prepared.value_descs, o);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->activations, (std::vector<std::string>{"x"}));  // y is a graph output: stays float
  o.exclude = {"nosuch"};
  auto ex = qdq_targets(g, prepared.value_descs, o);
  ASSERT_FALSE(ex.ok());
  EXPECT_NE(ex.status().message().find("'nosuch'"), std::string::npos);
  o.exclude = {"mm"};
  auto none = qdq_targets(g, prepared.value_descs, o);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->nodes.empty());
  ASSERT_EQ(none->skipped.size(), 1u);
}

TEST(Qdq, TheThreadedFloatToByteKernelsAreTheOraclesBitForBit) {
  // Ties (k + 0.5 steps), saturating values, NaN and infinities, per tensor and per axis, on
  // the backends that register the threaded float32 <-> 8-bit path, against naive's loops.
  std::vector<float> xs;
  for (int k = -300; k < 300; ++k) xs.push_back((static_cast<float>(k) + 0.5f) * 0.3f);  // near ties at 0.3
  for (float v : {NAN, INFINITY, -INFINITY, 1e30f, -1e30f, 0.f, -0.f, 1e-30f}) xs.push_back(v);
  const Tensor rnd = random_tensor({40000}, 9, -40.f, 40.f);  // long enough to split over threads
  xs.insert(xs.end(), rnd.f32(), rnd.f32() + rnd.numel());
  const int64_t n = static_cast<int64_t>(xs.size()) / 2 * 2;
  const Tensor x = Tensor::from_f32({2, n / 2}, std::vector<float>(xs.begin(), xs.begin() + n));
  for (DType q : {DType::kU8, DType::kI8}) {
    const double zp = q == DType::kU8 ? 131 : -7;
    const std::vector<OpCase> cases = {
        op_case("QuantizeLinear", {x, Tensor::from_f32({}, {0.3f}), typed(q, {}, {zp})}),
        op_case("QuantizeLinear", {x, Tensor::from_f32({2}, {0.3f, 0.1f}), typed(q, {2}, {zp, 3})},
                {{"axis", Attribute::of_int(0)}}),
        op_case("DequantizeLinear", {typed(q, {2, 3}, {0, 1, zp, 5, 100, q == DType::kU8 ? 255. : -128.}),
                                     Tensor::from_f32({}, {0.37f}), typed(q, {}, {zp})})};
    for (const auto& c : cases)
      for (const char* backend : {"im2col", "onednn"}) {
        std::vector<Tensor> want, got;
        ASSERT_TRUE(run_on(c, "naive", &want).is_ok());
        ASSERT_TRUE(run_on(c, backend, &got).is_ok()) << backend;
        EXPECT_EQ(values_of(got[0]), values_of(want[0])) << backend << " " << c.label;
      }
  }
}

class QuantizeCommand : public ScratchDirTest {
 protected:
  QuantizeCommand() : ScratchDirTest("mosaic_ptq_") {}
};

TEST_F(QuantizeCommand, WritesAModelThatRunsAsTheOneInMemoryAndReportsItsCost) {
  api::QuantizeOptions o;
  o.model = "zoo:fmnist-cnn";
  o.data = "synthetic:400,1,28,28,10";  // 334 training images, 66 test ones
  o.samples = 256;
  o.output = path("q.onnx");
  o.backend = "naive";
  o.common.batch = 32;
  auto r = api::quantize_model(o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->calibration_rows, 256);
  EXPECT_GE(r->nodes.size(), 3u);  // two convolutions and the classifier's product(s)
  EXPECT_EQ(static_cast<size_t>(r->weights), r->nodes.size());
  EXPECT_TRUE(r->evaluated);
  EXPECT_GT(r->top1_agreement, 0.9);  // random weights, 8-bit: the classes rarely change
  EXPECT_GT(r->output_sqnr_db, 20);
  EXPECT_FALSE(r->noise.empty());

  auto loaded = load_onnx(o.output);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  int q = 0, dq = 0;
  for (const auto& n : loaded->nodes) q += n.op_type == "QuantizeLinear", dq += n.op_type == "DequantizeLinear";
  EXPECT_EQ(q, static_cast<int>(r->activations.size()));
  EXPECT_EQ(dq, q + r->weights + r->biases);
  // The written model and the in-memory one give the same bits.
  auto memory = api::quantized_graph(o, nullptr);
  ASSERT_TRUE(memory.ok());
  api::CommonOptions c;
  c.batch = 4;
  auto a = api::prepare_model(loaded.value(), c, nullptr), b = api::prepare_model(memory.value(), c, nullptr);
  ASSERT_TRUE(a.ok() && b.ok());
  const Tensor x = random_tensor({4, 1, 28, 28}, 5, 0.f, 1.f);
  std::vector<Tensor> ya, yb;
  ASSERT_TRUE(Plan::build(a.value(), Placement::all_on("naive", {}), builtin_registry()).value()->run({x}, &ya).is_ok());
  ASSERT_TRUE(Plan::build(b.value(), Placement::all_on("naive", {}), builtin_registry()).value()->run({x}, &yb).is_ok());
  EXPECT_EQ(values_of(ya[0]), values_of(yb[0]));
}

/// A Conv -> BatchNormalization -> Relu model: quantize folds the normalisation into the
/// convolution first, so the written QDQ model has none and its codes are the folded weights'.
TEST_F(QuantizeCommand, BatchNormalisationsFoldIntoTheirConvolutionsBeforeQuantising) {
  Graph g;
  g.opset = 15;
  g.inputs.push_back(ValueInfo{"x", DType::kF32, {4, 3, 8, 8}, {}, true});
  g.outputs.push_back(ValueInfo{"y", DType::kF32, {}, {}, false});
  g.initializers["w"] = random_tensor({5, 3, 3, 3}, 31);
  g.initializers["gamma"] = random_tensor({5}, 32, 0.5f, 2.f);
  g.initializers["beta"] = random_tensor({5}, 33);
  g.initializers["mu"] = random_tensor({5}, 34);
  g.initializers["sigma2"] = random_tensor({5}, 35, 0.1f, 3.f);
  add_node(g, make_node("Conv", {{"pads", Attribute::of_ints({1, 1, 1, 1})}}), {"x", "w"}, {"c"}, "conv");
  add_node(g, make_node("BatchNormalization"), {"c", "gamma", "beta", "mu", "sigma2"}, {"n"}, "bn");
  add_node(g, make_node("Relu"), {"n"}, {"y"}, "relu");
  ASSERT_TRUE(save_onnx(g, path("bn.onnx")).is_ok());
  api::QuantizeOptions o;
  o.model = path("bn.onnx");
  o.output = path("bn_int8.onnx");
  o.backend = "naive";
  o.samples = 8;
  auto r = api::quantize_model(o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_NE(::testing::PrintToString(r->notes).find("folded 1 BatchNormalization"), std::string::npos)
      << ::testing::PrintToString(r->notes);
  EXPECT_GT(r->output_sqnr_db, 20);
  auto written = load_onnx(o.output);
  ASSERT_TRUE(written.ok()) << written.status().to_string();
  for (const auto& n : written->nodes) EXPECT_NE(n.op_type, "BatchNormalization");
  int conv = 0;
  for (const auto& n : written->nodes) conv += n.op_type == "Conv";
  EXPECT_EQ(conv, 1);
}

TEST_F(QuantizeCommand, EveryMethodCalibratesAndBadOptionsAreRefusedByName) {
  for (const char* method : {"percentile", "entropy"}) {
    api::QuantizeOptions o;
    o.model = "zoo:fmnist-cnn";
    o.data = "synthetic:64,1,28,28,10";
    o.method = method;
    o.backend = "naive";
    o.evaluate = false;
    auto r = api::quantize_model(o);
    ASSERT_TRUE(r.ok()) << method << ": " << r.status().to_string();
    EXPECT_GT(r->output_sqnr_db, 15) << method;
  }
  auto refused = [](const std::function<void(api::QuantizeOptions&)>& set, const std::string& says) {
    api::QuantizeOptions o;
    o.model = "zoo:fmnist-cnn";
    o.data = "synthetic:64,1,28,28,10";
    o.backend = "naive";
    set(o);
    auto r = api::quantize_model(o);
    ASSERT_FALSE(r.ok()) << says;
    EXPECT_NE(r.status().message().find(says), std::string::npos) << r.status().to_string();
  };
  refused([](auto& o) { o.method = "kl"; }, "`method`");
  refused([](auto& o) { o.percentile = 20; }, "`percentile`");
  refused([](auto& o) { o.samples = 0; }, "`samples`");
  refused([](auto& o) { o.activation_type = "int4"; }, "`activation_type`");
  refused([](auto& o) { o.exclude = {"nosuch"}; }, "'nosuch'");
  refused([](auto& o) { o.data = "synthetic:64,3,32,32,10"; }, "gives batches of float32 [");
  refused([](auto& o) { o.op_types = {"Softmax"}; }, "no node to quantise");
  refused([](auto& o) { o.output = "/no/such/dir/q.onnx"; }, "`output`");
}

TEST_F(QuantizeCommand, TheCommandLineWritesTheModelAndItsReport) {
  const std::string out = path("q.onnx"), json = path("q.json");
  auto r = mosaic("quantize zoo:fmnist-cnn --data synthetic:64,1,28,28,10 --backend naive -o " + out + " --json " + json);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("top-1 agreement"), std::string::npos) << r.out;
  const auto j = read_json(json);
  EXPECT_EQ(j["schema"], "mosaic.quantize/1");
  EXPECT_TRUE(j.contains("accuracy"));
  // The written model runs on every backend and they agree with the oracle.
  auto b = mosaic("bench " + out + " --backends naive,im2col,onednn --batch 2 --iterations 1 --warmup 0");
  EXPECT_EQ(b.code, 0) << b.out;
  // bench --precision int8: each backend beside its int8 twin, checked and measured.
  const std::string bj = path("b.json");
  auto twin = mosaic("bench zoo:fmnist-cnn --backends onednn --precision int8 --batch 4 --iterations 1 --warmup 0 --no-db "
                     "--no-peaks --json " + bj);
  ASSERT_EQ(twin.code, 0) << twin.out;
  const auto runs = read_json(bj)["runs"];
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[1]["label"], "onednn-int8");
  EXPECT_EQ(runs[1]["precision"], "int8");
  EXPECT_TRUE(runs[1]["check"]["passed"].get<bool>());
  EXPECT_TRUE(runs[1]["check"]["sqnr_db"].is_number()) << runs[1]["check"].dump();
  EXPECT_NE(twin.out.find("int8 within 3% of naive's int8 outputs"), std::string::npos) << twin.out;
  auto training = mosaic("bench zoo:fmnist-cnn --precision int8 --mode training --no-db");
  EXPECT_NE(training.code, 0);
  EXPECT_NE(training.out.find("int8 times inference"), std::string::npos) << training.out;
  auto bad = mosaic("quantize zoo:fmnist-cnn --method kl");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.out.find("minmax, percentile or entropy"), std::string::npos) << bad.out;
  EXPECT_FALSE(std::filesystem::exists(path("none.onnx")));
}

}  // namespace
}  // namespace mosaic::test
