// The recomputing decoder of api/generate.hpp: the model's interface, one plan per planned
// length, the padding check, and the token loop. The figures and the JSON are in
// generate_report.cpp.
#include "api/generate.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <set>

#include "api/option_rules.hpp"
#include "backends/registry.hpp"
#include "core/events.hpp"
#include "core/plan.hpp"
#include "ir/elements.hpp"
#include "metrics/provenance.hpp"

namespace mosaic::api {

void summarise_generation(GenerateReport& r);  // generate_report.cpp

namespace {

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }
bool integer_type(DType d) { return d == DType::kI64 || d == DType::kI32; }

Status check_options(const GenerateOptions& o) {
  MOSAIC_RETURN_IF_ERROR(check_numbers("generate", {{"prompt_tokens", static_cast<double>(o.prompt_tokens)},
                                                    {"new_tokens", static_cast<double>(o.new_tokens)},
                                                    {"temperature", o.temperature},
                                                    {"top_k", static_cast<double>(o.top_k)},
                                                    {"runs", static_cast<double>(o.runs)},
                                                    {"threads", o.common.threads}}));
  if (o.common.batch != 0) MOSAIC_RETURN_IF_ERROR(check_numbers("generate", {{"batch", static_cast<double>(o.common.batch)}}));
  for (int64_t id : o.prompt_ids)
    if (id < 0) return Status::invalid("`prompt_ids`: token ids are not negative, got " + std::to_string(id));
  if (!builtin_registry().has_backend(o.backend)) return unknown_backend(o.backend);
  if (!o.common.inputs.empty())
    return Status::invalid("`input`: generate feeds the model's inputs itself (the prompt: `prompt_ids`)");
  return Status::ok();
}

/// Finds the ids, mask and position inputs and the logits output of a loaded model.
Expected<DecoderInterface> find_interface(const Graph& g, const std::string& model) {
  DecoderInterface d;
  std::vector<const ValueInfo*> ids;
  for (const ValueInfo& in : g.inputs) {
    if (g.initializers.count(in.name)) continue;
    const std::string& n = in.name;
    if (contains(n, "past") || contains(n, "cache"))
      return Status::unsupported(model + ": input '" + n +
                                   "' is a KV cache; generate recomputes the sequence each token and cannot feed a "
                                   "cache yet (export the model without past_key_values)");
    if (!in.has_shape || in.dims.size() != 2)
      return Status::invalid(model + ": input '" + n + "' is not [batch, sequence]; generate feeds token ids (and an "
                             "attention mask and position ids) only");
    if (contains(n, "position")) {
      if (!integer_type(in.dtype)) return Status::invalid(model + ": position input '" + n + "' is " + dtype_name(in.dtype) + ", not int64 or int32");
      d.positions = n;
    } else if (contains(n, "mask")) {
      d.mask = n;
    } else if (integer_type(in.dtype)) {
      ids.push_back(&in);
    } else {
      return Status::invalid(model + ": input '" + n + "' (" + dtype_name(in.dtype) +
                             ") is neither token ids, an attention mask nor position ids");
    }
  }
  if (ids.size() != 1) {
    std::vector<std::string> names;
    for (const ValueInfo* v : ids) names.push_back(v->name);
    return Status::invalid(model + ": generate needs one input of token ids (int64 or int32 [batch, sequence]); found " +
                           (names.empty() ? std::string("none") : join(names)));
  }
  d.ids = ids[0]->name;
  if (ids[0]->dims[1] > 0)
    d.fixed_length = ids[0]->dims[1];
  else if (ids[0]->dim_params.size() > 1 && !ids[0]->dim_params[1].empty())
    d.sequence_dim = ids[0]->dim_params[1];
  else
    return Status::invalid(model + ": the sequence dimension of '" + d.ids + "' has neither a size nor a name to bind");
  return d;  // the logits: the first output of rank 3 once shapes are inferred (Decoder::build)
}

/// A plan for one sequence length, with its input tensors.
struct LengthPlan {
  int64_t length = 0;
  std::unique_ptr<Plan> plan;
  std::vector<Tensor> inputs;  ///< in plan->graph().inputs order
  Tensor *ids = nullptr, *mask = nullptr, *positions = nullptr;
  size_t logits = 0;           ///< output index
  PlannedLength planned;       ///< its planning time and padding check
  bool checked = false;        ///< padding checked (or never padded so far)
};

class Decoder {
 public:
  Decoder(const GenerateOptions& o, Graph g, DecoderInterface d) : o_(o), graph_(std::move(g)), d_(std::move(d)) {}

  /// The planned lengths: the model's, or 16, 32, ... up to `longest` (the last one `longest`).
  Status choose_lengths(int64_t longest) {
    if (d_.fixed_length > 0) {
      if (longest > d_.fixed_length)
        return Status::invalid(o_.model + " takes " + std::to_string(d_.fixed_length) + " positions ('" + d_.ids +
                               "'); the prompt's " + std::to_string(prompt_) + " tokens and " + std::to_string(o_.new_tokens) +
                               " new ones need " + std::to_string(longest));
      lengths_ = {d_.fixed_length};
      return Status::ok();
    }
    for (int64_t l = 16; l < longest; l *= 2) lengths_.push_back(l);
    lengths_.push_back(longest);
    return Status::ok();
  }

  /// Prepares and plans `length` positions; binds every symbolic sequence dimension to it.
  Expected<LengthPlan> build(int64_t length) {
    CommonOptions c = o_.common;
    std::set<std::string> names;
    for (const ValueInfo& in : graph_.inputs)
      if (in.name == d_.ids || in.name == d_.mask || in.name == d_.positions)
        if (in.dims.size() == 2 && in.dims[1] <= 0 && in.dim_params.size() > 1 && !in.dim_params[1].empty())
          names.insert(in.dim_params[1]);
    for (const std::string& s : o_.common.shapes)
      if (names.count(s.substr(0, s.find('='))))
        return Status::invalid("`shape` " + s + ": generate sets the sequence length itself");
    for (const std::string& n : names) c.shapes.push_back(n + "=" + std::to_string(length));
    MOSAIC_ASSIGN_OR_RETURN(Graph prepared, prepare_model(graph_, c, nullptr));
    LengthPlan lp;
    lp.length = length;
    MOSAIC_ASSIGN_OR_RETURN(lp.plan, Plan::build(prepared, Placement::all_on(o_.backend), builtin_registry(), PlanOptions{}));
    const Graph& pg = lp.plan->graph();
    for (const ValueInfo& in : pg.inputs) lp.inputs.push_back(Tensor::empty(pg.value_descs.at(in.name)));
    for (size_t i = 0; i < pg.inputs.size(); ++i) {
      const std::string& n = pg.inputs[i].name;
      Tensor* t = &lp.inputs[i];
      if (n == d_.ids) lp.ids = t;
      else if (n == d_.mask) lp.mask = t;
      else if (n == d_.positions) lp.positions = t;
    }
    if (!lp.ids) return Status::internal(o_.model + ": '" + d_.ids + "' is not an input after preparing");
    batch_ = lp.ids->dim(0);
    for (size_t i = 0; i < pg.outputs.size() && d_.logits.empty(); ++i) {
      const TensorDesc& od = pg.value_descs.at(pg.outputs[i].name);
      if (od.shape.size() == 3 && (od.dtype == DType::kF32 || od.dtype == DType::kF16 || od.dtype == DType::kBF16))
        d_.logits = pg.outputs[i].name;
    }
    if (d_.logits.empty())
      return Status::invalid(o_.model + ": no output of logits [batch, sequence, vocabulary] (float32, float16 or bfloat16)");
    for (size_t i = 0; i < pg.outputs.size(); ++i)
      if (pg.outputs[i].name == d_.logits) lp.logits = i;
    const Shape& ls = pg.value_descs.at(d_.logits).shape;
    if (ls.size() != 3 || ls[0] != batch_ || ls[1] != length)
      return Status::invalid(o_.model + ": logits '" + d_.logits + "' are " + shape_str(ls) + " for " +
                             std::to_string(length) + " positions; generate reads [batch, sequence, vocabulary]");
    d_.vocab = ls[2];
    return lp;
  }

  /// Fills the inputs with rows of `tokens` (length `len`), right-padded with `pad`.
  static void fill(LengthPlan& lp, const std::vector<std::vector<int64_t>>& tokens, int64_t len, int64_t pad) {
    const int64_t L = lp.length;
    for (size_t b = 0; b < tokens.size(); ++b)
      for (int64_t i = 0; i < L; ++i) {
        const int64_t at = static_cast<int64_t>(b) * L + i;
        store_i64(lp.ids->dtype(), lp.ids->data(), at, i < len ? tokens[b][static_cast<size_t>(i)] : pad);
        if (lp.mask) store_i64(lp.mask->dtype(), lp.mask->data(), at, i < len ? 1 : 0);
        if (lp.positions) store_i64(lp.positions->dtype(), lp.positions->data(), at, i);
      }
  }

  Status run(LengthPlan& lp) {
    if (Status st = lp.plan->run(lp.inputs, nullptr); !st.is_ok()) return st;
    if (lp.plan->output(lp.logits).device()) {  // a device's output: read a host copy
      std::vector<Tensor> outs;
      MOSAIC_RETURN_IF_ERROR(lp.plan->run(lp.inputs, &outs));
      host_logits_ = outs[lp.logits];
    } else {
      host_logits_ = lp.plan->output(lp.logits);
    }
    return Status::ok();
  }

  double logit(int64_t b, int64_t pos, int64_t v, int64_t L) const {
    const int64_t i = (b * L + pos) * d_.vocab + v;
    return host_logits_.dtype() == DType::kF32 ? host_logits_.f32()[i] : load_f64(host_logits_.dtype(), host_logits_.data(), i);
  }

  /// The padding check: the real positions' logits with two different paddings.
  Expected<double> padding_difference(LengthPlan& lp, const std::vector<std::vector<int64_t>>& tokens, int64_t len) {
    fill(lp, tokens, len, 0);
    MOSAIC_RETURN_IF_ERROR(run(lp));
    std::vector<double> first;
    for (int64_t b = 0; b < batch_; ++b)
      for (int64_t p = 0; p < len; ++p)
        for (int64_t v = 0; v < d_.vocab; ++v) first.push_back(logit(b, p, v, lp.length));
    fill(lp, tokens, len, d_.vocab - 1);
    MOSAIC_RETURN_IF_ERROR(run(lp));
    double diff = 0, scale = 1;
    size_t k = 0;
    for (int64_t b = 0; b < batch_; ++b)
      for (int64_t p = 0; p < len; ++p)
        for (int64_t v = 0; v < d_.vocab; ++v, ++k) {
          diff = std::max(diff, std::fabs(logit(b, p, v, lp.length) - first[k]));
          scale = std::max(scale, std::fabs(first[k]));
        }
    return diff / scale;
  }

  /// The plan for `len` tokens: built on first use, and checked the first time it pads.
  Expected<LengthPlan*> plan_for(int64_t len, const std::vector<std::vector<int64_t>>& tokens) {
    MOSAIC_ASSIGN_OR_RETURN(LengthPlan * lp, planned(len));
    if (!lp->checked && len < lp->length) {  // padded: the real positions must not see the padding
      MOSAIC_ASSIGN_OR_RETURN(lp->planned.causal_diff, padding_difference(*lp, tokens, len));
      if (!(lp->planned.causal_diff <= kPaddingTolerance))
        return Status::invalid(o_.model + ": the logits of the first " + std::to_string(len) + " positions change by " +
                               std::to_string(lp->planned.causal_diff) + " of their scale with the tokens padded after them (" +
                               std::to_string(lp->length) + " positions planned): the model is not causal, and generate "
                               "needs a causal decoder");
      lp->checked = true;
    }
    return lp;
  }

  /// The plan of the planned length for `len` tokens, built (and timed) if it is new.
  Expected<LengthPlan*> planned(int64_t len) {
    const int64_t L = *std::lower_bound(lengths_.begin(), lengths_.end(), len);
    auto it = plans_.find(L);
    if (it != plans_.end()) return &it->second;
    const int64_t t0 = now_ns();
    MOSAIC_ASSIGN_OR_RETURN(LengthPlan lp, build(L));
    lp.planned = {L, static_cast<double>(now_ns() - t0) / 1e6, 0};
    return &plans_.emplace(L, std::move(lp)).first->second;
  }

  std::vector<PlannedLength> planned_lengths() const {
    std::vector<PlannedLength> v;
    for (const auto& [L, lp] : plans_) v.push_back(lp.planned);
    return v;
  }

  /// One generation from `prompt`; `token_ms` gets when each token was known.
  Status generate(const std::vector<std::vector<int64_t>>& prompt, std::vector<std::vector<int64_t>>& generated,
                  std::vector<double>* token_ms) {
    std::vector<std::vector<int64_t>> tokens = prompt;
    generated.assign(prompt.size(), {});
    std::mt19937_64 rng(o_.common.seed);
    const int64_t t0 = now_ns();
    for (int64_t k = 0; k < o_.new_tokens; ++k) {
      const int64_t len = static_cast<int64_t>(tokens[0].size());
      MOSAIC_ASSIGN_OR_RETURN(LengthPlan * lp, plan_for(len, tokens));
      fill(*lp, tokens, len, 0);
      MOSAIC_RETURN_IF_ERROR(run(*lp));
      for (size_t b = 0; b < tokens.size(); ++b) {
        const int64_t next = pick(static_cast<int64_t>(b), len - 1, lp->length, rng);
        tokens[b].push_back(next);
        generated[b].push_back(next);
      }
      if (token_ms) token_ms->push_back(static_cast<double>(now_ns() - t0) / 1e6);
    }
    return Status::ok();
  }

  int64_t pick(int64_t b, int64_t pos, int64_t L, std::mt19937_64& rng) const {
    if (o_.temperature <= 0) {  // greedy: the first of the largest
      int64_t best = 0;
      for (int64_t v = 1; v < d_.vocab; ++v)
        if (logit(b, pos, v, L) > logit(b, pos, best, L)) best = v;
      return best;
    }
    std::vector<std::pair<double, int64_t>> c;
    c.reserve(static_cast<size_t>(d_.vocab));
    for (int64_t v = 0; v < d_.vocab; ++v) c.emplace_back(logit(b, pos, v, L), v);
    const size_t k = o_.top_k > 0 ? std::min<size_t>(static_cast<size_t>(o_.top_k), c.size()) : c.size();
    std::partial_sort(c.begin(), c.begin() + static_cast<std::ptrdiff_t>(k), c.end(),
                      [](const auto& x, const auto& y) { return x.first > y.first || (x.first == y.first && x.second < y.second); });
    std::vector<double> w(k);
    for (size_t i = 0; i < k; ++i) w[i] = std::exp((c[i].first - c[0].first) / o_.temperature);
    std::discrete_distribution<size_t> draw(w.begin(), w.end());
    return c[draw(rng)].second;
  }

  static constexpr double kPaddingTolerance = 1e-4;
  int64_t batch() const { return batch_; }
  const DecoderInterface& interface() const { return d_; }
  void set_prompt_length(int64_t p) { prompt_ = p; }
  /// Plans the prompt's length (batch and vocabulary come from it).
  Status probe() { return planned(prompt_).status(); }

 private:
  const GenerateOptions& o_;
  Graph graph_;
  DecoderInterface d_;
  std::vector<int64_t> lengths_;
  std::map<int64_t, LengthPlan> plans_;
  Tensor host_logits_;
  int64_t batch_ = 1, prompt_ = 0;
};

std::vector<std::vector<int64_t>> make_prompt(const GenerateOptions& o, int64_t batch, int64_t vocab) {
  std::vector<std::vector<int64_t>> p(static_cast<size_t>(batch));
  std::mt19937_64 rng(o.common.seed ^ 0x9e3779b97f4a7c15ull);
  std::uniform_int_distribution<int64_t> id(0, vocab - 1);
  for (auto& row : p) {
    if (!o.prompt_ids.empty()) row = o.prompt_ids;
    else
      for (int64_t i = 0; i < o.prompt_tokens; ++i) row.push_back(id(rng));
  }
  return p;
}

}  // namespace

Expected<GenerateReport> generate(const GenerateOptions& o) {
  MOSAIC_RETURN_IF_ERROR(check_options(o));
  MOSAIC_RETURN_IF_ERROR(set_num_threads(o.common.threads));
  MOSAIC_ASSIGN_OR_RETURN(Graph g, load_model(o.model));
  MOSAIC_ASSIGN_OR_RETURN(DecoderInterface d, find_interface(g, o.model));
  GenerateReport r;
  r.model = o.model;
  r.backend = o.backend;
  r.new_tokens = o.new_tokens;
  r.prompt_tokens = o.prompt_ids.empty() ? o.prompt_tokens : static_cast<int64_t>(o.prompt_ids.size());
  Decoder dec(o, std::move(g), std::move(d));
  dec.set_prompt_length(r.prompt_tokens);
  MOSAIC_RETURN_IF_ERROR(dec.choose_lengths(r.prompt_tokens + o.new_tokens - 1));
  MOSAIC_RETURN_IF_ERROR(dec.probe());  // batch and vocabulary
  r.interface = dec.interface();
  r.batch = dec.batch();
  for (int64_t id : o.prompt_ids)
    if (id >= r.interface.vocab)
      return Status::invalid("`prompt_ids`: " + std::to_string(id) + " is outside the vocabulary of " +
                             std::to_string(r.interface.vocab) + " (the logits' last dimension)");
  r.prompt = make_prompt(o, r.batch, r.interface.vocab);
  char sampling[96];
  std::snprintf(sampling, sizeof sampling, "temperature %g, top-k %lld, seed %llu", o.temperature,
                static_cast<long long>(o.top_k), static_cast<unsigned long long>(o.common.seed));
  r.sampling = o.temperature > 0 ? sampling : "greedy";
  // The warm-up plans every length it reaches (timed apart) and gives the tokens.
  MOSAIC_RETURN_IF_ERROR(dec.generate(r.prompt, r.generated, nullptr));
  for (int64_t i = 0; i < o.runs; ++i) {
    GenerationRun run;
    std::vector<std::vector<int64_t>> again;
    MOSAIC_RETURN_IF_ERROR(dec.generate(r.prompt, again, &run.token_ms));
    if (again != r.generated)
      r.notes.push_back("run " + std::to_string(i + 1) + " generated other tokens than the warm-up: " + o.backend +
                        " is not deterministic on this model");
    r.runs.push_back(std::move(run));
  }
  r.lengths = dec.planned_lengths();
  summarise_generation(r);
  r.provenance = provenance_json(run_provenance(o.model, {{"prompt and sampling", std::to_string(o.common.seed)}}));
  return r;
}

}  // namespace mosaic::api
