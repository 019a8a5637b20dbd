#include "api/checkpoint.hpp"
#include "ir/file_io.hpp"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace mosaic::api {
namespace {

constexpr char kMagic[8] = {'M', 'O', 'S', 'A', 'I', 'C', 'K', '1'};

// The plan values a checkpoint holds: the model's float initializers (trained parameters,
// running statistics and float constants), as the plan holds them now.
std::vector<const PlanValue*> saved_values(const Plan& plan) {
  std::vector<const PlanValue*> out;
  for (const auto& v : plan.values())
    if (v.is_const && v.desc.dtype == DType::kF32 && plan.graph().initializers.count(v.name)) out.push_back(&v);
  return out;
}

}  // namespace

Status write_checkpoint(const std::string& path, nlohmann::json header, const Plan& plan, const Optimizer& optimizer) {
  header["schema"] = "mosaic.checkpoint/1";
  header["optimizer_steps"] = optimizer.steps();
  nlohmann::json tensors = nlohmann::json::array();
  const auto values = saved_values(plan);
  for (const PlanValue* v : values) tensors.push_back({{"name", v->name}, {"floats", v->tensor.numel()}});
  header["tensors"] = tensors;
  // Per parameter in parameters() order, resident parameters' state copied out of their devices.
  MOSAIC_ASSIGN_OR_RETURN(const auto optimizer_state, plan.optimizer_state(optimizer));
  nlohmann::json state = nlohmann::json::array();
  for (const auto& per_param : optimizer_state) {
    nlohmann::json sizes = nlohmann::json::array();
    for (const auto& buffer : per_param) sizes.push_back(buffer.size());
    state.push_back(sizes);
  }
  header["optimizer_state"] = state;
  const std::string text = header.dump();
  return write_file_atomic(path, [&](std::ostream& f) {
    const uint64_t n = text.size();
    f.write(kMagic, sizeof kMagic);
    f.write(reinterpret_cast<const char*>(&n), sizeof n);
    f.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const PlanValue* v : values)
      f.write(static_cast<const char*>(v->tensor.data()), static_cast<std::streamsize>(v->tensor.numel() * sizeof(float)));
    for (const auto& per_param : optimizer_state)
      for (const auto& buffer : per_param)
        f.write(reinterpret_cast<const char*>(buffer.data()), static_cast<std::streamsize>(buffer.size() * sizeof(float)));
  });
}

Expected<Checkpoint> read_checkpoint(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status::io_error(path + ": cannot open the checkpoint");
  char magic[8] = {0};
  uint64_t n = 0;
  f.read(magic, sizeof magic);
  f.read(reinterpret_cast<char*>(&n), sizeof n);
  if (!f || std::memcmp(magic, kMagic, sizeof kMagic) != 0)
    return Status::invalid(path + ": not a Mosaic checkpoint (written by train --checkpoint)");
  std::error_code ec;
  const auto file_size = std::filesystem::file_size(path, ec);
  if (n > (1ull << 31) || (!ec && n > file_size)) return Status::invalid(path + ": corrupt checkpoint header");
  std::string text(n, '\0');
  f.read(text.data(), static_cast<std::streamsize>(n));
  Checkpoint c;
  // Every count in the header is checked against what is left of the file before it is allocated.
  int64_t left = ec ? 0 : static_cast<int64_t>(file_size) - 16 - static_cast<int64_t>(n);
  auto take = [&](const nlohmann::json& count, const std::string& what) -> Expected<size_t> {
    const uint64_t floats = count.get<uint64_t>();
    if (floats > static_cast<uint64_t>(std::max<int64_t>(left, 0)) / sizeof(float))
      return Status::invalid(path + ": the checkpoint is truncated (" + what + " needs " + std::to_string(floats) +
                             " floats, " + std::to_string(std::max<int64_t>(left, 0)) + " bytes are left)");
    left -= static_cast<int64_t>(floats * sizeof(float));
    return static_cast<size_t>(floats);
  };
  try {
    c.header = nlohmann::json::parse(text);
    if (c.header.value("schema", "") != "mosaic.checkpoint/1")
      return Status::invalid(path + ": checkpoint schema '" + c.header.value("schema", "") +
                             "' is not mosaic.checkpoint/1 (written by another Mosaic version?)");
    for (const auto& t : c.header.at("tensors")) {
      MOSAIC_ASSIGN_OR_RETURN(size_t floats, take(t.at("floats"), "tensor '" + t.at("name").get<std::string>() + "'"));
      std::vector<float> data(floats);
      f.read(reinterpret_cast<char*>(data.data()), static_cast<std::streamsize>(data.size() * sizeof(float)));
      c.values[t.at("name").get<std::string>()] = std::move(data);
    }
    for (const auto& sizes : c.header.at("optimizer_state")) {
      c.optimizer_state.emplace_back();
      for (const auto& s : sizes) {
        MOSAIC_ASSIGN_OR_RETURN(size_t floats, take(s, "optimizer state"));
        std::vector<float> buffer(floats);
        f.read(reinterpret_cast<char*>(buffer.data()), static_cast<std::streamsize>(buffer.size() * sizeof(float)));
        c.optimizer_state.back().push_back(std::move(buffer));
      }
    }
  } catch (const nlohmann::json::exception& e) {
    return Status::invalid(path + ": corrupt checkpoint header: " + e.what());
  }
  if (!f) return Status::invalid(path + ": the checkpoint is truncated");
  return c;
}

Status check_settings(const std::string& path, const Checkpoint& c, const nlohmann::json& settings) {
  const nlohmann::json saved = c.header.value("settings", nlohmann::json::object());
  auto differs = [&](const std::string& key, const nlohmann::json& value) -> Status {
    if (saved.contains(key) && saved[key] != value)
      return Status::invalid(path + ": the checkpoint was written with " + key + " " + saved[key].dump() +
                             ", this run has " + value.dump() + " (resume with the same settings)");
    return Status::ok();
  };
  if (settings.contains("model")) MOSAIC_RETURN_IF_ERROR(differs("model", settings["model"]));  // the likeliest mix-up first
  for (const auto& [key, value] : settings.items()) MOSAIC_RETURN_IF_ERROR(differs(key, value));
  return Status::ok();
}

Status restore_checkpoint(const std::string& path, const Checkpoint& c, Plan& plan, Optimizer& optimizer) {
  const auto values = saved_values(plan);
  if (values.size() != c.values.size())
    return Status::invalid(path + ": the checkpoint holds " + std::to_string(c.values.size()) + " tensors, the model " +
                           std::to_string(values.size()) + " (another model?)");
  for (const PlanValue* v : values) {
    auto it = c.values.find(v->name);
    if (it == c.values.end()) return Status::invalid(path + ": the checkpoint has no tensor '" + v->name + "' (another model?)");
    if (static_cast<int64_t>(it->second.size()) != v->tensor.numel())
      return Status::invalid(path + ": tensor '" + v->name + "' has " + std::to_string(it->second.size()) +
                             " values in the checkpoint, " + std::to_string(v->tensor.numel()) + " in the model");
    std::memcpy(v->tensor.data(), it->second.data(), it->second.size() * sizeof(float));
  }
  optimizer.set_steps(c.header.value("optimizer_steps", int64_t{0}));
  return plan.set_optimizer_state(optimizer, c.optimizer_state).with_context(path);
}

}  // namespace mosaic::api
