// The command line's flags: one registration function per command, each adding its
// subcommand and options to the CLI11 app and returning what runs the command once parsed
// (it fills the API's options struct from the flags and calls the command's run_* function).
// main.cpp loads plugins, calls every registration, parses and runs the chosen command.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "api/models.hpp"
#include "api/util.hpp"

namespace mosaic::cli {

/// A registered command: its subcommand, and what runs it (returns the exit code).
struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

/// A command from its flags struct: `CLI::App* add(CLI::App&)` binds the flags to the
/// struct's fields (and returns the subcommand), `int run()` runs the command from them.
template <class Flags>
Command make_command(CLI::App& app) {
  auto flags = std::make_shared<Flags>();
  CLI::App* sub = flags->add(app);
  return {sub, [flags] { return flags->run(); }};
}

Command add_info_command(CLI::App& app);
Command add_bench_command(CLI::App& app);
Command add_verify_command(CLI::App& app);
Command add_export_command(CLI::App& app);
Command add_quantize_command(CLI::App& app);
Command add_generate_command(CLI::App& app);
Command add_loadgen_command(CLI::App& app);
Command add_train_command(CLI::App& app);
Command add_gradcheck_command(CLI::App& app);
Command add_optcheck_command(CLI::App& app);
Command add_sweep_command(CLI::App& app);
Command add_history_command(CLI::App& app);
Command add_compare_command(CLI::App& app);
Command add_report_command(CLI::App& app);
Command add_simulate_command(CLI::App& app);
Command add_plan_command(CLI::App& app);
Command add_backends_command(CLI::App& app);

/// Every command's registration, in the order `mosaic --help` lists them.
const std::vector<Command (*)(CLI::App&)>& command_registrations();

/// "a,b,,c" -> {a, b, c}.
std::vector<std::string> split(const std::string& s);
/// Every numeric option's range (api/option_rules.hpp, the table the library and Python
/// check too), by command and option name: integers must be whole numbers the rule accepts,
/// floats finite ones (CLI11's own comparisons are all false for NaN).
void add_range_checks(CLI::App& app);

/// --db and --no-db: the results store a command records its run in.
void add_db(CLI::App* cmd, api::DbOptions& d);
/// A command's own words for the common options (empty: the general ones); generate has no
/// --input (it feeds the model itself).
struct CommonHelp {
  std::string batch, threads, seed, shape, input;
  bool has_input = true;
};
/// --batch, --threads, --seed, --shape, --input: defined here once for every command that
/// prepares a model (api::CommonOptions).
void add_common(CLI::App* cmd, api::CommonOptions& c, const CommonHelp& help = {});
/// --batch into a command's own field (train's mini-batch, gradcheck's batch), its default shown.
void add_batch(CLI::App* cmd, int64_t& batch, const std::string& help);
/// "ring (...); shm (...)": the --collective choices.
std::string collective_help();

}  // namespace mosaic::cli
