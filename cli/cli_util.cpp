#include "cli/cli_util.hpp"

#include <iostream>
#include <string>
#include <utility>

namespace mosaic::cli {

std::string with_flags(const std::string& message) {
  // Where the flag is not --NAME with dashes: negated booleans, renamed lists.
  static const std::pair<const char*, const char*> exceptions[] = {
      {"`evaluate` false", "--no-eval"}, {"`check` false", "--no-check"}, {"`fuse` false", "--no-fuse"},
      {"`quantisation_step` false", "--exact-quantised"},
      {"`shapes`", "--shape"},           {"`plugins`", "--optimizer-plugin"}, {"`modes`", "--mode"},
      {"`inputs`", "--input"},
      {"`output`", "-o"},
  };
  std::string m = message;
  for (const auto& [api, flag] : exceptions)
    for (size_t at = m.find(api); at != std::string::npos; at = m.find(api, at + 1)) m.replace(at, std::string(api).size(), flag);
  std::string out;
  for (size_t i = 0; i < m.size(); ++i) {
    const size_t close = m[i] == '`' ? m.find('`', i + 1) : std::string::npos;
    bool name = close != std::string::npos && close > i + 1;
    for (size_t k = i + 1; name && k < close; ++k)
      name = (m[k] >= 'a' && m[k] <= 'z') || (m[k] >= '0' && m[k] <= '9') || m[k] == '_';
    if (!name) {
      out += m[i];
      continue;
    }
    std::string flag = "--" + m.substr(i + 1, close - i - 1);
    for (char& c : flag)
      if (c == '_') c = '-';
    out += flag;
    i = close;
  }
  return out;
}

int fail(const Status& st) {
  std::cerr << "mosaic: error: " << with_flags(st.message()) << "\n";
  return 2;
}

}  // namespace mosaic::cli
