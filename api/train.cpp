#include "api/train.hpp"
#include "api/option_rules.hpp"
#include "ir/interrupt.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <regex>

#include "api/checkpoint.hpp"
#include "api/models.hpp"
#include "api/train_support.hpp"
#include "backends/registry.hpp"
#include "core/fuse.hpp"
#include "core/inputs.hpp"
#include "core/loss.hpp"
#include "core/prepare.hpp"
#include "core/schedule.hpp"
#include "distributed/data_parallel.hpp"
#include "frontends/zoo/zoo.hpp"
#include "frontends/data/dataset.hpp"
#include "frontends/data/text.hpp"
#include "frontends/onnx/onnx_io.hpp"
#include "metrics/progress.hpp"
#include "metrics/report.hpp"
#include "metrics/trace.hpp"

namespace mosaic::api {
namespace {

bool finite(double v) { return std::isfinite(v); }

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

/// o.data for the model `g` (prepared at o.batch): token data made for its sequence length
/// and vocabulary, else images.
Expected<DataSplits> load_training_data(const Graph& g, const TrainOptions& o) {
  if (!is_token_spec(o.data)) return load_data(o.data, o.seed);
  MOSAIC_ASSIGN_OR_RETURN(TokenTask task, token_task(g, o));  // sequences as long as the model's, ids within its vocabulary
  return load_token_data(o.data, task, o.seed);
}

/// Whether the data's batches fit the model's input and its labels the model's logits:
/// [batch, classes], or for token data one row per position [batch, T, vocabulary].
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

}  // namespace

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

namespace {

Expected<TrainResult> train_impl(const TrainOptions& o, const DataSplits* preloaded, bool verbose,
                                 dist::DataParallel* dp);

}  // namespace

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
  if (o.distributed.empty()) return train_impl(o, preloaded, verbose, nullptr);
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
  auto r = train_impl(o, preloaded, verbose && group.rank() == 0, &group);
  // A rank that fails must not leave the others waiting in a collective: end the job.
  if (!r.ok() && (group.size() > 1 || group.is_server() || group.world_rank() > 0)) group.abort(r.status().message());
  if (r.ok()) r->rank = group.world_rank();
  return r;
}

namespace {

Expected<TrainResult> train_impl(const TrainOptions& o, const DataSplits* preloaded, bool verbose,
                                 dist::DataParallel* dp) {
  MOSAIC_RETURN_IF_ERROR(set_num_threads(o.threads));
  const int ranks = dp ? dp->size() : 1;
  const auto& reg = builtin_registry();
  if (!reg.has_backend(o.backend)) return unknown_backend(o.backend);
  if (o.batch < 1 || o.epochs < 1) return Status::invalid("`batch` and `epochs` must be positive");
  if (o.data_repeat < 1) return Status::invalid("`data_repeat` must be at least 1");
  if (o.loss != "cross-entropy" && o.loss != "mse")
    return Status::invalid("`loss` must be cross-entropy or mse, got '" + o.loss + "'");
  if (!(o.target_accuracy >= 0 && o.target_accuracy <= 1))
    return Status::invalid("`target_accuracy` must be a fraction in [0, 1], got " + std::to_string(o.target_accuracy));
  if (o.target_accuracy > 0 && !o.evaluate)
    return Status::invalid("`target_accuracy` needs the test accuracy of each epoch; it excludes `evaluate` false");
  if (o.precision != "f32" && o.precision != "bf16")
    return Status::invalid("`precision` must be f32 or bf16, got '" + o.precision + "'");
  const Precision precision = o.precision == "bf16" ? Precision::kBF16 : Precision::kF32;
  OptimizerConfig oc = o.opt;
  std::string opt_name = o.optimizer;
  Status flags = apply_optimizer_flags(o.plugins, o.opt_params, oc, opt_name);
  if (!flags.is_ok()) return flags;
  auto opt = make_optimizer(opt_name, oc);
  if (!opt.ok()) return opt.status();
  auto schedule = make_schedule(o.lr_schedule, o.epochs);
  if (!schedule.ok()) return schedule.status();
  auto g = load_trainable(o.model, o.batch);
  if (!g.ok()) return g.status();
  DataSplits loaded;
  if (!preloaded) {
    MOSAIC_ASSIGN_OR_RETURN(loaded, load_training_data(g.value(), o));
  }
  const DataSplits* data = preloaded ? preloaded : &loaded;
  MOSAIC_RETURN_IF_ERROR(data_fits(g.value(), o, *data));
  const bool tokens = data->train.labels.rank() == 2;  // a label per position: [N, T]
  DataSplits repeated;
  if (o.data_repeat > 1) {  // the training set R times over (the data-parallel benchmark's dataset sizes)
    repeated.test = data->test;
    repeated.train = data->train;
    Shape is = data->train.images.shape(), ls = data->train.labels.shape();
    is[0] *= o.data_repeat;
    ls[0] *= o.data_repeat;
    repeated.train.images = Tensor::empty({data->train.images.dtype(), is});
    repeated.train.labels = Tensor::empty({DType::kI64, ls});
    const size_t ib = data->train.images.bytes(), lb = data->train.labels.bytes();
    for (int64_t r = 0; r < o.data_repeat; ++r) {
      std::memcpy(static_cast<char*>(repeated.train.images.data()) + r * ib, data->train.images.data(), ib);
      std::memcpy(static_cast<char*>(repeated.train.labels.data()) + r * lb, data->train.labels.data(), lb);
    }
    data = &repeated;
  }
  auto norm = parse_normalization(o.normalize, data->train);
  if (!norm.ok()) return norm.status();
  // The placement every node trains on: one backend, or a mixed one (--assign).
  Placement placement = Placement::all_on(o.backend, {"naive"});
  if (!o.assign.empty()) {
    MOSAIC_ASSIGN_OR_RETURN(placement, assign_placement(o.assign, {"naive"}));
    MOSAIC_RETURN_IF_ERROR(placement.check_names(g.value()));
  }
  Shape label_shape{o.batch};
  if (tokens) label_shape.push_back(data->train.labels.dim(1));
  PlanOptions po;
  po.training = true;
  po.seed = o.seed;
  po.deterministic = o.deterministic;
  po.precision = precision;
  // Parameters only a device reads live there with their gradients and optimizer state
  // (Plan::optimizer_step); data-parallel runs exchange gradients on the host and keep them all there.
  po.resident_parameters = dp == nullptr;
  po.loss_on_device = dp == nullptr;  // the logits stay where they are computed, the loss runs there
  for (const auto& pattern : o.freeze) {
    std::regex re;
    try {
      re = std::regex(pattern, std::regex::extended);
    } catch (const std::regex_error& e) {
      return Status::invalid("`freeze` '" + pattern + "': bad regular expression: " + e.what());
    }
    int matched = 0;
    for (const auto& kv : g->initializers)
      if (kv.second.dtype() == DType::kF32 && (kv.first == pattern || std::regex_match(kv.first, re)))
        po.frozen.insert(kv.first), ++matched;
    if (!matched)
      return Status::invalid("`freeze` '" + pattern + "' matches no parameter of " + o.model +
                                  " (see `mosaic info` for the names)");
  }
  // Zero padding folds into the convolutions (exact; activations stay separate nodes, as
  // kernels have no backward for a fused one).
  FuseOptions fo;
  fo.activations = fo.batch_norm = false;
  fo.apart = apart_in({placement});
  fuse_graph(g.value(), fo);
  auto plan = Plan::build(g.value(), placement, reg, po);
  if (!plan.ok()) return plan.status();
  Plan& P = *plan.value();
  dist::DetachOnExit detach{dp};  // before the plan(s) go
  // The plan trains its own copies of the float initializers; drop the loaded ones.
  g->release_float_initializers();
  TrainResult result;
  // --resume: the parameters, running statistics and optimizer state of the checkpoint.
  Checkpoint resumed;
  if (!o.resume.empty()) {
    MOSAIC_ASSIGN_OR_RETURN(resumed, read_checkpoint(o.resume));
    MOSAIC_RETURN_IF_ERROR(check_settings(o.resume, resumed, checkpoint_settings(o, opt_name, ranks)));
    MOSAIC_RETURN_IF_ERROR(restore_checkpoint(o.resume, resumed, P, *opt.value()));
    MOSAIC_RETURN_IF_ERROR(P.copy_host_state_to_devices());  // restored parameters and statistics on a device too
    if (resumed.header.value("epoch", int64_t{0}) >= o.epochs)
      return Status::invalid(o.resume + ": the checkpoint has already trained " +
                             std::to_string(resumed.header.value("epoch", int64_t{0})) + " epoch(s); `epochs` " +
                             std::to_string(o.epochs) + " leaves nothing to do");
  }
  if (dp) MOSAIC_RETURN_IF_ERROR(dp->attach(P));  // same parameters everywhere: rank 0's
  if (dp && dp->is_server()) {  // a parameter server: update its shard until the workers stop
    MOSAIC_RETURN_IF_ERROR(dp->serve(*opt.value()));
    result.log = {{"schema", "mosaic.train/1"}, {"distributed", dp->report(0, 0)}};
    return result;
  }
  for (const auto& s : P.steps())
    if (s.fell_back())
      result.fallbacks.push_back(P.node(s).name + " (" + P.node(s).op_type + ") trains on " + s.backend + ": " +
                                 s.fallback_reason);
  if (verbose)
    for (const auto& f : result.fallbacks) std::cout << "fallback: " << f << "\n";
  std::vector<ParamRef> params = P.parameters();

  // Evaluation plan over the same parameter buffers (kernels do not prepack them).
  // No larger than the test set: padding a few images to a big batch wastes a whole pass.
  const int64_t eval_batch = std::max<int64_t>(1, std::min(o.eval_batch, data->test.size()));
  auto eval_graph = load_trainable(o.model, eval_batch);
  if (!eval_graph.ok()) return eval_graph.status();
  // The plan's float initializers as the host holds them: parameters (a resident one's host
  // mirror, current after copy_device_state_to_host) and running statistics, which training
  // updates too.
  std::vector<std::pair<std::string, Tensor>> host_floats;
  for (const auto& v : P.values())
    if (v.is_const && !v.device && v.desc.dtype == DType::kF32 && eval_graph->initializers.count(v.name))
      host_floats.emplace_back(v.name, v.tensor);
  for (const auto& [name, t] : host_floats) eval_graph->initializers[name] = t;
  FuseOptions eval_fo;
  eval_fo.batch_norm = false;  // the evaluation reads the training plan's live parameters
  fuse_graph(eval_graph.value(), eval_fo);
  PlanOptions eo;
  eo.shared_weights = true;
  eo.precision = precision;
  auto eval = Plan::build(eval_graph.value(), placement, reg, eo);
  if (!eval.ok()) return eval.status();

  // Data-parallel: each rank evaluates its contiguous share of the set; the counts are summed.
  // Accuracy and loss over the scored rows: images, or (token data) positions not ignored.
  struct Evaluation {
    double accuracy = 0, loss = 0;
  };
  // `predictions`, if given, receives the top-1 class of every scored row, in order.
  auto evaluate_on = [&](Plan& plan, const Dataset& d, std::vector<int64_t>* predictions) -> Expected<Evaluation> {
    const int64_t rank = dp ? dp->rank() : 0, lo = d.size() * rank / ranks, hi = d.size() * (rank + 1) / ranks;
    MOSAIC_ASSIGN_OR_RETURN(EvalCounts c, evaluate_rows(plan, d, lo, hi, norm.value(), o.loss, predictions));
    double sums[3] = {c.correct, c.rows, c.loss_sum};  // correct, scored rows, loss x rows
    if (dp) dp->sum(sums, 3);
    if (sums[1] == 0) return Evaluation{};
    return Evaluation{sums[0] / sums[1], sums[2] / sums[1]};
  };
  auto evaluate = [&](const Dataset& d) { return evaluate_on(*eval.value(), d, nullptr); };

  BatchIterator it(data->train, o.batch, o.shuffle, o.seed);
  it.set_normalization(norm.value());
  if (dp) it.set_shard(dp->rank(), ranks);  // one shared order per epoch; this rank's slice of each global batch
  const int64_t first_epoch = resumed.header.value("epoch", int64_t{0}) + 1;
  for (int64_t e = 1; e < first_epoch; ++e) it.start_epoch();  // the shuffles of the epochs already trained
  Shape batch_shape = data->train.images.shape();  // [batch, ...] as data_fits checked against the input
  batch_shape[0] = o.batch;
  Prefetcher loader(it, {data->train.images.dtype(), batch_shape}, label_shape, o.prefetch);
  nlohmann::json& log = result.log;
  log = {{"schema", "mosaic.train/1"}, {"model", o.model}, {"data", o.data}, {"backend", o.backend}, {"optimizer", opt_name},
                        {"lr", o.opt.lr}, {"batch", o.batch}, {"seed", o.seed}, {"shuffle", o.shuffle},
                        {"ranks", ranks}, {"global_batch", o.batch * ranks}, {"data_repeat", o.data_repeat}};
  log["provenance"] = provenance_json(run_provenance(o.model, {{"data", std::to_string(o.seed)}}));
  log["steps"] = nlohmann::json::array();
  log["epochs"] = nlohmann::json::array();
  log["normalize"] = o.normalize;
  if (tokens) log["objective"] = o.objective;
  log["loss_function"] = o.loss;
  if (!o.assign.empty()) log["assign"] = o.assign;
  log["frozen"] = std::vector<std::string>(po.frozen.begin(), po.frozen.end());
  log["precision"] = o.precision;
  if (verbose && dp) {
    std::printf("data-parallel (%s): %d %s x batch %lld = global batch %lld", dp->mode().c_str(), ranks,
                dp->servers() ? "workers" : "ranks", static_cast<long long>(o.batch), static_cast<long long>(o.batch * ranks));
    if (dp->servers()) std::printf(", and %d parameter server(s)", dp->servers());
    std::printf("\n");
  }
  if (verbose)
    std::printf("training %s on %s with %s: %s, lr %g, batch %lld, %lld batches per epoch, %zu parameter "
                "tensors (%zu frozen)\n",
                o.model.c_str(), o.data.c_str(), (o.assign.empty() ? "backend " + o.backend : "placement " + placement.str()).c_str(),
                opt_name.c_str(), oc.lr, static_cast<long long>(o.batch * ranks),
              static_cast<long long>(it.batches_per_epoch()), params.size(), po.frozen.size());
  log["classes"] = data->train.classes;
  // --trace: every step's nodes (forward and backward), stages and data loading, per epoch.
  TraceRecorder recorder;
  TraceRecorder* trace = o.trace.empty() ? nullptr : &recorder;
  if (trace) trace->begin_config("train " + o.backend, P);
  int64_t step = 0;
  bool stopping = false;  // SIGINT/SIGTERM (every rank of a job agrees on it)
  std::string diverged;
  double train_seconds = 0;  // training time so far, evaluation excluded (time-to-accuracy)
  nlohmann::json reached;    // the first epoch at --target-accuracy
  if (!o.resume.empty()) {  // continue the log, the step count and the clocks
    step = resumed.header.value("step", int64_t{0});
    log["steps"] = resumed.header.value("log_steps", nlohmann::json::array());
    log["epochs"] = resumed.header.value("log_epochs", nlohmann::json::array());
    train_seconds = resumed.header.value("train_seconds", 0.0);
    reached = resumed.header.value("reached", nlohmann::json());
    log["resumed_from"] = {{"checkpoint", o.resume}, {"epoch", first_epoch - 1}, {"step", step}};
    if (verbose)
      std::printf("resumed from %s: %lld epoch(s), %lld steps done\n", o.resume.c_str(),
                  static_cast<long long>(first_epoch - 1), static_cast<long long>(step));
  }
  // Per-step schedules (warmup-linear) need the run's length in steps.
  const int64_t per_epoch = o.steps_per_epoch > 0 ? std::min(o.steps_per_epoch, it.batches_per_epoch()) : it.batches_per_epoch();
  const int64_t total_steps = o.steps > 0 ? std::min(o.steps, per_epoch * o.epochs) : per_epoch * o.epochs;
  for (int64_t epoch = first_epoch; epoch <= o.epochs && diverged.empty(); ++epoch) {
    opt.value()->set_lr(schedule.value()->lr(o.opt.lr, epoch - 1));
    loader.start_epoch();
    const int64_t t0 = now_ns();
    const int64_t load0 = loader.load_ns(), wait0 = loader.wait_ns();
    double loss_sum = 0;
    // seen: the scored rows behind the losses (images, or token positions not ignored);
    // trained: all workers' samples (images or sequences)
    int64_t correct = 0, seen = 0, trained = 0;
    Progress progress(o.progress_label + "epoch " + std::to_string(epoch) + "/" + std::to_string(o.epochs));
    int64_t epoch_steps = it.batches_per_epoch();
    if (o.steps_per_epoch > 0) epoch_steps = std::min(epoch_steps, o.steps_per_epoch);
    for (int64_t b = 0; b < it.batches_per_epoch(); ++b) {
      if (o.steps > 0 && step >= o.steps) break;
      // SIGINT/SIGTERM: the finished epochs are kept, this one dropped. The ranks of a job agree
      // on it with the step's loss sum below (ps-async workers, which share no sums, each stop
      // at their next step).
      if ((!dp || !dp->global_losses()) && interrupted()) stopping = true;
      if (stopping) break;
      if (o.steps_per_epoch > 0 && b >= o.steps_per_epoch) break;
      if ((verbose || !o.progress_label.empty()) && b > 0) {
        char loss_text[48];
        std::snprintf(loss_text, sizeof loss_text, "train loss %.4f", loss_sum / static_cast<double>(b));
        progress.update(static_cast<double>(b), static_cast<double>(epoch_steps), loss_text);
      }
      if (schedule.value()->per_step()) opt.value()->set_lr(schedule.value()->lr_at_step(o.opt.lr, step, total_steps));
      const Tensor *images = nullptr, *labels = nullptr;
      const int64_t td = trace ? now_ns() : 0;
      loader.next(b, &images, &labels);
      const int64_t tf = trace ? now_ns() : 0;
      Status st = P.run({*images}, nullptr, trace, step);
      if (!st.is_ok()) return st;
      const int64_t tl = trace ? now_ns() : 0;
      auto loss = P.loss(o.loss, *labels);  // where the logits are (PlanOptions::loss_on_device)
      if (!loss.ok()) return loss.status();
      if (dp && dp->global_losses()) {  // the global batch's loss (mean of the ranks' means over equal shares) and hits
        // and whether a rank was asked to stop: all of them then drop this step together.
        double sums[4] = {loss->loss, static_cast<double>(loss->correct), static_cast<double>(loss->counted),
                          interrupted() ? 1.0 : 0.0};
        dp->sum(sums, 4);
        loss->loss = sums[0] / ranks;
        loss->correct = static_cast<int64_t>(sums[1]);
        loss->counted = static_cast<int64_t>(sums[2]);
        if (sums[3] > 0) {
          stopping = true;
          break;
        }
      }
      const int64_t tb = trace ? now_ns() : 0;
      ++step;
      log["steps"].push_back({{"step", step}, {"epoch", epoch}, {"loss", loss->loss}, {"lr", opt.value()->lr()}});
      if (!finite(loss->loss)) {
        diverged = "diverged at epoch " + std::to_string(epoch) + " step " + std::to_string(step);
        // ps-async workers do not share losses: the others cannot know; end the job.
        if (dp && !dp->global_losses()) dp->abort(diverged + " (this worker's loss)");
        break;
      }
      loss_sum += loss->loss;
      correct += loss->correct;
      seen += loss->counted;
      trained += o.batch * ranks;
      if (dp) dp->begin_step(opt.value()->lr());
      st = P.backward_from_loss(trace, step - 1, dp ? dp->listener() : nullptr);
      if (!st.is_ok()) return st;
      if (dp) dp->finish_step();  // every gradient is now the mean over ranks
      const int64_t to = trace ? now_ns() : 0;
      if (!dp || dp->workers_update()) st = P.optimizer_step(*opt.value());  // else the servers did
      if (dp) dp->after_update(step, false);  // model averaging, every k steps
      if (trace) {
        const int64_t te = now_ns();
        trace->span("step", "iteration", td, te, step - 1);
        trace->span("data loading (waited)", "stage", td, tf, step - 1);
        trace->span("forward", "stage", tf, tl, step - 1);
        trace->span("loss", "stage", tl, tb, step - 1);
        trace->span("backward", "stage", tb, to, step - 1);
        trace->span("optimizer step", "stage", to, te, step - 1);
      }
      if (!st.is_ok()) return st;
    }
    progress.finish();
    if (dp && diverged.empty() && !stopping) dp->after_update(step, true);  // model averaging: one model before evaluation
    const double secs = static_cast<double>(now_ns() - t0) / 1e9;
    train_seconds += secs;
    if (stopping) {
      log["interrupted"] = true;
      if (verbose) std::printf("interrupted during epoch %lld: the %zu finished epoch(s) are kept\n",
                               static_cast<long long>(epoch), log["epochs"].size());
      break;
    }
    // Data loading: the loader's busy time, and the part the training thread waited for.
    const double load_s = static_cast<double>(loader.load_ns() - load0) / 1e9;
    const double wait_s = static_cast<double>(loader.wait_ns() - wait0) / 1e9;
    MOSAIC_RETURN_IF_ERROR(P.copy_device_state_to_host());  // what the evaluation and the checks below read
    for (const auto& [name, t] : host_floats)
      for (int64_t i = 0; i < t.numel() && diverged.empty(); ++i)
        if (!std::isfinite(t.f32()[i]))
          diverged = "diverged at epoch " + std::to_string(epoch) + " step " + std::to_string(step) + " (weights)";
    if (!diverged.empty()) break;
    Expected<Evaluation> test = Evaluation{-1.0, 0.0};
    const int64_t te0 = now_ns();
    if (o.evaluate) test = evaluate(data->test);
    if (trace) {
      trace->span("epoch " + std::to_string(epoch), "epoch", t0, te0, step - 1);
      if (o.evaluate) trace->span("evaluate", "epoch", te0, now_ns(), step - 1);
    }
    if (!test.ok()) return test.status();
    const Expected<double> test_acc = test->accuracy;
    const int64_t batches = trained / (o.batch * ranks);
    const double train_loss = batches ? loss_sum / batches : 0.0;
    const double train_acc = seen ? static_cast<double>(correct) / seen : 0.0;
    const double seq_len = tokens ? static_cast<double>(data->train.labels.dim(1)) : 1.0;
    if (verbose)
      std::printf("epoch %lld: %.2f s, %.0f %s/s%s, train loss %.4f, train acc %.4f, test acc %s%s; data loading "
                  "%.2f s, %.2f s of it exposed\n",
                  static_cast<long long>(epoch), secs, trained / secs, tokens ? "sequences" : "images",
                  tokens ? (" (" + std::to_string(static_cast<long long>(trained * seq_len / secs)) + " tokens/s)").c_str() : "",
                  train_loss, train_acc, o.evaluate ? fixed4(test_acc.value()).c_str() : "-",
                  o.evaluate && tokens ? (", test loss " + fixed4(test->loss)).c_str() : "", load_s, wait_s);
    if (epoch == 1 && batches >= kChanceMinSteps && o.loss == "cross-entropy") {  // chance is ln k for cross-entropy
      const std::string why = chance_level(train_loss, train_acc, data->train.classes);
      if (!why.empty()) {
        log["does_not_train"] = why;
        if (verbose) std::printf("does not train: %s\n", why.c_str());
      }
    }
    if (o.target_accuracy > 0 && reached.is_null() && test_acc.value() >= o.target_accuracy) {
      reached = {{"epoch", epoch}, {"step", step}, {"train_seconds", train_seconds}, {"test_accuracy", test_acc.value()}};
      if (verbose)
        std::printf("reached test accuracy %.4f >= %.4f after epoch %lld: %.2f s of training\n", test_acc.value(),
                    o.target_accuracy, static_cast<long long>(epoch), train_seconds);
    }
    log["epochs"].push_back({{"epoch", epoch},
                             {"lr", opt.value()->lr()},
                             {"seconds", secs},
                             {"images_per_s", trained / secs},
                             {"tokens_per_s", trained * seq_len / secs},
                             {"train_loss", train_loss},
                             {"train_accuracy", train_acc},
                             {"test_accuracy", o.evaluate ? nlohmann::json(test_acc.value()) : nlohmann::json()},
                             {"test_loss", o.evaluate ? nlohmann::json(test->loss) : nlohmann::json()},
                             {"data_load_s", load_s},
                             {"data_wait_s", wait_s}});
    if (!o.checkpoint.empty() && (!dp || dp->world_rank() == 0)) {
      if (dp) dp->gather_server_state(*opt.value());  // parameter servers hold the model and its optimizer state
      nlohmann::json header = {{"settings", checkpoint_settings(o, opt_name, ranks)},
                               {"epoch", epoch},
                               {"step", step},
                               {"train_seconds", train_seconds},
                               {"reached", reached},
                               {"log_steps", log["steps"]},
                               {"log_epochs", log["epochs"]}};
      MOSAIC_RETURN_IF_ERROR(write_checkpoint(o.checkpoint, std::move(header), P, *opt.value()));
    }
    if (o.on_epoch_done && (!dp || dp->world_rank() == 0)) o.on_epoch_done(log);
    if (o.steps > 0 && step >= o.steps) break;
  }
  // What the plan holds on each device: resident parameters with their gradients and
  // optimizer state, activations, resident constants.
  for (const auto& [device, bytes] : P.device_bytes()) {
    log["device_memory"][device] = device_bytes_json(bytes);
    if (verbose)
      std::printf("on %s: parameters %s, optimizer state %s, gradients %s, activations %s\n", device.c_str(),
                  format_bytes(static_cast<double>(bytes.parameters)).c_str(),
                  format_bytes(static_cast<double>(bytes.optimizer_state)).c_str(),
                  format_bytes(static_cast<double>(bytes.gradients)).c_str(),
                  format_bytes(static_cast<double>(bytes.activations)).c_str());
  }
  if (o.target_accuracy > 0) {
    log["time_to_accuracy"] = {{"target", o.target_accuracy}, {"reached", !reached.is_null()}, {"at", reached}};
    if (verbose && reached.is_null())
      std::printf("test accuracy %.4f not reached in %lld epoch(s)\n", o.target_accuracy, static_cast<long long>(o.epochs));
  }
  if (!diverged.empty()) {
    if (verbose) std::printf("%s\n", diverged.c_str());
    log["diverged"] = diverged;
    result.diverged = diverged;
  }
  if (precision == Precision::kBF16 && o.evaluate && diverged.empty() && !stopping) {
    // The trained weights in bf16 and in float32 inference: both accuracies and how often
    // their top-1 classes agree, over the whole test set.
    PlanOptions fo32 = eo;
    fo32.precision = Precision::kF32;
    MOSAIC_ASSIGN_OR_RETURN(auto eval32, Plan::build(eval_graph.value(), placement, reg, fo32));
    std::vector<int64_t> top16, top32;
    MOSAIC_ASSIGN_OR_RETURN(const Evaluation e16, evaluate_on(*eval.value(), data->test, &top16));
    MOSAIC_ASSIGN_OR_RETURN(const Evaluation e32, evaluate_on(*eval32, data->test, &top32));
    double agree[2] = {0, static_cast<double>(top16.size())};
    for (size_t i = 0; i < top16.size() && i < top32.size(); ++i) agree[0] += top16[i] == top32[i];
    if (dp) dp->sum(agree, 2);
    const double agreement = agree[1] > 0 ? agree[0] / agree[1] : 0.0;
    log["bf16"] = {{"test_accuracy_bf16", e16.accuracy}, {"test_accuracy_f32", e32.accuracy},
                   {"test_loss_bf16", e16.loss},         {"test_loss_f32", e32.loss},
                   {"top1_agreement", agreement},       {"rows", static_cast<int64_t>(agree[1])}};
    if (verbose)
      std::printf("bf16: test accuracy %.4f, and %.4f in float32 inference of the same weights; top-1 agreement "
                  "%.2f%% over %lld test %s\n",
                  e16.accuracy, e32.accuracy, 100 * agreement, static_cast<long long>(agree[1]), tokens ? "positions" : "images");
  }
  if (dp) {
    dp->stop();  // parameter servers: this worker is done
    log["distributed"] = dp->report(train_seconds, step * o.batch);
    log["distributed"]["parameters_identical"] = dp->parameters_identical(params);
    if (log["epochs"].size() >= 2) {  // the data-parallel benchmark's first- vs second-epoch time
      log["distributed"]["first_epoch_s"] = log["epochs"][0]["seconds"];
      log["distributed"]["second_epoch_s"] = log["epochs"][1]["seconds"];
    }
    if (verbose) print_distributed(log["distributed"], o.batch);
  }
  const bool rank0 = !dp || dp->rank() == 0;
  if (trace && rank0) {
    MOSAIC_RETURN_IF_ERROR(trace->write(o.trace));
    if (verbose) std::cerr << "trace: " << trace->events() << " events in " << o.trace << " (open in https://ui.perfetto.dev)\n";
  }
  if (!o.save.empty() && diverged.empty() && rank0) {
    // The model as loaded, with the plan's trained parameters and running statistics.
    Graph original;
    if (o.model.rfind("zoo:", 0) == 0) {
      auto z = build_zoo_model(o.model.substr(4));
      if (!z.ok()) return z.status();
      original = z.value();
    } else {
      auto l = load_onnx(o.model);
      if (!l.ok()) return l.status();
      original = l.value();
    }
    MOSAIC_RETURN_IF_ERROR(P.copy_device_state_to_host());  // parameters and running statistics on a device
    for (const auto& v : P.values())
      if (v.is_const && original.initializers.count(v.name) && v.desc.dtype == DType::kF32)
        original.initializers[v.name] = v.tensor.clone();
    MOSAIC_RETURN_IF_ERROR(save_onnx(original, o.save));
    if (verbose) std::printf("saved %s\n", o.save.c_str());
  }
  return result;
}

}  // namespace

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
