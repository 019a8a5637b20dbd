#include "api/util.hpp"

#include <dlfcn.h>
#include <omp.h>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include "backends/machine_probe.hpp"
#include "backends/plugins.hpp"
#include "ir/interrupt.hpp"
#include "backends/registry.hpp"
#include "frontends/config/placement_config.hpp"
#include "frontends/onnx/onnx_io.hpp"
#include "metrics/sha256.hpp"

namespace mosaic::api {

namespace fs = std::filesystem;

std::string join(const std::vector<std::string>& items, const std::string& sep) {
  std::string s;
  for (const auto& i : items) s += (s.empty() ? "" : sep) + i;
  return s;
}

std::string closest(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = std::max<size_t>(2, word.size() / 3) + 1;
  for (const auto& c : candidates) {
    // Levenshtein distance, one row at a time.
    std::vector<size_t> row(c.size() + 1);
    for (size_t j = 0; j <= c.size(); ++j) row[j] = j;
    for (size_t i = 1; i <= word.size(); ++i) {
      size_t diag = row[0];
      row[0] = i;
      for (size_t j = 1; j <= c.size(); ++j) {
        const size_t up = row[j];
        row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (word[i - 1] == c[j - 1] ? 0 : 1)});
        diag = up;
      }
    }
    if (row[c.size()] < best_d) {
      best_d = row[c.size()];
      best = c;
    }
  }
  return best;
}

Status unknown_backend(const std::string& name, const std::string& extra, const std::string& what) {
  std::vector<std::string> names = builtin_registry().backends(), shown = names;
  for (const std::string& p : bundled_plugins()) {
    const std::string b = bundled_backend_name(p);
    if (std::find(names.begin(), names.end(), b) != names.end()) continue;
    names.push_back(b);
    shown.push_back(b + " (bundled plugin)");
  }
  if (!extra.empty()) shown.push_back(extra);
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  std::string guess = std::find(names.begin(), names.end(), lower) != names.end() ? lower : closest(name, names);
  const std::string missing = backend_not_built(lower);
  return Status::invalid("unknown " + what + " '" + name + "' (known: " + join(shown) + ")" +
                         (!missing.empty() ? "; this build has no " + lower + " backend: " + missing
                          : guess.empty() ? "" : "; did you mean " + guess + "?"));
}

std::string backend_not_built(const std::string& name) {
  const std::string list = MOSAIC_BACKENDS_NOT_BUILT;  // "cuda=why|torch=why|" (CMakeLists.txt)
  const std::string key = name + "=";
  for (size_t start = 0; start < list.size();) {
    const size_t end = std::min(list.find('|', start), list.size());
    if (list.compare(start, key.size(), key) == 0) return list.substr(start + key.size(), end - start - key.size());
    start = end + 1;
  }
  return "";
}

Status check_output_path(const std::string& path, const std::string& flag) {
  if (path == "-") return Status::ok();  // standard output (write_file_atomic)
  std::error_code ec;
  const fs::path p(path);
  if (fs::is_directory(p, ec)) return Status::invalid(flag + " " + path + ": is a directory, not a file");
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  if (!fs::is_directory(dir, ec)) return Status::not_found(flag + " " + path + ": directory " + dir.string() + " does not exist");
  // Proven by doing, not by access(): root passes access() on read-only file systems and /proc.
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    // A device or FIFO is written in place (write_file_atomic): it must open for writing now.
    const int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return Status::invalid(flag + " " + path + ": not writable (" + std::strerror(errno) + ")");
    ::close(fd);
    return Status::ok();
  }
  // A regular or new file is written beside itself and renamed: the folder must take a new file.
  const std::string probe = (dir / (".mosaic-probe." + std::to_string(::getpid()))).string();
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0)
    return Status::invalid(flag + " " + path + ": not writable (cannot create a file in " + dir.string() + ": " +
                           std::strerror(errno) + ")");
  ::close(fd);
  ::unlink(probe.c_str());
  if (fs::exists(p, ec) && access(path.c_str(), W_OK) != 0) return Status::invalid(flag + " " + path + ": not writable");
  return Status::ok();
}

Status check_output_paths(const std::vector<std::pair<std::string, std::string>>& flag_paths) {
  for (size_t i = 0; i < flag_paths.size(); ++i) {
    const auto& [flag, path] = flag_paths[i];
    if (path.empty()) continue;
    MOSAIC_RETURN_IF_ERROR(check_output_path(path, flag));
    for (size_t j = 0; j < i; ++j) {
      if (flag_paths[j].second.empty()) continue;
      std::error_code ec;
      const bool same = flag_paths[j].second == path ||
                        (fs::exists(path, ec) && fs::equivalent(flag_paths[j].second, path, ec)) ||
                        fs::weakly_canonical(flag_paths[j].second, ec) == fs::weakly_canonical(path, ec);
      if (same) return Status::invalid(flag_paths[j].first + " and " + flag + " name the same file " + path);
    }
  }
  return Status::ok();
}

Provenance run_provenance(const std::string& model, const std::vector<std::pair<std::string, std::string>>& seeds) {
  Provenance p = collect_provenance();
  p.threads = omp_get_max_threads();
  for (auto& [backend, props] : backend_properties()) {
    for (auto& lv : props.libraries) p.versions.push_back(std::move(lv));
    p.kernels.push_back({backend, std::move(props.kernels), std::move(props.forced_by)});
  }
  for (auto& v : onnx_library_versions()) p.versions.push_back(std::move(v));
  for (const auto& plugin : loaded_plugins()) {
    if (plugin.file.empty()) {  // registered from Python, or a bundled plugin that did not load
      p.versions.push_back({"plugin " + plugin.path, ""});
      continue;
    }
    const auto h = sha256_file(plugin.file);
    p.versions.push_back({"plugin " + std::filesystem::path(plugin.file).filename().string(),
                          plugin.file + (h.ok() ? " sha256:" + h.value() : "")});
  }
  p.model = model;
  if (!model.empty() && model.rfind("zoo:", 0) != 0)
    if (auto h = sha256_file(model); h.ok()) p.model_sha256 = h.value();
  p.seeds = seeds;
  return p;
}

int run_program(const std::string& program, const std::vector<std::string>& args, const std::string& log,
                bool forward_interrupt) {
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    if (forward_interrupt) {
      setpgid(0, 0);                          // the terminal's Ctrl-C reaches the parent alone, which passes it on once
      prctl(PR_SET_PDEATHSIG, SIGTERM);       // and a parent that dies takes the child along
      if (getppid() != parent) _exit(128 + SIGTERM);  // it died before prctl
    }
    const sigset_t blocked = interrupt_signals();  // blocked by install_interrupt_handlers; exec keeps the mask
    pthread_sigmask(SIG_UNBLOCK, &blocked, nullptr);
    FILE* f = std::freopen(log.c_str(), "w", stdout);
    if (!f) _exit(127);
    dup2(fileno(stdout), fileno(stderr));
    std::vector<char*> cargs;
    for (const auto& a : args) cargs.push_back(const_cast<char*>(a.c_str()));
    cargs.push_back(nullptr);
    execvp(program.c_str(), cargs.data());
    _exit(127);
  }
  if (forward_interrupt) setpgid(pid, pid);  // also here: whichever runs first
  int status = 0;
  bool forwarded = false;
  for (;;) {
    const pid_t w = waitpid(pid, &status, forward_interrupt ? WNOHANG : 0);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) return -1;
    if (forward_interrupt && !forwarded && interrupted()) {  // the child stops as the parent was asked to
      kill(pid, interrupt_signal());
      forwarded = true;
    }
    if (w == 0) usleep(20000);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

Expected<Placement> assign_placement(const std::string& assign, const std::vector<std::string>& fallback) {
  const auto& reg = builtin_registry();
  if (is_placement_file(assign)) {
    bool own_fallback = false;
    MOSAIC_ASSIGN_OR_RETURN(Placement p, load_placement_file(assign, reg, &own_fallback));
    if (!own_fallback) p.fallback = fallback;
    return p;
  }
  MOSAIC_ASSIGN_OR_RETURN(Placement p, Placement::parse(assign, reg));
  p.fallback = fallback;
  return p;
}

namespace {
std::string& named_executable() {
  static std::string path;
  return path;
}
}  // namespace

void set_mosaic_executable(const std::string& path) { named_executable() = path; }

Expected<std::string> mosaic_executable() {
  if (!named_executable().empty()) return named_executable();
  if (const char* env = std::getenv("MOSAIC_EXECUTABLE"); env && *env) {
    if (access(env, X_OK) != 0) return Status::not_found(std::string("MOSAIC_EXECUTABLE=") + env + ": not an executable file");
    return std::string(env);
  }
  Dl_info info{};
  std::vector<std::string> tried;
  if (dladdr(reinterpret_cast<void*>(&mosaic_executable), &info) && info.dli_fname) {
    std::error_code ec;
    const std::filesystem::path here = std::filesystem::canonical(info.dli_fname, ec).parent_path();
    for (const auto& candidate : {here / "mosaic", here / "bin" / "mosaic", here.parent_path() / "bin" / "mosaic"}) {
      tried.push_back(candidate.string());
      if (std::filesystem::is_regular_file(candidate, ec) && access(candidate.c_str(), X_OK) == 0) return candidate.string();
    }
  }
  return Status::not_found("this call runs the mosaic program in child processes, and none was found (tried: " +
                           join(tried) + "); set MOSAIC_EXECUTABLE to the mosaic executable");
}

void append_plugin_arguments(std::vector<std::string>& args) {
  for (const auto& p : loaded_plugins()) {
    if (p.file.empty()) continue;  // registered from Python: no library a child could load
    args.push_back("--plugin");
    args.push_back(p.file);
  }
}

Expected<std::unique_ptr<ResultsDb>> open_run_store(const DbOptions& o) {
  std::unique_ptr<ResultsDb> none;
  const bool given = !o.path.empty();
  const std::string path = given ? o.path : default_results_db();
  if (o.off || (!given && (path == "off" || path == "none"))) return none;
  Status writable = check_output_path(path, given ? "--db" : "results store");
  std::error_code ec;
  // SQLite keeps a PATH-journal beside the store: on /dev/null that is a new, world-writable
  // file in /dev. The store must be a regular file.
  if (writable.is_ok() && fs::exists(path, ec) && !fs::is_regular_file(path, ec))
    writable = Status::invalid(std::string(given ? "--db " : "results store ") + path +
                               ": is not a regular file (use --no-db not to record the run)");
  Expected<ResultsDb> db = writable.is_ok() ? ResultsDb::open(path) : Expected<ResultsDb>(writable);
  if (db.ok()) return std::make_unique<ResultsDb>(std::move(db).value());
  if (given) return db.status();
  std::cerr << "mosaic: warning: the run will not be recorded: " << db.status().message() << " (--db FILE or --no-db)\n";
  return none;
}

Expected<ResultsDb> open_existing_store(const std::string& given) {
  const std::string path = given.empty() ? default_results_db() : given;
  if (!std::filesystem::exists(path))
    return Status::not_found(path + ": no results store here (bench, train and sweep create it; --db FILE names another)");
  return ResultsDb::open(path);
}

namespace {

bool all_digits(const std::string& s) {
  return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
}

}  // namespace

Expected<NamedRun> load_named_run(const std::string& what, const std::string& db_path, std::unique_ptr<ResultsDb>& db) {
  const bool is_last = what == "last" || what.rfind("last~", 0) == 0;
  if (all_digits(what) || is_last) {
    if (!db) {
      auto opened = open_existing_store(db_path);
      if (!opened.ok()) return opened.status().with_context(what);
      db = std::make_unique<ResultsDb>(std::move(opened).value());
    }
    int64_t id = 0;
    if (is_last) {
      const std::string back = what.size() > 5 ? what.substr(5) : "0";
      if (!all_digits(back)) return Status::invalid(what + ": expected last or last~N");
      auto l = db->latest("bench", std::atoi(back.c_str()));
      if (!l.ok()) return l.status().with_context(what);
      id = l.value();
    } else {
      id = std::atoll(what.c_str());
    }
    auto doc = db->document(id);
    if (!doc.ok()) return doc.status();
    return NamedRun{doc.value(), "run " + std::to_string(id)};
  }
  std::ifstream f(what);
  if (!f) return Status::not_found(what + ": no such run id or file");
  nlohmann::json doc = nlohmann::json::parse(f, nullptr, false);
  if (doc.is_discarded()) return Status::invalid(what + ": not JSON");
  return NamedRun{doc, what};
}

Status record_run(ResultsDb* db, const nlohmann::json& doc) {
  if (!db) return Status::ok();
  auto id = db->record(doc);
  if (!id.ok()) return id.status();
  std::cerr << "recorded as run " << id.value() << " in " << db->path() << " (mosaic history; mosaic compare)\n";
  return Status::ok();
}

MachinePeaks cpu_peaks(const Provenance& p, bool refresh, const std::function<void(const std::string&)>& say) {
  // The memory probes' working set is part of the key: an entry measured over less (256 MiB,
  // inside this Xeon's 300 MiB level-3 cache, before 2026-12-07) is not this measurement.
  const std::string key = p.cpu_model + " | " + std::to_string(p.threads) + " threads | " + kernels_line(p.kernels) +
                          " | memory probes over " + std::to_string(memory_probe_mib()) + " MiB";
  // More threads than cores measure the oversubscribed machine, not its peak: used for this
  // run's percentages, never cached as the machine's.
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  const bool oversubscribed = cores > 0 && p.threads > cores;
  return load_or_measure_peaks(
      key,
      [&say, oversubscribed] {
        say(oversubscribed ? std::string("measuring the sgemm and memory peaks at this thread count (not cached: more "
                                         "threads than cores)...")
                           : "measuring the machine's sgemm and memory peaks (once; cached in " + cache_dir() + ")...");
        MachinePeaks m;
        m.others_cpu = others_cpu_share_during([&m] {
          m.openblas_sgemm_gflops = probe_sgemm_gflops();
          m.onednn_sgemm_gflops = probe_onednn_sgemm_gflops();
          m.bandwidth_gbs = probe_triad_gbs();
          m.read_bandwidth_gbs = probe_read_gbs();
        });
        m.sgemm_gflops = std::max(m.openblas_sgemm_gflops, m.onednn_sgemm_gflops);
        return m;
      },
      refresh || oversubscribed, !oversubscribed);
}

}  // namespace mosaic::api
