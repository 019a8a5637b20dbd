// Reading run documents (bench, generate, ...) field by field without throwing: what the
// comparisons and checks of metrics/ share.
#pragma once

#include <initializer_list>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ir/status.hpp"

namespace mosaic::json_fields {

/// The numbers of a JSON array (other elements skipped); empty for anything else.
inline std::vector<double> numbers(const nlohmann::json& j) {
  std::vector<double> v;
  if (j.is_array())
    for (const auto& x : j)
      if (x.is_number()) v.push_back(x.get<double>());
  return v;
}

/// A setting's value as a message shows it (strings without quotes).
inline std::string show(const nlohmann::json& j) { return j.is_string() ? j.get<std::string>() : j.dump(); }

/// The value at a path of object keys; null where any is missing.
inline nlohmann::json at(const nlohmann::json& doc, std::initializer_list<const char*> path) {
  const nlohmann::json* j = &doc;
  for (const char* k : path) {
    if (!j->is_object() || !j->contains(k)) return nlohmann::json();
    j = &(*j)[k];
  }
  return *j;
}

/// j[key], null when j is not an object or has no such key.
inline nlohmann::json member(const nlohmann::json& j, const std::string& key) {
  return j.is_object() && j.contains(key) ? j[key] : nlohmann::json();
}

/// A setting that should match for a like-for-like comparison: a warning when it does not.
inline void check_same(const std::string& what, const nlohmann::json& a, const nlohmann::json& b,
                       std::vector<std::string>& warnings) {
  if (a == b) return;
  warnings.push_back(what + " differs: " + show(a) + " vs " + show(b));
}

/// The model a run document measured: its file's hash where known, else its name.
inline nlohmann::json model_of(const nlohmann::json& d) {
  const nlohmann::json h = at(d, {"provenance", "run", "model_sha256"});
  return h.is_null() ? at(d, {"model"}) : h;
}

/// Two documents that are one run: nothing to compare.
inline Status refuse_same_run(const nlohmann::json& a, const nlohmann::json& b) {
  if (a != b) return Status::ok();
  return Status::invalid("A and B are the same run: comparing a run with itself says nothing (name two runs, e.g. "
                         "last~1 last)");
}

/// The settings two runs differ in, as one refusal (none: ok): a difference in time would be
/// theirs, not the code's.
inline Status refuse_differences(const std::vector<std::string>& differ) {
  if (differ.empty()) return Status::ok();
  std::string what;
  for (const auto& d : differ) what += (what.empty() ? "" : ", ") + d;
  return Status::invalid("A and B differ in " + what +
                         ": a difference in time would be the settings', not the code's (--force compares them anyway)");
}

/// Warnings for the machine and build two runs were measured on, where they differ.
inline void warn_about_machine_and_build(const nlohmann::json& a, const nlohmann::json& b,
                                         std::vector<std::string>& warnings) {
  check_same("machine", at(a, {"provenance", "machine", "cpu_model"}), at(b, {"provenance", "machine", "cpu_model"}),
             warnings);
  for (const char* k : {"build_type", "sanitized", "native"})
    check_same(std::string("build ") + k, at(a, {"provenance", "build", k}), at(b, {"provenance", "build", k}), warnings);
}

}  // namespace mosaic::json_fields
