#include "metrics/provenance.hpp"

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <sstream>

extern char** environ;

namespace mosaic {
namespace {

std::vector<std::string>& command_line() {
  static std::vector<std::string> argv;
  return argv;
}

/// The value of the first "key<spaces>: value" line of a /proc file.
std::string proc_field(const std::string& path, const std::string& key) {
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind(key, 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    size_t b = colon + 1;
    while (b < line.size() && line[b] == ' ') ++b;
    return line.substr(b);
  }
  return "";
}

std::string compiler() {
#if defined(__clang__)
  return std::string("clang ") + __clang_version__;
#elif defined(__GNUC__)
  return std::string("gcc ") + __VERSION__;
#else
  return "unknown";
#endif
}

nlohmann::json pairs_json(const std::vector<std::pair<std::string, std::string>>& kv) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, v] : kv) j[k] = v;
  return j;
}

}  // namespace

std::string utc_now_iso8601() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

void set_command_line(int argc, char** argv) { command_line().assign(argv, argv + argc); }

const std::vector<std::string>& command_line_args() { return command_line(); }

bool is_recorded_env(const std::string& name) {
  for (const char* prefix : {"OPENBLAS_", "OMP_", "GOMP_", "KMP_", "DNNL_", "ONEDNN_", "MKL_", "MOSAIC_"})
    if (name.rfind(prefix, 0) == 0) return true;
  return false;
}

Provenance collect_provenance() {
  Provenance p;
  char host[256] = {0};
  if (gethostname(host, sizeof host - 1) == 0) p.hostname = host;
  p.cpu_model = proc_field("/proc/cpuinfo", "model name");
  p.cpu_flags = proc_field("/proc/cpuinfo", "flags");
  utsname u{};
  if (uname(&u) == 0) p.os = std::string(u.sysname) + " " + u.release + " " + u.machine;
  p.cores_online = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  const std::string mem = proc_field("/proc/meminfo", "MemTotal");  // "24576000 kB"
  p.memory_bytes = std::atoll(mem.c_str()) * 1024;
  p.compiler = compiler();
  p.build_type = MOSAIC_BUILD_TYPE;
  p.sanitized = MOSAIC_SANITIZED;
  p.native = MOSAIC_NATIVE_BUILD;
  p.git_commit = kGitCommit;
  p.git_dirty = kGitDirty;
  p.time_utc = utc_now_iso8601();
  for (char** e = environ; e && *e; ++e) {
    const std::string kv = *e;
    const size_t eq = kv.find('=');
    if (eq != std::string::npos && is_recorded_env(kv.substr(0, eq))) p.environment.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
  }
  std::sort(p.environment.begin(), p.environment.end());
  p.argv = command_line();
  char cwd[4096];
  if (getcwd(cwd, sizeof cwd)) p.cwd = cwd;
  return p;
}

std::string shell_quote(const std::string& w) {
  if (w.empty()) return "''";
  bool plain = true;
  for (char c : w) plain = plain && (std::isalnum(static_cast<unsigned char>(c)) || std::string("_./:=,+@%-").find(c) != std::string::npos);
  if (plain) return w;
  std::string q = "'";
  for (char c : w) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string reproducer(const Provenance& p) {
  std::string line = p.cwd.empty() ? "" : "cd " + shell_quote(p.cwd) + " && ";
  for (const auto& [k, v] : p.environment) line += k + "=" + shell_quote(v) + " ";
  for (size_t i = 0; i < p.argv.size(); ++i) line += (i ? " " : "") + shell_quote(p.argv[i]);
  return line;
}

std::string kernels_line(const std::vector<BackendKernels>& kernels) {
  std::string line;
  for (const auto& b : kernels) {
    for (const auto& [what, value] : b.kernels) line += (line.empty() ? "" : ", ") + b.backend + " " + what + " " + value;
    if (!b.forced_by.empty()) {
      std::string vars;
      for (const auto& v : b.forced_by) vars += (vars.empty() ? "" : ", ") + v;
      line += " (forced by " + vars + ")";
    }
  }
  return line.empty() ? "none reported" : line;
}

nlohmann::json kernels_json(const std::vector<BackendKernels>& kernels) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& b : kernels) {
    if (b.kernels.empty()) continue;
    nlohmann::json& k = j[b.backend] = nlohmann::json::object();
    for (const auto& [what, value] : b.kernels) k[what] = value;
  }
  return j;
}

nlohmann::json provenance_json(const Provenance& p) {
  using nlohmann::json;
  json forced = json::object();
  for (const auto& b : p.kernels)
    if (!b.forced_by.empty()) forced[b.backend] = b.forced_by;
  return {{"machine",
           {{"hostname", p.hostname}, {"cpu_model", p.cpu_model}, {"cpu_flags", p.cpu_flags}, {"os", p.os},
            {"cores_online", p.cores_online}, {"threads", p.threads}, {"memory_bytes", p.memory_bytes},
            {"kernels", kernels_json(p.kernels)}, {"kernels_forced_by", forced}}},
          {"build",
           {{"compiler", p.compiler}, {"build_type", p.build_type}, {"native", p.native}, {"sanitized", p.sanitized},
            {"git_commit", p.git_commit}, {"git_dirty", p.git_dirty}, {"versions", pairs_json(p.versions)}}},
          {"run",
           {{"time_utc", p.time_utc}, {"model", p.model.empty() ? json() : json(p.model)},
            {"model_sha256", p.model_sha256.empty() ? json() : json(p.model_sha256)}, {"seeds", pairs_json(p.seeds)},
            {"environment", pairs_json(p.environment)}, {"argv", p.argv}, {"cwd", p.cwd}, {"reproducer", reproducer(p)}}}};
}

std::vector<std::string> provenance_lines(const Provenance& p) {
  std::vector<std::string> l;
  l.push_back("machine: " + p.cpu_model + ", " + std::to_string(p.cores_online) + " cores, " +
              std::to_string(p.memory_bytes >> 20) + " MiB, " + p.os + ", host " + p.hostname);
  l.push_back("kernels: " + kernels_line(p.kernels) + ", threads " + std::to_string(p.threads));
  std::string v;
  for (const auto& [k, ver] : p.versions) v += (v.empty() ? "" : ", ") + k + " " + ver;
  l.push_back("build: " + p.compiler + ", " + p.build_type + (p.native ? " -march=native" : "") +
              (p.sanitized ? " ASan/UBSan" : "") + ", commit " + p.git_commit + (p.git_dirty ? " (dirty)" : ""));
  l.push_back("libraries: " + v);
  std::string seeds;
  for (const auto& [k, s] : p.seeds) seeds += (seeds.empty() ? "" : ", ") + k + " " + s;
  l.push_back("run: " + p.time_utc + (p.model.empty() ? "" : ", model " + p.model) +
              (p.model_sha256.empty() ? "" : " (sha256 " + p.model_sha256 + ")") + (seeds.empty() ? "" : ", " + seeds));
  l.push_back("reproduce: " + reproducer(p));
  return l;
}

}  // namespace mosaic
