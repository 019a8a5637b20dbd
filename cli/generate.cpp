// `mosaic generate`: a causal language model continues a prompt; TTFT, TPOT, inter-token
// latency and tokens/s (api/generate.hpp).
#include <algorithm>
#include <cstdio>
#include <string>

#include "api/generate.hpp"
#include "cli/cli_util.hpp"
#include "cli/flags.hpp"
#include "ir/file_io.hpp"

namespace mosaic::cli {
namespace {

std::string ids_text(const std::vector<int64_t>& ids) {
  std::string s;
  for (int64_t id : ids) s += (s.empty() ? "" : " ") + std::to_string(id);
  return s;
}

void print_report(const api::GenerateReport& r) {
  std::string lengths;
  for (const auto& l : r.lengths) lengths += (lengths.empty() ? "" : ", ") + std::to_string(l.length);
  if (r.decoding == "kv-cache") {
    lengths.clear();
    for (const auto& l : r.lengths)
      if (l.length == 1) lengths += (lengths.empty() ? "" : ", ") + std::to_string(l.past);
  }
  std::printf("generate %s on %s%s: batch %lld, prompt %lld token(s), %lld new, %s; %s %s position(s)\n", r.model.c_str(),
              r.backend.c_str(), r.precision == "f32" ? "" : (" in " + r.precision).c_str(), static_cast<long long>(r.batch), static_cast<long long>(r.prompt_tokens),
              static_cast<long long>(r.new_tokens), r.sampling.c_str(),
              r.decoding == "kv-cache" ? "KV cache: the prompt once, then one token at a time, the past padded to"
                                       : "the whole sequence recomputed each token (no KV cache), padded to",
              lengths.empty() ? "no" : lengths.c_str());
  std::printf("time to first token %.2f ms (prefill %.0f tokens/s); time per output token %.2f ms (decode %.1f tokens/s); "
              "end to end %.1f ms\n",
              r.ttft_ms, r.prefill_tokens_per_s, r.tpot_ms, r.decode_tokens_per_s, r.e2e_ms);
  std::printf("inter-token latency p50 %.2f ms, p90 %.2f ms, p99 %.2f ms (medians of %zu run(s) after a warm-up)\n", r.itl_p50_ms,
              r.itl_p90_ms, r.itl_p99_ms, r.runs.size());
  if (r.step_weight_bytes > 0) {
    std::printf("a decode step reads at least %.1f MB (weights %.1f, cache %.1f): %.3g GB/s",
                static_cast<double>(r.step_weight_bytes + r.step_cache_bytes) / 1e6,
                static_cast<double>(r.step_weight_bytes) / 1e6, static_cast<double>(r.step_cache_bytes) / 1e6, r.step_gbs);
    if (r.read_bandwidth_gbs > 0)
      std::printf(", %.0f%% of the machine's read bandwidth (%.1f GB/s, read after the runs)", 100 * r.bandwidth_share, r.read_bandwidth_gbs);
    std::printf("\n");
  }
  if (!r.nodes.empty()) {
    double prefill = 0, decode = 0;
    for (const api::NodeSplit& n : r.nodes) prefill += n.prefill_ms, decode += n.decode_ms;
    std::printf("\nper node (one more generation): prefill %.2f ms, a decode step %.2f ms; the %zu longest by decode\n",
                prefill, decode, std::min<size_t>(r.nodes.size(), 10));
    std::printf("%-48s %-20s %12s %12s %8s\n", "node", "op", "prefill ms", "decode ms", "share");
    for (size_t i = 0; i < r.nodes.size() && i < 10; ++i) {
      const api::NodeSplit& n = r.nodes[i];
      std::printf("%-48.48s %-20.20s %12.3f %12.3f %7.1f%%\n", n.name.c_str(), n.op.c_str(), n.prefill_ms, n.decode_ms,
                  decode > 0 ? 100 * n.decode_ms / decode : 0.0);
    }
    std::printf("(every node in --json)\n");
  }
  if (!r.contexts.empty()) {
    std::printf("\n%8s %10s %10s %12s %10s %10s %14s %12s\n", "context", "TTFT ms", "TPOT ms", "decode tok/s",
                "ITL p99", "plan ms", "decode copies", "of read bw");
    for (const api::ContextPoint& p : r.contexts)
      std::printf("%8lld %10.2f %10.2f %12.1f %10.2f %10.0f %13.2f%% %11.0f%%\n", static_cast<long long>(p.context),
                  p.ttft_ms, p.tpot_ms, p.decode_tokens_per_s, p.itl_p99_ms, p.plan_ms, 100 * p.decode_copy_share,
                  100 * p.bandwidth_share);
    std::printf("(the lines above and the tokens below are the first context's)\n");
  }
  if (!r.processes.empty()) {
    std::string tpots;
    for (const api::ProcessFigures& p : r.processes) {
      char b[32];
      std::snprintf(b, sizeof b, "%.2f", p.tpot_ms);
      tpots += (tpots.empty() ? "" : ", ") + std::string(b);
    }
    std::printf("%zu processes, TPOT per process %s ms (compare tests these between runs)\n", r.processes.size(),
                tpots.c_str());
  }
  for (size_t b = 0; b < r.generated.size() && b < 4; ++b)
    std::printf("row %zu: %s\n", b, ids_text(r.generated[b]).c_str());
  if (r.generated.size() > 4) std::printf("(%zu more rows in --json)\n", r.generated.size() - 4);
  for (const auto& n : r.notes) std::printf("note: %s\n", n.c_str());
}

struct GenerateFlags {
  api::GenerateOptions o;
  api::DbOptions db;
  std::string prompt_ids, contexts, json;

  CLI::App* add(CLI::App& app) {
    auto* cmd = app.add_subcommand("generate", "continue a prompt with a causal language model: time to first token, "
                                               "time per output token, tokens/s");
    cmd->add_option("model", o.model, "ONNX file (token ids in, logits [batch, sequence, vocabulary] out), or zoo:NAME")
        ->required();
    cmd->add_option("--backend", o.backend, "where the model runs")->capture_default_str();
    cmd->add_option("--prompt-tokens", o.prompt_tokens, "a random prompt of N ids (seeded per row)")->capture_default_str();
    cmd->add_option("--prompt-ids", prompt_ids, "the prompt's ids, comma-separated, for every row");
    cmd->add_option("--context", contexts, "context depths to sweep, comma-separated: per depth a random prompt that "
                                           "long, then the decode timed (replaces --prompt-tokens)");
    cmd->add_option("--new-tokens", o.new_tokens, "tokens to generate per row")->capture_default_str();
    cmd->add_option("--temperature", o.temperature, "0: greedy; else sample softmax(logits / T)")->capture_default_str();
    cmd->add_option("--top-k", o.top_k, "sample among the k likeliest tokens (0: all)")->capture_default_str();
    cmd->add_option("--runs", o.runs, "timed generations after one warm-up")->capture_default_str();
    cmd->add_option("--processes", o.processes, "K independent processes, each a warm-up and --runs timed runs, pooled; "
                                                "compare tests their medians (K >= 3)")
        ->capture_default_str();
    cmd->add_option("--precision", o.precision, "f32, or bf16: the products by weights on bfloat16 operands with "
                                                "float32 sums (half the weight bytes per token; where the backend "
                                                "computes it: onednn on a CPU with AVX512_BF16 or AMX)")
        ->capture_default_str();
    cmd->add_flag("--no-fuse{false}", o.fuse, "plan the graph as loaded, without bench's fusions");
    cmd->add_flag("--per-node", o.per_node, "one more generation with each node's time: the prefill and a decode "
                                            "step apart");
    cmd->add_flag("--no-peaks{false}", o.peaks, "do not measure or report the machine's read bandwidth (the decode "
                                               "step's share of it)");
    cmd->add_option("--json", json, "write the report as JSON (mosaic.generate/1), every token's time included");
    add_db(cmd, db);
    // The common options but --input: generate feeds the model itself.
    CommonHelp help;
    help.batch = "rows generated at once (default: the model's, symbolic = 1)";
    help.seed = "seed of the random prompt and of sampling";
    help.shape = "bind another symbolic dimension by name: NAME=N (repeatable; not the sequence or past length, "
                 "which generate sets)";
    help.has_input = false;
    add_common(cmd, o.common, help);
    return cmd;
  }

  int run() {
    if (Status st = check_output_paths({{"--json", json}}); !st.is_ok()) return fail(st);
    // Parsed here to name the bad item (CLI11's delimiter parsing words it otherwise).
    auto integers = [](const std::string& list, const char* flag, const char* what, std::vector<int64_t>& into) {
      for (const std::string& item : split(list)) {
        char* end = nullptr;
        errno = 0;
        const long long v = std::strtoll(item.c_str(), &end, 10);
        if (item.empty() || *end != '\0' || errno == ERANGE)
          return Status::invalid(std::string(flag) + ": '" + item + "' is not " + what);
        into.push_back(v);
      }
      return Status::ok();
    };
    if (Status st = integers(prompt_ids, "--prompt-ids", "a token id", o.prompt_ids); !st.is_ok()) return fail(st);
    if (Status st = integers(contexts, "--context", "a context depth", o.contexts); !st.is_ok()) return fail(st);
    auto store = open_run_store(db);
    if (!store.ok()) return fail(store.status());
    auto r = api::generate(o);
    if (!r.ok()) return fail(r.status());
    print_report(r.value());
    const nlohmann::json doc = api::generate_report_json(r.value());
    if (!json.empty())
      if (Status st = write_file_atomic(json, doc.dump(2) + "\n"); !st.is_ok()) return fail(st);
    if (Status st = record_run(store.value().get(), doc); !st.is_ok()) return fail(st);
    return 0;
  }
};

}  // namespace

Command add_generate_command(CLI::App& app) { return make_command<GenerateFlags>(app); }

}  // namespace mosaic::cli
