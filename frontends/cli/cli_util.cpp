#include "frontends/cli/cli_util.hpp"

#include <unistd.h>

#include <filesystem>
#include <iostream>

namespace mosaic::cli {

namespace fs = std::filesystem;

int fail(const Status& st) {
  std::cerr << "mosaic: error: " << st.message() << "\n";
  return 2;
}

std::string join(const std::vector<std::string>& items, const std::string& sep) {
  std::string s;
  for (const auto& i : items) s += (s.empty() ? "" : sep) + i;
  return s;
}

Status check_output_path(const std::string& path, const std::string& flag) {
  std::error_code ec;
  const fs::path p(path);
  if (fs::is_directory(p, ec)) return Status::invalid(flag + " " + path + ": is a directory, not a file");
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  if (!fs::is_directory(dir, ec)) return Status::not_found(flag + " " + path + ": directory " + dir.string() + " does not exist");
  if (fs::exists(p, ec) ? access(path.c_str(), W_OK) != 0 : access(dir.c_str(), W_OK) != 0)
    return Status::invalid(flag + " " + path + ": not writable");
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

}  // namespace mosaic::cli
