// api::run_child_reports (api/child_processes.hpp).
#include "api/child_processes.hpp"

#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <ostream>

#include "api/util.hpp"
#include "ir/interrupt.hpp"

namespace mosaic::api {
namespace {

namespace fs = std::filesystem;

/// The lines of a child's log worth quoting: those that say "error", else the last five.
std::string log_excerpt(const std::string& path) {
  std::ifstream f(path);
  std::vector<std::string> lines, errors;
  for (std::string line; std::getline(f, line);) {
    lines.push_back(line);
    if (line.find("error") != std::string::npos) errors.push_back(line);
  }
  if (errors.empty()) errors.assign(lines.size() > 5 ? lines.end() - 5 : lines.begin(), lines.end());
  return join(errors, "\n");
}

}  // namespace

std::string argument_number(double v) {
  char b[40];
  for (int digits : {15, 17}) {
    std::snprintf(b, sizeof b, "%.*g", digits, v);
    if (std::strtod(b, nullptr) == v) break;
  }
  return b;
}

Expected<ChildReports> run_child_reports(int count, const ChildArguments& arguments, std::ostream* progress) {
  MOSAIC_ASSIGN_OR_RETURN(const std::string program, mosaic_executable());
  const fs::path dir = fs::temp_directory_path() / ("mosaic_processes_" + std::to_string(getpid()));
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::internal("cannot create " + dir.string() + ": " + ec.message());
  struct Cleanup {
    fs::path d;
    ~Cleanup() {
      std::error_code e;
      fs::remove_all(d, e);
    }
  } cleanup{dir};
  ChildReports out;
  for (int p = 0; p < count && !interrupted(); ++p) {
    const std::string json_path = (dir / ("p" + std::to_string(p) + ".json")).string();
    const std::string log = (dir / ("p" + std::to_string(p) + ".log")).string();
    MOSAIC_ASSIGN_OR_RETURN(const std::vector<std::string> args, arguments(json_path));
    if (progress) *progress << "process " << p + 1 << "/" << count << "..." << std::endl;
    const int code = run_program(program, args, log, true);
    if (interrupted()) {
      if (progress)
        *progress << "process " << p + 1 << " was stopped (" << (interrupt_signal() == SIGINT ? "SIGINT" : "SIGTERM")
                  << ") and is left out" << std::endl;
      out.interrupted = true;
      break;
    }
    std::ifstream jf(json_path);
    nlohmann::json doc = jf ? nlohmann::json::parse(jf, nullptr, false) : nlohmann::json();
    if ((code != 0 && code != 1) || !doc.is_object())
      return Status::internal("process " + std::to_string(p + 1) + " of " + std::to_string(count) +
                              " failed with exit code " + std::to_string(code) + ":\n" + log_excerpt(log));
    out.reports.push_back(std::move(doc));
    out.exit_codes.push_back(code);
  }
  if (out.reports.empty()) return Status::internal("interrupted before a process finished: nothing to pool");
  return out;
}

}  // namespace mosaic::api
