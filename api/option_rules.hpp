// The ranges of the commands' numeric options, defined once: the CLI's flag validators
// (cli/flags.cpp) and the library functions' option checks (so Python's keyword arguments,
// which reach the library through python/src/commands.cpp) both read this table, so that every
// entry point refuses exactly the same values (NaN, infinity, negatives, zero counts) with the
// option's name.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "ir/status.hpp"

namespace mosaic::api {

/// The values an option takes. Every rule also requires a finite number.
struct NumberRule {
  double lo = 0, hi = 0;
  bool lo_open = false, hi_open = false;  ///< the bound itself is excluded
  bool integer = false;
  std::string text;  ///< "a positive integer", "> 0", "in [0, 1)": what "must be ..." says
};

/// The rule of option `key` of `command`: the library's and Python's name ("max_seconds"),
/// which is the CLI's flag without its dashes ("--max-seconds"); the command's own rule where
/// it has one ("simulate" threads >= 1), else the rule every command shares. nullptr: the
/// option takes any finite value (a seed) or is not numeric.
const NumberRule* number_rule(const std::string& command, const std::string& key);

/// "" when v obeys the rule of `key` in `command` (and is finite), else why not:
/// "must be a positive integer, got -2".
std::string number_problem(const std::string& command, const std::string& key, double v);

/// The CLI flag's key: "--max-seconds" -> "max_seconds", "-t,--min-seconds" -> "min_seconds".
std::string option_key(const std::string& flag);

/// Checks (key, value) pairs of `command` in order; the first broken rule is an invalid
/// argument naming the option as the caller knows it: "`batch` must be a positive integer,
/// got -2" (the library and Python; the CLI's own check names the flag before this runs).
Status check_numbers(const std::string& command, const std::vector<std::pair<std::string, double>>& values);

}  // namespace mosaic::api
