// Provenance: the model hash against the reference vectors and sha256sum, the recorded
// environment and forced OpenBLAS core, and a reproducer that reruns the same command.
#include <gtest/gtest.h>

#include <set>

#include <fstream>
#include <nlohmann/json.hpp>

#include "metrics/provenance.hpp"
#include "metrics/sha256.hpp"
#include "test_util.hpp"

namespace mosaic::test {
namespace {

TEST(Sha256, Fips180Vectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  // 56 bytes: the length no longer fits the first block.
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  // One million 'a', fed in uneven pieces.
  Sha256 h;
  const std::string chunk(997, 'a');
  size_t left = 1000000;
  while (left) {
    const size_t n = std::min(left, chunk.size());
    h.update(chunk.data(), n);
    left -= n;
  }
  EXPECT_EQ(h.hex_digest(), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  EXPECT_FALSE(sha256_file("/nonexistent/model.onnx").ok());
}

TEST(Provenance, ShellQuoting) {
  EXPECT_EQ(shell_quote("zoo:alexnet-cifar"), "zoo:alexnet-cifar");
  EXPECT_EQ(shell_quote("a b"), "'a b'");
  EXPECT_EQ(shell_quote("it's"), "'it'\\''s'");
  EXPECT_EQ(shell_quote(""), "''");
  EXPECT_TRUE(is_recorded_env("OMP_NUM_THREADS"));
  EXPECT_TRUE(is_recorded_env("OPENBLAS_CORETYPE"));
  EXPECT_FALSE(is_recorded_env("HOME"));
}

TEST(Provenance, BenchRecordsModelHashEnvironmentAndAReproducerThatReruns) {
  const std::string dir = ::testing::TempDir();
  const std::string model = dir + "prov_model.onnx", json = dir + "prov.json", json2 = dir + "prov2.json";
  ASSERT_EQ(mosaic("export fmnist-cnn -o " + model).code, 0);
  CmdResult b = mosaic("bench " + model + " --batch 2 --backends im2col --warmup 1 --iterations 2 --seed 9 --json " + json);
  ASSERT_EQ(b.code, 0) << b.out;
  const auto j = read_json(json);
  const auto& p = j["provenance"];
  // The hash agrees with coreutils' sha256sum.
  CmdResult sum;
  {
    FILE* f = popen(("sha256sum " + model).c_str(), "r");
    char buf[128] = {0};
    ASSERT_TRUE(fgets(buf, sizeof buf, f));
    pclose(f);
    sum.out = std::string(buf).substr(0, 64);
  }
  EXPECT_EQ(p["run"]["model_sha256"], sum.out);
  EXPECT_EQ(p["run"]["seeds"]["input"], "9");
  EXPECT_EQ(p["machine"]["cores_online"].get<int>(), static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)));
  EXPECT_FALSE(p["machine"]["cpu_model"].get<std::string>().empty());
  EXPECT_EQ(p["build"]["git_commit"].get<std::string>().size() == 40 || p["build"]["git_commit"] == "unknown", true);
  for (const char* lib : {"OpenBLAS", "oneDNN", "Eigen", "ONNX", "protobuf"})
    EXPECT_FALSE(p["build"]["versions"][lib].get<std::string>().empty()) << lib;
  EXPECT_NE(b.out.find("reproduce: cd "), std::string::npos) << b.out;

  // The reproducer, run by a shell with --json pointed elsewhere, measures the same thing.
  std::string rerun = p["run"]["reproducer"];
  rerun.replace(rerun.find(json), json.size(), json2);
  ASSERT_EQ(std::system((rerun + " > /dev/null 2>&1").c_str()), 0) << rerun;
  const auto j2 = read_json(json2);
  EXPECT_EQ(j2["provenance"]["run"]["model_sha256"], p["run"]["model_sha256"]);
  EXPECT_EQ(j2["runs"][0]["nodes"].size(), j["runs"][0]["nodes"].size());
  EXPECT_EQ(j2["batch"], 2);
}

TEST(Provenance, ForcedOpenblasCoreIsFlagged) {
  const std::string json = ::testing::TempDir() + "prov_core.json";
  CmdResult b = mosaic("bench zoo:fmnist-cnn --batch 1 --backends naive --warmup 1 --iterations 1 --no-check --json " + json);
  ASSERT_EQ(b.code, 0) << b.out;
  // The im2col backend says which OpenBLAS core it uses and whether OPENBLAS_CORETYPE forced it.
  auto forced = [](const nlohmann::json& doc) {
    const auto& f = doc["provenance"]["machine"]["kernels_forced_by"];
    return f.contains("im2col") && f["im2col"] == nlohmann::json::array({"OPENBLAS_CORETYPE"});
  };
  const bool forced_here = std::getenv("OPENBLAS_CORETYPE") != nullptr;
  auto first = read_json(json);
  EXPECT_EQ(forced(first), forced_here);
  EXPECT_EQ(first["kernels"], first["provenance"]["machine"]["kernels"]);
  EXPECT_EQ(first["kernels"]["im2col"]["blas_core"].get<std::string>().empty(), false) << first["kernels"];
  // Run it once each way, whatever this machine's environment is.
  const std::string bin = MOSAIC_BIN;
  ASSERT_EQ(std::system(("env OPENBLAS_CORETYPE=Haswell " + bin + " bench zoo:fmnist-cnn --batch 1 --backends naive "
                         "--warmup 1 --iterations 1 --no-check --json " + json + " > /dev/null 2>&1").c_str()), 0);
  auto j = read_json(json);
  EXPECT_TRUE(forced(j)) << j["provenance"]["machine"];
  EXPECT_EQ(j["kernels"]["im2col"]["blas_core"], "Haswell");  // what OpenBLAS was told to use
  EXPECT_EQ(j["provenance"]["run"]["environment"]["OPENBLAS_CORETYPE"], "Haswell");
  ASSERT_EQ(std::system(("env -u OPENBLAS_CORETYPE " + bin + " bench zoo:fmnist-cnn --batch 1 --backends naive "
                         "--warmup 1 --iterations 1 --no-check --json " + json + " > /dev/null 2>&1").c_str()), 0);
  j = read_json(json);
  EXPECT_FALSE(forced(j)) << j["provenance"]["machine"];
  EXPECT_TRUE(j["provenance"]["run"]["environment"].find("OPENBLAS_CORETYPE") == j["provenance"]["run"]["environment"].end());
}

TEST(Provenance, OpenblasRunsTheVectorKernelsThisCpuHas) {
  // Debian 12's OpenBLAS does not know CPUs newer than its build (Emerald Rapids) and falls back
  // to its SSE3 kernels, "Prescott", 5x slower than AVX-512's on sgemm. The im2col backend
  // chooses again from cpuid; the user's OPENBLAS_CORETYPE is kept as given.
  const std::string json = ::testing::TempDir() + "prov_core_cpu.json";
  const std::string bin = MOSAIC_BIN;
  const std::string run = " " + bin + " bench zoo:fmnist-cnn --batch 1 --backends naive --warmup 1 --iterations 1 "
                          "--no-check --json " + json + " > /dev/null 2>&1";
  ASSERT_EQ(std::system(("env -u OPENBLAS_CORETYPE" + run).c_str()), 0);
  auto j = read_json(json);
  const auto& k = j["kernels"]["im2col"];
  const std::string core = k["blas_core"].get<std::string>();
  const std::set<std::string> before_avx2 = {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Atom",
                                             "Sandybridge", "Katmai", "Coppermine", "Northwood", "Banias"};
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (avx512 || avx2) {
    EXPECT_EQ(before_avx2.count(core), 0u) << "OpenBLAS runs " << core << " on a CPU with AVX2: " << k;
  }
  if (k.contains("blas_core_detected")) {
    const std::string took = k["blas_core_detected"].get<std::string>();
    EXPECT_EQ(before_avx2.count(took.substr(0, took.find(' '))), 1u) << k;  // replaced only a fallback
    EXPECT_EQ(core, avx512 ? "SkylakeX" : "Haswell") << k;
  }
  EXPECT_TRUE(j["provenance"]["run"]["environment"].find("OPENBLAS_CORETYPE") == j["provenance"]["run"]["environment"].end())
      << "the choice is not passed off as the user's variable";
  // The user's choice stands, even a slow one.
  ASSERT_EQ(std::system(("env OPENBLAS_CORETYPE=Prescott" + run).c_str()), 0);
  j = read_json(json);
  EXPECT_EQ(j["kernels"]["im2col"]["blas_core"], "Prescott") << j["kernels"];
  EXPECT_FALSE(j["kernels"]["im2col"].contains("blas_core_detected")) << j["kernels"];
}

}  // namespace
}  // namespace mosaic::test
