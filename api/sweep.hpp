// sweep as a library function: a grid of training cells from a YAML file (models x backends
// x batches x optimizers x learning rates [x data-parallel modes x rank counts],
// frontends/config/sweep_config.hpp), run one after another. Every finished cell is kept in
// OUTPUT/results.sqlite, so a sweep run again resumes where it stopped; the seed's Table 2
// (epoch time and throughput vs batch) and Table 3 (accuracy by epoch), the speed-up table
// of a ranks sweep and sweep.json (mosaic.sweep/1) are written to OUTPUT. docs/sweeps.md.
#pragma once

#include <iosfwd>
#include <string>

#include <nlohmann/json.hpp>

#include "ir/status.hpp"

namespace mosaic::api {

struct SweepQuery {
  std::string config;  ///< the sweep's YAML file
  int max_cells = 0;   ///< run at most this many new cells, then stop (0: all)
  int max_grid = 1000;  ///< a grid of more cells is refused before anything runs
  std::ostream* progress = nullptr;  ///< per-cell lines, time estimates (nothing when null)
};

struct SweepOutcome {
  nlohmann::json doc;  ///< mosaic.sweep/1: settings, provenance, every finished cell with its log
  int ran = 0, cached = 0, errors = 0;  ///< cells run now, finished earlier, failed (retried on a rerun)
  bool stopped = false;  ///< max_cells or an interrupt ended it early
  /// SIGINT or SIGTERM (ir/interrupt.hpp) stopped it at a cell boundary: the finished cells
  /// are recorded and the tables written; a cell cut short is not recorded (a rerun trains it).
  bool interrupted = false;
  std::string output;    ///< the output folder
  bool speedup_table = false;  ///< a ranks sweep: table_speedup.{csv,md} too
};

/// Runs the sweep. Everything that can be refused is refused before the first cell (errors
/// name the file and key: an unknown backend or optimizer, a model that is not there, a grid
/// above max_grid, a bad memory_limit). A cell that fails is a result ("error" in its row),
/// not an error of the call.
Expected<SweepOutcome> sweep(const SweepQuery& q);

}  // namespace mosaic::api
