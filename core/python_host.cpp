#include "core/python_host.hpp"

#include <dlfcn.h>

#include <filesystem>
#include <mutex>

namespace mosaic {

namespace {

constexpr const char* kHostFile = "libmosaic_python_host.so";
using HostRun = int (*)(const char* file, const char* kind, char* out, size_t out_size);

/// The host library: $MOSAIC_PYTHON_HOST, else python/ beside the executable (the build tree),
/// else ../lib/mosaic/python from it (after cmake --install).
Expected<HostRun> host() {
  static std::mutex mu;
  static HostRun run = nullptr;
  std::lock_guard<std::mutex> lock(mu);
  if (run) return run;
  namespace fs = std::filesystem;
  std::vector<fs::path> candidates;
  if (const char* env = std::getenv("MOSAIC_PYTHON_HOST"); env && *env) candidates.push_back(env);
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    candidates.push_back(exe.parent_path() / "python" / kHostFile);
    candidates.push_back(exe.parent_path() / ".." / "lib" / "mosaic" / "python" / kHostFile);
  }
  std::string tried;
  for (const auto& c : candidates) {
    tried += (tried.empty() ? "" : ", ") + c.string();
    if (!fs::is_regular_file(c, ec)) continue;
    // Global: NumPy's extension modules, loaded later by the interpreter, resolve Python's
    // C API against the libpython this library brings in.
    void* lib = dlopen(c.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (!lib) {
      const char* why = dlerror();
      return Status::io_error(std::string("the Python host ") + c.string() + ": cannot load: " + (why ? why : "?"));
    }
    run = reinterpret_cast<HostRun>(dlsym(lib, "mosaic_python_host_run"));
    if (!run) return Status::invalid(std::string("the Python host ") + c.string() + " has no mosaic_python_host_run");
    return run;
  }
  return Status::unsupported(std::string("Python plugins need the Python package, which this build lacks (") +
                             kHostFile + " not found in " + tried +
                             "; Debian: apt-get install pybind11-dev python3-dev, then rebuild)");
}

}  // namespace

bool is_python_plugin(const std::string& path) {
  return path.size() > 3 && path.compare(path.size() - 3, 3, ".py") == 0;
}

Expected<std::vector<std::string>> run_python_plugin(const std::string& path, const std::string& kind) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return Status::io_error("Python plugin " + path + ": no such file");
  MOSAIC_ASSIGN_OR_RETURN(HostRun run, host());
  std::string out(4096, '\0');
  const int rc = run(path.c_str(), kind.c_str(), out.data(), out.size());
  out.resize(out.find('\0') == std::string::npos ? out.size() : out.find('\0'));
  if (rc != 0) return Status::invalid("Python plugin " + path + ": " + out);
  std::vector<std::string> names;
  for (size_t start = 0; start < out.size();) {
    const size_t end = std::min(out.find(',', start), out.size());
    if (end > start) names.push_back(out.substr(start, end - start));
    start = end + 1;
  }
  return names;
}

}  // namespace mosaic
