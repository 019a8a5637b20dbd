// Times one optimizer step over a model's parameters against a memory-bandwidth bound measured
// on the same arrays in the same run.
//
// An elementwise optimizer reads the parameter, its gradient and its k state buffers and writes
// back the parameter and the state: (2 + k) reads and (1 + k) writes per float. The bound is a
// kernel with exactly that traffic and next to no arithmetic (p += g, s_j += g), run over the
// same tensors with the same threads, interleaved with the optimizer's steps; the machine's
// bandwidth is the best such a kernel reached, and an optimizer's bound is its bytes at that
// bandwidth. STREAM-style copy and triad over one large array are printed for context.
//
// usage: mosaic_optimizer_step [--model alexnet-cifar] [--optimizers adam,sgd,...] [--runs 10]
// Prints a table and, with --json FILE, writes the figures.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "core/optimizer.hpp"
#include "frontends/zoo/zoo.hpp"

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// Arrays allocated and first touched by the threads that will use them.
std::vector<float*> alloc_like(const std::vector<int64_t>& sizes, float value) {
  std::vector<float*> out;
  for (int64_t n : sizes) {
    auto* a = static_cast<float*>(std::aligned_alloc(64, static_cast<size_t>((n * 4 + 63) / 64 * 64)));
    if (!a) {
      std::fprintf(stderr, "mosaic_optimizer_step: out of memory\n");
      std::exit(1);
    }
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) a[i] = value;
    out.push_back(a);
  }
  return out;
}

/// The same-traffic kernel: reads p, g and `state.size()` buffers, writes p and the buffers.
void traffic_kernel(const std::vector<float*>& p, const std::vector<float*>& g,
                    const std::vector<std::vector<float*>>& state, const std::vector<int64_t>& sizes) {
  for (size_t t = 0; t < sizes.size(); ++t) {
    float* pt = p[t];
    const float* gt = g[t];
    const int64_t n = sizes[t];
    const bool big = n >= (1 << 15);
    if (state.empty()) {
#pragma omp parallel for simd schedule(static) if (big)
      for (int64_t i = 0; i < n; ++i) pt[i] += 1e-7f * gt[i];
    } else if (state.size() == 1) {
      float* s0 = state[0][t];
#pragma omp parallel for simd schedule(static) if (big)
      for (int64_t i = 0; i < n; ++i) {
        s0[i] += gt[i];
        pt[i] += 1e-7f * s0[i];
      }
    } else {
      float* s0 = state[0][t];
      float* s1 = state[1][t];
#pragma omp parallel for simd schedule(static) if (big)
      for (int64_t i = 0; i < n; ++i) {
        s0[i] += gt[i];
        s1[i] += gt[i];
        pt[i] += 1e-7f * (s0[i] - s1[i]);
      }
    }
  }
}

struct Row {
  std::string optimizer;
  int state_buffers = 0;
  double step_ms = 0, bound_ms = 0, bandwidth_bound_ms = 0, bytes = 0;
};

/// STREAM-style context: copy and triad over one array of `total` floats, best of `runs`.
void print_stream(int64_t total, int runs) {
  std::vector<int64_t> one{total};
  std::vector<float*> x = alloc_like(one, 1.f), y = alloc_like(one, 2.f), z = alloc_like(one, 0.f);
  double copy = 1e30, triad = 1e30;
  for (int r = 0; r < runs + 1; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    float* xs = x[0];
    float* zs = z[0];
    const float* ys = y[0];
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < total; ++i) zs[i] = ys[i];
    double s = seconds_since(t0);
    if (r) copy = std::min(copy, s);
    t0 = std::chrono::steady_clock::now();
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < total; ++i) xs[i] = ys[i] + 0.5f * zs[i];
    s = seconds_since(t0);
    if (r) triad = std::min(triad, s);
  }
  std::printf("STREAM copy  %.1f GB/s (2 arrays counted)\nSTREAM triad %.1f GB/s (3 arrays counted)\n",
              8.0 * total / copy / 1e9, 12.0 * total / triad / 1e9);
  for (float* q : {x[0], y[0], z[0]}) std::free(q);
}

/// The table as JSON; false if the file cannot be written.
bool write_json(const std::string& json, const std::string& model, int64_t total, double bandwidth,
                const std::vector<Row>& rows) {
  std::ofstream f(json);
  f << "{\"model\": \"" << model << "\", \"parameters\": " << total << ", \"threads\": " << omp_get_max_threads()
    << ", \"bandwidth_gb_s\": " << bandwidth / 1e9 << ", \"rows\": [";
  for (size_t i = 0; i < rows.size(); ++i)
    f << (i ? ", " : "") << "{\"optimizer\": \"" << rows[i].optimizer << "\", \"state_buffers\": " << rows[i].state_buffers
      << ", \"bytes\": " << rows[i].bytes << ", \"step_ms\": " << rows[i].step_ms << ", \"same_traffic_ms\": " << rows[i].bound_ms
      << ", \"bandwidth_bound_ms\": " << rows[i].bandwidth_bound_ms
      << ", \"ratio\": " << rows[i].step_ms / rows[i].bandwidth_bound_ms << "}";
  f << "]}\n";
  return static_cast<bool>(f);
}

}  // namespace

int main(int argc, char** argv) {
  std::string model = "alexnet-cifar", json;
  std::vector<std::string> names{"adam", "adamw", "sgd", "momentum", "nesterov", "rmsprop", "adagrad"};
  int runs = 10;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "mosaic_optimizer_step: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--model") model = next();
    else if (a == "--runs") runs = std::max(1, std::atoi(next().c_str()));
    else if (a == "--json") json = next();
    else if (a == "--optimizers") {
      names.clear();
      std::string list = next();
      for (size_t pos = 0; pos <= list.size();) {
        const size_t comma = std::min(list.find(',', pos), list.size());
        if (comma > pos) names.push_back(list.substr(pos, comma - pos));
        pos = comma + 1;
      }
    } else {
      std::fprintf(stderr, "usage: mosaic_optimizer_step [--model NAME] [--optimizers a,b] [--runs N] [--json FILE]\n");
      return 2;
    }
  }
  auto graph = mosaic::build_zoo_model(model);
  if (!graph.ok()) {
    std::fprintf(stderr, "mosaic_optimizer_step: %s\n", graph.status().message().c_str());
    return 2;
  }
  std::vector<int64_t> sizes;
  int64_t total = 0;
  for (const auto& kv : graph->initializers)
    if (kv.second.dtype() == mosaic::DType::kF32) sizes.push_back(kv.second.numel()), total += kv.second.numel();
  graph = mosaic::Graph();  // only the sizes are needed

  std::vector<float*> p = alloc_like(sizes, 0.5f), g = alloc_like(sizes, 1e-3f);
  std::vector<std::vector<float*>> state{alloc_like(sizes, 0.f), alloc_like(sizes, 0.f)};
  std::printf("model %s: %zu tensors, %lld parameters, %d threads\n", model.c_str(), sizes.size(),
              static_cast<long long>(total), omp_get_max_threads());

  print_stream(total, runs);

  // Every run times each optimizer's step and then its same-traffic kernel, so a slow phase
  // of the machine hits all of them alike; each keeps its best time.
  std::vector<Row> rows;
  std::vector<std::unique_ptr<mosaic::Optimizer>> opts;
  for (const auto& name : names) {
    mosaic::OptimizerConfig cfg;
    cfg.lr = 1e-4;
    auto opt = mosaic::make_optimizer(name, cfg);
    if (!opt.ok()) {
      std::fprintf(stderr, "mosaic_optimizer_step: %s\n", opt.status().message().c_str());
      return 2;
    }
    Row row;
    row.optimizer = name;
    row.state_buffers = static_cast<int>(opt.value()->state_names().size());
    if (row.state_buffers > 2) {
      std::fprintf(stderr, "mosaic_optimizer_step: %s keeps %d state buffers; the bound kernel covers up to 2\n",
                   name.c_str(), row.state_buffers);
      return 2;
    }
    row.bytes = 4.0 * static_cast<double>(total) * (3 + 2 * row.state_buffers);
    row.step_ms = row.bound_ms = 1e30;
    rows.push_back(row);
    opts.push_back(std::move(opt.value()));
  }
  std::vector<const float*> grads(g.begin(), g.end());
  // Run 0 allocates the optimizers' state: not timed.
  for (int r = 0; r < runs + 1; ++r)
    for (size_t j = 0; j < rows.size(); ++j) {
      auto t0 = std::chrono::steady_clock::now();
      auto st = opts[j]->step(p, grads, sizes);
      const double s_step = seconds_since(t0);
      if (!st.is_ok()) {
        std::fprintf(stderr, "mosaic_optimizer_step: %s\n", st.message().c_str());
        return 1;
      }
      std::vector<std::vector<float*>> used(state.begin(), state.begin() + rows[j].state_buffers);
      t0 = std::chrono::steady_clock::now();
      traffic_kernel(p, g, used, sizes);
      const double s_bound = seconds_since(t0);
      if (r) {
        rows[j].step_ms = std::min(rows[j].step_ms, s_step * 1e3);
        rows[j].bound_ms = std::min(rows[j].bound_ms, s_bound * 1e3);
      }
    }
  opts.clear();  // frees the optimizers' state

  // The machine's bandwidth: the best any same-traffic kernel reached in this run. Each
  // optimizer's bound is its bytes at that bandwidth (stricter than its own kernel's time).
  double bandwidth = 0;
  for (const Row& r : rows) bandwidth = std::max(bandwidth, r.bytes / (r.bound_ms / 1e3));
  std::printf("\nmeasured memory bandwidth (best same-traffic kernel): %.1f GB/s\n\n", bandwidth / 1e9);
  std::printf("| optimizer | state buffers | bytes moved | step ms | same-traffic kernel ms | bandwidth bound ms | step / bound |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (Row& r : rows) {
    r.bandwidth_bound_ms = r.bytes / bandwidth * 1e3;
    std::printf("| %s | %d | %.2f GB | %.1f | %.1f | %.1f | %.2f |\n", r.optimizer.c_str(), r.state_buffers, r.bytes / 1e9,
                r.step_ms, r.bound_ms, r.bandwidth_bound_ms, r.step_ms / r.bandwidth_bound_ms);
  }
  if (!json.empty() && !write_json(json, model, total, bandwidth, rows)) {
    std::fprintf(stderr, "mosaic_optimizer_step: cannot write %s\n", json.c_str());
    return 1;
  }
  for (auto* v : {&p, &g, &state[0], &state[1]})
    for (float* q : *v) std::free(q);
  return 0;
}
