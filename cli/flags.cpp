// Registration helpers of the command line's flags (cli/flags.hpp).
#include "cli/flags.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "distributed/allreduce_sync.hpp"

namespace mosaic::cli {

const std::vector<Command (*)(CLI::App&)>& command_registrations() {
  static const std::vector<Command (*)(CLI::App&)> all = {
      add_info_command,     add_bench_command,   add_verify_command,  add_export_command, add_train_command,
      add_gradcheck_command, add_optcheck_command, add_sweep_command, add_history_command, add_compare_command,
      add_report_command,   add_simulate_command, add_plan_command,   add_backends_command};
  return all;
}

std::string collective_help() {
  std::string out;
  for (const auto& c : dist::collectives()) out += (out.empty() ? "" : "; ") + c.first + " (" + c.second + ")";
  return out;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == ',') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

CLI::Validator integer_at_least(long long min) {
  const std::string what = min > 0 ? "a positive integer" : "a non-negative integer";
  return CLI::Validator(
      [min, what](std::string& s) -> std::string {
        char* end = nullptr;
        errno = 0;
        const long long v = std::strtoll(s.c_str(), &end, 10);
        if (s.empty() || *end != '\0' || errno == ERANGE || v < min) return "must be " + what + ", got " + s;
        return "";
      },
      min > 0 ? "POSITIVE" : "NON-NEGATIVE", "");
}

CLI::Validator number_in(double lo, double hi, bool lo_open, bool hi_open, const std::string& range_text) {
  return CLI::Validator(
      [=](std::string& s) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(s.c_str(), &end);
        if (s.empty() || *end != '\0' || !std::isfinite(v)) return "must be a finite number, got '" + s + "'";
        if ((lo_open ? v <= lo : v < lo) || (hi_open ? v >= hi : v > hi)) return "must be " + range_text + ", got " + s;
        return "";
      },
      "", "");
}

namespace {
const double kInf = std::numeric_limits<double>::infinity();
}  // namespace

CLI::Validator finite_number() { return number_in(-kInf, kInf, false, false, "finite"); }
CLI::Validator non_negative() { return number_in(0, kInf, false, true, ">= 0"); }
CLI::Validator positive() { return number_in(0, kInf, true, true, "> 0"); }

void add_range_checks(CLI::App& app) {
  for (auto* sub : app.get_subcommands({}))
    for (auto* opt : sub->get_options()) {
      const std::string name = opt->get_name(false, true);
      if (opt->get_type_name().rfind("FLOAT", 0) != 0) continue;
      // Checks run in the order added: finite first, then the range, so NaN gets the clear message.
      opt->check(finite_number());
      if (name == "--rtol" || name == "--atol" || name == "--weight-decay") opt->check(non_negative());
      if (name == "--lr" || name == "--bucket-mb" || name == "--eps" || name == "--tolerance") opt->check(positive());
      if (name == "--momentum") opt->check(number_in(0, 1, false, true, "in [0, 1)"));
      if (name == "--target-accuracy") opt->check(number_in(0, 1, false, false, "in [0, 1]"));
      if (name == "--alpha") opt->check(number_in(0, 1, true, true, "in (0, 1)"));
    }
}

void add_db(CLI::App* cmd, api::DbOptions& d) {
  cmd->add_option("--db", d.path, "results store to record the run in (default: $MOSAIC_DB, else ./mosaic-runs.sqlite)");
  cmd->add_flag("--no-db", d.off, "do not record the run");
}

void add_common(CLI::App* cmd, api::CommonOptions& c) {
  cmd->add_option("--batch", c.batch, "bind the batch dimension (default: the model's, symbolic = 1)")
      ->check(integer_at_least(1));
  cmd->add_option("--threads", c.threads, "threads for OpenMP, OpenBLAS and oneDNN (default: all cores)")
      ->check(integer_at_least(0));
  cmd->add_option("--seed", c.seed, "seed of the random input");
  cmd->add_option("--shape", c.shapes, "bind a symbolic input dimension by name: NAME=N (repeatable)");
}

}  // namespace mosaic::cli
