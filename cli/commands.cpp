#include "cli/commands.hpp"
#include "ir/interrupt.hpp"

#include <set>
#include <regex>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>

#include "backends/registry.hpp"
#include "distributed/data_parallel.hpp"
#include "api/bench.hpp"
#include "api/bench_auto.hpp"
#include "api/info.hpp"
#include "api/verify.hpp"
#include "api/verify_audits.hpp"
#include "cli/cli_util.hpp"
#include "api/models.hpp"
#include "metrics/junit.hpp"
#include "metrics/report.hpp"
#include "operators/schema.hpp"

namespace mosaic::cli {
namespace {

namespace fs = std::filesystem;


std::string with_commas(int64_t v) {
  std::string s = std::to_string(v);
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) s.insert(static_cast<size_t>(i), ",");
  return s;
}

}  // namespace

// ---- info ---------------------------------------------------------------------------------

int run_info(const InfoOptions& o) {
  auto report = api::info(o);
  if (!report.ok()) return fail(report.status());
  const api::InfoReport& r = report.value();
  std::cout << "model:   " << r.model << " (graph '" << r.graph_name << "', opset " << r.opset << ")\n";
  for (size_t i = 0; i < r.inputs.size(); ++i) {
    std::cout << "input:   " << r.inputs[i].first << " " << r.inputs[i].second;
    const auto& symbols = i < r.input_symbols.size() ? r.input_symbols[i] : std::vector<std::pair<std::string, int64_t>>{};
    for (size_t k = 0; k < symbols.size(); ++k)
      std::cout << (k ? ", " : "  (symbolic: ") << symbols[k].first << "=" << symbols[k].second;
    std::cout << (symbols.empty() ? "" : ")") << "\n";
  }
  for (const auto& [name, desc] : r.outputs) std::cout << "output:  " << name << " " << desc << "\n";
  for (const auto& n : r.notes) std::cout << "note:    " << n << "\n";
  std::cout << "params:  " << with_commas(r.parameter_count) << " (" << format_bytes(static_cast<double>(r.weight_bytes))
            << ")\n";
  std::cout << "nodes:   " << r.nodes.size() << " (" << r.folded_nodes << " constant nodes folded at load):";
  for (const auto& [op, n] : r.ops) std::cout << " " << op << " " << n;
  std::cout << "\nFLOPs:   " << r.flops / 1e9 << " GFLOP forward per batch of " << r.batch << " ("
            << r.flops / 2e6 / static_cast<double>(r.batch) << " M multiply-adds per image)\n";
  std::cout << "memory:  weights " << format_bytes(static_cast<double>(r.weight_bytes)) << ", activations "
            << format_bytes(static_cast<double>(r.activation_bytes)) << " (planned with buffer reuse";
  if (r.attention_bytes)
    std::cout << "; attention scores " << format_bytes(static_cast<double>(r.attention_bytes)) << " at most at once";
  std::cout << ")\n";
  if (!o.nodes) return 0;
  // Trainable parameters by name (what --freeze matches), with their shapes.
  std::cout << "\nparameters (names for train --freeze):\n";
  for (const auto& [name, shape] : r.parameters)
    std::cout << "  " << name << " " << shape_str(shape) << " (" << with_commas(shape_numel(shape)) << ")\n";
  const auto registered = builtin_registry().backends();
  char line[1024];
  int width = 20;
  for (const auto& n : r.nodes) width = std::max(width, static_cast<int>(n.name.size()));
  std::snprintf(line, sizeof line, "\n%-*s %-18s %-20s %12s %10s  %s\n", width, "node", "op", "output", "params", "MFLOP",
                "backends");
  std::cout << line;
  for (const auto& n : r.nodes) {
    std::string backends;  // every registered backend, "-" where it does not take the node
    for (const auto& b : registered)
      backends += (backends.empty() ? "" : ",") +
                  (std::find(n.backends.begin(), n.backends.end(), b) != n.backends.end() ? b : std::string("-"));
    std::snprintf(line, sizeof line, "%-*.*s %-18.18s %-20.20s %12s %10.2f  %s\n", width, 600, n.name.c_str(),
                  n.op.c_str(), shape_str(n.output_shape).c_str(), with_commas(n.parameters).c_str(), n.flops / 1e6,
                  backends.c_str());
    std::cout << line;
  }
  return 0;
}

// ---- bench: api::bench, then the printed report, the files and the results store ----------

int run_bench(const BenchOptions& given) {
  dist::MpiSession mpi_session;  // a --distributed run started MPI: end it on every path out
  BenchOptions o = given;
  o.verbose = true;
  // Everything that can be refused is refused before minutes of timing.
  if (Status st = check_output_paths({{"--json", o.json}, {"--csv", o.csv}, {"--trace", o.trace}}); !st.is_ok())
    return fail(st);
  if (o.find_max_batch) return run_find_max_batch(o);  // times nothing: no results store
  auto db = open_run_store(o.db);
  if (!db.ok()) return fail(db.status());
  // Each backend is printed as it finishes; Ctrl-C (SIGINT) or SIGTERM stops the timing, and what
  // finished is printed, written and recorded, marked interrupted. Under mpirun the ranks agree on
  // the iteration to stop after (a rank stopping alone would leave the others in a collective).
  install_interrupt_handlers(!o.distributed.empty());
  size_t printed_configs = 0, printed_notes = 0;
  bool header = false;
  o.on_config_done = [&](const BenchReport& r) {
    if (o.quiet) {  // one line per configuration, the ranking at the end
      while (printed_configs < r.configs.size()) print_config_brief(r, r.configs[printed_configs++], std::cout);
      std::cout.flush();
      return;
    }
    if (!header) {
      print_report_header(r, std::cout);
      printed_notes = r.notes.size();
      header = true;
    }
    while (printed_configs < r.configs.size()) print_config(r, r.configs[printed_configs++], std::cout);
    std::cout.flush();
  };
  auto outcome = api::bench(o);
  if (!outcome.ok()) return fail(outcome.status());
  if (!outcome->reporting_rank)
    return outcome->report.interrupted ? (interrupt_exit_code() ? interrupt_exit_code() : 130) : outcome->checks_ok ? 0 : 1;
  const BenchReport& report = outcome->report;
  if (o.quiet) {
    for (size_t i = printed_configs; i < report.configs.size(); ++i) print_config_brief(report, report.configs[i], std::cout);
    print_ranking(report, std::cout);
    if (report.interrupted) std::cout << "interrupted: the configurations above finished, the rest did not run\n";
  } else {
    if (!header) print_report_header(report, std::cout);
    else
      for (size_t i = printed_notes; i < report.notes.size(); ++i) std::cout << "note: " << report.notes[i] << "\n";
    for (size_t i = printed_configs; i < report.configs.size(); ++i) print_config(report, report.configs[i], std::cout);
    print_report_footer(report, std::cout);
  }
  if (!o.json.empty())
    if (Status st = write_json(report, o.json); !st.is_ok()) return fail(st);
  if (!o.csv.empty())
    if (Status st = write_csv(report, o.csv); !st.is_ok()) return fail(st);
  if (outcome->trace) {
    if (Status st = outcome->trace->write(o.trace); !st.is_ok()) return fail(st);
    std::cerr << "trace: " << outcome->trace->events() << " events in " << o.trace << " (open in https://ui.perfetto.dev)\n";
  }
  if (Status st = record_run(db.value().get(), bench_json(report)); !st.is_ok()) return fail(st);
  if (!outcome->checks_ok)
    std::cerr << "mosaic: " << outcome->checked << " differ from the naive reference (see check lines above)\n";
  if (report.interrupted) {
    std::cerr << "mosaic: interrupted: wrote and recorded the " << report.configs.size()
              << " configuration(s) that finished (marked \"interrupted\": true)\n";
    return interrupt_exit_code() ? interrupt_exit_code() : 130;
  }
  return outcome->checks_ok ? 0 : 1;
}

// ---- verify -------------------------------------------------------------------------------

namespace {

/// Prints a per-node table; returns whether every node that ran agreed.
bool print_per_node(const PerNodeReport& r, const std::string& backend, bool quiet) {
  int width = 12;
  for (const auto& n : r.nodes) width = std::max(width, static_cast<int>(n.node.size()));
  if (!quiet) {
    std::printf("%-*s %-18s %-8s %11s %11s %11s  %s\n", width, "node", "op", "backend", "max abs", "max rel", "rel L2",
                "verdict");
    for (const auto& n : r.nodes) {
      if (!n.ran) {
        std::printf("%-*s %-18s %-8s %11s %11s %11s  UNSUPPORTED %s\n", width, n.node.c_str(), n.op.c_str(),
                    n.backend.c_str(), "-", "-", "-", n.note.c_str());
        continue;
      }
      std::printf("%-*s %-18s %-8s %11.3g %11.3g %11.3g  %s\n", width, n.node.c_str(), n.op.c_str(), n.backend.c_str(),
                  n.max_abs, n.max_rel, n.rel_l2, n.ok ? "ok" : ("DIVERGES: " + n.note).c_str());
    }
  }
  int64_t kinks = 0;
  std::string kink_nodes;
  for (const auto& n : r.nodes)
    if (n.note_kinks) {
      kinks += n.note_kinks;
      kink_nodes += (kink_nodes.empty() ? "" : ", ") + n.node + " (" + std::to_string(n.note_kinks) + ")";
    }
  if (kinks)
    std::printf("note: %lld input elements exactly on a kink, where either one-sided gradient is right, were not "
                "compared: %s\n", static_cast<long long>(kinks), kink_nodes.c_str());
  if (r.first_divergent >= 0) {
    const NodeAgreement& n = r.nodes[r.first_divergent];
    std::printf("first divergent node on %s: '%s' (%s): max abs %.3g, max rel %.3g, rel L2 %.3g\n", backend.c_str(),
                n.node.c_str(), n.op.c_str(), n.max_abs, n.max_rel, n.rel_l2);
    return false;
  }
  int ran = 0;
  for (const auto& n : r.nodes) ran += n.ran;
  std::printf("all %d nodes that ran on %s agree with naive (%zu declined)\n", ran, backend.c_str(), r.nodes.size() - ran);
  return true;
}

int run_verify_determinism(const VerifyOptions& o) {
  auto report = api::verify_determinism(o);
  if (!report.ok()) return fail(report.status());
  const api::DeterminismVerifyReport& r = report.value();
  for (const DeterminismReport& d : r.audits) {
    auto summary = [](const std::vector<DeterminismRow>& rows, bool threads_axis) {
      int same = 0;
      int64_t worst = 0;
      for (const auto& row : rows) {
        const int64_t u = threads_axis ? row.threads_max_ulp : row.repeat_max_ulp;
        same += u == 0;
        worst = std::max(worst, u);
      }
      return std::to_string(same) + "/" + std::to_string(rows.size()) + " bitwise identical" +
             (worst ? " (max drift " + std::to_string(worst) + " ULP)" : "");
    };
    std::printf("== %s on %s%s: one training step, each run on a fresh plan\n", r.model.c_str(), d.backend.c_str(),
                o.deterministic ? " (deterministic plans)" : "");
    std::printf("repeated, %d threads:   forward %s; gradients %s\n", r.threads, summary(d.nodes, false).c_str(),
                summary(d.gradients, false).c_str());
    std::printf("%d threads vs 1:        forward %s; gradients %s\n", r.threads, summary(d.nodes, true).c_str(),
                summary(d.gradients, true).c_str());
    if (!o.quiet) {
      std::printf("%-40s %14s %14s\n", "node output / gradient", "repeat ULP", "vs 1 thread");
      for (const auto* rows : {&d.nodes, &d.gradients})
        for (const auto& row : *rows)
          std::printf("%-40s %14lld %14lld\n", row.what.c_str(), static_cast<long long>(row.repeat_max_ulp),
                      static_cast<long long>(row.threads_max_ulp));
    }
  }
  // Drift is a finding, not a failure, unless deterministic plans were asked for: then a
  // repeat that differs breaks the promise.
  if (o.deterministic && !r.repeats) {
    std::cerr << "mosaic: deterministic plans did not repeat bit for bit\n";
    return 1;
  }
  return 0;
}

int run_verify_per_node(const VerifyOptions& o) {
  auto report = api::verify_per_node(o);
  if (!report.ok()) return fail(report.status());
  const api::PerNodeVerifyReport& r = report.value();
  std::vector<std::string> backends;
  for (const api::PerNodeAudit& a : r.audits) {
    backends.push_back(a.backend);
    std::printf("== %s: each node alone on %s vs naive (rtol %g, atol %g)\n", r.model.c_str(), a.backend.c_str(), o.rtol,
                o.atol);
    print_per_node(a.forward, a.backend, o.quiet);
    if (!a.backward_skipped.empty())
      std::printf("== %s: no backward audit: naive cannot train it (%s)\n", r.model.c_str(), a.backward_skipped.c_str());
    if (!a.has_backward) continue;
    std::printf("== %s: each node's backward alone on %s vs naive (same inputs and output gradients)\n",
                r.model.c_str(), a.backend.c_str());
    print_per_node(a.backward, a.backend, o.quiet);
  }
  if (!r.agree) return 1;
  if (r.ran == 0) {
    std::cerr << "mosaic: nothing was verified: no node ran on " << join(backends) << "\n";
    return 3;
  }
  return 0;
}

}  // namespace

/// Per backend: passed, failed, skipped; then the ops that made cases UNSUPPORTED, most cases
/// first (a coverage summary: what to implement next, and whether a backend lacks a kernel).
void print_verify_tally(const VerifyReport& r, std::ostream& os) {
  if (r.backends.size() > 1) {
    os << "per backend:";
    for (const auto& b : r.backends) {
      int p = 0, f = 0, u = 0;
      for (const auto& c : r.cases) {
        if (c.backend != b) continue;
        p += c.verdict == CaseVerdict::kPassed;
        f += c.verdict == CaseVerdict::kFailed;
        u += c.verdict == CaseVerdict::kUnsupported;
      }
      os << "  " << b << " " << p << " passed, " << f << " failed, " << u << " skipped;";
    }
    os << "\n";
  }
  std::map<std::string, std::set<std::string>> cases_by_op;  // op (or element type) -> case names
  std::map<std::string, std::set<std::string>> lacking;       // op -> backends without a kernel
  static const std::regex by_mosaic("operator (\\S+) is not supported by Mosaic");
  static const std::regex by_domain("no loaded plugin defines (\\S+);");
  static const std::regex by_dtype("element type ([A-Z][A-Z0-9]+)");  // ONNX's names (FLOAT8E4M3FN)
  static const std::regex no_kernel("backend '(\\S+)' has no kernel for (\\w+)");
  for (const auto& c : r.cases) {
    if (c.verdict != CaseVerdict::kUnsupported) continue;
    std::smatch m;
    if (std::regex_search(c.detail, m, by_mosaic) || std::regex_search(c.detail, m, by_domain)) cases_by_op[m[1]].insert(c.name);
    else if (std::regex_search(c.detail, m, by_dtype)) cases_by_op["element type " + m[1].str()].insert(c.name);
    else if (std::regex_search(c.detail, m, no_kernel)) lacking[m[2]].insert(m[1]);
  }
  if (!cases_by_op.empty()) {
    std::vector<std::pair<size_t, std::string>> order;
    for (const auto& [op, names] : cases_by_op) order.push_back({names.size(), op});
    std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first != b.first ? a.first > b.first : a.second < b.second; });
    os << "not supported by Mosaic, by cases: ";
    for (size_t i = 0; i < order.size(); ++i) os << (i ? ", " : "") << order[i].second << " " << order[i].first;
    os << " (" << order.size() << " ops)\n";
  }
  for (const auto& [op, backends] : lacking) {
    std::string list;
    for (const auto& b : backends) list += (list.empty() ? "" : ", ") + b;
    os << "no kernel for " << op << " on: " << list << "\n";
  }
}

int run_verify(const VerifyOptions& o) {
  auto backends = verify_backends(o.backend);
  if (!backends.ok()) return fail(backends.status());
  if (Status st = api::check_verify_modes(o); !st.is_ok()) return fail(st);
  if (Status st = check_output_paths({{"--junit", o.junit}}); !st.is_ok()) return fail(st);
  if (o.per_node) return run_verify_per_node(o);
  if (o.determinism) return run_verify_determinism(o);
  auto report = api::verify(o, [&o](const VerifyCase& c) {
    if (!o.quiet || c.verdict == CaseVerdict::kFailed)
      std::cout << case_verdict_name(c.verdict) << " " << c.name << " [" << c.backend << "] " << c.detail << "\n";
  });
  if (!report.ok()) return fail(report.status());
  const VerifyReport& r = report.value();
  print_verify_tally(r, std::cout);
  std::cout << r.passed << " passed, " << r.failed << " failed, " << r.unsupported << " skipped\n";
  if (!o.junit.empty()) {
    std::vector<JUnitCase> junit;
    for (const auto& c : r.cases)
      junit.push_back({"verify [" + c.backend + "]", c.name,
                       c.verdict == CaseVerdict::kPassed   ? JUnitCase::Outcome::kPass
                       : c.verdict == CaseVerdict::kFailed ? JUnitCase::Outcome::kFail
                                                           : JUnitCase::Outcome::kSkipped,
                       c.detail, c.seconds});
    if (Status st = write_junit(o.junit, "mosaic verify", junit); !st.is_ok()) return fail(st);
  }
  if (r.failed) return 1;
  if (r.verified_nothing()) {
    std::cerr << "mosaic: nothing was verified: all " << r.unsupported << " case runs were UNSUPPORTED on "
              << join(r.backends) << "\n";
    return 3;
  }
  return 0;
}

// ---- backends ------------------------------------------------------------------------------

int run_backends(bool markdown, bool names_only, bool available_only) {
  const auto& reg = builtin_registry();
  const auto backends = available_only ? reg.available_backends() : reg.backends();
  if (names_only) {
    for (const auto& b : backends) std::cout << b << "\n";
    return 0;
  }
  for (const auto& b : backends) {
    const BackendInfo* info = reg.info(b);
    std::string libraries;
    if (info->properties) {
      const BackendProperties p = info->properties();
      for (const auto& [library, version] : p.libraries) libraries += (libraries.empty() ? "" : ", ") + library + " " + version;
      for (const auto& [what, value] : p.kernels) libraries += (libraries.empty() ? "" : "; ") + what + " " + value;
    }
    if (info->device) libraries += (libraries.empty() ? "" : "; ") + std::string("computes on ") + info->device->name();
    if (const std::string why = backend_unavailable(*info); !why.empty())
      libraries += std::string(libraries.empty() ? "" : "; ") + "unavailable here: " + why;
    if (markdown)
      std::cout << "- **" << b << "**: " << info->summary << (libraries.empty() ? "" : " (" + libraries + ")") << "\n";
    else
      std::printf("%-8s %s%s\n", b.c_str(), info->summary.c_str(), libraries.empty() ? "" : ("\n         " + libraries).c_str());
  }
  std::cout << "\n";
  if (markdown) {
    std::cout << "| op |";
    for (const auto& b : backends) std::cout << " " << b << " |";
    std::cout << "\n|---|";
    for (size_t i = 0; i < backends.size(); ++i) std::cout << "---|";
    std::cout << "\n";
  }
  for (const auto& op : schema_names()) {
    if (markdown) std::cout << "| " << op << " |";
    else std::printf("%-20s", op.c_str());
    for (const auto& b : backends) {
      const KernelTraits* t = reg.traits(b, op);
      std::string cell = !t                                       ? "-"
                         : t->layouts == LayoutUse::kTraining  ? "yes (layouts, training too)"
                         : t->layouts == LayoutUse::kInference ? "yes (layouts)"
                                                                : "yes";
      if (markdown) std::cout << " " << cell << " |";
      else std::printf(" %-8s:%-14s", b.c_str(), cell.c_str());
    }
    std::cout << "\n";
  }
  return 0;
}

// ---- export -------------------------------------------------------------------------------

int run_export(const ExportOptions& o) {
  auto description = api::export_model(o.name, o.output, o.seed);
  if (!description.ok()) return fail(description.status());
  std::cout << "wrote " << o.output << ": " << description.value() << "\n";
  return 0;
}

}  // namespace mosaic::cli
