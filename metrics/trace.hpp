// Chrome trace-event recording (`bench --trace FILE`): every node of every measured
// iteration per configuration, nested in its stage and iteration spans, with FLOPs, bytes
// and backend in `args`. The JSON object format opens in Perfetto and chrome://tracing.
// A configuration is a trace "process"; its host steps are on thread "host", the steps that
// compute on a device (ir/device.hpp: kernels and copies) on a thread named after the device.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/events.hpp"
#include "core/plan.hpp"
#include "ir/status.hpp"

namespace mosaic {

class TraceRecorder final : public ExecObserver {
 public:
  /// Starts the track (a trace "process") of one configuration; `plan` describes its steps.
  void begin_config(const std::string& label, const Plan& plan);
  void on_node(const NodeEvent& e) override;
  void on_run(const RunEvent&) override {}
  /// A span on the current track: an iteration, or a stage (forward, loss, backward, optimizer step).
  void span(const std::string& name, const char* category, int64_t begin_ns, int64_t end_ns, int64_t iteration);
  size_t events() const { return events_.size(); }
  Status write(const std::string& path) const;

 private:
  struct StepInfo {
    std::string name, op, backend;
    int thread = 1;  ///< 1: the host; 2, 3, ...: the configuration's devices, in order
    double flops = 0, backward_flops = 0;
    int64_t out_bytes = 0;
  };
  struct Event {
    int track = 0, step = -1;  ///< step -1: a span named `name`
    std::string name;
    const char* category = "";
    int64_t begin_ns = 0, end_ns = 0, iteration = 0;
  };
  std::vector<std::string> tracks_;
  std::vector<std::vector<std::string>> threads_;  ///< per track: its thread names from tid 1
  std::vector<std::vector<StepInfo>> steps_;  ///< per track
  std::vector<Event> events_;
};

}  // namespace mosaic
