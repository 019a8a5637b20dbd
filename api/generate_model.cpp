// The decoder's interface (which inputs are ids, mask, positions and cache), plans bound to
// lengths, and the recomputing stepper (api/generate_internal.hpp).
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "api/generate_internal.hpp"
#include "backends/registry.hpp"
#include "core/events.hpp"
#include "core/fuse.hpp"
#include "ir/elements.hpp"

namespace mosaic::api::gen {

namespace {

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }
bool integer_type(DType d) { return d == DType::kI64 || d == DType::kI32; }

/// The output that returns past input `past` grown: "past_key_values.0.key" -> "present.0.key",
/// "past.0.key" -> "present.0.key", "past_key_0" -> "present_key_0".
std::string present_of(const std::string& past, const Graph& g) {
  std::vector<std::string> candidates;
  for (const char* prefix : {"past_key_values", "past"}) {
    const size_t at = past.find(prefix);
    if (at != std::string::npos) candidates.push_back(past.substr(0, at) + "present" + past.substr(at + std::string(prefix).size()));
  }
  for (const std::string& c : candidates)
    for (const ValueInfo& out : g.outputs)
      if (out.name == c) return c;
  return "";
}

}  // namespace

int64_t step_weight_bytes(const Graph& g, int64_t rows, bool half_products) {
  std::map<std::string, int64_t> gathers;  // tables read only as a Gather's data: how many Gathers
  std::set<std::string> whole, products;  // products: weights a bf16 or fp16 plan reads as 16-bit copies
  for (const Node& n : g.nodes)
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      if (!g.initializers.count(n.inputs[i])) continue;
      if (n.op_type == "Gather" && i == 0) ++gathers[n.inputs[i]];
      else if (n.op_type != "Slice" && n.op_type != "Shape") whole.insert(n.inputs[i]);
      if ((n.op_type == "MatMul" || n.op_type == "Gemm") && i == 1) products.insert(n.inputs[i]);
    }
  int64_t bytes = 0;
  for (const auto& [name, t] : g.initializers) {
    // A product's float32 weights are read as 16-bit copies in a bf16 or fp16 plan: half the
    // bytes (a lower bound still where another node also reads them whole).
    const bool half = half_products && t.dtype() == DType::kF32 && products.count(name);
    const auto b = static_cast<int64_t>(t.bytes()) / (half ? 2 : 1);
    const auto it = gathers.find(name);
    if (whole.count(name) || (it != gathers.end() && (t.shape().empty() || t.shape()[0] <= 0))) {
      bytes += b;
      continue;
    }
    // Sliced (a causal mask buffer), its shape read, or read by a subgraph: a part or
    // nothing, not counted (the figure is a bound from below).
    if (it == gathers.end()) continue;
    bytes += std::min(b, b / t.shape()[0] * rows * it->second);
  }
  return bytes;
}

std::string dim_name(const Graph& g, const std::string& input, size_t axis) {
  for (const ValueInfo& in : g.inputs)
    if (in.name == input && in.dims.size() > axis && in.dims[axis] <= 0 && in.dim_params.size() > axis)
      return in.dim_params[axis];
  return "";
}

Expected<DecoderInterface> find_interface(const Graph& g, const std::string& model) {
  DecoderInterface d;
  std::vector<const ValueInfo*> ids;
  for (const ValueInfo& in : g.inputs) {
    if (g.initializers.count(in.name)) continue;
    const std::string& n = in.name;
    if (contains(n, "past")) {
      const std::string present = present_of(n, g);
      if (present.empty())
        return Status::invalid(model + ": cache input '" + n + "' has no output that returns it (expected 'present" +
                               n.substr(n.find("past") + 4) + "' or the same name with past_key_values -> present)");
      if (!in.has_shape || in.dims.size() != 4)
        return Status::invalid(model + ": cache input '" + n + "' is not [batch, heads, past, head size]");
      const std::string past = in.dims[2] <= 0 && in.dim_params.size() > 2 ? in.dim_params[2] : "";
      if (past.empty() || in.dims[1] <= 0 || in.dims[3] <= 0)
        return Status::invalid(model + ": cache input '" + n + "' must have fixed heads and head size and a named past length (axis 2)");
      if (!d.past_dim.empty() && past != d.past_dim)
        return Status::invalid(model + ": cache inputs name their past length differently ('" + d.past_dim + "', '" + past + "')");
      d.past_dim = past;
      d.cache.emplace_back(n, present);
      d.cache_bytes_per_token += in.dims[1] * in.dims[3] * static_cast<int64_t>(dtype_size(in.dtype));
      continue;
    }
    if (contains(n, "cache"))
      return Status::unsupported(model + ": input '" + n + "' looks like a cache but is not laid out as Hugging Face's "
                                 "past_key_values.N.key/value (with present.N.key/value outputs)");
    if (!in.has_shape || in.dims.size() != 2)
      return Status::invalid(model + ": input '" + n + "' is not [batch, sequence]; generate feeds token ids (and an "
                             "attention mask, position ids and a KV cache) only");
    if (contains(n, "position")) {
      if (!integer_type(in.dtype))
        return Status::invalid(model + ": position input '" + n + "' is " + dtype_name(in.dtype) + ", not int64 or int32");
      d.positions = n;
    } else if (contains(n, "mask")) {
      d.mask = n;
    } else if (integer_type(in.dtype)) {
      ids.push_back(&in);
    } else {
      return Status::invalid(model + ": input '" + n + "' (" + dtype_name(in.dtype) +
                             ") is neither token ids, an attention mask, position ids nor a cache");
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
  if (!d.cache.empty()) {  // padding the past needs a mask over it and positions that do not count the padding
    if (d.mask.empty() || d.positions.empty())
      return Status::invalid(model + ": a KV cache needs an attention mask input and a position ids input (it has " +
                             (d.mask.empty() ? std::string("no mask") : "no position ids") +
                             "): the past is padded to a few planned lengths, and only the mask hides the padding");
    if (d.sequence_dim.empty())
      return Status::invalid(model + ": with a KV cache the ids' sequence dimension must be symbolic (prompt, then one token)");
  }
  return d;  // the logits: the first output of rank 3 once shapes are inferred (bind_plan's caller)
}

Expected<BoundPlan> bind_plan(const Graph& g, const GenerateOptions& o, const std::map<std::string, int64_t>& dims) {
  CommonOptions c = o.common;
  for (const std::string& s : o.common.shapes)
    if (dims.count(s.substr(0, s.find('='))))
      return Status::invalid("`shape` " + s + ": generate sets the sequence and past lengths itself");
  for (const auto& [name, v] : dims) c.shapes.push_back(name + "=" + std::to_string(v));
  const int64_t t0 = now_ns();
  MOSAIC_ASSIGN_OR_RETURN(Graph prepared, prepare_model(g, c, nullptr));
  const Placement placement = Placement::all_on(o.backend);
  // The fusions bench runs by default (Gelu, LayerNorm, attention, activations into their
  // producer): the padding check and the PyTorch agreement test run on the fused plans.
  if (o.fuse) fuse_graph(prepared, fuse_options_for(placement, builtin_registry(), false));
  BoundPlan bp;
  PlanOptions po;
  MOSAIC_ASSIGN_OR_RETURN(po.precision, parse_precision(o.precision));
  MOSAIC_ASSIGN_OR_RETURN(bp.plan, Plan::build(prepared, placement, builtin_registry(), po));
  bp.planned.plan_ms = static_cast<double>(now_ns() - t0) / 1e6;
  const Graph& pg = bp.plan->graph();
  bp.inputs.reserve(pg.inputs.size());
  for (const ValueInfo& in : pg.inputs) bp.inputs.push_back(Tensor::empty(pg.value_descs.at(in.name)));
  for (size_t i = 0; i < pg.inputs.size(); ++i) bp.input[pg.inputs[i].name] = &bp.inputs[i];
  for (size_t i = 0; i < pg.outputs.size(); ++i) bp.output[pg.outputs[i].name] = i;
  return bp;
}

Status require(const BoundPlan& bp, const std::vector<std::string>& inputs, const std::vector<std::string>& outputs,
               const std::string& model) {
  for (const std::string& n : inputs)
    if (!n.empty() && !bp.input.count(n))
      return Status::invalid(model + ": input '" + n + "' is not read once the model is prepared; generate feeds it");
  for (const std::string& n : outputs)
    if (!n.empty() && !bp.output.count(n))
      return Status::invalid(model + ": output '" + n + "' is not an output once the model is prepared");
  return Status::ok();
}

void NodeTimes::on_node(const NodeEvent& e) {
  if (e.stage != Stage::kForward || !plan || e.step < 0 || static_cast<size_t>(e.step) >= plan->steps().size()) return;
  const PlanStep& step = plan->steps()[static_cast<size_t>(e.step)];
  const Node& n = plan->graph().nodes[static_cast<size_t>(step.node)];
  const std::string name = n.name.empty() ? n.label() : n.name;
  Times& t = by_node[step.conversion ? "(conversion) " + name : name];
  t.op = step.conversion ? "conversion" : n.op_type;
  (prefill ? t.prefill_ns : t.decode_ns) += static_cast<double>(e.end_ns - e.begin_ns);
}

Status run_plan(BoundPlan& bp, NodeTimes* times) {
  if (times) times->plan = bp.plan.get();
  return bp.plan->run(bp.inputs, nullptr, times);
}

Tensor host_output(const BoundPlan& p, size_t index) {
  const Tensor& t = p.plan->output(index);
  return t.device() ? t.clone() : t;
}

double padding_change(const std::vector<double>& before, const std::vector<double>& after) {
  double diff = 0, scale = 1;
  for (size_t i = 0; i < before.size() && i < after.size(); ++i) {
    const double d = std::fabs(after[i] - before[i]);
    if (!(d <= diff)) diff = d;  // a NaN sticks
    scale = std::max(scale, std::fabs(before[i]));
  }
  return diff / scale;
}

std::vector<int64_t> buckets(int64_t longest) {
  std::vector<int64_t> v;
  for (int64_t l = 16; l < longest; l *= 2) v.push_back(l);
  v.push_back(longest);
  return v;
}

Status adopt_plan(const BoundPlan& bp, DecoderInterface& d, const std::string& model, int64_t length, Stepper& s) {
  const int64_t batch = s.batch = bp.input.at(d.ids)->dim(0);
  if (!d.logits.empty() && d.vocab > 0) return Status::ok();
  const Graph& pg = bp.plan->graph();
  for (size_t i = 0; i < pg.outputs.size() && d.logits.empty(); ++i) {
    const TensorDesc& od = pg.value_descs.at(pg.outputs[i].name);
    if (od.shape.size() == 3 && (od.dtype == DType::kF32 || od.dtype == DType::kF16 || od.dtype == DType::kBF16))
      d.logits = pg.outputs[i].name;
  }
  if (d.logits.empty())
    return Status::invalid(model + ": no output of logits [batch, sequence, vocabulary] (float32, float16 or bfloat16)");
  const Shape& ls = pg.value_descs.at(d.logits).shape;
  if (ls.size() != 3 || ls[0] != batch || ls[1] != length)
    return Status::invalid(model + ": logits '" + d.logits + "' are " + shape_str(ls) + " for " + std::to_string(length) +
                           " positions; generate reads [batch, sequence, vocabulary]");
  s.vocab = d.vocab = ls[2];
  return Status::ok();
}

namespace {

/// Recomputing: each token runs the whole sequence, right-padded to a planned length.
class Recompute : public Stepper {
 public:
  Recompute(const GenerateOptions& o, const Graph& g, DecoderInterface& d, int64_t longest) : o_(o), g_(g), d_(d) {
    lengths_ = d.fixed_length > 0 ? std::vector<int64_t>{d.fixed_length} : buckets(longest);
    longest_ = longest;
  }

  Status prepare(int64_t prompt) override {
    if (d_.fixed_length > 0 && longest_ > d_.fixed_length)
      return Status::invalid(o_.model + " takes " + std::to_string(d_.fixed_length) + " positions ('" + d_.ids +
                             "'); the prompt's " + std::to_string(prompt) + " tokens and " + std::to_string(o_.new_tokens) +
                             " new ones need " + std::to_string(longest_));
    return plan_for(prompt).status();
  }

  Status step(const std::vector<std::vector<int64_t>>& tokens) override {
    len_ = static_cast<int64_t>(tokens[0].size());
    MOSAIC_ASSIGN_OR_RETURN(BoundPlan * bp, plan_for(len_));
    if (!bp->checked && len_ < bp->planned.length) {  // padded: the real positions must not see the padding
      MOSAIC_ASSIGN_OR_RETURN(bp->planned.causal_diff, padding_difference(*bp, tokens));
      if (!(bp->planned.causal_diff <= kPaddingTolerance))
        return Status::invalid(o_.model + ": the logits of the first " + std::to_string(len_) + " positions change by " +
                               std::to_string(bp->planned.causal_diff) + " of their scale with the tokens padded after them (" +
                               std::to_string(bp->planned.length) + " positions planned): the model is not causal, and "
                               "generate needs a causal decoder");
      bp->checked = true;
    }
    fill(*bp, tokens, 0);
    return run(*bp);
  }

  double logit(int64_t b, int64_t v) const override { return at(b, len_ - 1, v); }

  std::vector<PlannedLength> planned() const override {
    std::vector<PlannedLength> v;
    for (const auto& [L, bp] : plans_) v.push_back(bp.planned);
    return v;
  }

 private:
  Expected<BoundPlan*> plan_for(int64_t len) {
    const int64_t L = *std::lower_bound(lengths_.begin(), lengths_.end(), len);
    auto it = plans_.find(L);
    if (it != plans_.end()) return &it->second;
    std::map<std::string, int64_t> dims;
    for (const std::string& input : {d_.ids, d_.mask, d_.positions})
      if (!input.empty())
        if (std::string n = dim_name(g_, input, 1); !n.empty()) dims[n] = L;
    MOSAIC_ASSIGN_OR_RETURN(BoundPlan bp, bind_plan(g_, o_, dims));
    MOSAIC_RETURN_IF_ERROR(require(bp, {d_.ids, d_.mask, d_.positions}, {}, o_.model));
    bp.planned.length = L;
    MOSAIC_RETURN_IF_ERROR(adopt_plan(bp, d_, o_.model, L, *this));
    return &plans_.emplace(L, std::move(bp)).first->second;
  }

  /// Rows of `tokens`, right-padded with `pad`; the mask 1 at real positions, positions 0, 1, ...
  void fill(BoundPlan& bp, const std::vector<std::vector<int64_t>>& tokens, int64_t pad) const {
    const int64_t L = bp.planned.length;
    Tensor* ids = bp.input.at(d_.ids);
    Tensor* mask = d_.mask.empty() ? nullptr : bp.input.at(d_.mask);
    Tensor* pos = d_.positions.empty() ? nullptr : bp.input.at(d_.positions);
    for (size_t b = 0; b < tokens.size(); ++b)
      for (int64_t i = 0; i < L; ++i) {
        const int64_t at = static_cast<int64_t>(b) * L + i;
        store_i64(ids->dtype(), ids->data(), at, i < len_ ? tokens[b][static_cast<size_t>(i)] : pad);
        if (mask) store_i64(mask->dtype(), mask->data(), at, i < len_ ? 1 : 0);
        if (pos) store_i64(pos->dtype(), pos->data(), at, i);
      }
  }

  Status run(BoundPlan& bp) {
    MOSAIC_RETURN_IF_ERROR(run_plan(bp, node_times));
    logits_ = host_output(bp, bp.output.at(d_.logits));
    L_ = bp.planned.length;
    return Status::ok();
  }

  double at(int64_t b, int64_t pos, int64_t v) const {
    const int64_t i = (b * L_ + pos) * vocab + v;
    return logits_.dtype() == DType::kF32 ? logits_.f32()[i] : load_f64(logits_.dtype(), logits_.data(), i);
  }

  /// The real positions' logits with the padding filled with id 0, then with the last id.
  Expected<double> padding_difference(BoundPlan& bp, const std::vector<std::vector<int64_t>>& tokens) {
    fill(bp, tokens, 0);
    MOSAIC_RETURN_IF_ERROR(run(bp));
    std::vector<double> first;
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t p = 0; p < len_; ++p)
        for (int64_t v = 0; v < vocab; ++v) first.push_back(at(b, p, v));
    fill(bp, tokens, vocab - 1);
    MOSAIC_RETURN_IF_ERROR(run(bp));
    std::vector<double> second;
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t p = 0; p < len_; ++p)
        for (int64_t v = 0; v < vocab; ++v) second.push_back(at(b, p, v));
    return padding_change(first, second);
  }

  const GenerateOptions& o_;
  const Graph& g_;
  DecoderInterface& d_;
  std::vector<int64_t> lengths_;
  int64_t longest_ = 0, len_ = 0, L_ = 0;
  std::map<int64_t, BoundPlan> plans_;
  Tensor logits_;
};

}  // namespace

std::unique_ptr<Stepper> recompute_stepper(const GenerateOptions& o, const Graph& g, DecoderInterface& d, int64_t longest) {
  return std::make_unique<Recompute>(o, g, d, longest);
}

}  // namespace mosaic::api::gen
