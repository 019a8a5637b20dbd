// Operator/backend plugins (--plugin): the two examples run like built-ins (placement, the
// check against naive, gradcheck, verify against an independent numpy reference), a planted
// bug in a plugin's backward FAILs, and every malformed plugin is refused with the file
// named and nothing of it left registered.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <map>

#include "backends/naive/naive.hpp"
#include "backends/plugin.hpp"
#include "backends/plugins.hpp"
#include "core/fuse.hpp"
#include "test_util.hpp"

namespace mosaic::test {
namespace {

const std::string kDir = MOSAIC_PLUGIN_DIR;
const std::string kTiled = kDir + "/examples/plugin_backend/libmosaic_tiled.so";
const std::string kSwish = kDir + "/examples/plugin_custom_op/libmosaic_swish.so";
std::string test_plugin(const std::string& name) { return kDir + "/libmosaic_test_" + name + ".so"; }

class Plugins : public ScratchDirTest {
 protected:
  Plugins() : ScratchDirTest("mosaic_plugins_") {}
  /// The example's Swish model and its numpy-computed expected output, as a backend-test case.
  std::string swish_case() {
    const CmdResult r = mosaic_shell("/usr/bin/python3 " + std::string(MOSAIC_SOURCE_DIR) +
                                     "/examples/plugin_custom_op/make_model.py " + path("swish"));
    if (r.code != 0) return "";
    return path("swish");
  }
};

TEST_F(Plugins, ABackendPluginIsListedPlacedAndCheckedLikeABuiltin) {
  CmdResult r = mosaic("backends --names --plugin " + kTiled);
  ASSERT_EQ(r.code, 0) << r.out;
  // The built-ins, the bundled plugins' backends (`backends` loads them), then the plugin's.
  std::string names = "naive\nim2col\nonednn\n";
  for (const std::string& p : bundled_plugins()) names += bundled_backend_name(p) + "\n";
  EXPECT_EQ(r.out, names + "tiled\n");
  r = mosaic("backends --plugin=" + kTiled);
  EXPECT_NE(r.out.find("cache-blocked Gemm"), std::string::npos) << r.out;

  // Its Gemm kernels run (the fused Gemm+Relu too); the rest falls back to naive, and the
  // outputs are checked against naive.
  r = mosaic("bench zoo:fmnist-cnn --plugin " + kTiled + " --backends tiled --batch 4 --no-peaks --iterations 2 "
             "--warmup 1 --repeats 1 --json " + path("b.json"));
  ASSERT_EQ(r.code, 0) << r.out;
  std::ifstream f(path("b.json"));
  const auto doc = nlohmann::json::parse(f);
  const auto& run = doc["runs"][0];
  EXPECT_TRUE(run["check"]["passed"].get<bool>());
  int on_tiled = 0;
  for (const auto& n : run["nodes"]) on_tiled += n["backend"] == "tiled";
  EXPECT_EQ(on_tiled, 2) << run["nodes"].dump();
  // Provenance names the plugin file.
  EXPECT_NE(doc["provenance"].dump().find("libmosaic_tiled.so"), std::string::npos);

  // In a mixed placement by op type.
  r = mosaic("bench zoo:fmnist-cnn --plugin " + kTiled + " --assign Gemm=tiled,*=im2col --batch 2 --no-peaks "
             "--iterations 1 --warmup 0 --repeats 1");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("outputs match naive"), std::string::npos) << r.out;
}

TEST_F(Plugins, ACustomOperatorRunsVerifiesAndGradchecks) {
  const std::string dir = swish_case();
  if (dir.empty()) GTEST_SKIP() << "python3-onnx is needed to write the example model";
  // Without the plugin: refused, naming the node and the domain.
  CmdResult r = mosaic("info " + dir + "/model.onnx");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("'swish1' (Swish): operator domain 'com.example.mosaic'"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--plugin"), std::string::npos) << r.out;

  // With it: the naive kernel agrees with numpy's double-precision output.
  r = mosaic("verify " + dir + " --plugin " + kSwish + " --backend naive");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("PASSED swish [naive]"), std::string::npos) << r.out;
  // Its schema's FLOPs are counted.
  r = mosaic("info " + dir + "/model.onnx --plugin " + kSwish + " --batch 2");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("Swish"), std::string::npos) << r.out;

  // gradcheck through the plugin's backward, and with the example backend's Gemm next to it.
  r = mosaic("gradcheck " + dir + "/model.onnx --plugin " + kSwish + " --batch 2");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("5 passed, 0 failed"), std::string::npos) << r.out;
  r = mosaic("gradcheck " + dir + "/model.onnx --plugin " + kSwish + " --plugin " + kTiled + " --backend tiled --batch 2");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("5 passed, 0 failed"), std::string::npos) << r.out;

  // Trains with the plugin backend's Gemm next to the plugin operator, and the saved model
  // keeps the custom domain (and needs the plugin again).
  r = mosaic("train " + dir + "/model.onnx --plugin " + kSwish + " --plugin " + kTiled + " --backend tiled "
             "--data synthetic:64,1,8,8,10 --batch 16 --epochs 1 --no-eval --save " + path("trained.onnx"));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(mosaic("info " + path("trained.onnx") + " --plugin " + kSwish).code, 0);
  EXPECT_EQ(mosaic("info " + path("trained.onnx")).code, 2);

  // A backward that forgets the sigmoid's derivative FAILs every tensor upstream of Swish.
  r = mosaic("gradcheck " + dir + "/model.onnx --plugin " + test_plugin("swish_bad_grad") + " --batch 2");
  EXPECT_EQ(r.code, 1) << r.out;
  for (const char* t : {"FAIL         w1", "FAIL         b1", "FAIL         input:x"})
    EXPECT_NE(r.out.find(t), std::string::npos) << t << "\n" << r.out;

  // Two plugins defining the same operator: the second is refused.
  r = mosaic("info " + dir + "/model.onnx --plugin " + kSwish + " --plugin " + test_plugin("swish_bad_grad"));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("op type Swish is already defined in domain com.example.mosaic"), std::string::npos) << r.out;
}

TEST_F(Plugins, TheExamplesBuildOutOfTreeAgainstTheInstalledPackage) {
  // cmake --install: the CLI, libmosaic.so, the headers plugins and embedding programs
  // include, and find_package(Mosaic). Each example is copied out of Mosaic's tree (so that
  // it cannot fall back to the sources), configured with only the install prefix, built, and
  // run: the plugins by the installed CLI, the embedding program on its own.
  const std::string prefix = path("prefix");
  CmdResult r = mosaic_shell("cmake --install " + kDir + " --prefix " + prefix);
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string cli = prefix + "/bin/mosaic";
  std::map<std::string, std::string> built;
  for (const auto& [example, target] : std::map<std::string, std::string>{
           {"plugin_backend", "mosaic_tiled"}, {"plugin_custom_op", "mosaic_swish"}, {"custom_optimizer", "mosaic_lion"},
           {"embed", "mosaic_embed"}}) {
    const std::string src = path("src/" + example), bin = path("build/" + example);
    std::filesystem::create_directories(path("src"));
    std::filesystem::copy(std::string(MOSAIC_SOURCE_DIR) + "/examples/" + example, src,
                          std::filesystem::copy_options::recursive);
    r = mosaic_shell("cmake -S " + src + " -B " + bin + " -G \"" + MOSAIC_CMAKE_GENERATOR + "\" -DCMAKE_PREFIX_PATH=" +
                     prefix + " -DCMAKE_BUILD_TYPE=Release && cmake --build " + bin);
    ASSERT_EQ(r.code, 0) << example << ": " << r.out;
    built[example] = bin + (example == "embed" ? "/" + target : "/lib" + target + ".so");
    ASSERT_TRUE(std::filesystem::exists(built[example])) << built[example];
  }
  // What they were built against is what the installed CLI loads.
  r = mosaic_shell(cli + " backends --names --plugin " + built["plugin_backend"]);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("tiled\n"), std::string::npos) << r.out;
  const std::string dir = swish_case();
  if (dir.empty()) GTEST_SKIP() << "python3-onnx is needed to write the example model";
  const std::string plugins = " --plugin " + built["plugin_custom_op"] + " --plugin " + built["plugin_backend"];
  r = mosaic_shell(cli + " verify " + dir + plugins + " --backend naive");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("PASSED swish [naive]"), std::string::npos) << r.out;
  r = mosaic_shell(cli + " gradcheck " + dir + "/model.onnx" + plugins + " --backend tiled --batch 2");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("5 passed, 0 failed"), std::string::npos) << r.out;
  // The embedding program, linked with the installed libmosaic.so, loads both plugins and
  // gets verify's, gradcheck's and bench's reports from the API: the Swish case passes on
  // every backend that runs it, the model's 5 tensors pass on tiled, and every backend's
  // outputs agree with naive.
  r = mosaic_shell(built["embed"] + plugins + " " + dir + " " + dir + "/model.onnx tiled");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("verify swish on naive: PASSED"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("gradcheck on tiled: 5 passed, 0 failed, 0 inconclusive"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("bench tiled: "), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("DIFFER"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("all checks passed"), std::string::npos) << r.out;
  // It runs against the installed library, not the build tree's.
  r = mosaic_shell("ldd " + built["embed"] + " | grep libmosaic.so");
  EXPECT_NE(r.out.find(prefix + "/lib/libmosaic.so"), std::string::npos) << r.out;
  // Without the plugin that defines Swish, the model is refused with the op named (exit 2).
  r = mosaic_shell(built["embed"] + " " + dir + " " + dir + "/model.onnx naive");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("Swish"), std::string::npos) << r.out;
  r = mosaic_shell(cli + " optcheck --optimizer-plugin " + built["custom_optimizer"] +
                   " --lr 0.001 --opt b1=0.9,b2=0.99 --model none");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("rosenbrock"), std::string::npos) << r.out;
}

TEST_F(Plugins, MalformedPluginsAreRefusedWithTheFileNamed) {
  struct Case {
    std::string file, message;
  };
  const std::vector<Case> cases = {
      {"/nonexistent/libnothing.so", "plugin /nonexistent/libnothing.so: no such file"},
      {kDir + "/examples", "plugin " + kDir + "/examples: is a directory; --plugin takes a plugin file"},
      {kDir + "/examples/custom_optimizer/libmosaic_lion.so", "it is an optimizer plugin: load it with --optimizer-plugin"},
      {test_plugin("op_old_interface"), "was built against plugin interface version " + std::to_string(MOSAIC_PLUGIN_API_VERSION + 1000) + ", this Mosaic has version " + std::to_string(MOSAIC_PLUGIN_API_VERSION)},
      {test_plugin("op_half_registered"), "registration failed: backend 'naive' is registered twice"},
      {test_plugin("op_unknown_op"), "kernel naive:Swsih: no operator Swsih"},
  };
  for (const auto& c : cases) {
    const CmdResult r = mosaic("backends --plugin " + c.file);
    EXPECT_EQ(r.code, 2) << c.file << "\n" << r.out;
    EXPECT_NE(r.out.find(c.message), std::string::npos) << c.file << "\n" << r.out;
    EXPECT_NE(r.out.find(c.file), std::string::npos) << r.out;
  }
}

// A bundled plugin that does not load (a library it needs gone at run time, as cuDNN where
// the CUDA toolkit was removed after the build; a damaged file; another interface version)
// does not break the commands that would load it: its backend is listed as unavailable with
// the loader's reason, `all` leaves it out saying why, naming it is refused with the reason.
// A program in a folder of its own, with these in the plugins/ folder beside it.
TEST_F(Plugins, ABundledPluginThatDoesNotLoadIsAnUnavailableBackendWithTheReason) {
  namespace fs = std::filesystem;
  fs::create_directories(path("plugins"));
  fs::copy_file(MOSAIC_BIN, path("mosaic"));
  std::ofstream(path("plugins/libmosaic_cut.so")) << "\x7f" "ELF, cut short";
  fs::copy_file(test_plugin("op_old_interface"), path("plugins/libmosaic_old.so"));
  const std::string bin = path("mosaic");
  CmdResult r = mosaic_shell(bin + " backends");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("cut      the bundled plugin libmosaic_cut.so, which did not load\n"
                       "         unavailable here: plugin " + path("plugins/libmosaic_cut.so") + ": cannot load: "),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("old      the bundled plugin libmosaic_old.so, which did not load\n"
                       "         unavailable here: plugin " + path("plugins/libmosaic_old.so") +
                       " was built against plugin interface version"),
            std::string::npos)
      << r.out;
  r = mosaic_shell(bin + " backends --names --available");
  EXPECT_EQ(r.out, "naive\nim2col\nonednn\n");
  const std::string bench = bin + " bench zoo:fmnist-cnn --batch 2 --iterations 1 --warmup 0 --repeats 1 --no-peaks ";
  r = mosaic_shell(bench + "--backends all --json " + path("all.json"));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("backend cut is unavailable here (plugin " + path("plugins/libmosaic_cut.so") + ": cannot load: "),
            std::string::npos)
      << r.out;
  EXPECT_EQ(read_json(path("all.json"))["runs"].size(), 3u);
  EXPECT_NE(read_json(path("all.json"))["provenance"].dump().find("libmosaic_cut.so (did not load)"), std::string::npos);
  r = mosaic_shell(bench + "--backends naive,old");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("backend 'old' is unavailable here: plugin " + path("plugins/libmosaic_old.so") + " was built against"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("benchmarking"), std::string::npos) << "refused before any work:\n" << r.out;
  // Given with --plugin, a file that does not load is an error.
  r = mosaic_shell(bench + "--backends naive --plugin " + path("plugins/libmosaic_cut.so"));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("mosaic: error: plugin " + path("plugins/libmosaic_cut.so") + ": cannot load: "), std::string::npos)
      << r.out;
}

TEST(PluginLoading, AFailedRegistrationLeavesNothingRegistered) {
  const std::vector<std::string> before = builtin_registry().backends();
  const size_t loaded = loaded_plugins().size();  // the bundled torch backend, where it is built
  const Status st = load_plugin(test_plugin("op_half_registered"));
  EXPECT_FALSE(st.is_ok());
  EXPECT_FALSE(builtin_registry().has_backend("half-registered"));
  EXPECT_EQ(builtin_registry().backends(), before);
  EXPECT_EQ(loaded_plugins().size(), loaded);
  EXPECT_EQ(plugin_arguments(5, std::vector<const char*>{"mosaic", "info", "--plugin", "a.so", "--plugin=b.so"}.data()),
            (std::vector<std::string>{"a.so", "b.so"}));
}

/// A custom op named like ONNX's Relu, computing 2x: the kernel of one never runs the other.
class Twice final : public Kernel {
 public:
  Status init(const KernelContext&) { return Status::ok(); }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    for (int64_t i = 0; i < src[0]->numel(); ++i) dst[0]->f32()[i] = 2 * src[0]->f32()[i];
    return Status::ok();
  }
};

// One registration idiom (issue 54): a plugin's registration function opens its backend with a
// BackendRegistration over the registrar it is handed, exactly as the built-ins' do; the
// registry it names is the one plans are built from once the plugin is committed (not the copy
// being filled, which is gone by then), and extending a backend that does not exist fails.
TEST(PluginLoading, APluginRegistersThroughTheBuiltinsIdiom) {
  const KernelRegistry* named = nullptr;
  const Status st = register_extension("test:idiom", "idiom", [&](Registrar& registrar) {
    BackendRegistration r(registrar, {"idiom", "a backend registered as the built-ins are", nullptr, nullptr});
    named = &r.registry();
    r.kernel("Relu", make_factory<Twice>());
    return r.status();
  });
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  EXPECT_EQ(named, &builtin_registry());
  EXPECT_TRUE(builtin_registry().has_kernel("idiom", "Relu"));
  const Status unknown = register_extension("test:idiom2", "idiom2", [](Registrar& registrar) {
    return BackendRegistration::extend(registrar, "nobody").kernel("Relu", make_factory<Twice>()).status();
  });
  EXPECT_NE(unknown.message().find("backend 'nobody' is not registered"), std::string::npos) << unknown.to_string();
  // Straight into a registry (the built-in list, tests): the same functions; no operators.
  KernelRegistry own;
  ASSERT_TRUE(register_backend(own, register_naive).is_ok());
  EXPECT_TRUE(own.has_kernel("naive", "If"));
  DirectRegistrar direct(own);
  EXPECT_EQ(&direct.registry(), &own);
  OpSchema s;
  s.op_type = "Frob";
  s.domain = "com.test";
  const Status op = direct.add_operator(s);
  EXPECT_NE(op.message().find("com.test.Frob: a built-in registration adds no operators"), std::string::npos)
      << op.to_string();
}

TEST(OpKeys, AnotherDomainsOpOfAnOnnxNameNeverMeetsOnnxsOp) {
  auto registration = [](const std::string& op, bool kernel_first) {
    return [op, kernel_first](Registrar& r) -> Status {
      OpSchema s;
      s.op_type = op;
      s.domain = "com.test.keys";
      s.infer = [](const OpContext& c) -> Expected<std::vector<TensorDesc>> { return std::vector<TensorDesc>{c.inputs[0]}; };
      s.flops = [](const OpContext& c) { return static_cast<double>(c.inputs[0].numel()); };
      if (kernel_first) MOSAIC_RETURN_IF_ERROR(r.add_kernel("naive", op, make_factory<Twice>()));
      MOSAIC_RETURN_IF_ERROR(r.add_operator(s));
      return kernel_first ? Status::ok() : r.add_kernel("naive", op, make_factory<Twice>());
    };
  };
  // A kernel registered before its operator would have been ONNX Bernoulli's (an op Mosaic
  // has no kernel for): refused.
  Status st = register_extension("test:keys", "keys", registration("Bernoulli", true));
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("registered before the plugin added its operator Bernoulli"), std::string::npos)
      << st.message();
  ASSERT_TRUE(register_extension("test:keys", "keys", registration("Relu", false)).is_ok());
  EXPECT_TRUE(builtin_registry().has_kernel("naive", "com.test.keys.Relu"));
  // x -> Gemm -> com.test.keys.Relu -> ONNX Relu: the custom one is not fused into the Gemm
  // as ONNX's activation, and each computes its own function.
  Graph g;
  g.source = "keys";
  g.inputs.push_back(ValueInfo{"x", DType::kF32, {1, 2}, {}, true});
  g.initializers["w"] = Tensor::from_f32({2, 2}, {1, 0, 0, 1});
  add_node(g, make_node("Gemm"), {"x", "w"}, {"a"}, "gemm");
  Node custom = make_node("Relu");
  custom.domain = "com.test.keys";
  add_node(g, custom, {"a"}, {"b"}, "twice");
  add_node(g, make_node("Relu"), {"b"}, {"y"}, "relu");
  g.outputs.push_back(ValueInfo{"y", DType::kF32, {}, {}, false});
  ASSERT_TRUE(prepare_graph(g, builtin_registry(), PrepareOptions{}).ok());
  const FuseReport fused = fuse_graph(g, FuseOptions{});
  EXPECT_EQ(fused.fused, std::vector<std::string>{}) << "the custom Relu stays a node of its own";
  for (const std::string backend : {"naive", "onednn"}) {
    auto plan = Plan::build(g, Placement::all_on(backend), builtin_registry());
    ASSERT_TRUE(plan.ok()) << plan.status().to_string();
    std::vector<Tensor> out;
    ASSERT_TRUE(plan.value()->run({Tensor::from_f32({1, 2}, {-1.5f, 2})}, &out).is_ok());
    EXPECT_EQ(values_of(out[0]), (std::vector<double>{0, 4})) << backend;  // relu(2 * x)
  }
  // --assign takes the key.
  EXPECT_TRUE(Placement::parse("com.test.keys.Relu=naive,*=onednn", builtin_registry()).ok());
}

}  // namespace
}  // namespace mosaic::test
