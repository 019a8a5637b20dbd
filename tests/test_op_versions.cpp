// Operators read at their own ONNX version (operators/onnx_versions.hpp) and ONNX local
// functions inlined at load (frontends/onnx/onnx_functions.hpp). The corpora that check them
// against outside outputs are ctest's onnx_node_tests_1_23 and onnx_local_functions.
#include <gtest/gtest.h>

#include <filesystem>

#include "frontends/onnx/onnx_io.hpp"
#include "operators/onnx_versions.hpp"
#include "operators/schema.hpp"
#include "test_util.hpp"

namespace mosaic::test {
namespace {

namespace fs = std::filesystem;
using A = Attribute;

TEST(OnnxVersions, ANodesVersionIsItsOpsNewestAtOrBelowTheOpset) {
  // From ONNX's Operators.md: Add has versions 1, 6, 7, 13, 14; Pad 1, 2, 11, 13, 18, 19, ...;
  // ReduceMean 1, 11, 13, 18; Gelu arrived in opset 20.
  EXPECT_EQ(onnx_op_version("Add", 6), 6);
  EXPECT_EQ(onnx_op_version("Add", 13), 13);
  EXPECT_EQ(onnx_op_version("Add", 20), 14);
  EXPECT_EQ(onnx_op_version("Pad", 20), 19);
  EXPECT_EQ(onnx_op_version("ReduceMean", 17), 13);
  EXPECT_EQ(onnx_op_version("ReduceMean", 18), 18);
  EXPECT_EQ(onnx_op_version("Gelu", 17), 0);
  EXPECT_EQ(onnx_op_version("Gelu", 20), 20);
  EXPECT_EQ(onnx_op_version("NoSuchOp", 20), 0);
  EXPECT_GE(onnx_latest_opset(), 28);
}

TEST(OnnxVersions, EveryOnnxSchemaStatesVersionsOnnxDefines) {
  int checked = 0;
  for (const std::string& op : schema_names()) {
    const OpSchema* s = find_schema(op);
    if (!s->domain.empty()) {
      EXPECT_TRUE(s->versions.empty()) << op;
      continue;
    }
    const std::vector<int>& onnx = onnx_op_versions(op);
    ASSERT_FALSE(onnx.empty()) << op << " has a schema in ONNX's domain but is not an ONNX operator";
    ASSERT_FALSE(s->versions.empty()) << op;
    for (const VersionRange& r : s->versions) {
      EXPECT_NE(std::find(onnx.begin(), onnx.end(), r.first), onnx.end()) << op << " " << r.first;
      EXPECT_LE(r.first, r.last) << op;
      EXPECT_LE(r.last, onnx_latest_opset()) << op;
    }
    ++checked;
  }
  EXPECT_GT(checked, 90);
}

TEST(OnnxVersions, AVersionOutsideTheRangesIsRefusedNamingIt) {
  // Add before opset 7 broadcast by its `broadcast` and `axis` attributes, not numpy's rules:
  // computing it the new way would be a silent wrong answer.
  OpCase c;
  c.node = make_node("Add");
  c.inputs = {Tensor::from_f32({2}, {1, 2}), Tensor::from_f32({2}, {3, 4})};
  c.opset = 6;
  std::vector<Tensor> out;
  Status st = run_on(c, "naive", &out);
  EXPECT_EQ(st.code(), StatusCode::kUnsupported) << st.to_string();
  EXPECT_NE(st.message().find("'Add_test' (Add): Add version 6 (opset 6): Mosaic implements Add versions 7 to"),
            std::string::npos)
      << st.message();
  c.opset = 7;
  ASSERT_TRUE(run_on(c, "naive", &out).is_ok());
  EXPECT_EQ(out[0].f32()[1], 6.f);
  c.opset = onnx_latest_opset();
  ASSERT_TRUE(run_on(c, "naive", &out).is_ok());
  EXPECT_EQ(out[0].f32()[0], 4.f);
}

TEST(OnnxVersions, AnOpsetNewerThanOnnxsIsRefusedAndEveryOtherLoads) {
  const fs::path dir = fs::temp_directory_path() / ("mosaic_opset_" + std::to_string(getpid()));
  fs::create_directories(dir);
  OpCase c;
  c.node = make_node("Relu");
  c.inputs = {Tensor::from_f32({2}, {-1, 2})};
  for (int64_t opset : {int64_t{18}, int64_t{20}, int64_t{onnx_latest_opset()}, int64_t{onnx_latest_opset() + 1}}) {
    c.opset = opset;
    const std::string path = (dir / ("relu" + std::to_string(opset) + ".onnx")).string();
    ASSERT_TRUE(save_onnx(make_graph(c), path).is_ok());
    auto g = load_onnx(path);
    if (opset <= onnx_latest_opset()) {
      ASSERT_TRUE(g.ok()) << g.status().to_string();
      EXPECT_EQ(g->opset, opset);
    } else {
      ASSERT_FALSE(g.ok());
      EXPECT_EQ(g.status().code(), StatusCode::kUnsupported);
      EXPECT_NE(g.status().message().find(path + ": opset " + std::to_string(opset) + " is newer than ONNX"),
                std::string::npos)
          << g.status().message();
    }
  }
  fs::remove_all(dir);
}

TEST(OnnxVersions, PadWrapMatchesTheSpecsExample) {
  // Pad-19's `wrap` example from ONNX's Operators.md.
  OpCase c;
  c.node = make_node("Pad", {{"mode", A::of_string("wrap")}});
  c.inputs = {Tensor::from_f32({3, 2}, {1.0f, 1.2f, 2.3f, 3.4f, 4.5f, 5.7f}), Tensor::from_i64({4}, {2, 1, 1, 1})};
  c.is_const = {false, true};
  c.opset = 19;
  const std::vector<float> want = {3.4f, 2.3f, 3.4f, 2.3f, 5.7f, 4.5f, 5.7f, 4.5f, 1.2f, 1.0f, 1.2f, 1.0f,
                                   3.4f, 2.3f, 3.4f, 2.3f, 5.7f, 4.5f, 5.7f, 4.5f, 1.2f, 1.0f, 1.2f, 1.0f};
  int ran = 0;
  for (const std::string& b : builtin_registry().available_backends()) {
    std::vector<Tensor> out;
    Status st = run_on(c, b, &out);
    if (st.code() == StatusCode::kUnsupported && b != "naive") continue;  // onednn pads with a constant only
    ++ran;
    ASSERT_TRUE(st.is_ok()) << b << ": " << st.to_string();
    ASSERT_EQ(out[0].shape(), (Shape{6, 4})) << b;
    for (size_t i = 0; i < want.size(); ++i) EXPECT_FLOAT_EQ(out[0].f32()[i], want[i]) << b << " element " << i;
  }
  EXPECT_GE(ran, 2);  // the oracle and im2col at least
  c.opset = 18;
  std::vector<Tensor> out;
  Status st = run_on(c, "naive", &out);
  EXPECT_NE(st.message().find("'wrap' arrived in opset 19"), std::string::npos) << st.to_string();
}

TEST(LocalFunctions, HostileOrForeignFunctionsAreRefusedNamingThem) {
  const std::string dir = std::string(MOSAIC_SOURCE_DIR) + "/tests/conformance/functions/refuse/";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"recursive.onnx", "node 'loop' (Loop): function 'local.Loop' calls itself"},
      {"exponential.onnx", "more than 1048576 nodes once its function calls are inlined"},
      {"other_opset_version.onnx", "function 'local.Mean' imports opset 13, the model 20: its ReduceMean is version 13"},
      {"undeclared_attribute.onnx", "node 'plain' (Plain): attribute 'beta' is not one of function 'local.Plain'"},
  };
  for (const auto& [file, want] : cases) {
    auto g = load_onnx(dir + file);
    ASSERT_FALSE(g.ok()) << file;
    EXPECT_NE(g.status().message().find(dir + file + ": " ), std::string::npos) << g.status().message();
    EXPECT_NE(g.status().message().find(want), std::string::npos) << g.status().message();
  }
}

TEST(LocalFunctions, ACallBecomesTheBodyRenamedUnderTheCall) {
  auto g = load_onnx(std::string(MOSAIC_SOURCE_DIR) + "/tests/conformance/functions/pass/overloads/model.onnx");
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  ASSERT_EQ(g->nodes.size(), 2u);
  EXPECT_EQ(g->nodes[0].op_type, "Add");  // overload "double"
  EXPECT_EQ(g->nodes[1].op_type, "Mul");  // overload "square"
  EXPECT_EQ(g->nodes[0].name.rfind("s1/", 0), 0u) << g->nodes[0].name;
  EXPECT_EQ(g->nodes[0].inputs, (std::vector<std::string>{"x", "x"}));
  EXPECT_EQ(g->nodes[0].outputs, (std::vector<std::string>{"d"}));
  EXPECT_EQ(g->nodes[1].outputs, (std::vector<std::string>{"y"}));
}

}  // namespace
}  // namespace mosaic::test
