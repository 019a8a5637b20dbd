// What a result needs to be reproduced and compared: machine, build, libraries, run
// (docs/metrics.md, "Provenance"). Recorded in every JSON and CSV the tool writes.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace mosaic {

/// Written at build time by cmake/git_info.cmake.
extern const char* const kGitCommit;
extern const bool kGitDirty;

/// The kernels one backend picks on this machine, as it says itself (BackendInfo::properties,
/// core/kernel.hpp): {"blas_core", "SkylakeX"}, {"isa", "avx512_core_bf16"}, and the
/// environment variables set now that forced the choice.
struct BackendKernels {
  std::string backend;
  std::vector<std::pair<std::string, std::string>> kernels;
  std::vector<std::string> forced_by;
};
/// "im2col blas_core SkylakeX (forced by OPENBLAS_CORETYPE), onednn isa avx512_core".
std::string kernels_line(const std::vector<BackendKernels>& kernels);
/// {"im2col": {"blas_core": "SkylakeX"}, "onednn": {"isa": "avx512_core"}}.
nlohmann::json kernels_json(const std::vector<BackendKernels>& kernels);

struct Provenance {
  // machine
  std::string hostname, cpu_model, cpu_flags, os;
  int cores_online = 0, threads = 0;
  int64_t memory_bytes = 0;
  std::vector<BackendKernels> kernels;  ///< per backend that has something to say
  // build
  std::string compiler, build_type, git_commit;
  bool git_dirty = false, sanitized = false, native = false;
  std::vector<std::pair<std::string, std::string>> versions;  ///< library -> version
  // run
  std::string time_utc;  ///< ISO 8601
  std::string model, model_sha256;  ///< the hash is empty for built-in zoo models
  std::vector<std::pair<std::string, std::string>> seeds;
  std::vector<std::pair<std::string, std::string>> environment;  ///< the variables that change results
  std::vector<std::string> argv;
  std::string cwd;  ///< working directory (relative paths in argv are relative to it)
};

/// The current time as ISO 8601 UTC ("2026-11-23T08:12:09Z").
std::string utc_now_iso8601();

/// Remembers the process's command line for provenance (main calls it first).
void set_command_line(int argc, char** argv);
/// The remembered command line (empty if set_command_line was not called).
const std::vector<std::string>& command_line_args();

/// Machine, build, time, environment and command line. Library versions, kernels, threads,
/// model and seeds are the caller's to add.
Provenance collect_provenance();

/// Environment variables recorded because they change what runs: OPENBLAS_*, OMP_*,
/// GOMP_*, KMP_*, DNNL_*, ONEDNN_*, MKL_*, MOSAIC_*.
bool is_recorded_env(const std::string& name);

/// A shell-quoted word ('...' when it contains anything but [A-Za-z0-9_./:=,+@%-]).
std::string shell_quote(const std::string& word);
/// One line that reruns the command: the recorded environment, then the quoted argv.
std::string reproducer(const Provenance& p);

nlohmann::json provenance_json(const Provenance& p);
/// "key: value" lines (CSV header block, text reports).
std::vector<std::string> provenance_lines(const Provenance& p);

}  // namespace mosaic
