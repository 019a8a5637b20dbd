// The KV-cache stepper of `mosaic generate` (api/generate_internal.hpp): the prompt runs once,
// then one token at a time against the cache. The cache lives here, [batch, heads, positions,
// head size] per past input; each step copies its real positions into the plan's past input,
// padded to a planned past length with the padding masked out, and takes the new positions
// back from the matching present output.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "api/generate_internal.hpp"
#include "core/events.hpp"
#include "ir/elements.hpp"

namespace mosaic::api::gen {
namespace {

class Cached : public Stepper {
 public:
  Cached(const GenerateOptions& o, const Graph& g, DecoderInterface& d, int64_t longest)
      : o_(o), g_(g), d_(d), pasts_(buckets(longest)), longest_(longest) {
    mask_dim_ = dim_name(g, d.mask, 1);
    positions_dim_ = dim_name(g, d.positions, 1);
  }

  Status prepare(int64_t prompt) override {
    if (mask_dim_.empty() || mask_dim_ == d_.sequence_dim || mask_dim_ == d_.past_dim)
      return Status::invalid(o_.model + ": the attention mask '" + d_.mask +
                             "' must span past and new positions under a name of its own (its axis 1 is '" + mask_dim_ + "')");
    MOSAIC_ASSIGN_OR_RETURN(BoundPlan * first, plan_for(prompt, pasts_.front()));
    for (const auto& [past, present] : d_.cache) {
      const Tensor* t = first->input.at(past);
      cache_.push_back(Tensor::empty({t->dtype(), {t->dim(0), t->dim(1), longest_, t->dim(3)}}));
    }
    return Status::ok();
  }

  void begin() override {
    count_ = 0;
    copy_ns = 0;
    ++generation_;
  }

  Status step(const std::vector<std::vector<int64_t>>& tokens) override {
    const int64_t total = static_cast<int64_t>(tokens[0].size());
    const int64_t S = total - count_;  // the prompt, then one token
    const int64_t P = count_ == 0 ? pasts_.front() : *std::lower_bound(pasts_.begin(), pasts_.end(), count_);
    MOSAIC_ASSIGN_OR_RETURN(BoundPlan * bp, plan_for(S, P));
    if (!bp->checked && count_ < P) {  // padded: the mask must hide what the padding holds
      MOSAIC_ASSIGN_OR_RETURN(bp->planned.causal_diff, padding_difference(*bp, tokens, S, P));
      if (!(bp->planned.causal_diff <= kPaddingTolerance))
        return Status::invalid(o_.model + ": with " + std::to_string(count_) + " cached positions padded to " +
                               std::to_string(P) + ", the logits change by " + std::to_string(bp->planned.causal_diff) +
                               " of their scale with what the masked padding holds: the model does not obey its "
                               "attention mask '" + d_.mask + "' over the past");
      bp->checked = true;
    }
    fill(*bp, tokens, S, P, 0.0);
    MOSAIC_RETURN_IF_ERROR(run_plan(*bp, node_times));
    logits_ = host_output(*bp, bp->output.at(d_.logits));
    S_ = S;
    // The new positions' keys and values join the cache.
    const int64_t t0 = now_ns();
    for (size_t c = 0; c < d_.cache.size(); ++c) {
      const Tensor present = host_output(*bp, bp->output.at(d_.cache[c].second));
      const Tensor& store = cache_[c];
      const Shape want{store.dim(0), store.dim(1), P + S, store.dim(3)};
      if (present.shape() != want || present.dtype() != store.dtype())
        return Status::invalid(o_.model + ": '" + d_.cache[c].second + "' is " + present.desc().str() + " after " +
                               std::to_string(P) + " past and " + std::to_string(S) + " new positions; expected " +
                               shape_str(want) + " of the cache's type");
      copy_rows(present, P, store, count_, S);
    }
    copy_ns += now_ns() - t0;
    count_ += S;
    return Status::ok();
  }

  double logit(int64_t b, int64_t v) const override {
    const int64_t i = (b * S_ + S_ - 1) * vocab + v;
    return logits_.dtype() == DType::kF32 ? logits_.f32()[i] : load_f64(logits_.dtype(), logits_.data(), i);
  }

  std::vector<PlannedLength> planned() const override {
    std::vector<PlannedLength> v;
    for (const auto& [key, bp] : plans_) v.push_back(bp.planned);
    return v;
  }

 private:
  Expected<BoundPlan*> plan_for(int64_t S, int64_t P) {
    auto it = plans_.find({S, P});
    if (it != plans_.end()) return &it->second;
    std::map<std::string, int64_t> dims = {{d_.sequence_dim, S}, {d_.past_dim, P}, {mask_dim_, P + S}};
    if (!positions_dim_.empty() && positions_dim_ != d_.sequence_dim) dims[positions_dim_] = S;
    MOSAIC_ASSIGN_OR_RETURN(BoundPlan bp, bind_plan(g_, o_, dims));
    std::vector<std::string> inputs = {d_.ids, d_.mask, d_.positions}, outputs;
    for (const auto& [past, present] : d_.cache) inputs.push_back(past), outputs.push_back(present);
    MOSAIC_RETURN_IF_ERROR(require(bp, inputs, outputs, o_.model));
    bp.planned.length = S;
    bp.planned.past = P;
    MOSAIC_RETURN_IF_ERROR(adopt_plan(bp, d_, o_.model, S, *this));
    return &plans_.emplace(std::make_pair(S, P), std::move(bp)).first->second;
  }

  /// Copies positions [from, from + n) of every [batch, heads] row of `src` to [to, to + n) of `dst`.
  static void copy_rows(const Tensor& src, int64_t from, const Tensor& dst, int64_t to, int64_t n) {
    if (n <= 0) return;
    const int64_t rows = src.dim(0) * src.dim(1), row_bytes = src.dim(3) * static_cast<int64_t>(dtype_size(src.dtype()));
    const auto* s = static_cast<const uint8_t*>(src.data());
    auto* d = static_cast<uint8_t*>(dst.data());
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(d + (r * dst.dim(2) + to) * row_bytes, s + (r * src.dim(2) + from) * row_bytes,
                  static_cast<size_t>(n * row_bytes));
  }

  /// The step's inputs: the new tokens, the mask (1 at the cached and new positions, 0 at the
  /// padding), their positions, and the cache padded to P with `pad` in the padding.
  void fill(BoundPlan& bp, const std::vector<std::vector<int64_t>>& tokens, int64_t S, int64_t P, double pad) {
    Tensor* ids = bp.input.at(d_.ids);
    Tensor* mask = bp.input.at(d_.mask);
    Tensor* pos = bp.input.at(d_.positions);
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t i = 0; i < S; ++i) {
        store_i64(ids->dtype(), ids->data(), b * S + i, tokens[static_cast<size_t>(b)][static_cast<size_t>(count_ + i)]);
        store_i64(pos->dtype(), pos->data(), b * S + i, count_ + i);
      }
      for (int64_t j = 0; j < P + S; ++j) store_i64(mask->dtype(), mask->data(), b * (P + S) + j, j < count_ || j >= P ? 1 : 0);
    }
    // The past inputs keep what earlier steps of this generation copied in: only the
    // positions cached since are copied. The padding stays zero (all-bits-zero is 0 in every
    // float type); the padding check's other value is written and then cleared.
    const int64_t t0 = now_ns();
    if (bp.generation != generation_) {
      // An earlier generation's positions: those the copy below overwrites stay, the rest
      // are cleared (zeroing all of them doubled the bytes a bucket switch moves).
      if (bp.real > count_)
        for (const auto& [past, present] : d_.cache) zero_rows(*bp.input.at(past), count_, bp.real - count_);
      bp.generation = generation_;
      bp.real = 0;
    }
    for (size_t c = 0; c < d_.cache.size(); ++c) {
      Tensor* past = bp.input.at(d_.cache[c].first);
      copy_rows(cache_[c], bp.real, *past, bp.real, count_ - bp.real);
      if (pad != 0) {
        const int64_t rows = past->dim(0) * past->dim(1), per = past->dim(3);
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t k = (r * P + count_) * per; k < (r + 1) * P * per; ++k) store_f64(past->dtype(), past->data(), k, pad);
      } else if (bp.padded) {
        zero_rows(*past, count_, P - count_);
      }
    }
    bp.real = count_;
    bp.padded = pad != 0;
    copy_ns += now_ns() - t0;
  }

  /// Zeroes positions [from, from + n) of every [batch, heads] row of `t`.
  static void zero_rows(const Tensor& t, int64_t from, int64_t n) {
    if (n <= 0) return;
    const int64_t rows = t.dim(0) * t.dim(1), row_bytes = t.dim(3) * static_cast<int64_t>(dtype_size(t.dtype()));
    auto* d = static_cast<uint8_t*>(t.data());
    for (int64_t r = 0; r < rows; ++r) std::memset(d + (r * t.dim(2) + from) * row_bytes, 0, static_cast<size_t>(n * row_bytes));
  }

  /// The logits with the padding's keys and values 0, then 100: the mask must hide both.
  Expected<double> padding_difference(BoundPlan& bp, const std::vector<std::vector<int64_t>>& tokens, int64_t S, int64_t P) {
    std::vector<double> logits[2];
    for (int k = 0; k < 2; ++k) {
      fill(bp, tokens, S, P, k == 0 ? 0.0 : 100.0);
      MOSAIC_RETURN_IF_ERROR(bp.plan->run(bp.inputs, nullptr));
      const Tensor t = host_output(bp, bp.output.at(d_.logits));
      for (int64_t i = 0; i < t.numel(); ++i) logits[k].push_back(t.get(i));
    }
    return padding_change(logits[0], logits[1]);
  }

  const GenerateOptions& o_;
  const Graph& g_;
  DecoderInterface& d_;
  std::vector<int64_t> pasts_;
  int64_t longest_ = 0, count_ = 0, S_ = 1, generation_ = 0;
  std::string mask_dim_, positions_dim_;
  std::map<std::pair<int64_t, int64_t>, BoundPlan> plans_;
  std::vector<Tensor> cache_;
  Tensor logits_;
};

}  // namespace

std::unique_ptr<Stepper> cached_stepper(const GenerateOptions& o, const Graph& g, DecoderInterface& d, int64_t longest) {
  return std::make_unique<Cached>(o, g, d, longest);
}

}  // namespace mosaic::api::gen
