// Python files as CLI plugins (core/python_host.hpp): `--optimizer-plugin file.py` and
// `--plugin file.py` run through the Python package's host library, validated by the same
// optcheck and gradcheck verdicts as C++ plugins, and bad files are refused naming the file.
#include <gtest/gtest.h>

#include <fstream>

#include "test_util.hpp"

namespace mosaic::test {
namespace {

class PythonPlugins : public ScratchDirTest {
 protected:
  PythonPlugins() : ScratchDirTest("mosaic_pyplugins_") {}
  void SetUp() override {
#ifndef MOSAIC_PYTHON_HOST
    GTEST_SKIP() << "the Python package is not built (pybind11-dev, python3-dev)";
#endif
    ScratchDirTest::SetUp();
  }
  std::string write(const std::string& name, const std::string& text) {
    std::ofstream(path(name)) << text;
    return path(name);
  }
  static std::string swish() { return std::string(MOSAIC_SOURCE_DIR) + "/examples/python/swish_operator.py"; }
  std::string swish_case() {
    const CmdResult r = mosaic_shell("/usr/bin/python3 " + std::string(MOSAIC_SOURCE_DIR) +
                                     "/examples/plugin_custom_op/make_model.py " + path("swish"));
    return r.code == 0 ? path("swish") : "";
  }
};

const char* kSgd = R"(import mosaic

class Sgd(mosaic.Optimizer):
    name = "py-sgd-file"
    state_names = ["momentum_buffer"]

    def step(self, p, g, state, t):
        c = self.config
        b = state["momentum_buffer"]
        d = g + c["weight_decay"] * p
        if t == 1:
            b[:] = d
        else:
            b *= c["momentum"]
            b += (1 - c["dampening"]) * d
        d = d + c["momentum"] * b if c["nesterov"] else b
        p -= PLANT * self.lr * d
)";

std::string sgd(const std::string& plant) {
  std::string s = kSgd;
  s.replace(s.find("PLANT"), 5, plant);
  return s;
}

TEST_F(PythonPlugins, AnOptimizerFileIsValidatedByOptcheckAndTrains) {
  CmdResult r = mosaic("optcheck --optimizer-plugin " + write("sgd.py", sgd("1.0")) + " --reference sgd --model none");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("optcheck py-sgd-file against sgd"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("FAIL"), std::string::npos) << r.out;
  // A planted bug (steps 1% too long) fails the trajectories.
  r = mosaic("optcheck --optimizer-plugin " + write("bad.py", sgd("1.01")) + " --reference sgd --model none");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("FAIL  trajectory"), std::string::npos) << r.out;
  // Under --threads 2: the step takes the GIL, the kernels use both threads.
  r = mosaic("train zoo:fmnist-cnn --optimizer-plugin " + path("sgd.py") + " --lr 0.05 --steps 5 --batch 16 --no-eval "
             "--threads 2");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("py-sgd-file, lr 0.05"), std::string::npos) << r.out;
}

TEST_F(PythonPlugins, AnOperatorFileVerifiesGradchecksAndRunsInAMixedGraph) {
  const std::string dir = swish_case();
  if (dir.empty()) GTEST_SKIP() << "python3-onnx is needed to write the example model";
  CmdResult r = mosaic("verify " + dir + " --plugin " + swish() + " --backend all --fallback naive");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("PASSED swish [onednn]"), std::string::npos) << r.out;
  r = mosaic("gradcheck " + dir + "/model.onnx --plugin " + swish() + " --batch 2");
  EXPECT_EQ(r.code, 0) << r.out;
  r = mosaic("bench " + dir + "/model.onnx --plugin " + swish() +
             " --assign Conv=onednn,Gemm=im2col,*=naive --batch 8 --iterations 2 --warmup 0 --no-peaks --threads 2");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("check:   outputs match naive"), std::string::npos) << r.out;
  // A planted backward bug (the sigmoid's derivative forgotten) fails gradcheck.
  const std::string bad = write("bad_swish.py", "import sys\nsys.path.insert(0, '" + std::string(MOSAIC_SOURCE_DIR) +
                                                    "/examples/python')\n"
                                                    "import numpy as np\nimport swish_operator\n\n"
                                                    "class BadSwish(swish_operator.Swish):\n"
                                                    "    def backward(self, inputs, outputs, grad_outputs):\n"
                                                    "        return (grad_outputs[0] / (1 + np.exp(-self.beta * inputs[0])),)\n");
  r = mosaic("gradcheck " + dir + "/model.onnx --plugin " + bad + " --batch 2");
  EXPECT_EQ(r.code, 1) << r.out;
}

TEST_F(PythonPlugins, BadFilesAreRefusedNamingTheFile) {
  CmdResult r = mosaic("bench zoo:fmnist-cnn --plugin " + path("missing.py"));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("plugin " + path("missing.py") + ": no such file"), std::string::npos) << r.out;
  const std::string raises = write("raises.py", "import mosaic\nraise RuntimeError('planted at import')\n");
  r = mosaic("bench zoo:fmnist-cnn --plugin " + raises);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("Python plugin " + raises + ": RuntimeError: planted at import"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("raises.py(2)"), std::string::npos) << r.out;  // the traceback
  const std::string empty = write("empty.py", "import mosaic\nx = 1\n");
  r = mosaic("bench zoo:fmnist-cnn --plugin " + empty);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("defines no mosaic.Operator subclass"), std::string::npos) << r.out;
  r = mosaic("optcheck --optimizer-plugin " + empty);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("defines no mosaic.Optimizer subclass"), std::string::npos) << r.out;
}

TEST_F(PythonPlugins, AnExceptionInAKernelIsAnErrorNamingTheNodeNotACrash) {
  const std::string dir = swish_case();
  if (dir.empty()) GTEST_SKIP() << "python3-onnx is needed to write the example model";
  const std::string raises = write("raising_swish.py", "import mosaic\n\nclass Swish(mosaic.Operator):\n"
                                                       "    op_type = 'Swish'\n    domain = 'com.example.mosaic'\n\n"
                                                       "    def forward(self, x):\n        raise KeyError('planted')\n");
  CmdResult r = mosaic("bench " + dir + "/model.onnx --plugin " + raises + " --backends naive --batch 2 --no-peaks");
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.code, -1) << r.out;  // exited, not killed by a signal
  EXPECT_NE(r.out.find("node 'swish1' (Swish)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Python Swish.forward raised KeyError: 'planted'"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace mosaic::test
