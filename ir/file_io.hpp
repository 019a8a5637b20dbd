// Output files that are either whole or absent: written to a temporary file beside the target,
// every error checked through flush and close, then renamed into place. A failed write (a full
// disk, /dev/full, a vanished folder) leaves the previous file untouched and no partial one.
#pragma once

#include <functional>
#include <ostream>
#include <string>

#include "ir/status.hpp"

namespace mosaic {

/// Writes what `writer` puts into the stream to `path`, atomically:
/// - a regular file (or a new one): PATH.tmp.PID in the same folder, flushed and closed with
///   errors checked, then renamed over PATH; on any error the temporary file is removed;
/// - "-": standard output (the data channel: see reserve_stdout_for_data);
/// - an existing path that is not a regular file (/dev/null, /dev/stdout, a FIFO): written in
///   place, errors checked (so /dev/full fails instead of exiting 0).
Status write_file_atomic(const std::string& path, const std::function<void(std::ostream&)>& writer);
/// The same for a string.
Status write_file_atomic(const std::string& path, const std::string& content);

/// Makes standard output carry data only: what the program prints for people from now on goes
/// to standard error, and write_file_atomic("-") writes to the original standard output. Called
/// once by the CLI when an output option is "-" (--json - | jq). Idempotent.
void reserve_stdout_for_data();
/// Whether reserve_stdout_for_data has been called.
bool stdout_reserved_for_data();

}  // namespace mosaic
