#!/usr/bin/env python3
"""Checks that each hardening fix has a test that fails without it (issue 30, "Done when").

For every entry of REVERTS: undo the fix in a scratch worktree of HEAD (one exact text
replacement, which must apply exactly once, so the table stays honest as the code moves),
rebuild, run the tests named for it, and require them to FAIL (a crash or a timeout counts as
a failure); then restore the file. The unmodified tree must pass the same tests first.

Usage: scripts/revert_check.py [--keep] [--only NAME[,NAME...]] [--timeout S] [--list]
  --keep     keep the worktree and its build (/tmp/mosaic-revert-check) for a rerun
  --only     run these entries only
  --timeout  per test run, seconds (default 300)

Takes about an hour on 2 cores (one build, then one incremental build per entry). Needs
Open MPI for the distributed entry, like the test suite.
"""
import argparse
import os
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (name, finding, file, fixed text, reverted text, gtest filter)
REVERTS = [
    ("sizes-wrap", "critical: element and byte counts that wrap (heap out-of-bounds write)",
     "ir/checked.cpp",
     "  if (static_cast<int64_t>(shape.size()) > kMaxRank)\n",
     "  if (dtype == dtype) return Status::ok();\n  if (static_cast<int64_t>(shape.size()) > kMaxRank)\n",
     "Hostile.LoaderRefusesEveryCaseNamingTheTensorOrNode"),
    ("external-absolute", "high: external data at an absolute path",
     "frontends/onnx/onnx_io.cpp",
     "  if (loc.is_absolute() || loc.has_root_name() || loc.has_root_directory())\n",
     "  if (loc.empty())\n",
     "Hostile.LoaderRefusesEveryCaseNamingTheTensorOrNode:Hostile.EveryCommandRefusesTheCorpusWithExitTwo"),
    ("external-dotdot", "high: external data through '..'",
     "frontends/onnx/onnx_io.cpp",
     "    if (part == \"..\")\n",
     "    if (part == \"..\" && false)\n",
     "Hostile.LoaderRefusesEveryCaseNamingTheTensorOrNode:Hostile.EveryCommandRefusesTheCorpusWithExitTwo"),
    ("external-symlink", "high: external data through a symlink that leaves the folder",
     "frontends/onnx/onnx_io.cpp",
     "  for (auto d = dir.begin(); d != dir.end(); ++d, ++r)\n",
     "  for (auto d = dir.end(); d != dir.end(); ++d, ++r)\n",
     "Hostile.LoaderRefusesEveryCaseNamingTheTensorOrNode:Hostile.EveryCommandRefusesTheCorpusWithExitTwo"),
    ("external-fifo", "high: a FIFO as external data hangs",
     "frontends/onnx/onnx_io.cpp",
     "  if (!fs::is_regular_file(real, ec))\n    return Status::invalid(what + \": external data location \"",
     "  if (fs::is_directory(real, ec))\n    return Status::invalid(what + \": external data location \"",
     "Hostile.LoaderRefusesEveryCaseNamingTheTensorOrNode:Hostile.EveryCommandRefusesTheCorpusWithExitTwo"),
    ("external-length", "medium: external data length allocated before it is checked",
     "frontends/onnx/onnx_io.cpp",
     "    if (length >= 0 && length != src_bytes)\n",
     "    if (length >= 0 && length != src_bytes && false)\n",
     "Hostile.LoaderRefusesEveryCaseNamingTheTensorOrNode"),
    ("atomic-write", "medium: a failed write truncates the previous report",
     "ir/file_io.cpp",
     "  const std::string tmp = path + \".tmp.\" + std::to_string(::getpid());\n",
     "  const std::string tmp = path;\n",
     "Outputs.AFailedWriteIsAnErrorAndLeavesThePreviousFileWhole"),
    ("nan-options", "medium: --rtol nan passes every comparison",
     "cli/flags.cpp",
     "if (s.empty() || *end != '\\0' || !std::isfinite(v)) return",
     "if (s.empty() || *end != '\\0') return",
     "Outputs.NonFiniteAndOutOfRangeNumbersAreRefusedReadably"),
    ("db-devnull", "medium: --db /dev/null leaves /dev/null-journal",
     "api/util.cpp",
     "  if (writable.is_ok() && fs::exists(path, ec) && !fs::is_regular_file(path, ec))\n",
     "  if (writable.is_ok() && fs::exists(path, ec) && fs::is_directory(path, ec))\n",
     "Outputs.UnwritableOutputsAndStoresAreRefusedBeforeAnyWork"),
    ("unwritable-late", "an unwritable --json found only after the timing",
     "api/util.cpp",
     "  if (fd < 0)\n    return Status::invalid(flag + \" \" + path + \": not writable (cannot create a file in \"",
     "  if (fd < -1)\n    return Status::invalid(flag + \" \" + path + \": not writable (cannot create a file in \"",
     "Outputs.UnwritableOutputsAndStoresAreRefusedBeforeAnyWork"),
    ("json-dash", "--json - creates a file named -",
     "ir/file_io.cpp",
     "  if (path == \"-\") {\n    std::ostringstream os;",
     "  if (path == \"--\") {\n    std::ostringstream os;",
     "Outputs.JsonDashIsStandardOutputAndThePeopleReportGoesToStderr"),
    ("yaml-duplicate-key", "a repeated YAML key (first wins)",
     "frontends/config/sweep_config.cpp",
     "    if (!seen.insert(key).second)\n      return Status::invalid(path + \": key '\"",
     "    if (!seen.insert(key).second && false)\n      return Status::invalid(path + \": key '\"",
     "Sweep.ConfigErrorsNameFileAndKeyAndLeaveNoOutput"),
    ("axis-duplicate", "a sweep axis listing a value 1,000 times runs 1,000 identical cells",
     "frontends/config/sweep_config.cpp",
     "      if (out[j] == out[i])\n",
     "      if (out[j] == out[i] && false)\n",
     "Sweep.ConfigErrorsNameFileAndKeyAndLeaveNoOutput"),
    ("max-grid", "10^6 distinct cells start without an estimate",
     "api/sweep.cpp",
     "    if (grid > so.max_grid)\n",
     "    if (grid > so.max_grid && false)\n",
     "Sweep.ConfigErrorsNameFileAndKeyAndLeaveNoOutput"),
    ("db-and-no-db", "--db X --no-db accepted",
     "cli/main.cpp",
     "    if (db && no_db && db->count() && no_db->count()) {\n",
     "    if (db && no_db && db->count() && no_db->count() && false) {\n",
     "Outputs.UnwritableOutputsAndStoresAreRefusedBeforeAnyWork"),
    ("threads-cached", "--threads 1000: the oversubscribed peaks are cached",
     "api/bench.cpp",
     "  const bool oversubscribed = cores > 0 && p.threads > cores;\n",
     "  const bool oversubscribed = cores > 0 && p.threads > cores && false;\n",
     "Outputs.MoreThreadsThanCoresWarnsAndIsNeverCachedAsThePeak"),
    ("unsupported-first-only", "a model with three unsupported ops names only the first",
     "api/models.cpp",
     "  if (missing.size() > 1 || (missing.size() == 1 && missing.begin()->second.first > 1)) {\n",
     "  if (missing.size() > 1000) {\n",
     "Outputs.EveryUnsupportedOpIsNamedAtOnce"),
    ("compare-self", "compare last last passes silently",
     "metrics/run_compare.cpp",
     "  if (a == b)\n    return Status::invalid(\"A and B are the same run",
     "  if (a == b && false)\n    return Status::invalid(\"A and B are the same run",
     "History.CompareFindsAKnownSlowdownAndNothingInTheSameRun"),
    ("compare-apples-oranges", "compare gates inference batch 1 against training batch 16",
     "metrics/run_compare.cpp",
     "  if (!o.force) {\n",
     "  if (o.force) {\n",
     "History.CompareFindsAKnownSlowdownAndNothingInTheSameRun"),
    ("bench-interrupt", "Ctrl-C during bench loses the backends that finished",
     "cli/commands.cpp",
     "  install_interrupt_handlers(!o.distributed.empty());\n",
     "\n",
     "Outputs.InterruptedBenchAndTrainKeepWhatFinished"),
    ("processes-interrupt", "Ctrl-C during bench --processes loses the finished processes",
     "api/bench_processes.cpp",
     "    const int code = run_program(program, args, log, true);\n",
     "    const int code = run_program(program, args, log, false);\n",
     "Outputs.InterruptedBenchProcessesPoolsTheProcessesThatFinished"),
    ("mpirun-interrupt", "Ctrl-C on mpirun: the ranks do not stop together",
     "cli/train.cpp",
     "  install_interrupt_handlers(!o.distributed.empty());\n",
     "  if (o.distributed.empty()) install_interrupt_handlers();\n",
     "Distributed.InterruptStopsEveryRankAtTheSameStep"),
    # Issue 50: silent wrong results and crashes at the edges.
    ("int64-through-double", "silent wrong result: INT64_MAX read through a double (x[:, 1:] empty everywhere)",
     "ir/tensor.cpp",
     "      case DType::kI64: v[k] = i64()[i]; break;\n",
     "      case DType::kI64: v[k] = static_cast<int64_t>(static_cast<double>(i64()[i])); break;\n",
     "Int64Edges.SliceMatchesHandComputedValuesOnEveryBackend"),
    ("int64-compare", "int64 comparisons through a double (2^53 == 2^53 + 1)",
     "backends/common/logic.cpp",
     "    if (src[0]->dtype() == DType::kI64) {  // exactly",
     "    if (false) {  // exactly",
     "Int64Edges.IntegersStayExactThroughCastComparisonsAndArithmetic"),
    ("int64-cast", "Cast int64 -> int64 through a double",
     "backends/common/movement.cpp",
     "        case DType::kI64: y.i64()[i] = from_ == DType::kI64 ? x.i64()[i] : saturate_to_i64(x.get(i)); break;\n",
     "        case DType::kI64: y.i64()[i] = static_cast<int64_t>(x.get(i)); break;\n",
     "Int64Edges.IntegersStayExactThroughCastComparisonsAndArithmetic"),
    ("int64-range", "Range's int64 count and values through a double",
     "operators/schemas.cpp",
     "  if (v[0]->dtype() == DType::kI64) {  // exactly, in 128 bits",
     "  if (false) {  // exactly, in 128 bits",
     "Int64Edges.RangeCountsAndValuesAreExactPast2To53"),
    ("slice-repeated-axes", "Slice with a repeated axis accepted (ONNX forbids it)",
     "operators/schemas.cpp",
     "    if (seen[static_cast<size_t>(ax)])\n",
     "    if (false)\n",
     "Int64Edges.SliceRefusesRepeatedAxesAndZeroSteps"),
    ("empty-outputs", "crash: SIGFPE on an empty tensor in im2col's Mul and Conv",
     "core/kernel.cpp",
     "  if (every_output_empty(ctx)) return std::unique_ptr<Kernel>(new EmptyOutputsKernel());\n",
     "\n",
     "AllOps/EmptyTensors.EveryOpTakesZeroSizedInputs/im2col"),
    ("gemm-k0", "silent wrong result: im2col's Gemm over K = 0 returns C, not beta C",
     "backends/im2col/gemm.cpp",
     "    if (p_.k == 0) {\n",
     "    if (false) {\n",
     "AllOps/EmptyTensors.EveryOpTakesZeroSizedInputs/im2col"),
    ("library-option-ranges", "silent wrong result: Python/library rtol nan passes a wrong operator",
     "api/bench.cpp",
     "  MOSAIC_RETURN_IF_ERROR(check_numbers(\"bench\", numbers));\n",
     "\n",
     "Api.TheLibraryRefusesTheValuesTheCommandLineRefuses"),
    ("compare-negative-times", "compare prints 'faster -4603%' for negative sample times",
     "metrics/run_compare.cpp",
     "    if (!std::isfinite(v) || v < 0)\n",
     "    if (false)\n",
     "History.CompareRefusesNegativeTimesAndWronglyTypedFields"),
    ("sweep-interrupt", "SIGINT to mosaic sweep kills it: no tables, nothing recorded",
     "cli/sweep.cpp",
     "  install_interrupt_handlers();\n",
     "\n",
     "Outputs.InterruptedSweepStopsAtACellBoundaryAndWritesItsTables"),
    ("verify-oom", "a case too large for the machine ends the whole verify suite, unnamed",
     "api/verify.cpp",
     "      } catch (const std::bad_alloc& e) {\n",
     "      } catch (const std::logic_error& e) {\n",
     "VerifySuite.ACaseTooLargeForTheMachineIsItsOwnVerdictNotTheSuitesEnd"),
    ("omitted-first-output", "verify --per-node on an LSTM with only Y_h ends in map::at",
     "validate/per_node.cpp",
     "    if (first == n.outputs.end() || graph.value_descs.at(*first).dtype != DType::kF32) continue;\n",
     "    if (n.outputs.empty() || graph.value_descs.at(n.outputs[0]).dtype != DType::kF32) continue;\n",
     "OmittedOutputs.ANodeWhoseFirstOutputIsOmittedIsReportedByItsFirstPresentOne"),
    ("sequence-lens", "bench blames a valid LSTM: sequence_lens drawn as ids in [0, 2)",
     "api/models.cpp",
     "      if (const int64_t longest = sequence_length_bound(g, in.name, &why); longest > 0) {\n",
     "      if (const int64_t longest = sequence_length_bound(g, in.name, &why); longest > longest) {\n",
     "GeneratedInputs.SequenceLengthsAreValidAndBatchBindsTheBatchAxisOfTimeMajorInputs"),
    ("time-major-batch", "--batch 1 makes a time-major LSTM's sequence 1 long",
     "core/prepare.cpp",
     "    const size_t b = s.size() > 1 ? batch_axis(g, in.name) : 0;\n",
     "    const size_t b = 0;\n",
     "GeneratedInputs.SequenceLengthsAreValidAndBatchBindsTheBatchAxisOfTimeMajorInputs"),
    ("sweep-epochs", "a sweep of 10^12 epochs ends in std::bad_alloc",
     "frontends/config/sweep_config.cpp",
     "  if (c.epochs > kMaxEpochs)\n",
     "  if (c.epochs > kMaxEpochs && false)\n",
     "Sweep.ConfigErrorsNameFileAndKeyAndLeaveNoOutput"),
    ("epoch-write", "a killed training run loses its finished epochs",
     "api/train.cpp",
     "    if (o.on_epoch_done && (!dp || dp->world_rank() == 0)) o.on_epoch_done(log);\n",
     "\n",
     "Outputs.KilledTrainingLeavesItsFinishedEpochs"),
    ("threads-address-space", "--threads 32 under a 4 GB address-space limit hangs in OpenBLAS's mmap retry",
     "backends/registry.cpp",
     "  MOSAIC_RETURN_IF_ERROR(reserve_thread_space(threads));\n",
     "\n",
     "Limits.ThreadsTheAddressSpaceCannotHoldAreRefusedNotAHang"),
    ("second-signal", "a second SIGTERM does nothing: only SIGKILL ends a loop that does not poll",
     "ir/interrupt.cpp",
     "  if (g_signal != 0 && !g_in_group) {  // the second one: stop now\n",
     "  if (false) {\n",
     "Limits.ASecondSignalEndsTheProcessWhateverItIsDoing"),
    ("input-bound-at-load", "an integer input read as a position cannot be given: the model does not load",
     "api/models.cpp",
     "    po.constant_inputs[in.name] = given.at(in.name);\n",
     "\n",
     "GivenInputs.APositionIsAskedForAndAGivenOneIsBoundAtLoad"),
    ("npy-header", "an .npy header length of 4 GiB is allocated before it is checked",
     "frontends/data/npy.cpp",
     "  if (header_len > kMaxHeader)\n",
     "  if (header_len > kMaxHeader && false)\n",
     "GivenInputs.HostileNpyFilesAreRefusedNamingTheFile"),
    ("input-shape", "a file of another shape than its input is run",
     "api/models.cpp",
     "      fits = fits && t->shape() == bound->second.shape;\n",
     "\n",
     "GivenInputs.AFileThatDoesNotFitItsInputIsRefused"),
    ("rnn-zero-steps", "an RNN, GRU or LSTM over a sequence of 0 steps is refused on every backend",
     "operators/rnn.cpp",
     "  if (p.hidden < 1) return Status::invalid(",
     "  if (p.hidden < 1 || p.seq < 1) return Status::invalid(",
     "EmptySequence.RecurrentOpsOverZeroStepsReturnTheirInitialStates"),
    ("sweep-data-preflight", "a sweep's data that a model cannot take fails at its cell, leaving empty tables",
     "api/sweep.cpp",
     "    if (Status fits = check_training_data(t, tokens ? nullptr : &images); !fits.is_ok())\n",
     "    if (Status fits = Status::ok(); !fits.is_ok())\n",
     "Sweep.ConfigErrorsNameFileAndKeyAndLeaveNoOutput"),
    ("bf16-peak", "bf16 configurations' %peak is taken against the float32 peak (183% of sgemm peak)",
     "metrics/report.cpp",
     "  if (c.device_bytes.empty()) return bf16 ? rep.peaks.bf16_gemm_gflops : rep.peaks.sgemm_gflops;\n",
     "  if (c.device_bytes.empty()) return rep.peaks.sgemm_gflops;\n",
     "BenchPeaks.Bf16ConfigurationsAreDividedByTheBf16MatmulPeak"),
    ("npy-fifo", "--input NAME=FIFO blocks on open until SIGKILL",
     "frontends/data/npy.cpp",
     "  if (!std::filesystem::is_regular_file(path, ec)) return Status::invalid(what + \": not a regular file\");\n",
     "\n",
     "GivenInputs.HostileNpyFilesAreRefusedNamingTheFile"),
]


LEFTOVERS = ["/dev/null-journal"]


def run(cmd, cwd, timeout=None, env=None):
    """(exit code, output); on a timeout the whole process group is killed (a reverted fix may
    leave a test's children running: a sweep of a million cells) and the code is 124."""
    p = subprocess.Popen(cmd, cwd=cwd, shell=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                         text=True, errors="replace", start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
        return p.returncode, out
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        return 124, (out or "") + "\n(timed out)"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--only", default="")
    ap.add_argument("--timeout", type=int, default=300)
    ap.add_argument("--list", action="store_true")
    a = ap.parse_args()
    entries = REVERTS
    if a.only:
        wanted = a.only.split(",")
        unknown = [w for w in wanted if w not in {r[0] for r in REVERTS}]
        if unknown:
            sys.exit("revert_check: unknown entries: " + ", ".join(unknown))
        entries = [r for r in REVERTS if r[0] in wanted]
    if a.list:
        for r in entries:
            print(f"{r[0]:24} {r[1]}\n{'':24} {r[2]} -> {r[5]}")
        return 0
    wt = "/tmp/mosaic-revert-check"
    if not os.path.isdir(wt):
        code, out = run(f"git worktree add --detach {wt} HEAD", ROOT)
        if code:
            sys.exit("revert_check: git worktree add failed:\n" + out)
    else:
        run("git checkout --detach -f " + run("git rev-parse HEAD", ROOT)[1].strip(), wt)
    build = os.path.join(wt, "build")
    env = dict(os.environ, MOSAIC_DB="off", MOSAIC_PROGRESS="0", OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    t0 = time.time()
    code, out = run(f"cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOSAIC_WITH_TORCH=OFF > /dev/null && "
                    f"cmake --build build --target mosaic mosaic_tests", wt)
    if code:
        sys.exit("revert_check: the build failed:\n" + out[-3000:])
    print(f"built the worktree of HEAD in {time.time() - t0:.0f} s", flush=True)

    def tests(filter_):
        # A reverted size check must not take the machine's memory: 20 GB of address space at most.
        return run(f"ulimit -v 20000000; ./mosaic_tests --gtest_filter='{filter_}'", build, a.timeout, env)

    filters = sorted({r[5] for r in entries})
    code, out = tests(":".join(filters))
    if code:
        print(out[-4000:])
        sys.exit("revert_check: the unmodified tree fails these tests; fix that first")
    print(f"the unmodified tree passes the {len(filters)} test filters", flush=True)

    existed_before = {p for p in LEFTOVERS if os.path.exists(p)}
    caught, missed = 0, []
    for name, finding, path, fixed, reverted, filter_ in entries:
        src = os.path.join(wt, path)
        text = open(src).read()
        n = text.count(fixed)
        if n != 1:
            print(f"STALE   {name}: the fixed text occurs {n} times in {path}; update the table")
            missed.append(name)
            continue
        open(src, "w").write(text.replace(fixed, reverted))
        t = time.time()
        code, out = run("cmake --build build --target mosaic mosaic_tests", wt)
        if code:
            print(f"NOBUILD {name}: the reverted tree does not compile:\n{out[-1500:]}")
            missed.append(name)
        else:
            code, out = tests(filter_)
            failed = [l.split("] ")[1].split(" (")[0] for l in out.splitlines() if l.startswith("[  FAILED  ]") and " (" in l]
            how = ("timed out" if code == 124 else f"exit {code}") if not failed else ", ".join(sorted(set(failed)))
            if code != 0:
                caught += 1
                print(f"caught  {name:24} {time.time() - t:5.0f} s  {how}   ({finding})", flush=True)
            else:
                missed.append(name)
                print(f"MISSED  {name:24} {time.time() - t:5.0f} s  {filter_} passed without the fix   ({finding})",
                      flush=True)
        open(src, "w").write(text)
        # What a reverted fix leaves outside the worktree (db-devnull: SQLite's journal beside
        # /dev/null, which the next test run, or a chroot that binds /dev, would see).
        for leftover in LEFTOVERS:
            if leftover not in existed_before and os.path.exists(leftover):
                os.remove(leftover)
    run("cmake --build build --target mosaic mosaic_tests", wt)  # back to HEAD for a rerun
    print(f"revert_check: {caught} of {len(entries)} reverted fixes caught by their tests "
          f"({time.time() - t0:.0f} s in all)")
    if not a.keep:
        run(f"git worktree remove --force {wt}", ROOT)
    return 0 if not missed else 1


if __name__ == "__main__":
    sys.exit(main())
