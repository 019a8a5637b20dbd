// `mosaic`: the command-line front end. Parses arguments with CLI11 and dispatches to
// the subcommands in commands.cpp. Exceptions stop here.
#include <CLI/CLI.hpp>
#include <cerrno>
#include <cmath>
#include <limits>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <thread>

#include "backends/plugins.hpp"
#include "core/file_io.hpp"
#include "backends/registry.hpp"
#include "distributed/allreduce_sync.hpp"
#include "examples/zoo.hpp"
#include "frontends/cli/cli_util.hpp"
#include "frontends/cli/commands.hpp"
#include "frontends/cli/train.hpp"

namespace {

std::string collective_help() {
  std::string out;
  for (const auto& c : mosaic::dist::collectives()) out += (out.empty() ? "" : "; ") + c.first + " (" + c.second + ")";
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

/// An integer option's check: a whole number >= `min`, with a message that says so.
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

/// A number in a range, with a message a person can read ("must be >= 0, got -1"; CLI11's own
/// range checks print DBL_MAX's 309 digits). `lo`/`hi` may be infinite; *_open excludes the bound.
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
const double kInf = std::numeric_limits<double>::infinity();
/// Every floating-point option's first check: a finite number. CLI11's range checks compare,
/// and every comparison with NaN is false, so `--rtol nan` passed them all.
CLI::Validator finite_number() { return number_in(-kInf, kInf, false, false, "finite"); }
CLI::Validator non_negative() { return number_in(0, kInf, false, true, ">= 0"); }
CLI::Validator positive() { return number_in(0, kInf, true, true, "> 0"); }

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
  std::vector<std::string> plugins = mosaic::bundled_plugins_wanted(argc, argv);
  for (const std::string& path : mosaic::plugin_arguments(argc, argv)) plugins.push_back(path);
  for (const std::string& path : plugins) {
    const mosaic::Status st = mosaic::load_plugin(path);
    if (!st.is_ok()) {
      std::cerr << "mosaic: error: " << st.message() << "\n";
      return 2;
    }
  }
  CLI::App app{"Mosaic: compare deep-learning backends node by node on one ONNX model"};
  app.name("mosaic");
  app.require_subcommand(1);
  app.set_version_flag("--version", "mosaic 0.1.0");

  auto add_db = [](CLI::App* cmd, mosaic::cli::DbOptions& d) {
    cmd->add_option("--db", d.path, "results store to record the run in (default: $MOSAIC_DB, else ./mosaic-runs.sqlite)");
    cmd->add_flag("--no-db", d.off, "do not record the run");
  };
  auto add_common = [](CLI::App* cmd, CommonOptions& c) {
    cmd->add_option("--batch", c.batch, "bind the batch dimension (default: the model's, symbolic = 1)")
        ->check(integer_at_least(1));
    cmd->add_option("--threads", c.threads, "threads for OpenMP, OpenBLAS and oneDNN (default: all cores)")
        ->check(integer_at_least(0));
    cmd->add_option("--seed", c.seed, "seed of the random input");
    cmd->add_option("--shape", c.shapes, "bind a symbolic input dimension by name: NAME=N (repeatable)");
  };

  InfoOptions info;
  auto* info_cmd = app.add_subcommand("info", "graph summary: nodes, shapes, parameters, FLOPs, memory");
  info_cmd->add_option("model", info.model, "ONNX file, or zoo:NAME")->required();
  add_common(info_cmd, info.common);
  bool no_nodes = false;
  info_cmd->add_flag("--no-nodes", no_nodes, "omit the per-node table");

  BenchOptions bench;
  // Every registered backend, in registration order.
  const std::vector<std::string> registered = mosaic::builtin_registry().backends();
  std::string backends = mosaic::cli::join(registered, ","), fallback = "naive";
  auto* bench_cmd = app.add_subcommand("bench", "time every node on each backend, checked against naive");
  bench_cmd->add_option("model", bench.model, "ONNX file, or zoo:NAME")->required();
  add_common(bench_cmd, bench.common);
  auto* backends_opt =
      bench_cmd->add_option("--backends,--backend", backends, "comma-separated backends to compare, or all (the bundled torch too)")->capture_default_str();
  bench_cmd->add_option("--assign", bench.assign,
                        "mixed placement: Conv=onednn,Gemm=im2col,@fc1=naive,@conv*=im2col,*=naive, a YAML file (.yaml), or auto (measured per node)");
  bench_cmd->add_option("--fallback", fallback, "backends tried when a node's backend cannot run it ('none' to forbid)")
      ->capture_default_str();
  bench_cmd->add_option("--mode", bench.mode, "inference, or training (forward + loss + backward + optimizer step)")
      ->capture_default_str();
  bench_cmd->add_option("--optimizer", bench.optimizer, "optimizer of --mode training")->capture_default_str();
  bench_cmd->add_option("--distributed", bench.distributed,
                        "--mode training under mpirun -np N: allreduce or allreduce-blocking data-parallel steps; --batch is per rank");
  bench_cmd->add_option("--bucket-mb", bench.bucket_mb, "gradient bucket size of --distributed (MiB)")->capture_default_str();
  bench_cmd->add_option("--collective", bench.collective, "--distributed: how buckets are summed: " + collective_help())
      ->capture_default_str();
  bench_cmd->add_option("--lr", bench.lr, "learning rate of --mode training")->capture_default_str();
  bench_cmd->add_option("--warmup", bench.config.warmup, "warm-up iterations")->capture_default_str()->check(integer_at_least(0));
  bench_cmd->add_option("--iterations", bench.config.iterations, "measured iterations per repeat")->capture_default_str()->check(integer_at_least(1));
  bench_cmd->add_option("--repeats", bench.config.repeats, "repeats (throughput reported per repeat)")->capture_default_str()->check(integer_at_least(1));
  bench_cmd->add_option("--max-seconds", bench.config.max_seconds, "time budget per backend; iterations stop early past it")
      ->capture_default_str()->check(positive());
  bench_cmd->add_option("-t,--min-seconds", bench.config.min_seconds, "each repeat also measures for at least this long")
      ->check(non_negative());
  double target_ci_pct = 0;
  auto* target_ci_opt = bench_cmd->add_option(
      "--target-ci", target_ci_pct,
      "adaptive: measure until the 95% CI of the median is within +-PCT% of it (or the budget ends)")
      ->check(positive());
  bench_cmd->add_option("--json", bench.json, "write the report as JSON");
  bench_cmd->add_option("--csv", bench.csv, "write the per-node rows as CSV");
  bool no_peaks = false;
  bench_cmd->add_flag("--no-peaks", no_peaks, "do not measure or report the machine's sgemm and memory peaks");
  bench_cmd->add_flag("--refresh-peaks", bench.refresh_peaks, "measure the peaks again instead of using the cached ones");
  bench_cmd->add_flag("--remeasure", bench.remeasure, "--assign auto: measure the candidates again instead of using the cached choice");
  bench_cmd->add_flag("--quiet", bench.quiet, "print one line per backend and the ranking (the files keep everything)");
  bench_cmd->add_option("--auto-budget", bench.auto_budget,
                        "--assign auto: seconds the choice may spend measuring (half alone, half checking)")
      ->capture_default_str()->check(positive());
  bench_cmd->add_option("--processes", bench.processes,
                        "run the benchmark in K independent processes and pool their samples (seed 001's x3)")
      ->capture_default_str()->check(integer_at_least(1));
  add_db(bench_cmd, bench.db);
  bench_cmd->add_option("--metrics-overhead", bench.config.overhead_pairs,
                        "after timing, N pairs of iterations alternate metrics on and off: what measuring costs")
      ->check(integer_at_least(1));
  bench_cmd->add_flag("--find-max-batch", bench.find_max_batch,
                      "find the largest batch that fits in memory per backend (accounting + a confirming run); no timing");
  bench_cmd->add_option("--memory-limit", bench.memory_limit, "memory --find-max-batch fits in: 512M, 4G, ... "
                                                              "(default: 90% of the available memory)");
  bench_cmd->add_option("--data", bench.data,
                        "time on real images: the first batch of fashion-mnist, idx:DIR or synthetic:N,C,H,W,K (default: random)");
  bench_cmd->add_option("--trace", bench.trace, "write a Chrome trace-event file of the measured iterations (Perfetto)");
  bool no_check = false, no_fuse = false;
  bench_cmd->add_flag("--no-fuse", no_fuse, "time the graph as loaded (no Pad->Conv/pool folding, no activation fusion)");
  bench_cmd->add_option("--attention", bench.attention,
                        "inference: run attention as one fused node where the backend has the kernel (fused), keep the "
                        "plain graph (unfused), or time both side by side (both)")
      ->check(CLI::IsMember({"fused", "unfused", "both"}));
  bench_cmd->add_option("--precision", bench.precision,
                        "f32, bf16 (convolutions and matrix products on bfloat16 inputs and weights, float32 "
                        "accumulation; in training also their backward, with float32 parameters; backends without "
                        "it decline with the reason), or both side by side")
      ->check(CLI::IsMember({"f32", "bf16", "both"}));
  bench_cmd->add_flag("--no-check", no_check, "skip the check against the naive reference");
  bench_cmd->add_flag("--deterministic", bench.deterministic,
                      "bitwise-repeatable plans at a fixed thread count (no timing-dependent work splits)");
  auto* rtol_opt = bench_cmd->add_option("--rtol", bench.rtol, "relative tolerance of the check")->capture_default_str();
  auto* atol_opt = bench_cmd->add_option("--atol", bench.atol, "absolute tolerance of the check")->capture_default_str();

  VerifyOptions verify;
  auto* verify_cmd = app.add_subcommand("verify", "run ONNX backend-test cases (model.onnx + test_data_set_*/)");
  verify_cmd->add_option("paths", verify.paths, "case directories or suites of them")->required();
  verify_cmd->add_option("--backend,--backends", verify.backend, mosaic::cli::join(registered, ", ") + " or all")->capture_default_str();
  verify_cmd->add_option("--filter", verify.filter, "only cases whose name matches this regular expression");
  verify_cmd->add_option("--rtol", verify.rtol, "relative tolerance")->capture_default_str();
  verify_cmd->add_option("--atol", verify.atol, "absolute tolerance")->capture_default_str();
  verify_cmd->add_flag("--quiet", verify.quiet, "print only failures and the summary");
  verify_cmd->add_option("--fallback", verify.fallback,
                         "a backend for the nodes the checked one has no kernel for (default: none, the case is UNSUPPORTED)");
  bool verify_no_fuse = false;
  verify_cmd->add_flag("--no-fuse", verify_no_fuse, "run the graph as stored (no LayerNorm recognition, no activation fusion)");
  verify_cmd->add_option("--junit", verify.junit, "write the verdicts as JUnit XML (one suite per backend)");
  verify_cmd->add_flag("--per-node", verify.per_node,
                       "PATH is a model (file or zoo:NAME): compare each node alone with naive, name the first that diverges");
  verify_cmd->add_flag("--determinism", verify.determinism,
                       "PATH is a model: is a training step bitwise repeatable, and across thread counts? (per node)");
  verify_cmd->add_flag("--deterministic", verify.deterministic,
                       "with --determinism: audit deterministic plans (no timing-dependent work splits)");
  add_common(verify_cmd, verify.common);

  ExportOptions exp;
  std::string names;
  for (const auto& n : mosaic::zoo_names()) names += (names.empty() ? "" : ", ") + n;
  auto* export_cmd = app.add_subcommand("export", "write a built-in model as ONNX (" + names + ")");
  export_cmd->add_option("name", exp.name, "zoo model name")->required();
  export_cmd->add_option("-o,--output", exp.output, "output .onnx file")->required();
  export_cmd->add_option("--seed", exp.seed, "seed of the random weights")->capture_default_str();

  TrainOptions train;
  bool no_shuffle = false;
  auto* train_cmd = app.add_subcommand("train", "train a model: forward, loss, backward, optimizer step, per epoch report");
  train_cmd->add_option("model", train.model, "ONNX file, or zoo:NAME")->required();
  train_cmd->add_option("--data", train.data, "fashion-mnist, idx:DIR or synthetic:N,C,H,W,K")->capture_default_str();
  auto* train_backend_opt =
      train_cmd->add_option("--backend,--backends", train.backend, "backend (nodes it cannot train fall back to naive)")->capture_default_str();
  train_cmd->add_option("--assign", train.assign, "train on a mixed placement instead, as bench --assign (a spec or a YAML file)")
      ->excludes(train_backend_opt);
  train.optimizer.clear();
  train_cmd->add_option("--optimizer", train.optimizer,
                        "sgd, momentum, nesterov, adam, adamw, rmsprop, adagrad, or a plugin's (default: sgd, or the plugin's)");
  train_cmd->add_option("--optimizer-plugin", train.plugins, "load a user optimizer (shared library)");
  std::string train_opts;
  train_cmd->add_option("--opt", train_opts, "further optimizer hyperparameters: key=value[,key=value]");
  std::string freeze;
  train_cmd->add_option("--freeze", freeze, "parameters kept fixed: comma-separated names or regular expressions");
  train_cmd->add_option("--normalize", train.normalize,
                        "per-channel input normalisation: none, auto (training-set statistics) or MEAN,..:STD,..")
      ->capture_default_str();
  bool no_prefetch = false;
  train_cmd->add_flag("--no-prefetch", no_prefetch, "load batches on the training thread (no background loader)");
  train_cmd->add_option("--lr", train.opt.lr, "learning rate")->capture_default_str();
  double train_momentum = 0;
  auto* train_momentum_opt = train_cmd->add_option("--momentum", train_momentum, "momentum (sgd, rmsprop; as --opt momentum=X)");
  train_cmd->add_option("--lr-schedule", train.lr_schedule,
                        "constant, cosine, step:EPOCHS:GAMMA, or warmup-linear:STEPS (per step: linear warm-up, then "
                        "linear decay to 0, as BERT)")
      ->capture_default_str();
  train_cmd->add_option("--loss", train.loss,
                        "cross-entropy (softmax over the last axis) or mse (against one-hot targets), per row or "
                        "token")
      ->capture_default_str()
      ->check(CLI::IsMember({"cross-entropy", "mse"}));
  train_cmd->add_option("--objective", train.objective,
                        "token data (--data text:FILE, synthetic-tokens:N,T,V): next-token or masked-lm")
      ->capture_default_str();
  train_cmd->add_option("--trace", train.trace, "write a Chrome trace-event file of every step: nodes, stages, data loading");
  train_cmd->add_option("--save", train.save, "write the trained model as ONNX");
  train_cmd->add_option("--checkpoint", train.checkpoint,
                        "write a checkpoint at every epoch end: parameters, optimizer state, step, data order, log");
  train_cmd->add_option("--resume", train.resume, "continue the run a --checkpoint file was written by");
  train_cmd->add_option("--weight-decay", train.opt.weight_decay, "weight decay");
  train_cmd->add_option("--batch", train.batch, "mini-batch size")->capture_default_str()->check(integer_at_least(1));
  train_cmd->add_option("--epochs", train.epochs, "epochs")->capture_default_str()->check(integer_at_least(1));
  train_cmd->add_option("--steps", train.steps, "stop after this many steps (0: no limit)")->check(integer_at_least(0));
  train_cmd->add_option("--steps-per-epoch", train.steps_per_epoch, "cut every epoch short after this many steps")
      ->check(integer_at_least(0));
  train_cmd->add_flag("--no-shuffle", no_shuffle, "keep the file order");
  train_cmd->add_flag("--deterministic", train.deterministic,
                      "bitwise-repeatable steps at a fixed thread count (no timing-dependent work splits)");
  train_cmd->add_option("--precision", train.precision,
                        "f32, or bf16: mixed precision (convolutions and matrix products, forward and backward, on "
                        "bfloat16 copies; float32 parameters, gradients and optimizer state); the test set is then "
                        "also evaluated in float32, with the top-1 agreement")
      ->capture_default_str()
      ->check(CLI::IsMember({"f32", "bf16"}));
  bool no_eval = false;
  train_cmd->add_flag("--no-eval", no_eval, "skip the test-set accuracy after each epoch (null in the JSON)");
  train_cmd->add_option("--seed", train.seed, "seed of shuffling, Dropout and synthetic data")->capture_default_str();
  train_cmd->add_option("--json", train.json, "write per-step losses and per-epoch results as JSON");
  train_cmd->add_option("--target-accuracy", train.target_accuracy,
                        "report the training time until the test accuracy first reaches this fraction (time-to-accuracy)");
  train_cmd->add_option("--threads", train.threads, "threads")->check(integer_at_least(0));
  train_cmd->add_option("--distributed", train.distributed,
                        "data-parallel over MPI (run under mpirun -np N): allreduce, allreduce-blocking, avg, ps or ps-async; --batch is per worker");
  train_cmd->add_option("--bucket-mb", train.bucket_mb, "gradient bucket size of the all-reduce modes (MiB)")->capture_default_str();
  train_cmd->add_option("--collective", train.collective, "all-reduce modes: how buckets are summed: " + collective_help())
      ->capture_default_str();
  train_cmd->add_option("--sync-every", train.sync_every, "avg: average the parameters every K steps (and at epoch ends)")
      ->capture_default_str();
  train_cmd->add_option("--servers", train.servers, "ps, ps-async: parameter servers (the last K ranks)")->capture_default_str();
  train_cmd->add_option("--max-staleness", train.max_staleness,
                        "ps-async: no worker runs more than S steps ahead of the slowest (stale-synchronous)")
      ->check(integer_at_least(0));
  train_cmd->add_option("--data-repeat", train.data_repeat, "train on the training set concatenated R times")
      ->check(integer_at_least(1));
  add_db(train_cmd, train.db);

  GradcheckRunOptions gc;
  auto* gc_cmd = app.add_subcommand("gradcheck", "check every parameter's gradient against finite differences");
  gc_cmd->add_option("model", gc.model, "ONNX file, or zoo:NAME")->required();
  auto* gc_backend_opt = gc_cmd->add_option("--backend,--backends", gc.backend, "backend whose backward is checked; a,b,c or all: each in turn, "
                                               "sharing the reference's evaluations")->capture_default_str();
  gc_cmd->add_option("--assign", gc.assign, "check a mixed placement instead, as bench --assign (a spec or a YAML file)")
      ->excludes(gc_backend_opt);
  gc_cmd->add_option("--batch", gc.batch, "batch size")->capture_default_str()->check(integer_at_least(1));
  std::string gc_fallback = "naive";
  gc_cmd->add_option("--fallback", gc_fallback, "backends for nodes the checked one cannot run ('none' to forbid)")
      ->capture_default_str();
  gc_cmd->add_option("--eps", gc.check.eps, "largest finite-difference step (halved until no branch switches)")
      ->capture_default_str();
  gc_cmd->add_option("--halvings", gc.check.halvings, "at most this many halvings of the step")->capture_default_str();
  gc_cmd->add_option("--tolerance", gc.check.tolerance, "max relative error")->capture_default_str();
  gc_cmd->add_option("--min-probes", gc.check.min_probes, "judged probes a PASS needs")->capture_default_str();
  gc_cmd->add_option("--json", gc.json, "write the verdicts as JSON");
  gc_cmd->add_option("--junit", gc.junit, "write the verdicts as JUnit XML (one test case per tensor)");
  gc_cmd->add_option("--plant", gc.plant, "check the backend with a planted backward bug (measures gradcheck itself; "
                                          "docs/gradcheck.md lists them)");
  gc_cmd->add_option("--directions", gc.check.directions, "random directions per tensor")->capture_default_str();
  gc_cmd->add_option("--elements", gc.check.elements, "random single elements per tensor")->capture_default_str();
  gc_cmd->add_option("--seed", gc.check.seed, "seed of input, labels and probes")->capture_default_str();
  gc_cmd->add_option("--threads", gc.threads, "threads")->check(integer_at_least(0));

  OptcheckCliOptions oc;
  std::string oc_opts;
  auto* oc_cmd = app.add_subcommand("optcheck", "validate an optimizer: reference trajectories, ONNX training-op data, "
                                                "convergence, a real network");
  oc_cmd->add_option("--optimizer", oc.optimizer, "optimizer to check (default: the plugin's)");
  oc_cmd->add_option("--optimizer-plugin", oc.plugins, "load a user optimizer (shared library)");
  oc_cmd->add_option("--reference", oc.reference, "built-in rule the optimizer must reproduce (default: its own name)");
  auto* oc_lr = oc_cmd->add_option("--lr", oc.opt.lr, "learning rate of the convergence and network checks (default: per rule)");
  oc_cmd->add_option("--momentum", oc.opt.momentum, "momentum of the convergence and network checks");
  oc_cmd->add_option("--weight-decay", oc.opt.weight_decay, "weight decay of the convergence and network checks");
  oc_cmd->add_option("--opt", oc_opts, "further hyperparameters: key=value[,key=value]");
  oc_cmd->add_option("--model", oc.model, "network whose gradients feed the optimizer ('none' to skip)")->capture_default_str();
  oc_cmd->add_option("--backend,--backends", oc.backend, "backend of the network check")->capture_default_str();
  oc_cmd->add_option("--steps", oc.steps, "steps of the network check")->capture_default_str()->check(integer_at_least(1));
  oc_cmd->add_option("--onnx-data", oc.onnx_data, "ONNX node-test directory")->capture_default_str();
  oc_cmd->add_option("--tolerance", oc.tolerance, "trajectory tolerance (relative to the reference's movement)")
      ->capture_default_str();
  oc_cmd->add_option("--seed", oc.seed, "seed of the problems")->capture_default_str();
  oc_cmd->add_option("--json", oc.json, "write the verdicts as JSON");
  oc_cmd->add_option("--junit", oc.junit, "write the verdicts as JUnit XML (one test case per check)");
  oc_cmd->add_option("--threads", oc.threads, "threads")->check(integer_at_least(0));

  SweepOptions sweep;
  auto* sweep_cmd = app.add_subcommand("sweep", "run a YAML grid of training runs; write Table 2 and Table 3 (resumable)");
  sweep_cmd->add_option("config", sweep.config, "sweep YAML file (docs/sweeps.md)")->required();
  sweep_cmd->add_option("--max-cells", sweep.max_cells, "run at most this many new cells, then stop")
      ->check(integer_at_least(0));
  sweep_cmd->add_option("--max-grid", sweep.max_grid,
                        "refuse a grid of more cells than this before anything runs (a typo in an axis can ask for millions)")
      ->capture_default_str()->check(integer_at_least(1));
  add_db(sweep_cmd, sweep.db);

  HistoryOptions history;
  auto* history_cmd = app.add_subcommand("history", "list the runs in the results store (bench, train, sweep)");
  history_cmd->add_option("--db", history.db, "results store (default: $MOSAIC_DB, else ./mosaic-runs.sqlite)");
  history_cmd->add_option("--kind", history.kind, "only bench, train or sweep runs");
  history_cmd->add_option("--model", history.model, "only runs whose model contains this text");
  history_cmd->add_option("--limit", history.limit, "newest N runs (0: all)")->capture_default_str()->check(integer_at_least(0));
  history_cmd->add_option("--show", history.show, "print run ID's stored document (JSON)")->check(integer_at_least(1));

  CompareCliOptions cmp;
  double threshold_pct = 100 * cmp.stats.threshold;
  auto* compare_cmd = app.add_subcommand(
      "compare", "are two bench runs' timings different? per backend and per node, with a significance test");
  compare_cmd->add_option("a", cmp.a, "baseline: run id, last, last~N (N bench runs before the last), or bench JSON file")
      ->required();
  compare_cmd->add_option("b", cmp.b, "candidate: the same forms")->required();
  compare_cmd->add_option("--db", cmp.db, "results store the ids refer to (default: $MOSAIC_DB, else ./mosaic-runs.sqlite)");
  compare_cmd->add_option("--threshold", threshold_pct, "smallest change of the median that counts, in percent")
      ->capture_default_str()->check(non_negative());
  compare_cmd->add_option("--alpha", cmp.stats.alpha, "significance level")->capture_default_str();
  compare_cmd->add_option("--nodes", cmp.nodes, "node rows shown per backend")->capture_default_str()->check(integer_at_least(0));
  compare_cmd->add_option("--json", cmp.json, "write the comparison as JSON");
  compare_cmd->add_flag("--force", cmp.stats.force,
                        "compare runs that differ in model, mode, batch, threads or backends (refused otherwise)");

  ReportOptions report;
  auto* report_cmd = app.add_subcommand("report", "one self-contained HTML page with figures from bench, train and sweep runs");
  report_cmd->add_option("inputs", report.inputs, "bench/train JSON files, sweep output directories, or run ids")->required();
  report_cmd->add_option("-o,--output", report.output, "the HTML file")->capture_default_str();
  report_cmd->add_option("--db", report.db, "results store run ids refer to (default: $MOSAIC_DB, else ./mosaic-runs.sqlite)");
  report_cmd->add_option("--title", report.title, "page title");

  SimulateOptions sim;
  std::string sim_ranks, sim_groups, sim_modes;
  auto* sim_cmd = app.add_subcommand(
      "simulate", "predict data-parallel throughput and speed-up for 1..1024 ranks from a measured profile and a network model");
  sim_cmd->add_option("input", sim.input, "model to profile (path or zoo:NAME), or the --json of 'bench MODEL --mode training'");
  sim_cmd->add_option("--backend,--backends", sim.backend, "backend to profile (or the run to take from the JSON)")->capture_default_str();
  sim_cmd->add_option("-b,--batch", sim.batch, "per-rank batch when profiling")->capture_default_str()->check(integer_at_least(1));
  sim_cmd->add_option("--threads", sim.threads, "threads per rank")->capture_default_str()->check(integer_at_least(1));
  sim_cmd->add_option("--iterations", sim.iterations, "timed training steps when profiling")->capture_default_str()->check(integer_at_least(1));
  sim_cmd->add_option("--warmup", sim.warmup, "warm-up steps when profiling")->capture_default_str()->check(integer_at_least(0));
  sim_cmd->add_option("--profile-concurrency", sim.profile_concurrency,
                      "profile with K benchmarks at once, as K ranks share a node; the slowest is used")
      ->capture_default_str()->check(integer_at_least(1));
  sim_cmd->add_option("--network", sim.network, "link between nodes (one node: between ranks): a preset or a --measure-network file")
      ->capture_default_str();
  sim_cmd->add_option("--intra", sim.intra, "link between the ranks of one node, when there are several nodes (default: --network)");
  sim_cmd->add_option("--ranks", sim_ranks, "rank counts to predict (default 1,2,4,...,1024)");
  sim_cmd->add_option("--ranks-per-node", sim.ranks_per_node, "ranks per node (nodes = ranks / this)")->capture_default_str()
      ->check(integer_at_least(1));
  sim_cmd->add_option("--groups", sim_groups, "node x rank groups instead of --ranks, e.g. 1n1c,1n4c,2n8c,4n16c");
  sim_cmd->add_option("--cores-per-node", sim.cores_per_node, "cores per node: more rank threads than cores slow every rank (0: no limit)")
      ->capture_default_str()->check(integer_at_least(0));
  sim_cmd->add_option("--mode", sim_modes, "data-parallel modes, comma-separated (allreduce, allreduce-blocking, avg, ps, ps-async)");
  sim_cmd->add_option("--collective", sim.collective, "all-reduce algorithm: mosaic (what --collective auto runs: shm on one node, else ring), ring, shm, "
                     "recursive-doubling, halving-doubling, auto (the cheapest)")
      ->capture_default_str();
  sim_cmd->add_option("--servers", sim.servers, "ps modes: server ranks")->capture_default_str()->check(integer_at_least(1));
  sim_cmd->add_option("--sync-every", sim.sync_every, "avg: steps between averagings")->capture_default_str()->check(integer_at_least(1));
  sim_cmd->add_option("--bucket-mb", sim.bucket_mb, "all-reduce bucket size, as in train")->capture_default_str()->check(positive());
  sim_cmd->add_option("--predict-batch", sim.predict_batch,
                      "predict for this per-rank batch: compute scales linearly from the profile's batch")
      ->check(integer_at_least(1));
  sim_cmd->add_option("--compute-scale", sim.compute_scale, "divide every compute time by this (a faster device)")
      ->capture_default_str()->check(positive());
  sim_cmd->add_option("--target-images-per-s", sim.target_images_per_s,
                      "scale compute so that one rank trains at this rate (e.g. a V100's published figure)")
      ->check(positive());
  sim_cmd->add_option("--json", sim.json, "write the predictions as JSON (mosaic.simulate/1)");
  sim_cmd->add_flag("--measure-network", sim.measure_network,
                    "under mpirun: measure point-to-point and ring all-reduce times and fit a network profile");
  sim_cmd->add_option("--network-out", sim.network_out, "--measure-network: the profile file")->capture_default_str();
  sim_cmd->add_option("--max-mb", sim.max_mb, "--measure-network: largest message in MiB")->capture_default_str()
      ->check(number_in(1, 4096, false, false, "in [1, 4096]"));

  PlanCliOptions plan;
  std::string plan_fallback = "naive";
  bool plan_no_fuse = false;
  auto* plan_cmd = app.add_subcommand("plan", "print a plan's placement: backend per node, fallbacks, layouts, conversions");
  plan_cmd->add_option("model", plan.model, "ONNX file, or zoo:NAME")->required();
  add_common(plan_cmd, plan.common);
  auto* plan_backend_opt =
      plan_cmd->add_option("--backend,--backends", plan.backend, "backend every node asks for: " + mosaic::cli::join(registered, ", "))
          ->capture_default_str();
  plan_cmd->add_option("--assign", plan.assign, "mixed placement, as bench --assign (a spec or a YAML file)")->excludes(plan_backend_opt);
  plan_cmd->add_option("--fallback", plan_fallback, "backends tried when a node's backend cannot run it ('none' to forbid)")
      ->capture_default_str();
  plan_cmd->add_option("--mode", plan.mode, "inference, or training (no activation fusion; backward kernels)")
      ->capture_default_str();
  plan_cmd->add_flag("--no-fuse", plan_no_fuse, "plan the graph as loaded (no Pad->Conv/pool folding, no activation fusion)");
  plan_cmd->add_option("--json", plan.json, "write the plan as JSON (mosaic.plan/1)");

  bool markdown = false, names_only = false;
  auto* backends_cmd = app.add_subcommand("backends", "list the backends and the ops each has a kernel for");
  backends_cmd->add_flag("--markdown", markdown, "print a Markdown table");
  backends_cmd->add_flag("--names", names_only, "print only the backends' names, one per line (for scripts)");

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
  // Ranges where a value outside them is nonsense (a negative tolerance, a momentum of 2).
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
    if (*info_cmd) {
      info.nodes = !no_nodes;
      return run_info(info);
    }
    if (*bench_cmd) {
      bench.backends = backends == "all" ? registered : split(backends);
      bench.fallback = split(fallback);
      bench.check = !no_check;
      bench.fuse = !no_fuse;
      bench.peaks = !no_peaks;
      if (!bench.assign.empty() && backends_opt->count()) {
        std::cerr << "mosaic: error: --assign and --backends exclude each other (--assign times one mixed placement; "
                     "--backends compares whole backends)\n";
        return 2;
      }
      if (no_check && (rtol_opt->count() || atol_opt->count()))
        std::cerr << "mosaic: warning: --rtol/--atol have no effect with --no-check\n";
      if (bench.mode != "training" && (bench_cmd->get_option("--optimizer")->count() || bench_cmd->get_option("--lr")->count()))
        std::cerr << "mosaic: warning: --optimizer/--lr only apply to --mode training\n";
      if (bench.config.min_seconds >= bench.config.max_seconds * 0.75) {
        std::cerr << "mosaic: error: --min-seconds " << bench.config.min_seconds
                  << " does not fit the measuring part (3/4) of --max-seconds " << bench.config.max_seconds
                  << "; raise --max-seconds\n";
        return 2;
      }
      if (target_ci_opt->count()) {
        if (bench_cmd->get_option("--repeats")->count()) {
          std::cerr << "mosaic: error: --target-ci measures one adaptive repeat; it excludes --repeats\n";
          return 2;
        }
        bench.config.target_ci = target_ci_pct / 100;
        // An explicit --iterations caps the adaptive run; otherwise only the budget does.
        if (bench_cmd->get_option("--iterations")->count()) bench.config.max_iterations = bench.config.iterations;
      }
      if (bench.find_max_batch) {
        for (const char* excluded : {"--batch", "--processes", "--csv", "--trace", "--target-ci", "--data"})
          if (bench_cmd->get_option(excluded)->count()) {
            std::cerr << "mosaic: error: --find-max-batch searches the batch and times nothing; it excludes " << excluded << "\n";
            return 2;
          }
      } else if (!bench.memory_limit.empty()) {
        std::cerr << "mosaic: error: --memory-limit only applies to --find-max-batch\n";
        return 2;
      }
      if (bench.backends.empty() && bench.assign.empty()) {
        std::cerr << "mosaic: error: --backends is empty\n";
        return 2;
      }
      return bench.processes > 1 ? run_bench_processes(bench) : run_bench(bench);
    }
    if (*verify_cmd) {
      verify.fuse = !verify_no_fuse;
      return run_verify(verify);
    }
    if (*plan_cmd) {
      plan.fallback = split(plan_fallback);
      plan.fuse = !plan_no_fuse;
      return run_plan(plan);
    }
    if (*export_cmd) return run_export(exp);
    if (*backends_cmd) return run_backends(markdown, names_only);
    if (*train_cmd) {
      train.shuffle = !no_shuffle;
      train.evaluate = !no_eval;
      train.prefetch = !no_prefetch;
      train.opt_params = split(train_opts);
      // --momentum goes through the same check as --opt: an optimizer that ignores it refuses it.
      if (train_momentum_opt->count()) train.opt_params.push_back("momentum=" + std::to_string(train_momentum));
      train.freeze = split(freeze);
      return run_train(train);
    }
    if (*gc_cmd) {
      gc.fallback = split(gc_fallback);
      return run_gradcheck(gc);
    }
    if (*sweep_cmd) return run_sweep(sweep);
    if (*sim_cmd) {
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
    if (*history_cmd) return run_history(history);
    if (*report_cmd) return run_report(report);
    if (*compare_cmd) {
      cmp.stats.threshold = threshold_pct / 100;
      return run_compare(cmp);
    }
    if (*oc_cmd) {
      oc.lr_given = oc_lr->count() > 0;
      oc.opt_params = split(oc_opts);
      return run_optcheck(oc);
    }
  } catch (const std::exception& e) {
    std::cerr << "mosaic: error: " << e.what() << "\n";
    return 2;
  }
  return 2;
}
