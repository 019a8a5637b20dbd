// verify as a library function: run ONNX test cases (a model.onnx and test_data_set_*
// directories, as the official ONNX node tests) on backends and compare with the expected
// outputs (docs/api.md). `mosaic verify` is this call plus printing and --junit; its
// --per-node and --determinism audits are validate/per_node.hpp and validate/determinism.hpp.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "api/models.hpp"
#include "ir/status.hpp"

namespace mosaic::api {

struct VerifyOptions {
  std::vector<std::string> paths;
  std::string backend = "naive";
  std::string filter;
  double rtol = 1e-3, atol = 1e-5;
  /// Compare each quantised output within one quantisation step (atol raised to it): the
  /// largest scale of the DequantizeLinear that produces it, or 1 for an integer output of a
  /// quantising op. Two correct computations may round a tie between steps either way; the
  /// verdict's detail says when a step was allowed. --exact-quantised turns it off.
  bool quantisation_step = true;
  bool quiet = false;      ///< the CLI prints only failures
  /// Run the graph the timed plans run: fused (core/fuse.hpp), so the rewrites are checked
  /// against the expected outputs too. --no-fuse runs the graph as stored.
  bool fuse = true;
  /// A backend for the nodes the one under test has no kernel for ("": none, such a case
  /// is UNSUPPORTED). The verdict's detail counts the nodes that fell back.
  std::string fallback;
  std::string junit;      ///< JUnit XML of the verdicts (conformance cases)
  bool per_node = false;  ///< PATH is a model: compare every node with naive (validate/per_node.hpp)
  bool determinism = false;    ///< PATH is a model: audit repeatability (validate/determinism.hpp)
  bool deterministic = false;  ///< ... with deterministic plans (KernelContext::deterministic)
  CommonOptions common;   ///< --batch, --seed of the --per-node input
};

enum class CaseVerdict { kPassed, kFailed, kUnsupported };
/// "PASSED", "FAILED", "UNSUPPORTED".
const char* case_verdict_name(CaseVerdict v);

/// One test case on one backend.
struct VerifyCase {
  std::string name;     ///< the case directory's name
  std::string backend;
  CaseVerdict verdict = CaseVerdict::kPassed;
  std::string detail;   ///< the worst error, or why it failed or was declined
  double seconds = 0;
};

struct VerifyReport {
  std::vector<std::string> backends;
  std::vector<VerifyCase> cases;  ///< in order: case by case, each on every backend
  int passed = 0, failed = 0, unsupported = 0;
  /// Nothing was verified when every case run was UNSUPPORTED (the CLI exits 3).
  bool verified_nothing() const { return failed == 0 && passed == 0; }
};

/// Runs every case under o.paths (a case directory, or a directory of them) whose name
/// matches o.filter (POSIX extended regex) on o.backend ("all": every registered backend).
/// `on_case`, if given, sees each verdict as soon as it is known. Errors: an unknown
/// backend, a bad filter, a path that holds no case, a filter that matches none.
Expected<VerifyReport> verify(const VerifyOptions& o, const std::function<void(const VerifyCase&)>& on_case = {});

/// The backends `--backend NAME` means: NAME, or every registered backend for "all".
Expected<std::vector<std::string>> verify_backends(const std::string& backend);

/// One quantisation step of each graph output (0 where it has none): the largest scale of a
/// DequantizeLinear that produces it from a constant scale, or 1 for an integer output of a
/// quantising op. Two correct computations of a quantised model can round a tie between
/// steps either way (a float product between DequantizeLinear and QuantizeLinear; oneDNN's and
/// ONNX Runtime's float32 requantisation against ONNX's double), so verify and bench allow
/// one step there unless told otherwise.
std::vector<double> quantisation_steps(const Graph& graph);

}  // namespace mosaic::api
