// bench as a library function: load, prepare, place, check every configuration against the
// naive oracle, time it, and return the report (docs/api.md). `mosaic bench` is this call
// followed by printing, the --json/--csv/--trace files and the results store.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "api/models.hpp"
#include "api/util.hpp"
#include "core/plan.hpp"
#include "metrics/benchmark.hpp"
#include "metrics/report.hpp"
#include "metrics/trace.hpp"

namespace mosaic::api {

struct BenchOptions {
  CommonOptions common;
  std::string model;
  std::vector<std::string> backends;  ///< one configuration each (the CLI's default: every registered backend)
  std::string assign;
  std::vector<std::string> fallback{"naive"};
  std::string mode = "inference";
  std::string optimizer = "sgd";  ///< training mode
  double lr = 0.01;               ///< training mode
  BenchConfig config;
  std::string json, csv;
  std::string trace;  ///< Chrome trace-event file of the measured iterations
  std::string data;   ///< --data SPEC: real images (and labels) as the input instead of random values
  bool find_max_batch = false;  ///< find the largest batch that fits (api/max_batch.hpp) instead of timing
  std::string memory_limit;     ///< ... within this many bytes ("4G"); empty: 90% of MemAvailable
  bool peaks = true;           ///< measure (once, cached) and report % of the machine's peaks
  bool refresh_peaks = false;  ///< measure the peaks again even if cached
  bool remeasure = false;      ///< --assign auto: measure again instead of using the cached choice
  double auto_budget = 120;    ///< --assign auto: seconds the choice may spend measuring
  bool quiet = false;          ///< the CLI prints one line per configuration and the ranking (--quiet)
  int processes = 1;  ///< > 1: run in that many independent processes and pool (api/bench_processes.hpp)
  /// Data-parallel training steps under mpirun (allreduce, allreduce-blocking); `batch` is per rank.
  std::string distributed;
  double bucket_mb = 25;
  std::string collective = "auto";  ///< --distributed: ring, shm or auto
  bool check = true;
  bool fuse = true;  ///< Pad->Conv and Conv/Gemm+activation fusion for the timed plans
  /// Inference with fusion: "fused" runs attention as one FusedAttention node on the
  /// backends that have the kernel (core/fuse_attention.cpp), "unfused" keeps the plain
  /// graph, "both" times each such configuration twice, fused and as a twin labelled
  /// "LABEL-unfused-attention", side by side.
  std::string attention = "fused";
  bool deterministic = false;  ///< bitwise-repeatable plans (PlanOptions::deterministic)
  /// "f32", "bf16" (convolutions and matrix products on bfloat16 inputs and weights,
  /// core/kernel.hpp Precision; configurations labelled "LABEL-bf16"), "tf32" (the cuda
  /// backend's TF32 tensor-core math, labelled "LABEL-tf32", checked within kTf32Tolerance of
  /// the output's scale; inference only, since plans on a device do not train yet), "fp16" (the
  /// cuda backend's float16 tensor-core products, labelled "LABEL-fp16", checked within
  /// kF16Tolerance; inference; cuda also takes bf16 so, on bfloat16 operands) or "both" (each
  /// configuration whose backends accept bf16 also as its "-bf16" twin, side by side).
  /// Configurations whose backends decline are left out with a note giving the reason; none
  /// left is an error. Inference: bf16 outputs are checked against naive's float32 within
  /// kBf16Tolerance of the output's scale, and their top-1 agreement is reported. Training
  /// (mixed precision: the products' backward passes read bfloat16 too, parameters, gradients
  /// and optimizer state stay float32): the loss and every gradient within kBf16Tolerance of
  /// their scale. Not with --assign auto (which chooses in float32). "int8" (inference): each
  /// configuration beside its twin "LABEL-int8" on the model's QDQ form, calibrated on `data`
  /// or random inputs (api/quantize.hpp), checked within kInt8Tolerance against naive on that
  /// form, with its top-1 agreement and SQNR against float32's outputs.
  std::string precision = "f32";
  double rtol = 1e-3, atol = 1e-4;
  DbOptions db;  ///< the results store the CLI records the run in (api::bench records nothing)
  /// Called after each configuration is timed, with the report so far (its last configuration
  /// the new one): the CLI prints each backend as it finishes. Optional.
  std::function<void(const BenchReport&)> on_config_done;
  bool verbose = false;  ///< progress lines and bars on stderr (the CLI sets it)
};

/// What a bench run found. `checks_ok` is false when a configuration's outputs (inference)
/// or loss and gradients (training) differ from the naive reference: the figures are then
/// of another computation, and the CLI exits 1.
/// bf16 configurations agree with the float32 oracle when every output element is within this
/// fraction of the output's largest magnitude (bfloat16 keeps 8 significant bits: 0.4% per
/// rounding; measured 0.3-1.5% on the zoo's CNNs).
inline constexpr double kBf16Tolerance = 0.03;
/// tf32 configurations (the cuda backend's tensor cores) agree with the float32 oracle within
/// this fraction of the output's scale: TF32 keeps 11 significant bits, 8 times bfloat16's
/// precision, and products still accumulate in float32. Not yet measured on a GPU
/// (docs/gpu.md).
inline constexpr double kTf32Tolerance = 0.01;
/// fp16 configurations (the cuda backend's float16 tensor-core products) agree with the float32
/// oracle within this fraction of the output's scale: float16 keeps 11 significant bits, as
/// TF32 does, and products accumulate in float32; a convolution's output is rounded to float16
/// once more (cuDNN's pseudo-half configuration). Not yet measured on a GPU (docs/gpu.md).
inline constexpr double kF16Tolerance = 0.01;
/// int8 twins (--precision int8) agree with naive on the same QDQ model when every output
/// element is within this fraction of the output's largest magnitude: where a float sum lands
/// on a rounding edge its code moves by one step, and the step's effect carries through the
/// layers after it.
inline constexpr double kInt8Tolerance = 0.03;
/// The tolerance of a reduced precision's check (0 for float32, which checks elementwise).
inline double reduced_precision_tolerance(Precision p) {
  switch (p) {
    case Precision::kBF16: return kBf16Tolerance;
    case Precision::kTF32: return kTf32Tolerance;
    case Precision::kF16: return kF16Tolerance;
    default: return 0.0;
  }
}
/// bf16 training configurations agree with the float32 oracle when the loss is within
/// kBf16Tolerance of it and every parameter's gradient within this relative L2 distance
/// (metrics/compare.hpp relative_l2). Rounding flips ReLU masks and MaxPool choices and so
/// moves single gradient elements by their whole size, more so the further a layer is from
/// the loss: measured up to 0.19 on VGG16-CIFAR's first convolution at batch 8, where
/// PyTorch 1.13's CPU autocast reaches 0.28 (docs/performance.md, "bf16 training"). A missing
/// term, a wrong sign or a gradient off by half errs by 0.5 or more.
inline constexpr double kBf16GradientTolerance = 0.35;

struct BenchOutcome {
  BenchReport report;  ///< every configuration's figures, checks, notes, provenance
  bool checks_ok = true;
  std::string checked;  ///< what was compared with naive: "outputs" or "loss and gradients"
  /// The Chrome trace of the timed iterations, when BenchOptions::trace names a file (the
  /// caller writes it: trace->write(path)).
  std::unique_ptr<TraceRecorder> trace;
  /// False on the ranks but 0 of a data-parallel run: they time, rank 0 reports.
  bool reporting_rank = true;
};

using BenchConfigs = std::vector<std::pair<std::string, Placement>>;

/// The configurations a bench run times, before the model is loaded: one per backend of
/// o.backends, or "mixed" for an --assign placement (none yet for --assign auto, which is
/// chosen once the graph is loaded). Errors name the unknown backend or the bad spec.
Expected<BenchConfigs> bench_configs(const BenchOptions& o);

/// The checks of the options alone, before anything is loaded: mode, the --distributed
/// combinations, --assign auto's exclusions. bench() runs them first.
Status check_bench_options(const BenchOptions& o);

/// Runs the benchmark `o` describes. Errors (bad input, a placement that cannot run, a
/// kernel that fails) return before anything is timed where they can be known in advance;
/// nothing is printed unless o.verbose. find_max_batch is api::find_max_batch's (api/max_batch.hpp),
/// processes > 1 api::bench_processes's. With
/// o.distributed (under mpirun) it starts MPI and leaves it running, so that a program can
/// call it again: end it with dist::Comm::finalize() (distributed/comm.hpp) before exit.
Expected<BenchOutcome> bench(const BenchOptions& o);

}  // namespace mosaic::api
