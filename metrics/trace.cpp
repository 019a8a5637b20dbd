#include "metrics/trace.hpp"
#include "ir/file_io.hpp"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

namespace mosaic {

void TraceRecorder::begin_config(const std::string& label, const Plan& plan) {
  tracks_.push_back(label);
  std::vector<std::string> threads{"host"};
  std::vector<StepInfo> info;
  for (const PlanStep& st : plan.steps()) {
    const Node& node = plan.node(st);
    int thread = 1;
    if (st.device) {
      const std::string device = st.device->name();
      auto at = std::find(threads.begin(), threads.end(), device);
      thread = static_cast<int>(at - threads.begin()) + 1;
      if (at == threads.end()) threads.push_back(device);
    }
    info.push_back({node.name, node.op_type, st.backend, thread, st.flops,
                    st.backward_flops_data + st.backward_flops_weights, static_cast<int64_t>(st.out_bytes)});
  }
  steps_.push_back(std::move(info));
  threads_.push_back(std::move(threads));
}

void TraceRecorder::on_node(const NodeEvent& e) {
  if (tracks_.empty()) return;
  events_.push_back({static_cast<int>(tracks_.size()) - 1, e.step, "", stage_name(e.stage), e.begin_ns, e.end_ns,
                     e.iteration});
}

void TraceRecorder::span(const std::string& name, const char* category, int64_t begin_ns, int64_t end_ns,
                         int64_t iteration) {
  if (tracks_.empty()) return;
  events_.push_back({static_cast<int>(tracks_.size()) - 1, -1, name, category, begin_ns, end_ns, iteration});
}

Status TraceRecorder::write(const std::string& path) const {
  using nlohmann::json;
  int64_t origin = INT64_MAX;
  for (const auto& e : events_) origin = std::min(origin, e.begin_ns);
  json trace = json::array();
  for (size_t t = 0; t < tracks_.size(); ++t) {
    const int pid = static_cast<int>(t) + 1;
    trace.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"tid", 1}, {"args", {{"name", tracks_[t]}}}});
    trace.push_back({{"ph", "M"}, {"name", "process_sort_index"}, {"pid", pid}, {"tid", 1}, {"args", {{"sort_index", pid}}}});
    for (size_t th = 0; th < threads_[t].size(); ++th)
      trace.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", pid}, {"tid", th + 1}, {"args", {{"name", threads_[t][th]}}}});
  }
  for (const auto& e : events_) {
    json ev = {{"ph", "X"},
               {"cat", e.category},
               {"pid", e.track + 1},
               {"tid", 1},
               {"ts", static_cast<double>(e.begin_ns - origin) / 1e3},
               {"dur", static_cast<double>(e.end_ns - e.begin_ns) / 1e3}};
    if (e.step < 0) {
      ev["name"] = e.name;
      ev["args"] = {{"iteration", e.iteration}};
    } else {
      const StepInfo& s = steps_[e.track][e.step];
      ev["tid"] = s.thread;
      const bool backward = std::string(e.category) == "backward";
      const double flops = backward ? s.backward_flops : s.flops;
      const double us = static_cast<double>(e.end_ns - e.begin_ns) / 1e3;
      ev["name"] = s.name;
      ev["args"] = {{"op", s.op},
                    {"backend", s.backend},
                    {"iteration", e.iteration},
                    {"flops", flops},
                    {"gflops", us > 0 ? flops / (us * 1e3) : 0.0},
                    {"output_bytes", s.out_bytes}};
    }
    trace.push_back(std::move(ev));
  }
  return write_file_atomic(path, json{{"traceEvents", trace}, {"displayTimeUnit", "ms"}}.dump() + "\n");
}

}  // namespace mosaic
