// Shared by the decoders of `mosaic generate` (api/generate*.cpp): the model's interface,
// plans bound to sequence lengths, and the stepper each decoding scheme implements.
#pragma once

#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "api/generate.hpp"
#include "core/events.hpp"
#include "core/plan.hpp"

namespace mosaic::api::gen {

/// Bytes of the model's initializers one step reads for `rows` tokens, at least: each once, but
/// a table that only Gather nodes read (as their data) for one row per token and Gather, and
/// none of one that is only sliced (a causal mask buffer) or asked its shape.
/// `half_products`: MatMul and Gemm read 16-bit copies of their float32 weights (half the bytes).
int64_t step_weight_bytes(const Graph& g, int64_t rows, bool half_products = false);
/// Whether a plan in precision `p` reads its products' weights as 16-bit copies: bf16 (onednn's
/// and cuda's bfloat16 panels) and fp16 (cuda's float16 copies); f32 and tf32 read float32.
inline bool products_read_16bit(Precision p) { return p == Precision::kBF16 || p == Precision::kF16; }

/// Finds the ids, mask, position and cache inputs and their outputs in a loaded model.
Expected<DecoderInterface> find_interface(const Graph& g, const std::string& model);

/// A plan with its own input tensors and where the decoder's inputs and outputs are in them.
struct BoundPlan {
  std::unique_ptr<Plan> plan;
  std::vector<Tensor> inputs;  ///< in plan->graph().inputs order
  std::map<std::string, Tensor*> input;  ///< by name
  std::map<std::string, size_t> output;  ///< output index by name
  PlannedLength planned;
  bool checked = false;  ///< its padding proved harmless (or not padded so far)
  /// With a cache: the generation its past inputs were filled for, and how many real
  /// positions they hold (the rest is zero), so that a step copies only what is new.
  int64_t generation = -1, real = 0;
  bool padded = false;  ///< the padding holds the padding check's value, not zeros
};

/// Prepares the model with each named symbolic dimension bound (`dims`, beside the options'
/// --shape bindings), plans it on the backend and allocates its inputs. Errors name the model.
Expected<BoundPlan> bind_plan(const Graph& g, const GenerateOptions& o, const std::map<std::string, int64_t>& dims);

/// Checks that the prepared plan still takes every input and gives every output the decoder
/// feeds and reads (preparing drops nothing a model uses, but a model may not use them).
Status require(const BoundPlan& bp, const std::vector<std::string>& inputs, const std::vector<std::string>& outputs,
               const std::string& model);

/// The symbolic name of `input`'s dimension `axis` ("" if it is fixed or unnamed).
std::string dim_name(const Graph& g, const std::string& input, size_t axis);

class NodeTimes;
/// Runs a bound plan, its nodes' times recorded in `times` when given.
Status run_plan(BoundPlan& bp, NodeTimes* times);

/// Host values of a plan's output (a device's output is copied out).
Tensor host_output(const BoundPlan& p, size_t index);


/// Planned lengths: 16, 32, 64, ... below `longest`, then `longest`.
std::vector<int64_t> buckets(int64_t longest);

/// Each node's forward time over the steps a stepper runs, by node name (every plan of a
/// generation is the same graph at other lengths, so the names match), the prefill (the
/// first step) apart from the decode steps.
class NodeTimes final : public ExecObserver {
 public:
  void on_node(const NodeEvent& e) override;
  void on_run(const RunEvent&) override {}
  const Plan* plan = nullptr;  ///< the plan about to run (set by the stepper)
  bool prefill = true;         ///< the step about to run is the prefill
  struct Times {
    std::string op;
    double prefill_ns = 0, decode_ns = 0;
  };
  std::map<std::string, Times> by_node;
  int64_t decode_steps = 0;
};

/// How one decoding scheme runs the model for the next token.
class Stepper {
 public:
  virtual ~Stepper() = default;
  /// A new generation (an empty cache).
  virtual void begin() {}
  /// Runs the model on `tokens` (every row as long as the others, the new tokens last);
  /// afterwards logit(b, v) is row b's logit of id v for the next token.
  virtual Status step(const std::vector<std::vector<int64_t>>& tokens) = 0;
  virtual double logit(int64_t b, int64_t v) const = 0;
  virtual std::vector<PlannedLength> planned() const = 0;
  /// Batch and vocabulary: known once the first plan is built (prepare()).
  virtual Status prepare(int64_t prompt) = 0;
  int64_t batch = 1, vocab = 0;
  int64_t copy_ns = 0;  ///< time spent copying the cache into and out of the plans since begin()
  NodeTimes* node_times = nullptr;  ///< set: each plan run records its nodes' times there
};

/// Takes a new plan's batch (the ids' first dimension) into `s`, and, the first time, finds
/// the logits (the first float output of rank 3), checks that they are [batch, length,
/// vocabulary] and sets d.vocab and s.vocab.
Status adopt_plan(const BoundPlan& bp, DecoderInterface& d, const std::string& model, int64_t length, Stepper& s);

std::unique_ptr<Stepper> recompute_stepper(const GenerateOptions& o, const Graph& g, DecoderInterface& d, int64_t longest);
std::unique_ptr<Stepper> cached_stepper(const GenerateOptions& o, const Graph& g, DecoderInterface& d, int64_t longest);

/// Greedy (the first of the largest), or a seeded draw from softmax(logits / T) over the
/// top k, for row b of the stepper's last step.
int64_t pick(const Stepper& s, int64_t b, const GenerateOptions& o, std::mt19937_64& rng);

/// One generation of o.new_tokens tokens from `prompt` (every row as long): `generated` gets
/// each row's tokens, `token_ms` (when given) when each new token was known, ms from the
/// first step's start, and `prefill_copy_ns` the cache copying of the first step.
Status generate_tokens(Stepper& s, const GenerateOptions& o, const std::vector<std::vector<int64_t>>& prompt,
                       std::vector<std::vector<int64_t>>& generated, std::vector<double>* token_ms,
                       int64_t* prefill_copy_ns = nullptr);

/// The padding check's measure: the largest |after - before| over max(1, max |before|); a
/// NaN anywhere gives NaN.
double padding_change(const std::vector<double>& before, const std::vector<double>& after);

/// The padding check's bound: the largest change of a real position's logit, over the
/// logits' scale, that two different paddings may cause.
constexpr double kPaddingTolerance = 1e-4;

}  // namespace mosaic::api::gen
