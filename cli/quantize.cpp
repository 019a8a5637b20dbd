// `mosaic quantize`: calibrate, write the QDQ model, print what int8 costs (api/quantize.hpp).
#include <cmath>
#include <cstdio>
#include <string>

#include "api/quantize.hpp"
#include "cli/cli_util.hpp"
#include "cli/flags.hpp"
#include "ir/file_io.hpp"

namespace mosaic::cli {
namespace {

std::string decibels(double db) {
  if (std::isinf(db)) return db > 0 ? "exact" : "-inf dB";
  if (std::isnan(db)) return "NaN";
  char b[32];
  std::snprintf(b, sizeof b, "%.1f dB", db);
  return b;
}

void print_report(const api::QuantizeReport& r, bool verbose) {
  std::printf("quantize %s: %zu node(s) quantised (%d weight(s) to int8, %d bias(es) to int32, %zu activation(s)); "
              "%s calibration on %s, batch %lld\n",
              r.model.c_str(), r.nodes.size(), r.weights, r.biases, r.activations.size(), r.method.c_str(),
              r.calibration.c_str(), static_cast<long long>(r.batch));
  if (!r.output.empty()) std::printf("wrote %s\n", r.output.c_str());
  for (const auto& s : r.skipped) std::printf("left float: %s\n", s.c_str());
  for (const auto& n : r.notes) std::printf("note: %s\n", n.c_str());
  if (verbose) {
    std::printf("%-44s %12s %12s %12s %6s\n", "activation", "lo", "hi", "scale", "zp");
    for (const auto& a : r.activations)
      std::printf("%-44s %12.5g %12.5g %12.5g %6d\n", a.name.c_str(), a.lo, a.hi, a.scale, a.zero_point);
  }
  // Per node: every node with --verbose, else the ones below the threshold (at most 10).
  int shown = 0;
  for (size_t i = 0; i < r.noise.size(); ++i) {
    const auto& n = r.noise[i];
    const bool low = !(n.sqnr_db >= r.sqnr_threshold);
    if (!verbose && (!low || shown >= 10)) continue;
    if (shown++ == 0) std::printf("%-40s %-18s %s\n", "node (int8 against float32)", "op", "SQNR");
    std::printf("%-40s %-18s %s%s\n", n.node.c_str(), n.op_type.c_str(), decibels(n.sqnr_db).c_str(),
                static_cast<int>(i) == r.first_noisy ? "  <- first below the threshold" : "");
  }
  if (r.first_noisy >= 0)
    std::printf("first node below %.1f dB: '%s' (%s)\n", r.sqnr_threshold, r.noise[static_cast<size_t>(r.first_noisy)].node.c_str(),
                r.noise[static_cast<size_t>(r.first_noisy)].op_type.c_str());
  else
    std::printf("every node's output within %.1f dB of SQNR\n", r.sqnr_threshold);
  std::printf("output SQNR %s\n", decibels(r.output_sqnr_db).c_str());
  if (r.evaluated)
    std::printf("test accuracy: float32 %.4f, int8 %.4f (%+.2f points); top-1 agreement %.2f%% over %s\n", r.accuracy_f32,
                r.accuracy_int8, 100 * (r.accuracy_int8 - r.accuracy_f32), 100 * r.top1_agreement, r.evaluation.c_str());
  else
    std::printf("accuracy %s\n", r.evaluation.c_str());
}

struct QuantizeFlags {
  api::QuantizeOptions o;
  std::string op_types = "Conv,MatMul,Gemm", exclude, json;
  bool per_tensor = false, no_evaluate = false, verbose = false;

  CLI::App* add(CLI::App& app) {
    auto* cmd = app.add_subcommand("quantize", "calibrate a float model and write its int8 QDQ form, with its accuracy cost");
    cmd->add_option("model", o.model, "ONNX file, or zoo:NAME")->required();
    cmd->add_option("-o,--output", o.output, "the QDQ model to write (.onnx); without it, only the report");
    cmd->add_option("--data", o.data,
                    "calibration data (its training split) and evaluation data (its test split), as train takes it; "
                    "without it, random inputs")
        ->capture_default_str();
    cmd->add_option("--normalize", o.normalize, "input normalisation, as train's: none, auto, MEAN..:STD..")->capture_default_str();
    cmd->add_option("--method", o.method, "range estimator: minmax, percentile or entropy")->capture_default_str();
    cmd->add_option("--percentile", o.percentile, "percentile's p: (100 - p) / 2 % of the values clipped at each end")
        ->capture_default_str();
    cmd->add_option("--samples", o.samples, "calibration rows (full batches of them)")->capture_default_str();
    cmd->add_flag("--per-tensor", per_tensor, "one scale per weight tensor (default: one per output channel)");
    cmd->add_option("--activation-type", o.activation_type, "uint8 or int8")->capture_default_str();
    cmd->add_flag("--symmetric-activations", o.symmetric_activations, "int8 activations with zero point 0");
    cmd->add_flag("--reduce-range", o.reduce_range, "7-bit weights (for integer kernels that saturate in int16)");
    cmd->add_option("--op-types", op_types, "ONNX ops whose inputs and outputs are quantised")->capture_default_str();
    cmd->add_option("--exclude", exclude, "node names left float, comma-separated");
    cmd->add_flag("--no-evaluate", no_evaluate, "skip the test-split accuracy of both models");
    cmd->add_option("--eval-samples", o.eval_samples, "test rows to evaluate (0: all)")->capture_default_str();
    cmd->add_option("--sqnr-threshold", o.sqnr_threshold, "dB; the first node whose output falls below it is named")
        ->capture_default_str();
    cmd->add_option("--backend", o.backend, "where calibration and evaluation run")->capture_default_str();
    cmd->add_option("--json", json, "write the report as JSON (mosaic.quantize/1)");
    cmd->add_flag("-v,--verbose", verbose, "every activation's range and every node's SQNR");
    add_common(cmd, o.common);
    return cmd;
  }

  int run() {
    o.per_channel = !per_tensor;
    o.evaluate = !no_evaluate;
    o.op_types = split(op_types);
    o.exclude = split(exclude);
    if (Status st = check_output_paths({{"--output", o.output}, {"--json", json}}); !st.is_ok()) return fail(st);
    auto r = api::quantize_model(o);
    if (!r.ok()) return fail(r.status());
    print_report(r.value(), verbose);
    if (!json.empty())
      if (Status st = write_file_atomic(json, api::quantize_report_json(r.value()).dump(2) + "\n"); !st.is_ok()) return fail(st);
    return 0;
  }
};

}  // namespace

Command add_quantize_command(CLI::App& app) { return make_command<QuantizeFlags>(app); }

}  // namespace mosaic::cli
