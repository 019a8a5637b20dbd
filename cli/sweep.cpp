// `mosaic sweep CONFIG.yaml`: runs api::sweep (api/sweep.hpp) with its progress on stdout,
// records the sweep in the results store and says where the tables are.
#include <cstdio>
#include <iostream>
#include <string>

#include "api/sweep.hpp"
#include "cli/cli_util.hpp"
#include "cli/train.hpp"
#include "ir/interrupt.hpp"

namespace mosaic::cli {

int run_sweep(const SweepOptions& so) {
  auto db = open_run_store(so.db);
  if (!db.ok()) return fail(db.status());
  SweepQuery q = so;
  q.progress = &std::cout;
  // Ctrl-C or SIGTERM stops at the next cell boundary (a second one ends the process).
  install_interrupt_handlers();
  auto r = api::sweep(q);
  if (!r.ok()) return fail(r.status());
  if (Status st = record_run(db.value().get(), r->doc); !st.is_ok()) return fail(st);
  const char* stop = r->interrupted ? "; interrupted (run again to resume)"
                     : r->stopped   ? "; stopped at --max-cells (run again to resume)"
                                    : "";
  std::printf("%d cells run, %d finished earlier, %d errors%s; tables in %s/table{2,3%s}.{csv,md}, every cell in sweep.json\n",
              r->ran, r->cached, r->errors, stop, r->output.c_str(), r->speedup_table ? ",_speedup" : "");
  if (r->interrupted) return interrupt_exit_code();
  return r->errors ? 1 : 0;
}

}  // namespace mosaic::cli
