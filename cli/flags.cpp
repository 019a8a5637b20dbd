// Registration helpers of the command line's flags (cli/flags.hpp).
#include "cli/flags.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "api/option_rules.hpp"
#include "distributed/allreduce_sync.hpp"

namespace mosaic::cli {

const std::vector<Command (*)(CLI::App&)>& command_registrations() {
  static const std::vector<Command (*)(CLI::App&)> all = {
      add_info_command,     add_bench_command,   add_verify_command,  add_export_command, add_quantize_command,
      add_generate_command, add_loadgen_command, add_train_command,
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

namespace {

/// The check of a numeric option from its rule in api/option_rules.cpp: the text must be a
/// number (a whole one for integer options) that the rule accepts.
CLI::Validator rule_check(const std::string& command, const std::string& key, bool integer) {
  return CLI::Validator(
      [command, key, integer](std::string& s) -> std::string {
        char* end = nullptr;
        errno = 0;
        double v = 0;
        if (integer) {
          const long long i = std::strtoll(s.c_str(), &end, 10);
          const api::NumberRule* rule = api::number_rule(command, key);
          if (s.empty() || *end != '\0' || errno == ERANGE)
            return "must be " + (rule ? rule->text : std::string("an integer")) + ", got " + s;
          v = static_cast<double>(i);
        } else {
          v = std::strtod(s.c_str(), &end);
          if (s.empty() || *end != '\0' || !std::isfinite(v)) return "must be a finite number, got '" + s + "'";
        }
        return api::number_problem(command, key, v);
      },
      "", "");
}

}  // namespace

void add_range_checks(CLI::App& app) {
  for (auto* sub : app.get_subcommands({}))
    for (auto* opt : sub->get_options()) {
      const std::string type = opt->get_type_name();
      const bool is_float = type.rfind("FLOAT", 0) == 0;
      const bool is_int = type.rfind("INT", 0) == 0 || type.rfind("UINT", 0) == 0;
      if (!is_float && !is_int) continue;
      const std::string command = sub->get_name(), key = api::option_key(opt->get_name(false, true));
      const api::NumberRule* rule = api::number_rule(command, key);
      // Every float must be finite (CLI11's comparisons are all false for NaN); integers and
      // floats with a rule must obey it.
      if (is_float || rule) opt->check(rule_check(command, key, is_int));
    }
}

void add_db(CLI::App* cmd, api::DbOptions& d) {
  cmd->add_option("--db", d.path, "results store to record the run in (default: $MOSAIC_DB, else ./mosaic-runs.sqlite)");
  cmd->add_flag("--no-db", d.off, "do not record the run");
}

namespace {
CLI::Option* batch_option(CLI::App* cmd, int64_t& batch, const std::string& help) {
  return cmd->add_option("--batch", batch, help);
}
}  // namespace

void add_common(CLI::App* cmd, api::CommonOptions& c, const CommonHelp& help) {
  auto or_general = [](const std::string& own, const char* general) { return own.empty() ? std::string(general) : own; };
  batch_option(cmd, c.batch, or_general(help.batch, "bind the batch dimension (default: the model's, symbolic = 1)"));
  cmd->add_option("--threads", c.threads, or_general(help.threads, "threads for OpenMP, OpenBLAS and oneDNN (default: all cores)"));
  cmd->add_option("--seed", c.seed, or_general(help.seed, "seed of the random input"))->capture_default_str();
  cmd->add_option("--shape", c.shapes, or_general(help.shape, "bind a symbolic input dimension by name: NAME=N (repeatable)"));
  if (help.has_input)
    cmd->add_option("--input", c.inputs,
                    or_general(help.input, "an input's values from a file instead of random ones: NAME=FILE, an .npy "
                                           "file or an ONNX TensorProto .pb of the input's type and shape; an integer "
                                           "input read as a shape or position is bound at load (repeatable)"));
}

void add_batch(CLI::App* cmd, int64_t& batch, const std::string& help) {
  batch_option(cmd, batch, help)->capture_default_str();
}

}  // namespace mosaic::cli
