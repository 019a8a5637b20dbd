// Hostile models: sizes that overflow, extreme attributes, external data that points outside
// the model's folder. The corpus in tests/hostile/ (made by tests/hostile/make_corpus.py) must
// be refused with an error naming the tensor or node, by every command that reads a model, and
// never crash, hang or read outside the folder; a fuzzer mutates a real model's sizes and
// attributes and runs what still loads. Run under ASan/UBSan with MOSAIC_SANITIZE=1.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>
#include <sys/stat.h>

#include <climits>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "ir/checked.hpp"
#include "frontends/zoo/zoo.hpp"
#include "frontends/onnx/onnx_io.hpp"
#include "test_util.hpp"

namespace mosaic::test {
namespace {

namespace fs = std::filesystem;

struct HostileCase {
  std::string name, fragment;
};

std::vector<HostileCase> manifest() {
  std::vector<HostileCase> cases;
  std::ifstream f(std::string(MOSAIC_SOURCE_DIR) + "/tests/hostile/MANIFEST");
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t tab = line.find('\t');
    cases.push_back({line.substr(0, tab), tab == std::string::npos ? "" : line.substr(tab + 1)});
  }
  return cases;
}

/// Copies the corpus into `dir` and adds what git cannot hold: a symlink from inside a case's
/// folder to /etc/passwd, and a FIFO (which would block a reader forever).
void lay_out_corpus(const fs::path& dir) {
  fs::copy(std::string(MOSAIC_SOURCE_DIR) + "/tests/hostile", dir, fs::copy_options::recursive);
  fs::create_symlink("/etc/passwd", dir / "external_symlink_out" / "link.bin");
  ASSERT_EQ(::mkfifo((dir / "external_fifo" / "fifo.bin").c_str(), 0600), 0);
}

class Hostile : public ScratchDirTest {
 protected:
  Hostile() : ScratchDirTest("mosaic_hostile_") {}
};

TEST(HostileSizes, CheckedArithmeticRefusesWhatWraps) {
  // The critical finding: 4 x (2^62 + 4) floats is 64 bytes modulo 2^64.
  const Shape wraps = {4, (int64_t{1} << 62) + 4};
  EXPECT_EQ(TensorDesc(DType::kF32, wraps).bytes(), SIZE_MAX);
  EXPECT_EQ(shape_numel(wraps), INT64_MAX);
  EXPECT_THROW(Tensor::empty({DType::kF32, wraps}), OutOfMemory);
  Status st = check_shape(wraps, DType::kF32, "initializer 'W'");
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("initializer 'W'"), std::string::npos) << st.message();
  // Every dimension fits but the product does not.
  st = check_shape({kMaxDim, kMaxDim, kMaxDim}, DType::kF32, "x");
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("too large"), std::string::npos) << st.message();
  EXPECT_EQ(st.message().find("000000000000"), std::string::npos) << "no 20-digit sizes: " << st.message();
  EXPECT_TRUE(check_shape({64, 3, 224, 224}, DType::kF32, "x").is_ok());
  EXPECT_TRUE(check_shape({0, kMaxDim, kMaxDim}, DType::kF32, "x").is_ok()) << "empty tensors are fine";
  EXPECT_FALSE(checked_bytes(INT64_MAX / 2, 4, "w").ok());
  EXPECT_EQ(checked_bytes(1000, 4, "w").value(), 4000);
  EXPECT_EQ(human_bytes(1536.0 * 1024 * 1024 * 1024), "1.5 TiB");
}

TEST_F(Hostile, LoaderRefusesEveryCaseNamingTheTensorOrNode) {
  lay_out_corpus(dir_ / "c");
  const auto cases = manifest();
  ASSERT_GE(cases.size(), 25u);
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string file = (dir_ / "c" / c.name / "model.onnx").string();
    auto g = load_onnx(file);
    Status st = g.status();
    if (g.ok()) {
      PrepareOptions po;
      auto r = prepare_graph(g.value(), builtin_registry(), po);
      st = r.status();
    }
    if (c.fragment.empty()) {
      EXPECT_TRUE(st.is_ok()) << st.to_string();
      continue;
    }
    ASSERT_FALSE(st.is_ok());
    EXPECT_NE(st.message().find(c.fragment), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("model.onnx"), std::string::npos) << "names the file: " << st.message();
  }
}

TEST_F(Hostile, EveryCommandRefusesTheCorpusWithExitTwo) {
  lay_out_corpus(dir_ / "c");
  for (const auto& c : manifest()) {
    SCOPED_TRACE(c.name);
    const std::string model = (dir_ / "c" / c.name / "model.onnx").string();
    const std::string json = path(c.name + ".json");
    // `timeout` turns a hang (the FIFO) into a failure instead of a stuck test.
    // The built-in backends (the model is refused by the loader, before any backend: loading the
    // torch plugin 80 times would only cost time).
    std::vector<std::string> commands = {"info " + model,
                                         "bench " + model + " --backends naive,im2col,onednn --iterations 1 --warmup 0 --json " + json,
                                         "verify --per-node " + model + " --backend onednn",
                                         "loadgen " + model + " --scenario single-stream --min-queries 1 --min-duration 0"};
    if (fs::exists(dir_ / "c" / c.name / "test_data_set_0"))
      commands.push_back("verify " + (dir_ / "c" / c.name).string() + " --backend naive");
    for (const std::string& cmd : commands) {
      CmdResult r = mosaic_shell("timeout 60 " + std::string(MOSAIC_BIN) + " " + cmd);
      if (c.fragment.empty()) {  // a valid model: runs (3: nothing failed, a backend declined every node)
        EXPECT_TRUE(r.code == 0 || r.code == 3) << cmd << "\n" << r.out;
        continue;
      }
      // verify of a suite reports each case FAILED with the reason (exit 1, as for a wrong
      // output); the other commands stop with an error (exit 2).
      if (cmd.rfind("verify /", 0) == 0) {
        EXPECT_EQ(r.code, 1) << cmd << "\n" << r.out;
        EXPECT_NE(r.out.find("FAILED " + c.name), std::string::npos) << cmd << "\n" << r.out;
      } else {
        EXPECT_EQ(r.code, 2) << cmd << "\n" << r.out;
        EXPECT_NE(r.out.find("mosaic: error: "), std::string::npos) << cmd << "\n" << r.out;
      }
      EXPECT_NE(r.out.find(c.fragment), std::string::npos) << cmd << "\n" << r.out;
      EXPECT_EQ(r.out.find("root:"), std::string::npos) << "no byte of /etc/passwd is shown";
      EXPECT_FALSE(fs::exists(json)) << "no result file for a refused model";
    }
  }
}

// ---- the fuzzer: a real model with its sizes and attributes mutated ------------------------

const int64_t kExtremes[] = {0,  1,  -1, 2,  3,  kMaxDim, kMaxDim + 1, int64_t{1} << 32, (int64_t{1} << 62) + 4,
                             INT64_MAX, INT64_MIN, 7, 31, 1000};

int64_t extreme(std::mt19937_64& rng) {
  if (rng() % 4 == 0) return static_cast<int64_t>(rng() % 64);
  return kExtremes[rng() % (sizeof(kExtremes) / sizeof(kExtremes[0]))];
}

void mutate(onnx::ModelProto& m, std::mt19937_64& rng) {
  auto* g = m.mutable_graph();
  switch (rng() % 8) {
    case 0: case 1: {  // an initializer's dimension
      if (!g->initializer_size()) return;
      auto* t = g->mutable_initializer(static_cast<int>(rng() % g->initializer_size()));
      if (t->dims_size()) t->set_dims(static_cast<int>(rng() % t->dims_size()), extreme(rng));
      break;
    }
    case 2: {  // a dimension more or fewer
      if (!g->initializer_size()) return;
      auto* t = g->mutable_initializer(static_cast<int>(rng() % g->initializer_size()));
      if (rng() % 2 || !t->dims_size()) t->add_dims(extreme(rng));
      else t->mutable_dims()->RemoveLast();
      break;
    }
    case 3: {  // raw data cut or grown
      if (!g->initializer_size()) return;
      auto* t = g->mutable_initializer(static_cast<int>(rng() % g->initializer_size()));
      std::string raw = t->raw_data();
      raw.resize(rng() % 2 ? raw.size() / (1 + rng() % 4) : raw.size() + rng() % 64);
      t->set_raw_data(raw);
      break;
    }
    case 4: {  // an input's declared dimension
      if (!g->input_size()) return;
      auto* sh = g->mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape();
      if (sh->dim_size()) sh->mutable_dim(static_cast<int>(rng() % sh->dim_size()))->set_dim_value(extreme(rng));
      break;
    }
    case 5: case 6: {  // a node's integer attribute
      if (!g->node_size()) return;
      auto* n = g->mutable_node(static_cast<int>(rng() % g->node_size()));
      if (!n->attribute_size()) return;
      auto* a = n->mutable_attribute(static_cast<int>(rng() % n->attribute_size()));
      if (a->ints_size()) a->set_ints(static_cast<int>(rng() % a->ints_size()), extreme(rng));
      else if (a->type() == onnx::AttributeProto::INT) a->set_i(extreme(rng));
      break;
    }
    default: {  // external data with hostile fields
      if (!g->initializer_size()) return;
      auto* t = g->mutable_initializer(static_cast<int>(rng() % g->initializer_size()));
      t->clear_raw_data();
      t->set_data_location(onnx::TensorProto::EXTERNAL);
      const char* locations[] = {"w.bin", "/etc/passwd", "../w.bin", "sub/../w.bin", "", "link.bin", "."};
      auto add = [&](const char* k, const std::string& v) {
        auto* e = t->add_external_data();
        e->set_key(k);
        e->set_value(v);
      };
      add("location", locations[rng() % 7]);
      if (rng() % 2) add("offset", std::to_string(extreme(rng)));
      if (rng() % 2) add("length", std::to_string(extreme(rng)));
    }
  }
}

TEST_F(Hostile, FuzzedSizesAndAttributesNeverCrash) {
  // A convolutional model and one with Gemm, Reshape and Pad nodes (alexnet-cifar's pattern at
  // a small size is not in the zoo; fmnist-cnn has Conv, MaxPool, Reshape/Flatten and Gemm).
  Graph base = build_zoo_model("fmnist-cnn", 3).value();
  const std::string seed_file = path("seed.onnx");
  ASSERT_TRUE(save_onnx(base, seed_file).is_ok());
  onnx::ModelProto seed;
  {
    std::ifstream f(seed_file, std::ios::binary);
    ASSERT_TRUE(seed.ParseFromIstream(&f));
  }
  {
    std::ofstream w(path("w.bin"), std::ios::binary);
    w << std::string(4096, '\x01');
  }
  fs::create_symlink("/etc/passwd", dir_ / "link.bin");
  std::mt19937_64 rng(2026);
  const int iterations = 400;
  int loaded = 0, prepared = 0, ran = 0;
  for (int it = 0; it < iterations; ++it) {
    onnx::ModelProto m = seed;
    const int mutations = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < mutations; ++k) mutate(m, rng);
    const std::string file = path("m.onnx");
    {
      std::ofstream f(file, std::ios::binary | std::ios::trunc);
      ASSERT_TRUE(m.SerializeToOstream(&f));
    }
    SCOPED_TRACE("iteration " + std::to_string(it));
    auto g = load_onnx(file);
    if (!g.ok()) {
      EXPECT_FALSE(g.status().message().empty());
      continue;
    }
    ++loaded;
    PrepareOptions po;
    po.batch = 2;
    auto pr = prepare_graph(g.value(), builtin_registry(), po);
    if (!pr.ok()) {
      EXPECT_FALSE(pr.status().message().empty());
      continue;
    }
    ++prepared;
    // Run what still prepares, on every built-in backend, when it is small enough to be quick.
    size_t total = 0;
    for (const auto& [name, d] : g->value_descs) total += std::min<size_t>(d.bytes(), SIZE_MAX / 4);
    if (total > (size_t{64} << 20)) continue;
    for (const std::string& backend : builtin_registry().backends()) {
      auto plan = Plan::build(g.value(), Placement::all_on(backend), builtin_registry());
      if (!plan.ok()) continue;
      std::vector<Tensor> inputs, outputs;
      for (const auto& in : g->inputs) inputs.push_back(Tensor::empty(g->value_descs.at(in.name)));
      try {
        Status st = plan.value()->run(inputs, &outputs);
        ran += st.is_ok();
      } catch (const std::bad_alloc&) {
        // A clear out-of-memory error is an acceptable answer; a wrapped size is not.
      }
    }
  }
  // The fuzzer must reach the code behind the loader, not only be refused at the door.
  EXPECT_GT(loaded, iterations / 10);
  EXPECT_GT(prepared, iterations / 40);
  EXPECT_GT(ran, 0);
  std::printf("fuzz: %d mutated models, %d loaded, %d prepared, %d backend runs\n", iterations, loaded, prepared, ran);
}

}  // namespace
}  // namespace mosaic::test
