// The cuda backend (backends/cuda/, a bundled plugin where CMake found nvcc, cuBLAS and cuDNN).
// Without a GPU (the development machines, CI) it is listed with the reason it cannot run and
// refused by name before any work; on a GPU (scripts/gpu-check.sh) its kernels run against
// the naive oracle. A build without CUDA refuses it naming why it was not built.
//
// Where a GPU is present the test process loads the plugin before the parameterised suites
// are instantiated (as tests/test_torch.cpp does for torch), so BackendOps runs every op case
// on cuda against naive ("AllOps/BackendOps.EveryCaseMatchesNaive/cuda"), and the training
// suites (OptimisedBackward, WholeNetwork, GradcheckBackends) take it among the backends that
// train (test_util.hpp training_backends: its device keeps gradients, Device::zero and
// accumulate). The kernels' formulas and indexing are checked on every machine by
// tests/test_cuda_math.cpp.
#include <cmath>
#include <cstdlib>

#include "metrics/compare.hpp"
#include "operators/quantize.hpp"
#include "test_util.hpp"

namespace mosaic::test {
namespace {

#ifdef MOSAIC_CUDA_PLUGIN
/// The plugin's path: MOSAIC_CUDA_PLUGIN in the environment (the GPU machine runs this binary
/// from scripts/gpu-check.sh's bundle, elsewhere than it was built), else the build's.
std::string cuda_plugin_path() {
  const char* env = std::getenv("MOSAIC_CUDA_PLUGIN");
  return env && *env ? env : MOSAIC_CUDA_PLUGIN;
}

// Before main: gtest evaluates the suites' backend lists in InitGoogleTest. Without a GPU the
// backend registers as unavailable and the suites leave it out.
const Status kLoaded = process_tests_backend("cuda") ? load_plugin(cuda_plugin_path()) : Status::ok();
#endif

bool cuda_built() {
  for (const std::string& p : bundled_plugins())
    if (bundled_backend_name(p) == "cuda") return true;
  return false;
}

bool cuda_available() {
  const auto names = bundled_available_backends();
  return std::find(names.begin(), names.end(), "cuda") != names.end();
}

/// What `mosaic backends` says of cuda: its line and the one after it.
std::string cuda_listing() {
  const CmdResult r = mosaic("backends");
  const size_t at = r.out.find("\ncuda ");
  if (at == std::string::npos) return r.out;
  const size_t end = r.out.find('\n', r.out.find('\n', at + 1) + 1);
  return r.out.substr(at + 1, end == std::string::npos ? std::string::npos : end - at - 1);
}

class CudaBackend : public ScratchDirTest {
 protected:
  CudaBackend() : ScratchDirTest("mosaic_cuda_") {}
  /// Corpus case `dir`/`name` verified on cuda (naive taking what it declines) against its
  /// reference outputs, then benched there with bench's check passing (`tolerance`: flags for
  /// both): the run's JSON, whose nodes say where each ran (null where bench failed).
  nlohmann::json verified_on_cuda(const std::string& dir, const std::string& name, const std::string& tolerance) {
    CmdResult r = mosaic("verify " + dir + name + " --backend cuda --fallback naive" + tolerance);
    EXPECT_EQ(r.code, 0) << name << "\n" << r.out;
    const std::string json = path(name + ".json");
    r = mosaic("bench " + dir + name + "/model.onnx --backends cuda --fallback naive --batch 1 --warmup 0 --iterations 2 "
               "--repeats 1 --no-peaks --no-db" + tolerance + " --json " + json);
    EXPECT_EQ(r.code, 0) << name << "\n" << r.out;
    if (r.code != 0) return nullptr;
    const nlohmann::json doc = read_json(json);
    EXPECT_TRUE(doc["runs"][0]["check"]["passed"].get<bool>()) << name << " " << doc["runs"][0]["check"].dump();
    return doc["runs"][0];
  }
};

TEST_F(CudaBackend, WithoutAGpuItIsListedWithTheReasonAndRefusedByName) {
  if (!cuda_built()) {
    const CmdResult r = mosaic("bench zoo:fmnist-cnn --backends cuda --batch 2");
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find("unknown backend 'cuda'"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("this build has no cuda backend: "), std::string::npos) << r.out;
    return;
  }
  const std::string listing = cuda_listing();
  EXPECT_NE(listing.find("computes on cuda:0"), std::string::npos) << listing;
  EXPECT_NE(listing.find("CUDA runtime 13."), std::string::npos) << listing;
  EXPECT_NE(listing.find("cuDNN 9."), std::string::npos) << listing;
  if (cuda_available()) GTEST_SKIP() << "a GPU is here: CudaBackend.OnAGpuModelsMatchNaive checks the backend";
  EXPECT_NE(listing.find("unavailable here: no "), std::string::npos) << listing;
  CmdResult r = mosaic("bench zoo:fmnist-cnn --backends cuda --batch 2");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("backend 'cuda' is unavailable here: no "), std::string::npos) << r.out;
  r = mosaic("plan zoo:fmnist-cnn --backend cuda");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("backend cuda is unavailable here: no "), std::string::npos) << r.out;
  r = mosaic("bench zoo:fmnist-cnn --assign Gemm=cuda,*=onednn --batch 2");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("unavailable here"), std::string::npos) << r.out;
  r = mosaic("backends --names --available");
  EXPECT_EQ(r.out.find("cuda"), std::string::npos) << "all leaves it out: " << r.out;
}

#ifdef MOSAIC_CUDA_PLUGIN
TEST_F(CudaBackend, LoadsIntoTheTestProcessAndJoinsTheOpSuitesOnlyWithAGpu) {
  if (!process_tests_backend("cuda")) GTEST_SKIP() << "this process's --gtest_filter does not name cuda (ctest's names the test)";
  ASSERT_TRUE(kLoaded.is_ok()) << kLoaded.to_string();
  ASSERT_TRUE(builtin_registry().has_backend("cuda")) << "the filter names cuda: the plugin is loaded";
  const auto ops = optimised_backends();
  const bool in_ops = std::find(ops.begin(), ops.end(), "cuda") != ops.end();
  EXPECT_EQ(in_ops, cuda_available()) << "BackendOps runs on cuda exactly where a GPU is";
  const auto train = training_backends(true);
  const bool in_train = std::find(train.begin(), train.end(), "cuda") != train.end();
  EXPECT_EQ(in_train, cuda_available()) << "the training suites run on cuda exactly where a GPU is";
  EXPECT_NE(std::find(train.begin(), train.end(), "naive"), train.end());
}
#endif

#ifdef MOSAIC_CUDA_PLUGIN

// A pointwise convolution runs as cuDNN's algorithm or as one strided-batched cuBLAS product,
// whichever its timing at build picked, and so do its backward passes (dx as one product, dw
// as one per image added in order); each way (MOSAIC_CUDA_POINTWISE) against naive, forward
// and in training.
TEST_F(CudaBackend, OnAGpuPointwiseConvolutionsMatchNaiveEitherWay) {
  if (!cuda_available()) GTEST_SKIP() << "no GPU here: " << cuda_listing();
  ASSERT_TRUE(builtin_registry().has_backend("cuda"));
  OpCase c;
  c.label = "pointwise";
  c.node = make_node("Conv");
  c.inputs = {random_tensor({5, 16, 7, 9}, 61), random_tensor({24, 16, 1, 1}, 62), random_tensor({24}, 63)};
  c.is_const = {false, true, true};
  std::vector<Tensor> want;
  ASSERT_TRUE(run_on(c, "naive", &want).is_ok());
  for (const char* how : {"gemm", "cudnn"}) {
    SCOPED_TRACE(how);
    setenv("MOSAIC_CUDA_POINTWISE", how, 1);
    std::vector<Tensor> got;
    const Status st = run_on(c, "cuda", &got);
    ASSERT_TRUE(st.is_ok()) << st.to_string();
    const Agreement a = compare_tensors(got[0], want[0], 1e-4, 1e-5);
    EXPECT_TRUE(a.ok) << a.message;
  }
  const Tensor dy = random_tensor({5, 24, 7, 9}, 64);
  unsetenv("MOSAIC_CUDA_POINTWISE");
  const std::vector<Tensor> train_want = training_step(c, "naive", dy);
  ASSERT_EQ(train_want.size(), 4u) << "y, dx, dw, db";
  for (const char* how : {"gemm", "cudnn"}) {
    SCOPED_TRACE(std::string("training, ") + how);
    setenv("MOSAIC_CUDA_POINTWISE", how, 1);
    const std::vector<Tensor> train_got = training_step(c, "cuda", dy);
    ASSERT_EQ(train_got.size(), train_want.size());
    for (size_t i = 0; i < train_got.size(); ++i) {
      const Agreement a = compare_tensors(train_got[i], train_want[i], 1e-4, 1e-5);
      EXPECT_TRUE(a.ok) << "y, dx, dw, db [" << i << "]: " << a.message;
    }
  }
  unsetenv("MOSAIC_CUDA_POINTWISE");
}
#endif

#ifdef MOSAIC_CUDA_PLUGIN
// Running out of the GPU's memory is an error naming the buffer's value, the node that writes
// it and the bytes asked for, not a crash: a Gemm whose [400000, 100000] output (160 GB) is
// more than an H100's or H200's memory, reduced to a small output.
TEST_F(CudaBackend, OnAGpuRunningOutOfMemoryNamesTheNodeAndTheBytes) {
  if (!cuda_available()) GTEST_SKIP() << "no GPU here: " << cuda_listing();
  Graph g;
  g.source = "huge.onnx";
  g.inputs.push_back(ValueInfo{"x", DType::kF32, {400000, 1}, {}, true});
  g.initializers["w"] = random_tensor({1, 100000}, 71);
  add_node(g, make_node("Gemm"), {"x", "w"}, {"y"}, "gemm");
  add_node(g, make_node("ReduceMean", {{"axes", Attribute::of_ints({1})}, {"keepdims", Attribute::of_int(0)}}), {"y"},
           {"m"}, "mean");
  g.outputs.push_back(ValueInfo{"m", DType::kF32, {}, {}, false});
  ASSERT_TRUE(prepare_graph(g, builtin_registry(), PrepareOptions{}).ok());
  auto plan = Plan::build(g, Placement::all_on("cuda", {}), builtin_registry());
  ASSERT_FALSE(plan.ok()) << "160 GB on one GPU";
  const std::string m = plan.status().message();
  EXPECT_NE(m.find("huge.onnx: activation buffer of 160000000000 bytes on cuda:0 for 'y' (the output of node 'gemm' "
                   "(Gemm))"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("out of device memory on cuda:0: 160000000000 bytes asked for"), std::string::npos) << m;
  // The device is left usable: a plan that fits builds and runs after it.
  OpCase c;
  c.node = make_node("Relu");
  c.inputs = {random_tensor({3, 5}, 72)};
  std::vector<Tensor> want, got;
  ASSERT_TRUE(run_on(c, "naive", &want).is_ok());
  const Status st = run_on(c, "cuda", &got);
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  EXPECT_TRUE(compare_tensors(got[0], want[0], 0, 0).ok);
}
#endif

// --find-max-batch on the GPU: bounded by the device's memory (here a 256 MiB limit), the batch
// it finds confirmed by a real run on the GPU, in inference and training.
TEST_F(CudaBackend, OnAGpuFindMaxBatchStaysWithinTheLimitOnTheDevice) {
  if (!cuda_built()) GTEST_SKIP() << "this build has no cuda backend";
  if (!cuda_available()) GTEST_SKIP() << "no GPU here: " << cuda_listing();
  for (const char* mode : {"inference", "training"}) {
    SCOPED_TRACE(mode);
    const std::string json = path(std::string("max-") + mode + ".json");
    CmdResult r = mosaic(std::string("bench zoo:fmnist-cnn --backends cuda --find-max-batch --memory-limit 256M --mode ") +
                         mode + " --json " + json);
    ASSERT_EQ(r.code, 0) << r.out;
    const nlohmann::json c = read_json(json)["configs"][0];
    EXPECT_EQ(c["device"], "cuda:0") << c.dump();
    const int64_t limit = c["device_limit_bytes"].get<int64_t>();
    EXPECT_EQ(limit, int64_t{256} << 20) << c.dump();
    EXPECT_GT(c["max_batch"].get<int64_t>(), 1) << c.dump();
    EXPECT_LE(c["accounted_bytes"].get<int64_t>(), limit) << c.dump();
    EXPECT_GT(c["next_accounted_bytes"].get<int64_t>(), limit) << c.dump();
  }
}

TEST_F(CudaBackend, OnAGpuModelsMatchNaive) {
  if (!cuda_built()) GTEST_SKIP() << "this build has no cuda backend";
  if (!cuda_available()) GTEST_SKIP() << "no GPU here: " << cuda_listing();
  for (const char* model : {"zoo:fmnist-cnn", "zoo:alexnet-cifar", "zoo:bert-tiny"}) {
    const std::string json = path(std::string(model).substr(4) + ".json");
    CmdResult r = mosaic(std::string("bench ") + model + " --backends cuda --batch 4 --no-peaks --iterations 3 "
                         "--warmup 1 --repeats 1 --json " + json);
    ASSERT_EQ(r.code, 0) << model << "\n" << r.out;
    const nlohmann::json doc = read_json(json);
    EXPECT_TRUE(doc["runs"][0]["check"]["passed"].get<bool>()) << model << " " << doc["runs"][0]["check"].dump();
    int on_cuda = 0;
    for (const auto& n : doc["runs"][0]["nodes"]) on_cuda += n["backend"] == "cuda";
    EXPECT_GT(on_cuda, 0) << model;
  }
  CmdResult r = mosaic("plan zoo:fmnist-cnn --backend cuda");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("host -> cuda:0"), std::string::npos) << r.out;
  // TF32 (--precision tf32): the configuration is labelled cuda-tf32 and checked against the
  // float32 oracle within kTf32Tolerance of the output's scale; onednn declines it.
  r = mosaic("bench zoo:vgg16-cifar --backends cuda,onednn --precision tf32 --batch 8 --no-peaks --iterations 3 "
             "--warmup 1 --repeats 1");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("cuda-tf32"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("check:   tf32 within 1% of naive's float32 outputs"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tf32 declined by onednn"), std::string::npos) << r.out;
}

// Issue 52: the integer products, QuantizeLinear, DequantizeLinear and the code lookups on
// the GPU, code for code the oracle's (the host runs the same plans and formulas with a plain
// product for cuBLAS's: tests/test_cuda_int8_math.cpp); then a QDQ file's convolutions and
// `bench --precision int8` in int8 on cuda.
TEST_F(CudaBackend, OnAGpuIntegerOpsMatchNaive) {
  if (!cuda_built()) GTEST_SKIP() << "this build has no cuda backend";
  if (!cuda_available()) GTEST_SKIP() << "no GPU here: " << cuda_listing();
  std::vector<OpCase> cases = int8_product_cases();
  const Tensor x = random_tensor({2, 3, 1000}, 5, -40.f, 40.f);
  for (DType t : {DType::kU8, DType::kI8}) {
    const Tensor s = Tensor::from_f32({3}, {0.5f, 0.25f, 0.125f});
    const Tensor z = typed(t, {3}, t == DType::kU8 ? std::vector<double>{128, 0, 255} : std::vector<double>{0, -100, 90});
    OpCase q = op_case("QuantizeLinear", {x, s, z}, {{"axis", Attribute::of_int(1)}});
    q.is_const = {false, true, true};
    cases.push_back(q);
    std::vector<Tensor> codes;
    ASSERT_TRUE(run_on(q, "naive", &codes).is_ok());
    OpCase dq = op_case("DequantizeLinear", {codes[0], Tensor::from_f32({}, {0.3f}), typed(t, {}, {7})});
    dq.is_const = {false, true, true};
    cases.push_back(dq);
    std::vector<double> table(256);
    for (int i = 0; i < 256; ++i) table[static_cast<size_t>(i)] = (i * 37 + 11) % 256 - (t == DType::kI8 ? 128 : 0);
    OpCase lookup = op_case(kCodeLookupOp, {codes[0], typed(t, {256}, table)});
    lookup.node.domain = kCodeLookupDomain;
    lookup.is_const = {false, true};
    cases.push_back(lookup);
  }
  // DynamicQuantizeLinear: a range over many blocks (NaN passed over), and one of a few values.
  Tensor big = random_tensor({3, 70001}, 6, -3.f, 11.f);
  big.f32()[1234] = NAN;
  cases.push_back(op_case("DynamicQuantizeLinear", {big}, {}, 21, {"y", "y_scale", "y_zero_point"}));
  cases.push_back(op_case("DynamicQuantizeLinear", {Tensor::from_f32({3}, {-0.5f, 0.f, 0.25f})}, {}, 21,
                          {"y", "y_scale", "y_zero_point"}));
  for (const OpCase& c : cases) {
    std::vector<Tensor> want, got;
    ASSERT_TRUE(run_on(c, "naive", &want).is_ok()) << c.label;
    const Status st = run_on(c, "cuda", &got);
    ASSERT_TRUE(st.is_ok()) << c.label << ": " << st.to_string();
    ASSERT_EQ(got.size(), want.size()) << c.label;
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(got[i].dtype(), want[i].dtype()) << c.label << " output " << i;
      EXPECT_EQ(values_of(got[i]), values_of(want[i])) << c.label << " output " << i;
    }
  }
  // A QDQ file (ONNX Runtime's form): its two convolutions become QLinearConv on cuda, and
  // the outputs pass the check within a quantisation step.
  const std::string model = std::string(MOSAIC_SOURCE_DIR) + "/tests/corpus/quantised/cases/zoo_fmnist-cnn.qdq/model.onnx";
  const std::string json = path("qdq.json");
  CmdResult r = mosaic("bench " + model + " --backends cuda --batch 4 --warmup 0 --iterations 2 --no-peaks --no-db --json " + json);
  ASSERT_EQ(r.code, 0) << r.out;
  const nlohmann::json doc = read_json(json);
  EXPECT_TRUE(doc["runs"][0]["check"]["passed"].get<bool>()) << doc["runs"][0]["check"].dump();
  int integer = 0;
  for (const auto& n : doc["runs"][0]["nodes"]) integer += n["op"] == "QLinearConv" && n["backend"] == "cuda";
  EXPECT_EQ(integer, 2) << r.out;
  // bench's int8 twin, calibrated on the fly.
  r = mosaic("bench zoo:vgg16-cifar --backends cuda --precision int8 --batch 8 --no-peaks --iterations 3 --warmup 1 --repeats 1");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("cuda-int8"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("check:   int8 within 3% of naive's int8 outputs"), std::string::npos) << r.out;
}

// The com.microsoft QOperator element-wise ops on cuda (issue 52): the host-checked cases
// (tests/test_cuda_qlinear_math.cpp) on the device, code for code against naive; then ONNX
// Runtime's QOperator files, where every such op must run on cuda and the outputs agree with
// ONNX Runtime's within a quantisation step.
TEST_F(CudaBackend, OnAGpuQOperatorOpsMatchNaive) {
  if (!cuda_built()) GTEST_SKIP() << "this build has no cuda backend";
  if (!cuda_available()) GTEST_SKIP() << "no GPU here: " << cuda_listing();
  for (const OpCase& c : qlinear_elementwise_cases()) {
    std::vector<Tensor> want, got;
    ASSERT_TRUE(run_on(c, "naive", &want).is_ok()) << c.label;
    const Status st = run_on(c, "cuda", &got);
    ASSERT_TRUE(st.is_ok()) << c.label << ": " << st.to_string();
    ASSERT_EQ(got[0].dtype(), want[0].dtype()) << c.label;
    EXPECT_EQ(values_of(got[0]), values_of(want[0])) << c.label;
  }
  const std::string dir = std::string(MOSAIC_SOURCE_DIR) + "/tests/corpus/quantised/cases_qoperator/";
  for (const char* name : {"resnet_hf.torchscript.qop", "timm_efficientnet.torchscript.qop",
                           "timm_mobilenetv3.torchscript.qop", "tv_shufflenet.torchscript.qop", "vit.torchscript.qop"}) {
    const nlohmann::json run = verified_on_cuda(dir, name, "");
    if (run.is_null()) continue;
    int ops = 0, on_cuda = 0;
    for (const auto& n : run["nodes"]) {
      const std::string op = n["op"].get<std::string>();
      if (op == "QLinearAdd" || op == "QLinearMul" || op == "QLinearSigmoid" || op == "QLinearGlobalAveragePool" ||
          op == "QLinearConcat" || op == "QLinearSoftmax") {
        ++ops;
        on_cuda += n["backend"] == "cuda";
      }
    }
    EXPECT_GT(ops, 0) << name;
    EXPECT_EQ(on_cuda, ops) << name << ": " << on_cuda << " of " << ops << " QOperator element-wise nodes on cuda";
  }
}

// --precision fp16 and bf16 on cuda (issue 52): Gemm (each transpose, alpha, beta, a row of
// C), MatMul (a batch over one constant weight; two batched operands) and Conv (groups,
// strides, dilations, a bias; pads that differ between an axis's ends, padded first) read
// float16 or bfloat16 copies of their operands and sum in float32. Against naive on the
// operands rounded as the plan rounds them (ir/elements.hpp): within float32's summation
// error, plus for a convolution its output's one rounding to 16 bits (no bias: every output is
// then a 16-bit value) and a little for its algorithm's transforms; and, for the products, farther from float32's own result than that,
// which says the 16-bit path ran at all (a plan that ignored the precision would pass the
// first check only by luck). Then bench's twins on a model, checked within their tolerances.
std::vector<OpCase> float16_product_cases() {
  std::vector<OpCase> cases;
  for (int t = 0; t < 4; ++t) {
    const bool ta = t & 1, tb = t & 2;
    OpCase g = op_case("Gemm", {random_tensor(ta ? Shape{96, 33} : Shape{33, 96}, 11 + t),
                                random_tensor(tb ? Shape{40, 96} : Shape{96, 40}, 21 + t), random_tensor({40}, 31)},
                       {{"transA", Attribute::of_int(ta)}, {"transB", Attribute::of_int(tb)},
                        {"alpha", Attribute::of_float(0.75f)}, {"beta", Attribute::of_float(1.5f)}});
    g.is_const = {false, t != 1, true};
    g.label = "Gemm transA=" + std::to_string(ta) + " transB=" + std::to_string(tb);
    cases.push_back(g);
  }
  OpCase shared = op_case("MatMul", {random_tensor({3, 5, 17, 64}, 41), random_tensor({64, 24}, 42)});
  shared.is_const = {false, true};
  shared.label = "MatMul over a constant weight";
  cases.push_back(shared);
  OpCase both = op_case("MatMul", {random_tensor({4, 9, 80}, 43), random_tensor({4, 80, 12}, 44)});
  both.label = "MatMul of two batched operands";
  cases.push_back(both);
  OpCase conv = op_case("Conv", {random_tensor({2, 8, 13, 11}, 51), random_tensor({12, 4, 3, 3}, 52)},
                        {{"group", Attribute::of_int(2)}, {"strides", Attribute::of_ints({2, 1})},
                         {"dilations", Attribute::of_ints({1, 2})}, {"pads", Attribute::of_ints({1, 2, 1, 2})}});
  conv.is_const = {false, true};
  conv.label = "Conv grouped, strided, dilated, no bias";
  cases.push_back(conv);
  OpCase uneven = op_case("Conv", {random_tensor({3, 5, 10, 10}, 53), random_tensor({7, 5, 2, 2}, 54),
                                   random_tensor({7}, 55)},
                          {{"strides", Attribute::of_ints({2, 2})}, {"pads", Attribute::of_ints({0, 0, 1, 1})}});
  uneven.is_const = {false, true, true};
  uneven.label = "Conv with a bias and uneven pads";
  cases.push_back(uneven);
  return cases;
}

TEST_F(CudaBackend, OnAGpuFloat16ProductsFollowFloat32) {
  if (!cuda_built()) GTEST_SKIP() << "this build has no cuda backend";
  if (!cuda_available()) GTEST_SKIP() << "no GPU here: " << cuda_listing();
  for (const Precision p : {Precision::kF16, Precision::kBF16}) {
    const bool half = p == Precision::kF16;
    auto round16 = [half](float v) { return half ? f16_to_f32(f32_to_f16(v)) : bf16_to_f32(f32_to_bf16(v)); };
    const double unit = half ? 1.0 / 2048 : 1.0 / 256;  // half a unit in the last place, relative
    PlanOptions po;
    po.precision = p;
    for (const OpCase& c : float16_product_cases()) {
      const std::string label = c.label + " in " + precision_name(p);
      const bool convolution = c.node.op_type == "Conv";
      OpCase rounded = c;
      for (size_t i = 0; i < rounded.inputs.size(); ++i) {
        if (convolution && i == 2) continue;  // a convolution's bias adds in float32
        if (c.node.op_type == "Gemm" && i == 2) continue;  // so does Gemm's C
        float* v = rounded.inputs[i].f32();
        for (int64_t e = 0; e < rounded.inputs[i].numel(); ++e) v[e] = round16(v[e]);
      }
      std::vector<Tensor> want, exact, got;
      ASSERT_TRUE(run_on(rounded, "naive", &want).is_ok()) << label;
      ASSERT_TRUE(run_on(c, "naive", &exact).is_ok()) << label;
      const Status st = run_on(c, "cuda", &got, po);
      ASSERT_TRUE(st.is_ok()) << label << ": " << st.to_string();
      const float* g = got[0].f32();
      const float* w = want[0].f32();
      const float* x = exact[0].f32();
      double scale = 0, off_rounded = 0, off_exact = 0;
      for (int64_t e = 0; e < want[0].numel(); ++e) scale = std::max(scale, std::fabs(double(w[e])));
      const double sums = 3e-5 * scale;  // float32 sums of under a hundred terms, in another order
      bool within = true, sixteen_bit = true;
      for (int64_t e = 0; e < want[0].numel(); ++e) {
        const double d = std::fabs(double(g[e]) - w[e]);
        off_rounded = std::max(off_rounded, d);
        off_exact = std::max(off_exact, std::fabs(double(g[e]) - x[e]));
        if (convolution) {
          // Its one rounding, and an eighth of a unit of the scale for the transforms of the
          // algorithm cuDNN's search picks (Winograd's, FFT's) in float32.
          within = within && d <= unit * (std::fabs(double(w[e])) + scale / 8) + sums;
          sixteen_bit = sixteen_bit && (c.inputs.size() > 2 || round16(g[e]) == g[e]);
        }
      }
      if (convolution) {
        EXPECT_TRUE(within) << label << ": " << off_rounded << " of " << scale;
        EXPECT_TRUE(sixteen_bit) << label << ": an output that is not a 16-bit value";
      } else {
        EXPECT_LE(off_rounded, sums) << label << " (scale " << scale << ")";
        EXPECT_GT(off_exact, 3 * sums) << label << ": as close to float32's result as 16-bit operands cannot be";
      }
    }
  }
  // The whole-model twins: labelled, checked against float32 within their tolerances;
  // onednn declines fp16 by name; training in bf16 on cuda is refused by node.
  CmdResult r = mosaic("bench zoo:vgg16-cifar --backends cuda,onednn --precision fp16 --batch 8 --no-peaks "
                       "--iterations 3 --warmup 1 --repeats 1 --no-db");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("cuda-fp16"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("check:   fp16 within 1% of naive's float32 outputs"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fp16 declined by onednn"), std::string::npos) << r.out;
  r = mosaic("bench zoo:bert-tiny --backends cuda --precision bf16 --batch 4 --no-peaks --iterations 3 --warmup 1 "
             "--repeats 1 --no-db");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("check:   bf16 within 3% of naive's float32 outputs"), std::string::npos) << r.out;
  // (Refused by node: the run fails, or those nodes fall back to naive, saying why.)
  r = mosaic("bench zoo:fmnist-cnn --backends cuda --mode training --precision bf16 --batch 4 --no-peaks --iterations 1 "
             "--no-db");
  EXPECT_NE(r.out.find("computes bf16 products for inference only"), std::string::npos) << r.out;
}

// float16 models (tests/corpus/half: ORT's converter applied to corpus exports) on cuda: every
// kernel that computes in float32 takes their float16 nodes widened in device memory and
// rounds each output once, as naive does on the host (backends/cuda/eltwise.cpp
// widen_float16), so the models match onnx's float16 reference at the corpus's tolerance and
// most of their nodes run on the GPU rather than on naive behind copies.
TEST_F(CudaBackend, OnAGpuFloat16ModelsRunThereAndMatchTheReference) {
  if (!cuda_built()) GTEST_SKIP() << "this build has no cuda backend";
  if (!cuda_available()) GTEST_SKIP() << "no GPU here: " << cuda_listing();
  const std::string dir = std::string(MOSAIC_SOURCE_DIR) + "/tests/corpus/half/cases/";
  for (const char* name : {"resnet_hf.torchscript.float16", "timm_vit.torchscript.float16", "gpt2.dynamo.float16"}) {
    const nlohmann::json run = verified_on_cuda(dir, name, " --rtol 1e-2 --atol 1e-3");
    if (run.is_null()) continue;
    int on_cuda = 0, nodes = 0;
    for (const auto& n : run["nodes"]) {
      on_cuda += n["backend"] == "cuda";
      ++nodes;
    }
    EXPECT_GT(2 * on_cuda, nodes) << name << ": " << on_cuda << " of " << nodes << " nodes on cuda";
  }
}

#ifdef MOSAIC_CUDA_PLUGIN
// Token ids are read on the device (an embedding lookup stays on the GPU): the rows are
// naive's, and an id outside the table fails the run with the host's message, naming the
// input, the id and its position, rather than reading outside the table.
TEST_F(CudaBackend, OnAGpuGatherReadsRunTimeIdsAndRefusesOnesOutsideTheTable) {
  if (!cuda_available()) GTEST_SKIP() << "no GPU here: " << cuda_listing();
  OpCase c;
  c.label = "embedding";
  c.node = make_node("Gather");
  c.inputs = {random_tensor({7, 5}, 71), Tensor::from_i64({2, 3}, {0, 6, -1, 3, 3, 2})};
  c.is_const = {true, false};
  std::vector<Tensor> want, got;
  ASSERT_TRUE(run_on(c, "naive", &want).is_ok());
  Status st = run_on(c, "cuda", &got);
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  const Agreement a = compare_tensors(got[0], want[0], 0, 0);
  EXPECT_TRUE(a.ok) << a.message;
  c.inputs[1].i64()[4] = 7;
  st = run_on(c, "cuda", &got);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("index 7 (element 4) is outside the gathered axis of size 7"), std::string::npos)
      << st.to_string();
}
#endif

/// Training on the GPU (`bench --mode training`): the backward kernels of the CNNs' and the
/// transformer's ops on cuda, the gradients checked against naive's, kept in the device's
/// memory.
TEST_F(CudaBackend, OnAGpuTrainingMatchesNaive) {
  if (!cuda_built()) GTEST_SKIP() << "this build has no cuda backend";
  if (!cuda_available()) GTEST_SKIP() << "no GPU here: " << cuda_listing();
  for (const char* model : {"zoo:fmnist-cnn", "zoo:alexnet-cifar", "zoo:bert-tiny"}) {
    const std::string json = path(std::string(model).substr(4) + "-train.json");
    CmdResult r = mosaic(std::string("bench ") + model + " --backends cuda --mode training --batch 4 --no-peaks "
                         "--iterations 2 --warmup 1 --repeats 1 --json " + json);
    ASSERT_EQ(r.code, 0) << model << "\n" << r.out;
    const nlohmann::json run = read_json(json)["runs"][0];
    EXPECT_TRUE(run["check"]["passed"].get<bool>()) << model << " " << run["check"].dump();
    int on_cuda = 0;
    for (const auto& n : run["nodes"]) on_cuda += n["backend"] == "cuda";
    EXPECT_GT(on_cuda, 0) << model;
    EXPECT_GT(run["memory"]["devices"]["cuda:0"]["gradient_bytes"].get<int64_t>(), 0) << run["memory"].dump();
  }
}

// mosaic train on the GPU: fmnist-cnn's parameters stay there with their gradients and Adam's
// state (the log's device_memory), every step's loss follows naive's, and a run checkpointed
// after epoch 1 and resumed takes the uninterrupted run's steps (deterministic algorithms, so
// that the two runs can be compared loss for loss).
TEST_F(CudaBackend, OnAGpuTrainKeepsParametersThereAndResumes) {
  if (!cuda_built()) GTEST_SKIP() << "this build has no cuda backend";
  if (!cuda_available()) GTEST_SKIP() << "no GPU here: " << cuda_listing();
  const std::string run = "train zoo:fmnist-cnn --data synthetic:96,1,28,28,10 --batch 16 --threads 1 --seed 2 "
                          "--deterministic --optimizer adam --lr 0.002 ";
  CmdResult r = mosaic(run + "--backend naive --epochs 2 --json " + path("naive.json"));
  ASSERT_EQ(r.code, 0) << r.out;
  r = mosaic(run + "--backend cuda --epochs 2 --json " + path("full.json"));
  ASSERT_EQ(r.code, 0) << r.out;
  r = mosaic(run + "--backend cuda --epochs 1 --checkpoint " + path("ck"));
  ASSERT_EQ(r.code, 0) << r.out;
  r = mosaic(run + "--backend cuda --epochs 2 --resume " + path("ck") + " --json " + path("resumed.json"));
  ASSERT_EQ(r.code, 0) << r.out;
  const nlohmann::json naive = read_json(path("naive.json")), full = read_json(path("full.json")),
                       resumed = read_json(path("resumed.json"));
  const nlohmann::json& gpu = full["device_memory"]["cuda:0"];
  EXPECT_GT(gpu["parameter_bytes"].get<int64_t>(), 0) << full["device_memory"].dump();
  EXPECT_EQ(gpu["optimizer_state_bytes"].get<int64_t>(), 2 * gpu["parameter_bytes"].get<int64_t>()) << "Adam's two averages";
  ASSERT_EQ(full["steps"].size(), naive["steps"].size());
  ASSERT_EQ(resumed["steps"].size(), full["steps"].size());
  for (size_t i = 0; i < full["steps"].size(); ++i) {
    const double want = naive["steps"][i]["loss"].get<double>(), got = full["steps"][i]["loss"].get<double>();
    EXPECT_NEAR(got, want, 1e-3 * std::abs(want)) << "step " << i + 1;
    EXPECT_EQ(resumed["steps"][i]["loss"].get<double>(), got) << "step " << i + 1;
  }
  EXPECT_NEAR(full["epochs"][1]["test_loss"].get<double>(), naive["epochs"][1]["test_loss"].get<double>(),
              1e-3 * std::abs(naive["epochs"][1]["test_loss"].get<double>()));
}

}  // namespace
}  // namespace mosaic::test
