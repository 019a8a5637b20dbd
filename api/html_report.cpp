// api::html_report (api/html_report.hpp): the figures are drawn by matplotlib
// (frontends/report/plots.py, embedded at build time) and inlined as SVG data URIs, so the
// page is a single file. docs/report.md.
#include "api/html_report.hpp"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "api/util.hpp"
#include "ir/file_io.hpp"
#include "metrics/junit.hpp"
#include "metrics/provenance.hpp"
#include "metrics/results_db.hpp"

namespace mosaic::api {

extern const char* const kPlotsScript;  // generated from frontends/report/plots.py

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

/// HTML text and attribute values: the XML escapes serve (junit.hpp).
std::string html_escape(const std::string& s) { return xml_escape(s); }

std::string base64(const std::string& in) {
  static const char* t = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string o;
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const unsigned v = (static_cast<unsigned char>(in[i]) << 16) | (static_cast<unsigned char>(in[i + 1]) << 8) |
                       static_cast<unsigned char>(in[i + 2]);
    o += {t[v >> 18], t[(v >> 12) & 63], t[(v >> 6) & 63], t[v & 63]};
  }
  if (i + 1 == in.size()) {
    const unsigned v = static_cast<unsigned char>(in[i]) << 16;
    o += {t[v >> 18], t[(v >> 12) & 63], '=', '='};
  } else if (i + 2 == in.size()) {
    const unsigned v = (static_cast<unsigned char>(in[i]) << 16) | (static_cast<unsigned char>(in[i + 1]) << 8);
    o += {t[v >> 18], t[(v >> 12) & 63], t[(v >> 6) & 63], '='};
  }
  return o;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

std::string num(const json& v, const char* fmt) {
  if (!v.is_number()) return "&ndash;";
  char b[64];
  std::snprintf(b, sizeof b, fmt, v.get<double>());
  return b;
}

/// The kinds of run the report draws (the results store knows more: loadgen).
bool drawn(const std::string& kind) { return kind == "bench" || kind == "train" || kind == "sweep" || kind == "generate"; }

/// Loads one INPUT: a run id, a sweep output directory (its sweep.json), or a JSON file of
/// a run. Errors name it.
Expected<json> load_input(const std::string& in, const std::string& db_path, std::unique_ptr<ResultsDb>& db) {
  std::string what = in;
  if (fs::is_directory(in)) {
    what = (fs::path(in) / "sweep.json").string();
    if (!fs::exists(what)) return Status::not_found(in + ": a directory without sweep.json (not a sweep's output directory)");
  }
  MOSAIC_ASSIGN_OR_RETURN(NamedRun run, load_named_run(what, db_path, db));
  json doc = std::move(run.doc);
  doc["_name"] = what == in ? run.name : in;
  if (const std::string kind = run_kind(doc); !kind.empty() && !drawn(kind))
    return Status::invalid(in + ": a " + kind + " run; the report draws bench, train, sweep and generate runs (its "
                           "figures are in its --json and `history`)");
  if (run_kind(doc).empty()) {
    const std::string schema = doc.contains("schema") && doc["schema"].is_string() ? doc["schema"].get<std::string>() : "";
    for (const char* k : {"mosaic.bench/", "mosaic.train/", "mosaic.sweep/", "mosaic.generate/"})
      if (schema.rfind(k, 0) == 0)
        return Status::invalid(in + ": schema '" + schema + "' is a version this mosaic does not read (it reads "
                               "mosaic.bench/1 and /2, mosaic.train/1, mosaic.sweep/1 and mosaic.generate/1): a newer "
                               "mosaic wrote it?");
    return Status::invalid(in + ": not a bench, train, sweep or generate document (schema '" + schema + "')");
  }
  return doc;
}

/// A run given as its document (mosaic.bench's result, say): a bench, train, sweep or generate report.
Expected<json> document_input(const json& doc, size_t index) {
  const std::string name = "document " + std::to_string(index + 1);
  if (!doc.is_object() || !drawn(run_kind(doc)))
    return Status::invalid(name + " is not a bench, train, sweep or generate report");
  json d = doc;
  d["_name"] = name;
  return d;
}

/// The kernels a bench report says its backends picked ("im2col blas_core SkylakeX, ..."), or
/// the OpenBLAS and oneDNN fields of a report written before backends described themselves.
std::string kernels_text(const json& d) {
  std::string t;
  if (d.contains("kernels") && d["kernels"].is_object())
    for (const auto& [backend, kernels] : d["kernels"].items())
      for (const auto& [what, value] : kernels.items())
        t += (t.empty() ? "" : ", ") + backend + " " + what + " " + (value.is_string() ? value.get<std::string>() : value.dump());
  if (t.empty() && d.contains("blas_core"))
    t = "OpenBLAS " + d.value("blas_core", "") + ", oneDNN " + d.value("onednn_isa", "");
  return t;
}

/// The Python that draws the figures: $MOSAIC_PYTHON, else Debian's, else python3 on PATH.
std::string python() {
  if (const char* p = std::getenv("MOSAIC_PYTHON"); p && *p) return p;
  return fs::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
}

void bench_table(std::ostream& h, const json& d) {
  h << "<table><tr><th>backend</th><th>median ms</th><th>95% CI ms</th><th>images/s</th><th>GFLOP/s</th><th>% peak</th>"
       "<th>iterations</th><th>check</th></tr>\n";
  for (const auto& r : d.value("runs", json::array())) {
    const json& s = r.value("summary", json::object());
    const json& it = r.value("iteration_ms", json::object());
    const json& ck = r.value("check", json::object());
    h << "<tr><td>" << html_escape(r.value("label", "")) << "</td><td>" << num(s.value("median_ms", json()), "%.4g")
      << "</td><td>" << num(it.is_object() ? it.value("ci95_low", json()) : json(), "%.4g") << " &ndash; "
      << num(it.is_object() ? it.value("ci95_high", json()) : json(), "%.4g") << "</td><td>"
      << num(s.value("images_per_s", json()), "%.1f") << "</td><td>" << num(s.value("gflops", json()), "%.2f") << "</td><td>"
      << num(s.value("pct_of_peak", json()), "%.1f") << "</td><td>"
      << (r.contains("iterations") ? r["iterations"].value("measured", 0) : 0) << "</td><td>"
      << (!ck.value("performed", false) ? "not run" : ck.value("passed", false) ? "matches naive" : "<b>MISMATCH</b>")
      << "</td></tr>\n";
  }
  h << "</table>\n";
}

void train_table(std::ostream& h, const json& d) {
  h << "<p>" << html_escape(d.value("backend", "")) << ", " << html_escape(d.value("precision", "f32")) << ", "
    << html_escape(d.value("optimizer", "")) << " lr " << num(d.value("lr", json()), "%g") << ", batch "
    << d.value("batch", 0) << "</p>\n";
  h << "<table><tr><th>epoch</th><th>seconds</th><th>images/s</th><th>train loss</th><th>train acc</th><th>test acc</th></tr>\n";
  for (const auto& e : d.value("epochs", json::array()))
    h << "<tr><td>" << e.value("epoch", 0) << "</td><td>" << num(e.value("seconds", json()), "%.2f") << "</td><td>"
      << num(e.value("images_per_s", json()), "%.0f") << "</td><td>" << num(e.value("train_loss", json()), "%.4f")
      << "</td><td>" << num(e.value("train_accuracy", json()), "%.4f") << "</td><td>"
      << num(e.value("test_accuracy", json()), "%.4f") << "</td></tr>\n";
  h << "</table>\n";
  if (d.contains("bf16") && d["bf16"].is_object()) {  // the precision trade-off on the test set
    const json& b = d["bf16"];
    h << "<p>Mixed precision (bf16): test accuracy " << num(b.value("test_accuracy_bf16", json()), "%.4f")
      << " in bf16 and " << num(b.value("test_accuracy_f32", json()), "%.4f")
      << " in float32 inference of the same weights; top-1 agreement "
      << num(b.contains("top1_agreement") ? json(100 * b["top1_agreement"].get<double>()) : json(), "%.2f") << "% over "
      << b.value("rows", 0) << " test rows.</p>\n";
  }
  if (d.contains("diverged")) h << "<p><b>" << html_escape(d["diverged"].get<std::string>()) << "</b></p>\n";
}

void sweep_table(std::ostream& h, const json& d) {
  h << "<table><tr><th>model</th><th>backend</th><th>optimizer</th><th>lr</th><th>batch</th><th>status</th>"
       "<th>last test acc</th><th>images/s</th></tr>\n";
  for (const auto& c : d.value("cells", json::array())) {
    const json& ep = c.contains("log") && c["log"].is_object() ? c["log"].value("epochs", json::array()) : json::array();
    const json last = ep.empty() ? json::object() : ep.back();
    std::string backend = c.value("backend", "");
    if (c.contains("ranks"))  // the data-parallel axes
      backend += " " + c.value("mode", "") + " x" + std::to_string(c.value("ranks", 0));
    h << "<tr><td>" << html_escape(c.value("model", "")) << "</td><td>" << html_escape(backend) << "</td><td>"
      << html_escape(c.value("optimizer", "")) << "</td><td>" << num(c.value("lr", json()), "%g") << "</td><td>"
      << c.value("batch", 0) << "</td><td>" << html_escape(c.value("status", "")) << "</td><td>"
      << num(last.value("test_accuracy", json()), "%.4f") << "</td><td>"
      << num(last.value("images_per_s", json()), "%.0f") << "</td></tr>\n";
  }
  h << "</table>\n";
}

/// A generation: its figures, and one row per context depth of a --context sweep.
void generate_table(std::ostream& h, const json& d) {
  const json& st = d.value("settings", json::object());
  const json& cache = d.value("cache", json());
  h << "<p>" << html_escape(d.value("backend", "")) << ", " << html_escape(d.value("decoding", "")) << ", batch "
    << st.value("batch", 0) << ", prompt " << st.value("prompt_tokens", 0) << " tokens, " << st.value("new_tokens", 0)
    << " new, " << html_escape(st.value("sampling", "")) << ", " << st.value("runs", 0) << " timed runs";
  if (cache.is_object()) h << "; KV cache " << num(cache.value("bytes_per_token", json()), "%.0f") << " bytes per token";
  h << "</p>\n<table><tr><th>context</th><th>TTFT ms</th><th>TPOT ms</th><th>decode tokens/s</th>"
       "<th>prefill tokens/s</th><th>inter-token p50 ms</th><th>p99 ms</th></tr>\n";
  auto row = [&](const std::string& context, const json& p, const json& itl) {
    h << "<tr><td>" << context << "</td><td>" << num(p.value("ttft_ms", json()), "%.4g") << "</td><td>"
      << num(p.value("tpot_ms", json()), "%.4g") << "</td><td>" << num(p.value("decode_tokens_per_s", json()), "%.1f")
      << "</td><td>" << num(p.value("prefill_tokens_per_s", json()), "%.1f") << "</td><td>"
      << num(itl.is_object() ? itl.value("p50", json()) : json(), "%.4g") << "</td><td>"
      << num(itl.is_object() ? itl.value("p99", json()) : json(), "%.4g") << "</td></tr>\n";
  };
  const json& contexts = d.value("contexts", json());
  if (contexts.is_array() && !contexts.empty()) {
    for (const auto& p : contexts)
      row(std::to_string(p.value("context", int64_t{0})), p, p.value("inter_token_ms", json()));
  } else {
    const json& s = d.value("summary", json::object());
    row("prompt (" + std::to_string(st.value("prompt_tokens", int64_t{0})) + ")", s, s.value("inter_token_ms", json()));
  }
  h << "</table>\n";
  const json& bw = d.value("bandwidth", json());
  if (bw.is_object() && bw.value("share", json()).is_number())
    h << "<p>A decode step reads " << num(json(bw.value("step_gbs", 0.0)), "%.1f") << " GB/s, "
      << num(json(100 * bw.value("share", 0.0)), "%.0f") << "% of the machine's read bandwidth ("
      << num(bw.value("read_bandwidth_gbs", json()), "%.1f") << " GB/s).</p>\n";
}

const char* kStyle = R"css(
body { font-family: sans-serif; max-width: 1200px; margin: 2em auto; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: 0.5em 0; font-size: 0.9em; }
td, th { border: 1px solid #ccc; padding: 3px 8px; text-align: right; } th { background: #f4f4f4; }
td:first-child { text-align: left; }
figure { margin: 1.5em 0; } figure img { max-width: 100%; } figcaption { font-size: 0.85em; color: #555; }
code, pre { font-size: 0.8em; background: #f6f6f6; } pre { padding: 0.5em; overflow-x: auto; white-space: pre-wrap; }
)css";

}  // namespace

Expected<ReportOutcome> html_report(const ReportQuery& o) {
  if (o.inputs.empty() && o.documents.empty())
    return Status::invalid("the report needs at least one run (a bench/train JSON file, a sweep directory, a run id or a document)");
  MOSAIC_RETURN_IF_ERROR(check_output_path(o.output, "`output`"));
  ReportOutcome out;
  out.output = o.output;
  std::unique_ptr<ResultsDb> db;
  json data{{"bench", json::array()}, {"train", json::array()}, {"sweep", json::array()}, {"generate", json::array()}};
  std::vector<json> docs;
  std::vector<Expected<json>> given;
  for (const auto& in : o.inputs) given.push_back(load_input(in, o.db, db));
  for (size_t i = 0; i < o.documents.size(); ++i) given.push_back(document_input(o.documents[i], i));
  for (size_t i = 0; i < given.size(); ++i) {
    const std::string in = i < o.inputs.size() ? o.inputs[i] : "document " + std::to_string(i - o.inputs.size() + 1);
    auto& d = given[i];
    if (!d.ok()) return d.status();
    // A run given twice (by id and as "last", or the same file twice) is drawn once.
    json bare = d.value();
    bare.erase("_name");
    bool seen = false;
    for (const auto& earlier : docs) {
      json e = earlier;
      e.erase("_name");
      if (e == bare) {
        out.notes.push_back(in + " is " + earlier["_name"].get<std::string>() + " again; drawn once");
        seen = true;
        break;
      }
    }
    if (seen) continue;
    data[run_kind(d.value())].push_back(d.value());
    docs.push_back(std::move(d).value());
  }
  // Draw the figures in a private directory.
  std::string tmpl = (fs::temp_directory_path() / "mosaic_report_XXXXXX").string();
  if (!mkdtemp(tmpl.data())) return Status::io_error("cannot create a temporary directory for the figures");
  struct Cleanup {
    fs::path d;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(d, ec);
    }
  } cleanup{tmpl};
  const fs::path dir(tmpl);
  std::ofstream(dir / "data.json") << data.dump();
  std::ofstream(dir / "plots.py") << kPlotsScript;
  const std::string py = python();
  const std::string log = (dir / "plots.log").string();
  const int code = run_program(py, {py, (dir / "plots.py").string(), (dir / "data.json").string(), dir.string()}, log);
  if (code != 0) {
    std::string msg = read_file(log);
    while (!msg.empty() && msg.back() == '\n') msg.pop_back();
    if (code == 127) msg = "cannot run " + py + " (set MOSAIC_PYTHON to a Python 3 with matplotlib)";
    if (msg.size() > 2000) msg = "..." + msg.substr(msg.size() - 2000);
    return Status::internal("report: drawing the figures failed (exit " + std::to_string(code) + "): " + msg);
  }
  const json figures = json::parse(read_file((dir / "figures.json").string()), nullptr, false);
  if (!figures.is_array()) return Status::internal("report: the figure script wrote no figure list");
  const json skipped = json::parse(read_file((dir / "skipped.json").string()), nullptr, false);
  if (skipped.is_array())
    for (const auto& line : skipped)
      if (line.is_string()) out.notes.push_back("figure " + line.get<std::string>());

  std::ostringstream h;
  const std::string title = o.title.empty() ? "Mosaic report" : o.title;
  h << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" << html_escape(title) << "</title><style>"
    << kStyle << "</style></head>\n<body data-figures=\"" << figures.size() << "\">\n<h1>" << html_escape(title) << "</h1>\n"
    << "<p>Generated " << utc_now_iso8601() << " by <code>" << html_escape(reproducer(collect_provenance())) << "</code> from "
    << docs.size() << " run(s); figures drawn by matplotlib.</p>\n";
  h << "<h2>Figures</h2>\n";
  if (figures.empty())
    h << "<p>No figure applies to these runs (throughput vs batch needs two batch sizes of one model; curves need "
         "train or sweep runs; tokens/s vs context depth a generate run with two depths or more).</p>\n";
  for (const auto& f : figures) {
    const std::string svg = read_file((dir / f.value("file", "")).string());
    h << "<figure><img class=\"figure\" alt=\"" << html_escape(f.value("title", "")) << "\" src=\"data:image/svg+xml;base64,"
      << base64(svg) << "\"><figcaption><b>" << html_escape(f.value("title", "")) << ".</b> "
      << html_escape(f.value("caption", "")) << "</figcaption></figure>\n";
  }
  h << "<h2>Runs</h2>\n";
  for (const auto& d : docs) try {
    const std::string kind = run_kind(d);
    h << "<h3>" << html_escape(d["_name"].get<std::string>()) << ": " << kind << " of "
      << html_escape(d.value("model", d.value("name", "?"))) << "</h3>\n";
    if (kind == "bench") {
      h << "<p>batch " << d.value("batch", 0) << ", " << html_escape(d.value("mode", "")) << ", " << d.value("threads", 0)
        << " threads; kernels: " << html_escape(kernels_text(d)) << "</p>\n";
      bench_table(h, d);
    } else if (kind == "train") {
      train_table(h, d);
    } else if (kind == "generate") {
      generate_table(h, d);
    } else {
      sweep_table(h, d);
    }
    const json& p = d.value("provenance", json::object());
    if (p.contains("run")) h << "<p>Reproduce: <code>" << html_escape(p["run"].value("reproducer", "")) << "</code></p>\n";
    h << "<details><summary>provenance</summary><pre>" << html_escape(p.dump(1)) << "</pre></details>\n";
  } catch (const json::exception& e) {
    // A hand-edited or another tool's document with a field of the wrong type: named, and no
    // page is written (nlohmann's message alone named neither the file nor the field's owner).
    return Status::invalid(d["_name"].get<std::string>() + ": a field of the run has the wrong type (" + e.what() + ")");
  }
  // Headless checks (tests/report/check_report.sh) read how many figures decoded.
  h << "<script>window.addEventListener('load', function () {\n"
       "  var imgs = document.querySelectorAll('img.figure'), ok = 0;\n"
       "  imgs.forEach(function (i) { if (i.complete && i.naturalWidth > 0) ok++; });\n"
       "  document.body.setAttribute('data-figures-loaded', ok + '/' + imgs.length);\n"
       "});</script>\n</body></html>\n";
  if (Status st = write_file_atomic(o.output, h.str()); !st.is_ok()) return st;
  out.figures = static_cast<int>(figures.size());
  out.runs = static_cast<int>(docs.size());
  return out;
}

}  // namespace mosaic::api
