// The flags of `mosaic history`, `compare`, `report` and `simulate` (cli/flags.hpp).
#include <iostream>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "cli/flags.hpp"
#include "cli/train.hpp"

namespace mosaic::cli {
namespace {

/// `mosaic history`.
struct HistoryFlags {
  HistoryOptions history;

  CLI::App* add(CLI::App& app) {
    auto* history_cmd = app.add_subcommand("history", "list the runs in the results store (bench, train, sweep)");
    history_cmd->add_option("--db", history.db, "results store (default: $MOSAIC_DB, else ./mosaic-runs.sqlite)");
    history_cmd->add_option("--kind", history.kind, "only bench, train, sweep, generate or loadgen runs");
    history_cmd->add_option("--model", history.model, "only runs whose model contains this text");
    history_cmd->add_option("--limit", history.limit, "newest N runs (0: all)")->capture_default_str();
    history_cmd->add_option("--show", history.show, "print run ID's stored document (JSON)");
    return history_cmd;
  }

  int run() {
    return run_history(history);
  }
};

/// `mosaic compare`.
struct CompareFlags {
  CompareCliOptions cmp;
  double threshold_pct = 100 * cmp.stats.threshold;

  CLI::App* add(CLI::App& app) {
    auto* compare_cmd = app.add_subcommand(
        "compare", "are two bench runs' timings different (per backend and per node), or two generate runs' (decode "
                   "step, first token)? with a significance test");
    compare_cmd->add_option("a", cmp.a,
                            "baseline: run id, last, last~N (N bench runs before the last), or a bench or generate JSON file")
        ->required();
    compare_cmd->add_option("b", cmp.b, "candidate: the same forms")->required();
    compare_cmd->add_option("--db", cmp.db, "results store the ids refer to (default: $MOSAIC_DB, else ./mosaic-runs.sqlite)");
    compare_cmd->add_option("--threshold", threshold_pct, "smallest change of the median that counts, in percent")
        ->capture_default_str();
    compare_cmd->add_option("--alpha", cmp.stats.alpha, "significance level")->capture_default_str();
    compare_cmd->add_option("--nodes", cmp.nodes, "node rows shown per backend")->capture_default_str();
    compare_cmd->add_option("--json", cmp.json, "write the comparison as JSON");
    compare_cmd->add_flag("--force", cmp.stats.force,
                          "compare runs that differ in model, mode, batch, threads or backends (refused otherwise)");
    return compare_cmd;
  }

  int run() {
    cmp.stats.threshold = threshold_pct / 100;
    return run_compare(cmp);
  }
};

/// `mosaic report`.
struct ReportFlags {
  ReportOptions report;

  CLI::App* add(CLI::App& app) {
    auto* report_cmd = app.add_subcommand("report", "one self-contained HTML page with figures from bench, train and sweep runs");
    report_cmd->add_option("inputs", report.inputs, "bench/train/generate JSON files, sweep output directories, or run ids")->required();
    report_cmd->add_option("-o,--output", report.output, "the HTML file")->capture_default_str();
    report_cmd->add_option("--db", report.db, "results store run ids refer to (default: $MOSAIC_DB, else ./mosaic-runs.sqlite)");
    report_cmd->add_option("--title", report.title, "page title");
    return report_cmd;
  }

  int run() {
    return run_report(report);
  }
};

/// `mosaic simulate`.
struct SimulateFlags {
  SimulateOptions sim;
  std::string sim_ranks;
  std::string sim_groups;
  std::string sim_modes;

  CLI::App* add(CLI::App& app) {
    auto* sim_cmd = app.add_subcommand(
        "simulate", "predict data-parallel throughput and speed-up for 1..1024 ranks from a measured profile and a network model");
    sim_cmd->add_option("input", sim.input, "model to profile (path or zoo:NAME), or the --json of 'bench MODEL --mode training'");
    sim_cmd->add_option("--backend,--backends", sim.backend, "backend to profile (or the run to take from the JSON)")->capture_default_str();
    sim_cmd->add_option("-b,--batch", sim.batch, "per-rank batch when profiling")->capture_default_str();
    sim_cmd->add_option("--threads", sim.threads, "threads per rank")->capture_default_str();
    sim_cmd->add_option("--iterations", sim.iterations, "timed training steps when profiling")->capture_default_str();
    sim_cmd->add_option("--warmup", sim.warmup, "warm-up steps when profiling")->capture_default_str();
    sim_cmd->add_option("--profile-concurrency", sim.profile_concurrency,
                        "profile with K benchmarks at once, as K ranks share a node; the slowest is used")
        ->capture_default_str();
    sim_cmd->add_option("--network", sim.network, "link between nodes (one node: between ranks): a preset or a --measure-network file")
        ->capture_default_str();
    sim_cmd->add_option("--intra", sim.intra, "link between the ranks of one node, when there are several nodes (default: --network)");
    sim_cmd->add_option("--ranks", sim_ranks, "rank counts to predict (default 1,2,4,...,1024)");
    sim_cmd->add_option("--ranks-per-node", sim.ranks_per_node, "ranks per node (nodes = ranks / this)")->capture_default_str();
    sim_cmd->add_option("--groups", sim_groups, "node x rank groups instead of --ranks, e.g. 1n1c,1n4c,2n8c,4n16c");
    sim_cmd->add_option("--cores-per-node", sim.cores_per_node, "cores per node: more rank threads than cores slow every rank (0: no limit)")
        ->capture_default_str();
    sim_cmd->add_option("--mode", sim_modes, "data-parallel modes, comma-separated (allreduce, allreduce-blocking, avg, ps, ps-async)");
    sim_cmd->add_option("--collective", sim.collective, "all-reduce algorithm: mosaic (what --collective auto runs: shm on one node, else ring), ring, shm, "
                       "recursive-doubling, halving-doubling, auto (the cheapest)")
        ->capture_default_str();
    sim_cmd->add_option("--servers", sim.servers, "ps modes: server ranks")->capture_default_str();
    sim_cmd->add_option("--sync-every", sim.sync_every, "avg: steps between averagings")->capture_default_str();
    sim_cmd->add_option("--bucket-mb", sim.bucket_mb, "all-reduce bucket size, as in train")->capture_default_str();
    sim_cmd->add_option("--predict-batch", sim.predict_batch,
                        "predict for this per-rank batch: compute scales linearly from the profile's batch");
    sim_cmd->add_option("--compute-scale", sim.compute_scale, "divide every compute time by this (a faster device)")
        ->capture_default_str();
    sim_cmd->add_option("--target-images-per-s", sim.target_images_per_s,
                        "scale compute so that one rank trains at this rate (e.g. a V100's published figure)");
    sim_cmd->add_option("--json", sim.json, "write the predictions as JSON (mosaic.simulate/1)");
    sim_cmd->add_flag("--measure-network", sim.measure_network,
                      "under mpirun: measure point-to-point and ring all-reduce times and fit a network profile");
    sim_cmd->add_option("--network-out", sim.network_out, "--measure-network: the profile file")->capture_default_str();
    sim_cmd->add_option("--max-mb", sim.max_mb, "--measure-network: largest message in MiB")->capture_default_str();
    return sim_cmd;
  }

  int run() {
    if (!sim_modes.empty()) sim.modes = split(sim_modes);
    if (!sim_groups.empty()) sim.groups = split(sim_groups);
    if (!sim_ranks.empty()) {
      sim.ranks.clear();
      for (const auto& r : split(sim_ranks)) {
        try {
          size_t used = 0;
          sim.ranks.push_back(std::stoi(r, &used));
          if (used != r.size()) throw std::invalid_argument(r);
        } catch (const std::exception&) {
          std::cerr << "mosaic: error: --ranks: '" << r << "' is not a rank count\n";
          return 2;
        }
      }
    }
    return run_simulate(sim);
  }
};

}  // namespace

Command add_history_command(CLI::App& app) { return make_command<HistoryFlags>(app); }
Command add_compare_command(CLI::App& app) { return make_command<CompareFlags>(app); }
Command add_report_command(CLI::App& app) { return make_command<ReportFlags>(app); }
Command add_simulate_command(CLI::App& app) { return make_command<SimulateFlags>(app); }

}  // namespace mosaic::cli
