// Inputs bench does not make up (issue 50, item 7): `--input NAME=FILE` from an .npy file or an
// ONNX TensorProto, read as hostile; integer inputs read as a shape or position refused with a
// request for such a file instead of random values the model does not accept; masks 0 or 1.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include "api/mosaic.hpp"
#include "core/plan.hpp"
#include "frontends/data/npy.hpp"
#include "frontends/onnx/onnx_io.hpp"
#include "test_util.hpp"

namespace mosaic::test {
namespace {

class GivenInputs : public ScratchDirTest {
 protected:
  GivenInputs() : ScratchDirTest("mosaic_inputs_") {}

  // An .npy file as NumPy writes one: magic, version, little-endian header length, the dict
  // padded with spaces to a multiple of 64 bytes and ended by '\n', then the data.
  std::string npy(const std::string& name, const std::string& descr, const std::string& shape, const std::string& data,
                  int major = 1, const std::string& order = "False") {
    std::string dict = "{'descr': '" + descr + "', 'fortran_order': " + order + ", 'shape': " + shape + ", }";
    const size_t prefix = major == 1 ? 10 : 12;
    while ((prefix + dict.size() + 1) % 64) dict += ' ';
    dict += '\n';
    std::string bytes = std::string("\x93NUMPY", 6) + static_cast<char>(major) + '\0';
    const uint32_t n = static_cast<uint32_t>(dict.size());
    for (size_t i = 0; i < (major == 1 ? 2u : 4u); ++i) bytes += static_cast<char>((n >> (8 * i)) & 0xff);
    const std::string file = path(name);
    std::ofstream(file, std::ios::binary) << bytes << dict << data;
    return file;
  }
  template <typename T>
  static std::string raw(std::initializer_list<T> v) {
    std::string s(v.size() * sizeof(T), '\0');
    std::memcpy(s.data(), std::data(v), s.size());
    return s;
  }
  // y = Trilu(x, k) + 0 * mask (float): k is a position (it must be given), the mask a value.
  std::string trilu_model() {
    Graph g;
    g.name = "trilu";
    g.opset = 17;
    g.inputs = {ValueInfo{"x", DType::kF32, {3, 4}, {}, true}, ValueInfo{"k", DType::kI64, {}, {}, true},
                ValueInfo{"mask", DType::kI64, {3, 4}, {}, true}};
    add_node(g, make_node("Trilu"), {"x", "k"}, {"t"}, "tri");
    add_node(g, make_node("Cast", {{"to", Attribute::of_int(1)}}), {"mask"}, {"m"}, "cast");
    add_node(g, make_node("Mul"), {"m", "zero"}, {"mz"}, "mul");
    add_node(g, make_node("Add"), {"t", "mz"}, {"y"}, "add");
    Tensor zero = Tensor::empty({DType::kF32, {}});
    g.initializers["zero"] = zero;
    g.outputs.push_back(ValueInfo{"y", DType::kF32, {}, {}, false});
    const std::string file = path("trilu.onnx");
    EXPECT_TRUE(save_onnx(g, file).is_ok());
    return file;
  }
};

TEST_F(GivenInputs, NpyFilesReadAsNumPyWritesThem) {
  auto f = load_npy(npy("f.npy", "<f4", "(2, 3)", raw<float>({1, 2, 3, 4, 5, 6.5f})));
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->dtype(), DType::kF32);
  EXPECT_EQ(f->shape(), (Shape{2, 3}));
  EXPECT_EQ(f->f32()[5], 6.5f);
  auto d = load_npy(npy("d.npy", "<f8", "(3,)", raw<double>({0.1, -2, 1e30})));  // NumPy's default float
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->f32()[0], 0.1f);
  EXPECT_EQ(d->f32()[2], 1e30f);
  auto big = load_npy(npy("i.npy", "<i8", "()", raw<int64_t>({INT64_MAX}), 2));  // a scalar, format 2.0
  ASSERT_TRUE(big.ok()) << big.status().to_string();
  EXPECT_EQ(big->shape(), Shape{});
  EXPECT_EQ(big->i64()[0], INT64_MAX);
  auto i4 = load_npy(npy("i4.npy", "<i4", "(2,)", raw<int32_t>({-7, 2147483647})));
  ASSERT_TRUE(i4.ok()) << i4.status().to_string();
  EXPECT_EQ(i4->dtype(), DType::kI64);
  EXPECT_EQ(i4->i64()[0], -7);
  EXPECT_EQ(i4->i64()[1], 2147483647);
  auto b = load_npy(npy("b.npy", "|b1", "(1, 3)", std::string("\1\0\1", 3)));
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_EQ(static_cast<const uint8_t*>(b->data())[1], 0);
  auto e = load_npy(npy("e.npy", "<f4", "(0, 5)", ""));
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  EXPECT_EQ(e->numel(), 0);
}

TEST_F(GivenInputs, HostileNpyFilesAreRefusedNamingTheFile) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {npy("big_endian.npy", ">f4", "(2,)", raw<float>({1, 2})), "element type '>f4'"},
      {npy("u16.npy", "<u2", "(2,)", std::string(4, '\0')), "element type '<u2'"},
      {npy("fortran.npy", "<f4", "(2, 2)", raw<float>({1, 2, 3, 4}), 1, "True"), "Fortran order"},
      {npy("short.npy", "<f4", "(2, 3)", raw<float>({1, 2})), "is 24 bytes of data, the file has 8"},
      {npy("long.npy", "<f4", "(1,)", raw<float>({1, 2})), "is 4 bytes of data, the file has 8"},
      {npy("huge.npy", "<f4", "(1099511627776, 1099511627776)", ""), "above the largest Mosaic accepts"},
      {npy("neg.npy", "<f4", "(-1,)", ""), "not a tuple of sizes"},
      {npy("bool.npy", "|b1", "(2,)", std::string("\1\2", 2)), "bool element 1 is neither 0 nor 1"},
      {npy("noshape.npy", "<f4", "", ""), "the header lacks 'descr', 'fortran_order' or 'shape'"},
  };
  for (const auto& [file, why] : cases) {
    auto t = load_npy(file);
    ASSERT_FALSE(t.ok()) << file;
    EXPECT_NE(t.status().message().find(why), std::string::npos) << t.status().message();
    EXPECT_NE(t.status().message().find(file), std::string::npos) << t.status().message();
  }
  std::ofstream(path("text.npy")) << "x,y\n1,2\n";
  EXPECT_NE(load_npy(path("text.npy")).status().message().find("not an .npy file"), std::string::npos);
  // A header length of 4 GiB - 1 (format 2.0): refused before anything that size is read.
  std::ofstream(path("header.npy"), std::ios::binary) << std::string("\x93NUMPY\x02\x00\xff\xff\xff\xff", 12);
  EXPECT_NE(load_npy(path("header.npy")).status().message().find("a header of 4294967295 bytes"), std::string::npos);
  EXPECT_NE(load_npy(path("absent.npy")).status().message().find("no such file"), std::string::npos);
  // A FIFO blocked the open (no writer) until SIGKILL; a directory is not a file either.
  ASSERT_EQ(mkfifo(path("fifo.npy").c_str(), 0600), 0);
  EXPECT_NE(load_npy(path("fifo.npy")).status().message().find("not a regular file"), std::string::npos);
  std::filesystem::create_directories(path("dir.npy"));
  EXPECT_NE(load_npy(path("dir.npy")).status().message().find("not a regular file"), std::string::npos);
}

TEST_F(GivenInputs, MutatedNpyFilesLoadOrAreRefusedNeverACrash) {
  // 1,000 random edits of a valid file (bytes replaced, cut, inserted, the file truncated) from
  // the characters a header is made of: each loads or is an error naming the file. Under
  // MOSAIC_SANITIZE=1 this is the reader's ASan/UBSan check (20,000 mutations ran clean).
  const std::string base = npy("base.npy", "<f4", "(2, 3)", raw<float>({1, 2, 3, 4, 5, 6}));
  std::string good;
  {
    std::ifstream in(base, std::ios::binary);
    good.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const std::string alphabet = std::string("(),:' 0123456789-<>|fibuFalseTrue{}[]\"\x93\xff") + '\0';
  std::mt19937 rng(7);
  int loaded = 0;
  for (int i = 0; i < 1000; ++i) {
    std::string s = good;
    for (int e = 1 + static_cast<int>(rng() % 6); e > 0 && !s.empty(); --e) {
      const size_t at = rng() % s.size();
      const char c = alphabet[rng() % alphabet.size()];
      switch (rng() % 4) {
        case 0: s[at] = c; break;
        case 1: s.erase(at, 1 + rng() % 8); break;
        case 2: s.insert(at, std::string(1 + rng() % 8, c)); break;
        default: s.resize(at);
      }
    }
    const std::string file = path("m.npy");
    std::ofstream(file, std::ios::binary | std::ios::trunc) << s;
    auto t = load_npy(file);
    if (t.ok()) {
      ++loaded;
      EXPECT_EQ(static_cast<int64_t>(t->bytes()) <= static_cast<int64_t>(s.size()), true);
    } else {
      EXPECT_NE(t.status().message().find(file), std::string::npos) << t.status().message();
    }
  }
  EXPECT_GT(loaded, 0) << "some edits leave a valid file (padding, values)";
  EXPECT_LT(loaded, 400);
}

TEST_F(GivenInputs, APositionIsAskedForAndAGivenOneIsBoundAtLoad) {
  const std::string model = trilu_model();
  // k reaches Trilu's k, which must be known at load: no random value stands in for it.
  api::CommonOptions c;
  auto g = api::load_prepared(model, c, nullptr);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("input 'k': input 1 of node 'tri' (Trilu) reads it as a shape, axes or "
                                      "position, which must be known at load time; give its values with --input k=FILE"),
            std::string::npos)
      << g.status().message();
  // Given (k = -1 from an .npy file, x from a TensorProto): k is bound at load, x used as it is;
  // the mask is 0 or 1.
  Tensor x = Tensor::empty({DType::kF32, {3, 4}});
  for (int i = 0; i < 12; ++i) x.f32()[i] = static_cast<float>(i) + 1;
  ASSERT_TRUE(save_tensor_pb(x, "x", path("x.pb")).is_ok());
  c.inputs = {"k=" + npy("k.npy", "<i8", "()", raw<int64_t>({-1})), "x=" + path("x.pb")};
  PrepareReport pr;
  g = api::load_prepared(model, c, &pr);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  ASSERT_EQ(pr.notes.size(), 1u);
  EXPECT_EQ(pr.notes[0], "input 'k' bound at load to its file's int64[] (a shape, axes or position)");
  std::string described;
  auto made = api::model_inputs(g.value(), c, &described);
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  ASSERT_EQ(made->size(), 2u) << "x and the mask; k is a constant now";
  EXPECT_EQ(made->at(0).f32()[11], 12.f);
  for (int i = 0; i < 12; ++i) EXPECT_TRUE(made->at(1).i64()[i] == 0 || made->at(1).i64()[i] == 1);
  EXPECT_NE(described.find("'mask': 0 or 1 (a mask"), std::string::npos) << described;
  EXPECT_NE(described.find("'x' from its file"), std::string::npos) << described;
  // The values reach the kernels: Trilu keeps the upper triangle from the diagonal k = -1 on
  // (column >= row - 1), by hand.
  auto plan = Plan::build(g.value(), Placement::all_on("naive", {}), builtin_registry());
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  std::vector<Tensor> outs;
  ASSERT_TRUE(plan.value()->run(made.value(), &outs).is_ok());
  const float want[12] = {1, 2, 3, 4, 5, 6, 7, 8, 0, 10, 11, 12};
  for (int i = 0; i < 12; ++i) EXPECT_EQ(outs[0].f32()[i], want[i]) << i;
  // The CLI: refused (exit 2) without the file, timed with it; every backend agrees with naive.
  CmdResult r = mosaic("bench " + model + " --backends naive,im2col,onednn --iterations 1 --warmup 0 --no-peaks --no-db");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("give its values with --input k=FILE"), std::string::npos) << r.out;
  r = mosaic("bench " + model + " --backends naive,im2col,onednn --iterations 1 --warmup 0 --no-peaks --no-db --input " +
             c.inputs[0] + " --input " + c.inputs[1]);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("input 'k' bound at load"), std::string::npos) << r.out;
  r = mosaic("info " + model + " --input " + c.inputs[0]);
  EXPECT_EQ(r.code, 0) << r.out;
}

TEST_F(GivenInputs, AFileThatDoesNotFitItsInputIsRefused) {
  const std::string model = trilu_model();
  const std::string k = npy("k.npy", "<i8", "()", raw<int64_t>({0}));
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"k=" + npy("k2.npy", "<i8", "(2,)", raw<int64_t>({0, 1}))}, "the file holds int64[2], input 'k' is int64[]"},
      {{"k=" + npy("kf.npy", "<f4", "()", raw<float>({0}))}, "the file holds float32[], input 'k' is int64[]"},
      {{"k=" + k, "x=" + npy("x.npy", "<f4", "(2, 4)", std::string(32, '\0'))},
       "the file holds float32[2,4], input 'x' is float32[3,4]"},
      {{"k=" + k, "q=" + k}, "has no input 'q' (its inputs: 'x', 'k', 'mask')"},
      {{"k=" + k, "k=" + k}, "input 'k' is given twice"},
      {{"k"}, "expected NAME=FILE"},
      {{"k=" + path("absent.npy")}, "no such file"},
  };
  for (const auto& [specs, why] : cases) {
    api::CommonOptions c;
    c.inputs = specs;
    auto g = api::load_prepared(model, c, nullptr);
    ASSERT_FALSE(g.ok()) << specs.back();
    EXPECT_NE(g.status().message().find(why), std::string::npos) << g.status().message();
    EXPECT_NE(g.status().message().find("`inputs` '" + specs.back() + "'"), std::string::npos)
        << g.status().message();
  }
  // Against the bound shape once prepared: [3,4] at the model's batch, [2,4] at --batch 2.
  api::CommonOptions c;
  c.inputs = {"k=" + k, "x=" + npy("x3.npy", "<f4", "(3, 4)", std::string(48, '\0'))};
  auto g = api::load_prepared(model, c, nullptr);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  EXPECT_TRUE(api::model_inputs(g.value(), c).ok());
  c.batch = 2;  // the declared [3,4] fits the file at load; the bound [2,4] does not
  g = api::load_prepared(model, c, nullptr);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  auto made = api::model_inputs(g.value(), c);
  ASSERT_FALSE(made.ok());
  EXPECT_NE(made.status().message().find("the file holds float32[3,4], input 'x' is float32[2,4] (its shape as --batch "
                                         "and --shape bound it)"),
            std::string::npos)
      << made.status().message();
  // bench takes its inputs from one place.
  CmdResult r = mosaic("bench zoo:fmnist-cnn --backend naive --data synthetic:8,1,28,28,10 --input x=" + k +
                       " --iterations 1 --warmup 0 --no-peaks --no-db");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--data and --input both give the model's inputs"), std::string::npos) << r.out;
}

// Random inputs of other element types than float32, int64 and bool are written in their own
// type. They were written as int64 into every non-float32 buffer: a float16 model's input held
// 4 bytes of garbage per element and the rest of the buffer overran the heap (`bench` on
// tests/corpus/half's ResNet aborted in malloc), an int32 input of ids took every other
// element's high half, a uint8 one overran by 8 times.
TEST_F(GivenInputs, RandomInputsOfEveryElementTypeAreWrittenInTheirOwnType) {
  Graph g;
  g.name = "types";
  g.opset = 21;
  const std::vector<DType> floats = {DType::kF16, DType::kBF16, DType::kF64, DType::kF8E4M3FN};
  const std::vector<DType> integers = {DType::kI32, DType::kU8, DType::kI8, DType::kU16};
  Tensor table = Tensor::empty({DType::kF32, {10, 3}});
  g.initializers["table"] = table;
  std::vector<std::string> terms;
  for (size_t i = 0; i < floats.size() + integers.size(); ++i) {
    const bool is_float = i < floats.size();
    const DType t = is_float ? floats[i] : integers[i - floats.size()];
    const std::string x = "x" + std::to_string(i), c = "c" + std::to_string(i);
    g.inputs.push_back(ValueInfo{x, t, {64, 33}, {}, true});
    if (is_float || t != DType::kI32) {  // values: cast to float and summed
      add_node(g, make_node("Cast", {{"to", Attribute::of_int(1)}}), {x}, {c}, "cast" + std::to_string(i));
      add_node(g, make_node("ReduceSum", {{"keepdims", Attribute::of_int(0)}}), {c}, {c + "s"}, "sum" + std::to_string(i));
    } else {  // ids: rows of the table
      add_node(g, make_node("Gather"), {"table", x}, {c}, "gather");
      add_node(g, make_node("ReduceSum", {{"keepdims", Attribute::of_int(0)}}), {c}, {c + "s"}, "sum" + std::to_string(i));
    }
    terms.push_back(c + "s");
  }
  for (size_t i = 0; i < terms.size(); ++i) g.outputs.push_back(ValueInfo{terms[i], DType::kF32, {}, {}, false});
  const std::string model = path("types.onnx");
  ASSERT_TRUE(save_onnx(g, model).is_ok());
  api::CommonOptions c;
  auto prepared = api::load_prepared(model, c, nullptr);
  ASSERT_TRUE(prepared.ok()) << prepared.status().to_string();
  std::string described;
  auto made = api::model_inputs(prepared.value(), c, &described);
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  ASSERT_EQ(made->size(), floats.size() + integers.size());
  for (size_t i = 0; i < made->size(); ++i) {
    const Tensor& t = made->at(i);
    ASSERT_EQ(t.dtype(), prepared->inputs[i].dtype) << i;
    ASSERT_EQ(t.numel(), 64 * 33) << i;
    double lo = 1e300, hi = -1e300;
    int64_t odd_nonzero = 0;
    for (int64_t e = 0; e < t.numel(); ++e) {
      const double v = load_f64(t.dtype(), t.data(), e);
      lo = std::min(lo, v);
      hi = std::max(hi, v);
      odd_nonzero += e % 2 == 1 && v != 0;
    }
    const std::string what = std::string(dtype_name(t.dtype())) + " input " + std::to_string(i);
    if (i < floats.size()) {  // uniform in [0, 1), rounded once to the type (1 itself at 8 bits)
      EXPECT_GE(lo, 0) << what;
      EXPECT_LE(hi, 1) << what;
      EXPECT_GT(hi, 0.5) << what;
    } else if (t.dtype() == DType::kI32) {  // ids of the table's 10 rows, in every element
      EXPECT_GE(lo, 0) << what;
      EXPECT_LE(hi, 9) << what;
      EXPECT_GT(odd_nonzero, t.numel() / 4) << what;
    } else {  // masks: 0 or 1, in every element
      EXPECT_GE(lo, 0) << what;
      EXPECT_LE(hi, 1) << what;
      EXPECT_GT(odd_nonzero, t.numel() / 8) << what;
    }
  }
  EXPECT_NE(described.find("'x4': ids uniform in [0, 10)"), std::string::npos) << described;
  // The commands that make inputs run the model (every backend beside naive).
  CmdResult r = mosaic("bench " + model + " --backends naive,im2col,onednn --iterations 1 --warmup 0 --no-peaks --no-db");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("outputs match naive"), std::string::npos) << r.out;
  // A half-precision corpus model, as the abort was found.
  const std::string half = std::string(MOSAIC_SOURCE_DIR) + "/tests/corpus/half/cases/resnet_hf.torchscript.float16/model.onnx";
  r = mosaic("bench " + half + " --backends naive,onednn --iterations 1 --warmup 0 --no-peaks --no-db --json " +
             path("half.json"));
  EXPECT_EQ(r.code, 0) << r.out;
  // Its float16 nodes computed in float32 are said so, per backend, and per node in the JSON.
  EXPECT_NE(r.out.find("widened: 21 nodes on onednn computed their float16 tensors in a wider type"), std::string::npos)
      << r.out;
  const nlohmann::json doc = read_json(path("half.json"));
  EXPECT_EQ(doc["runs"][1]["nodes"][0]["widened_from"], "float16") << doc["runs"][1]["nodes"][0].dump();
  r = mosaic("plan " + half + " --backend im2col");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("(float16 widened)"), std::string::npos) << r.out;  // Real images (float32) fill a float16 input rounded once; an integer input of their shape
  // is refused by its type (it was refused by a shape equal to its own).
  r = mosaic("bench " + half + " --backends naive,onednn --data synthetic:16,3,32,32,10 --iterations 1 --warmup 0 "
             "--no-peaks --no-db");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("(real data, --data), rounded once to float16"), std::string::npos) << r.out;
  Graph ints;
  ints.name = "ints";
  ints.opset = 21;
  ints.inputs = {ValueInfo{"x", DType::kI32, {2, 1, 28, 28}, {}, true}};
  add_node(ints, make_node("Cast", {{"to", Attribute::of_int(1)}}), {"x"}, {"y"}, "cast");
  ints.outputs.push_back(ValueInfo{"y", DType::kF32, {}, {}, false});
  ASSERT_TRUE(save_onnx(ints, path("ints.onnx")).is_ok());
  r = mosaic("bench " + path("ints.onnx") + " --backends naive --data synthetic:16,1,28,28,10 --no-peaks --no-db");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("input 'x' is int32, which images (float32 values) do not fill"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace mosaic::test
