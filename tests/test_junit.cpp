// JUnit XML from verify and gradcheck: one test case per case/tensor, FAIL as <failure>,
// UNSUPPORTED and INCONCLUSIVE as <skipped>, counts that match the console's summary.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "metrics/junit.hpp"
#include "test_util.hpp"

namespace mosaic::test {
namespace {

std::string read(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

TEST(JUnit, EscapesMarkup) {
  EXPECT_EQ(xml_escape("a<b & 'c' \"d\">"), "a&lt;b &amp; &apos;c&apos; &quot;d&quot;&gt;");
  EXPECT_EQ(xml_escape(std::string("x\x01y")), "x y");  // control characters are not XML
}

TEST(JUnit, VerifyOneSuitePerBackendWithSkippedUnsupported) {
  const std::string xml = ::testing::TempDir() + "verify.xml";
  // test_bernoulli: Bernoulli is not supported (UNSUPPORTED on every backend); the other two pass.
  CmdResult r = mosaic("verify /usr/share/libonnx-testdata/data/node --filter '^test_(relu|bernoulli|conv_with_strides_padding)$' "
                       "--backend all --quiet --junit " + xml);
  ASSERT_EQ(r.code, 0) << r.out;
  const std::vector<std::string> backends = cli_all_backends();
  const size_t n = backends.size();
  EXPECT_NE(r.out.find(std::to_string(2 * n) + " passed, 0 failed, " + std::to_string(n) + " skipped"), std::string::npos)
      << r.out;
  const std::string x = read(xml);
  EXPECT_NE(x.find("<testsuites name=\"mosaic verify\" tests=\"" + std::to_string(3 * n) + "\" failures=\"0\" skipped=\"" +
                   std::to_string(n) + "\""),
            std::string::npos) << x;
  for (const auto& b : backends)
    EXPECT_NE(x.find("<testsuite name=\"verify [" + b + "]\" tests=\"3\" failures=\"0\" skipped=\"1\""),
              std::string::npos) << b << "\n" << x;
  EXPECT_EQ(count(x, "<testcase "), 3 * n);
  EXPECT_EQ(count(x, "<skipped message="), n);
  EXPECT_NE(x.find("operator Bernoulli is not supported"), std::string::npos);
  // Refused where it does not apply, before any work.
  r = mosaic("verify zoo:fmnist-cnn --per-node --junit " + xml);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("--junit applies to conformance cases"), std::string::npos) << r.out;
}

TEST(JUnit, GradcheckFailuresAndInconclusiveAreNeverPasses) {
  const std::string xml = ::testing::TempDir() + "gradcheck.xml";
  // A planted bug: the tensors it corrupts are <failure>s naming the verdict and worst probe.
  CmdResult r = mosaic("gradcheck zoo:fmnist-cnn --batch 2 --backend im2col --plant relu-mask-inverted --junit " + xml);
  EXPECT_EQ(r.code, 1) << r.out;
  std::string x = read(xml);
  EXPECT_NE(x.find("<testsuite name=\"gradcheck [im2col+relu-mask-inverted] zoo:fmnist-cnn\""), std::string::npos) << x;
  EXPECT_EQ(count(x, "<testcase "), 10u);  // forward, the input image and the 8 parameter tensors
  EXPECT_GT(count(x, "<failure message=\"FAIL"), 0u) << x;
  EXPECT_EQ(count(x, "<failure "), count(r.out, "\nFAIL "));
  // Steps so large that every probe crosses a kink: INCONCLUSIVE, a <skipped>, exit 3.
  r = mosaic("gradcheck zoo:fmnist-cnn --batch 2 --eps 10 --halvings 1 --junit " + xml);
  EXPECT_EQ(r.code, 3) << r.out;
  x = read(xml);
  EXPECT_GT(count(x, "<skipped message=\"INCONCLUSIVE"), 0u) << x;
  EXPECT_EQ(count(x, "<failure "), 0u);
}

}  // namespace
}  // namespace mosaic::test
