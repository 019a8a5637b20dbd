// Generative decoding (`mosaic generate`, docs/generation.md): a causal language model
// (token ids in, logits [batch, sequence, vocabulary] out) continues a prompt token by token,
// and the figures people quote for it are measured: time to first token, time per output
// token, inter-token latency percentiles, prefill and decode tokens/s.
//
// This is the recomputing decoder: each token runs the model over the whole sequence so far
// (no KV cache yet). Plans have static shapes, so a sequence is padded on the right to a
// planned length: the model's own length when it is fixed, else buckets of 16, 32, 64, ...
// positions (the last one the longest sequence the run needs), one plan each, built in the
// warm-up and timed apart. Right padding leaves a causal model's logits at the real positions
// unchanged; every padded plan proves that on the model before it is used (the logits at the
// real positions must not change with the padding's tokens), and a model that fails is refused.
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
  CommonOptions common;               ///< batch (0: the model's, symbolic = 1), threads, seed, shapes
};

/// Where the model takes its inputs and gives its logits.
struct DecoderInterface {
  std::string ids, mask, positions;  ///< mask and positions: "" when the model has none
  std::string logits;
  std::string sequence_dim;  ///< the ids' symbolic sequence dimension; "" when it is fixed
  int64_t fixed_length = 0;  ///< the ids' sequence length when fixed
  int64_t vocab = 0;
};

/// One planned length.
struct PlannedLength {
  int64_t length = 0;
  double plan_ms = 0;       ///< preparing and planning, in the warm-up
  double causal_diff = 0;   ///< the padding check: largest change of a real position's logit (0: not padded)
};

/// One timed generation.
struct GenerationRun {
  std::vector<double> token_ms;  ///< when each new token was known, from the start of the run
};

struct GenerateReport {
  std::string model, backend;
  int64_t batch = 0, prompt_tokens = 0, new_tokens = 0;
  std::string sampling;  ///< "greedy", or "temperature T, top-k K, seed S"
  DecoderInterface interface;
  std::vector<PlannedLength> lengths;
  std::vector<std::vector<int64_t>> prompt, generated;  ///< per row
  std::vector<GenerationRun> runs;
  // Medians over the runs; the latency percentiles pool every run's inter-token gaps.
  double ttft_ms = 0, tpot_ms = 0, e2e_ms = 0;
  double prefill_tokens_per_s = 0, decode_tokens_per_s = 0;
  double itl_p50_ms = 0, itl_p90_ms = 0, itl_p99_ms = 0;
  std::vector<std::string> notes;
  nlohmann::json provenance;
};

/// Loads o.model, finds its decoder interface, generates o.runs + 1 times (the first untimed)
/// and measures. Errors name the option, the model's input or output, or the length that
/// does not fit.
Expected<GenerateReport> generate(const GenerateOptions& o);

/// The report as JSON (mosaic.generate/1, docs/json-schema.md).
nlohmann::json generate_report_json(const GenerateReport& r);

}  // namespace mosaic::api
