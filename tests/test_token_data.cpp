// Token data for sequence models (frontends/data/text.hpp), the per-step warm-up schedule,
// and training a token model end to end: next-token labels are the inputs shifted by one,
// masked-LM scores only the chosen positions, bad files are refused by name.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "api/gradcheck.hpp"
#include "api/models.hpp"
#include "api/train.hpp"
#include "core/loss.hpp"
#include "core/schedule.hpp"
#include "frontends/data/text.hpp"
#include "frontends/onnx/onnx_io.hpp"
#include "test_util.hpp"

namespace mosaic::test {
namespace {

namespace fs = std::filesystem;

class Text : public ScratchDirTest {
 public:
  Text() : ScratchDirTest("mosaic_text_") {}
  std::string write(const std::string& name, const std::string& content) {
    const std::string p = path(name);
    std::ofstream(p, std::ios::binary) << content;
    return p;
  }
};

TEST_F(Text, BytesAndCharactersBecomeIds) {
  const std::string f = write("a.txt", "h\xc3\xa9llo h\xc3\xa9");  // "héllo hé": é is two bytes
  auto bytes = load_text_tokens(f, false);
  ASSERT_TRUE(bytes.ok()) << bytes.status().message();
  EXPECT_EQ(bytes->vocab, 256);
  EXPECT_EQ(bytes->ids, (std::vector<int64_t>{'h', 0xc3, 0xa9, 'l', 'l', 'o', ' ', 'h', 0xc3, 0xa9}));
  auto chars = load_text_tokens(f, true);
  ASSERT_TRUE(chars.ok()) << chars.status().message();
  EXPECT_EQ(chars->vocab, 5);  // h é l o ' ', numbered in order of first appearance
  EXPECT_EQ(chars->ids, (std::vector<int64_t>{0, 1, 2, 2, 3, 4, 0, 1}));
}

TEST_F(Text, BadFilesAreRefusedByName) {
  auto empty = load_text_tokens(write("empty.txt", ""), false);
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("empty.txt: empty file"), std::string::npos) << empty.status().message();
  auto latin1 = load_text_tokens(write("latin1.txt", "caf\xe9 ok"), true);  // ISO-8859-1 é
  ASSERT_FALSE(latin1.ok());
  EXPECT_NE(latin1.status().message().find("latin1.txt: not UTF-8 at byte 3"), std::string::npos)
      << latin1.status().message();
  EXPECT_TRUE(load_text_tokens(path("latin1.txt"), false).ok()) << "bytes are always tokens";
  auto dir = load_text_tokens(dir_.string(), false);
  ASSERT_FALSE(dir.ok());
  EXPECT_NE(dir.status().message().find("not a regular file"), std::string::npos) << dir.status().message();
  auto missing = load_text_tokens(path("missing.txt"), false);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("missing.txt: no such file"), std::string::npos);
}

TEST_F(Text, NextTokenLabelsAreTheInputsShiftedByOne) {
  TokenStream s;
  s.name = "stream";
  s.vocab = 10;
  for (int i = 0; i < 41; ++i) s.ids.push_back(i % 10);
  TokenTask task{4, 10, Objective::kNextToken};
  auto d = token_splits(s, task, 1);
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ(d->train.images.shape(), (Shape{9, 4}));  // (41 - 1) / 4 = 10 sequences, 1 held out
  EXPECT_EQ(d->test.images.shape(), (Shape{1, 4}));
  for (int64_t n = 0; n < 9; ++n)
    for (int64_t t = 0; t < 4; ++t) {
      EXPECT_EQ(d->train.images.i64()[n * 4 + t], (n * 4 + t) % 10);
      EXPECT_EQ(d->train.labels.i64()[n * 4 + t], (n * 4 + t + 1) % 10);
    }
  task.model_vocab = 9;
  auto small = token_splits(s, task, 1);
  ASSERT_FALSE(small.ok());
  EXPECT_NE(small.status().message().find("vocabulary of 10 tokens but the model's embedding has 9 rows"),
            std::string::npos)
      << small.status().message();
  task = {40, 10, Objective::kNextToken};
  EXPECT_FALSE(token_splits(s, task, 1).ok()) << "one sequence cannot be split";
}

TEST_F(Text, MaskedLmScoresOnlyTheChosenPositions) {
  TokenStream s;
  s.name = "stream";
  s.vocab = 50;
  std::mt19937_64 rng(3);
  for (int i = 0; i < 20000; ++i) s.ids.push_back(static_cast<int64_t>(rng() % 50));
  TokenTask task{100, 51, Objective::kMaskedLm};
  auto d = token_splits(s, task, 7);
  ASSERT_TRUE(d.ok()) << d.status().message();
  int64_t scored = 0, masked = 0, kept = 0, total = d->train.labels.numel();
  for (int64_t i = 0; i < total; ++i) {
    const int64_t y = d->train.labels.i64()[i], x = d->train.images.i64()[i];
    if (y == kIgnoreIndex) {
      EXPECT_NE(x, 50) << "an unscored position is never [MASK]";
      continue;
    }
    ++scored;
    masked += x == 50;
    kept += x == y;
  }
  EXPECT_NEAR(static_cast<double>(scored) / total, 0.15, 0.01);
  EXPECT_NEAR(static_cast<double>(masked) / scored, 0.8, 0.03);
  EXPECT_GT(kept, 0);
  task.model_vocab = 50;  // no room for [MASK]
  EXPECT_FALSE(token_splits(s, task, 7).ok());
}

TEST_F(Text, SyntheticTokensMustMatchTheModelsSequence) {
  TokenTask task{8, 30, Objective::kNextToken};
  auto d = load_token_data("synthetic-tokens:20,8,30", task, 1);
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ(d->train.images.dim(0) + d->test.images.dim(0), 20);
  task.seq = 16;
  auto bad = load_token_data("synthetic-tokens:20,8,30", task, 1);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("sequences of 8 tokens, but the model's input takes 16"), std::string::npos);
  EXPECT_FALSE(load_token_data("synthetic-tokens:20,8", task, 1).ok());
  EXPECT_TRUE(is_token_spec("text:/x") && is_token_spec("text-chars:/x") && !is_token_spec("synthetic:1,1,1,1,1"));
}

TEST(Schedule, WarmupLinearRisesThenFallsToZero) {
  auto s = make_schedule("warmup-linear:4", 1);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(s.value()->per_step());
  const double want[] = {0, 0.25, 0.5, 0.75, 1, 5.0 / 6, 4.0 / 6, 3.0 / 6, 2.0 / 6, 1.0 / 6};
  for (int step = 0; step < 10; ++step) EXPECT_NEAR(s.value()->lr_at_step(1.0, step, 10), want[step], 1e-12) << step;
  EXPECT_FALSE(make_schedule("warmup-linear:", 1).ok());
  EXPECT_FALSE(make_schedule("warmup-linear:-1", 1).ok());
}

/// ids [B, 6] -> embedding [V, 8] -> MatMul [8, V] + bias -> logits [B, 6, V]: a bigram
/// model, which learns a text whose next character follows from the current one exactly.
Graph bigram_model(int64_t vocab) {
  Graph g;
  g.source = "bigram";
  g.opset = 13;
  g.inputs.push_back(ValueInfo{"ids", DType::kI64, {-1, 6}, {"N", ""}, true});
  g.outputs.push_back(ValueInfo{"logits", DType::kF32, {}, {}, false});
  g.initializers["emb"] = random_tensor({vocab, 8}, 1, -0.5f, 0.5f);
  g.initializers["w"] = random_tensor({8, vocab}, 2, -0.5f, 0.5f);
  g.initializers["b"] = Tensor::from_f32({vocab}, std::vector<float>(static_cast<size_t>(vocab), 0.f));
  add_node(g, make_node("Gather"), {"emb", "ids"}, {"e"}, "embed");
  add_node(g, make_node("MatMul"), {"e", "w"}, {"z"}, "head");
  add_node(g, make_node("Add"), {"z", "b"}, {"logits"}, "bias");
  return g;
}

TEST_F(Text, GradcheckJudgesPerPositionLogitsAndSkipsTheIds) {
  // Cross-entropy per position over [N, T, V], random ids within the embedding: both
  // parameters PASS, and the int64 input gets no gradient check (it has no gradient).
  const std::string model = path("bigram.onnx");
  ASSERT_TRUE(save_onnx(bigram_model(7), model).is_ok());
  for (const std::string backend : {"naive", "im2col", "onednn"}) {
    api::GradcheckRunOptions o;
    o.model = model;
    o.batch = 2;
    o.backend = backend;
    auto r = api::gradcheck(o);
    ASSERT_TRUE(r.ok()) << backend << ": " << r.status().message();
    EXPECT_EQ(r->failed, 0) << backend;
    EXPECT_EQ(r->passed, 3) << backend << ": emb, w and b";
  }
}

/// ids [N, seq] (both symbolic) -> token embedding + the positions' rows of a 4-row table
/// (Shape/Gather/Range, as PyTorch exports torch.arange(ids.size(1))) -> logits [N, seq, 7].
Graph positional_model() {
  Graph g;
  g.source = "positions";
  g.opset = 13;
  g.inputs.push_back(ValueInfo{"ids", DType::kI64, {-1, -1}, {"N", "seq"}, true});
  g.outputs.push_back(ValueInfo{"logits", DType::kF32, {}, {}, false});
  g.initializers["emb"] = random_tensor({7, 8}, 1);
  g.initializers["pos_table"] = random_tensor({4, 8}, 2);
  g.initializers["w"] = random_tensor({8, 7}, 3);
  g.initializers["one"] = Tensor::scalar_i64(1);
  g.initializers["zero"] = Tensor::scalar_i64(0);
  add_node(g, make_node("Shape"), {"ids"}, {"shape"}, "shape");
  add_node(g, make_node("Gather"), {"shape", "one"}, {"len"}, "len");
  add_node(g, make_node("Range"), {"zero", "len", "one"}, {"positions"}, "range");
  add_node(g, make_node("Gather"), {"pos_table", "positions"}, {"pe"}, "pos");
  add_node(g, make_node("Gather"), {"emb", "ids"}, {"e"}, "tok");
  add_node(g, make_node("Add"), {"e", "pe"}, {"h"}, "add");
  add_node(g, make_node("MatMul"), {"h", "w"}, {"logits"}, "head");
  return g;
}

TEST_F(Text, SequenceLengthIsBoundByShapeAndCheckedAgainstThePositionTable) {
  const std::string model = path("positions.onnx");
  ASSERT_TRUE(save_onnx(positional_model(), model).is_ok());
  CmdResult r = mosaic("info " + model + " --batch 2 --shape seq=3");
  EXPECT_EQ(r.code, 0) << r.out;
  r = mosaic("info " + model + " --batch 2");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("dimension 1 is symbolic ('seq'); bind it with --shape seq=N"), std::string::npos) << r.out;
  // A sequence longer than the position table: refused at load, naming the node and input.
  r = mosaic("info " + model + " --batch 2 --shape seq=5");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("node 'pos' (Gather)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("index 4 (element 4) is outside the gathered axis of size 4"), std::string::npos) << r.out;
  // Bench on token data: sequences/s and tokens/s, ids drawn within the vocabulary.
  r = mosaic("bench " + model + " --batch 2 --shape seq=4 --backends im2col --iterations 2 --warmup 1 --no-db");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("sequences/s ("), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ids uniform in [0, 7)"), std::string::npos) << r.out;
}

TEST_F(Text, IdsOutsideTheVocabularyAreRefusedByEveryGatherKernelNaiveIm2colAndTorch) {
  OpCase c;
  c.node = make_node("Gather");
  c.inputs = {random_tensor({7, 3}, 1), Tensor::from_i64({2, 2}, {1, 6, 7, 0})};
  c.is_const = {true, false};
  // The name says torch, so ctest's process for it loads the torch backend (test_torch.cpp).
  int checked = 0;
  for (const std::string& backend : builtin_registry().available_backends()) {
    std::vector<Tensor> out;
    const Status st = run_on(c, backend, &out);
    if (st.code() == StatusCode::kUnsupported) continue;  // no Gather kernel there (onednn)
    ++checked;
    ASSERT_FALSE(st.is_ok()) << backend;
    EXPECT_NE(st.message().find("input 'x1': index 7 (element 2) is outside the gathered axis of size 7"),
              std::string::npos)
        << backend << ": " << st.message();
  }
  EXPECT_GE(checked, builtin_registry().has_backend("torch") ? 3 : 2);
}

TEST_F(Text, ABigramModelLearnsACyclicTextOnEveryBackend) {
  std::string text;
  for (int i = 0; i < 400; ++i) text += "abcde";
  const std::string file = write("cycle.txt", text);
  const std::string model = path("bigram.onnx");
  ASSERT_TRUE(save_onnx(bigram_model(5), model).is_ok());
  for (const std::string backend : {"naive", "im2col", "onednn"}) {
    api::TrainOptions o;
    o.model = model;
    o.data = "text-chars:" + file;
    o.backend = backend;
    o.optimizer = "adamw";
    o.opt.lr = 0.05;
    o.lr_schedule = "warmup-linear:5";
    o.batch = 8;
    o.epochs = 2;
    o.eval_batch = 16;
    auto r = api::train(o);
    ASSERT_TRUE(r.ok()) << backend << ": " << r.status().message();
    const auto& epochs = r->log["epochs"];
    ASSERT_EQ(epochs.size(), 2u);
    // Chance is ln 5 = 1.61; the next character is certain, so the loss heads to 0.
    EXPECT_LT(epochs[1]["train_loss"].get<double>(), 0.3) << backend;
    EXPECT_EQ(epochs[1]["test_accuracy"].get<double>(), 1.0) << backend;
    EXPECT_LT(epochs[1]["test_loss"].get<double>(), 0.3) << backend;
    EXPECT_GT(epochs[1]["tokens_per_s"].get<double>(), 0) << backend;
    EXPECT_EQ(r->log["objective"], "next-token");
    // The warm-up: 0, 0.01, ... 0.05 over five steps, then down to 0 at the last step.
    const auto& steps = r->log["steps"];
    EXPECT_DOUBLE_EQ(steps[0]["lr"].get<double>(), 0.0);
    EXPECT_NEAR(steps[1]["lr"].get<double>(), 0.01, 1e-12);
    EXPECT_NEAR(steps[5]["lr"].get<double>(), 0.05, 1e-12);
    const double n = static_cast<double>(steps.size());
    EXPECT_NEAR(steps.back()["lr"].get<double>(), 0.05 / (n - 5), 1e-12) << backend;
  }
  {  // masked-LM: [MASK] is id 5, so the model needs 6 rows; only the chosen positions count
    const std::string mlm = path("bigram6.onnx");
    ASSERT_TRUE(save_onnx(bigram_model(6), mlm).is_ok());
    api::TrainOptions o;
    o.model = mlm;
    o.data = "text-chars:" + file;
    o.objective = "masked-lm";
    o.optimizer = "adamw";
    o.opt.lr = 0.05;
    o.batch = 8;
    o.epochs = 2;
    auto r = api::train(o);
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(r->log["objective"], "masked-lm");
    // A bigram model sees the [MASK] in place of the word it must predict: it can learn the
    // unmasked tenth exactly and otherwise only the letters' frequencies (ln 5 = 1.61).
    const double test_loss = r->log["epochs"][1]["test_loss"].get<double>();
    EXPECT_LT(test_loss, 1.61) << test_loss;
    EXPECT_GT(test_loss, 1.0) << test_loss;
  }
  api::TrainOptions o;  // the model's vocabulary is smaller than the text's
  o.model = model;
  o.data = "text:" + file;
  auto r = api::train(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("vocabulary of 256 tokens but the model's embedding has 5 rows"),
            std::string::npos)
      << r.status().message();
}

TEST_F(Text, ClassifiedSequencesHaveOneLabelEachAndTheirClassIdAtHalfThePositions) {
  TokenTask task{40, 100, Objective::kNextToken};
  auto d = load_token_data("synthetic-classes:200,40,100,4", task, 3);
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ(d->train.images.shape(), (Shape{180, 40}));
  EXPECT_EQ(d->train.labels.shape(), Shape{180});
  EXPECT_EQ(d->test.labels.shape(), Shape{20});
  EXPECT_EQ(d->train.classes, 4);
  std::vector<int> per_class(4, 0);
  for (int64_t i = 0; i < 180; ++i) {
    const int64_t k = d->train.labels.i64()[i];
    ASSERT_TRUE(k >= 0 && k < 4) << k;
    ++per_class[k];
    int own = 0;
    for (int64_t t = 0; t < 40; ++t) {
      const int64_t id = d->train.images.i64()[i * 40 + t];
      ASSERT_TRUE(id >= 0 && id < 100) << id;
      own += id == k;
    }
    // Half the positions and a hundredth of the rest: 20.2 expected, binomial sd about 3.2.
    EXPECT_GE(own, 8) << "sequence " << i;
  }
  for (int c : per_class) EXPECT_GT(c, 25) << "every class drawn";
  for (const auto& [spec, why] : std::vector<std::pair<std::string, std::string>>{
           {"synthetic-classes:200,20,100,4", "sequences of 20 tokens, but the model's input takes 40"},
           {"synthetic-classes:200,40,100,1", "K = 1 classes; it takes 2 <= K <= V"},
           {"synthetic-classes:200,40,101,4", "ids below 101 but the model's embedding has 100 rows"},
           {"synthetic-classes:1,40,100,4", "at least two sequences"},
           {"synthetic-classes:200,40,100", "expected synthetic-classes:N,T,V,K"}}) {
    auto bad = load_token_data(spec, task, 3);
    ASSERT_FALSE(bad.ok()) << spec;
    EXPECT_NE(bad.status().message().find(why), std::string::npos) << bad.status().message();
  }
  EXPECT_TRUE(is_token_spec("synthetic-classes:2,1,2,2"));
}

TEST_F(Text, TheLstmClassifierTrainsOnClassifiedSequences) {
  // zoo:lstm-classifier ([batch, 64] ids -> [batch, 4] logits) trained on no --data before: the
  // token forms give a label per position. Chance is ln 4 = 1.39 and accuracy 1/4.
  api::TrainOptions o;
  o.model = "zoo:lstm-classifier";
  o.data = "synthetic-classes:96,64,1000,4";
  o.optimizer = "adam";
  o.opt.lr = 0.003;
  o.batch = 16;
  o.epochs = 2;
  o.threads = 2;
  auto r = api::train(o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const auto& last = r->log["epochs"][1];
  EXPECT_LT(last["train_loss"].get<double>(), 0.5) << last.dump();
  EXPECT_GE(last["test_accuracy"].get<double>(), 0.75) << last.dump();
  // And bench times its training step on that data.
  CmdResult b = mosaic("bench zoo:lstm-classifier --mode training --batch 4 --backend im2col --data "
                       "synthetic-classes:16,64,1000,4 --iterations 1 --warmup 0 --no-peaks --no-db --threads 1");
  EXPECT_EQ(b.code, 0) << b.out;
}

}  // namespace
}  // namespace mosaic::test
