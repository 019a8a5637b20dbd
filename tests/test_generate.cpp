// `mosaic generate` (api/generate.hpp): the tokens each backend generates against the oracle's,
// the padding check that refuses a model that is not causal, the figures' arithmetic, and the
// inputs it refuses. Greedy tokens against PyTorch's: tests/torch/generate_agreement.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <random>
#include <set>

#include "api/generate.hpp"
#include "api/generate_internal.hpp"
#include "test_util.hpp"

namespace mosaic::test {
namespace {

api::GenerateOptions tiny(const std::string& backend) {
  api::GenerateOptions o;
  o.model = "zoo:gpt2-tiny";
  o.backend = backend;
  o.prompt_tokens = 5;
  o.new_tokens = 12;
  o.runs = 2;
  o.peaks = false;  // the bandwidth share's probe: tested where asked for
  o.common.batch = 2;
  o.common.threads = 1;
  return o;
}

TEST(Generate, EveryBackendSamplesWhatTheOracleSamples) {
  // Sampled at temperature 1 (greedy on random weights mostly repeats a token): the draw
  // reads the whole distribution, so any wrong logit shows as another token.
  api::GenerateOptions o = tiny("naive");
  o.temperature = 1.0;
  o.common.seed = 3;
  auto want = api::generate(o);
  ASSERT_TRUE(want.ok()) << want.status().to_string();
  ASSERT_EQ(want->generated.size(), 2u);
  std::set<int64_t> distinct(want->generated[0].begin(), want->generated[0].end());
  EXPECT_GT(distinct.size(), 4u) << "the sampled tokens vary";
  EXPECT_NE(want->generated[0], want->generated[1]) << "rows have their own prompts";
  ASSERT_EQ(want->lengths.size(), 1u);
  EXPECT_EQ(want->lengths[0].length, 64) << "the model's own 64 positions";
  EXPECT_EQ(want->lengths[0].causal_diff, 0.0) << "on the oracle, padding a causal model changes no bit";
  for (const std::string& b : optimised_backends()) {
    o.backend = b;
    auto got = api::generate(o);
    ASSERT_TRUE(got.ok()) << b << ": " << got.status().to_string();
    EXPECT_EQ(got->prompt, want->prompt) << b;
    EXPECT_EQ(got->generated, want->generated) << b;
    EXPECT_LE(got->lengths[0].causal_diff, 1e-6) << b;
  }
}

TEST(Generate, TopOneSamplingIsGreedyAndEveryRunRepeatsTheWarmUp) {
  api::GenerateOptions o = tiny("naive");
  o.prompt_ids = {7, 300, 12};
  auto greedy = api::generate(o);
  ASSERT_TRUE(greedy.ok()) << greedy.status().to_string();
  o.temperature = 5.0;
  o.top_k = 1;
  auto top1 = api::generate(o);
  ASSERT_TRUE(top1.ok()) << top1.status().to_string();
  EXPECT_EQ(top1->generated, greedy->generated);
  EXPECT_EQ(greedy->prompt[0], (std::vector<int64_t>{7, 300, 12}));
  EXPECT_EQ(greedy->prompt[1], greedy->prompt[0]) << "--prompt-ids is every row's prompt";
  for (const auto& n : greedy->notes) EXPECT_EQ(n.find("not deterministic"), std::string::npos) << n;
}

TEST(Generate, TheFiguresFollowFromEachTokensTime) {
  api::GenerateOptions o = tiny("naive");
  o.runs = 3;
  auto r = api::generate(o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->runs.size(), 3u);
  std::vector<double> firsts, lasts;
  for (const auto& run : r->runs) {
    ASSERT_EQ(run.token_ms.size(), 12u);
    for (size_t i = 1; i < run.token_ms.size(); ++i) EXPECT_GT(run.token_ms[i], run.token_ms[i - 1]);
    firsts.push_back(run.token_ms.front());
    lasts.push_back(run.token_ms.back());
  }
  std::sort(firsts.begin(), firsts.end());
  std::sort(lasts.begin(), lasts.end());
  EXPECT_DOUBLE_EQ(r->ttft_ms, firsts[1]);
  EXPECT_DOUBLE_EQ(r->e2e_ms, lasts[1]);
  EXPECT_NEAR(r->prefill_tokens_per_s, 2 * 5 / (firsts[1] / 1e3), 1e-6 * r->prefill_tokens_per_s);
  EXPECT_GT(r->tpot_ms, 0);
  EXPECT_NEAR(r->decode_tokens_per_s, 2 / (r->tpot_ms / 1e3), 0.5 * r->decode_tokens_per_s) << "about batch / TPOT";
  EXPECT_LE(r->itl_p50_ms, r->itl_p90_ms);
  EXPECT_LE(r->itl_p90_ms, r->itl_p99_ms);
  const nlohmann::json j = api::generate_report_json(r.value());
  EXPECT_EQ(j["schema"], "mosaic.generate/1");
  EXPECT_EQ(j["runs"].size(), 3u);
  EXPECT_EQ(j["generated"][1].size(), 12u);
  EXPECT_EQ(j["interface"]["ids"], "input_ids");
  EXPECT_EQ(j["interface"]["vocabulary"], 512);
  EXPECT_EQ(j["decoding"], "recompute");
  // What a decode step reads over TPOT: here without the machine's bandwidth (o.peaks off).
  auto g = api::load_model("zoo:gpt2-tiny");
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(r->step_weight_bytes, api::gen::step_weight_bytes(g.value(), 2));
  EXPECT_EQ(r->step_cache_bytes, 0) << "no cache";
  EXPECT_NEAR(r->step_gbs, static_cast<double>(r->step_weight_bytes) / (r->tpot_ms / 1e3) / 1e9, 1e-9 * r->step_gbs);
  EXPECT_EQ(r->read_bandwidth_gbs, 0);
  EXPECT_EQ(j["bandwidth"]["step_weight_bytes"], r->step_weight_bytes);
  EXPECT_TRUE(j["bandwidth"]["share"].is_null());
}

// A decode step reads each weight once, and of a table that only Gather reads (an
// embedding) one row per token and Gather; a table the head reads too (tied) is read whole.
TEST(Generate, ADecodeStepReadsEachWeightOnceAndAGatheredTableByItsRows) {
  Graph g;
  g.inputs.push_back(ValueInfo{"ids", DType::kI64, {3, 1}, {}, true});
  g.initializers["tok"] = random_tensor({10, 4}, 1);    // 160 bytes, 16 a row
  g.initializers["pos"] = random_tensor({8, 4}, 2);     // 128 bytes, gathered twice: 2 rows a token
  g.initializers["w"] = random_tensor({4, 6}, 3);       // 96 bytes
  add_node(g, make_node("Gather"), {"tok", "ids"}, {"e"}, "embed");
  add_node(g, make_node("Gather"), {"pos", "ids"}, {"p"}, "positions");
  add_node(g, make_node("Gather"), {"pos", "ids"}, {"p2"}, "positions_again");
  add_node(g, make_node("MatMul"), {"e", "w"}, {"h"}, "proj");
  EXPECT_EQ(api::gen::step_weight_bytes(g, 3), 3 * 16 + 2 * 3 * 16 + 96);
  EXPECT_EQ(api::gen::step_weight_bytes(g, 100), 160 + 128 + 96) << "never more than the table";
  g.initializers["mask"] = random_tensor({16, 16}, 4);  // sliced only: not counted
  add_node(g, make_node("Slice"), {"mask", "ids", "ids"}, {"m"}, "causal_mask");
  EXPECT_EQ(api::gen::step_weight_bytes(g, 3), 3 * 16 + 2 * 3 * 16 + 96);
  add_node(g, make_node("MatMul"), {"h", "tok"}, {"logits"}, "tied_head");  // [.., 6] x [10, 4]: shapes aside
  EXPECT_EQ(api::gen::step_weight_bytes(g, 3), 160 + 2 * 3 * 16 + 96);
  // bf16: the products' weights as bfloat16 panels, half the bytes (the tied table too); the
  // gathered-only table stays float32 rows.
  EXPECT_EQ(api::gen::step_weight_bytes(g, 3, true), 160 / 2 + 2 * 3 * 16 + 96 / 2);
  // Which plans read those 16-bit copies: bf16's and cuda's fp16 (whose step counted its
  // products' weights at twice the bytes it reads before 2026-12-07), not f32's or tf32's.
  EXPECT_TRUE(api::gen::products_read_16bit(Precision::kBF16));
  EXPECT_TRUE(api::gen::products_read_16bit(Precision::kF16));
  EXPECT_FALSE(api::gen::products_read_16bit(Precision::kF32));
  EXPECT_FALSE(api::gen::products_read_16bit(Precision::kTF32));
}

// The draw itself: frequencies of 200,000 seeded draws against softmax(logits / T) over the
// whole vocabulary (no top-k: drawn in id order, no sort) and over the top k (sorted), within
// 5 standard deviations of a binomial count each; greedy takes the first of the largest.
TEST(Generate, PickDrawsFromTheSoftmaxOfTheLogits) {
  struct Fixed : api::gen::Stepper {
    std::vector<double> logits{1.0, 3.0, 0.5, 3.0, -2.0, 2.0};
    Status step(const std::vector<std::vector<int64_t>>&) override { return Status::ok(); }
    double logit(int64_t, int64_t v) const override { return logits[static_cast<size_t>(v)]; }
    std::vector<api::PlannedLength> planned() const override { return {}; }
    Status prepare(int64_t) override { return Status::ok(); }
  } s;
  s.vocab = static_cast<int64_t>(s.logits.size());
  api::GenerateOptions o;
  std::mt19937_64 greedy_rng(1);
  EXPECT_EQ(api::gen::pick(s, 0, o, greedy_rng), 1) << "greedy: the first of the largest";
  for (int64_t top_k : {0, 3, 6, 100}) {
    SCOPED_TRACE("top-k " + std::to_string(top_k));
    o.temperature = 1.5;
    o.top_k = top_k;
    const size_t keep = top_k > 0 && top_k < 6 ? static_cast<size_t>(top_k) : 6;
    std::vector<double> p(6, 0.0);
    std::vector<size_t> order{1, 3, 5, 0, 2, 4};  // by logit, ties by id
    double sum = 0;
    for (size_t i = 0; i < keep; ++i) sum += p[order[i]] = std::exp((s.logits[order[i]] - 3.0) / o.temperature);
    std::mt19937_64 rng(7);
    std::vector<int> count(6, 0);
    const int draws = 200000;
    for (int i = 0; i < draws; ++i) ++count[static_cast<size_t>(api::gen::pick(s, 0, o, rng))];
    for (size_t v = 0; v < 6; ++v) {
      const double want = p[v] / sum, sd = std::sqrt(draws * want * (1 - want));
      EXPECT_NEAR(count[v], draws * want, 5 * sd + 1e-9) << "id " << v;
    }
  }
}

// --precision bf16: the products by weights on bfloat16 operands (their arithmetic against
// the double loop: Precision.Bf16FewRowsProductsAreTheProductsOfTheRoundedOperands); here the
// option's way through: the report and its JSON say bf16, the step reads half the products'
// bytes, and a backend that computes in float32 only, or no precision at all, is refused by
// name before any work.
TEST(Generate, Bf16IsSaidInTheReportAndRefusedWhereTheBackendDeclinesIt) {
  const BackendInfo* onednn = builtin_registry().info("onednn");
  api::GenerateOptions o = tiny("naive");
  o.precision = "bf16";
  auto r = api::generate(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("`precision` bf16: backend naive declines it: it computes in float32 only"),
            std::string::npos) << r.status().to_string();
  o.precision = "fp8";
  r = api::generate(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'fp8' is not a precision"), std::string::npos) << r.status().to_string();
  if (!onednn || !precision_declined(*onednn, Precision::kBF16).empty()) GTEST_SKIP() << "onednn has no bf16 here";
  o = tiny("onednn");
  auto f32 = api::generate(o);
  ASSERT_TRUE(f32.ok()) << f32.status().to_string();
  o.precision = "bf16";
  auto bf16 = api::generate(o);
  ASSERT_TRUE(bf16.ok()) << bf16.status().to_string();
  EXPECT_EQ(f32->precision, "f32");
  EXPECT_EQ(bf16->precision, "bf16");
  const nlohmann::json j = api::generate_report_json(*bf16);
  EXPECT_EQ(j["settings"]["precision"], "bf16");
  auto back = api::generate_report_from_json(j);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->precision, "bf16");
  EXPECT_LT(bf16->step_weight_bytes, f32->step_weight_bytes);
  EXPECT_EQ(bf16->generated.size(), f32->generated.size());
}

// --context: one generation per depth from a prompt that long, a point each; the report's
// own figures are the first depth's.
TEST(Generate, AContextSweepGivesAPointPerDepth) {
  api::GenerateOptions o = tiny("naive");
  o.common.batch = 1;
  o.new_tokens = 4;
  o.runs = 1;
  o.contexts = {9, 3};
  auto r = api::generate(o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->contexts.size(), 2u);
  EXPECT_EQ(r->contexts[0].context, 9);
  EXPECT_EQ(r->contexts[1].context, 3);
  EXPECT_EQ(r->prompt_tokens, 9);
  EXPECT_EQ(r->prompt[0].size(), 9u);
  EXPECT_DOUBLE_EQ(r->contexts[0].tpot_ms, r->tpot_ms);
  EXPECT_DOUBLE_EQ(r->contexts[0].ttft_ms, r->ttft_ms);
  for (const auto& p : r->contexts) {
    EXPECT_GT(p.tpot_ms, 0);
    EXPECT_GT(p.plan_ms, 0) << "every depth plans its lengths in its warm-up";
  }
  const nlohmann::json j = api::generate_report_json(r.value());
  ASSERT_EQ(j["contexts"].size(), 2u);
  EXPECT_EQ(j["contexts"][1]["context"], 3);
  api::GenerateReport one = r.value();
  one.contexts.clear();
  EXPECT_TRUE(api::generate_report_json(one)["contexts"].is_null()) << "no sweep, no points";
  // Refused by name: a depth below 1, a depth beside explicit prompt ids.
  o.contexts = {4, 0};
  auto zero = api::generate(o);
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.status().message().find("contexts"), std::string::npos) << zero.status().to_string();
  o.contexts = {4};
  o.prompt_ids = {1, 2};
  auto both = api::generate(o);
  ASSERT_FALSE(both.ok());
  EXPECT_NE(both.status().message().find("give it or `prompt_ids`, not both"), std::string::npos)
      << both.status().to_string();
}

// --per-node: one more generation with each node's time, the prefill apart from the mean
// decode step. gpt2-tiny recomputes its 64 positions each token, so a decode step costs what
// the prefill does, node by node: a sum over the steps not divided by them would be 5x.
TEST(Generate, PerNodeTimesSplitThePrefillFromADecodeStepOnFusedPlans) {
  api::GenerateOptions o = tiny("naive");
  o.common.batch = 1;
  o.new_tokens = 6;
  o.runs = 1;
  o.per_node = true;
  auto r = api::generate(o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_GT(r->nodes.size(), 10u);
  std::set<std::string> names;
  double prefill = 0, decode = 0;
  for (const auto& n : r->nodes) {
    EXPECT_TRUE(names.insert(n.name).second) << "one row per node: " << n.name;
    EXPECT_FALSE(n.op.empty()) << n.name;
    prefill += n.prefill_ms;
    decode += n.decode_ms;
  }
  for (size_t i = 1; i < r->nodes.size(); ++i) EXPECT_GE(r->nodes[i - 1].decode_ms, r->nodes[i].decode_ms);
  EXPECT_GT(prefill, 0);
  EXPECT_GT(decode / prefill, 0.3) << decode << " vs " << prefill;
  EXPECT_LT(decode / prefill, 3.0) << decode << " vs " << prefill;
  EXPECT_EQ(r->runs.size(), 1u) << "the profiled generation is not a timed run";
  const nlohmann::json j = api::generate_report_json(r.value());
  EXPECT_EQ(j["nodes"].size(), r->nodes.size());
  EXPECT_EQ(j["nodes"][0]["name"], r->nodes[0].name);
  // The plans are fused as bench's are (the Linear layers as Gemms, GELU's erf chain into the
  // Gemm before it, the attention), unless asked not to.
  auto ops = [](const api::GenerateReport& rep) {
    std::set<std::string> s;
    for (const auto& n : rep.nodes) s.insert(n.op);
    return s;
  };
  EXPECT_TRUE(ops(r.value()).count("Gemm") && ops(r.value()).count("FusedAttention") && !ops(r.value()).count("Erf"));
  o.fuse = false;
  auto plain = api::generate(o);
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();
  EXPECT_TRUE(ops(plain.value()).count("Erf") && !ops(plain.value()).count("Gelu"));
  EXPECT_EQ(plain->generated, r->generated) << "the same tokens either way";
}

TEST(Generate, AModelThatIsNotCausalIsRefused) {
  // BERT's tokens see the padding after them: padded recomputation would be wrong, not slow.
  api::GenerateOptions o;
  o.model = "zoo:bert-tiny";
  o.backend = builtin_registry().has_backend("onednn") ? "onednn" : "naive";
  o.prompt_tokens = 4;
  o.new_tokens = 2;
  o.runs = 1;
  auto r = api::generate(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("the model is not causal"), std::string::npos) << r.status().to_string();
  EXPECT_NE(r.status().message().find("first 4 positions"), std::string::npos) << r.status().to_string();
}

TEST(Generate, WhatItCannotFeedIsRefusedByName) {
  auto refused = [](api::GenerateOptions o, const std::string& want) {
    auto r = api::generate(o);
    ASSERT_FALSE(r.ok()) << want;
    EXPECT_NE(r.status().message().find(want), std::string::npos) << r.status().to_string();
  };
  api::GenerateOptions o = tiny("naive");
  o.model = "zoo:fmnist-cnn";
  refused(o, "input 'input' is not [batch, sequence]");
  o = tiny("naive");
  o.prompt_tokens = 60;
  o.new_tokens = 10;
  refused(o, "takes 64 positions ('input_ids'); the prompt's 60 tokens and 10 new ones need 69");
  o = tiny("naive");
  o.prompt_ids = {1, 512};
  refused(o, "`prompt_ids`: 512 is outside the vocabulary of 512");
  o.prompt_ids = {-1};
  refused(o, "`prompt_ids`: token ids are not negative");
  o = tiny("naive");
  o.new_tokens = 0;
  refused(o, "`new_tokens` must be a positive integer");
  o = tiny("naive");
  o.prompt_tokens = int64_t{1} << 40;
  refused(o, "need more than 2^31 - 1 positions");
  o.prompt_tokens = std::numeric_limits<int64_t>::max();  // the sum would wrap
  o.new_tokens = 3;
  refused(o, "need more than 2^31 - 1 positions");
  o = tiny("naive");
  o.temperature = -1;
  refused(o, "`temperature` must be >= 0");
  o = tiny("naive");
  o.common.inputs = {"input_ids=x.npy"};
  refused(o, "generate feeds the model's inputs itself");
  o = tiny("no-such-backend");
  refused(o, "no-such-backend");
}

ValueInfo value(const std::string& name, DType t, std::vector<int64_t> dims, std::vector<std::string> params) {
  ValueInfo v;
  v.name = name;
  v.dtype = t;
  v.dims = std::move(dims);
  v.dim_params = std::move(params);
  v.has_shape = true;
  return v;
}

/// The interface of a Hugging Face decoder with a cache, `layers` layers of 4 heads of 8.
Graph cached_interface(int layers) {
  Graph g;
  g.inputs = {value("input_ids", DType::kI64, {-1, -1}, {"batch", "sequence"}),
              value("attention_mask", DType::kI64, {-1, -1}, {"batch", "total"}),
              value("position_ids", DType::kI64, {-1, -1}, {"batch", "sequence"})};
  g.outputs = {value("logits", DType::kF32, {-1, -1, 96}, {"batch", "sequence", ""})};
  for (int l = 0; l < layers; ++l)
    for (const char* kv : {"key", "value"}) {
      const std::string suffix = "." + std::to_string(l) + "." + kv;
      g.inputs.push_back(value("past_key_values" + suffix, DType::kF32, {-1, 4, -1, 8}, {"batch", "", "past", ""}));
      g.outputs.push_back(value("present" + suffix, DType::kF32, {-1, 4, -1, 8}, {"batch", "", "total", ""}));
    }
  return g;
}

TEST(Generate, TheCacheIsFoundAsHuggingFaceLaysItOutOrRefusedByName) {
  auto found = api::gen::find_interface(cached_interface(2), "m.onnx");
  ASSERT_TRUE(found.ok()) << found.status().to_string();
  EXPECT_EQ(found->cache.size(), 4u);
  EXPECT_EQ(found->cache[0], (std::pair<std::string, std::string>{"past_key_values.0.key", "present.0.key"}));
  EXPECT_EQ(found->past_dim, "past");
  EXPECT_EQ(found->cache_bytes_per_token, 4 * 4 * 8 * 4) << "4 inputs x 4 heads x 8 floats";
  EXPECT_EQ(found->mask, "attention_mask");
  EXPECT_EQ(found->positions, "position_ids");
  auto refused = [](Graph g, const std::string& want) {
    auto r = api::gen::find_interface(g, "m.onnx");
    ASSERT_FALSE(r.ok()) << want;
    EXPECT_NE(r.status().message().find(want), std::string::npos) << r.status().to_string();
  };
  Graph g = cached_interface(1);
  g.outputs.pop_back();  // present.0.value
  refused(g, "cache input 'past_key_values.0.value' has no output that returns it");
  g = cached_interface(1);
  g.inputs.erase(g.inputs.begin() + 2);  // position_ids
  refused(g, "a KV cache needs an attention mask input and a position ids input (it has no position ids)");
  g = cached_interface(1);
  g.inputs[3].dims = {-1, -1, 8};
  refused(g, "'past_key_values.0.key' is not [batch, heads, past, head size]");
  g = cached_interface(1);
  g.inputs[4].dim_params[2] = "past_v";
  refused(g, "cache inputs name their past length differently");
  g = cached_interface(1);
  g.inputs[0].dims[1] = 32;
  refused(g, "with a KV cache the ids' sequence dimension must be symbolic");
  g = cached_interface(0);
  g.inputs.push_back(value("kv_cache", DType::kF32, {1, 2, 3, 4}, {}));
  refused(g, "input 'kv_cache' looks like a cache");
}

TEST(Generate, TheCommandWritesItsReportAndRefusesBadIds) {
  const std::string json = ::testing::TempDir() + "generate.json", db = ::testing::TempDir() + "generate.sqlite";
  std::remove(db.c_str());
  CmdResult r = mosaic("generate zoo:gpt2-tiny --backend naive --prompt-ids 3,4,5 --new-tokens 4 --runs 1 --no-peaks --json " + json +
                       " --db " + db);
  ASSERT_EQ(r.code, 0) << r.out;
  CmdResult h = mosaic("history --db " + db + " --kind generate");
  EXPECT_NE(h.out.find("naive recompute: prompt 3, 4 new, TTFT"), std::string::npos) << "recorded: " << h.out;
  // compare reads two generations (tests/test_generate_compare.cpp), but not one twice.
  std::filesystem::copy_file(json, json + ".2.json", std::filesystem::copy_options::overwrite_existing);
  h = mosaic("compare " + json + " " + json + ".2.json");
  EXPECT_EQ(h.code, 2) << h.out;
  EXPECT_NE(h.out.find("A and B are the same run"), std::string::npos) << h.out;
  EXPECT_NE(r.out.find("time to first token"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("padded to 64 position(s)"), std::string::npos) << r.out;
  const auto j = read_json(json);
  EXPECT_EQ(j["schema"], "mosaic.generate/1");
  EXPECT_EQ(j["prompt"][0], nlohmann::json::array({3, 4, 5}));
  EXPECT_EQ(j["runs"][0]["token_ms"].size(), 4u);
  r = mosaic("generate zoo:gpt2-tiny --prompt-ids 3,x --new-tokens 4 --no-db");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--prompt-ids: 'x' is not a token id"), std::string::npos) << r.out;
  r = mosaic("generate zoo:gpt2-tiny --context 8,-x --new-tokens 4 --no-db");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--context: '-x' is not a context depth"), std::string::npos) << r.out;
  // A sweep prints a row per depth, with the bandwidth share against the peaks' read bandwidth.
  r = mosaic("generate zoo:gpt2-tiny --backend naive --context 6,2 --new-tokens 3 --runs 1 --no-db");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("context    TTFT ms"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("of the machine's read bandwidth"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace mosaic::test
