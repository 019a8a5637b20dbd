// `mosaic`: the command-line front end. Loads plugins, registers every command's flags
// (cli/flags.hpp), parses with CLI11 and runs the chosen command, a shell over the
// library API. Exceptions stop here.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <thread>

#include "backends/plugins.hpp"
#include "ir/file_io.hpp"
#include "cli/cli_util.hpp"
#include "cli/commands.hpp"
#include "cli/flags.hpp"
#include "metrics/provenance.hpp"

namespace {

/// "mosaic: error: ..." for a parse error, with a suggestion for a mistyped command or option.
int parse_failure(CLI::App& app, const CLI::ParseError& e, int argc, char** argv) {
  if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
  std::string msg = e.what(), hint;
  std::vector<std::string> commands;
  for (const auto* sub : app.get_subcommands({})) commands.push_back(sub->get_name());
  if (argc > 1 && argv[1][0] != '-' && std::find(commands.begin(), commands.end(), argv[1]) == commands.end()) {
    msg = std::string("unknown command '") + argv[1] + "' (commands: " + mosaic::cli::join(commands) + ")";
    const std::string guess = mosaic::cli::closest(argv[1], commands);
    if (!guess.empty()) hint = "; did you mean " + guess + "?";
  } else if (argc > 1) {
    // An unknown option: suggest the closest option of the subcommand.
    std::vector<std::string> names;
    for (const auto* sub : app.get_subcommands({}))
      if (sub->get_name() == argv[1])
        for (const auto* opt : sub->get_options())
          for (const auto& n : opt->get_lnames()) names.push_back("--" + n);
    for (int i = 2; i < argc && hint.empty(); ++i) {
      const std::string a = argv[i];
      const std::string name = a.substr(0, a.find('='));
      if (a.rfind("--", 0) != 0 || msg.find(a) == std::string::npos ||
          std::find(names.begin(), names.end(), name) != names.end())
        continue;
      const std::string guess = mosaic::cli::closest(name, names);
      if (!guess.empty()) hint = "; did you mean " + guess + "?";
    }
  }
  std::cerr << "mosaic: error: " << msg << hint << "\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  mosaic::set_command_line(argc, argv);
  {  // child runs (bench --processes, simulate's profiling, sweeps under mpirun) execute this program
    std::error_code ec;
    const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
    mosaic::api::set_mosaic_executable(ec ? std::string("/proc/self/exe") : self.string());
  }
  using namespace mosaic::cli;
  // Line-buffered even into a pipe or file, so an interrupted run keeps what it printed.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  // Plugins first: the backends they add belong in the defaults, the help and the checks
  // the command line is built with. The bundled ones (the torch backend) only where the
  // command line names their backend or `all`.
  // A bundled one that does not load is listed as unavailable with the reason; a --plugin
  // file that does not load is an error.
  std::vector<mosaic::Status> loads;
  for (const std::string& path : mosaic::bundled_plugins_wanted(argc, argv)) loads.push_back(mosaic::load_bundled_plugin(path));
  for (const std::string& path : mosaic::plugin_arguments(argc, argv)) loads.push_back(mosaic::load_plugin(path));
  for (const mosaic::Status& st : loads)
    if (!st.is_ok()) {
      std::cerr << "mosaic: error: " << st.message() << "\n";
      return 2;
    }
  CLI::App app{"Mosaic: compare deep-learning backends node by node on one ONNX model"};
  app.name("mosaic");
  app.require_subcommand(1);
  app.set_version_flag("--version", "mosaic 0.1.0");

  std::vector<Command> commands;
  for (auto registration : command_registrations()) commands.push_back(registration(app));

  // Loaded above, before the command line was built; every command accepts the option.
  std::vector<std::string> plugin_paths;
  for (auto* sub : app.get_subcommands({}))
    sub->add_option("--plugin", plugin_paths,
                    "load an operator/backend plugin (shared library, repeatable; docs/extending.md)");

  for (auto* sub : app.get_subcommands({})) sub->footer(command_footer(sub->get_name()));
  app.footer("\nRun 'mosaic help COMMAND' or 'mosaic COMMAND --help' for a command's options and examples.\n"
             "Documentation: docs/ in the source tree (README.md lists the pages).\n");
  // `mosaic` alone and `mosaic help [COMMAND]` print usage, as people expect.
  if (argc == 1 || (argc == 2 && std::string(argv[1]) == "help")) {
    std::cout << app.help();
    return 0;
  }
  if (argc >= 3 && std::string(argv[1]) == "help") {
    for (auto* sub : app.get_subcommands({}))
      if (sub->get_name() == argv[2]) {
        // Exactly what `mosaic CMD --help` prints.
        std::vector<std::string> args = {"--help", argv[2]};  // CLI11 takes them in reverse
        try {
          app.parse(args);
        } catch (const CLI::ParseError& e) {
          return app.exit(e);
        }
        return 0;
      }
    std::vector<std::string> names;
    for (auto* sub : app.get_subcommands({})) names.push_back(sub->get_name());
    std::cerr << "mosaic: error: no command '" << argv[2] << "' (commands: " << join(names) << ")\n";
    return 2;
  }
  add_range_checks(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return parse_failure(app, e, argc, argv);
  }
  for (auto* sub : app.get_subcommands()) {
    auto* db = sub->get_option_no_throw("--db");
    auto* no_db = sub->get_option_no_throw("--no-db");
    if (db && no_db && db->count() && no_db->count()) {
      std::cerr << "mosaic: error: --db and --no-db contradict each other (record the run in a store, or not)\n";
      return 2;
    }
  }
  // More threads than cores is allowed (an experiment) but never silent.
  for (auto* sub : app.get_subcommands())
    if (auto* t = sub->get_option_no_throw("--threads"); t && t->count()) {
      const long long n = std::atoll(t->as<std::string>().c_str());
      const unsigned cores = std::thread::hardware_concurrency();
      if (cores && n > static_cast<long long>(cores))
        std::cerr << "mosaic: warning: --threads " << n << " is more than the " << cores
                  << " cores: threads will share cores (OpenBLAS caps its own at its build's maximum), and the "
                     "machine's peaks measured this way are not cached\n";
    }
  // `--json -` / `--csv -`: standard output carries the data, the report for people goes to stderr.
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (((a == "--json" || a == "--csv") && i + 1 < argc && std::string(argv[i + 1]) == "-") || a == "--json=-" ||
        a == "--csv=-")
      mosaic::reserve_stdout_for_data();
  }
  try {
    for (const Command& c : commands)
      if (*c.app) return c.run();
  } catch (const std::exception& e) {
    std::cerr << "mosaic: error: " << e.what() << "\n";
    return 2;
  }
  return 2;
}
