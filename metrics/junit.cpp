#include "metrics/junit.hpp"
#include "ir/file_io.hpp"

#include <fstream>
#include <map>
#include <sstream>

namespace mosaic {

std::string xml_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&apos;"; break;
      default:
        // XML 1.0 allows no control characters other than tab, newline, carriage return.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n' && c != '\r') o += ' ';
        else o += c;
    }
  }
  return o;
}

Status write_junit(const std::string& path, const std::string& name, const std::vector<JUnitCase>& cases) {
  std::vector<std::string> order;
  std::map<std::string, std::vector<const JUnitCase*>> by_suite;
  for (const auto& c : cases) {
    if (!by_suite.count(c.suite)) order.push_back(c.suite);
    by_suite[c.suite].push_back(&c);
  }
  auto count = [](const std::vector<const JUnitCase*>& v, JUnitCase::Outcome o) {
    int n = 0;
    for (const auto* c : v) n += c->outcome == o;
    return n;
  };
  std::vector<const JUnitCase*> all;
  for (const auto& c : cases) all.push_back(&c);
  std::ostringstream x;
  x << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
    << "<testsuites name=\"" << xml_escape(name) << "\" tests=\"" << cases.size() << "\" failures=\""
    << count(all, JUnitCase::Outcome::kFail) << "\" skipped=\"" << count(all, JUnitCase::Outcome::kSkipped)
    << "\" errors=\"0\">\n";
  for (const auto& s : order) {
    const auto& v = by_suite[s];
    double seconds = 0;
    for (const auto* c : v) seconds += c->seconds;
    x << "  <testsuite name=\"" << xml_escape(s) << "\" tests=\"" << v.size() << "\" failures=\""
      << count(v, JUnitCase::Outcome::kFail) << "\" skipped=\"" << count(v, JUnitCase::Outcome::kSkipped)
      << "\" errors=\"0\" time=\"" << seconds << "\">\n";
    for (const auto* c : v) {
      x << "    <testcase classname=\"" << xml_escape(s) << "\" name=\"" << xml_escape(c->name) << "\" time=\""
        << c->seconds << "\"";
      if (c->outcome == JUnitCase::Outcome::kPass) {
        x << "/>\n";
        continue;
      }
      const char* tag = c->outcome == JUnitCase::Outcome::kFail ? "failure" : "skipped";
      x << ">\n      <" << tag << " message=\"" << xml_escape(c->message) << "\"/>\n    </testcase>\n";
    }
    x << "  </testsuite>\n";
  }
  x << "</testsuites>\n";
  return write_file_atomic(path, x.str());
}

}  // namespace mosaic
