#include "api/sweep_distributed.hpp"
#include "ir/file_io.hpp"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

namespace mosaic::api {
namespace {

std::string tail(const std::string& path, size_t lines) {
  std::ifstream f(path);
  std::vector<std::string> all;
  for (std::string l; std::getline(f, l);) all.push_back(l);
  std::string out;
  for (size_t i = all.size() > lines ? all.size() - lines : 0; i < all.size(); ++i) out += all[i] + "\n";
  return out;
}

std::string num(double v) { return sweep_number(v); }

}  // namespace

std::string sweep_number(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

Expected<TrainResult> train_under_mpirun(const TrainOptions& t, int64_t workers, const std::string& workdir) {
  MOSAIC_ASSIGN_OR_RETURN(const std::string self, mosaic_executable());
  const bool ps = t.distributed == "ps" || t.distributed == "ps-async";
  const int64_t np = workers + (ps ? t.servers : 0);
  // mpirun refuses root unless told; a sweep asking for ranks asks for mpirun.
  if (geteuid() == 0) {
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
  }
  const std::string json = workdir + "/cell.json", log = workdir + "/cell.log";
  std::error_code ec;
  std::filesystem::remove(json, ec);
  std::vector<std::string> args = {"mpirun", "-np", std::to_string(np)};
  if (np > static_cast<int64_t>(std::thread::hardware_concurrency())) args.push_back("--oversubscribe");
  for (const std::string& a : {self, std::string("train"), t.model, std::string("--data"), t.data,
                              std::string(t.assign.empty() ? "--backend" : "--assign"), t.assign.empty() ? t.backend : t.assign,
                              std::string("--optimizer"), t.optimizer, std::string("--normalize"), t.normalize,
                              std::string("--distributed"), t.distributed, std::string("--json"), json, std::string("--no-db")})
    args.push_back(a);
  auto add = [&](const std::string& flag, const std::string& value) { args.push_back(flag), args.push_back(value); };
  add("--lr", num(t.opt.lr));
  if (t.opt.momentum != 0) add("--momentum", num(t.opt.momentum));
  if (t.opt.weight_decay != 0) add("--weight-decay", num(t.opt.weight_decay));
  add("--batch", std::to_string(t.batch));
  add("--epochs", std::to_string(t.epochs));
  add("--seed", std::to_string(t.seed));
  if (t.steps_per_epoch) add("--steps-per-epoch", std::to_string(t.steps_per_epoch));
  if (t.threads) add("--threads", std::to_string(t.threads));
  if (ps) add("--servers", std::to_string(t.servers));
  if (!t.shuffle) args.push_back("--no-shuffle");
  if (!t.evaluate) args.push_back("--no-eval");
  append_plugin_arguments(args);
  const int code = run_program("mpirun", args, log);
  if (code != 0 && code != 1)
    return Status::internal("mpirun -np " + std::to_string(np) + " exited with " + std::to_string(code) +
                            (code == 127 ? " (is Open MPI's mpirun installed?)" : "") + "; its output ends:\n" + tail(log, 8));
  std::ifstream f(json);
  if (!f) return Status::internal("mpirun -np " + std::to_string(np) + " wrote no result; its output ends:\n" + tail(log, 8));
  TrainResult r;
  r.log = nlohmann::json::parse(f, nullptr, false);
  if (r.log.is_discarded()) return Status::internal(json + ": not JSON");
  r.diverged = r.log.value("diverged", "");
  return r;
}

double steady_images_per_s(const nlohmann::json& log) {
  if (!log.is_object()) return 0;  // a cell that failed has no log
  const auto epochs = log.value("epochs", nlohmann::json::array());
  if (epochs.empty()) return 0;
  if (epochs.size() == 1) return epochs[0].value("images_per_s", 0.0);
  double sum = 0;
  for (size_t e = 1; e < epochs.size(); ++e) sum += epochs[e].value("images_per_s", 0.0);
  return sum / static_cast<double>(epochs.size() - 1);
}

Status write_speedup_table(const std::string& output, const std::string& name, const std::string& provenance,
                           const std::vector<int64_t>& ranks, const std::vector<ScalingCell>& cells, bool tokens) {
  const char* unit = tokens ? "seq/s" : "img/s";
  std::map<std::pair<std::string, std::string>, std::map<int64_t, const ScalingCell*>> grid;
  std::vector<std::pair<std::string, std::string>> order;
  for (const auto& c : cells) {
    const auto key = std::make_pair(c.row, c.mode);
    if (!grid.count(key)) order.push_back(key);
    grid[key][c.ranks] = &c;
  }
  std::ostringstream csv, md;
  csv << provenance << "model,backend,optimizer,lr,batch,mode,workers,images_per_s,speedup,efficiency,status\n";
  md << "# " << name << ": data-parallel speed-up\n\nGlobal " << (tokens ? "sequences" : "images")
     << "/s (after the first epoch when there are several), "
     << "speed-up against 1 worker of the same mode and efficiency (speed-up / workers). Parameter-server modes add "
     << "their servers to the workers.\n\n| model | backend | optimizer | lr | batch | mode |";
  for (int64_t r : ranks) md << " " << r << " worker" << (r > 1 ? "s" : "") << " |";
  md << "\n|---|---|---|---|---|---|";
  for (size_t i = 0; i < ranks.size(); ++i) md << "---|";
  md << "\n";
  for (const auto& key : order) {
    const auto& by = grid[key];
    const ScalingCell* one = by.count(1) && by.at(1)->status == "done" ? by.at(1) : nullptr;
    std::string row = key.first;  // "a | b | c" -> "a,b,c"
    for (size_t at; (at = row.find(" | ")) != std::string::npos;) row.replace(at, 3, ",");
    md << "| " << key.first << " | " << key.second << " |";
    for (int64_t r : ranks) {
      auto it = by.find(r);
      if (it == by.end()) {
        md << " |";
        continue;
      }
      const ScalingCell& c = *it->second;
      const bool ok = c.status == "done" && c.images_per_s > 0;
      const double speedup = ok && one ? c.images_per_s / one->images_per_s : NAN;
      csv << row << "," << key.second << "," << r << "," << (ok ? num(c.images_per_s) : "") << ","
          << (std::isfinite(speedup) ? num(speedup) : "") << ","
          << (std::isfinite(speedup) ? num(speedup / static_cast<double>(r)) : "") << "," << c.status << "\n";
      // Whole numbers from 100 up, three significant digits below (BERT-Base trains 1.27 seq/s).
      char rate[48], buf[112];
      std::snprintf(rate, sizeof rate, c.images_per_s >= 100 ? "%.0f %s" : "%.3g %s", c.images_per_s, unit);
      if (!ok) std::snprintf(buf, sizeof buf, "%s", c.status.c_str());
      else if (std::isfinite(speedup))
        std::snprintf(buf, sizeof buf, "%s, %.2fx (%.0f%%)", rate, speedup, 100 * speedup / static_cast<double>(r));
      else std::snprintf(buf, sizeof buf, "%s", rate);
      md << " " << buf << " |";
    }
    md << "\n";
  }
  for (const auto& [file, text] : {std::make_pair(output + "/table_speedup.csv", csv.str()),
                                   std::make_pair(output + "/table_speedup.md", md.str())}) {
    MOSAIC_RETURN_IF_ERROR(write_file_atomic(file, text));
  }
  return Status::ok();
}

}  // namespace mosaic::api
