#include "frontends/config/placement_config.hpp"

#include <set>
#include <yaml-cpp/yaml.h>

#include <filesystem>

namespace mosaic {

namespace {

/// The (key, value) pairs of a mapping of scalars, in file order.
Expected<std::vector<std::pair<std::string, std::string>>> scalar_map(const YAML::Node& n, const std::string& what) {
  if (!n.IsMap()) return Status::invalid(what + " must be a mapping of KEY: BACKEND");
  std::vector<std::pair<std::string, std::string>> out;
  std::set<std::string> seen;
  for (const auto& kv : n) {
    if (!kv.first.IsScalar() || !kv.second.IsScalar())
      return Status::invalid(what + ": every entry must be KEY: BACKEND");
    // yaml-cpp keeps both entries of a repeated key: which one wins would be an accident.
    if (!seen.insert(kv.first.Scalar()).second)
      return Status::invalid(what + ": '" + kv.first.Scalar() + "' appears twice (line " +
                             std::to_string(kv.first.Mark().line + 1) + ")");
    out.emplace_back(kv.first.Scalar(), kv.second.Scalar());
  }
  return out;
}

}  // namespace

bool is_placement_file(const std::string& assign) {
  auto ends = [&](const std::string& suffix) {
    return assign.size() > suffix.size() && assign.compare(assign.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return ends(".yaml") || ends(".yml");
}

Expected<Placement> load_placement_file(const std::string& path, const KernelRegistry& registry, bool* has_fallback) {
  if (!std::filesystem::is_regular_file(path)) return Status::not_found(path + ": no such placement file");
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    return Status::invalid(path + ": not valid YAML: " + e.what());
  }
  if (!root.IsMap()) return Status::invalid(path + ": a placement file is a mapping (default, ops, nodes, fallback)");
  Placement p;
  bool assigned = false;
  *has_fallback = false;
  std::set<std::string> seen;
  for (const auto& kv : root) {
    const std::string key = kv.first.Scalar();
    if (!seen.insert(key).second)
      return Status::invalid(path + ": key '" + key + "' appears twice (line " + std::to_string(kv.first.Mark().line + 1) + ")");
    const YAML::Node& v = kv.second;
    const std::string where = path + ": '" + key + "'";
    if (key == "default") {
      if (!v.IsScalar()) return Status::invalid(where + " must be one backend name");
      MOSAIC_RETURN_IF_ERROR(p.add("*", v.Scalar(), registry).with_context(where));
      assigned = true;
    } else if (key == "ops" || key == "nodes") {
      MOSAIC_ASSIGN_OR_RETURN(auto entries, scalar_map(v, where));
      for (const auto& [k, backend] : entries) {
        const std::string spec_key = key == "nodes" ? "@" + k : k;
        MOSAIC_RETURN_IF_ERROR(p.add(spec_key, backend, registry).with_context(where + " entry '" + k + "'"));
        assigned = true;
      }
    } else if (key == "fallback") {
      p.fallback.clear();
      if (v.IsScalar()) {
        p.fallback.push_back(v.Scalar());
      } else if (v.IsSequence()) {
        for (const auto& b : v) {
          if (!b.IsScalar()) return Status::invalid(where + " must be a list of backend names");
          p.fallback.push_back(b.Scalar());
        }
      } else {
        return Status::invalid(where + " must be a backend name or a list of them");
      }
      for (const auto& b : p.fallback)
        if (!registry.has_backend(b)) return Status::invalid(where + ": unknown backend '" + b + "'");
      *has_fallback = true;
    } else {
      return Status::invalid(path + ": unknown key '" + key + "' (a placement file has default, ops, nodes, fallback)");
    }
  }
  if (!assigned) return Status::invalid(path + ": assigns nothing (give default, ops or nodes)");
  return p;
}

}  // namespace mosaic
