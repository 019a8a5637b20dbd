#include "frontends/config/sweep_config.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <filesystem>
#include <set>

#include "backends/registry.hpp"

namespace mosaic {
namespace {

const std::set<std::string> kKeys = {"name",      "output",   "data",     "models",       "backends",
                                     "optimizers", "lr",       "batch",    "epochs",       "steps_per_epoch",
                                     "seed",      "evaluate", "shuffle",  "normalize",    "momentum",
                                     "weight_decay", "threads", "accuracy_epochs", "accuracy", "ranks", "mode",
                                     "servers", "objective", "memory_limit"};

/// Reads key as T or a list of T (a scalar becomes a one-element list).
template <typename T>
Status read_list(const YAML::Node& root, const std::string& file, const std::string& key, std::vector<T>& out) {
  const YAML::Node n = root[key];
  if (!n) return Status::ok();
  out.clear();
  try {
    if (n.IsScalar()) {
      out.push_back(n.as<T>());
    } else if (n.IsSequence()) {
      for (const auto& item : n) out.push_back(item.as<T>());
    } else {
      return Status::invalid(file + ": key '" + key + "' must be a value or a list");
    }
  } catch (const YAML::Exception&) {
    return Status::invalid(file + ": key '" + key + "' has a value of the wrong type");
  }
  if (out.empty()) return Status::invalid(file + ": key '" + key + "' is an empty list");
  for (size_t i = 0; i < out.size(); ++i) {
    if constexpr (std::is_floating_point_v<T>)
      if (!std::isfinite(out[i])) return Status::invalid(file + ": key '" + key + "': values must be finite numbers");
    // An axis listing a value twice would run identical cells (and overwrite their results).
    for (size_t j = 0; j < i; ++j)
      if (out[j] == out[i])
        return Status::invalid(file + ": key '" + key + "' lists the value '" + n[i].Scalar() + "' twice (items " +
                               std::to_string(j + 1) + " and " + std::to_string(i + 1) + ")");
  }
  return Status::ok();
}

template <typename T>
Status read_value(const YAML::Node& root, const std::string& file, const std::string& key, T& out) {
  const YAML::Node n = root[key];
  if (!n) return Status::ok();
  if (!n.IsScalar()) return Status::invalid(file + ": key '" + key + "' must be a single value");
  try {
    out = n.as<T>();
  } catch (const YAML::Exception&) {
    return Status::invalid(file + ": key '" + key + "' has a value of the wrong type ('" + n.Scalar() + "')");
  }
  if constexpr (std::is_floating_point_v<T>)
    if (!std::isfinite(out)) return Status::invalid(file + ": key '" + key + "' must be a finite number, got '" + n.Scalar() + "'");
  return Status::ok();
}

}  // namespace

bool is_placement(const std::string& entry) {
  const auto ext = std::filesystem::path(entry).extension();
  return entry.find('=') != std::string::npos || ext == ".yaml" || ext == ".yml";
}

Expected<SweepConfig> load_sweep_config(const std::string& path) {
  if (!std::filesystem::exists(path)) return Status::not_found(path + ": not found");
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    return Status::invalid(path + ": not valid YAML: " + e.what());
  }
  if (!root.IsMap()) return Status::invalid(path + ": expected a mapping of sweep keys");
  std::set<std::string> seen;
  for (const auto& kv : root) {
    const std::string key = kv.first.as<std::string>();
    // yaml-cpp keeps both and answers with the first: a repeated key is an error, not a silent choice.
    if (!seen.insert(key).second)
      return Status::invalid(path + ": key '" + key + "' appears twice (line " + std::to_string(kv.first.Mark().line + 1) + ")");
    if (!kKeys.count(key)) {
      std::string known;
      for (const auto& k : kKeys) known += (known.empty() ? "" : ", ") + k;
      return Status::invalid(path + ": unknown key '" + key + "' (known: " + known + ")");
    }
  }
  SweepConfig c;
  c.file = path;
  c.name = std::filesystem::path(path).stem().string();
  MOSAIC_RETURN_IF_ERROR(read_value(root, path, "name", c.name));
  MOSAIC_RETURN_IF_ERROR(read_value(root, path, "output", c.output));
  MOSAIC_RETURN_IF_ERROR(read_value(root, path, "data", c.data));
  MOSAIC_RETURN_IF_ERROR(read_list(root, path, "models", c.models));
  MOSAIC_RETURN_IF_ERROR(read_list(root, path, "backends", c.backends));
  if (c.backends.empty()) c.backends = {default_backend()};  // onednn where this build has it
  MOSAIC_RETURN_IF_ERROR(read_list(root, path, "optimizers", c.optimizers));
  MOSAIC_RETURN_IF_ERROR(read_list(root, path, "lr", c.lrs));
  {  // sizes, or `max` (the largest that fits)
    std::vector<std::string> batches;
    MOSAIC_RETURN_IF_ERROR(read_list(root, path, "batch", batches));
    if (!batches.empty()) c.batches.clear();
    for (const auto& b : batches) {
      if (b == "max") {
        c.batches.push_back(SweepConfig::kLargestBatch);
        continue;
      }
      size_t used = 0;
      long long v = 0;
      try {
        v = std::stoll(b, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != b.size() || v < 1)
        return Status::invalid(path + ": key 'batch': '" + b + "' is neither a positive batch size nor max");
      c.batches.push_back(v);
    }
  }
  MOSAIC_RETURN_IF_ERROR(read_value(root, path, "objective", c.objective));
  MOSAIC_RETURN_IF_ERROR(read_value(root, path, "memory_limit", c.memory_limit));
  if (!c.memory_limit.empty() && std::find(c.batches.begin(), c.batches.end(), SweepConfig::kLargestBatch) == c.batches.end())
    return Status::invalid(path + ": key 'memory_limit' applies to 'batch: max', which the sweep does not list");
  if (!c.objective.empty() && c.objective != "next-token" && c.objective != "masked-lm")
    return Status::invalid(path + ": key 'objective' must be next-token or masked-lm, got '" + c.objective + "'");
  MOSAIC_RETURN_IF_ERROR(read_value(root, path, "epochs", c.epochs));
  MOSAIC_RETURN_IF_ERROR(read_value(root, path, "steps_per_epoch", c.steps_per_epoch));
  MOSAIC_RETURN_IF_ERROR(read_value(root, path, "seed", c.seed));
  MOSAIC_RETURN_IF_ERROR(read_value(root, path, "evaluate", c.evaluate));
  MOSAIC_RETURN_IF_ERROR(read_value(root, path, "shuffle", c.shuffle));
  MOSAIC_RETURN_IF_ERROR(read_value(root, path, "normalize", c.normalize));
  MOSAIC_RETURN_IF_ERROR(read_value(root, path, "momentum", c.momentum));
  MOSAIC_RETURN_IF_ERROR(read_value(root, path, "weight_decay", c.weight_decay));
  MOSAIC_RETURN_IF_ERROR(read_value(root, path, "threads", c.threads));
  MOSAIC_RETURN_IF_ERROR(read_list(root, path, "accuracy_epochs", c.accuracy_epochs));
  MOSAIC_RETURN_IF_ERROR(read_list(root, path, "ranks", c.ranks));
  MOSAIC_RETURN_IF_ERROR(read_list(root, path, "mode", c.modes));
  MOSAIC_RETURN_IF_ERROR(read_value(root, path, "servers", c.servers));
  for (int64_t r : c.ranks)
    if (r < 1) return Status::invalid(path + ": key 'ranks': worker counts must be positive");
  if (c.servers < 1) return Status::invalid(path + ": key 'servers' must be at least 1");
  if (c.threads < 0) return Status::invalid(path + ": key 'threads' must not be negative (0: the defaults)");
  if (!(c.momentum >= 0 && c.momentum < 1)) return Status::invalid(path + ": key 'momentum' must be in [0, 1)");
  if (!(c.weight_decay >= 0)) return Status::invalid(path + ": key 'weight_decay' must be >= 0");
  if (root["mode"] && c.ranks.empty()) return Status::invalid(path + ": key 'mode' needs key 'ranks' (the worker counts)");
  MOSAIC_RETURN_IF_ERROR(read_value(root, path, "accuracy", c.accuracy));

  if (c.models.empty()) return Status::invalid(path + ": key 'models' is required (ONNX files or zoo:NAME)");
  if (c.epochs < 1) return Status::invalid(path + ": key 'epochs' must be positive");
  // Each epoch is a row of Table 3 and an entry of every cell's log: 10^12 of them was an
  // allocation failure ("std::bad_alloc") before anything ran.
  constexpr int64_t kMaxEpochs = 100000;
  if (c.epochs > kMaxEpochs)
    return Status::invalid(path + ": key 'epochs': " + std::to_string(c.epochs) + " epochs; at most " +
                           std::to_string(kMaxEpochs) + " (a sweep's cells are trained for whole epochs)");
  if (c.steps_per_epoch < 0) return Status::invalid(path + ": key 'steps_per_epoch' must not be negative");
  for (double lr : c.lrs)
    if (!(lr > 0)) return Status::invalid(path + ": key 'lr': learning rates must be positive");
  for (int64_t e : c.accuracy_epochs)
    if (e < 1 || e > c.epochs)
      return Status::invalid(path + ": key 'accuracy_epochs': epoch " + std::to_string(e) + " is outside 1.." +
                             std::to_string(c.epochs));
  if (c.accuracy_epochs.empty())
    for (int64_t e = 1; e <= c.epochs; ++e) c.accuracy_epochs.push_back(e);
  if (c.accuracy != "train" && c.accuracy != "test")
    return Status::invalid(path + ": key 'accuracy' must be train or test");
  if (c.accuracy == "test" && !c.evaluate)
    return Status::invalid(path + ": key 'accuracy' is test but 'evaluate' is false");
  // Relative paths are relative to the YAML file, so a sweep runs the same from anywhere.
  const auto base = std::filesystem::path(path).parent_path();
  if (c.output.empty()) c.output = (base / ("sweep-" + c.name)).string();
  else if (std::filesystem::path(c.output).is_relative()) c.output = (base / c.output).string();
  for (auto& m : c.models)
    if (m.rfind("zoo:", 0) != 0 && std::filesystem::path(m).is_relative()) m = (base / m).string();
  for (auto& b : c.backends)
    if (is_placement(b) && b.find('=') == std::string::npos && std::filesystem::path(b).is_relative())
      b = (base / b).string();
  return c;
}

}  // namespace mosaic
