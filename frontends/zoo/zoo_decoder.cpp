// The zoo's decoders with a KV cache (frontends/zoo/zoo_decoder.hpp), in Hugging Face's cache
// interface as its exporters write it at opset 17:
//
//   inputs   input_ids [batch, sequence] int64, attention_mask [batch, total_sequence] int64
//            (1 at real positions, past and new), position_ids [batch, sequence] int64,
//            past_key_values.L.key/value [batch, kv heads, past_sequence, head size]
//   outputs  logits [batch, sequence, vocab], present.L.key/value [batch, kv heads,
//            total_sequence, head size] (the past with the new positions after it)
//
// Two architectures:
//   - Llama (LlamaForCausalLM): RMSNorm as PyTorch decomposes it, rotary position embeddings
//     computed from position_ids (inv_freq x positions, cos and sin, rotate_half), grouped-query
//     attention (each key/value head read by heads / kv heads query heads, by Expand), SwiGLU
//     (down(silu(gate(x)) * up(x))), no biases, an untied LM head;
//   - GPT-2 (GPT2LMHeadModel): LayerNorm, learned positions gathered by position_ids, GELU,
//     biases, the LM head tied to the token embeddings.
// The mask is built once, as the exporters build it: causal over the concatenated positions
// (new position i sees keys 0 .. total - sequence + i) plus -1e9 where attention_mask is 0.
// Weights N(0, 0.02), biases 0, norm scales 1 (Hugging Face's initialisation).
#include "frontends/zoo/zoo_decoder.hpp"

#include <cmath>

#include "frontends/zoo/zoo_seq_builder.hpp"
#include "ir/splitmix.hpp"

namespace mosaic::zoo_detail {
namespace {

struct DecoderConfig {
  std::string name;
  bool llama = true;  ///< else GPT-2
  int64_t layers = 0, hidden = 0, heads = 0, kv_heads = 0, ff = 0, vocab = 0, positions = 0;
  double rope_theta = 10000.0;
};

constexpr float kMasked = -1e9f;

class DecoderBuilder : public SeqBuilder {
 public:
  DecoderBuilder(const DecoderConfig& c, uint64_t seed)
      : SeqBuilder(c.name, seed), c_(c), d_(c.hidden / c.heads), seed_(splitmix64(seed)) {}

  /// N(0, std_dev) by Box-Muller over a counter hash (splitmix64 of the seed, the tensor's place
  /// in the build and the element's index): every element is a function of those alone, so the
  /// weights are the same on any number of threads, and llama-1b's 1.1 billion take seconds, not
  /// the half minute of one sequential generator.
  std::string normal(const std::string& name, const Shape& shape, double std_dev = 0.02) override {
    Tensor t = Tensor::empty({DType::kF32, shape});
    const uint64_t key = splitmix64(seed_ + 0x632be59bd9b4e019ull * ++tensors_);
    const int64_t n = t.numel(), pairs = (n + 1) / 2;
    float* p = t.f32();
    const float sd = static_cast<float>(std_dev);
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < pairs; ++j) {
      const uint64_t a = splitmix64(key + 2 * static_cast<uint64_t>(j)), b = splitmix64(key + 2 * static_cast<uint64_t>(j) + 1);
      const float u1 = static_cast<float>(static_cast<double>((a >> 40) + 1) / 16777216.0);  // (0, 1]
      const float u2 = static_cast<float>(static_cast<double>(b >> 40) / 16777216.0);        // [0, 1)
      const float r = sd * std::sqrt(-2.f * std::log(u1)), angle = 6.2831853f * u2;
      p[2 * j] = r * std::cos(angle);
      if (2 * j + 1 < n) p[2 * j + 1] = r * std::sin(angle);
    }
    g_.initializers[name] = std::move(t);
    return name;
  }

  Graph build() {
    const std::string ids = symbolic_input("input_ids", {-1, -1}, {"batch", "sequence"}, DType::kI64);
    const std::string mask_in = symbolic_input("attention_mask", {-1, -1}, {"batch", "total_sequence"}, DType::kI64);
    const std::string positions = symbolic_input("position_ids", {-1, -1}, {"batch", "sequence"}, DType::kI64);
    for (int64_t l = 0; l < c_.layers; ++l)
      for (const char* kv : {"key", "value"})
        symbolic_input(past(l, kv), {-1, c_.kv_heads, -1, d_}, {"batch", "", "past_sequence", ""}, DType::kF32);
    const std::string table = normal(c_.llama ? "embed_tokens.weight" : "wte", {c_.vocab, c_.hidden});
    std::string x = op("Gather", "embed_tokens", {table, ids});
    if (!c_.llama) x = op("Add", "wpe.add", {x, op("Gather", "wpe.lookup", {normal("wpe", {c_.positions, c_.hidden}, 0.01), positions})});
    const std::string mask = attention_mask(ids, mask_in);
    if (c_.llama) rotary_tables(positions);
    for (int64_t l = 0; l < c_.layers; ++l) {
      const std::string p = "layers." + std::to_string(l);
      x = op("Add", p + ".residual1", {x, attention(norm(x, p + ".input_norm"), p + ".attn", l, mask)});
      x = op("Add", p + ".residual2", {x, mlp(norm(x, p + ".post_attention_norm"), p + ".mlp")});
    }
    x = norm(x, "norm");
    if (c_.llama) {
      op("MatMul", "lm_head", {x, normal("lm_head.weight", {c_.hidden, c_.vocab})});
    } else {  // tied: the rows of x [B, S, H] by the embedding table, transposed by Gemm (one copy of it)
      const std::string y = op("Gemm", "lm_head.decoder", {reshape(x, "lm_head.flat", {-1, c_.hidden}), table},
                               {{"transB", Attribute::of_int(1)}});
      const std::string rows = op("Slice", "lm_head.rows", {op("Shape", "lm_head.input_shape", {x}), ints("lm_head.rows.starts", {0}),
                                                           ints("lm_head.rows.ends", {2})});
      op("Reshape", "lm_head", {y, op("Concat", "lm_head.shape", {rows, ints("lm_head.vocab", {c_.vocab})},
                                       {{"axis", Attribute::of_int(0)}})});
    }
    g_.nodes.back().outputs[0] = "logits";
    output("logits", {-1, -1, c_.vocab}, {"batch", "sequence", ""});
    for (int64_t l = 0; l < c_.layers; ++l)
      for (const char* kv : {"key", "value"})
        output(present(l, kv), {-1, c_.kv_heads, -1, d_}, {"batch", "", "total_sequence", ""});
    return std::move(g_);
  }

 private:
  static std::string past(int64_t l, const char* kv) { return "past_key_values." + std::to_string(l) + "." + kv; }
  static std::string present(int64_t l, const char* kv) { return "present." + std::to_string(l) + "." + kv; }

  std::string symbolic_input(const std::string& name, Shape dims, std::vector<std::string> params, DType dtype) {
    g_.inputs.push_back(ValueInfo{name, dtype, std::move(dims), std::move(params), true});
    return name;
  }
  void output(const std::string& name, Shape dims, std::vector<std::string> params) {
    g_.outputs.push_back(ValueInfo{name, DType::kF32, std::move(dims), std::move(params), true});
  }
  std::string ints(const std::string& name, std::vector<int64_t> v) {
    g_.initializers[name] = Tensor::from_i64({static_cast<int64_t>(v.size())}, v);
    return name;
  }
  std::string unsqueeze(const std::string& x, const std::string& name, std::vector<int64_t> axes) {
    return op("Unsqueeze", name, {x, ints(name + ".axes", std::move(axes))});
  }
  /// Axis 1 of x's shape, a scalar.
  std::string length(const std::string& x, const std::string& name) {
    g_.initializers[name + ".axis"] = Tensor::from_i64({}, {1});
    return op("Gather", name, {op("Shape", name + ".shape", {x}), name + ".axis"});
  }

  /// [batch, 1, sequence, total]: 0 where new position i may read key j (j <= total - sequence +
  /// i, and attention_mask 1 at j), -1e9 elsewhere.
  std::string attention_mask(const std::string& ids, const std::string& mask_in) {
    const std::string s = length(ids, "mask.sequence"), t = length(mask_in, "mask.total");
    g_.initializers["mask.zero"] = Tensor::from_i64({}, {0});
    g_.initializers["mask.one"] = Tensor::from_i64({}, {1});
    const std::string keys = op("Range", "mask.keys", {"mask.zero", t, "mask.one"});  // [T]
    const std::string first = op("Sub", "mask.first_query", {t, s});
    const std::string queries = unsqueeze(op("Range", "mask.queries", {first, t, "mask.one"}), "mask.queries_column", {1});
    const std::string visible = op("LessOrEqual", "mask.visible", {keys, queries});  // [S, T]
    const std::string causal = op("Where", "mask.causal", {visible, scalar("mask.open", 0.f), scalar("mask.closed", kMasked)});
    const std::string real = op("Cast", "mask.real", {mask_in}, {{"to", Attribute::of_int(1)}});  // float
    const std::string hidden = op("Mul", "mask.padding", {op("Sub", "mask.not_real", {scalar("mask.unit", 1.f), real}),
                                                          scalar("mask.large", kMasked)});
    return op("Add", "mask", {causal, unsqueeze(hidden, "mask.rows", {1, 2})});
  }

  /// cos and sin of position x inv_freq, [batch, 1, sequence, head size] (the halves repeated).
  void rotary_tables(const std::string& positions) {
    Tensor inv = Tensor::empty({DType::kF32, {d_ / 2}});
    for (int64_t i = 0; i < d_ / 2; ++i)
      inv.f32()[i] = static_cast<float>(1.0 / std::pow(c_.rope_theta, static_cast<double>(2 * i) / static_cast<double>(d_)));
    constant("rotary.inv_freq", std::move(inv));
    const std::string p = unsqueeze(op("Cast", "rotary.positions", {positions}, {{"to", Attribute::of_int(1)}}), "rotary.column", {2});
    const std::string f = op("Mul", "rotary.freqs", {p, "rotary.inv_freq"});  // [B, S, d/2]
    const std::string e = op("Concat", "rotary.emb", {f, f}, {{"axis", Attribute::of_int(-1)}});
    cos_ = unsqueeze(op("Cos", "rotary.cos_rows", {e}), "rotary.cos", {1});
    sin_ = unsqueeze(op("Sin", "rotary.sin_rows", {e}), "rotary.sin", {1});
  }
  /// x * cos + rotate_half(x) * sin, rotate_half(x) = concat(-x[d/2:], x[:d/2]).
  std::string rotate(const std::string& x, const std::string& name) {
    const std::string lo = op("Slice", name + ".lo", {x, ints(name + ".lo.starts", {0}), ints(name + ".lo.ends", {d_ / 2}),
                                                      ints(name + ".lo.axes", {-1})});
    const std::string hi = op("Slice", name + ".hi", {x, ints(name + ".hi.starts", {d_ / 2}), ints(name + ".hi.ends", {d_}),
                                                      ints(name + ".hi.axes", {-1})});
    const std::string half = op("Concat", name + ".rotate_half", {op("Neg", name + ".neg", {hi}), lo},
                                {{"axis", Attribute::of_int(-1)}});
    return op("Add", name, {op("Mul", name + ".cos", {x, cos_}), op("Mul", name + ".sin", {half, sin_})});
  }

  std::string norm(const std::string& x, const std::string& name) {
    if (!c_.llama) return layer_norm(x, name, c_.hidden);
    // As PyTorch writes LlamaRMSNorm: x * rsqrt(mean(x^2) + eps) * weight.
    const std::string sq = op("Pow", name + ".pow", {x, scalar(name + ".two", 2.f)});
    const std::string v = op("ReduceMean", name + ".mean", {sq}, {{"axes", Attribute::of_ints({-1})}, {"keepdims", Attribute::of_int(1)}});
    const std::string r = op("Sqrt", name + ".sqrt", {op("Add", name + ".eps", {v, scalar(name + ".epsilon", 1e-5f)})});
    const std::string inv = op("Div", name + ".rsqrt", {scalar(name + ".one", 1.f), r});
    return op("Mul", name, {fill(name + ".weight", {c_.hidden}, 1.f), op("Mul", name + ".normed", {x, inv})});
  }
  /// x [.., in] by W [in, out], and the bias in GPT-2.
  std::string proj(const std::string& x, const std::string& name, int64_t in, int64_t out) {
    if (!c_.llama) return dense(x, name, in, out);
    return op("MatMul", name, {x, normal(name + ".weight", {in, out})});
  }
  /// [B, S, heads * d] -> [B, heads, S, d].
  std::string heads(const std::string& x, const std::string& name, int64_t n) {
    return transpose(reshape(x, name + "_heads", {0, 0, n, d_}), name + "_t", {0, 2, 1, 3});
  }
  /// present.L.key/value, a graph output: the past, then the new positions.
  std::string concat_past(int64_t layer, const char* kv, const std::string& x) {
    Node n = node("Concat", present(layer, kv), {past(layer, kv), x});
    n.attrs["axis"] = Attribute::of_int(2);
    n.outputs = {present(layer, kv)};
    return push(std::move(n));
  }
  /// [B, kv heads, T, d] -> [B, heads, T, d]: each key/value head repeated for its query group.
  std::string repeat_kv(const std::string& x, const std::string& name) {
    const int64_t rep = c_.heads / c_.kv_heads;
    if (rep == 1) return x;
    const std::string e = op("Expand", name + ".expand", {unsqueeze(x, name + ".group", {2}), ints(name + ".repeats", {1, 1, rep, 1, 1})});
    return reshape(e, name, {0, c_.heads, -1, d_});
  }
  std::string attention(const std::string& x, const std::string& name, int64_t layer, const std::string& mask) {
    const int64_t kv = c_.kv_heads * d_;
    std::string q = heads(proj(x, name + ".q_proj", c_.hidden, c_.hidden), name + ".q", c_.heads);
    std::string k = heads(proj(x, name + ".k_proj", c_.hidden, kv), name + ".k", c_.kv_heads);
    const std::string v = heads(proj(x, name + ".v_proj", c_.hidden, kv), name + ".v", c_.kv_heads);
    if (c_.llama) {
      q = rotate(q, name + ".q_rotary");
      k = rotate(k, name + ".k_rotary");
    }
    const std::string keys =
        transpose(repeat_kv(concat_past(layer, "key", k), name + ".k_all"), name + ".keys_t", {0, 1, 3, 2});
    const std::string values = repeat_kv(concat_past(layer, "value", v), name + ".v_all");
    std::string s = op("MatMul", name + ".scores", {q, keys});
    s = op("Mul", name + ".scale", {s, scalar(name + ".inv_sqrt_d", 1.f / std::sqrt(static_cast<float>(d_)))});
    s = op("Add", name + ".mask", {s, mask});
    const std::string probs = op("Softmax", name + ".softmax", {s}, {{"axis", Attribute::of_int(-1)}});
    std::string c = op("MatMul", name + ".context", {probs, values});
    c = reshape(transpose(c, name + ".context_t", {0, 2, 1, 3}), name + ".merge", {0, 0, c_.hidden});
    return proj(c, name + ".o_proj", c_.hidden, c_.hidden);
  }
  std::string mlp(const std::string& x, const std::string& name) {
    if (!c_.llama) return SeqBuilder::mlp(x, name, c_.hidden, c_.ff);
    const std::string gate = proj(x, name + ".gate_proj", c_.hidden, c_.ff);
    const std::string silu = op("Mul", name + ".silu", {gate, op("Sigmoid", name + ".sigmoid", {gate})});
    const std::string up = proj(x, name + ".up_proj", c_.hidden, c_.ff);
    return proj(op("Mul", name + ".gated", {silu, up}), name + ".down_proj", c_.ff, c_.hidden);
  }

  DecoderConfig c_;
  int64_t d_;
  uint64_t seed_, tensors_ = 0;
  std::string cos_, sin_;
};

Graph decoder(const DecoderConfig& c, uint64_t seed) { return DecoderBuilder(c, seed).build(); }

}  // namespace

std::vector<ZooEntry> decoder_zoo() {
  return {
      {"llama-tiny",
       "a Llama-style decoder in a tiny config for tests (2 layers, hidden 64, 4 heads, 2 key/value heads, SwiGLU 176, "
       "512 ids, 256 positions), with Hugging Face's KV cache: ids [N, S] -> [N, S, 512] (158,016 parameters)",
       [](uint64_t s) { return decoder({"llama-tiny", true, 2, 64, 4, 2, 176, 512, 256}, s); }},
      {"llama-1b",
       "TinyLlama-1.1B's shape, random weights (22 layers, hidden 2048, 32 heads, 4 key/value heads, SwiGLU 5632, "
       "32,000 ids, 2048 positions), with Hugging Face's KV cache: ids [N, S] -> [N, S, 32000] (1,100,048,384 parameters)",
       [](uint64_t s) { return decoder({"llama-1b", true, 22, 2048, 32, 4, 5632, 32000, 2048}, s); }},
      {"gpt2-tiny-kv",
       "GPT-2's architecture in a tiny config for tests (2 layers, hidden 64, 2 heads, 256 positions, 512 ids, tied LM "
       "head) with Hugging Face's KV cache: ids [N, S] -> [N, S, 512] (149,248 parameters)",
       [](uint64_t s) { return decoder({"gpt2-tiny-kv", false, 2, 64, 2, 2, 256, 512, 256}, s); }},
      {"gpt2-small-kv",
       "GPT-2 small (12 layers, hidden 768, 12 heads, 1024 positions, tied LM head) with Hugging Face's KV cache: "
       "ids [N, S] -> [N, S, 50257] (124,439,808 parameters)",
       [](uint64_t s) { return decoder({"gpt2-small-kv", false, 12, 768, 12, 12, 3072, 50257, 1024}, s); }},
  };
}

}  // namespace mosaic::zoo_detail
