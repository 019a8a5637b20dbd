// api::train_model: the options' checks, the data-parallel group around the training loop
// (api/trainer.cpp), and the optimizer flags the CLI and Python share.
#include "api/train.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "api/models.hpp"
#include "api/option_rules.hpp"
#include "api/train_support.hpp"
#include "api/trainer.hpp"
#include "core/optimizer.hpp"
#include "distributed/data_parallel.hpp"

namespace mosaic::api {

std::string chance_level(double train_loss, double train_accuracy, int64_t classes) {
  if (classes < 2) return "";
  const double k = static_cast<double>(classes), chance_loss = std::log(k);
  if (train_loss < kChanceLossShare * chance_loss || train_accuracy > kChanceAccuracyFactor / k) return "";
  char b[200];
  std::snprintf(b, sizeof b, "after epoch 1, train loss %.4f >= %.2f x ln %lld (a uniform guess) and train accuracy %.4f <= %.1f/%lld: no better than chance",
                train_loss, kChanceLossShare, static_cast<long long>(classes), train_accuracy, kChanceAccuracyFactor,
                static_cast<long long>(classes));
  return b;
}

Status check_training_data(const TrainOptions& o, const DataSplits* preloaded) {
  MOSAIC_ASSIGN_OR_RETURN(const Graph g, load_trainable(o.model, o.batch));
  if (preloaded) return data_fits(g, o, *preloaded);
  MOSAIC_ASSIGN_OR_RETURN(const DataSplits d, load_training_data(g, o));
  return data_fits(g, o, d);
}

Expected<TrainResult> train_model(const TrainOptions& o, const DataSplits* preloaded, bool verbose) {
  // The CLI's and Python's ranges (api/option_rules.hpp); eps < 0 is the optimizer's default,
  // max_staleness < 0 unbounded.
  std::vector<std::pair<std::string, double>> numbers = {
      {"batch", o.batch},         {"epochs", o.epochs},     {"steps", o.steps},
      {"steps_per_epoch", o.steps_per_epoch}, {"eval_batch", o.eval_batch}, {"threads", o.threads},
      {"lr", o.opt.lr},           {"momentum", o.opt.momentum}, {"weight_decay", o.opt.weight_decay},
      {"data_repeat", o.data_repeat}, {"target_accuracy", o.target_accuracy}, {"bucket_mb", o.bucket_mb},
      {"sync_every", o.sync_every}, {"servers", o.servers}};
  if (o.opt.eps >= 0) numbers.push_back({"eps", o.opt.eps});
  if (o.max_staleness >= 0) numbers.push_back({"max_staleness", static_cast<double>(o.max_staleness)});
  MOSAIC_RETURN_IF_ERROR(check_numbers("train", numbers));
  if (o.distributed.empty()) return run_training(o, preloaded, verbose, nullptr);
  dist::DataParallelOptions dpo;
  dpo.mode = o.distributed;
  dpo.bucket_mb = o.bucket_mb;
  dpo.collective = o.collective;
  dpo.sync_every = o.sync_every;
  dpo.servers = o.servers;
  dpo.max_staleness = o.max_staleness;
  auto dp = dist::DataParallel::start(dpo, train_settings(o));
  if (!dp.ok()) return dp.status();
  dist::DataParallel& group = *dp.value();
  auto r = run_training(o, preloaded, verbose && group.rank() == 0, &group);
  // A rank that fails must not leave the others waiting in a collective: end the job.
  if (!r.ok() && (group.size() > 1 || group.is_server() || group.world_rank() > 0)) group.abort(r.status().message());
  if (r.ok()) r->rank = group.world_rank();
  return r;
}

Status apply_optimizer_flags(const std::vector<std::string>& plugins, const std::vector<std::string>& opt_params,
                             OptimizerConfig& config, std::string& optimizer) {
  std::string plugin_name;
  for (const auto& path : plugins) {
    MOSAIC_ASSIGN_OR_RETURN(plugin_name, load_optimizer_plugin(path));
  }
  if (optimizer.empty()) {
    if (plugins.size() > 1) return Status::invalid("several `plugins` given: say which with `optimizer`");
    optimizer = plugins.empty() ? "sgd" : plugin_name;
  }
  for (const auto& kv : opt_params) {
    const auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0)
      return Status::invalid("`opt` '" + kv + "': expected key=value");
    const std::string key = kv.substr(0, eq), value = kv.substr(eq + 1);
    char* end = nullptr;
    const double v = std::strtod(value.c_str(), &end);
    if (value.empty() || *end != '\0') return Status::invalid("`opt` " + key + ": '" + value + "' is not a number");
    // Built-ins take their standard keys (and refuse the ones they ignore); plugins get
    // every key in `extra` and refuse what they do not read.
    if (!builtin_hyperparameters(optimizer).empty()) {
      MOSAIC_RETURN_IF_ERROR(set_builtin_hyperparameter(optimizer, key, v, config).with_context("`opt`"));
    } else {
      config.extra[key] = v;
    }
  }
  return Status::ok();
}

}  // namespace mosaic::api
