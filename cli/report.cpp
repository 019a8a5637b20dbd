// `mosaic report INPUT... -o FILE.html`: api::html_report (api/html_report.hpp), and what it
// says on stderr.
#include <iostream>

#include "api/html_report.hpp"
#include "cli/cli_util.hpp"
#include "cli/commands.hpp"

namespace mosaic::cli {

int run_report(const ReportOptions& o) {
  auto r = api::html_report(o);
  if (!r.ok()) return fail(r.status());
  for (const auto& note : r->notes) std::cerr << "report: " << note << "\n";
  std::cerr << "report: " << r->figures << " figures, " << r->runs << " runs in " << r->output << "\n";
  return 0;
}

}  // namespace mosaic::cli
