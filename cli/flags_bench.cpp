// The flags of `mosaic bench` and their cross-checks (cli/flags.hpp).
#include <iostream>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "cli/flags.hpp"
#include "cli/train.hpp"

namespace mosaic::cli {
namespace {

/// `mosaic bench`.
struct BenchFlags {
  BenchOptions bench;
  /// What "all" means: every backend that can run here, in registration order.
  std::vector<std::string> registered = builtin_registry().available_backends();
  std::string backends = join(registered, ",");
  std::string fallback = "naive";
  double target_ci_pct = 0;
  bool no_peaks = false;
  bool no_check = false;
  bool no_fuse = false;
  CLI::App* bench_cmd = nullptr;
  CLI::Option* backends_opt = nullptr;
  CLI::Option* target_ci_opt = nullptr;
  CLI::Option* rtol_opt = nullptr;
  CLI::Option* atol_opt = nullptr;

  CLI::App* add(CLI::App& app) {
    bench_cmd = app.add_subcommand("bench", "time every node on each backend, checked against naive");
    bench_cmd->add_option("model", bench.model, "ONNX file, or zoo:NAME")->required();
    add_common(bench_cmd, bench.common);
    backends_opt =
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
    bench_cmd->add_option("--warmup", bench.config.warmup, "warm-up iterations")->capture_default_str();
    bench_cmd->add_option("--iterations", bench.config.iterations, "measured iterations per repeat")->capture_default_str();
    bench_cmd->add_option("--repeats", bench.config.repeats, "repeats (throughput reported per repeat)")->capture_default_str();
    bench_cmd->add_option("--max-seconds", bench.config.max_seconds, "time budget per backend; iterations stop early past it")
        ->capture_default_str();
    bench_cmd->add_option("-t,--min-seconds", bench.config.min_seconds, "each repeat also measures for at least this long");
    target_ci_opt = bench_cmd->add_option(
        "--target-ci", target_ci_pct,
        "adaptive: measure until the 95% CI of the median is within +-PCT% of it (or the budget ends)");
    bench_cmd->add_option("--json", bench.json, "write the report as JSON");
    bench_cmd->add_option("--csv", bench.csv, "write the per-node rows as CSV");
    bench_cmd->add_flag("--no-peaks", no_peaks, "do not measure or report the machine's sgemm and memory peaks");
    bench_cmd->add_flag("--refresh-peaks", bench.refresh_peaks, "measure the peaks again instead of using the cached ones");
    bench_cmd->add_flag("--remeasure", bench.remeasure, "--assign auto: measure the candidates again instead of using the cached choice");
    bench_cmd->add_flag("--quiet", bench.quiet, "print one line per backend and the ranking (the files keep everything)");
    bench_cmd->add_option("--auto-budget", bench.auto_budget,
                          "--assign auto: seconds the choice may spend measuring (half alone, half checking)")
        ->capture_default_str();
    bench_cmd->add_option("--processes", bench.processes,
                          "run the benchmark in K independent processes and pool their samples (seed 001's x3)")
        ->capture_default_str();
    add_db(bench_cmd, bench.db);
    bench_cmd->add_option("--metrics-overhead", bench.config.overhead_pairs,
                          "after timing, N pairs of iterations alternate metrics on and off: what measuring costs");
    bench_cmd->add_flag("--find-max-batch", bench.find_max_batch,
                        "find the largest batch that fits in memory per backend (accounting + a confirming run); no timing");
    bench_cmd->add_option("--memory-limit", bench.memory_limit, "memory --find-max-batch fits in: 512M, 4G, ... "
                                                                "(default: 90% of the available memory)");
    bench_cmd->add_option("--data", bench.data,
                          "time on real data, the training set's first batch (default: random): " + api::data_forms());
    bench_cmd->add_option("--trace", bench.trace, "write a Chrome trace-event file of the measured iterations (Perfetto)");
    bench_cmd->add_flag("--no-fuse", no_fuse, "time the graph as loaded (no Pad->Conv/pool folding, no activation fusion)");
    bench_cmd->add_option("--attention", bench.attention,
                          "inference: run attention as one fused node where the backend has the kernel (fused), keep the "
                          "plain graph (unfused), or time both side by side (both)")
        ->check(CLI::IsMember({"fused", "unfused", "both"}));
    bench_cmd->add_option("--precision", bench.precision,
                          "f32, bf16 (convolutions and matrix products on bfloat16 inputs and weights, float32 "
                          "accumulation; in training also their backward, with float32 parameters; backends without "
                          "it decline with the reason), tf32 (the cuda backend's TF32 tensor-core math for "
                          "convolutions and matrix products), fp16 (the cuda backend's float16 tensor-core math for convolutions and "
                          "matrix products, inference), both (f32 and bf16) side by side, or int8 (inference: each "
                          "configuration beside its twin on the model's int8 QDQ form, calibrated on --data or random inputs)")
        ->check(CLI::IsMember({"f32", "bf16", "tf32", "fp16", "both", "int8"}));
    bench_cmd->add_flag("--no-check", no_check, "skip the check against the naive reference");
    bench_cmd->add_flag("--deterministic", bench.deterministic,
                        "bitwise-repeatable plans at a fixed thread count (no timing-dependent work splits)");
    rtol_opt = bench_cmd->add_option("--rtol", bench.rtol, "relative tolerance of the check")->capture_default_str();
    atol_opt = bench_cmd->add_option("--atol", bench.atol, "absolute tolerance of the check")->capture_default_str();
    return bench_cmd;
  }

  int run() {
    bench.backends = backends == "all" ? registered : split(backends);
    if (backends == "all" || (!backends_opt->count() && bench.assign.empty()))
      for (const auto& b : builtin_registry().backends())
        if (const std::string why = builtin_registry().unavailable(b); !why.empty())
          std::cerr << "mosaic: note: backend " << b << " is unavailable here (" << why << "); all leaves it out\n";
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
};

}  // namespace

Command add_bench_command(CLI::App& app) { return make_command<BenchFlags>(app); }

}  // namespace mosaic::cli
