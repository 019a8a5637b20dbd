// optcheck, optimizer plugins, and the training options around them (--freeze,
// --normalize, the background loader).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "frontends/zoo/zoo.hpp"
#include "frontends/data/dataset.hpp"
#include "frontends/onnx/onnx_io.hpp"
#include "test_util.hpp"
#include "validate/optcheck.hpp"

namespace mosaic::test {
namespace {

namespace fs = std::filesystem;

const std::string kPlugins = MOSAIC_PLUGIN_DIR;
std::string plugin(const std::string& name) { return kPlugins + "/libmosaic_test_" + name + ".so"; }
const std::string kLion = kPlugins + "/examples/custom_optimizer/libmosaic_lion.so";

/// Verdict of the first check whose name starts with `prefix` in mosaic's output.
bool has_line(const std::string& out, const std::string& verdict, const std::string& check) {
  return out.find(verdict + "  " + check) != std::string::npos;
}

class EveryBuiltinOptimizer : public ::testing::TestWithParam<std::string> {};

/// Every built-in rule passes every check with default settings, network descent included
/// (it is judged against the reference rule under the same problem, not an absolute drop).
TEST_P(EveryBuiltinOptimizer, PassesOptcheckWithDefaults) {
  CmdResult r = mosaic("optcheck --optimizer " + GetParam());
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(has_line(r.out, "PASS", "network descent")) << r.out;
  EXPECT_NE(r.out.find(" 0 failed"), std::string::npos) << r.out;
}

INSTANTIATE_TEST_SUITE_P(Rules, EveryBuiltinOptimizer, ::testing::ValuesIn(optcheck_references()));

TEST(Optcheck, ReferenceRulesByHand) {
  // Adam, one step from zero state, t = 1: m = 0.1 g, v = 0.001 g^2, p -= lr sign(g) (eps aside).
  OptimizerConfig c;
  c.lr = 0.1;
  std::vector<double> p{1.0, -2.0}, g{0.5, -4.0};
  std::map<std::string, std::vector<double>> st;
  ASSERT_TRUE(reference_step("adam", c, p, g, st, 1).is_ok());
  EXPECT_NEAR(p[0], 0.9, 1e-7);
  EXPECT_NEAR(p[1], -1.9, 1e-7);
  EXPECT_NEAR(st["exp_avg"][1], -0.4, 1e-12);
  EXPECT_NEAR(st["exp_avg_sq"][1], 0.016, 1e-12);
  // Nesterov (momentum 0.9), two steps of g = 1: b = 1 then 1.9; p -= lr (g + 0.9 b).
  std::vector<double> q{0.0}, one{1.0};
  std::map<std::string, std::vector<double>> sn;
  ASSERT_TRUE(reference_step("nesterov", c, q, one, sn, 1).is_ok());
  ASSERT_TRUE(reference_step("nesterov", c, q, one, sn, 2).is_ok());
  EXPECT_NEAR(q[0], -0.1 * 1.9 - 0.1 * (1 + 0.9 * 1.9), 1e-12);
  EXPECT_FALSE(reference_step("lamb", c, q, one, sn, 1).is_ok());
}

TEST(Optcheck, EveryBuiltInPasses) {
  for (const auto& name : optcheck_references()) {
    OptcheckOptions o;
    o.optimizer = name;
    o.model.clear();
    auto r = optcheck(o);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    int passed = 0;
    for (const auto& c : r.value()) {
      EXPECT_NE(c.verdict, "FAIL") << name << ": " << c.check << ": " << c.detail;
      passed += c.verdict == "PASS";
    }
    EXPECT_GE(passed, 5) << name;
  }
}

TEST(Optcheck, OnnxTrainingDataIsUsed) {
  if (!fs::exists("/usr/share/libonnx-testdata/data/node/test_adam")) GTEST_SKIP() << "libonnx-testdata not installed";
  for (const std::string name : {"adam", "adagrad", "momentum", "nesterov"}) {
    OptcheckOptions o;
    o.optimizer = name;
    int passed = 0;
    for (const auto& c : check_onnx_data(o)) {
      EXPECT_EQ(c.verdict, "PASS") << c.check << ": " << c.detail;
      passed += c.verdict == "PASS";
    }
    EXPECT_GE(passed, 1) << name;
  }
  // A wrong epsilon placement or rate would show: Adam checked as Adagrad fails the data.
  OptcheckOptions wrong;
  wrong.optimizer = "adam";
  wrong.reference = "adagrad";
  for (const auto& c : check_onnx_data(wrong)) EXPECT_NE(c.verdict, "PASS") << c.check;
}

TEST(Optcheck, PlantedOptimizerBugsFail) {
  // Adam with beta1 in the second moment: trajectories and ONNX data fail.
  CmdResult r = mosaic("optcheck --optimizer-plugin " + plugin("adam_beta1_in_v") + " --reference adam --model none");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(has_line(r.out, "FAIL", "trajectory fixed-gradients defaults")) << r.out;
  EXPECT_TRUE(has_line(r.out, "FAIL", "onnx test_adam ")) << r.out;
  // SGD that ignores weight decay: exactly the weight-decay settings fail.
  r = mosaic("optcheck --optimizer-plugin " + plugin("sgd_ignores_weight_decay") + " --reference sgd --model none");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(has_line(r.out, "FAIL", "trajectory fixed-gradients weight_decay=0.1")) << r.out;
  EXPECT_TRUE(has_line(r.out, "PASS", "trajectory fixed-gradients defaults")) << r.out;
  // JUnit: one test case per check, the failed ones as <failure> with their detail.
  const std::string xml = ::testing::TempDir() + "optcheck.xml";
  r = mosaic("optcheck --optimizer-plugin " + plugin("sgd_ignores_weight_decay") + " --reference sgd --model none --junit " + xml);
  EXPECT_EQ(r.code, 1) << r.out;
  std::ifstream xf(xml);
  const std::string x((std::istreambuf_iterator<char>(xf)), std::istreambuf_iterator<char>());
  EXPECT_NE(x.find("name=\"trajectory fixed-gradients weight_decay=0.1\" time=\"0\">\n      <failure message=\"FAIL"),
            std::string::npos) << x;
  EXPECT_NE(x.find("name=\"trajectory fixed-gradients defaults\" time=\"0\"/>"), std::string::npos) << x;
  // A correct user Adam passes.
  r = mosaic("optcheck --optimizer-plugin " + plugin("adam_copy") + " --reference adam --model none");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("0 failed"), std::string::npos) << r.out;
}

TEST(Optcheck, PluginLoadingErrors) {
  CmdResult r = mosaic("optcheck --optimizer-plugin " + plugin("old_interface"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("built against optimizer interface version 1001, this Mosaic has version 1"), std::string::npos)
      << r.out;
  r = mosaic("optcheck --optimizer-plugin /nonexistent/libx.so");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("optimizer plugin /nonexistent/libx.so: cannot load"), std::string::npos) << r.out;
  // A shared library that is not a Mosaic plugin (a bare name is a file in the working
  // directory, not a library-path lookup: PluginPathWithoutSlashIsAFile).
  r = mosaic("optcheck --optimizer-plugin /lib/x86_64-linux-gnu/libz.so.1");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("not a Mosaic optimizer plugin"), std::string::npos) << r.out;
  r = mosaic("optcheck --optimizer-plugin " + kLion + " --opt b3=0.5 --model none");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("optimizer lion has no hyperparameter 'b3' (it reads: b1, b2)"), std::string::npos) << r.out;
  r = mosaic("optcheck --optimizer adam --reference lamb");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("--reference 'lamb' is not a built-in rule"), std::string::npos) << r.out;
}

TEST(Optcheck, ExamplePluginConvergesAndTrains) {
  const std::string json = (fs::temp_directory_path() / ("optcheck_" + std::to_string(::getpid()) + ".json")).string();
  CmdResult r = mosaic("optcheck --optimizer-plugin " + kLion + " --lr 0.001 --opt b1=0.9,b2=0.99 --json " + json);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(has_line(r.out, "PASS", "rosenbrock")) << r.out;
  EXPECT_TRUE(has_line(r.out, "PASS", "network gradcheck zoo:fmnist-cnn")) << r.out;
  EXPECT_TRUE(has_line(r.out, "PASS", "network descent")) << r.out;
  std::ifstream f(json);
  auto j = nlohmann::json::parse(f);
  EXPECT_EQ(j["optimizer"], "lion");
  EXPECT_EQ(j["failed"], 0);
  fs::remove(json);
  // The plugin trains a model through `mosaic train` too.
  r = mosaic("train zoo:fmnist-cnn --data synthetic:8,1,28,28,10 --optimizer-plugin " + kLion +
             " --lr 0.001 --batch 7 --epochs 15 --no-shuffle --no-eval");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find(": lion, lr 0.001"), std::string::npos) << r.out;
}

TEST(Training, FreezeKeepsParametersFixed) {
  const std::string ckpt = (fs::temp_directory_path() / ("freeze_" + std::to_string(::getpid()) + ".onnx")).string();
  CmdResult r = mosaic("train zoo:fmnist-cnn --data synthetic:16,1,28,28,10 --batch 8 --steps 3 --no-eval "
                       "--freeze 'conv1\\..*,fc2.bias' --save " + ckpt);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("(3 frozen)"), std::string::npos) << r.out;
  Graph start = build_zoo_model("fmnist-cnn").value();
  Graph saved = load_onnx(ckpt).value();
  auto same = [&](const std::string& n) {
    const Tensor& a = start.initializers.at(n);
    const Tensor& b = saved.initializers.at(n);
    return std::equal(a.f32(), a.f32() + a.numel(), b.f32());
  };
  EXPECT_TRUE(same("conv1.weight"));
  EXPECT_TRUE(same("conv1.bias"));
  EXPECT_TRUE(same("fc2.bias"));
  EXPECT_FALSE(same("conv2.weight"));
  EXPECT_FALSE(same("fc2.weight"));
  fs::remove(ckpt);
  r = mosaic("train zoo:fmnist-cnn --data synthetic:16,1,28,28,10 --batch 8 --steps 1 --freeze nosuch");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("--freeze 'nosuch' matches no parameter of zoo:fmnist-cnn"), std::string::npos) << r.out;
}

TEST(Datasets, NormalizationAutoExplicitAndErrors) {
  auto data = load_data("synthetic:60,3,4,4,5", 3);
  ASSERT_TRUE(data.ok());
  const Dataset& d = data->train;
  auto n = parse_normalization("auto", d);
  ASSERT_TRUE(n.ok());
  ASSERT_EQ(n->mean.size(), 3u);
  // After normalising the whole training set each channel has mean 0 and std 1.
  Tensor all = d.images.clone();
  n->apply(all.f32(), d.size(), 3, 16);
  for (int c = 0; c < 3; ++c) {
    double s = 0, sq = 0;
    for (int64_t i = 0; i < d.size(); ++i)
      for (int k = 0; k < 16; ++k) {
        const double v = all.f32()[(i * 3 + c) * 16 + k];
        s += v, sq += v * v;
      }
    const double cnt = static_cast<double>(d.size()) * 16;
    EXPECT_NEAR(s / cnt, 0.0, 1e-5);
    EXPECT_NEAR(sq / cnt, 1.0, 1e-4);
  }
  auto e = parse_normalization("0.5:0.25", d);
  ASSERT_TRUE(e.ok());
  BatchIterator it(d, 2, false, 0);
  it.set_normalization(e.value());
  Tensor img = Tensor::empty({DType::kF32, {2, 3, 4, 4}}), lab = Tensor::empty({DType::kI64, {2}});
  it.fill(0, img, lab);
  EXPECT_FLOAT_EQ(img.f32()[5], (d.images.f32()[5] - 0.5f) / 0.25f);
  EXPECT_FALSE(parse_normalization("0.5,0.5:1,1", d).ok());  // 2 values for 3 channels
  EXPECT_FALSE(parse_normalization("0.5:0", d).ok());
  EXPECT_FALSE(parse_normalization("0.5:x", d).ok());
  EXPECT_FALSE(parse_normalization("mean", d).ok());
}

TEST(Datasets, BackgroundLoaderGivesTheSameBatches) {
  auto data = load_data("synthetic:100,1,5,5,4", 9);
  ASSERT_TRUE(data.ok());
  BatchIterator a(data->train, 8, true, 5), b(data->train, 8, true, 5);
  const TensorDesc images{DType::kF32, {8, 1, 5, 5}};
  Prefetcher threaded(a, images, {8}, true), inline_(b, images, {8}, false);
  for (int epoch = 0; epoch < 3; ++epoch) {
    threaded.start_epoch();
    inline_.start_epoch();
    const int64_t stop = epoch == 1 ? 4 : a.batches_per_epoch();  // an epoch cut short (--steps)
    for (int64_t k = 0; k < stop; ++k) {
      const Tensor *xi, *li, *xj, *lj;
      threaded.next(k, &xi, &li);
      inline_.next(k, &xj, &lj);
      ASSERT_TRUE(std::equal(xi->f32(), xi->f32() + xi->numel(), xj->f32())) << epoch << " " << k;
      ASSERT_TRUE(std::equal(li->i64(), li->i64() + 8, lj->i64()));
    }
  }
}

}  // namespace
}  // namespace mosaic::test
