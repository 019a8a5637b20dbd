// `mosaic report INPUT... -o FILE.html`: api::html_report (api/html_report.hpp), and what it
// says on stderr.
#include <iostream>

#include "api/html_report.hpp"
#include "cli/cli_util.hpp"
#include "cli/commands.hpp"

namespace mosaic::cli {

int run_report(const ReportOptions& o) {
  auto r = api::html_report(o);
  if (!r.ok()) {
    const std::string m = r.status().message();
    if (m.rfind("output ", 0) == 0 || m.rfind("output:", 0) == 0)
      return fail(Status(r.status().code(), "-o" + m.substr(6)));
    if (m.rfind("inputs: ", 0) == 0) return fail(Status(r.status().code(), m.substr(8)));
    return fail(r.status());
  }
  for (const auto& note : r->notes) std::cerr << "report: " << note << "\n";
  std::cerr << "report: " << r->figures << " figures, " << r->runs << " runs in " << r->output << "\n";
  return 0;
}

}  // namespace mosaic::cli
