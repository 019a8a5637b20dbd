// The flags of `mosaic train`, `gradcheck`, `optcheck` and `sweep` (cli/flags.hpp).
#include <iostream>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "cli/flags.hpp"
#include "cli/train.hpp"

namespace mosaic::cli {
namespace {

/// `mosaic train`.
struct TrainFlags {
  TrainOptions train;
  bool no_shuffle = false;
  std::string train_opts;
  std::string freeze;
  bool no_prefetch = false;
  double train_momentum = 0;
  bool no_eval = false;
  CLI::Option* train_momentum_opt = nullptr;

  CLI::App* add(CLI::App& app) {
    auto* train_cmd = app.add_subcommand("train", "train a model: forward, loss, backward, optimizer step, per epoch report");
    train_cmd->add_option("model", train.model, "ONNX file, or zoo:NAME")->required();
    train_cmd->add_option("--data", train.data, api::data_forms())->capture_default_str();
    auto* train_backend_opt =
        train_cmd->add_option("--backend,--backends", train.backend, "backend (nodes it cannot train fall back to naive)")->capture_default_str();
    train_cmd->add_option("--assign", train.assign, "train on a mixed placement instead, as bench --assign (a spec or a YAML file)")
        ->excludes(train_backend_opt);
    train.optimizer.clear();
    train_cmd->add_option("--optimizer", train.optimizer,
                          "sgd, momentum, nesterov, adam, adamw, rmsprop, adagrad, or a plugin's (default: sgd, or the plugin's)");
    train_cmd->add_option("--optimizer-plugin", train.plugins, "load a user optimizer (shared library)");
    train_cmd->add_option("--opt", train_opts, "further optimizer hyperparameters: key=value[,key=value]");
    train_cmd->add_option("--freeze", freeze, "parameters kept fixed: comma-separated names or regular expressions");
    train_cmd->add_option("--normalize", train.normalize,
                          "per-channel input normalisation: none, auto (training-set statistics) or MEAN,..:STD,..")
        ->capture_default_str();
    train_cmd->add_flag("--no-prefetch", no_prefetch, "load batches on the training thread (no background loader)");
    train_cmd->add_option("--lr", train.opt.lr, "learning rate")->capture_default_str();
    train_momentum_opt = train_cmd->add_option("--momentum", train_momentum, "momentum (sgd, rmsprop; as --opt momentum=X)");
    train_cmd->add_option("--lr-schedule", train.lr_schedule,
                          "constant, cosine, step:EPOCHS:GAMMA, or warmup-linear:STEPS (per step: linear warm-up, then "
                          "linear decay to 0, as BERT)")
        ->capture_default_str();
    train_cmd->add_option("--loss", train.loss,
                          "cross-entropy (softmax over the last axis) or mse (against one-hot targets), per row or "
                          "token")
        ->capture_default_str()
        ->check(CLI::IsMember({"cross-entropy", "mse"}));
    train_cmd->add_option("--objective", train.objective,
                          "token data (--data text:FILE, synthetic-tokens:N,T,V): next-token or masked-lm")
        ->capture_default_str();
    train_cmd->add_option("--trace", train.trace, "write a Chrome trace-event file of every step: nodes, stages, data loading");
    train_cmd->add_option("--save", train.save, "write the trained model as ONNX");
    train_cmd->add_option("--checkpoint", train.checkpoint,
                          "write a checkpoint at every epoch end: parameters, optimizer state, step, data order, log");
    train_cmd->add_option("--resume", train.resume, "continue the run a --checkpoint file was written by");
    train_cmd->add_option("--weight-decay", train.opt.weight_decay, "weight decay");
    add_batch(train_cmd, train.batch, "mini-batch size");
    train_cmd->add_option("--epochs", train.epochs, "epochs")->capture_default_str();
    train_cmd->add_option("--steps", train.steps, "stop after this many steps (0: no limit)");
    train_cmd->add_option("--steps-per-epoch", train.steps_per_epoch, "cut every epoch short after this many steps");
    train_cmd->add_flag("--no-shuffle", no_shuffle, "keep the file order");
    train_cmd->add_flag("--deterministic", train.deterministic,
                        "bitwise-repeatable steps at a fixed thread count (no timing-dependent work splits)");
    train_cmd->add_option("--precision", train.precision,
                          "f32, or bf16: mixed precision (convolutions and matrix products, forward and backward, on "
                          "bfloat16 copies; float32 parameters, gradients and optimizer state); the test set is then "
                          "also evaluated in float32, with the top-1 agreement")
        ->capture_default_str()
        ->check(CLI::IsMember({"f32", "bf16"}));
    train_cmd->add_flag("--no-eval", no_eval, "skip the test-set accuracy after each epoch (null in the JSON)");
    train_cmd->add_option("--seed", train.seed, "seed of shuffling, Dropout and synthetic data")->capture_default_str();
    train_cmd->add_option("--json", train.json, "write per-step losses and per-epoch results as JSON");
    train_cmd->add_option("--target-accuracy", train.target_accuracy,
                          "report the training time until the test accuracy first reaches this fraction (time-to-accuracy)");
    train_cmd->add_option("--threads", train.threads, "threads");
    train_cmd->add_option("--distributed", train.distributed,
                          "data-parallel over MPI (run under mpirun -np N): allreduce, allreduce-blocking, avg, ps or ps-async; --batch is per worker");
    train_cmd->add_option("--bucket-mb", train.bucket_mb, "gradient bucket size of the all-reduce modes (MiB)")->capture_default_str();
    train_cmd->add_option("--collective", train.collective, "all-reduce modes: how buckets are summed: " + collective_help())
        ->capture_default_str();
    train_cmd->add_option("--sync-every", train.sync_every, "avg: average the parameters every K steps (and at epoch ends)")
        ->capture_default_str();
    train_cmd->add_option("--servers", train.servers, "ps, ps-async: parameter servers (the last K ranks)")->capture_default_str();
    train_cmd->add_option("--max-staleness", train.max_staleness,
                          "ps-async: no worker runs more than S steps ahead of the slowest (stale-synchronous)");
    train_cmd->add_option("--data-repeat", train.data_repeat, "train on the training set concatenated R times");
    add_db(train_cmd, train.db);
    return train_cmd;
  }

  int run() {
    train.shuffle = !no_shuffle;
    train.evaluate = !no_eval;
    train.prefetch = !no_prefetch;
    train.opt_params = split(train_opts);
    // --momentum goes through the same check as --opt: an optimizer that ignores it refuses it.
    if (train_momentum_opt->count()) train.opt_params.push_back("momentum=" + std::to_string(train_momentum));
    train.freeze = split(freeze);
    return run_train(train);
  }
};

/// `mosaic gradcheck`.
struct GradcheckFlags {
  GradcheckRunOptions gc;
  std::string gc_fallback = "naive";

  CLI::App* add(CLI::App& app) {
    auto* gc_cmd = app.add_subcommand("gradcheck", "check every parameter's gradient against finite differences");
    gc_cmd->add_option("model", gc.model, "ONNX file, or zoo:NAME")->required();
    auto* gc_backend_opt = gc_cmd->add_option("--backend,--backends", gc.backend, "backend whose backward is checked; a,b,c or all: each in turn, "
                                                 "sharing the reference's evaluations")->capture_default_str();
    gc_cmd->add_option("--assign", gc.assign, "check a mixed placement instead, as bench --assign (a spec or a YAML file)")
        ->excludes(gc_backend_opt);
    add_batch(gc_cmd, gc.batch, "batch size");
    gc_cmd->add_option("--fallback", gc_fallback, "backends for nodes the checked one cannot run ('none' to forbid)")
        ->capture_default_str();
    gc_cmd->add_option("--eps", gc.check.eps, "largest finite-difference step (halved until no branch switches)")
        ->capture_default_str();
    gc_cmd->add_option("--halvings", gc.check.halvings, "at most this many halvings of the step")->capture_default_str();
    gc_cmd->add_option("--tolerance", gc.check.tolerance, "max relative error")->capture_default_str();
    gc_cmd->add_option("--min-probes", gc.check.min_probes, "judged probes a PASS needs")->capture_default_str();
    gc_cmd->add_option("--json", gc.json, "write the verdicts as JSON");
    gc_cmd->add_option("--junit", gc.junit, "write the verdicts as JUnit XML (one test case per tensor)");
    gc_cmd->add_option("--plant", gc.plant, "check the backend with a planted backward bug (measures gradcheck itself; "
                                            "docs/gradcheck.md lists them)");
    gc_cmd->add_option("--directions", gc.check.directions, "random directions per tensor")->capture_default_str();
    gc_cmd->add_option("--elements", gc.check.elements, "random single elements per tensor")->capture_default_str();
    gc_cmd->add_option("--seed", gc.check.seed, "seed of input, labels and probes")->capture_default_str();
    gc_cmd->add_option("--threads", gc.threads, "threads");
    return gc_cmd;
  }

  int run() {
    gc.fallback = split(gc_fallback);
    return run_gradcheck(gc);
  }
};

/// `mosaic optcheck`.
struct OptcheckFlags {
  OptcheckCliOptions oc;
  std::string oc_opts;
  CLI::Option* oc_lr = nullptr;

  CLI::App* add(CLI::App& app) {
    auto* oc_cmd = app.add_subcommand("optcheck", "validate an optimizer: reference trajectories, ONNX training-op data, "
                                                  "convergence, a real network");
    oc_cmd->add_option("--optimizer", oc.optimizer, "optimizer to check (default: the plugin's)");
    oc_cmd->add_option("--optimizer-plugin", oc.plugins, "load a user optimizer (shared library)");
    oc_cmd->add_option("--reference", oc.reference, "built-in rule the optimizer must reproduce (default: its own name)");
    oc_lr = oc_cmd->add_option("--lr", oc.opt.lr, "learning rate of the convergence and network checks (default: per rule)");
    oc_cmd->add_option("--momentum", oc.opt.momentum, "momentum of the convergence and network checks");
    oc_cmd->add_option("--weight-decay", oc.opt.weight_decay, "weight decay of the convergence and network checks");
    oc_cmd->add_option("--opt", oc_opts, "further hyperparameters: key=value[,key=value]");
    oc_cmd->add_option("--model", oc.model, "network whose gradients feed the optimizer ('none' to skip)")->capture_default_str();
    oc_cmd->add_option("--backend,--backends", oc.backend, "backend of the network check")->capture_default_str();
    oc_cmd->add_option("--steps", oc.steps, "steps of the network check")->capture_default_str();
    oc_cmd->add_option("--onnx-data", oc.onnx_data, "ONNX node-test directory")->capture_default_str();
    oc_cmd->add_option("--tolerance", oc.tolerance, "trajectory tolerance (relative to the reference's movement)")
        ->capture_default_str();
    oc_cmd->add_option("--seed", oc.seed, "seed of the problems")->capture_default_str();
    oc_cmd->add_option("--json", oc.json, "write the verdicts as JSON");
    oc_cmd->add_option("--junit", oc.junit, "write the verdicts as JUnit XML (one test case per check)");
    oc_cmd->add_option("--threads", oc.threads, "threads");
    return oc_cmd;
  }

  int run() {
    oc.lr_given = oc_lr->count() > 0;
    oc.opt_params = split(oc_opts);
    return run_optcheck(oc);
  }
};

/// `mosaic sweep`.
struct SweepFlags {
  SweepOptions sweep;

  CLI::App* add(CLI::App& app) {
    auto* sweep_cmd = app.add_subcommand("sweep", "run a YAML grid of training runs; write Table 2 and Table 3 (resumable)");
    sweep_cmd->add_option("config", sweep.config, "sweep YAML file (docs/sweeps.md)")->required();
    sweep_cmd->add_option("--max-cells", sweep.max_cells, "run at most this many new cells, then stop");
    sweep_cmd->add_option("--max-grid", sweep.max_grid,
                          "refuse a grid of more cells than this before anything runs (a typo in an axis can ask for millions)")
        ->capture_default_str();
    add_db(sweep_cmd, sweep.db);
    return sweep_cmd;
  }

  int run() {
    return run_sweep(sweep);
  }
};

}  // namespace

Command add_train_command(CLI::App& app) { return make_command<TrainFlags>(app); }
Command add_gradcheck_command(CLI::App& app) { return make_command<GradcheckFlags>(app); }
Command add_optcheck_command(CLI::App& app) { return make_command<OptcheckFlags>(app); }
Command add_sweep_command(CLI::App& app) { return make_command<SweepFlags>(app); }

}  // namespace mosaic::cli
