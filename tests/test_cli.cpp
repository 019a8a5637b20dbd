// The mosaic command end to end: success paths and every bad-input path named in the
// design (clear one-line message, non-zero exit, no partial result files).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>

#include "cli/cli_util.hpp"
#include "frontends/zoo/zoo.hpp"
#include "frontends/onnx/onnx_io.hpp"
#include "test_util.hpp"

namespace mosaic::test {
namespace {

namespace fs = std::filesystem;

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("mosaic_cli_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string fmnist() {
    const std::string p = path("fmnist.onnx");
    if (!fs::exists(p)) {
      EXPECT_EQ(mosaic("export fmnist-cnn -o " + p).code, 0);
    }
    return p;
  }
  fs::path dir_;
};

TEST_F(Cli, ExportInfoBench) {
  const std::string model = fmnist();
  CmdResult info = mosaic("info " + model + " --batch 4");
  ASSERT_EQ(info.code, 0) << info.out;
  EXPECT_NE(info.out.find("421,642"), std::string::npos) << info.out;
  EXPECT_NE(info.out.find("float32[4,10]"), std::string::npos);
  EXPECT_NE(info.out.find(join(cli_registered_backends(), ",")), std::string::npos) << "every registered backend runs every node";

  const std::string json = path("r.json"), csv = path("r.csv");
  CmdResult b = mosaic("bench " + model + " --batch 3 --warmup 1 --iterations 3 --no-fuse --json " + json + " --csv " + csv);
  ASSERT_EQ(b.code, 0) << b.out;
  for (const char* s : {"== naive", "== im2col", "== onednn", "images/s", "outputs match naive", "speed-up vs naive"})
    EXPECT_NE(b.out.find(s), std::string::npos) << s << "\n" << b.out;
  std::ifstream jf(json);
  auto j = nlohmann::json::parse(jf);
  EXPECT_EQ(j["schema"], "mosaic.bench/2");
  ASSERT_EQ(j["runs"].size(), 3u);
  for (const auto& r : j["runs"]) {
    EXPECT_TRUE(r["check"]["passed"].get<bool>());
    EXPECT_EQ(r["iterations"]["measured"], 3);
    EXPECT_GT(r["summary"]["images_per_s"].get<double>(), 0);
    EXPECT_EQ(r["nodes"].size(), 10u);
    double conv1 = r["nodes"][0]["flops"];
    EXPECT_DOUBLE_EQ(conv1, 3.0 * (2 * 32 * 28 * 28 * 9 + 32 * 28 * 28));  // hand-counted
  }
  std::ifstream cf(csv);
  std::string header;
  std::getline(cf, header);
  EXPECT_EQ(header.rfind("# machine: ", 0), 0u) << header;  // the provenance block comes first
  while (header.rfind("#", 0) == 0) std::getline(cf, header);
  EXPECT_EQ(header.rfind("config,node,op,backend", 0), 0u);

  // Fused (default): Conv+Relu pairs become one node whose FLOPs include the activation,
  // and every backend still matches the unfused naive reference.
  b = mosaic("bench " + model + " --batch 3 --warmup 1 --iterations 2 --json " + json);
  ASSERT_EQ(b.code, 0) << b.out;
  EXPECT_NE(b.out.find("fused 3 node pairs"), std::string::npos) << b.out;
  std::ifstream jf2(json);
  auto j2 = nlohmann::json::parse(jf2);
  for (const auto& r : j2["runs"]) {
    EXPECT_TRUE(r["check"]["passed"].get<bool>());
    EXPECT_EQ(r["nodes"][0]["name"], "conv1+relu1");
    double conv1 = r["nodes"][0]["flops"];
    EXPECT_DOUBLE_EQ(conv1, 3.0 * (2 * 32 * 28 * 28 * 9 + 2 * 32 * 28 * 28));
  }
}

TEST_F(Cli, MixedPlacementAndFallbackAreReported) {
  CmdResult b = mosaic("bench zoo:fmnist-cnn --batch 2 --warmup 0 --iterations 1 --no-fuse --assign Conv=onednn,Gemm=im2col,*=naive");
  ASSERT_EQ(b.code, 0) << b.out;
  EXPECT_NE(b.out.find("== mixed"), std::string::npos);
  EXPECT_NE(b.out.find("conv1              Conv               onednn"), std::string::npos) << b.out;
  EXPECT_NE(b.out.find("fc1                Gemm               im2col"), std::string::npos) << b.out;
}

TEST_F(Cli, MissingFile) {
  CmdResult r = mosaic("info " + path("nope.onnx"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("nope.onnx: no such file"), std::string::npos) << r.out;
}

TEST_F(Cli, TruncatedAndNonOnnxFiles) {
  const std::string model = fmnist();
  std::ifstream in(model, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  const std::string trunc = path("trunc.onnx");
  std::ofstream(trunc, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  CmdResult r = mosaic("info " + trunc);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("trunc.onnx"), std::string::npos) << r.out;
  const std::string text = path("readme.onnx");
  std::ofstream(text) << "this is not a model\n";
  r = mosaic("bench " + text);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("readme.onnx: not a valid ONNX model"), std::string::npos) << r.out;
}

TEST_F(Cli, UnsupportedOpNamesNodeAndBackends) {
  Graph g = build_zoo_model("fmnist-cnn").value();
  g.nodes[1].op_type = "Frobnicate";
  const std::string p = path("frob.onnx");
  ASSERT_TRUE(save_onnx(g, p).is_ok());
  CmdResult r = mosaic("bench " + p + " --backends onednn");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("node 'relu1' (Frobnicate)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("backends without a kernel for it: " + join(cli_registered_backends())), std::string::npos) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << "one line:\n" << r.out;
}

TEST_F(Cli, InputShapeThatDoesNotFit) {
  // A Reshape hard-coded to batch 1 cannot take --batch 4.
  Graph g;
  g.name = "fixed";
  g.opset = 13;
  ValueInfo x;
  x.name = "x";
  x.dims = {1, 4};
  x.has_shape = true;
  g.inputs.push_back(x);
  g.initializers["shape"] = Tensor::from_i64({2}, {2, 2});
  Node n;
  n.name = "reshape_fixed";
  n.op_type = "Reshape";
  n.inputs = {"x", "shape"};
  n.outputs = {"y"};
  g.nodes.push_back(n);
  g.outputs.push_back({"y", DType::kF32, {2, 2}, {}, true});
  const std::string p = path("fixed.onnx");
  ASSERT_TRUE(save_onnx(g, p).is_ok());
  EXPECT_EQ(mosaic("info " + p).code, 0);
  CmdResult r = mosaic("info " + p + " --batch 4");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("reshape_fixed"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("cannot reshape [4,4]"), std::string::npos) << r.out;
}

TEST_F(Cli, UnknownBackendAndBadAssignLeaveNoFiles) {
  const std::string json = path("partial.json");
  CmdResult r = mosaic("bench zoo:fmnist-cnn --backends naive,cudnn --json " + json);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("unknown backend 'cudnn'"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(json));
  r = mosaic("bench zoo:fmnist-cnn --assign Conv=onednn,Frob=naive --json " + json);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("unknown op type 'Frob'"), std::string::npos) << r.out;
  r = mosaic("bench zoo:fmnist-cnn --assign Conv:onednn");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("not KEY=BACKEND"), std::string::npos) << r.out;
  r = mosaic("bench zoo:fmnist-cnn --mode train");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("--mode must be inference or training"), std::string::npos) << r.out;
  r = mosaic("export resnet9000 -o " + path("x.onnx"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("unknown zoo model 'resnet9000'"), std::string::npos);
  EXPECT_FALSE(fs::exists(json));
  r = mosaic("bench");
  EXPECT_EQ(r.code, 2);
}

TEST_F(Cli, TrainLearnsSavesAndDetectsDivergence) {
  const std::string json = path("train.json"), ckpt = path("ckpt.onnx");
  // 7 fixed synthetic training images: Adam memorises them within 25 steps.
  CmdResult r = mosaic("train zoo:fmnist-cnn --data synthetic:8,1,28,28,10 --optimizer adam --lr 0.002 --batch 7 "
                       "--epochs 25 --no-shuffle --json " + json + " --save " + ckpt);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("epoch 25:"), std::string::npos) << r.out;
  std::ifstream jf(json);
  auto j = nlohmann::json::parse(jf);
  ASSERT_EQ(j["steps"].size(), 25u);
  const double first = j["steps"][0]["loss"], last = j["steps"][24]["loss"];
  EXPECT_GT(first, 2.0);
  EXPECT_LT(last, 0.2) << r.out;
  // The checkpoint is an ONNX model with the trained weights: it loads and differs from the start.
  Graph start = build_zoo_model("fmnist-cnn").value();
  auto saved = load_onnx(ckpt);
  ASSERT_TRUE(saved.ok()) << saved.status().to_string();
  EXPECT_NE(saved->initializers.at("fc2.bias").f32()[0], start.initializers.at("fc2.bias").f32()[0]);
  EXPECT_EQ(mosaic("info " + ckpt + " --no-nodes").code, 0);
  // --steps stops early; a huge learning rate diverges and is reported, exit 1.
  r = mosaic("train " + ckpt + " --data synthetic:32,1,28,28,10 --batch 9 --steps 2 --no-eval --json " + json);
  ASSERT_EQ(r.code, 0) << r.out;
  r = mosaic("train zoo:fmnist-cnn --data synthetic:32,1,28,28,10 --optimizer sgd --lr 1e30 --batch 9 --epochs 3");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("diverged at epoch 1 step"), std::string::npos) << r.out;
  // Bad inputs: data that does not fit the model, unknown optimizer, missing data.
  r = mosaic("train zoo:fmnist-cnn --data synthetic:32,3,32,32,10 --batch 4");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("but the data gives batches of float32 [4,3,32,32]"), std::string::npos) << r.out;
  r = mosaic("train zoo:fmnist-cnn --data synthetic:32,1,28,28,10 --optimizer lion");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("unknown optimizer 'lion'"), std::string::npos);
  r = mosaic("train zoo:fmnist-cnn --data idx:" + path("nodata"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("nodata not found"), std::string::npos) << r.out;
}

TEST_F(Cli, TrainingBenchmark) {
  const std::string json = path("train_bench.json");
  CmdResult r = mosaic("bench zoo:fmnist-cnn --mode training --batch 4 --backends im2col,onednn --warmup 1 --iterations 2 "
                       "--json " + json);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("check:   loss and gradients match naive"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("step: forward"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("fallback:"), std::string::npos) << "fmnist-cnn trains natively on both:\n" << r.out;
  std::ifstream jf(json);
  auto j = nlohmann::json::parse(jf);
  EXPECT_EQ(j["mode"], "training");
  const auto& conv = j["runs"][0]["nodes"][0];
  EXPECT_EQ(conv["backend"], "im2col");
  EXPECT_GT(conv["backward_median_us"].get<double>(), 0);
  EXPECT_GT(j["runs"][0]["summary"]["backward_ms"].get<double>(), 0);
}

/// The line of `out` that starts with `verdict` and names `tensor`, or "".
std::string verdict_line(const std::string& out, const std::string& verdict, const std::string& tensor) {
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(verdict + " ", 0) == 0 && line.find(" " + tensor + " ") != std::string::npos) return line;
  return "";
}

TEST_F(Cli, GradcheckVerdicts) {
  const std::string json = (dir_ / "gc.json").string();
  CmdResult r = mosaic("gradcheck zoo:fmnist-cnn --batch 2 --directions 1 --elements 1 --json " + json);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(verdict_line(r.out, "PASS", "conv1.weight"), "") << r.out;
  EXPECT_EQ(r.out.find("error floors"), std::string::npos) << r.out;  // its gradients live
  EXPECT_NE(r.out.find("9 passed, 0 failed, 0 inconclusive"), std::string::npos) << r.out;
  std::ifstream jf(json);
  auto j = nlohmann::json::parse(jf);
  EXPECT_EQ(j["schema"], "mosaic.gradcheck/1");
  EXPECT_EQ(j["summary"]["passed"], 9);
  EXPECT_EQ(j["tensors"][0]["verdict"], "PASS");
}

TEST_F(Cli, GradcheckOnABackendListWritesOneReportEach) {
  const std::string json = (dir_ / "set.json").string();
  // The planted bug is planted in each backend of the list: each FAILs, and the exit is 1.
  CmdResult r = mosaic("gradcheck zoo:fmnist-cnn --batch 2 --directions 1 --elements 1 --backend naive,onednn "
                       "--plant conv-dw-scale --json " + json);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("on naive+conv-dw-scale"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("on onednn+conv-dw-scale"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("reference evaluation pairs shared with the backends checked before"), std::string::npos) << r.out;
  std::ifstream jf(json);
  auto j = nlohmann::json::parse(jf);
  EXPECT_EQ(j["schema"], "mosaic.gradcheck-set/1");
  ASSERT_EQ(j["runs"].size(), 2u);
  EXPECT_EQ(j["runs"][1]["backend"], "onednn+conv-dw-scale");
  EXPECT_GT(j["runs"][1]["summary"]["failed"].get<int>(), 0);
  EXPECT_GT(j["runs"][1]["shared_evaluations"].get<int>(), 0);
  r = mosaic("gradcheck zoo:fmnist-cnn --backend naive,nope");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("unknown backend 'nope'"), std::string::npos) << r.out;
}

TEST_F(Cli, GradcheckFailsAPlantedBugWithExitOne) {
  CmdResult r = mosaic("gradcheck zoo:fmnist-cnn --batch 2 --backend im2col --plant conv-dw-scale");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(verdict_line(r.out, "FAIL", "conv1.weight"), "") << r.out;
  EXPECT_NE(r.out.find("on im2col+conv-dw-scale"), std::string::npos) << r.out;
  r = mosaic("gradcheck zoo:fmnist-cnn --batch 2 --plant no-such-bug");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("unknown planted bug 'no-such-bug' (known: conv-dx-sign"), std::string::npos) << r.out;
}

TEST_F(Cli, GradcheckWithoutJudgedProbesIsInconclusiveNotPass) {
  // Steps of 10 and 5 cross kinks in every probe: nothing can be judged. The old gradcheck
  // printed PASS with 0 probes and exited 0.
  CmdResult r = mosaic("gradcheck zoo:fmnist-cnn --batch 2 --eps 10 --halvings 1");
  EXPECT_EQ(r.code, 3) << r.out;
  EXPECT_NE(verdict_line(r.out, "INCONCLUSIVE", "conv1.weight"), "") << r.out;
  EXPECT_NE(r.out.find("0 failed, "), std::string::npos) << r.out;
  // No tensor with nothing judged is a PASS (fc2 follows the last ReLU: it has no kinks).
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("PASS ", 0) == 0) {
      EXPECT_EQ(line.find(" 0 probes"), std::string::npos) << line;
    }
  EXPECT_NE(r.out.find("INCONCLUSIVE is not a pass"), std::string::npos) << r.out;
}

TEST_F(Cli, GradcheckNeverJudgesBelowTheLossResolution) {
  // At a step of 1e-12 the double loss's rounding (16 ulps of ~2.3) is ~2e-2 in every
  // difference quotient, far above a tenth of the tolerance on any tensor's scale: nothing
  // is judged, every tensor is INCONCLUSIVE ("unstable"), and nothing FAILs on rounding
  // noise, as a correct mobilenet_v2 tensor did before the rule.
  CmdResult r = mosaic("gradcheck zoo:fmnist-cnn --batch 1 --eps 1e-12 --halvings 1");
  EXPECT_EQ(r.code, 3) << r.out;
  EXPECT_NE(r.out.find("0 passed, 0 failed, 9 inconclusive"), std::string::npos) << r.out;
  EXPECT_NE(verdict_line(r.out, "INCONCLUSIVE", "conv2.weight").find("unstable"), std::string::npos) << r.out;
}

TEST_F(Cli, GradcheckSaysWhenGradientsVanishAtTheWeights) {
  // A network nearly dead at its weights (as torchvision's mobilenet_v2 and googlenet
  // exported with their initial BatchNorm statistics): the middle layer's weights of ~1e-12
  // make the gradients of everything before it, and of the weights after it, ~1e-11 against
  // floors of ~1e-6 (w3's is 1e-3 of b3's gradient), far below what the double loss's
  // rounding lets a step resolve on their own scale. Those tensors can only agree on the
  // floor, where a wrong sign does not show: INCONCLUSIVE, and one note says why and that
  // another --seed (a new input, the same weights) cannot help. w2 and b3 still PASS.
  Graph g;
  g.source = "dead";
  g.inputs.push_back(ValueInfo{"x", DType::kF32, {-1, 8}, {"N", ""}, true});
  g.outputs.push_back(ValueInfo{"y", DType::kF32, {}, {}, false});
  g.initializers["w1"] = random_tensor({8, 8}, 1);
  g.initializers["w2"] = random_tensor({8, 8}, 2, -1e-12f, 1e-12f);
  g.initializers["w3"] = random_tensor({8, 4}, 3);
  g.initializers["b3"] = random_tensor({4}, 4);
  add_node(g, make_node("Gemm"), {"x", "w1"}, {"h1"}, "fc1");
  add_node(g, make_node("Gemm"), {"h1", "w2"}, {"h2"}, "fc2");
  add_node(g, make_node("Gemm"), {"h2", "w3", "b3"}, {"y"}, "fc3");
  const std::string p = path("dead.onnx");
  ASSERT_TRUE(save_onnx(g, p).is_ok());
  CmdResult r = mosaic("gradcheck " + p + " --batch 2 --backend naive");
  EXPECT_EQ(r.code, 3) << r.out;
  for (const char* t : {"w1", "w3", "input:x"})
    EXPECT_NE(verdict_line(r.out, "INCONCLUSIVE", t).find("only on the floor"), std::string::npos) << t << "\n" << r.out;
  for (const char* t : {"w2", "b3"}) EXPECT_NE(verdict_line(r.out, "PASS", t), "") << t << "\n" << r.out;
  const size_t at = r.out.find("note:  3 tensors (");
  ASSERT_NE(at, std::string::npos) << r.out;
  const std::string note = r.out.substr(at, r.out.find('\n', at) - at);
  for (const char* t : {"w1", "w3", "input:x"}) EXPECT_NE(note.find(t), std::string::npos) << t << ": " << note;
  EXPECT_NE(note.find("agreed with finite differences only below their error floors"), std::string::npos) << note;
  EXPECT_NE(note.find("another --seed draws another input, not other weights"), std::string::npos) << note;
  // (Cli.GradcheckVerdicts: a model whose gradients live gets no such note.)
}

TEST_F(Cli, GradcheckNamesFallbackNodesAndCanForbidThem) {
  // im2col has no Trilu kernel: the Trilu runs (and differentiates) on naive, and the report
  // says so; --fallback none refuses to check anything else than im2col.
  Graph g;
  g.source = "slice";
  g.inputs.push_back(ValueInfo{"x", DType::kF32, {-1, 1, 6, 6}, {"N", "", "", ""}, true});
  g.outputs.push_back(ValueInfo{"y", DType::kF32, {}, {}, false});
  g.initializers["w"] = random_tensor({2, 1, 3, 3}, 1);
  g.initializers["fw"] = random_tensor({3, 32}, 2);
  add_node(g, make_node("Conv"), {"x", "w"}, {"c"}, "conv");
  add_node(g, make_node("Trilu"), {"c"}, {"s"}, "cut");
  add_node(g, make_node("Flatten"), {"s"}, {"f"}, "flat");
  add_node(g, make_node("Gemm", {{"transB", Attribute::of_int(1)}}), {"f", "fw"}, {"y"}, "fc");
  const std::string model = (dir_ / "slice.onnx").string();
  ASSERT_TRUE(save_onnx(g, model).is_ok());
  CmdResult r = mosaic("gradcheck " + model + " --batch 2 --backend im2col");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("note:  not checked on im2col: 'cut' (Trilu) on naive"), std::string::npos) << r.out;
  r = mosaic("gradcheck " + model + " --batch 2 --backend im2col --fallback none");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("'cut'"), std::string::npos) << r.out;
}

TEST_F(Cli, VerifyPerNodeSetsAsideGradientsAtExactKinks) {
  // Relu(x - 0.5) is exactly 0 on about half the elements: the lower bound of the Clip that
  // follows (ReLU6, as in mobilenet_v2). There naive passes the gradient ([lo, hi], as
  // torch.clamp) and oneDNN's clip_v2 does not (lo < x < hi, as nn.ReLU6): both are right,
  // and per-node verify used to report the Clip divergent on onednn.
  Graph g;
  g.source = "kinks";
  g.inputs.push_back(ValueInfo{"x", DType::kF32, {-1, 16}, {"N", ""}, true});
  g.outputs.push_back(ValueInfo{"y", DType::kF32, {}, {}, false});
  g.initializers["half"] = Tensor::from_f32({1}, {0.5f});
  g.initializers["lo"] = Tensor::from_f32({}, {0.f});
  g.initializers["hi"] = Tensor::from_f32({}, {6.f});
  g.initializers["w"] = random_tensor({16, 4}, 3);
  add_node(g, make_node("Sub"), {"x", "half"}, {"s"}, "shift");
  add_node(g, make_node("Relu"), {"s"}, {"r"}, "relu");
  add_node(g, make_node("Clip"), {"r", "lo", "hi"}, {"c"}, "relu6");
  add_node(g, make_node("MatMul"), {"c", "w"}, {"y"}, "fc");
  const std::string model = path("kinks.onnx");
  ASSERT_TRUE(save_onnx(g, model).is_ok());
  CmdResult r = mosaic("verify " + model + " --per-node --backend all --batch 8");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.find("DIVERGES"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("input elements exactly on a kink, where either one-sided gradient is right, were not compared: "
                       "relu6 ("),
            std::string::npos)
      << r.out;
}

TEST_F(Cli, VerifyPassesAndCatchesWrongOutputs) {
  // Build a one-case suite from the naive output of a tiny model, then corrupt it.
  const std::string model = fmnist();
  const fs::path case_dir = dir_ / "suite" / "test_fmnist";
  fs::create_directories(case_dir / "test_data_set_0");
  fs::copy_file(model, case_dir / "model.onnx");
  Tensor x = Tensor::empty({DType::kF32, {2, 1, 28, 28}});
  for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = static_cast<float>(i % 17) / 17.f;
  ASSERT_TRUE(save_tensor_pb(x, "input", (case_dir / "test_data_set_0" / "input_0.pb").string()).is_ok());
  // Expected output: computed independently by the naive backend through the library.
  Graph g = load_onnx(model).value();
  g.inputs[0].dims = {2, 1, 28, 28};
  ASSERT_TRUE(prepare_graph(g, builtin_registry(), {}).ok());
  auto plan = Plan::build(g, Placement::all_on("naive"), builtin_registry());
  std::vector<Tensor> out;
  ASSERT_TRUE(plan.value()->run({x}, &out).is_ok());
  const std::string expected = (case_dir / "test_data_set_0" / "output_0.pb").string();
  ASSERT_TRUE(save_tensor_pb(out[0], "logits", expected).is_ok());
  CmdResult r = mosaic("verify " + (dir_ / "suite").string() + " --backend all");
  EXPECT_EQ(r.code, 0) << r.out;
  const size_t n = cli_all_backends().size();
  EXPECT_NE(r.out.find("\n" + std::to_string(n) + " passed, 0 failed, 0 skipped\n"), std::string::npos) << r.out;
  out[0].f32()[3] += 0.5f;
  ASSERT_TRUE(save_tensor_pb(out[0], "logits", expected).is_ok());
  r = mosaic("verify " + case_dir.string() + " --backend onednn");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("FAILED test_fmnist [onednn] test_data_set_0 output 0: element 3"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("0 passed, 1 failed, 0 skipped"), std::string::npos);
  r = mosaic("verify " + path("empty_dir_that_is_missing"));
  EXPECT_EQ(r.code, 2);
}

TEST_F(Cli, ShapeBindsSymbolicDimensionsByName) {
  // A fully convolutional model whose image size is symbolic: [N, 1, H, W].
  Graph g;
  g.source = "symbolic";
  g.inputs.push_back(ValueInfo{"x", DType::kF32, {-1, 1, -1, -1}, {"N", "", "H", "W"}, true});
  g.outputs.push_back(ValueInfo{"y", DType::kF32, {}, {}, false});
  g.initializers["w"] = random_tensor({2, 1, 3, 3}, 1);
  Node conv = make_node("Conv");
  conv.inputs = {"x", "w"};
  conv.outputs = {"y"};
  conv.name = "conv";
  g.nodes.push_back(conv);
  const std::string model = path("symbolic.onnx");
  ASSERT_TRUE(save_onnx(g, model).is_ok());

  CmdResult r = mosaic("info " + model + " --shape H=9 --shape W=7 --batch 3");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("float32[3,2,7,5]"), std::string::npos) << r.out;  // 3x3 valid conv of 9x7
  r = mosaic("bench " + model + " --shape H=9 --shape W=7 --shape N=2 --backends naive,onednn --warmup 1 --iterations 2");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("[2,2,7,5]"), std::string::npos) << r.out;
  // Unbound, unknown and malformed names: clear errors naming the dimension.
  r = mosaic("info " + model + " --shape H=9");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("dimension 3 is symbolic ('W'); bind it with --shape W=N"), std::string::npos) << r.out;
  r = mosaic("info " + model + " --shape H=9 --shape W=7 --shape depth=4");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("no input has a symbolic dimension named 'depth' (symbolic: H, N, W)"), std::string::npos) << r.out;
  r = mosaic("info " + model + " --shape H9");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("--shape 'H9': expected NAME=N"), std::string::npos) << r.out;
  // Several names in one --shape; info says what each symbolic dimension was bound to.
  r = mosaic("info " + model + " --shape H=9,W=7,N=4");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("input:   x float32[4,1,9,7]  (symbolic: N=4, H=9, W=7)"), std::string::npos) << r.out;
  r = mosaic("info " + model + " --shape H=9,W=7,H=8");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("--shape: 'H' is bound twice (9 and 8)"), std::string::npos) << r.out;
  for (const char* bad : {"H=9,", "H=9,,W=7", "H=9,W=99999999999"}) {
    r = mosaic("info " + model + " --shape " + bad);
    EXPECT_EQ(r.code, 2) << bad;
    EXPECT_NE(r.out.find("expected NAME=N"), std::string::npos) << bad << ": " << r.out;
  }
}

}  // namespace

// ---- fail early and clearly (issue: verdicts users can trust) ----------------------------

TEST_F(Cli, NumberOptionsSayWhatTheyWant) {
  struct Case {
    std::string args, message;
  } cases[] = {
      {"info zoo:fmnist-cnn --batch 0", "mosaic: error: --batch: must be a positive integer, got 0"},
      {"info zoo:fmnist-cnn --batch -1", "mosaic: error: --batch: must be a positive integer, got -1"},
      {"info zoo:fmnist-cnn --batch abc", "mosaic: error: --batch: must be a positive integer, got abc"},
      {"bench zoo:fmnist-cnn --iterations 0", "mosaic: error: --iterations: must be a positive integer, got 0"},
      {"bench zoo:fmnist-cnn --threads -1", "mosaic: error: --threads: must be a non-negative integer, got -1"},
  };
  for (const auto& c : cases) {
    CmdResult r = mosaic(c.args);
    EXPECT_EQ(r.code, 2) << c.args;
    EXPECT_NE(r.out.find(c.message), std::string::npos) << c.args << "\n" << r.out;
    EXPECT_EQ(r.out.find("179769"), std::string::npos) << "no 309-digit bound:\n" << r.out;
  }
}

TEST_F(Cli, TyposGetSuggestions) {
  CmdResult r = mosaic("bnech zoo:fmnist-cnn");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("mosaic: error: unknown command 'bnech'"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("did you mean bench?"), std::string::npos) << r.out;
  r = mosaic("bench zoo:fmnist-cnn --iteration 3");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("did you mean --iterations?"), std::string::npos) << r.out;
}

TEST_F(Cli, AssignRefusesUnknownNodesAndFollowsFusedParts) {
  CmdResult r = mosaic("bench zoo:fmnist-cnn --assign @conv9=onednn --batch 2 --iterations 1 --warmup 0");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("has no node named 'conv9' (nodes: conv1, relu1"), std::string::npos) << r.out;
  // conv1 is fused with relu1: the fused node follows @conv1.
  r = mosaic("bench zoo:fmnist-cnn --assign @conv1=onednn,*=naive --batch 2 --iterations 1 --warmup 0");
  ASSERT_EQ(r.code, 0) << r.out;
  std::istringstream lines(r.out);
  bool seen = false;
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("conv1+relu1 ", 0) == 0) {
      seen = true;
      EXPECT_NE(line.find(" onednn "), std::string::npos) << line;
    }
  EXPECT_TRUE(seen) << r.out;
}

TEST_F(Cli, BadOutputsAndFlagsAreRefusedBeforeAnyWork) {
  const std::string json = path("r.json");
  struct Case {
    std::string args, message;
  } cases[] = {
      {"bench zoo:fmnist-cnn --json " + dir_.string(), "is a directory, not a file"},
      {"bench zoo:fmnist-cnn --json " + json + " --csv " + json, "--json and --csv name the same file"},
      {"bench zoo:fmnist-cnn --csv /nonexistent/r.csv", "directory /nonexistent does not exist"},
      {"bench zoo:fmnist-cnn --mode training --optimizer adamm", "unknown optimizer 'adamm'"},
      {"bench zoo:fmnist-cnn --assign Conv=onednn --backends naive", "--assign and --backends exclude each other"},
      {"train zoo:fmnist-cnn --json /nonexistent/t.json", "directory /nonexistent does not exist"},
      {"train zoo:fmnist-cnn --data synthetic:8,1,28,28,10 --optimizer adam --momentum 0.9",
       "optimizer adam has no hyperparameter 'momentum' (it reads: lr, beta1, beta2, eps, weight_decay)"},
      {"gradcheck zoo:fmnist-cnn --json " + dir_.string(), "is a directory"},
  };
  for (const auto& c : cases) {
    CmdResult r = mosaic(c.args);
    EXPECT_EQ(r.code, 2) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find(c.message), std::string::npos) << c.args << "\n" << r.out;
    EXPECT_EQ(r.out.find("benchmarking"), std::string::npos) << "refused before timing: " << c.args;
  }
  EXPECT_FALSE(fs::exists(json)) << "no partial report";
  CmdResult r = mosaic("bench zoo:fmnist-cnn --no-check --rtol 0.1 --batch 1 --iterations 1 --warmup 0 --backends naive");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("warning: --rtol/--atol have no effect with --no-check"), std::string::npos) << r.out;
}

TEST_F(Cli, OptAcceptsStandardHyperparameterNames) {
  CmdResult r = mosaic("train zoo:fmnist-cnn --data synthetic:8,1,28,28,10 --optimizer adam --opt beta1=0.8,beta2=0.99,"
                       "eps=1e-7,lr=0.002 --batch 4 --epochs 1 --no-eval");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("with backend onednn: adam, lr 0.002"), std::string::npos) << "default backend named:\n" << r.out;
}

TEST_F(Cli, InfoComputesSizesWithoutAllocatingThem) {
  CmdResult r = mosaic("info zoo:fmnist-cnn --batch 100000000 --no-nodes");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("input float32[100000000,1,28,28]"), std::string::npos) << r.out;
  r = mosaic("bench zoo:fmnist-cnn --batch 100000000 --backends naive");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("mosaic: error: out of memory: could not allocate"), std::string::npos) << r.out;
  // Past the largest tensor Mosaic accepts (16 TiB) the size is refused, naming the node.
  r = mosaic("info zoo:fmnist-cnn --batch 1000000000 --no-nodes");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("node 'conv1' (Conv): output 0 'conv1.out': shape [1000000000,32,28,28] is too large"),
            std::string::npos)
      << r.out;
}

TEST_F(Cli, InfoListsParameterNamesAndFullNodeNames) {
  CmdResult r = mosaic("info zoo:fmnist-cnn --batch 1");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("conv1.weight"), std::string::npos) << "parameter names for --freeze:\n" << r.out;
}

TEST_F(Cli, ZooResnet50IsTorchvisionsLayout) {
  // torchvision's ResNet-50: 25,557,032 parameters (its model card) plus the 53,120 running
  // statistics of its 53 BatchNormalization layers; 4.09 G multiply-adds per 224x224 image.
  CmdResult r = mosaic("info zoo:resnet50 --no-nodes");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("params:  25,610,152"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Add 16 BatchNormalization 53 Conv 53 Flatten 1 Gemm 1 GlobalAveragePool 1 MaxPool 1 Relu 49"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("(4108.82 M multiply-adds per image)"), std::string::npos) << r.out;
}

TEST_F(Cli, ZooResnet50RunsOnOnednnAsTheOracleDoes) {
  // Activations keep their scale through the 16 residual blocks (kaiming-normal weights), so
  // the check against naive compares numbers, not zeros. About 40 s on 2 cores (naive's 4.1 G
  // multiply-adds): in scripts/test.sh --full.
  const std::string json = path("resnet50.json");
  CmdResult r = mosaic("bench zoo:resnet50 --backends onednn --batch 1 --iterations 1 --warmup 0 --repeats 1 --no-peaks --json " +
             json);
  ASSERT_EQ(r.code, 0) << r.out;
  const nlohmann::json check = read_json(json)["runs"][0]["check"];
  EXPECT_TRUE(check["passed"].get<bool>()) << check.dump();
  // Rounding differences of about 1e-5 on logits of unit scale (uniform fan-in weights left
  // them near 1e-4 and the differences near 1e-8, within any absolute tolerance).
  EXPECT_GT(check["max_abs_error"].get<double>(), 1e-7) << "outputs near zero would compare trivially";
}

TEST_F(Cli, PluginPathWithoutSlashIsAFile) {
  const std::string lib = "libmosaic_lion.so";
  fs::copy_file(std::string(MOSAIC_PLUGIN_DIR) + "/examples/custom_optimizer/" + lib, dir_ / lib);
  CmdResult r = mosaic("optcheck --optimizer-plugin " + lib + " --model none --onnx-data " + path("none"));
  EXPECT_NE(r.out.find("cannot open shared object"), std::string::npos) << "not in the working directory:\n" << r.out;
  const std::string cmd = "cd " + dir_.string() + " && ";
  FILE* p = popen((cmd + MOSAIC_BIN + " optcheck --optimizer-plugin " + lib + " --model none 2>&1").c_str(), "r");
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  EXPECT_EQ(WEXITSTATUS(pclose(p)), 0) << out;
  EXPECT_NE(out.find("optcheck lion"), std::string::npos) << out;
}

TEST_F(Cli, VerifyThatVerifiedNothingFails) {
  const std::string suite = "/usr/share/libonnx-testdata/data/node";
  if (!fs::exists(suite)) GTEST_SKIP() << "libonnx-testdata not installed";
  CmdResult r = mosaic("verify " + suite + " --filter nomatchxyz");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--filter 'nomatchxyz' matches none of the"), std::string::npos) << r.out;
  r = mosaic("verify " + suite + " --filter '^test_argmax_default_axis_example$' --backend onednn");
  EXPECT_EQ(r.code, 3) << r.out;
  EXPECT_NE(r.out.find("nothing was verified: all 1 case runs were UNSUPPORTED on onednn"), std::string::npos) << r.out;
}


TEST_F(Cli, VerifyPerNodeAgreesOnEveryBackendAtBatch64) {
  // Batch 64: random activations then hold max-pool windows with two values within 2^-18,
  // which naive used to route to the exact maximum and the optimised backends to the first
  // (a false "pool1 diverges" on both). Every backend now follows one tie rule.
  CmdResult r = mosaic("verify zoo:fmnist-cnn --per-node --backend all --batch 64");
  EXPECT_EQ(r.code, 0) << r.out;
  for (const auto& b : cli_all_backends())
    EXPECT_NE(r.out.find("all 10 nodes that ran on " + b + " agree with naive"), std::string::npos) << b << "\n" << r.out;
  EXPECT_NE(r.out.find("rel L2"), std::string::npos) << r.out;
}

TEST_F(Cli, BenchNamesTheFirstDivergentNode) {
  // An impossible tolerance makes bench's check fail: the report names the first node that
  // diverges on its own, in the console and in the JSON.
  const std::string json = path("div.json");
  CmdResult r = mosaic("bench zoo:fmnist-cnn --batch 2 --iterations 1 --warmup 0 --rtol 1e-12 --atol 1e-15 --backends im2col --json " +
                       json);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("check:   first divergent node: 'conv1+relu1' (Conv) on im2col"), std::string::npos) << r.out;
  std::ifstream jf(json);
  auto j = nlohmann::json::parse(jf);
  EXPECT_NE(j["runs"][0]["check"]["first_divergent_node"].get<std::string>().find("conv1+relu1"), std::string::npos);
}


TEST_F(Cli, VerifyPerNodeComparesQuantisedCodesAndSaysWhyNoBackward) {
  // A QOperator model: its QLinearConv nodes give uint8 codes, which the per-node audit used
  // to skip (only float32 outputs were compared), so onednn's racing int8 1x1 convolution
  // passed it. Codes are compared exactly now; the model ends in logits but naive cannot
  // train QuantizeLinear, so the backward audit is skipped saying why, not failed.
  const std::string model =
      std::string(MOSAIC_SOURCE_DIR) + "/tests/corpus/quantised/cases_qoperator/zoo_fmnist-cnn.qop/model.onnx";
  CmdResult r = mosaic("verify " + model + " --per-node --backend onednn --rtol 0 --atol 0");
  EXPECT_EQ(r.code, 0) << r.out;
  for (const char* row : {"conv1_quant             QLinearConv        onednn             0",
                          "conv2_quant             QLinearConv        onednn             0",
                          "input_QuantizeLinear    QuantizeLinear     onednn             0"})
    EXPECT_NE(r.out.find(row), std::string::npos) << row << "\n" << r.out;
  // 7 nodes (the two MaxPools on uint8 codes among them: backends/common/pooling_bytes.cpp), and
  // the two QGemm (exactly, at atol 0) where oneDNN's int8 sums are exact.
  EXPECT_TRUE(r.out.find("all 7 nodes that ran on onednn agree with naive") != std::string::npos ||
              r.out.find("all 9 nodes that ran on onednn agree with naive") != std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("pool1                   MaxPool            onednn             0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("no backward audit: naive cannot train it"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("has no backward for QuantizeLinear"), std::string::npos) << r.out;
}

TEST_F(Cli, VerifyDeterminismAudit) {
  CmdResult r = mosaic("verify zoo:fmnist-cnn --determinism --deterministic --backend all --batch 8 --quiet");
  EXPECT_EQ(r.code, 0) << r.out;
  for (const auto& b : cli_all_backends())
    EXPECT_NE(r.out.find("== zoo:fmnist-cnn on " + b + " (deterministic plans)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("repeated, "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("gradients 8/8 bitwise identical"), std::string::npos) << r.out;
  r = mosaic("verify zoo:fmnist-cnn --deterministic");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("--deterministic only applies to --determinism"), std::string::npos) << r.out;
}


TEST_F(Cli, InterruptedPipedTrainKeepsWhatItPrinted) {
  // stdout into a file, the process killed mid-run: with full buffering the file stayed
  // empty; line buffering keeps the start-up line.
  const std::string out = path("train.txt");
  const std::string cmd = "timeout -s TERM 4 " + std::string(MOSAIC_BIN) +
                          " train zoo:fmnist-cnn --data synthetic:3000,1,28,28,10 --epochs 1000 --backend naive --no-eval > " +
                          out + " 2>/dev/null";
  EXPECT_NE(std::system(cmd.c_str()), 0) << "killed by timeout";
  std::ifstream f(out);
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("training zoo:fmnist-cnn on synthetic"), std::string::npos) << "'" << text << "'";
}

/// The API names options in backquotes, the CLI prints their flags (cli::with_flags).
TEST(CliFlags, ApiFieldNamesBecomeFlags) {
  EXPECT_EQ(cli::with_flags("`target_accuracy` needs the test accuracy of each epoch; it excludes `evaluate` false"),
            "--target-accuracy needs the test accuracy of each epoch; it excludes --no-eval");
  EXPECT_EQ(cli::with_flags("`shapes` 'n=x': expected NAME=N"), "--shape 'n=x': expected NAME=N");
  EXPECT_EQ(cli::with_flags("`output` /tmp: is a directory"), "-o /tmp: is a directory");
  // Only a backquoted name is a field: text and other quotes stay as they are.
  EXPECT_EQ(cli::with_flags("model `a b`, mode training, `` and `Upper`"), "model `a b`, mode training, `` and `Upper`");
  EXPECT_EQ(cli::with_flags("an unclosed `mode"), "an unclosed `mode");
  // End to end: the API's message reaches the terminal with the flag.
  CmdResult r = mosaic("train zoo:fmnist-cnn --data synthetic:8,1,28,28,10 --target-accuracy 0.5 --no-eval");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("--target-accuracy needs the test accuracy of each epoch; it excludes --no-eval"), std::string::npos)
      << r.out;
}

}  // namespace mosaic::test
