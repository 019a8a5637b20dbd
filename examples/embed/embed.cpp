// A program that embeds Mosaic through its library API (api/mosaic.hpp) rather than running
// the CLI: it loads plugins, verifies an ONNX test case on every backend, gradient-checks a
// model on BACKEND, and times the model on every backend, reading the reports it gets back.
//
//   mosaic_embed [--plugin LIB]... CASE_DIR MODEL BACKEND
//
// Exit code: 0 when the case passes where it runs (and runs somewhere), every tensor's
// gradient passes and every backend's outputs agree with the naive oracle; 1 when a check
// fails or is inconclusive; 2 on an error.
#include <cstdio>
#include <string>
#include <vector>

#include "api/mosaic.hpp"

namespace {

int error(const mosaic::Status& st) {
  std::fprintf(stderr, "mosaic_embed: error: %s\n", st.message().c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  namespace api = mosaic::api;
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--plugin" && i + 1 < argc) {
      if (mosaic::Status st = mosaic::load_plugin(argv[++i]); !st.is_ok()) return error(st);
    } else {
      positional.push_back(a);
    }
  }
  if (positional.size() != 3) {
    std::fprintf(stderr, "usage: mosaic_embed [--plugin LIB]... CASE_DIR MODEL BACKEND\n");
    return 2;
  }
  const std::string case_dir = positional[0], model = positional[1], backend = positional[2];
  // A backend built with Mosaic as a plugin (torch) is loaded when asked for, as the CLI does.
  if (mosaic::Status st = api::load_bundled_backends({backend}); !st.is_ok()) return error(st);
  std::printf("Mosaic %s (plugin interface %d), backends:", api::version(), api::plugin_api_version());
  for (const auto& b : mosaic::builtin_registry().backends()) std::printf(" %s", b.c_str());
  std::printf("\n");

  // 1. The ONNX test case on every backend: outputs against the expected ones.
  api::VerifyOptions v;
  v.paths = {case_dir};
  v.backend = "all";
  auto verified = api::verify(v);
  if (!verified.ok()) return error(verified.status());
  for (const auto& c : verified->cases)
    std::printf("verify %s on %s: %s %s\n", c.name.c_str(), c.backend.c_str(), api::case_verdict_name(c.verdict),
                c.detail.c_str());

  // 2. The model's gradients against finite differences.
  api::GradcheckRunOptions g;
  g.model = model;
  g.backend = backend;
  g.batch = 2;
  auto checked = api::gradcheck(g);
  if (!checked.ok()) return error(checked.status());
  for (const auto& t : checked->report.tensors)
    std::printf("gradcheck %s: %s (%d probes)\n", t.name.c_str(), mosaic::verdict_name(t.verdict), t.checked);
  std::printf("gradcheck on %s: %d passed, %d failed, %d inconclusive\n", checked->checked.c_str(), checked->passed,
              checked->failed, checked->inconclusive);

  // 3. The model timed on every registered backend, each checked against naive first.
  api::BenchOptions b;
  b.model = model;
  b.backends = mosaic::builtin_registry().backends();
  b.common.batch = 2;
  b.config.iterations = 3;
  b.config.warmup = 1;
  b.peaks = false;
  auto timed = api::bench(b);
  if (!timed.ok()) return error(timed.status());
  for (const auto& c : timed->report.configs)
    std::printf("bench %s: %.3f ms per batch, outputs %s naive\n", c.label.c_str(), c.median_ms,
                c.check_ok ? "agree with" : "DIFFER from");

  const bool ok = verified->failed == 0 && !verified->verified_nothing() && checked->exit_code() == 0 && timed->checks_ok;
  std::printf("%s\n", ok ? "all checks passed" : "a check did not pass");
  return ok ? 0 : 1;
}
