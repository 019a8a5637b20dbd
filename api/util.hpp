// Helpers of the library API (and the CLI over it): lists in messages, output-path checks
// made before any work starts (so a bad path never costs a run, nor leaves half a report),
// provenance, --assign placements, the results store.
#pragma once

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/plan.hpp"
#include "ir/status.hpp"
#include "metrics/peaks.hpp"
#include "metrics/provenance.hpp"
#include "metrics/results_db.hpp"

namespace mosaic::api {

/// "a, b, c".
std::string join(const std::vector<std::string>& items, const std::string& sep = ", ");
/// The candidate closest to `word` by edit distance, or "" if none is plausibly meant
/// (distance above a third of the word's length, at least 2).
std::string closest(const std::string& word, const std::vector<std::string>& candidates);
/// "unknown backend 'OneDNN' (known: naive, im2col, onednn, torch (bundled plugin); did you
/// mean onednn?)": the registry's backends, the bundled plugins' (loaded only when named, so
/// missing from the registry after a typo), `extra` ("all", "none") and the closest name.
Status unknown_backend(const std::string& name, const std::string& extra = "", const std::string& what = "backend");
/// Why this build has no backend `name` although Mosaic has one ("cuda": no CUDA toolkit at
/// configure time), "" for any other name.
std::string backend_not_built(const std::string& name);

/// An output file named by `flag` can be written: "-" (standard output), or not a directory, in
/// an existing folder where a file can be created (proven by creating and removing one, since
/// the file is written beside itself and renamed), and writable itself if it exists; a device
/// or FIFO must open for writing. Leaves nothing behind.
Status check_output_path(const std::string& path, const std::string& flag);
/// check_output_path for each (flag, path) with a non-empty path, and no two the same file.
Status check_output_paths(const std::vector<std::pair<std::string, std::string>>& flag_paths);

/// Provenance of a run of the current command on `model` (an ONNX file, hashed, or zoo:NAME):
/// machine, build, every library's version, kernels in use, threads, seeds.
Provenance run_provenance(const std::string& model, const std::vector<std::pair<std::string, std::string>>& seeds);

/// The machine's sgemm and memory peaks at p's thread count: measured once and cached
/// (metrics/peaks.hpp), `refresh` measures again. More threads than cores are measured for
/// this run only. `say` gets a line before a measurement. Bench's percentages and roofline,
/// generate's bandwidth share.
MachinePeaks cpu_peaks(const Provenance& p, bool refresh, const std::function<void(const std::string&)>& say);

/// Runs `program` (a path, or a name looked up in PATH) with `args` (args[0] is its argv[0]),
/// stdout and stderr into the file `log`. Returns the exit code (128 + signal when killed,
/// 127 when it could not be started, -1 when it could not be forked or waited for).
/// `forward_interrupt`: the child runs in its own process group (a terminal's Ctrl-C reaches
/// only this process) and gets the SIGINT/SIGTERM this process receives (ir/interrupt.hpp,
/// whose handlers the caller installs) once, so that it can stop cleanly and write what
/// finished; it is sent SIGTERM if this process dies.
int run_program(const std::string& program, const std::vector<std::string>& args, const std::string& log,
                bool forward_interrupt = false);
/// The placement an --assign value gives: a spec (Conv=onednn,@fc*=im2col,*=naive) or a
/// YAML placement file (.yaml/.yml, frontends/config/placement_config.hpp), with
/// `fallback` unless the file sets its own.
Expected<Placement> assign_placement(const std::string& assign, const std::vector<std::string>& fallback);
/// The `mosaic` program that child runs execute (bench's `processes`, simulate's profiling,
/// a sweep's processes): the one set_mosaic_executable() named (the CLI names itself), else
/// $MOSAIC_EXECUTABLE, else `mosaic` beside libmosaic.so, in its bin/ or in ../bin/ (the build
/// tree, the Python package, an install). An error says how to name it.
Expected<std::string> mosaic_executable();
void set_mosaic_executable(const std::string& path);
/// Appends "--plugin FILE" for every loaded plugin: a child mosaic process needs them too.
void append_plugin_arguments(std::vector<std::string>& args);

/// Where bench, train and sweep record their runs (docs/cli.md#results-store).
struct DbOptions {
  std::string path;  ///< --db; empty: default_results_db()
  bool off = false;  ///< --no-db (MOSAIC_DB=off does the same)
};

/// Opens the results store before a run, so a bad --db fails before the work starts. Null
/// when recording is off. A default store that cannot be opened is a warning (the run goes
/// on unrecorded); an explicit --db that cannot be opened is an error.
Expected<std::unique_ptr<ResultsDb>> open_run_store(const DbOptions& o);
/// An existing results store (--db, else the default); reading never creates one.
Expected<ResultsDb> open_existing_store(const std::string& given);

/// A run named on the command line: a run id, "last" / "last~N" (the newest bench runs) from
/// the store `db_path` (opened into `db` on first use), or a JSON file.
struct NamedRun {
  nlohmann::json doc;
  std::string name;  ///< "run 12" or the file
};
Expected<NamedRun> load_named_run(const std::string& what, const std::string& db_path, std::unique_ptr<ResultsDb>& db);

/// Records a finished run's document (no-op for a null store) and says where on stderr.
Status record_run(ResultsDb* db, const nlohmann::json& doc);

}  // namespace mosaic::api
