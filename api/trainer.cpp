// The training loop: a Trainer reads the options, builds the training and evaluation plans,
// then runs epochs of steps (forward, loss, backward, the data-parallel exchange, the
// optimizer step) and ends with the run's checks, reports and outputs. Each stage is one
// method, in the order run() calls them.
#include "api/trainer.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>

#include "api/checkpoint.hpp"
#include "api/models.hpp"
#include "api/train_support.hpp"
#include "api/util.hpp"
#include "backends/registry.hpp"
#include "core/events.hpp"
#include "core/fuse.hpp"
#include "core/loss.hpp"
#include "core/optimizer.hpp"
#include "core/schedule.hpp"
#include "distributed/data_parallel.hpp"
#include "frontends/onnx/onnx_io.hpp"
#include "frontends/zoo/zoo.hpp"
#include "ir/interrupt.hpp"
#include "metrics/progress.hpp"
#include "metrics/report.hpp"
#include "metrics/trace.hpp"

namespace mosaic::api {
namespace {

std::string fixed4(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.4f", v);
  return b;
}

/// Accuracy and loss over the scored rows: images, or (token data) positions not ignored.
struct Evaluation {
  double accuracy = 0, loss = 0;
};

/// One epoch's sums: the loss over steps, and the rows behind them. seen: the scored rows
/// (images, or token positions not ignored); trained: all workers' samples.
struct EpochSums {
  double loss_sum = 0;
  int64_t correct = 0, seen = 0, trained = 0;
};

class Trainer {
 public:
  Trainer(const TrainOptions& o, bool verbose, dist::DataParallel* dp)
      : o_(o), verbose_(verbose), dp_(dp), ranks_(dp ? dp->size() : 1), log_(result_.log) {}
  /// The plans go after the data-parallel group lets go of their parameters.
  ~Trainer() {
    if (dp_) dp_->detach();
  }
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  Expected<TrainResult> run(const DataSplits* preloaded) {
    MOSAIC_RETURN_IF_ERROR(check_options());
    MOSAIC_RETURN_IF_ERROR(load(preloaded));
    MOSAIC_RETURN_IF_ERROR(build_training_plan());
    MOSAIC_RETURN_IF_ERROR(resume_checkpoint());
    if (dp_) MOSAIC_RETURN_IF_ERROR(dp_->attach(*plan_));  // same parameters everywhere: rank 0's
    if (dp_ && dp_->is_server()) {  // a parameter server: update its shard until the workers stop
      MOSAIC_RETURN_IF_ERROR(dp_->serve(*opt_));
      log_ = {{"schema", "mosaic.train/1"}, {"distributed", dp_->report(0, 0)}};
      return std::move(result_);
    }
    MOSAIC_RETURN_IF_ERROR(build_evaluation_plan());
    start();
    MOSAIC_RETURN_IF_ERROR(run_epochs());
    MOSAIC_RETURN_IF_ERROR(finish());
    return std::move(result_);
  }

 private:
  /// The options train_model's number checks leave, the optimizer and the schedule.
  Status check_options() {
    const TrainOptions& o = o_;
    MOSAIC_RETURN_IF_ERROR(set_num_threads(o.threads));
    if (!builtin_registry().has_backend(o.backend)) return unknown_backend(o.backend);
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
    precision_ = o.precision == "bf16" ? Precision::kBF16 : Precision::kF32;
    oc_ = o.opt;
    opt_name_ = o.optimizer;
    MOSAIC_RETURN_IF_ERROR(apply_optimizer_flags(o.plugins, o.opt_params, oc_, opt_name_));
    MOSAIC_ASSIGN_OR_RETURN(opt_, make_optimizer(opt_name_, oc_));
    MOSAIC_ASSIGN_OR_RETURN(schedule_, make_schedule(o.lr_schedule, o.epochs));
    return Status::ok();
  }

  /// The model at the batch, the data (repeated --data-repeat times), its normalisation and
  /// the placement.
  Status load(const DataSplits* preloaded) {
    const TrainOptions& o = o_;
    MOSAIC_ASSIGN_OR_RETURN(graph_, load_trainable(o.model, o.batch));
    if (!preloaded) {
      MOSAIC_ASSIGN_OR_RETURN(loaded_, load_training_data(graph_, o));
    }
    data_ = preloaded ? preloaded : &loaded_;
    MOSAIC_RETURN_IF_ERROR(data_fits(graph_, o, *data_));
    tokens_ = data_->train.labels.rank() == 2;  // a label per position: [N, T]
    if (o.data_repeat > 1) {  // the training set R times over (the data-parallel benchmark's dataset sizes)
      repeated_.test = data_->test;
      repeated_.train = data_->train;
      Shape is = data_->train.images.shape(), ls = data_->train.labels.shape();
      is[0] *= o.data_repeat;
      ls[0] *= o.data_repeat;
      repeated_.train.images = Tensor::empty({data_->train.images.dtype(), is});
      repeated_.train.labels = Tensor::empty({DType::kI64, ls});
      const size_t ib = data_->train.images.bytes(), lb = data_->train.labels.bytes();
      for (int64_t r = 0; r < o.data_repeat; ++r) {
        std::memcpy(static_cast<char*>(repeated_.train.images.data()) + r * ib, data_->train.images.data(), ib);
        std::memcpy(static_cast<char*>(repeated_.train.labels.data()) + r * lb, data_->train.labels.data(), lb);
      }
      data_ = &repeated_;
    }
    MOSAIC_ASSIGN_OR_RETURN(norm_, parse_normalization(o.normalize, data_->train));
    // The placement every node trains on: one backend, or a mixed one (--assign).
    placement_ = Placement::all_on(o.backend, {"naive"});
    if (!o.assign.empty()) {
      MOSAIC_ASSIGN_OR_RETURN(placement_, assign_placement(o.assign, {"naive"}));
      MOSAIC_RETURN_IF_ERROR(placement_.check_names(graph_));
    }
    return Status::ok();
  }

  /// The parameters `freeze` names (a name or an extended regular expression each).
  Status freeze(PlanOptions& po) const {
    for (const auto& pattern : o_.freeze) {
      std::regex re;
      try {
        re = std::regex(pattern, std::regex::extended);
      } catch (const std::regex_error& e) {
        return Status::invalid("`freeze` '" + pattern + "': bad regular expression: " + e.what());
      }
      int matched = 0;
      for (const auto& kv : graph_.initializers)
        if (kv.second.dtype() == DType::kF32 && (kv.first == pattern || std::regex_match(kv.first, re)))
          po.frozen.insert(kv.first), ++matched;
      if (!matched)
        return Status::invalid("`freeze` '" + pattern + "' matches no parameter of " + o_.model +
                               " (see `mosaic info` for the names)");
    }
    return Status::ok();
  }

  Status build_training_plan() {
    po_.training = true;
    po_.seed = o_.seed;
    po_.deterministic = o_.deterministic;
    po_.precision = precision_;
    // Parameters only a device reads live there with their gradients and optimizer state
    // (Plan::optimizer_step); data-parallel runs exchange gradients on the host and keep them all there.
    po_.resident_parameters = dp_ == nullptr;
    po_.loss_on_device = dp_ == nullptr;  // the logits stay where they are computed, the loss runs there
    MOSAIC_RETURN_IF_ERROR(freeze(po_));
    // A training plan's rewrites, as bench's and plan's (fuse_options_for): zero padding folds
    // into the convolutions, a Relu before a MaxPool runs after it, SiLU becomes Swish where the
    // backend has it; activations stay separate nodes (kernels have no backward for a fused one).
    fuse_graph(graph_, fuse_options_for(placement_, builtin_registry(), true));
    MOSAIC_ASSIGN_OR_RETURN(plan_, Plan::build(graph_, placement_, builtin_registry(), po_));
    // The plan trains its own copies of the float initializers; drop the loaded ones.
    graph_.release_float_initializers();
    return Status::ok();
  }

  /// --resume: the parameters, running statistics and optimizer state of the checkpoint.
  Status resume_checkpoint() {
    if (o_.resume.empty()) return Status::ok();
    MOSAIC_ASSIGN_OR_RETURN(resumed_, read_checkpoint(o_.resume));
    MOSAIC_RETURN_IF_ERROR(check_settings(o_.resume, resumed_, checkpoint_settings(o_, opt_name_, ranks_)));
    MOSAIC_RETURN_IF_ERROR(restore_checkpoint(o_.resume, resumed_, *plan_, *opt_));
    MOSAIC_RETURN_IF_ERROR(plan_->copy_host_state_to_devices());  // restored parameters and statistics on a device too
    if (resumed_.header.value("epoch", int64_t{0}) >= o_.epochs)
      return Status::invalid(o_.resume + ": the checkpoint has already trained " +
                             std::to_string(resumed_.header.value("epoch", int64_t{0})) + " epoch(s); `epochs` " +
                             std::to_string(o_.epochs) + " leaves nothing to do");
    return Status::ok();
  }

  /// The evaluation plan over the same parameter buffers (kernels do not prepack them), at a
  /// batch no larger than the test set: padding a few images to a big batch wastes a whole pass.
  Status build_evaluation_plan() {
    for (const auto& s : plan_->steps())
      if (s.fell_back())
        result_.fallbacks.push_back(plan_->node(s).name + " (" + plan_->node(s).op_type + ") trains on " + s.backend +
                                    ": " + s.fallback_reason);
    if (verbose_)
      for (const auto& f : result_.fallbacks) std::cout << "fallback: " << f << "\n";
    const int64_t eval_batch = std::max<int64_t>(1, std::min(o_.eval_batch, data_->test.size()));
    MOSAIC_ASSIGN_OR_RETURN(eval_graph_, load_trainable(o_.model, eval_batch));
    // The plan's float initializers as the host holds them: parameters (a resident one's host
    // mirror, current after copy_device_state_to_host) and running statistics, which training
    // updates too.
    for (const auto& v : plan_->values())
      if (v.is_const && !v.device && v.desc.dtype == DType::kF32 && eval_graph_.initializers.count(v.name))
        host_floats_.emplace_back(v.name, v.tensor);
    for (const auto& [name, t] : host_floats_) eval_graph_.initializers[name] = t;
    FuseOptions eval_fo;
    eval_fo.batch_norm = false;  // the evaluation reads the training plan's live parameters
    fuse_graph(eval_graph_, eval_fo);
    eo_.shared_weights = true;
    eo_.precision = precision_;
    MOSAIC_ASSIGN_OR_RETURN(eval_, Plan::build(eval_graph_, placement_, builtin_registry(), eo_));
    return Status::ok();
  }

  /// Data-parallel: each rank evaluates its contiguous share of the set; the counts are
  /// summed. `predictions`, if given, receives the top-1 class of every scored row, in order.
  Expected<Evaluation> evaluate_on(Plan& plan, const Dataset& d, std::vector<int64_t>* predictions) {
    const int64_t rank = dp_ ? dp_->rank() : 0, lo = d.size() * rank / ranks_, hi = d.size() * (rank + 1) / ranks_;
    MOSAIC_ASSIGN_OR_RETURN(EvalCounts c, evaluate_rows(plan, d, lo, hi, norm_, o_.loss, predictions));
    double sums[3] = {c.correct, c.rows, c.loss_sum};  // correct, scored rows, loss x rows
    if (dp_) dp_->sum(sums, 3);
    if (sums[1] == 0) return Evaluation{};
    return Evaluation{sums[0] / sums[1], sums[2] / sums[1]};
  }

  /// The data order, the loader, the log's header and the state a resumed run continues.
  void start() {
    const TrainOptions& o = o_;
    it_ = std::make_unique<BatchIterator>(data_->train, o.batch, o.shuffle, o.seed);
    it_->set_normalization(norm_);
    if (dp_) it_->set_shard(dp_->rank(), ranks_);  // one shared order per epoch; this rank's slice of each global batch
    first_epoch_ = resumed_.header.value("epoch", int64_t{0}) + 1;
    for (int64_t e = 1; e < first_epoch_; ++e) it_->start_epoch();  // the shuffles of the epochs already trained
    Shape batch_shape = data_->train.images.shape();  // [batch, ...] as data_fits checked against the input
    batch_shape[0] = o.batch;
    Shape label_shape{o.batch};
    if (tokens_) label_shape.push_back(data_->train.labels.dim(1));
    loader_ = std::make_unique<Prefetcher>(*it_, TensorDesc{data_->train.images.dtype(), batch_shape}, label_shape,
                                           o.prefetch);
    log_ = {{"schema", "mosaic.train/1"}, {"model", o.model}, {"data", o.data}, {"backend", o.backend},
            {"optimizer", opt_name_}, {"lr", o.opt.lr}, {"batch", o.batch}, {"seed", o.seed}, {"shuffle", o.shuffle},
            {"ranks", ranks_}, {"global_batch", o.batch * ranks_}, {"data_repeat", o.data_repeat}};
    log_["provenance"] = provenance_json(run_provenance(o.model, {{"data", std::to_string(o.seed)}}));
    log_["steps"] = nlohmann::json::array();
    log_["epochs"] = nlohmann::json::array();
    log_["normalize"] = o.normalize;
    if (tokens_) log_["objective"] = o.objective;
    log_["loss_function"] = o.loss;
    if (!o.assign.empty()) log_["assign"] = o.assign;
    log_["frozen"] = std::vector<std::string>(po_.frozen.begin(), po_.frozen.end());
    log_["precision"] = o.precision;
    log_["classes"] = data_->train.classes;
    if (verbose_) print_start();
    // --trace: every step's nodes (forward and backward), stages and data loading, per epoch.
    if (!o.trace.empty()) {
      trace_ = &recorder_;
      trace_->begin_config("train " + o.backend, *plan_);
    }
    if (!o.resume.empty()) {  // continue the log, the step count and the clocks
      step_ = resumed_.header.value("step", int64_t{0});
      log_["steps"] = resumed_.header.value("log_steps", nlohmann::json::array());
      log_["epochs"] = resumed_.header.value("log_epochs", nlohmann::json::array());
      train_seconds_ = resumed_.header.value("train_seconds", 0.0);
      reached_ = resumed_.header.value("reached", nlohmann::json());
      log_["resumed_from"] = {{"checkpoint", o.resume}, {"epoch", first_epoch_ - 1}, {"step", step_}};
      if (verbose_)
        std::printf("resumed from %s: %lld epoch(s), %lld steps done\n", o.resume.c_str(),
                    static_cast<long long>(first_epoch_ - 1), static_cast<long long>(step_));
    }
  }

  void print_start() const {
    const TrainOptions& o = o_;
    if (dp_) {
      std::printf("data-parallel (%s): %d %s x batch %lld = global batch %lld", dp_->mode().c_str(), ranks_,
                  dp_->servers() ? "workers" : "ranks", static_cast<long long>(o.batch),
                  static_cast<long long>(o.batch * ranks_));
      if (dp_->servers()) std::printf(", and %d parameter server(s)", dp_->servers());
      std::printf("\n");
    }
    std::printf("training %s on %s with %s: %s, lr %g, batch %lld, %lld batches per epoch, %zu parameter "
                "tensors (%zu frozen)\n",
                o.model.c_str(), o.data.c_str(),
                (o.assign.empty() ? "backend " + o.backend : "placement " + placement_.str()).c_str(),
                opt_name_.c_str(), oc_.lr, static_cast<long long>(o.batch * ranks_),
                static_cast<long long>(it_->batches_per_epoch()), plan_->parameters().size(), po_.frozen.size());
  }

  Status run_epochs() {
    // Per-step schedules (warmup-linear) need the run's length in steps.
    const int64_t per_epoch = o_.steps_per_epoch > 0 ? std::min(o_.steps_per_epoch, it_->batches_per_epoch())
                                                     : it_->batches_per_epoch();
    total_steps_ = o_.steps > 0 ? std::min(o_.steps, per_epoch * o_.epochs) : per_epoch * o_.epochs;
    for (int64_t epoch = first_epoch_; epoch <= o_.epochs && diverged_.empty(); ++epoch) {
      opt_->set_lr(schedule_->lr(o_.opt.lr, epoch - 1));
      loader_->start_epoch();
      const int64_t t0 = now_ns();
      const int64_t load0 = loader_->load_ns(), wait0 = loader_->wait_ns();
      EpochSums sums;
      MOSAIC_RETURN_IF_ERROR(train_epoch(epoch, sums));
      if (dp_ && diverged_.empty() && !stopping_) dp_->after_update(step_, true);  // model averaging: one model before evaluation
      const double secs = static_cast<double>(now_ns() - t0) / 1e9;
      train_seconds_ += secs;
      if (stopping_) {
        log_["interrupted"] = true;
        if (verbose_)
          std::printf("interrupted during epoch %lld: the %zu finished epoch(s) are kept\n",
                      static_cast<long long>(epoch), log_["epochs"].size());
        break;
      }
      // Data loading: the loader's busy time, and the part the training thread waited for.
      const double load_s = static_cast<double>(loader_->load_ns() - load0) / 1e9;
      const double wait_s = static_cast<double>(loader_->wait_ns() - wait0) / 1e9;
      MOSAIC_RETURN_IF_ERROR(plan_->copy_device_state_to_host());  // what the evaluation and the checks below read
      for (const auto& [name, t] : host_floats_)
        for (int64_t i = 0; i < t.numel() && diverged_.empty(); ++i)
          if (!std::isfinite(t.f32()[i]))
            diverged_ = "diverged at epoch " + std::to_string(epoch) + " step " + std::to_string(step_) + " (weights)";
      if (!diverged_.empty()) break;
      MOSAIC_RETURN_IF_ERROR(end_epoch(epoch, sums, t0, secs, load_s, wait_s));
      if (o_.steps > 0 && step_ >= o_.steps) break;
    }
    return Status::ok();
  }

  /// The epoch's steps; stops early at --steps, --steps-per-epoch, a signal or divergence.
  Status train_epoch(int64_t epoch, EpochSums& sums) {
    Progress progress(o_.progress_label + "epoch " + std::to_string(epoch) + "/" + std::to_string(o_.epochs));
    int64_t epoch_steps = it_->batches_per_epoch();
    if (o_.steps_per_epoch > 0) epoch_steps = std::min(epoch_steps, o_.steps_per_epoch);
    for (int64_t b = 0; b < it_->batches_per_epoch(); ++b) {
      if (o_.steps > 0 && step_ >= o_.steps) break;
      // SIGINT/SIGTERM: the finished epochs are kept, this one dropped. The ranks of a job agree
      // on it with the step's loss sum below (ps-async workers, which share no sums, each stop
      // at their next step).
      if ((!dp_ || !dp_->global_losses()) && interrupted()) stopping_ = true;
      if (stopping_) break;
      if (o_.steps_per_epoch > 0 && b >= o_.steps_per_epoch) break;
      if ((verbose_ || !o_.progress_label.empty()) && b > 0) {
        char loss_text[48];
        std::snprintf(loss_text, sizeof loss_text, "train loss %.4f", sums.loss_sum / static_cast<double>(b));
        progress.update(static_cast<double>(b), static_cast<double>(epoch_steps), loss_text);
      }
      MOSAIC_ASSIGN_OR_RETURN(const bool go_on, train_step(epoch, b, sums));
      if (!go_on) break;
    }
    progress.finish();
    return Status::ok();
  }

  /// One step on batch b: forward, loss, backward, the exchange, the update. False: the
  /// epoch stops here (a stop every rank agreed on, or divergence).
  Expected<bool> train_step(int64_t epoch, int64_t b, EpochSums& sums) {
    Plan& P = *plan_;
    if (schedule_->per_step()) opt_->set_lr(schedule_->lr_at_step(o_.opt.lr, step_, total_steps_));
    const Tensor *images = nullptr, *labels = nullptr;
    const int64_t td = trace_ ? now_ns() : 0;
    loader_->next(b, &images, &labels);
    const int64_t tf = trace_ ? now_ns() : 0;
    MOSAIC_RETURN_IF_ERROR(P.run({*images}, nullptr, trace_, step_));
    const int64_t tl = trace_ ? now_ns() : 0;
    MOSAIC_ASSIGN_OR_RETURN(auto loss, P.loss(o_.loss, *labels));  // where the logits are (PlanOptions::loss_on_device)
    if (dp_ && dp_->global_losses()) {  // the global batch's loss (mean of the ranks' means over equal shares) and hits
      // and whether a rank was asked to stop: all of them then drop this step together.
      double s[4] = {loss.loss, static_cast<double>(loss.correct), static_cast<double>(loss.counted),
                     interrupted() ? 1.0 : 0.0};
      dp_->sum(s, 4);
      loss.loss = s[0] / ranks_;
      loss.correct = static_cast<int64_t>(s[1]);
      loss.counted = static_cast<int64_t>(s[2]);
      if (s[3] > 0) {
        stopping_ = true;
        return false;
      }
    }
    const int64_t tb = trace_ ? now_ns() : 0;
    ++step_;
    log_["steps"].push_back({{"step", step_}, {"epoch", epoch}, {"loss", loss.loss}, {"lr", opt_->lr()}});
    if (!std::isfinite(loss.loss)) {
      diverged_ = "diverged at epoch " + std::to_string(epoch) + " step " + std::to_string(step_);
      // ps-async workers do not share losses: the others cannot know; end the job.
      if (dp_ && !dp_->global_losses()) dp_->abort(diverged_ + " (this worker's loss)");
      return false;
    }
    sums.loss_sum += loss.loss;
    sums.correct += loss.correct;
    sums.seen += loss.counted;
    sums.trained += o_.batch * ranks_;
    if (dp_) dp_->begin_step(opt_->lr());
    MOSAIC_RETURN_IF_ERROR(P.backward_from_loss(trace_, step_ - 1, dp_ ? dp_->listener() : nullptr));
    if (dp_) dp_->finish_step();  // every gradient is now the mean over ranks
    const int64_t to = trace_ ? now_ns() : 0;
    Status st = Status::ok();
    if (!dp_ || dp_->workers_update()) st = P.optimizer_step(*opt_);  // else the servers did
    if (dp_) dp_->after_update(step_, false);  // model averaging, every k steps
    if (trace_) {
      const int64_t te = now_ns();
      trace_->span("step", "iteration", td, te, step_ - 1);
      trace_->span("data loading (waited)", "stage", td, tf, step_ - 1);
      trace_->span("forward", "stage", tf, tl, step_ - 1);
      trace_->span("loss", "stage", tl, tb, step_ - 1);
      trace_->span("backward", "stage", tb, to, step_ - 1);
      trace_->span("optimizer step", "stage", to, te, step_ - 1);
    }
    MOSAIC_RETURN_IF_ERROR(st);
    return true;
  }

  /// After an epoch's steps: the test evaluation, the epoch's log entry and report, the
  /// checks (chance level, target accuracy), the checkpoint.
  Status end_epoch(int64_t epoch, const EpochSums& sums, int64_t t0, double secs, double load_s, double wait_s) {
    const TrainOptions& o = o_;
    Expected<Evaluation> test = Evaluation{-1.0, 0.0};
    const int64_t te0 = now_ns();
    if (o.evaluate) test = evaluate_on(*eval_, data_->test, nullptr);
    if (trace_) {
      trace_->span("epoch " + std::to_string(epoch), "epoch", t0, te0, step_ - 1);
      if (o.evaluate) trace_->span("evaluate", "epoch", te0, now_ns(), step_ - 1);
    }
    if (!test.ok()) return test.status();
    const double test_acc = test->accuracy;
    const int64_t batches = sums.trained / (o.batch * ranks_);
    const double train_loss = batches ? sums.loss_sum / batches : 0.0;
    const double train_acc = sums.seen ? static_cast<double>(sums.correct) / sums.seen : 0.0;
    const double seq_len = tokens_ ? static_cast<double>(data_->train.labels.dim(1)) : 1.0;
    const double trained = static_cast<double>(sums.trained);
    if (verbose_)
      std::printf("epoch %lld: %.2f s, %.0f %s/s%s, train loss %.4f, train acc %.4f, test acc %s%s; data loading "
                  "%.2f s, %.2f s of it exposed\n",
                  static_cast<long long>(epoch), secs, trained / secs, tokens_ ? "sequences" : "images",
                  tokens_ ? (" (" + std::to_string(static_cast<long long>(trained * seq_len / secs)) + " tokens/s)").c_str()
                          : "",
                  train_loss, train_acc, o.evaluate ? fixed4(test_acc).c_str() : "-",
                  o.evaluate && tokens_ ? (", test loss " + fixed4(test->loss)).c_str() : "", load_s, wait_s);
    if (epoch == 1 && batches >= kChanceMinSteps && o.loss == "cross-entropy") {  // chance is ln k for cross-entropy
      const std::string why = chance_level(train_loss, train_acc, data_->train.classes);
      if (!why.empty()) {
        log_["does_not_train"] = why;
        if (verbose_) std::printf("does not train: %s\n", why.c_str());
      }
    }
    if (o.target_accuracy > 0 && reached_.is_null() && test_acc >= o.target_accuracy) {
      reached_ = {{"epoch", epoch}, {"step", step_}, {"train_seconds", train_seconds_}, {"test_accuracy", test_acc}};
      if (verbose_)
        std::printf("reached test accuracy %.4f >= %.4f after epoch %lld: %.2f s of training\n", test_acc,
                    o.target_accuracy, static_cast<long long>(epoch), train_seconds_);
    }
    log_["epochs"].push_back({{"epoch", epoch},
                              {"lr", opt_->lr()},
                              {"seconds", secs},
                              {"images_per_s", trained / secs},
                              {"tokens_per_s", trained * seq_len / secs},
                              {"train_loss", train_loss},
                              {"train_accuracy", train_acc},
                              {"test_accuracy", o.evaluate ? nlohmann::json(test_acc) : nlohmann::json()},
                              {"test_loss", o.evaluate ? nlohmann::json(test->loss) : nlohmann::json()},
                              {"data_load_s", load_s},
                              {"data_wait_s", wait_s}});
    if (!o.checkpoint.empty() && (!dp_ || dp_->world_rank() == 0)) {
      if (dp_) dp_->gather_server_state(*opt_);  // parameter servers hold the model and its optimizer state
      nlohmann::json header = {{"settings", checkpoint_settings(o, opt_name_, ranks_)},
                               {"epoch", epoch},
                               {"step", step_},
                               {"train_seconds", train_seconds_},
                               {"reached", reached_},
                               {"log_steps", log_["steps"]},
                               {"log_epochs", log_["epochs"]}};
      MOSAIC_RETURN_IF_ERROR(write_checkpoint(o.checkpoint, std::move(header), *plan_, *opt_));
    }
    if (o.on_epoch_done && (!dp_ || dp_->world_rank() == 0)) o.on_epoch_done(log_);
    return Status::ok();
  }

  /// After the epochs: memory per device, time to accuracy, divergence, the bf16 comparison,
  /// the data-parallel report, the trace and the saved model.
  Status finish() {
    // What the plan holds on each device: resident parameters with their gradients and
    // optimizer state, activations, resident constants.
    for (const auto& [device, bytes] : plan_->device_bytes()) {
      log_["device_memory"][device] = device_bytes_json(bytes);
      if (verbose_)
        std::printf("on %s: parameters %s, optimizer state %s, gradients %s, activations %s\n", device.c_str(),
                    format_bytes(static_cast<double>(bytes.parameters)).c_str(),
                    format_bytes(static_cast<double>(bytes.optimizer_state)).c_str(),
                    format_bytes(static_cast<double>(bytes.gradients)).c_str(),
                    format_bytes(static_cast<double>(bytes.activations)).c_str());
    }
    if (o_.target_accuracy > 0) {
      log_["time_to_accuracy"] = {{"target", o_.target_accuracy}, {"reached", !reached_.is_null()}, {"at", reached_}};
      if (verbose_ && reached_.is_null())
        std::printf("test accuracy %.4f not reached in %lld epoch(s)\n", o_.target_accuracy,
                    static_cast<long long>(o_.epochs));
    }
    if (!diverged_.empty()) {
      if (verbose_) std::printf("%s\n", diverged_.c_str());
      log_["diverged"] = diverged_;
      result_.diverged = diverged_;
    }
    if (precision_ == Precision::kBF16 && o_.evaluate && diverged_.empty() && !stopping_)
      MOSAIC_RETURN_IF_ERROR(compare_bf16());
    if (dp_) {
      dp_->stop();  // parameter servers: this worker is done
      log_["distributed"] = dp_->report(train_seconds_, step_ * o_.batch);
      log_["distributed"]["parameters_identical"] = dp_->parameters_identical(plan_->parameters());
      if (log_["epochs"].size() >= 2) {  // the data-parallel benchmark's first- vs second-epoch time
        log_["distributed"]["first_epoch_s"] = log_["epochs"][0]["seconds"];
        log_["distributed"]["second_epoch_s"] = log_["epochs"][1]["seconds"];
      }
      if (verbose_) print_distributed(log_["distributed"], o_.batch);
    }
    const bool rank0 = !dp_ || dp_->rank() == 0;
    if (trace_ && rank0) {
      MOSAIC_RETURN_IF_ERROR(trace_->write(o_.trace));
      if (verbose_)
        std::cerr << "trace: " << trace_->events() << " events in " << o_.trace << " (open in https://ui.perfetto.dev)\n";
    }
    if (!o_.save.empty() && diverged_.empty() && rank0) MOSAIC_RETURN_IF_ERROR(save_model());
    return Status::ok();
  }

  /// The trained weights in bf16 and in float32 inference: both accuracies and how often
  /// their top-1 classes agree, over the whole test set.
  Status compare_bf16() {
    PlanOptions fo32 = eo_;
    fo32.precision = Precision::kF32;
    MOSAIC_ASSIGN_OR_RETURN(auto eval32, Plan::build(eval_graph_, placement_, builtin_registry(), fo32));
    std::vector<int64_t> top16, top32;
    MOSAIC_ASSIGN_OR_RETURN(const Evaluation e16, evaluate_on(*eval_, data_->test, &top16));
    MOSAIC_ASSIGN_OR_RETURN(const Evaluation e32, evaluate_on(*eval32, data_->test, &top32));
    double agree[2] = {0, static_cast<double>(top16.size())};
    for (size_t i = 0; i < top16.size() && i < top32.size(); ++i) agree[0] += top16[i] == top32[i];
    if (dp_) dp_->sum(agree, 2);
    const double agreement = agree[1] > 0 ? agree[0] / agree[1] : 0.0;
    log_["bf16"] = {{"test_accuracy_bf16", e16.accuracy}, {"test_accuracy_f32", e32.accuracy},
                    {"test_loss_bf16", e16.loss},         {"test_loss_f32", e32.loss},
                    {"top1_agreement", agreement},        {"rows", static_cast<int64_t>(agree[1])}};
    if (verbose_)
      std::printf("bf16: test accuracy %.4f, and %.4f in float32 inference of the same weights; top-1 agreement "
                  "%.2f%% over %lld test %s\n",
                  e16.accuracy, e32.accuracy, 100 * agreement, static_cast<long long>(agree[1]),
                  tokens_ ? "positions" : "images");
    return Status::ok();
  }

  /// --save: the model as loaded, with the plan's trained parameters and running statistics.
  Status save_model() {
    Graph original;
    if (o_.model.rfind("zoo:", 0) == 0) {
      MOSAIC_ASSIGN_OR_RETURN(original, build_zoo_model(o_.model.substr(4)));
    } else {
      MOSAIC_ASSIGN_OR_RETURN(original, load_onnx(o_.model));
    }
    MOSAIC_RETURN_IF_ERROR(plan_->copy_device_state_to_host());  // parameters and running statistics on a device
    for (const auto& v : plan_->values())
      if (v.is_const && original.initializers.count(v.name) && v.desc.dtype == DType::kF32)
        original.initializers[v.name] = v.tensor.clone();
    MOSAIC_RETURN_IF_ERROR(save_onnx(original, o_.save));
    if (verbose_) std::printf("saved %s\n", o_.save.c_str());
    return Status::ok();
  }

  const TrainOptions& o_;
  const bool verbose_;
  dist::DataParallel* const dp_;
  const int ranks_;
  TrainResult result_;
  nlohmann::json& log_;
  Precision precision_ = Precision::kF32;
  OptimizerConfig oc_;
  std::string opt_name_;
  std::unique_ptr<Optimizer> opt_;
  std::unique_ptr<LrSchedule> schedule_;
  Graph graph_, eval_graph_;
  DataSplits loaded_, repeated_;
  const DataSplits* data_ = nullptr;
  bool tokens_ = false;
  Normalization norm_;
  Placement placement_;
  PlanOptions po_, eo_;
  std::unique_ptr<Plan> plan_, eval_;
  Checkpoint resumed_;
  std::vector<std::pair<std::string, Tensor>> host_floats_;
  std::unique_ptr<BatchIterator> it_;
  std::unique_ptr<Prefetcher> loader_;
  TraceRecorder recorder_;
  TraceRecorder* trace_ = nullptr;
  int64_t first_epoch_ = 1, step_ = 0, total_steps_ = 0;
  bool stopping_ = false;  // SIGINT/SIGTERM (every rank of a job agrees on it)
  std::string diverged_;
  double train_seconds_ = 0;  // training time so far, evaluation excluded (time-to-accuracy)
  nlohmann::json reached_;    // the first epoch at --target-accuracy
};

}  // namespace

Expected<TrainResult> run_training(const TrainOptions& o, const DataSplits* preloaded, bool verbose,
                                   dist::DataParallel* dp) {
  Trainer trainer(o, verbose, dp);
  return trainer.run(preloaded);
}

}  // namespace mosaic::api
