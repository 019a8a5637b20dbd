// Structured execution events. Kernels never print; the executor emits one event per
// (step, stage, iteration) and observers in the metrics layer consume them.
#pragma once

#include <cstdint>

namespace mosaic {

enum class Stage { kCreate, kForward, kBackward, kConversion };

const char* stage_name(Stage stage);

struct NodeEvent {
  int step = 0;            ///< index into Plan::steps()
  Stage stage = Stage::kForward;
  int64_t iteration = 0;
  int64_t begin_ns = 0;    ///< steady clock, nanoseconds
  int64_t end_ns = 0;
};

struct RunEvent {
  int64_t iteration = 0;
  int64_t begin_ns = 0;
  int64_t end_ns = 0;
};

class ExecObserver {
 public:
  virtual ~ExecObserver() = default;
  virtual void on_node(const NodeEvent& event) = 0;
  virtual void on_run(const RunEvent& event) = 0;
};

/// Monotonic clock in nanoseconds.
int64_t now_ns();

}  // namespace mosaic
