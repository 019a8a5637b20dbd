#include "api/train_support.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "core/inputs.hpp"
#include "core/loss.hpp"
#include "frontends/data/text.hpp"

namespace mosaic::api {

std::string train_settings(const TrainOptions& o) {
  std::string s = o.model + "|" + o.data + "|" + o.backend + "|" + o.optimizer + "|" + o.lr_schedule + "|" + o.normalize;
  for (double v : {o.opt.lr, o.opt.momentum, o.opt.weight_decay, o.target_accuracy}) s += "|" + std::to_string(v);
  for (int64_t v : {o.batch, o.epochs, o.steps, o.eval_batch, o.steps_per_epoch, o.data_repeat,
                    static_cast<int64_t>(o.seed), static_cast<int64_t>(o.shuffle), static_cast<int64_t>(o.evaluate)})
    s += "|" + std::to_string(v);
  for (const auto& v : o.opt_params) s += "|opt:" + v;
  for (const auto& v : o.freeze) s += "|freeze:" + v;
  for (const auto& v : o.plugins) s += "|plugin:" + v;
  if (!o.assign.empty()) s += "|assign:" + o.assign;
  return s;
}

nlohmann::json checkpoint_settings(const TrainOptions& o, const std::string& optimizer, int ranks) {
  nlohmann::json s = {{"model", o.model},         {"data", o.data},           {"backend", o.backend},
          {"optimizer", optimizer},   {"lr", o.opt.lr},           {"lr_schedule", o.lr_schedule},
          {"batch", o.batch},         {"seed", o.seed},           {"shuffle", o.shuffle},
          {"normalize", o.normalize}, {"data_repeat", o.data_repeat}, {"steps_per_epoch", o.steps_per_epoch},
          {"ranks", ranks},           {"distributed", o.distributed}, {"opt", o.opt_params},
          {"freeze", o.freeze},       {"momentum", o.opt.momentum}, {"weight_decay", o.opt.weight_decay}};
  if (!o.assign.empty()) s["assign"] = o.assign;  // absent for one backend, as before --assign existed
  if (o.precision != "f32") s["precision"] = o.precision;  // likewise absent for float32
  return s;
}

void print_distributed(const nlohmann::json& d, int64_t batch) {
  const int ranks = d["workers"].get<int>();
  std::printf("data-parallel %s, %d workers, batch %lld per worker (global %lld): %.1f images/s global; ",
              d["mode"].get<std::string>().c_str(), ranks, static_cast<long long>(batch),
              static_cast<long long>(batch * ranks), d["images_per_s"].get<double>());
  if (d.contains("staleness"))
    std::printf("parameters %.1f MB on %d server(s)\n", d["parameter_bytes"].get<double>() / 1e6, d["servers"].get<int>());
  else if (d.contains("buckets"))
    std::printf("gradients %.1f MB in %zu bucket(s)\n", d["gradient_bytes"].get<double>() / 1e6, d["buckets"].size());
  else
    std::printf("parameters (%.1f MB) averaged %lld times (every %lld steps and at epoch ends)\n",
                d["parameter_bytes"].get<double>() / 1e6, d["syncs"].get<long long>(), d["sync_every"].get<long long>());
  for (const auto& r : d["per_rank"]) {
    if (r["role"] == "server") {
      const double updates = std::max(1.0, r["updates"].get<double>());
      std::printf("  rank %d (server): %.0f updates; per update: %.2f ms averaging and optimizer, %.2f ms communication; "
                  "sent %.2f MB, received %.2f MB (closed form %.2f and %.2f MB)\n",
                  r["rank"].get<int>(), r["updates"].get<double>(), 1e3 * r["update_s"].get<double>() / updates,
                  1e3 * r["comm_s"].get<double>() / updates, r["bytes_sent"].get<double>() / 1e6,
                  r["bytes_received"].get<double>() / 1e6, r["bytes_sent_expected"].get<double>() / 1e6,
                  r["bytes_received_expected"].get<double>() / 1e6);
      continue;
    }
    const double steps = std::max(1.0, d["steps"].get<double>());
    std::printf("  rank %d: %.1f images/s; per step: compute %.2f ms, communication %.2f ms during backward + %.2f ms "
                "exposed; sent %.2f MB, received %.2f MB (closed form %.2f and %.2f MB)\n",
                r["rank"].get<int>(), r["images_per_s"].get<double>(), 1e3 * r["compute_s"].get<double>() / steps,
                1e3 * r["comm_in_backward_s"].get<double>() / steps, 1e3 * r["comm_exposed_s"].get<double>() / steps,
                r["bytes_sent"].get<double>() / 1e6, r["bytes_received"].get<double>() / 1e6,
                r["bytes_sent_expected"].get<double>() / 1e6, r["bytes_received_expected"].get<double>() / 1e6);
  }
  if (d.contains("staleness")) {
    std::printf("  staleness of applied gradients (updates in between):");
    const auto& h = d["staleness"];
    for (size_t i = 0; i < h.size(); ++i)
      if (h[i].get<int64_t>()) std::printf(" %zu%s: %lld", i, i + 1 == h.size() ? "+" : "", h[i].get<long long>());
    std::printf("\n");
  }
  if (d.contains("first_epoch_s"))
    std::printf("  first epoch %.2f s, second epoch %.2f s\n", d["first_epoch_s"].get<double>(),
                d["second_epoch_s"].get<double>());
  if (!d["comm_hidden_share"].is_null())
    std::printf("  communication hidden behind backward: %.0f%%\n", 100 * d["comm_hidden_share"].get<double>());
  std::printf("  parameters identical on every worker: %s\n", d["parameters_identical"].get<bool>() ? "yes" : "NO");
}

void append_top1(const Tensor& logits, const Tensor& labels, std::vector<int64_t>* out) {
  const int64_t classes = logits.shape().back(), rows = labels.numel();
  const float* y = logits.f32();
  for (int64_t r = 0; r < rows; ++r) {
    if (labels.i64()[r] == kIgnoreIndex) continue;
    const float* row = y + r * classes;
    out->push_back(std::max_element(row, row + classes) - row);
  }
}

Expected<EvalCounts> evaluate_rows(Plan& plan, const Dataset& d, int64_t lo, int64_t hi, const Normalization& norm,
                                   const std::string& loss, std::vector<int64_t>* predictions) {
  const Graph& g = plan.graph();
  Tensor x = Tensor::empty(g.value_descs.at(g.inputs[0].name));
  const int64_t batch = x.dim(0);
  Shape ls = d.labels.shape();
  ls[0] = batch;
  Tensor labels = Tensor::empty({DType::kI64, ls});
  const size_t bytes = x.bytes() / static_cast<size_t>(batch);
  const int64_t per = x.numel() / batch, per_label = labels.numel() / batch;
  EvalCounts c;
  for (int64_t start = lo; start < hi; start += batch) {
    const int64_t m = std::min(batch, hi - start);
    std::memset(x.data(), 0, x.bytes());
    std::memcpy(x.data(), static_cast<const char*>(d.images.data()) + start * bytes, m * bytes);
    std::fill(labels.i64(), labels.i64() + labels.numel(), kIgnoreIndex);  // padding rows do not count
    std::copy(d.labels.i64() + start * per_label, d.labels.i64() + (start + m) * per_label, labels.i64());
    if (norm.enabled()) norm.apply(x.f32(), m, x.dim(1), per / x.dim(1));
    MOSAIC_RETURN_IF_ERROR(plan.run({x}, nullptr));
    MOSAIC_ASSIGN_OR_RETURN(LossValue l, class_loss(loss, plan.output(0), labels, nullptr));
    if (predictions) append_top1(plan.output(0), labels, predictions);
    c.correct += static_cast<double>(l.correct);
    c.rows += static_cast<double>(l.counted);
    c.loss_sum += l.loss * static_cast<double>(l.counted);
  }
  return c;
}

namespace {

/// What token data must fit: the model's int64 input [batch, T] and the vocabulary of the
/// embedding that reads it (core/inputs.hpp).
Expected<TokenTask> token_task(const Graph& g, const TrainOptions& o) {
  const TensorDesc& in = g.value_descs.at(g.inputs[0].name);
  if (in.dtype != DType::kI64 || in.shape.size() != 2)
    return Status::invalid("`data` " + o.data + " gives token ids [batch, T]; " + o.model + "'s input '" +
                           g.inputs[0].name + "' is " + dtype_name(in.dtype) + " " + shape_str(in.shape));
  TokenTask task;
  task.seq = in.shape[1];
  task.model_vocab = index_bound(g, g.inputs[0].name);
  if (task.model_vocab == 0)
    return Status::invalid(o.model + ": no Gather (embedding) reads input '" + g.inputs[0].name +
                           "', so its vocabulary is unknown");
  MOSAIC_ASSIGN_OR_RETURN(task.objective, parse_objective(o.objective));
  return task;
}

}  // namespace

Expected<DataSplits> load_training_data(const Graph& g, const TrainOptions& o) {
  if (!is_token_spec(o.data)) return load_data(o.data, o.seed);
  MOSAIC_ASSIGN_OR_RETURN(TokenTask task, token_task(g, o));  // sequences as long as the model's, ids within its vocabulary
  return load_token_data(o.data, task, o.seed);
}

Status data_fits(const Graph& g, const TrainOptions& o, const DataSplits& d) {
  const TensorDesc& in_desc = g.value_descs.at(g.inputs[0].name);
  Shape want{o.batch};
  want.insert(want.end(), d.train.images.shape().begin() + 1, d.train.images.shape().end());
  if (in_desc.shape != want || in_desc.dtype != d.train.images.dtype())
    return Status::invalid(o.model + ": input '" + g.inputs[0].name + "' is " + dtype_name(in_desc.dtype) + " " +
                           shape_str(in_desc.shape) + " but the data gives batches of " +
                           dtype_name(d.train.images.dtype()) + " " + shape_str(want));
  const Shape out_shape = g.value_descs.at(g.outputs[0].name).shape;
  Shape logits{o.batch};
  if (d.train.labels.rank() == 2) logits.push_back(d.train.labels.dim(1));
  logits.push_back(d.train.classes);
  if (out_shape != logits)
    return Status::invalid(o.model + ": output '" + g.outputs[0].name + "' is " + shape_str(out_shape) +
                           ", expected " + shape_str(logits) + " logits");
  return Status::ok();
}

std::string fixed4(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.4f", v);
  return b;
}

}  // namespace mosaic::api
