// api::sweep (api/sweep.hpp): runs a grid of training cells, keeps every finished cell in
// OUTPUT/results.sqlite (so an interrupted sweep resumes where it stopped), and writes the
// seed's Table 2 (epoch time and throughput vs batch) and Table 3 (accuracy at chosen epochs
// per optimizer and lr) as CSV and Markdown.
#include "api/sweep.hpp"
#include "ir/interrupt.hpp"

#include <cstdarg>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include "backends/registry.hpp"
#include "ir/file_io.hpp"
#include "distributed/data_parallel.hpp"
#include "api/max_batch.hpp"
#include "api/models.hpp"
#include "api/sweep_distributed.hpp"
#include "api/train.hpp"
#include "api/util.hpp"
#include "core/optimizer.hpp"
#include "frontends/config/sweep_config.hpp"
#include "frontends/data/dataset.hpp"
#include "frontends/data/text.hpp"
#include "metrics/report.hpp"
#include "metrics/progress.hpp"
#include "metrics/sqlite_db.hpp"

namespace mosaic::api {
namespace {

/// A progress line, printf-style, to `out` when there is one.
__attribute__((format(printf, 2, 3))) void say(std::ostream* out, const char* format, ...) {
  if (!out) return;
  char buf[1024];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buf, sizeof buf, format, args);
  va_end(args);
  *out << buf << std::flush;
}


std::string num(double v) { return sweep_number(v); }

/// The sweep's cell store: one row per finished cell (what a rerun resumes from).
class Store {
 public:
  Status open(const std::string& path) {
    auto db = SqliteDb::open(path);
    if (!db.ok()) return db.status().with_context("the sweep's cell store");
    db_ = std::move(db).value();
    return db_->exec_script(
        "CREATE TABLE IF NOT EXISTS cells (key TEXT PRIMARY KEY, model TEXT, backend TEXT, optimizer TEXT, "
        "lr REAL, batch INTEGER, status TEXT, message TEXT, log TEXT, finished TEXT DEFAULT CURRENT_TIMESTAMP)");
  }
  /// status, message and log of a finished cell, if any.
  Expected<bool> find(const std::string& key, std::string* status, std::string* message, std::string* log) {
    bool found = false;
    MOSAIC_RETURN_IF_ERROR(db_->run("SELECT status, message, log FROM cells WHERE key = ?", {key}, [&](const SqliteDb::Row& r) {
      found = true;
      *status = SqliteDb::text(r[0]);
      *message = SqliteDb::text(r[1]);
      *log = SqliteDb::text(r[2]);
    }));
    return found;
  }
  Status put(const std::string& key, const std::string& model, const std::string& backend, const std::string& opt,
             double lr, int64_t batch, const std::string& status, const std::string& message, const std::string& log) {
    return db_
        ->run("INSERT OR REPLACE INTO cells (key, model, backend, optimizer, lr, batch, status, message, log) "
              "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
              {key, model, backend, opt, lr, batch, status, message, log})
        .with_context("cannot record a cell");
  }

 private:
  std::unique_ptr<SqliteDb> db_;
};

struct Cell {
  std::string model, backend, optimizer;
  double lr = 0;
  int64_t batch = 0;
  int64_t ranks = 0;  ///< workers under mpirun (0: in this process)
  std::string mode;   ///< --distributed mode when ranks > 0
  std::string key;
  // results
  std::string status, message;
  nlohmann::json log;
};

/// The backend column of the tables: with the data-parallel axes, also the mode and workers.
std::string backend_label(const Cell& cell) {
  return cell.ranks > 0 ? cell.backend + " " + cell.mode + " x" + std::to_string(cell.ranks) : cell.backend;
}

std::string cell_key(const SweepConfig& c, const Cell& cell) {
  // Every setting that changes a cell's result is in its key: a changed setting is a new cell.
  std::ostringstream k;
  k << cell.model << "|" << cell.backend << "|" << cell.optimizer << "|lr=" << cell.lr << "|batch=" << cell.batch
    << "|data=" << c.data << "|epochs=" << c.epochs << "|steps_per_epoch=" << c.steps_per_epoch << "|seed=" << c.seed
    << "|shuffle=" << c.shuffle << "|eval=" << c.evaluate << "|norm=" << c.normalize << "|momentum=" << c.momentum
    << "|wd=" << c.weight_decay;
  if (!c.objective.empty()) k << "|objective=" << c.objective;
  if (cell.ranks > 0) {
    k << "|ranks=" << cell.ranks << "|mode=" << cell.mode;
    if (cell.mode == "ps" || cell.mode == "ps-async") k << "|servers=" << c.servers;
  }
  return k.str();
}

/// The sweep run's provenance as '#' comment lines, heading each CSV table.
std::string provenance_block(const SweepConfig& c) {
  std::string b;
  for (const auto& l : provenance_lines(run_provenance("", {{"sweep", std::to_string(c.seed)}}))) b += "# " + l + "\n";
  return b;
}

Status write_file(const std::string& path, const std::string& text) { return write_file_atomic(path, text); }

/// Table 2: mean epoch time and throughput vs batch size.
Status write_table2(const SweepConfig& c, const std::vector<Cell>& cells, const std::string& provenance) {
  std::ostringstream csv, md;
  csv << provenance << "model,backend,optimizer,lr,batch,epochs,mean_epoch_s,images_per_s,status\n";
  // Markdown: one row per (model, backend, optimizer, lr), one column per batch size.
  md << "# " << c.name << ": Table 2, mean epoch time and throughput vs batch size\n\n"
     << "Data `" << c.data << "`, " << c.epochs << " epoch(s)" << (c.steps_per_epoch ? ", each cut to " + std::to_string(c.steps_per_epoch) + " steps" : "")
     << (c.objective.empty() ? "" : ", objective " + c.objective)
     << ". Cells: seconds per epoch / " << (is_token_spec(c.data) ? "sequences" : "images")
     << " per second.\n\n| model | backend | optimizer | lr |";
  for (int64_t b : c.batches) md << " batch " << b << " |";
  md << "\n|---|---|---|---|";
  for (size_t i = 0; i < c.batches.size(); ++i) md << "---|";
  md << "\n";
  std::map<std::string, std::map<int64_t, std::string>> rows;
  std::vector<std::string> order;
  for (const Cell& cell : cells) {
    double secs = 0, images = 0;
    int64_t epochs = 0;
    for (const auto& e : cell.log.value("epochs", nlohmann::json::array())) {
      secs += e["seconds"].get<double>();
      images += e["seconds"].get<double>() * e["images_per_s"].get<double>();
      ++epochs;
    }
    const double mean = epochs ? secs / static_cast<double>(epochs) : NAN, ips = secs > 0 ? images / secs : NAN;
    csv << cell.model << "," << backend_label(cell) << "," << cell.optimizer << "," << num(cell.lr) << "," << cell.batch << ","
        << epochs << "," << (epochs ? num(mean) : "") << "," << (secs > 0 ? num(ips) : "") << "," << cell.status << "\n";
    const std::string row = "| " + cell.model + " | " + backend_label(cell) + " | " + cell.optimizer + " | " + num(cell.lr) + " |";
    if (!rows.count(row)) order.push_back(row);
    char buf[64];
    if (epochs) std::snprintf(buf, sizeof buf, ips < 100 ? "%.2f s / %.3g" : "%.2f s / %.0f", mean, ips);
    rows[row][cell.batch] = epochs                       ? buf
                            : cell.status == "error"     ? "error"
                            : cell.status == "too large" ? "does not fit"
                                                         : "—";
  }
  for (const auto& row : order) {
    md << row;
    for (int64_t b : c.batches) md << " " << (rows[row].count(b) ? rows[row][b] : "") << " |";
    md << "\n";
  }
  MOSAIC_RETURN_IF_ERROR(write_file(c.output + "/table2.csv", csv.str()));
  return write_file(c.output + "/table2.md", md.str());
}

/// Table 3: accuracy at chosen epochs per optimizer and lr; blank where the run does not
/// train (diverged before that epoch, or at chance level after the first: chance_level()).
Status write_table3(const SweepConfig& c, const std::vector<Cell>& cells, const std::string& provenance) {
  const std::string field = c.accuracy == "test" ? "test_accuracy" : "train_accuracy";
  std::ostringstream csv, md;
  csv << provenance << "model,backend,batch,optimizer,lr";
  md << "# " << c.name << ": Table 3, " << c.accuracy << " accuracy (%) by epoch\n\nData `" << c.data
     << "`. A blank: the run does not train: it diverged before that epoch, or its loss was still at chance level "
        "after the first (docs/sweeps.md).\n\n| model | backend | batch | optimizer | lr |";
  for (int64_t e : c.accuracy_epochs) {
    csv << ",epoch_" << e;
    md << " epoch " << e << " |";
  }
  csv << ",status\n";
  md << " note |\n|---|---|---|---|---|";
  for (size_t i = 0; i <= c.accuracy_epochs.size(); ++i) md << "---|";
  md << "\n";
  for (const Cell& cell : cells) {
    std::map<int64_t, double> acc;
    for (const auto& e : cell.log.value("epochs", nlohmann::json::array()))
      if (e.contains(field) && e[field].is_number()) acc[e["epoch"].get<int64_t>()] = e[field].get<double>();
    csv << cell.model << "," << backend_label(cell) << "," << cell.batch << "," << cell.optimizer << "," << num(cell.lr);
    md << "| " << cell.model << " | " << backend_label(cell) << " | " << cell.batch << " | " << cell.optimizer << " | "
       << num(cell.lr) << " |";
    const std::string stuck = cell.log.value("does_not_train", "");
    for (int64_t e : c.accuracy_epochs) {
      char buf[32] = "";
      if (acc.count(e) && stuck.empty()) std::snprintf(buf, sizeof buf, "%.2f", 100 * acc[e]);
      csv << "," << buf;
      md << " " << buf << " |";
    }
    csv << "," << (stuck.empty() ? cell.status : "does not train") << "\n";
    md << " " << (cell.status != "done" ? cell.message : stuck.empty() ? "" : "does not train: " + stuck) << " |\n";
  }
  MOSAIC_RETURN_IF_ERROR(write_file(c.output + "/table3.csv", csv.str()));
  return write_file(c.output + "/table3.md", md.str());
}

/// "2 models x 1 backend x 3 batches x ...": the axes whose product is the grid.
std::string grid_dimensions(const SweepConfig& c) {
  std::string s;
  auto axis = [&](size_t n, const char* one, const char* many) {
    s += (s.empty() ? "" : " x ") + std::to_string(n) + " " + (n == 1 ? one : many);
  };
  axis(c.models.size(), "model", "models");
  axis(c.backends.size(), "backend", "backends");
  axis(c.batches.size(), "batch", "batches");
  axis(c.optimizers.size(), "optimizer", "optimizers");
  axis(c.lrs.size(), "lr", "lrs");
  if (!c.ranks.empty()) {
    axis(c.modes.size(), "mode", "modes");
    axis(c.ranks.size(), "rank count", "rank counts");
  }
  return s;
}

std::string format_seconds(double s) {
  char buf[64];
  if (s < 90) std::snprintf(buf, sizeof buf, "%.0fs", s);
  else if (s < 5400) std::snprintf(buf, sizeof buf, "%.0fm%02.0fs", std::floor(s / 60), std::fmod(s, 60));
  else std::snprintf(buf, sizeof buf, "%.0fh%02.0fm", std::floor(s / 3600), std::fmod(s / 60, 60));
  return buf;
}

/// The sweep as one document (schema mosaic.sweep/1): settings, provenance, finished cells.
nlohmann::json sweep_json(const SweepConfig& c, const std::vector<Cell>& finished, bool stopped) {
  nlohmann::json doc{{"schema", "mosaic.sweep/1"},
                     {"name", c.name},
                     {"config", c.file},
                     {"data", c.data},
                     {"objective", c.objective},
                     {"epochs", c.epochs},
                     {"steps_per_epoch", c.steps_per_epoch},
                     {"seed", c.seed},
                     {"complete", !stopped},
                     {"provenance", provenance_json(run_provenance("", {{"sweep", std::to_string(c.seed)}}))},
                     {"cells", nlohmann::json::array()}};
  for (const auto& cell : finished) {
    nlohmann::json e = {{"model", cell.model}, {"backend", cell.backend}, {"optimizer", cell.optimizer}, {"lr", cell.lr},
                        {"batch", cell.batch}, {"status", cell.status},
                        {"message", cell.message.empty() ? nlohmann::json() : nlohmann::json(cell.message)},
                        {"log", cell.log}};
    if (cell.ranks > 0) e["ranks"] = cell.ranks, e["mode"] = cell.mode;
    doc["cells"].push_back(e);
  }
  return doc;
}

/// Everything checked before the first cell runs, so that a typo fails now, not hours in:
/// backends and placements, optimizers, modes, models, the grid's size, `batch: max`'s needs.
Status check_sweep(const SweepConfig& c, const SweepQuery& so) {
  for (const auto& b : c.backends) {
    if (is_placement(b)) {  // a mixed placement: an --assign spec or a placement YAML file
      auto p = assign_placement(b, {"naive"});
      if (!p.ok()) return Status(p.status().code(), c.file + ": key 'backends': " + p.status().message());
    } else if (!builtin_registry().has_backend(b)) {
      return Status::invalid(c.file + ": key 'backends': " + unknown_backend(b).message());
    }
  }
  for (const auto& o : c.optimizers) {
    OptimizerConfig oc;
    auto opt = make_optimizer(o, oc);
    if (!opt.ok()) return Status::invalid(c.file + ": key 'optimizers': " + opt.status().message());
  }
  for (const auto& m : c.modes) {
    const auto& known = dist::distributed_modes();
    if (std::none_of(known.begin(), known.end(), [&](const auto& k) { return k.first == m; }))
      return Status::invalid(c.file + ": key 'mode': unknown data-parallel mode '" + m + "'");
  }
  for (const auto& m : c.models)
    if (m.rfind("zoo:", 0) != 0 && !std::filesystem::exists(m))
      return Status::not_found(c.file + ": key 'models': " + m + " not found");
  // A placement's node names must exist in every model it is crossed with.
  for (const auto& b : c.backends) {
    if (!is_placement(b) || b.find('@') == std::string::npos) continue;
    const Placement p = assign_placement(b, {"naive"}).value();
    for (const auto& m : c.models) {
      CommonOptions common;
      common.batch = std::max<int64_t>(c.batches.front(), 1);
      auto g = load_prepared(m, common, nullptr);
      if (!g.ok()) return Status(g.status().code(), c.file + ": key 'models': " + g.status().message());
      if (Status named = p.check_names(g.value()); !named.is_ok())
        return Status::invalid(c.file + ": key 'backends': " + named.message());
    }
  }
  double grid = static_cast<double>(c.models.size() * c.backends.size() * c.batches.size() * c.optimizers.size() *
                                    c.lrs.size());
  if (!c.ranks.empty()) grid *= static_cast<double>(c.modes.size() * c.ranks.size());
  if (grid > so.max_grid)
    return Status::invalid(c.file + ": the grid has " + std::to_string(static_cast<long long>(grid)) + " cells (" +
                           grid_dimensions(c) + "), more than `max_grid` " + std::to_string(so.max_grid) +
                           "; raise `max_grid` to run it");
  if (std::find(c.batches.begin(), c.batches.end(), SweepConfig::kLargestBatch) != c.batches.end()) {
    for (const auto& b : c.backends)
      if (is_placement(b))
        return Status::invalid(c.file + ": key 'batch': max needs backends named, not the placement '" + b + "'");
    if (!c.memory_limit.empty())
      if (auto l = parse_bytes(c.memory_limit); !l.ok())
        return Status::invalid(c.file + ": key 'memory_limit': " + l.status().message());
  }
  return Status::ok();
}

/// The image data every cell shares (token data is made per cell, for the model's sequence
/// length and vocabulary: `images` stays empty). Every model takes the data before the first
/// cell: a text file that cannot be read, or data of the wrong kind for a model, stops here,
/// with exit 2 and no output, not at its cells.
Status load_sweep_data(const SweepConfig& c, bool tokens, DataSplits& images) {
  if (!tokens) {
    auto data = load_data(c.data, c.seed);
    if (!data.ok()) return Status(data.status().code(), c.file + ": key 'data': " + data.status().message());
    images = std::move(data.value());
  }
  for (const auto& m : c.models) {
    TrainOptions t;
    t.model = m;
    t.data = c.data;
    if (!c.objective.empty()) t.objective = c.objective;
    t.seed = c.seed;
    t.batch = 1;
    for (int64_t b : c.batches)
      if (b != SweepConfig::kLargestBatch) {
        t.batch = b;
        break;
      }
    if (Status fits = check_training_data(t, tokens ? nullptr : &images); !fits.is_ok())
      return Status(fits.code(), c.file + ": key 'data': " + fits.message());
  }
  return Status::ok();
}

/// The most processes one cell starts on this machine: 1, or with `ranks` the largest worker
/// count plus the servers of a parameter-server mode.
int64_t processes_per_cell(const SweepConfig& c) {
  if (c.ranks.empty()) return 1;
  const bool ps = std::any_of(c.modes.begin(), c.modes.end(), [](const std::string& m) { return m.rfind("ps", 0) == 0; });
  return *std::max_element(c.ranks.begin(), c.ranks.end()) + (ps ? c.servers : 0);
}

/// `batch: max`: the largest training batch of each model on each backend, found once per
/// model, backend, optimizer and limit, and kept in OUTPUT/max_batch.json: a resumed sweep
/// runs the same cells (a new search could land one batch apart).
Expected<std::map<std::pair<std::string, std::string>, int64_t>> largest_batches(const SweepConfig& c,
                                                                                 const DataSplits& data,
                                                                                 std::ostream* out) {
  std::map<std::pair<std::string, std::string>, int64_t> largest;
  if (std::find(c.batches.begin(), c.batches.end(), SweepConfig::kLargestBatch) == c.batches.end()) return largest;
  const std::string max_file = c.output + "/max_batch.json";
  nlohmann::json found = nlohmann::json::object();
  if (std::filesystem::exists(max_file)) {
    std::ifstream in(max_file);
    found = nlohmann::json::parse(in, nullptr, false);
    if (!found.is_object()) return Status::invalid(max_file + ": not the JSON object the sweep wrote; delete it to search again");
  }
  int64_t limit = 0;
  if (!c.memory_limit.empty()) limit = parse_bytes(c.memory_limit).value();  // checked by check_sweep
  // A data-parallel cell starts its workers (and servers) on this machine at once, each
  // holding its own batch and model: the search gets the limit's share of one process.
  const int64_t processes = processes_per_cell(c);
  std::string share;
  if (processes > 1) {
    if (limit <= 0) limit = default_memory_limit();
    if (limit <= 0) return Status::invalid(c.file + ": key 'batch': max: cannot read MemAvailable; give memory_limit");
    share = " / " + std::to_string(processes) + " processes, less data and buffers";
    say(out, "batch max: a cell runs up to %lld processes here, so the search's limit is %s of %s, less a sixth "
        "kept back and what each holds besides its plan\n", static_cast<long long>(processes),
        format_bytes(static_cast<double>(limit / processes)).c_str(), format_bytes(static_cast<double>(limit)).c_str());
    limit /= processes;
  }
  for (const auto& m : c.models) {
    // Besides the training plan the search sizes, each process of a data-parallel cell holds
    // the data set it loads, its communication buffers (up to three copies of the parameters:
    // the flattened gradients, the block received, a server's copy) and the MPI runtime.
    // (Without them two ResNet-50 workers at the share's largest batch were killed for memory.)
    // A worker's `train` also outgrows the search's figure for its batch (a ResNet-50 worker
    // at batch 55 peaked 11% above it), so a sixth of the share is kept back as well.
    int64_t model_limit = limit;
    if (processes > 1) {
      CommonOptions common;
      common.seed = c.seed;
      MOSAIC_ASSIGN_OR_RETURN(const Graph g, load_prepared(m, common, nullptr));
      const auto bytes = [](const Tensor& t) { return t.defined() ? static_cast<int64_t>(t.bytes()) : int64_t{0}; };
      const int64_t held = bytes(data.train.images) + bytes(data.train.labels) + bytes(data.test.images) +
                           bytes(data.test.labels) + 3 * 4 * g.parameter_count() + (int64_t{256} << 20);
      model_limit = limit - limit / 6 - held;
      if (model_limit <= 0)
        return Status::invalid(c.file + ": key 'batch': max: " + m + ": each of " + std::to_string(processes) +
                               " processes holds " + format_bytes(static_cast<double>(held)) +
                               " of data and buffers, more than its share of the memory limit");
      say(out, "batch max: %s: each process holds %s of data and buffers besides its plan\n", m.c_str(),
          format_bytes(static_cast<double>(held)).c_str());
    }
    for (const auto& b : c.backends) {
      const std::string key = m + "|" + b + "|" + c.optimizers.front() + "|" +
                              (c.memory_limit.empty() ? "90% available" : c.memory_limit) + share;
      if (found.contains(key) && found[key].is_number_integer() && found[key].get<int64_t>() > 0) {
        largest[{m, b}] = found[key].get<int64_t>();
        say(out, "batch max: %lld for %s on %s (found earlier, %s)\n", static_cast<long long>(largest[{m, b}]),
            m.c_str(), b.c_str(), max_file.c_str());
        continue;
      }
      BenchOptions o;
      o.model = m;
      o.mode = "training";
      o.optimizer = c.optimizers.front();
      o.lr = c.lrs.front();
      o.common.threads = c.threads;
      o.common.seed = c.seed;
      say(out, "batch max: the largest training batch of %s on %s with %s (bench --find-max-batch's search)...\n",
          m.c_str(), b.c_str(), o.optimizer.c_str());
      auto r = largest_batch(o, Placement::all_on(b), model_limit);
      if (!r.ok()) return Status(r.status().code(), c.file + ": key 'batch': max: " + r.status().message());
      largest[{m, b}] = r.value();
      found[key] = r.value();
      if (Status w = write_file(max_file, found.dump(1) + "\n"); !w.is_ok()) return w;
      say(out, "batch max: %lld for %s on %s\n", static_cast<long long>(r.value()), m.c_str(), b.c_str());
    }
  }
  return largest;
}

/// The grid's cells in order (`max` resolved; a size the list also names is one cell).
std::vector<Cell> grid_cells(const SweepConfig& c, const std::map<std::pair<std::string, std::string>, int64_t>& largest) {
  std::vector<Cell> cells;
  const std::vector<int64_t> ranks = c.ranks.empty() ? std::vector<int64_t>{0} : c.ranks;
  const std::vector<std::string> modes = c.ranks.empty() ? std::vector<std::string>{""} : c.modes;
  for (const auto& m : c.models)
    for (const auto& b : c.backends)
      for (int64_t listed : c.batches)
        for (const auto& o : c.optimizers)
          for (double lr : c.lrs)
            for (const auto& mode : modes)
              for (int64_t r : ranks) {
                const int64_t batch = listed == SweepConfig::kLargestBatch ? largest.at({m, b}) : listed;
                Cell cell{m, b, o, lr, batch, r, mode, "", "", "", {}};
                cell.key = cell_key(c, cell);
                if (std::none_of(cells.begin(), cells.end(), [&](const Cell& k) { return k.key == cell.key; }))
                  cells.push_back(cell);
              }
  return cells;
}

/// What the sweep will do, before it does it: cells, and images to train in all of them.
void announce(const SweepConfig& c, const std::vector<Cell>& cells, const DataSplits& images, bool tokens,
              std::ostream* out) {
  const int64_t per_epoch = c.steps_per_epoch > 0 ? -1 : images.train.size();
  double examples = 0;
  for (const Cell& cell : cells)
    examples += static_cast<double>(c.epochs) *
                static_cast<double>(per_epoch < 0 ? c.steps_per_epoch * cell.batch : per_epoch);
  char amount[96] = "whole epochs of sequences";
  if (!tokens || per_epoch < 0)
    std::snprintf(amount, sizeof amount, "%.3g %s to train in all", examples, tokens ? "sequences" : "images");
  say(out, "sweep %s: %zu cells (%s), %d epoch(s) each, %s; results in %s\n", c.name.c_str(), cells.size(),
      grid_dimensions(c).c_str(), static_cast<int>(c.epochs), amount, c.output.c_str());
  say(out, "time: estimated after the first cell from its measured rate, then after every cell\n");
}

/// The training options of one cell.
TrainOptions cell_options(const SweepConfig& c, const Cell& cell) {
  TrainOptions t;
  t.model = cell.model;
  t.data = c.data;
  if (!c.objective.empty()) t.objective = c.objective;
  if (is_placement(cell.backend)) t.assign = cell.backend;
  else t.backend = cell.backend;
  t.optimizer = cell.optimizer;
  t.opt.lr = cell.lr;
  t.opt.momentum = c.momentum;
  t.opt.weight_decay = c.weight_decay;
  t.batch = cell.batch;
  t.epochs = c.epochs;
  t.steps_per_epoch = c.steps_per_epoch;
  t.seed = c.seed;
  t.shuffle = c.shuffle;
  t.evaluate = c.evaluate;
  t.normalize = c.normalize;
  t.threads = c.threads;
  t.distributed = cell.mode;
  t.servers = c.servers;
  return t;
}

/// A finished cell's line: its rate and accuracies, or its error or divergence.
std::string cell_summary(const Cell& cell, bool tokens) {
  std::string summary = cell.status == "error" ? "error: " + cell.message : cell.message;
  if (cell.status == "done" && !cell.log["epochs"].empty()) {
    const auto& last = cell.log["epochs"].back();
    char buf[160];
    std::snprintf(buf, sizeof buf, "%.3g %s/s, train acc %.4f", last["images_per_s"].get<double>(),
                  tokens ? "sequences" : "images", last["train_accuracy"].get<double>());
    summary = buf;
    if (last["test_accuracy"].is_number()) {  // null with evaluate: false
      std::snprintf(buf, sizeof buf, ", test acc %.4f", last["test_accuracy"].get<double>());
      summary += buf;
    }
  }
  return summary;
}

/// The grid's run: cells finished earlier are read from the store, the others trained and
/// stored as they finish, until the end, --max-cells or a signal.
class GridRun {
 public:
  GridRun(const SweepConfig& c, const SweepQuery& so, Store& store, const DataSplits& images, bool tokens,
          const std::map<std::pair<std::string, std::string>, int64_t>& largest)
      : c_(c), so_(so), store_(store), images_(images), tokens_(tokens), largest_(largest) {}

  /// Runs the cells in order, until the end, --max-cells or a signal (stopped says which).
  Status run(std::vector<Cell>& cells) {
    for (size_t i = 0; i < cells.size(); ++i) {
      MOSAIC_ASSIGN_OR_RETURN(const bool go_on, run_cell(cells, i));
      if (!go_on) break;
    }
    return Status::ok();
  }

  int ran = 0, cached = 0, errors = 0;
  bool stopped = false, interrupted_run = false;

 private:
  Expected<bool> run_cell(std::vector<Cell>& cells, size_t i) {
    std::ostream* out = so_.progress;
    Cell& cell = cells[i];
    std::string log;
    std::string label = cell.model + " " + cell.backend + " batch " + std::to_string(cell.batch) + " " +
                        cell.optimizer + " lr " + num(cell.lr);
    if (cell.ranks > 0) label += " " + cell.mode + " x" + std::to_string(cell.ranks);
    MOSAIC_ASSIGN_OR_RETURN(const bool found, store_.find(cell.key, &cell.status, &cell.message, &log));
    if (found) {
      cell.log = log.empty() ? nlohmann::json::object() : nlohmann::json::parse(log, nullptr, false);
      ++cached;
      say(out, "[%zu/%zu] %s: finished earlier (%s)\n", i + 1, cells.size(), label.c_str(), cell.status.c_str());
      return true;
    }
    if (so_.max_cells > 0 && ran >= so_.max_cells) {
      stopped = true;
      return false;
    }
    if (interrupted()) {  // SIGINT/SIGTERM: stop at this cell boundary; the tables are still written
      stopped = interrupted_run = true;
      say(out, "sweep %s: interrupted; %d cell(s) run, the rest resume on a rerun\n", c_.name.c_str(), ran);
      return false;
    }
    // Where `max` was found, a listed batch above it would outgrow the machine's memory (the
    // kernel kills such a process; it cannot be refused): recorded, not run.
    if (auto mx = largest_.find({cell.model, cell.backend}); mx != largest_.end() && cell.batch > mx->second) {
      cell.status = "too large";
      cell.message = "batch " + std::to_string(cell.batch) + " is above the largest that fits (" +
                     std::to_string(mx->second) + "): not run";
      cell.log = nlohmann::json::object();
      say(out, "[%zu/%zu] %s: %s\n", i + 1, cells.size(), label.c_str(), cell.message.c_str());
      MOSAIC_RETURN_IF_ERROR(store(cell));
      return true;
    }
    TrainOptions t = cell_options(c_, cell);
    const auto cell_start = std::chrono::steady_clock::now();
    say(out, "[%zu/%zu] %s ...\n", i + 1, cells.size(), label.c_str());
    // On a terminal, the cell's own progress line: which cell, epoch and step (a count of cells
    // alone sat at "0/12" for a whole cell).
    t.progress_label = "sweep " + c_.name + ": cell " + std::to_string(i + 1) + "/" + std::to_string(cells.size()) + ", ";
    auto r = cell.ranks > 0 ? train_under_mpirun(t, cell.ranks, c_.output)
                            : train_model(t, tokens_ ? nullptr : &images_, false);
    if (r.ok() && (interrupted() || r->log.value("interrupted", false))) {
      // A cell cut short is no result: not recorded, so that a rerun trains it whole.
      stopped = interrupted_run = true;
      say(out, "[%zu/%zu] %s: interrupted; not recorded (a rerun trains it)\n", i + 1, cells.size(), label.c_str());
      return false;
    }
    if (r.ok()) {
      cell.log = r->log;
      cell.status = r->diverged.empty() ? "done" : "diverged";
      cell.message = r->diverged;
    } else {
      cell.status = "error";
      cell.message = r.status().message();
      cell.log = nlohmann::json::object();  // the tables read an (empty) log of every finished cell
      ++errors;
    }
    ++ran;
    say(out, "[%zu/%zu] %s: %s\n", i + 1, cells.size(), label.c_str(), cell_summary(cell, tokens_).c_str());
    run_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - cell_start).count();
    const size_t left = cells.size() - i - 1;
    if (left > 0 && ran > 0)
      say(out, "time: %s so far for %d cell(s); about %s for the %zu left (the mean cell so far)\n",
          format_seconds(run_seconds_).c_str(), ran, format_seconds(run_seconds_ / ran * left).c_str(), left);
    if (cell.status == "error") return true;  // not stored: a rerun retries it
    MOSAIC_RETURN_IF_ERROR(store(cell));
    return true;
  }

  Status store(const Cell& cell) {
    return store_.put(cell.key, cell.model, cell.backend, cell.optimizer, cell.lr, cell.batch, cell.status,
                      cell.message, cell.log.dump());
  }

  const SweepConfig& c_;
  const SweepQuery& so_;
  Store& store_;
  const DataSplits& images_;
  const bool tokens_;
  const std::map<std::pair<std::string, std::string>, int64_t>& largest_;
  double run_seconds_ = 0;
};

/// The tables (2, 3, and the speed-up table of a ranks sweep) and sweep.json, from the
/// finished cells.
Status write_sweep_outputs(const SweepConfig& c, const std::vector<Cell>& cells, bool stopped, SweepOutcome& result) {
  std::vector<Cell> finished;
  for (const auto& cell : cells)
    if (!cell.status.empty()) finished.push_back(cell);
  const std::string provenance = provenance_block(c);
  // The tables' batch columns: the sizes the cells ran (max resolved).
  SweepConfig shown = c;
  shown.batches.clear();
  for (const Cell& cell : cells)
    if (std::find(shown.batches.begin(), shown.batches.end(), cell.batch) == shown.batches.end())
      shown.batches.push_back(cell.batch);
  std::sort(shown.batches.begin(), shown.batches.end());
  Status st = write_table2(shown, finished, provenance);
  if (st.is_ok()) st = write_table3(shown, finished, provenance);
  if (st.is_ok() && !c.ranks.empty()) {
    std::vector<ScalingCell> scaling;
    for (const auto& cell : finished)
      scaling.push_back({cell.model + " | " + cell.backend + " | " + cell.optimizer + " | " + num(cell.lr) + " | " +
                             std::to_string(cell.batch),
                         cell.mode, cell.ranks, steady_images_per_s(cell.log), cell.status});
    st = write_speedup_table(c.output, c.name, provenance, c.ranks, scaling, is_token_spec(c.data));
  }
  result.doc = sweep_json(c, finished, stopped);
  if (st.is_ok()) st = write_file(c.output + "/sweep.json", result.doc.dump(2) + "\n");
  return st;
}

}  // namespace

Expected<SweepOutcome> sweep(const SweepQuery& so) {
  MOSAIC_ASSIGN_OR_RETURN(const SweepConfig c, load_sweep_config(so.config));
  MOSAIC_RETURN_IF_ERROR(set_num_threads(c.threads));
  MOSAIC_RETURN_IF_ERROR(check_sweep(c, so));
  const bool tokens = is_token_spec(c.data);
  DataSplits images;
  MOSAIC_RETURN_IF_ERROR(load_sweep_data(c, tokens, images));
  std::error_code ec;
  std::filesystem::create_directories(c.output, ec);
  if (ec) return Status::io_error(c.output + ": cannot create the output directory: " + ec.message());
  Store store;
  MOSAIC_RETURN_IF_ERROR(store.open(c.output + "/results.sqlite"));
  MOSAIC_ASSIGN_OR_RETURN(const auto largest, largest_batches(c, images, so.progress));
  std::vector<Cell> cells = grid_cells(c, largest);
  announce(c, cells, images, tokens, so.progress);
  GridRun grid(c, so, store, images, tokens, largest);
  MOSAIC_RETURN_IF_ERROR(grid.run(cells));
  SweepOutcome result;
  MOSAIC_RETURN_IF_ERROR(write_sweep_outputs(c, cells, grid.stopped, result));
  result.ran = grid.ran;
  result.cached = grid.cached;
  result.errors = grid.errors;
  result.stopped = grid.stopped;
  result.interrupted = grid.interrupted_run;
  result.output = c.output;
  result.speedup_table = !c.ranks.empty();
  return result;
}

}  // namespace mosaic::api
