// JUnit XML (`--junit FILE` on verify, gradcheck and optcheck), so CI systems show each
// verdict: one <testsuite> per backend (or optimizer), one <testcase> per case, tensor or
// check. FAIL is a <failure>; UNSUPPORTED and INCONCLUSIVE are <skipped> with the reason,
// never a pass.
#pragma once

#include <string>
#include <vector>

#include "ir/status.hpp"

namespace mosaic {

struct JUnitCase {
  enum class Outcome { kPass, kFail, kSkipped };
  std::string suite;  ///< e.g. "verify [onednn]"
  std::string name;
  Outcome outcome = Outcome::kPass;
  std::string message;  ///< the verdict's detail line
  double seconds = 0;
};

/// Writes `cases`, grouped by suite in first-seen order, under <testsuites name="...">.
Status write_junit(const std::string& path, const std::string& name, const std::vector<JUnitCase>& cases);

/// XML text and attribute escaping (& < > " ').
std::string xml_escape(const std::string& s);

}  // namespace mosaic
