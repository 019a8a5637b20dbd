// The library API (api/mosaic.hpp) called as an embedding program calls it: reports come back
// as values and agree with independent references (the naive oracle, ONNX expected outputs,
// finite differences), errors come back as a Status naming the bad input, and nothing is
// printed unless asked.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>

#include "api/mosaic.hpp"
#include "backends/plugin.hpp"
#include "core/inputs.hpp"
#include "test_util.hpp"

namespace mosaic::test {
namespace {

namespace fs = std::filesystem;
const std::string kNodeTests = "/usr/share/libonnx-testdata/data/node";
const std::string kFashion = "/usr/share/datasets/fashion-mnist";

/// The built-in backends (the test process may also hold plugins' backends).
std::vector<std::string> builtins() {
  std::vector<std::string> out;
  for (const auto& b : builtin_registry().backends())
    if (b == "naive" || b == "im2col" || b == "onednn") out.push_back(b);
  return out;
}

class Api : public ScratchDirTest {
 protected:
  Api() : ScratchDirTest("mosaic_api_") {}
};

TEST_F(Api, TheLibraryRefusesTheValuesTheCommandLineRefuses) {
  // An embedder (and Python, through the same functions) gets the CLI's ranges: before, bench
  // with rtol NaN passed a wrong operator and batch -2 ran and was reported.
  const double nan = std::nan("");
  auto refused = [](const Status& st, const std::string& what) {
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
    EXPECT_NE(st.message().find(what), std::string::npos) << st.message();
  };
  api::BenchOptions b;
  b.model = "zoo:fmnist-cnn";
  b.backends = {"naive"};
  b.rtol = nan;
  refused(api::bench(b).status(), "`rtol` must be a finite number, got nan");
  b.rtol = 1e-3;
  b.common.batch = -2;
  refused(api::bench(b).status(), "`batch` must be a positive integer, got -2");
  b.common.batch = 1;
  b.config.max_seconds = std::numeric_limits<double>::infinity();
  refused(api::bench(b).status(), "`max_seconds` must be a finite number, got inf");
  b.config.max_seconds = 60;
  b.config.iterations = -3;
  refused(api::bench(b).status(), "`iterations` must be a positive integer, got -3");
  api::GradcheckRunOptions g;
  g.model = "zoo:fmnist-cnn";
  g.batch = -2;
  refused(api::gradcheck(g).status(), "`batch` must be a positive integer, got -2");
  api::VerifyOptions v;
  v.paths = {"/nonexistent"};
  v.atol = std::numeric_limits<double>::infinity();
  refused(api::verify(v).status(), "`atol` must be a finite number, got inf");
  api::InfoQuery q;
  q.model = "zoo:fmnist-cnn";
  q.common.threads = -1;
  refused(api::info(q).status(), "`threads` must be a non-negative integer, got -1");
  // simulate and optcheck read the same table (before, simulate had checks of its own that let
  // NaN through where a comparison did not catch it, and optcheck had none).
  api::SimulateQuery sq;
  sq.input = "zoo:fmnist-cnn";
  sq.bucket_mb = nan;
  refused(api::simulate(sq).status(), "`bucket_mb` must be a finite number, got nan");
  sq.bucket_mb = 25;
  sq.warmup = -1;
  refused(api::simulate(sq).status(), "`warmup` must be a non-negative integer, got -1");
  sq.warmup = 0;
  sq.predict_batch = -4;
  refused(api::simulate(sq).status(), "`predict_batch` must be a positive integer, got -4");
  OptcheckOptions oc;
  oc.optimizer = "sgd";
  oc.tolerance = nan;
  refused(api::optcheck(oc).status(), "`tolerance` must be a finite number, got nan");
  oc.tolerance = 1e-4;
  oc.steps = 0;
  refused(api::optcheck(oc).status(), "`steps` must be a positive integer, got 0");
  oc.steps = 30;
  oc.config.momentum = 1.5;
  refused(api::optcheck(oc).status(), "`momentum` must be in [0, 1), got 1.5");
  oc.config.momentum = 0;
  oc.threads = -2;
  refused(api::optcheck(oc).status(), "`threads` must be a non-negative integer, got -2");
}

TEST_F(Api, BenchReturnsEveryConfigurationCheckedAgainstNaiveAndPrintsNothing) {
  api::BenchOptions o;
  o.model = "zoo:fmnist-cnn";
  o.backends = builtins();
  o.common.batch = 2;
  o.config.iterations = 2;
  o.config.warmup = 0;
  o.config.repeats = 1;
  o.peaks = false;
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  auto r = api::bench(o);
  const std::string out = testing::internal::GetCapturedStdout(), err = testing::internal::GetCapturedStderr();
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(out, "");
  EXPECT_EQ(err, "");
  EXPECT_TRUE(r->checks_ok);
  EXPECT_EQ(r->checked, "outputs");
  EXPECT_FALSE(r->trace);
  ASSERT_EQ(r->report.configs.size(), o.backends.size());
  EXPECT_EQ(r->report.batch, 2);
  for (size_t i = 0; i < o.backends.size(); ++i) {
    const ConfigReport& c = r->report.configs[i];
    EXPECT_EQ(c.label, o.backends[i]);
    EXPECT_TRUE(c.checked && c.check_ok) << c.label << ": " << c.check_message;
    EXPECT_GT(c.median_ms, 0) << c.label;
    // Same graph, same FLOPs on every backend.
    EXPECT_EQ(c.total_flops, r->report.configs[0].total_flops) << c.label;
  }
}

TEST_F(Api, BenchInTrainingModeComparesLossAndGradientsWithNaive) {
  api::BenchOptions o;
  o.model = "zoo:fmnist-cnn";
  o.backends = {"onednn"};
  o.mode = "training";
  o.common.batch = 4;
  o.config.iterations = 2;
  o.config.warmup = 0;
  o.config.repeats = 1;
  o.peaks = false;
  o.trace = path("t.json");
  auto r = api::bench(o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->checked, "loss and gradients");
  ASSERT_EQ(r->report.configs.size(), 1u);
  EXPECT_TRUE(r->report.configs[0].check_ok) << r->report.configs[0].check_message;
  EXPECT_GT(r->report.configs[0].backward_ms, 0);
  // The trace is returned for the caller to write.
  ASSERT_TRUE(r->trace);
  EXPECT_GT(r->trace->events(), 0u);
  EXPECT_FALSE(fs::exists(path("t.json")));
}

TEST_F(Api, ErrorsComeBackAsAStatusNamingTheInput) {
  api::BenchOptions b;
  b.model = "zoo:fmnist-cnn";
  b.backends = {"nope"};
  auto r = api::bench(b);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("unknown backend 'nope'"), std::string::npos) << r.status().message();
  b.backends = {"naive"};
  b.model = path("missing.onnx");
  r = api::bench(b);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(path("missing.onnx")), std::string::npos) << r.status().message();

  api::GradcheckRunOptions g;
  g.model = "zoo:fmnist-cnn";
  g.plant = "no-such-bug";
  auto gc = api::gradcheck(g);
  ASSERT_FALSE(gc.ok());
  EXPECT_NE(gc.status().message().find("no-such-bug"), std::string::npos) << gc.status().message();

  api::VerifyOptions v;
  v.paths = {path("nothing-here")};
  auto vr = api::verify(v);
  ASSERT_FALSE(vr.ok());
  EXPECT_NE(vr.status().message().find(path("nothing-here")), std::string::npos) << vr.status().message();
}

TEST_F(Api, VerifyJudgesEachCaseOnEachBackendAgainstTheExpectedOutputs) {
  if (!fs::exists(kNodeTests + "/test_relu")) GTEST_SKIP() << "libonnx-testdata not installed";
  api::VerifyOptions o;
  o.paths = {kNodeTests + "/test_relu"};
  o.backend = "all";
  std::vector<std::string> seen;
  auto r = api::verify(o, [&](const api::VerifyCase& c) { seen.push_back(c.backend); });
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->passed, static_cast<int>(builtin_registry().available_backends().size()));
  EXPECT_EQ(r->failed, 0);
  EXPECT_EQ(seen, builtin_registry().available_backends());  // `all`: those that can run here
  // The same case with its expected output replaced by its input: Relu changed the negative
  // values, so every backend must now FAIL, naming the data set and output.
  fs::copy(kNodeTests + "/test_relu", path("relu_wrong"), fs::copy_options::recursive);
  fs::copy_file(path("relu_wrong/test_data_set_0/input_0.pb"), path("relu_wrong/test_data_set_0/output_0.pb"),
                fs::copy_options::overwrite_existing);
  o.paths = {path("relu_wrong")};
  o.backend = "naive";
  r = api::verify(o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->cases.size(), 1u);
  EXPECT_EQ(r->cases[0].verdict, api::CaseVerdict::kFailed);
  EXPECT_NE(r->cases[0].detail.find("test_data_set_0 output 0"), std::string::npos) << r->cases[0].detail;
}

TEST_F(Api, VerifyKeepsIntegerDataInputsAtRunTimeAndBindsOnlyShapeArguments) {
  if (!fs::exists(kNodeTests + "/test_gather_0")) GTEST_SKIP() << "libonnx-testdata not installed";
  // Gather's indices are data: they stay a run-time input and onednn's Gather runs on them
  // (before, the whole case folded at load and "passed" on any backend).
  api::VerifyOptions o;
  o.paths = {kNodeTests + "/test_gather_0", kNodeTests + "/test_reshape_extended_dims",
             kNodeTests + "/test_argmax_default_axis_example"};
  o.backend = "onednn";
  auto r = api::verify(o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->cases.size(), 3u);
  EXPECT_EQ(r->cases[0].verdict, api::CaseVerdict::kPassed) << r->cases[0].detail;
  EXPECT_EQ(r->cases[0].detail.find("bound as constants"), std::string::npos) << r->cases[0].detail;
  // Reshape's shape is a shape argument: bound as a constant, and said so.
  EXPECT_EQ(r->cases[1].verdict, api::CaseVerdict::kPassed) << r->cases[1].detail;
  EXPECT_NE(r->cases[1].detail.find("int64 inputs bound as constants"), std::string::npos) << r->cases[1].detail;
  // A node the backend has no kernel for makes the case UNSUPPORTED, naming the op.
  EXPECT_EQ(r->cases[2].verdict, api::CaseVerdict::kUnsupported) << r->cases[2].detail;
  EXPECT_NE(r->cases[2].detail.find("no kernel for ArgMax"), std::string::npos) << r->cases[2].detail;
  // With --fallback naive the ArgMax runs on naive, and the verdict counts it.
  o.fallback = "naive";
  r = api::verify(o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->cases[2].verdict, api::CaseVerdict::kPassed) << r->cases[2].detail;
  EXPECT_NE(r->cases[2].detail.find("1 nodes on naive (--fallback)"), std::string::npos) << r->cases[2].detail;
  EXPECT_EQ(r->cases[0].detail.find("nodes on naive"), std::string::npos) << r->cases[0].detail;
  o.fallback = "no-such-backend";
  r = api::verify(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("`fallback`"), std::string::npos) << r.status().message();
}

TEST_F(Api, RandomTokenIdsStayWithinTheEmbeddingTheyIndex) {
  Graph g;
  g.source = "ids";
  g.opset = 13;
  g.inputs.push_back(ValueInfo{"ids", DType::kI64, {4, 16}, {}, true});
  g.initializers["table"] = random_tensor({97, 8}, 1);
  g.initializers["small"] = random_tensor({5, 11}, 2);
  add_node(g, make_node("Gather"), {"table", "ids"}, {"emb"}, "tok");
  // A second Gather reached through Unsqueeze, along axis 1 of a 5 x 11 table: 11 rows.
  add_node(g, make_node("Unsqueeze", {{"axes", Attribute::of_ints({0})}}), {"ids"}, {"u"}, "unsq");
  add_node(g, make_node("Gather", {{"axis", Attribute::of_int(1)}}), {"small", "u"}, {"emb2"}, "other");
  g.outputs.push_back(ValueInfo{"emb", DType::kF32, {}, {}, false});
  g.outputs.push_back(ValueInfo{"emb2", DType::kF32, {}, {}, false});
  ASSERT_TRUE(prepare_graph(g, builtin_registry(), PrepareOptions{}).ok());
  std::string why;
  EXPECT_EQ(index_bound(g, "ids", &why), 11);
  EXPECT_NE(why.find("'other'"), std::string::npos) << why;
  std::string description;
  api::CommonOptions c;
  c.seed = 3;
  auto made = api::model_inputs(g, c, &description);
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  const std::vector<Tensor>& in = made.value();
  ASSERT_EQ(in.size(), 1u);
  int64_t lo = 1 << 30, hi = -1;
  for (int64_t i = 0; i < in[0].numel(); ++i) {
    lo = std::min(lo, in[0].i64()[i]);
    hi = std::max(hi, in[0].i64()[i]);
  }
  EXPECT_GE(lo, 0);
  EXPECT_LE(hi, 10);
  EXPECT_GE(hi, 5);  // 64 draws from 11 values reach the upper half
  EXPECT_NE(description.find("ids uniform in [0, 11)"), std::string::npos) << description;
  g.nodes.clear();  // nothing reads the ids: no bound
  EXPECT_EQ(index_bound(g, "ids"), 0);
}

TEST_F(Api, GradcheckPassesACorrectBackendAndFailsAPlantedBug) {
  api::GradcheckRunOptions o;
  o.model = "zoo:fmnist-cnn";
  o.backend = "onednn";
  o.check.directions = 2;  // fewer probes, the same verdicts (the defaults: GradcheckBackends.*)
  auto r = api::gradcheck(o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->checked, "onednn");
  EXPECT_EQ(r->passed, 9);
  EXPECT_EQ(r->exit_code(), 0);
  o.plant = "gemm-dw-transposed";
  r = api::gradcheck(o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->checked, "onednn+gemm-dw-transposed");
  EXPECT_GT(r->failed, 0);
  EXPECT_EQ(r->exit_code(), 1);
  const nlohmann::json j = api::gradcheck_json(o, r.value());
  EXPECT_EQ(j["summary"]["failed"].get<int>(), r->failed);
  EXPECT_EQ(j["backend"], "onednn+gemm-dw-transposed");
}

TEST_F(Api, GradcheckOnSeveralBackendsSharesTheReferenceAndKeepsEveryVerdict) {
  api::GradcheckRunOptions o;
  o.model = "zoo:fmnist-cnn";
  o.check.seed = 2;
  o.check.directions = 2;  // fewer probes, the same property
  auto set = api::gradcheck_backends(o, builtins());
  ASSERT_TRUE(set.ok()) << set.status().message();
  ASSERT_EQ(set->size(), builtins().size());
  EXPECT_EQ(set->front().shared_evaluations, 0);
  for (size_t i = 1; i < set->size(); ++i) EXPECT_GT((*set)[i].shared_evaluations, 0) << builtins()[i];
  // The last backend's report is the one a separate run gives, down to each tensor's worst
  // probe.
  const api::GradcheckOutcome& shared = set->back();
  o.backend = builtins().back();
  auto alone = api::gradcheck(o);
  ASSERT_TRUE(alone.ok()) << alone.status().message();
  EXPECT_EQ(shared.checked, o.backend);
  ASSERT_EQ(shared.report.tensors.size(), alone->report.tensors.size());
  for (size_t t = 0; t < alone->report.tensors.size(); ++t) {
    const TensorVerdict &a = alone->report.tensors[t], &b = shared.report.tensors[t];
    EXPECT_EQ(a.verdict, b.verdict) << a.name;
    EXPECT_EQ(a.checked, b.checked) << a.name;
    EXPECT_EQ(a.worst.what, b.worst.what) << a.name;
    EXPECT_EQ(a.worst.numeric, b.worst.numeric) << a.name;
    EXPECT_EQ(a.worst.analytic, b.worst.analytic) << a.name;
  }
  // A memo filled by a correct backend does not hide a planted bug in the next one.
  GradcheckMemo memo;
  o.backend = "naive";
  o.check.memo = &memo;
  ASSERT_TRUE(api::gradcheck(o).ok());
  o.backend = "onednn";
  o.plant = "conv-dw-scale";
  auto bad = api::gradcheck(o);
  ASSERT_TRUE(bad.ok()) << bad.status().message();
  EXPECT_GT(bad->shared_evaluations, 0);
  EXPECT_EQ(bad->exit_code(), 1);
  // A planted bug over a list of backends: every backend carries it, every one FAILs.
  o.check.memo = nullptr;
  auto planted = api::gradcheck_backends(o, builtins());
  ASSERT_TRUE(planted.ok()) << planted.status().message();
  for (size_t i = 0; i < planted->size(); ++i) {
    EXPECT_EQ((*planted)[i].checked, builtins()[i] + "+conv-dw-scale");
    EXPECT_EQ((*planted)[i].exit_code(), 1) << builtins()[i];
  }
  // Another check (another fingerprint) starts the memo afresh.
  GradcheckMemo::Pair p;
  p.plus = {1.0};
  memo.begin("check A");
  memo.put("k", p);
  memo.begin("check A");
  EXPECT_NE(memo.find("k"), nullptr);
  memo.begin("check B");
  EXPECT_EQ(memo.find("k"), nullptr);
  // A list with an unknown backend is refused, naming it.
  auto list = api::gradcheck_backend_list("naive,onedn");
  ASSERT_FALSE(list.ok());
  EXPECT_NE(list.status().message().find("unknown backend 'onedn'"), std::string::npos);
}

TEST_F(Api, TrainAgreesWithTheNaiveOracleStepByStep) {
  if (!fs::exists(kFashion)) GTEST_SKIP() << "dataset-fashion-mnist not installed";
  api::TrainOptions o;
  o.model = "zoo:fmnist-cnn";
  o.data = "fashion-mnist";
  o.batch = 16;
  o.steps = 4;
  o.evaluate = false;
  o.opt.lr = 0.05;
  o.seed = 3;
  auto losses = [&](const std::string& backend) {
    o.backend = backend;
    auto r = api::train(o);
    EXPECT_TRUE(r.ok()) << r.status().message();
    std::vector<double> l;
    if (r.ok())
      for (const auto& s : r->log["steps"]) l.push_back(s["loss"].get<double>());
    return l;
  };
  const std::vector<double> naive = losses("naive"), onednn = losses("onednn");
  ASSERT_EQ(naive.size(), 4u);
  ASSERT_EQ(onednn.size(), 4u);
  // At PyTorch's default initialisation the first loss is about ln 10 (a uniform guess).
  EXPECT_NEAR(naive[0], std::log(10.0), 0.3);
  for (size_t i = 0; i < naive.size(); ++i) EXPECT_NEAR(onednn[i], naive[i], 1e-3 * naive[i]) << "step " << i;
}

TEST(ApiLibrary, VersionAndPluginInterface) {
  EXPECT_STREQ(api::version(), MOSAIC_PROJECT_VERSION);  // CMake's project(VERSION)
  EXPECT_EQ(api::plugin_api_version(), MOSAIC_PLUGIN_API_VERSION);
  // A backend name no bundled plugin adds loads nothing and is no error.
  EXPECT_TRUE(api::load_bundled_backends({"no-such-backend"}).is_ok());
}

/// The folders are the layers (docs/architecture.md): a file includes Mosaic headers only from
/// its own folder and the layers below it. The library never reaches up into the CLI or the
/// Python bindings, nor either of those into the other; the IR knows nothing of operators,
/// operators nothing of kernels.
using LayerMap = std::map<std::string, std::vector<std::string>>;

LayerMap mosaic_layers() {
  const std::vector<std::string> core_and_below = {"ir", "operators", "core"};
  auto with = [](std::vector<std::string> v, std::initializer_list<const char*> more) {
    for (const char* m : more) v.push_back(m);
    return v;
  };
  return {
      {"ir", {}},
      {"operators", {"ir"}},
      {"core", {"ir", "operators"}},
      {"backends", core_and_below},
      {"distributed", core_and_below},
      {"metrics", core_and_below},
      {"frontends/onnx", core_and_below},
      {"frontends/data", core_and_below},
      {"frontends/zoo", core_and_below},
      {"frontends/config", with(core_and_below, {"backends"})},
      {"validate", with(core_and_below, {"backends", "metrics", "frontends/onnx", "frontends/zoo"})},
      {"api", with(core_and_below, {"backends", "distributed", "metrics", "frontends/onnx", "frontends/data", "frontends/zoo",
                                    "frontends/config", "validate"})},
      // The two shells over the API: neither includes the other.
      {"cli", with(core_and_below, {"backends", "distributed", "metrics", "frontends/onnx", "frontends/data", "frontends/zoo",
                                    "frontends/config", "validate", "api"})},
      {"python", with(core_and_below, {"backends", "distributed", "metrics", "frontends/onnx", "frontends/data",
                                       "frontends/zoo", "frontends/config", "validate", "api"})},
  };
}

/// Every include under ROOT that points outside its folder's layer and the layers below it,
/// as "FILE:LINE: DIR includes LAYER (HEADER)". C++ and CUDA sources (.cu, .cuh) are read; an
/// include of a header that is not under ROOT (generated, or a library's) is not a layer's.
/// FILES counts the sources read.
std::vector<std::string> layer_violations(const fs::path& root, const LayerMap& below, int& files) {
  auto layer_of = [](const std::string& path) {
    const std::string first = path.substr(0, path.find('/'));
    if (first != "frontends") return first;
    const size_t second = path.find('/', first.size() + 1);
    return path.substr(0, second);
  };
  std::vector<std::string> found;
  files = 0;
  for (const auto& [dir, allowed] : below) {
    if (!fs::exists(root / dir)) {
      found.push_back(dir + ": no such folder");
      continue;
    }
    for (const auto& e : fs::recursive_directory_iterator(root / dir)) {
      const std::string ext = e.path().extension().string();
      if (!e.is_regular_file() || (ext != ".cpp" && ext != ".hpp" && ext != ".h" && ext != ".cu" && ext != ".cuh")) continue;
      ++files;
      std::ifstream in(e.path());
      std::string line;
      for (int n = 1; std::getline(in, line); ++n) {
        if (line.rfind("#include \"", 0) != 0) continue;
        const std::string header = line.substr(10, line.find('"', 10) - 10);
        if (!fs::exists(root / header)) continue;
        const std::string layer = layer_of(header);
        if (layer != dir && std::find(allowed.begin(), allowed.end(), layer) == allowed.end())
          found.push_back(fs::relative(e.path(), root).string() + ":" + std::to_string(n) + ": " + dir + " includes " +
                          layer + " (" + header + ")");
      }
    }
  }
  return found;
}

TEST(Layers, EachFolderIncludesOnlyItselfAndTheLayersBelow) {
  int files = 0;
  for (const std::string& v : layer_violations(MOSAIC_SOURCE_DIR, mosaic_layers(), files)) ADD_FAILURE() << v;
  EXPECT_GT(files, 200);
}

/// The check itself, on the layer map over a scratch tree: an include in cli/ of the Python
/// bindings and one in a CUDA source of api/ of the CLI are each named with file and line; the
/// allowed includes beside them, a library's and a generated header are not.
TEST(Layers, APlantedUpwardIncludeIsNamed) {
  const fs::path root = fs::temp_directory_path() / ("mosaic_layers_" + std::to_string(getpid()));
  fs::remove_all(root);
  auto write = [&](const std::string& rel, const std::string& text) {
    fs::create_directories((root / rel).parent_path());
    std::ofstream(root / rel) << text;
  };
  const LayerMap layers = mosaic_layers();
  for (const auto& entry : layers) write(entry.first + "/own.hpp", "// a header of " + entry.first + "\n");
  write("cli/commands.cpp", "#include \"api/own.hpp\"\n#include \"cli/own.hpp\"\n#include \"python/own.hpp\"\n");
  write("api/kernel.cu", "#include \"core/own.hpp\"\n#include \"cli/own.hpp\"\n");
  write("api/run.cpp", "#include <vector>\n#include \"generated/version.hpp\"\n#include \"validate/own.hpp\"\n");
  int files = 0;
  std::vector<std::string> found = layer_violations(root, layers, files);
  fs::remove_all(root);
  std::sort(found.begin(), found.end());
  const std::vector<std::string> expected = {"api/kernel.cu:2: api includes cli (cli/own.hpp)",
                                             "cli/commands.cpp:3: cli includes python (python/own.hpp)"};
  EXPECT_EQ(found, expected);
  EXPECT_EQ(files, static_cast<int>(layers.size()) + 3);
}

}  // namespace
}  // namespace mosaic::test
