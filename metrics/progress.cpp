#include "metrics/progress.hpp"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace mosaic {

bool Progress::wanted() {
  const char* env = std::getenv("MOSAIC_PROGRESS");
  if (env && std::string(env) == "0") return false;
  return isatty(fileno(stderr)) != 0;
}

std::string Progress::format(double done, double total, double elapsed) {
  char buf[160];
  auto dur = [](double s) {
    char b[32];
    if (s < 60) std::snprintf(b, sizeof b, "%.0fs", s);
    else if (s < 3600) std::snprintf(b, sizeof b, "%.0fm%02.0fs", std::floor(s / 60), std::fmod(s, 60));
    else std::snprintf(b, sizeof b, "%.0fh%02.0fm", std::floor(s / 3600), std::fmod(s / 60, 60));
    return std::string(b);
  };
  if (total > 0 && done > 0)
    std::snprintf(buf, sizeof buf, "%.0f/%.0f (%.0f%%)  %s elapsed, ETA %s", done, total, 100 * done / total,
                  dur(elapsed).c_str(), dur(elapsed * (total - done) / done).c_str());
  else if (total > 0)
    std::snprintf(buf, sizeof buf, "%.0f/%.0f  %s elapsed", done, total, dur(elapsed).c_str());
  else
    std::snprintf(buf, sizeof buf, "%.0f  %s elapsed", done, dur(elapsed).c_str());
  return buf;
}

Progress::Progress(std::string label)
    : label_(std::move(label)), enabled_(!label_.empty() && wanted()), start_ns_(now_ns()) {}

Progress::~Progress() { finish(); }

void Progress::update(double done, double total, const std::string& detail) {
  if (!enabled_) return;
  const int64_t now = now_ns();
  if (drawn_ && now - last_ns_ < 100'000'000 && done < total) return;  // at most 10 redraws a second
  last_ns_ = now;
  const std::string line = label_ + ": " + format(done, total, static_cast<double>(now - start_ns_) / 1e9) +
                           (detail.empty() ? "" : "  " + detail);
  std::fprintf(stderr, "\r\033[K%s", line.c_str());
  std::fflush(stderr);
  drawn_ = true;
}

void Progress::finish() {
  if (!drawn_) return;
  std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
  drawn_ = false;
}

}  // namespace mosaic
