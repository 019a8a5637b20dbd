// Generative decoding (`mosaic generate`, docs/generation.md): a causal language model
// (token ids in, logits [batch, sequence, vocabulary] out) continues a prompt token by token,
// and the figures people quote for it are measured: time to first token, time per output
// token, inter-token latency percentiles, prefill and decode tokens/s.
//
// Two decoders. A model without a KV cache is recomputed: each token runs it over the whole
// sequence so far. A model with one (Hugging Face's layout: past_key_values.N.key/value in,
// present.N.key/value out, an attention mask over past and new positions, position ids) runs
// the prompt once, then one token at a time against the cache.
//
// Plans have static shapes, so what varies is padded to a planned length: the sequence (on
// the right) when recomputing, the past (masked out) with a cache; the model's own length
// when it is fixed, else buckets of 16, 32, 64, ... positions (the last one the longest the
// run needs), one plan each, built in the warm-up and timed apart. Padding is exact only for
// a causal model (recomputing) or a mask the model obeys (cache); every padded plan proves it
// on the model before use (the real positions' logits must not change with what the padding
// holds), and a model that fails is refused.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/models.hpp"
#include "api/util.hpp"
#include "backends/registry.hpp"
#include "ir/status.hpp"

namespace mosaic::api {

struct GenerateOptions {
  std::string model;  ///< ONNX file, or zoo:NAME
  std::string backend = default_backend();
  int64_t prompt_tokens = 16;         ///< random prompt ids (seeded per row), unless prompt_ids is given
  std::vector<int64_t> prompt_ids;    ///< one prompt for every row
  int64_t new_tokens = 32;            ///< tokens generated per row
  double temperature = 0;             ///< 0: greedy; else softmax(logits / temperature) is sampled
  int64_t top_k = 0;                  ///< sampling: only the k likeliest tokens (0: all)
  int64_t runs = 3;                   ///< timed generations after one untimed warm-up
  /// Context depths to sweep: per depth, a random prompt that long fills the cache (or the
  /// sequence) before the decode is timed; GenerateReport::contexts gets a point each. Empty:
  /// one generation from the prompt options.
  std::vector<int64_t> contexts;
  /// One more generation after the timed runs with each node's time recorded, the prefill
  /// apart from the decode steps (GenerateReport::nodes); its tokens are not timed.
  bool per_node = false;
  bool fuse = true;  ///< the graph fusions bench runs (core/fuse.hpp); false: the graph as loaded
  /// f32, or bf16: the products by weights on bfloat16 operands with float32 sums (the weights
  /// read as bfloat16: half the bytes per decode step); where the backend computes it.
  std::string precision = "f32";
  bool peaks = true;                  ///< the machine's read bandwidth, for the bandwidth share (measured after the runs)
  /// More than 1: that many child processes (`mosaic generate`, one after another), each its
  /// warm-up and `runs` timed runs, the runs pooled and every process's own medians kept
  /// (GenerateReport::processes), which `compare` tests between runs (api/generate_processes.cpp).
  int processes = 1;
  CommonOptions common;               ///< batch (0: the model's, symbolic = 1), threads, seed, shapes
};

/// Where the model takes its inputs and gives its logits.
struct DecoderInterface {
  std::string ids, mask, positions;  ///< mask and positions: "" when the model has none
  std::string logits;
  std::string sequence_dim;  ///< the ids' symbolic sequence dimension; "" when it is fixed
  int64_t fixed_length = 0;  ///< the ids' sequence length when fixed
  int64_t vocab = 0;
  /// A KV cache: each past input ([batch, heads, past, head size]) with the output that
  /// returns it grown by the new tokens (Hugging Face's past_key_values.N.key -> present.N.key).
  std::vector<std::pair<std::string, std::string>> cache;
  std::string past_dim;           ///< the cache inputs' symbolic past length
  int64_t cache_bytes_per_token = 0;  ///< every cache input's bytes per position, one row
};

/// One planned shape: `length` positions run (the whole sequence, the prompt or one token)
/// after `past` cached ones (0 without a cache).
struct PlannedLength {
  int64_t length = 0, past = 0;
  double plan_ms = 0;       ///< preparing and planning, in the warm-up
  double causal_diff = 0;   ///< the padding check: largest change of a real position's logit (0: not padded)
};

/// One timed generation.
struct GenerationRun {
  std::vector<double> token_ms;  ///< when each new token was known, from the start of the run
};

/// One depth of a --context sweep: the figures of a generation from a prompt that long.
struct ContextPoint {
  int64_t context = 0;
  double ttft_ms = 0, tpot_ms = 0, prefill_tokens_per_s = 0, decode_tokens_per_s = 0;
  double itl_p50_ms = 0, itl_p99_ms = 0;
  double plan_ms = 0;           ///< every planned length's preparing and planning, in the warm-up
  double cache_copy_share = 0;  ///< the timed runs' share spent copying the cache between plans
  double decode_copy_share = 0;  ///< the same over the decode steps alone (after the first token)
  double step_gbs = 0, bandwidth_share = 0;
  std::vector<GenerationRun> runs;  ///< this depth's timed runs (what `compare` tests)
};

/// One process's medians in a --processes run: the unit `compare` tests between two runs.
struct ProcessFigures {
  double ttft_ms = 0, tpot_ms = 0, decode_tokens_per_s = 0;
  struct Depth {
    int64_t context = 0;
    double ttft_ms = 0, tpot_ms = 0;
  };
  std::vector<Depth> contexts;  ///< a --context sweep's, per depth
};

/// A node's forward time in a --per-node generation: in the prefill (the first step), and
/// per decode step (the mean over the others). Nodes by name, summed over the plans.
struct NodeSplit {
  std::string name, op;
  double prefill_ms = 0, decode_ms = 0;
};


struct GenerateReport {
  std::string model, backend;
  int64_t batch = 0, prompt_tokens = 0, new_tokens = 0;
  std::string sampling;  ///< "greedy", or "temperature T, top-k K, seed S"
  std::string precision = "f32";  ///< GenerateOptions::precision
  std::string decoding;  ///< "recompute" (the whole sequence each token) or "kv-cache"
  DecoderInterface interface;
  std::vector<PlannedLength> lengths;
  std::vector<std::vector<int64_t>> prompt, generated;  ///< per row
  std::vector<GenerationRun> runs;
  // Medians over the runs; the latency percentiles pool every run's inter-token gaps.
  double ttft_ms = 0, tpot_ms = 0, e2e_ms = 0;
  double prefill_tokens_per_s = 0, decode_tokens_per_s = 0;
  double itl_p50_ms = 0, itl_p90_ms = 0, itl_p99_ms = 0;
  /// With a KV cache: its bytes at the longest sequence (every past input, the batch), and
  /// the share of the timed runs spent copying it into and out of the plans.
  int64_t cache_bytes = 0;
  double cache_copy_share = 0;
  /// The same share over the decode steps alone (from the first token to the last): the
  /// cost of growing shapes per decode step, since the timed runs plan nothing (issue 53's
  /// bar: under 2% at context 512).
  double decode_copy_share = 0;
  /// What a decode step must read (item 5 of issue 53): every weight once, but a gathered
  /// table (an embedding) only for its rows, and the cache's real past at the median step,
  /// for every row. Over TPOT and the machine's read bandwidth (peaks, when measured): the
  /// share of the memory system a decode step uses. Not a measurement of traffic: a bound
  /// from below, since activations and padding are not counted.
  int64_t step_weight_bytes = 0, step_cache_bytes = 0;
  double read_bandwidth_gbs = 0;  ///< 0: peaks not measured (--no-peaks)
  double step_gbs = 0, bandwidth_share = 0;
  std::vector<NodeSplit> nodes;  ///< --per-node: by decode time, longest first
  /// A --context sweep's points, in the order given (the fields above are the first's).
  std::vector<ContextPoint> contexts;
  /// --processes K (K > 1): each process's medians, in order; the runs above pool every
  /// process's, and the figures are recomputed from them.
  std::vector<ProcessFigures> processes;
  std::vector<std::string> notes;
  nlohmann::json provenance;
};

/// Loads o.model, finds its decoder interface, generates o.runs + 1 times (the first untimed)
/// and measures. Errors name the option, the model's input or output, or the length that
/// does not fit.
Expected<GenerateReport> generate(const GenerateOptions& o);

/// The report as JSON (mosaic.generate/1, docs/json-schema.md).
nlohmann::json generate_report_json(const GenerateReport& r);
/// The report a mosaic.generate/1 document holds (what generate_report_json wrote; --per-node
/// node times aside). Errors name the field that is missing or of the wrong type.
Expected<GenerateReport> generate_report_from_json(const nlohmann::json& doc);

/// The figures of timed runs: TTFT, TPOT, end to end, prefill and decode tokens/s (medians over
/// the runs) and the inter-token latency's p50, p90 and p99 (every run's gaps pooled).
struct RunFigures {
  double ttft_ms = 0, tpot_ms = 0, e2e_ms = 0, prefill_tokens_per_s = 0, decode_tokens_per_s = 0;
  double itl_p50_ms = 0, itl_p90_ms = 0, itl_p99_ms = 0;
};
RunFigures run_figures(const std::vector<GenerationRun>& runs, int64_t batch, int64_t prompt_tokens);

}  // namespace mosaic::api
