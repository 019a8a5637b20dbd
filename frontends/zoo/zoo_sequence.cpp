// The zoo's sequence models (frontends/zoo/zoo.hpp): BERT (base and tiny, masked-LM head tied to
// the word embeddings), GPT-2 small (pre-norm, causal, tied LM head), ViT-Tiny/16 and an
// LSTM classifier, written as PyTorch's exporter writes them at opset 17 (LayerNormalization
// nodes; GELU as its erf decomposition, which the fusion pass recognises), with BERT's
// initialisation: weights N(0, 0.02), biases 0, LayerNorm scale 1.
#include "frontends/zoo/zoo_sequence.hpp"

#include "frontends/zoo/zoo_seq_builder.hpp"

namespace mosaic::zoo_detail {
namespace {

Graph bert(const std::string& name, int64_t layers, int64_t h, int64_t heads, int64_t ff, uint64_t seed) {
  const int64_t vocab = 30522, seq = 128;
  SeqBuilder b(name, seed);
  const std::string ids = b.ids("input_ids", seq);
  const std::string table = b.normal("embeddings.word", {vocab, h});
  std::string x = b.op("Gather", "embeddings.lookup", {table, ids});
  x = b.op("Add", "embeddings.positions", {x, b.normal("embeddings.position", {seq, h})});
  x = b.layer_norm(x, "embeddings.norm", h);
  for (int64_t l = 0; l < layers; ++l) {  // post-norm blocks
    const std::string p = "layer" + std::to_string(l);
    x = b.layer_norm(b.op("Add", p + ".residual1", {x, b.attention(x, p + ".attention", h, heads)}), p + ".norm1", h);
    x = b.layer_norm(b.op("Add", p + ".residual2", {x, b.mlp(x, p + ".mlp", h, ff)}), p + ".norm2", h);
  }
  x = b.layer_norm(b.gelu(b.dense(x, "mlm.transform", h, h), "mlm.gelu"), "mlm.norm", h);
  b.tied_head(x, "mlm.logits", table, seq, h, vocab);
  return b.finish("logits", {seq, vocab});
}

Graph gpt2(const std::string& name, int64_t layers, int64_t h, int64_t heads, int64_t seq, int64_t vocab, uint64_t seed) {
  SeqBuilder b(name, seed);
  const std::string ids = b.ids("input_ids", seq);
  const std::string table = b.normal("wte", {vocab, h});
  std::string x = b.op("Gather", "wte.lookup", {table, ids});
  x = b.op("Add", "wpe.add", {x, b.normal("wpe", {seq, h}, 0.01)});
  Tensor causal = Tensor::empty({DType::kF32, {seq, seq}});
  for (int64_t i = 0; i < seq; ++i)
    for (int64_t j = 0; j < seq; ++j) causal.f32()[i * seq + j] = j > i ? -1e4f : 0.f;
  b.constant("causal_mask", causal);
  for (int64_t l = 0; l < layers; ++l) {  // pre-norm blocks
    const std::string p = "h" + std::to_string(l);
    x = b.op("Add", p + ".residual1",
             {x, b.attention(b.layer_norm(x, p + ".ln_1", h), p + ".attn", h, heads, "causal_mask")});
    x = b.op("Add", p + ".residual2", {x, b.mlp(b.layer_norm(x, p + ".ln_2", h), p + ".mlp", h, 4 * h)});
  }
  b.tied_head(b.layer_norm(x, "ln_f", h), "lm_head", table, seq, h, vocab);
  return b.finish("logits", {seq, vocab});
}

Graph vit_tiny(uint64_t seed) {
  const int64_t h = 192, heads = 3, layers = 12, patches = 196, classes = 1000;
  SeqBuilder b("vit-tiny", seed);
  std::string x = b.input("input", {-1, 3, 224, 224});
  x = b.conv(x, "patch_embed", 3, h, 16, 16, 0);  // [B, 192, 14, 14]
  x = b.transpose(b.reshape(x, "patch_embed.flat", {0, h, patches}), "patch_embed.tokens", {0, 2, 1});
  // The class token broadcast to the batch: Expand to Shape(x)'s batch, as PyTorch exports
  // cls_token.expand(B, -1, -1) (the shape folds at load; the token stays one parameter).
  const std::string shape = b.op("Shape", "cls.batch_shape", {x});
  auto& init = b.graph().initializers;
  init["cls.zero"] = Tensor::from_i64({1}, {0});
  const std::string batch = b.op("Gather", "cls.batch", {shape, "cls.zero"});
  init["cls.rest"] = Tensor::from_i64({2}, {1, h});
  const std::string target = b.op("Concat", "cls.shape", {batch, "cls.rest"}, {{"axis", Attribute::of_int(0)}});
  const std::string cls = b.op("Expand", "cls.expand", {b.normal("cls_token", {1, 1, h}), target});
  x = b.op("Concat", "tokens", {cls, x}, {{"axis", Attribute::of_int(1)}});
  x = b.op("Add", "pos_embed.add", {x, b.normal("pos_embed", {1, patches + 1, h})});
  for (int64_t l = 0; l < layers; ++l) {
    const std::string p = "blocks" + std::to_string(l);
    x = b.op("Add", p + ".residual1", {x, b.attention(b.layer_norm(x, p + ".norm1", h), p + ".attn", h, heads)});
    x = b.op("Add", p + ".residual2", {x, b.mlp(b.layer_norm(x, p + ".norm2", h), p + ".mlp", h, 4 * h)});
  }
  x = b.layer_norm(x, "norm", h);
  init["cls.index"] = Tensor::from_i64({}, {0});
  x = b.op("Gather", "cls.take", {x, "cls.index"}, {{"axis", Attribute::of_int(1)}});  // [B, 192]
  b.linear(x, "head", h, classes);
  return b.finish("logits", {classes});
}

Graph lstm_classifier(uint64_t seed) {
  const int64_t vocab = 10000, seq = 64, e = 128, h = 256, classes = 4;
  SeqBuilder b("lstm-classifier", seed);
  const std::string ids = b.ids("input_ids", seq);
  std::string x = b.op("Gather", "embedding", {b.normal("embedding.weight", {vocab, e}, 1.0), ids});
  // One bidirectional LSTM, batch first (layout 1): Y_h [B, 2, H] -> [B, 2H] -> classes.
  const double bound = 1.0 / std::sqrt(static_cast<double>(h));
  b.uniform("lstm.W", {2, 4 * h, e}, bound);
  b.uniform("lstm.R", {2, 4 * h, h}, bound);
  b.uniform("lstm.B", {2, 8 * h}, bound);
  Node n;
  n.op_type = "LSTM";
  n.name = "lstm";
  n.inputs = {x, "lstm.W", "lstm.R", "lstm.B"};
  n.outputs = {"", "lstm.Y_h"};
  n.attrs["hidden_size"] = Attribute::of_int(h);
  n.attrs["direction"] = Attribute::of_string("bidirectional");
  n.attrs["layout"] = Attribute::of_int(1);
  b.graph().nodes.push_back(n);
  x = b.reshape("lstm.Y_h", "lstm.final", {0, 2 * h});
  b.linear(x, "classifier", 2 * h, classes);
  return b.finish("logits", {classes});
}

}  // namespace

std::vector<ZooEntry> sequence_zoo() {
  return {
      {"bert-base", "BERT-Base (12 layers, hidden 768, 12 heads, 128 positions), masked-LM head tied to the word embeddings: int64 ids [N, 128] -> [N, 128, 30522] (109,217,850 parameters)",
       [](uint64_t s) { return bert("bert-base", 12, 768, 12, 3072, s); }},
      {"bert-tiny", "BERT-Tiny (2 layers, hidden 128, 2 heads), masked-LM head: ids [N, 128] -> [N, 128, 30522] (4,367,290 parameters)",
       [](uint64_t s) { return bert("bert-tiny", 2, 128, 2, 512, s); }},
      {"gpt2-small", "GPT-2 small (12 layers, hidden 768, 12 heads, 128 of its 1024 positions), causal, tied LM head: ids [N, 128] -> [N, 128, 50257] (123,801,937 parameters)",
       [](uint64_t s) { return gpt2("gpt2-small", 12, 768, 12, 128, 50257, s); }},
      {"gpt2-tiny", "GPT-2's architecture in a tiny config (2 layers, hidden 64, 2 heads, 64 positions, 512 ids) for generation tests: ids [N, 64] -> [N, 64, 512] (137,472 parameters)",
       [](uint64_t s) { return gpt2("gpt2-tiny", 2, 64, 2, 64, 512, s); }},
      {"vit-tiny", "ViT-Tiny/16 (12 layers, hidden 192, 3 heads), 3x224x224 -> 1000 (5,717,416 parameters)", vit_tiny},
      {"lstm-classifier", "bidirectional LSTM (hidden 256) on 128-d embeddings of 10,000 ids: ids [N, 64] -> 4 classes (2,072,580 parameters)",
       lstm_classifier},
  };
}

}  // namespace mosaic::zoo_detail
