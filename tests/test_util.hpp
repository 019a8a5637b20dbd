// Helpers shared by the tests: single-node graphs, random tensors, running a graph on a backend.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backends/plugins.hpp"
#include "backends/registry.hpp"
#include "core/plan.hpp"
#include "core/prepare.hpp"
#include "ir/elements.hpp"

namespace mosaic::test {

/// Every registered backend that can run here but the naive oracle: the built-ins and a
/// bundled plugin's (tests/test_torch.cpp and tests/test_cuda.cpp load the torch and cuda
/// backends into processes whose tests use them; cuda only where a GPU is present).
inline std::vector<std::string> optimised_backends() {
  std::vector<std::string> all = builtin_registry().available_backends();
  all.erase(std::remove(all.begin(), all.end(), "naive"), all.end());
  return all;
}

/// The backends that can run here and train: those computing in host memory or on a device
/// that keeps gradients (Device::trains, ir/device.hpp), the oracle among them when `with_naive`.
inline std::vector<std::string> training_backends(bool with_naive) {
  std::vector<std::string> out;
  for (const std::string& b : builtin_registry().available_backends()) {
    const BackendInfo* info = builtin_registry().info(b);
    if ((b != "naive" || with_naive) && info && (!info->device || info->device->trains())) out.push_back(b);
  }
  return out;
}

/// The backends a CLI command with `--backend all` (or `--backends all`) runs: the
/// registry's, plus the bundled plugins' (the torch backend), which the CLI loads for `all`
/// and this process only when its tests use them.
inline std::vector<std::string> cli_all_backends();

/// The backends a CLI command has when no bundled plugin is named on its command line: this
/// process's registry without the bundled plugins' backends (a filter naming torch or cuda
/// loads them here, and a test must not expect them of a CLI that did not).
inline std::vector<std::string> cli_registered_backends();

/// The bundled plugins' backends that can run here, as the CLI says (`backends --names
/// --available`): the cuda backend without a GPU cannot, and `all` leaves it out.
inline std::vector<std::string> bundled_available_backends();

/// Whether this test process runs tests on the bundled backend `name` (lower case), which it
/// then loads before main (tests/test_torch.cpp, tests/test_cuda.cpp): ctest's listing of the
/// tests (so that its cases are registered), and a run whose --gtest_filter names it, as
/// every such test's name does ("AllOps/BackendOps.EveryCaseMatchesNaive/torch",
/// "TorchBackend.*"). ctest runs each test in its own process; the others see the registry
/// the CLI has without the backend on its command line.
inline bool process_tests_backend(const std::string& name) {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  for (std::string arg; std::getline(in, arg, '\0');) {
    if (arg.rfind("--gtest_list_tests", 0) == 0) return true;
    if (arg.rfind("--gtest_filter=", 0) != 0) continue;
    std::transform(arg.begin(), arg.end(), arg.begin(), [](unsigned char c) { return std::tolower(c); });
    return arg.find(name) != std::string::npos;
  }
  return false;
}

/// Test names by backend ("GradcheckBackends.X/torch"), so that a test's name says which
/// backend it runs on (and a filter naming a bundled backend makes the process load it).
inline std::string backend_param_name(const ::testing::TestParamInfo<std::string>& info) { return info.param; }

struct CmdResult {
  int code = -1;
  std::string out;
};

/// Runs a shell command line; stdout and stderr together.
inline CmdResult mosaic_shell(const std::string& command) {
  CmdResult r;
  const std::string cmd = command + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

/// Runs the mosaic binary with `args`; stdout and stderr together. MOSAIC_TEST_BIN in the
/// environment names another one (scripts/gpu-check.sh runs this binary from a bundle).
inline CmdResult mosaic(const std::string& args) {
  const char* bin = std::getenv("MOSAIC_TEST_BIN");
  return mosaic_shell(std::string(bin && *bin ? bin : MOSAIC_BIN) + " " + args);
}

inline std::vector<std::string> bundled_available_backends() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    const CmdResult r = mosaic("backends --names --available");
    std::vector<std::string> listed;
    std::string line;
    for (std::istringstream in(r.out); std::getline(in, line);) listed.push_back(line);
    for (const std::string& p : bundled_plugins()) {
      const std::string name = bundled_backend_name(p);
      if (std::find(listed.begin(), listed.end(), name) != listed.end()) out.push_back(name);
    }
    return out;
  }();
  return names;
}

inline std::vector<std::string> cli_registered_backends() {
  std::vector<std::string> out;
  std::vector<std::string> bundled;
  for (const std::string& p : bundled_plugins()) bundled.push_back(bundled_backend_name(p));
  for (const std::string& b : builtin_registry().backends())
    if (std::find(bundled.begin(), bundled.end(), b) == bundled.end()) out.push_back(b);
  return out;
}

inline std::vector<std::string> cli_all_backends() {
  std::vector<std::string> all = builtin_registry().available_backends();
  for (const std::string& name : bundled_available_backends())
    if (std::find(all.begin(), all.end(), name) == all.end()) all.push_back(name);
  return all;
}

/// A test with a scratch directory of its own (named after the process and the test, removed
/// afterwards): derive, passing a prefix, and name files with path().
class ScratchDirTest : public ::testing::Test {
 protected:
  explicit ScratchDirTest(std::string prefix) : prefix_(std::move(prefix)) {}
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           (prefix_ + std::to_string(getpid()) + "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string prefix_;
  std::filesystem::path dir_;
};

/// mpirun refuses root without the first two (CI and containers run as root); the third
/// makes shared-memory transfers work without the kernel's cross-memory attach, which
/// containers often forbid. The last gives this test process its own Open MPI session
/// directory: two mpiruns started at the same moment by tests running in parallel (ctest
/// -j2) both create /tmp/ompi.HOST.UID, and the loser fails orte_init ("File exists").
inline void allow_mpirun() {
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 1);
  struct SessionBase {
    std::filesystem::path dir =
        std::filesystem::temp_directory_path() / ("mosaic-ompi-" + std::to_string(getpid()));
    SessionBase() { std::filesystem::create_directories(dir); }
    ~SessionBase() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  };
  static const SessionBase base;
  setenv("OMPI_MCA_orte_tmpdir_base", base.dir.c_str(), 1);
}

inline std::string join(const std::vector<std::string>& items, const std::string& sep = ", ") {
  std::string out;
  for (const auto& i : items) out += (out.empty() ? "" : sep) + i;
  return out;
}

/// A JSON file the command under test wrote.
/// A file's bytes ("" when it cannot be read).
inline std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

inline nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  return nlohmann::json::parse(f);
}

inline Tensor random_tensor(const Shape& shape, uint64_t seed, float lo = -1.f, float hi = 1.f) {
  Tensor t = Tensor::empty({DType::kF32, shape});
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = d(rng);
  return t;
}

/// The input range the op-table tests draw an element-wise op's input from: its domain
/// (Log, Sqrt, Reciprocal: positive; Asin, Acos, Atanh: inside (-1, 1); Acosh: above 1;
/// Tan: away from its poles), wide enough to reach the kinks of HardSigmoid
/// (+-2.5) and HardSwish (+-3).
inline std::pair<float, float> test_domain(const std::string& op) {
  if (op == "Log" || op == "Sqrt" || op == "Reciprocal") return {0.25f, 2.f};
  if (op == "Asin" || op == "Acos" || op == "Atanh") return {-0.9f, 0.9f};
  if (op == "Acosh") return {1.25f, 3.f};
  if (op == "Tan") return {-1.f, 1.f};
  if (op == "HardSigmoid" || op == "HardSwish") return {-4.f, 4.f};
  return {-2.f, 2.f};
}

/// One node whose inputs are runtime tensors ("x0", "x1", ...) or initializers.
struct OpCase {
  std::string label;
  Node node;
  std::vector<Tensor> inputs;        ///< one per node input; undefined = omitted
  std::vector<bool> is_const;        ///< input i becomes an initializer
  int64_t opset = 13;
};

/// Names the case in test output instead of dumping its bytes.
inline void PrintTo(const OpCase& c, std::ostream* os) { *os << c.label; }

inline Graph make_graph(const OpCase& c) {
  Graph g;
  g.source = c.label;
  g.opset = c.opset;
  Node n = c.node;
  n.inputs.clear();
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    if (!c.inputs[i].defined()) {
      n.inputs.push_back("");
      continue;
    }
    const std::string name = "x" + std::to_string(i);
    n.inputs.push_back(name);
    if (i < c.is_const.size() && c.is_const[i]) {
      g.initializers[name] = c.inputs[i];
    } else {
      ValueInfo v;
      v.name = name;
      v.dtype = c.inputs[i].dtype();
      v.dims = c.inputs[i].shape();
      v.has_shape = true;
      g.inputs.push_back(v);
    }
  }
  if (n.outputs.empty()) n.outputs = {"y"};
  for (const auto& o : n.outputs)
    if (!o.empty()) g.outputs.push_back(ValueInfo{o, DType::kF32, {}, {}, false});
  g.nodes.push_back(n);
  return g;
}

/// Runs the case on one backend with no fallback. Returns the status (kUnsupported if the
/// backend declines) and fills outputs.
inline Status run_on(const OpCase& c, const std::string& backend, std::vector<Tensor>* outputs,
                     const PlanOptions& options = {}) {
  Graph g = make_graph(c);
  auto pr = prepare_graph(g, builtin_registry(), PrepareOptions{});
  if (!pr.ok()) return pr.status();
  auto plan = Plan::build(g, Placement::all_on(backend, {}), builtin_registry(), options);
  if (!plan.ok()) return plan.status();
  std::vector<Tensor> runtime;
  for (size_t i = 0; i < c.inputs.size(); ++i)
    if (c.inputs[i].defined() && !(i < c.is_const.size() && c.is_const[i])) runtime.push_back(c.inputs[i]);
  return plan.value()->run(runtime, outputs);
}

/// The case's training plan on `backend` run once forward and backward from `dy` (its first
/// input the only run-time one): the output, the input's gradient, then each parameter's
/// (read on the host).
inline std::vector<Tensor> training_step(const OpCase& c, const std::string& backend, const Tensor& dy) {
  Graph g = make_graph(c);
  EXPECT_TRUE(prepare_graph(g, builtin_registry(), PrepareOptions{}).ok());
  PlanOptions po;
  po.training = true;
  po.input_grads = true;
  auto plan = Plan::build(g, Placement::all_on(backend, {}), builtin_registry(), po);
  EXPECT_TRUE(plan.ok()) << plan.status().to_string();
  if (!plan.ok()) return {};
  std::vector<Tensor> out;
  Status st = plan.value()->run({c.inputs[0]}, &out);
  EXPECT_TRUE(st.is_ok()) << st.to_string();
  st = plan.value()->backward({dy});
  EXPECT_TRUE(st.is_ok()) << st.to_string();
  std::vector<Tensor> got = {out.empty() ? Tensor() : out[0].clone()};
  if (const Tensor* dx = plan.value()->input_grad(0)) got.push_back(dx->clone());
  for (const ParamRef& p : plan.value()->parameters()) got.push_back(p.grad.clone());
  return got;
}

/// The forward op cases every backend runs (test_backends.cpp).
std::vector<OpCase> forward_op_cases();
/// The integer products the cuda backend runs on cuBLAS's int8 product, one of each form
/// (test_cuda_int8_math.cpp): checked on the host there, on a GPU by test_cuda.cpp.
std::vector<OpCase> int8_product_cases();
/// The com.microsoft QOperator element-wise ops the cuda backend computes (QLinearAdd and Mul,
/// the lookups, the global pool, QLinearConcat), every scale and zero point constant
/// (tests/test_cuda_qlinear_math.cpp; run on a GPU by tests/test_cuda.cpp).
std::vector<OpCase> qlinear_elementwise_cases();

inline Node make_node(const std::string& op, std::map<std::string, Attribute> attrs = {}) {
  Node n;
  n.op_type = op;
  if (op.rfind("mosaic.", 0) == 0) n.domain = "mosaic";  // Mosaic's own ops (mosaic.FusedAttention)
  n.name = op + "_test";
  n.attrs = std::move(attrs);
  return n;
}

/// Appends `n` to `g` wired to `in` and `out` and named `name`.
inline void add_node(Graph& g, Node n, std::vector<std::string> in, std::vector<std::string> out, std::string name) {
  n.inputs = std::move(in);
  n.outputs = std::move(out);
  n.name = std::move(name);
  g.nodes.push_back(std::move(n));
}

/// A tensor of type d whose elements are `values`, each stored as ONNX converts a double.
inline Tensor typed(DType d, const Shape& shape, const std::vector<double>& values) {
  Tensor t = Tensor::empty({d, shape});
  for (size_t i = 0; i < values.size(); ++i) store_f64(d, t.data(), static_cast<int64_t>(i), values[i]);
  return t;
}

/// Every element of t as a double.
inline std::vector<double> values_of(const Tensor& t) {
  std::vector<double> v;
  for (int64_t i = 0; i < t.numel(); ++i) v.push_back(t.get(i));
  return v;
}

/// A one-node case of an ONNX op at `opset`, its outputs named `outputs`.
inline OpCase op_case(const std::string& op, std::vector<Tensor> inputs, std::map<std::string, Attribute> attrs = {},
                      int64_t opset = 21, std::vector<std::string> outputs = {"y"}) {
  OpCase c;
  c.label = op;
  c.node = make_node(op, std::move(attrs));
  c.node.outputs = std::move(outputs);
  c.inputs = std::move(inputs);
  c.opset = opset;
  return c;
}

}  // namespace mosaic::test
