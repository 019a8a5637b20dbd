#include "backends/plugins.hpp"
#include "core/python_host.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>

#include "backends/plugin.hpp"
#include "backends/registry.hpp"

namespace mosaic {

namespace {

std::vector<LoadedPlugin>& plugins() {
  static std::vector<LoadedPlugin> p;
  return p;
}

/// Collects a plugin's registrations on a copy of the registry, so that a failure leaves
/// the real one untouched; the copy replaces `committed` when all of it succeeded.
class PluginCollector final : public Registrar {
 public:
  explicit PluginCollector(const KernelRegistry& committed) : registry_(committed), committed_(committed) {}

  Status add_backend(BackendInfo info) override {
    const std::string name = info.name;
    MOSAIC_RETURN_IF_ERROR(registry_.add_backend(std::move(info)));
    added_.backends.push_back(name);
    return Status::ok();
  }
  /// A kernel for an op this plugin adds is registered under the op's key (its domain and op
  /// type: Node::op_key), so that it never runs an ONNX op of the same name; any other op
  /// type is an ONNX op (or Mosaic's own).
  Status add_kernel(const std::string& backend, const std::string& op_type, KernelFactory factory,
                    KernelTraits traits) override {
    if (!factory) return Status::invalid("kernel " + backend + ":" + op_type + ": no factory");
    std::string key = op_type;
    for (const auto& s : schemas_)
      if (s.op_type == op_type) key = op_key(s.domain, s.op_type);
    MOSAIC_RETURN_IF_ERROR(registry_.add(backend, key, std::move(factory), std::move(traits)));
    added_.kernels.push_back(backend + ":" + key);
    return Status::ok();
  }
  using Registrar::add_kernel;
  Status add_operator(OpSchema schema) override {
    MOSAIC_RETURN_IF_ERROR(check_schema(schema));
    added_.operators.push_back(schema.domain + "." + schema.op_type);
    schemas_.push_back(std::move(schema));
    return Status::ok();
  }
  /// The process's registry, which holds this plugin's kernels once they are committed (the
  /// copy being filled is gone by then).
  const KernelRegistry& registry() const override { return committed_; }

  /// Every kernel is for an op with a schema: Mosaic's, or one this plugin adds (declared
  /// before its kernels: a kernel registered first would have been taken for ONNX's op).
  Status check_kernels() const {
    std::set<std::string> own, own_types;
    for (const auto& s : schemas_) {
      own.insert(op_key(s.domain, s.op_type));
      own_types.insert(s.op_type);
    }
    for (const auto& k : added_.kernels) {
      const std::string op = k.substr(k.find(':') + 1);
      if (own_types.count(op) && !own.count(op))
        return Status::invalid("kernel " + k + ": registered before the plugin added its operator " + op +
                               "; add the operator (add_operator) before its kernels");
      if (op != kToPlainOp && !own.count(op) && !find_schema(op))
        return Status::invalid("kernel " + k + ": no operator " + op +
                               " (neither an ONNX operator Mosaic knows nor one this plugin adds)");
    }
    return Status::ok();
  }

  KernelRegistry registry_;
  const KernelRegistry& committed_;
  std::vector<OpSchema> schemas_;
  LoadedPlugin added_;
};

}  // namespace

Status load_plugin(const std::string& path) {
  std::error_code ec;
  const std::string file = std::filesystem::weakly_canonical(path, ec).string();
  const std::string what = "plugin " + path;
  if (!ec && std::filesystem::is_directory(file, ec))
    return Status::invalid(what + ": is a directory; --plugin takes a plugin file (a .so library or a .py file)");
  if (!ec && std::filesystem::exists(file, ec) && !std::filesystem::is_regular_file(file, ec))
    return Status::invalid(what + ": is not a regular file");
  if (ec || !std::filesystem::is_regular_file(file, ec)) return Status::io_error(what + ": no such file");
  for (const auto& p : plugins())
    if (p.file == file) return Status::ok();
  if (is_python_plugin(path)) {  // a Python file: its mosaic.Operator classes (core/python_host.hpp)
    auto names = run_python_plugin(path, "operators");
    if (!names.ok()) return names.status();
    // The classes are registered (one entry each, from Python); this entry names the file, so
    // that child processes get it as --plugin too (api::append_plugin_arguments).
    LoadedPlugin entry;
    entry.path = path;
    entry.file = file;
    for (const auto& n : names.value()) entry.operators.push_back(n);
    plugins().push_back(std::move(entry));
    return Status::ok();
  }
  void* lib = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* why = dlerror();
    return Status::io_error(what + ": cannot load: " + (why ? why : "unknown error"));
  }
  auto version = reinterpret_cast<int (*)()>(dlsym(lib, "mosaic_plugin_api_version"));
  auto abi = reinterpret_cast<uint64_t (*)()>(dlsym(lib, "mosaic_plugin_abi"));
  auto registration = reinterpret_cast<void (*)(Registrar*, Status*)>(dlsym(lib, "mosaic_plugin_register"));
  if (!version || !abi || !registration) {
    const bool optimizer = dlsym(lib, "mosaic_optimizer_api_version") != nullptr;
    dlclose(lib);
    return Status::invalid(what + ": not a Mosaic operator/backend plugin (no MOSAIC_PLUGIN exports" +
                           (optimizer ? "; it is an optimizer plugin: load it with --optimizer-plugin" : "") + ")");
  }
  if (const int v = version(); v != MOSAIC_PLUGIN_API_VERSION) {
    dlclose(lib);
    return Status::invalid(what + " was built against plugin interface version " + std::to_string(v) +
                           ", this Mosaic has version " + std::to_string(MOSAIC_PLUGIN_API_VERSION) +
                           "; rebuild it against this Mosaic's headers");
  }
  if (abi() != plugin_abi_fingerprint()) {
    dlclose(lib);
    return Status::invalid(what + " was built against headers whose types differ from this Mosaic's (same interface "
                                  "version, other type sizes); rebuild it against this Mosaic's headers");
  }
  Status st = register_extension(path, file, [registration](Registrar& r) {
    Status out;
    registration(&r, &out);
    return out;
  });
  if (st.is_ok()) return st;  // kept loaded for the life of the process: its kernels live in it
  // The registry copy holding the plugin's factories is gone before the library is.
  dlclose(lib);
  return Status(st.code(), what + ": registration failed: " + st.message());
}

Status register_extension(const std::string& origin, const std::string& file,
                          const std::function<Status(Registrar&)>& registration) {
  PluginCollector r(builtin_registry());
  Status st = registration(r);
  if (st.is_ok()) st = r.check_kernels();
  if (st.is_ok()) st = add_schemas(std::move(r.schemas_));
  if (!st.is_ok()) return st;
  mutable_registry_for_plugins() = std::move(r.registry_);
  r.added_.path = origin;
  r.added_.file = file;
  plugins().push_back(std::move(r.added_));
  return Status::ok();
}

const std::vector<LoadedPlugin>& loaded_plugins() { return plugins(); }

std::vector<std::string> plugin_arguments(int argc, const char* const* argv) {
  std::vector<std::string> paths;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") break;
    if (a == "--plugin" && i + 1 < argc) paths.push_back(argv[++i]);
    else if (a.rfind("--plugin=", 0) == 0) paths.push_back(a.substr(9));
  }
  return paths;
}

std::vector<std::string> bundled_plugins() {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<fs::path> dirs;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  // Beside the program (the build tree); for a program in a bin/ folder, an install's
  // lib/mosaic/plugins or the Python package's plugins/ above it (never the plugins of a build
  // tree that merely contains this program's, as tests/build_options' naive-only build).
  if (!ec) {
    dirs = {exe.parent_path() / "plugins"};
    if (exe.parent_path().filename() == "bin")
      for (const fs::path& d : {exe.parent_path() / ".." / "lib" / "mosaic" / "plugins", exe.parent_path() / ".." / "plugins"})
        dirs.push_back(d);
  }
  // A program that embeds Mosaic links libmosaic.so: look beside it too (the build tree's
  // plugins/, or lib/mosaic/plugins after cmake --install).
  Dl_info self{};
  if (dladdr(reinterpret_cast<void*>(&bundled_plugins), &self) != 0 && self.dli_fname) {
    const fs::path lib = fs::weakly_canonical(fs::path(self.dli_fname), ec).parent_path();
    if (!ec && lib != exe.parent_path()) {
      dirs.push_back(lib / "plugins");
      dirs.push_back(lib / "mosaic" / "plugins");
    }
  }
  std::vector<std::string> found;
  for (const fs::path& dir : dirs) {
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (name.rfind("libmosaic_", 0) == 0 && name.size() > 13 && name.compare(name.size() - 3, 3, ".so") == 0 &&
          it->is_regular_file(ec))
        found.push_back(fs::weakly_canonical(it->path(), ec).string());
    }
    if (!found.empty()) break;  // the build tree's copies, or else the installed ones
  }
  std::sort(found.begin(), found.end());
  return found;
}

std::string bundled_backend_name(const std::string& path) {
  const std::string name = std::filesystem::path(path).filename().string();
  return name.substr(10, name.size() - 13);  // libmosaic_NAME.so
}

Status load_bundled_plugin(const std::string& path) {
  const Status loaded = load_plugin(path);
  if (loaded.is_ok()) return loaded;
  const std::string name = bundled_backend_name(path);
  if (builtin_registry().has_backend(name)) return loaded;
  BackendInfo info;
  info.name = name;
  info.summary = "the bundled plugin " + std::filesystem::path(path).filename().string() + ", which did not load";
  const std::string why = loaded.message();
  info.unavailable = [why] { return why; };
  // No library file: a child process (bench --processes) is not asked to load it. A name the
  // registry refuses (a comma in the file name) leaves the loader's error to say what failed.
  const Status listed =
      register_extension(path + " (did not load)", "", [&info](Registrar& r) { return r.add_backend(info); });
  return listed.is_ok() ? listed : loaded;
}

std::vector<std::string> bundled_plugins_wanted(int argc, const char* const* argv) {
  const std::vector<std::string> bundled = bundled_plugins();
  if (bundled.empty()) return {};
  std::set<std::string> words;
  auto add_words = [&](const std::string& text) {
    std::string w;
    for (char c : text + " ") {
      if (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-') {
        w += c;
      } else if (!w.empty()) {
        words.insert(w);
        w.clear();
      }
    }
  };
  bool subcommand_seen = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (!subcommand_seen && !a.empty() && a[0] != '-') {
      subcommand_seen = true;
      if (a == "backends") return bundled;
      continue;
    }
    add_words(a);
    const size_t dot = a.rfind('.');
    const std::string ext = dot == std::string::npos ? "" : a.substr(dot);
    std::error_code ec;
    if ((ext == ".yaml" || ext == ".yml") && std::filesystem::is_regular_file(a, ec)) {
      std::ifstream in(a);
      add_words(std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()));
    }
  }
  if (words.count("all") || words.count("auto")) return bundled;
  std::vector<std::string> wanted;
  for (const std::string& p : bundled)
    if (words.count(bundled_backend_name(p))) wanted.push_back(p);
  return wanted;
}

}  // namespace mosaic
