// A progress line for long work on a terminal: "label: 37/120 (31%)  12s elapsed, ETA 26s".
// Redrawn in place on stderr at most 10 times a second, erased when done; nothing at all
// when stderr is not a terminal (pipes, files, CI logs), MOSAIC_PROGRESS=0, or the label
// is empty.
#pragma once

#include <cstdint>
#include <string>

#include "core/events.hpp"

namespace mosaic {

class Progress {
 public:
  explicit Progress(std::string label);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  /// `done` of `total` units; `detail` follows the counts. total <= 0: no percentage or ETA.
  void update(double done, double total, const std::string& detail = "");
  /// Erases the line (also done by the destructor).
  void finish();
  bool enabled() const { return enabled_; }

  /// Whether progress lines are shown at all: stderr is a terminal and MOSAIC_PROGRESS is not 0.
  static bool wanted();
  /// "37/120 (31%)  12.3s elapsed, ETA 26s": the text of a line, for tests.
  static std::string format(double done, double total, double elapsed_s);

 private:
  std::string label_;
  bool enabled_;
  bool drawn_ = false;
  int64_t start_ns_, last_ns_ = 0;
};

/// Counts executed nodes of one run as progress ("naive reference: node 12/57").
class NodeProgress final : public ExecObserver {
 public:
  NodeProgress(std::string label, size_t steps) : progress_(std::move(label)), steps_(steps) {}
  void on_node(const NodeEvent& e) override {
    progress_.update(static_cast<double>(e.step + 1), static_cast<double>(steps_), "nodes");
  }
  void on_run(const RunEvent&) override { progress_.finish(); }

 private:
  Progress progress_;
  size_t steps_;
};

}  // namespace mosaic
