// The flags of `mosaic info`, `verify`, `export`, `plan` and `backends` (cli/flags.hpp).
#include <iostream>
#include <string>
#include <vector>

#include "frontends/zoo/zoo.hpp"
#include "cli/commands.hpp"
#include "cli/flags.hpp"
#include "cli/train.hpp"

namespace mosaic::cli {
namespace {

/// `mosaic info`.
struct InfoFlags {
  InfoOptions info;
  bool no_nodes = false;

  CLI::App* add(CLI::App& app) {
    auto* info_cmd = app.add_subcommand("info", "graph summary: nodes, shapes, parameters, FLOPs, memory");
    info_cmd->add_option("model", info.model, "ONNX file, or zoo:NAME")->required();
    add_common(info_cmd, info.common);
    info_cmd->add_flag("--no-nodes", no_nodes, "omit the per-node table");
    return info_cmd;
  }

  int run() {
    info.nodes = !no_nodes;
    return run_info(info);
  }
};

/// `mosaic verify`.
struct VerifyFlags {
  VerifyOptions verify;
  bool verify_no_fuse = false, verify_exact_quantised = false;

  CLI::App* add(CLI::App& app) {
    const std::vector<std::string> registered = builtin_registry().backends();
    auto* verify_cmd = app.add_subcommand("verify", "run ONNX backend-test cases (model.onnx + test_data_set_*/)");
    verify_cmd->add_option("paths", verify.paths, "case directories or suites of them")->required();
    verify_cmd->add_option("--backend,--backends", verify.backend, join(registered, ", ") + " or all")->capture_default_str();
    verify_cmd->add_option("--filter", verify.filter, "only cases whose name matches this regular expression");
    verify_cmd->add_option("--rtol", verify.rtol, "relative tolerance")->capture_default_str();
    verify_cmd->add_option("--atol", verify.atol, "absolute tolerance")->capture_default_str();
    verify_cmd->add_flag("--exact-quantised", verify_exact_quantised,
                         "compare quantised outputs at --atol too (default: within one quantisation step of their scale)");
    verify_cmd->add_flag("--quiet", verify.quiet, "print only failures and the summary");
    verify_cmd->add_option("--fallback", verify.fallback,
                           "a backend for the nodes the checked one has no kernel for (default: none, the case is UNSUPPORTED)");
    verify_cmd->add_flag("--no-fuse", verify_no_fuse, "run the graph as stored (no LayerNorm recognition, no activation fusion)");
    verify_cmd->add_option("--junit", verify.junit, "write the verdicts as JUnit XML (one suite per backend)");
    verify_cmd->add_flag("--per-node", verify.per_node,
                         "PATH is a model (file or zoo:NAME): compare each node alone with naive, name the first that diverges");
    verify_cmd->add_flag("--determinism", verify.determinism,
                         "PATH is a model: is a training step bitwise repeatable, and across thread counts? (per node)");
    verify_cmd->add_flag("--deterministic", verify.deterministic,
                         "with --determinism: audit deterministic plans (no timing-dependent work splits)");
    add_common(verify_cmd, verify.common);
    return verify_cmd;
  }

  int run() {
    verify.fuse = !verify_no_fuse;
    verify.quantisation_step = !verify_exact_quantised;
    return run_verify(verify);
  }
};

/// `mosaic export`.
struct ExportFlags {
  ExportOptions exp;

  CLI::App* add(CLI::App& app) {
    std::string names;
    for (const auto& n : mosaic::zoo_names()) names += (names.empty() ? "" : ", ") + n;
    auto* export_cmd = app.add_subcommand("export", "write a built-in model as ONNX (" + names + ")");
    export_cmd->add_option("name", exp.name, "zoo model name")->required();
    export_cmd->add_option("-o,--output", exp.output, "output .onnx file")->required();
    export_cmd->add_option("--seed", exp.seed, "seed of the random weights")->capture_default_str();
    return export_cmd;
  }

  int run() {
    return run_export(exp);
  }
};

/// `mosaic plan`.
struct PlanFlags {
  PlanCliOptions plan;
  std::string plan_fallback = "naive";
  bool plan_no_fuse = false;

  CLI::App* add(CLI::App& app) {
    const std::vector<std::string> registered = builtin_registry().backends();
    auto* plan_cmd = app.add_subcommand("plan", "print a plan's placement: backend per node, fallbacks, layouts, conversions");
    plan_cmd->add_option("model", plan.model, "ONNX file, or zoo:NAME")->required();
    add_common(plan_cmd, plan.common);
    auto* plan_backend_opt =
        plan_cmd->add_option("--backend,--backends", plan.backend, "backend every node asks for: " + join(registered, ", "))
            ->capture_default_str();
    plan_cmd->add_option("--assign", plan.assign, "mixed placement, as bench --assign (a spec or a YAML file)")->excludes(plan_backend_opt);
    plan_cmd->add_option("--fallback", plan_fallback, "backends tried when a node's backend cannot run it ('none' to forbid)")
        ->capture_default_str();
    plan_cmd->add_option("--mode", plan.mode, "inference, or training (no activation fusion; backward kernels)")
        ->capture_default_str();
    plan_cmd->add_flag("--no-fuse", plan_no_fuse, "plan the graph as loaded (no Pad->Conv/pool folding, no activation fusion)");
    plan_cmd->add_option("--json", plan.json, "write the plan as JSON (mosaic.plan/1)");
    return plan_cmd;
  }

  int run() {
    plan.fallback = split(plan_fallback);
    plan.fuse = !plan_no_fuse;
    return run_plan(plan);
  }
};

/// `mosaic backends`.
struct BackendsFlags {
  bool markdown = false;
  bool names_only = false;
  bool available = false;

  CLI::App* add(CLI::App& app) {
    auto* backends_cmd = app.add_subcommand("backends", "list the backends and the ops each has a kernel for");
    backends_cmd->add_flag("--markdown", markdown, "print a Markdown table");
    backends_cmd->add_flag("--names", names_only, "print only the backends' names, one per line (for scripts)");
    backends_cmd->add_flag("--available", available,
                           "with --names: only those that can run here (what all means; the cuda backend "
                           "without a GPU cannot)");
    return backends_cmd;
  }

  int run() {
    return run_backends(markdown, names_only, available);
  }
};

}  // namespace

Command add_info_command(CLI::App& app) { return make_command<InfoFlags>(app); }
Command add_verify_command(CLI::App& app) { return make_command<VerifyFlags>(app); }
Command add_export_command(CLI::App& app) { return make_command<ExportFlags>(app); }
Command add_plan_command(CLI::App& app) { return make_command<PlanFlags>(app); }
Command add_backends_command(CLI::App& app) { return make_command<BackendsFlags>(app); }

}  // namespace mosaic::cli
