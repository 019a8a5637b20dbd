#include "ir/file_io.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>

namespace mosaic {

namespace {

int g_data_fd = STDOUT_FILENO;
bool g_reserved = false;

Status write_all(int fd, const std::string& bytes, const std::string& what) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Status::io_error(what + ": write failed: " + std::strerror(errno));
    done += static_cast<size_t>(n);
  }
  return Status::ok();
}

}  // namespace

void reserve_stdout_for_data() {
  if (g_reserved) return;
  std::fflush(stdout);
  std::cout.flush();
  const int saved = ::dup(STDOUT_FILENO);
  if (saved < 0) return;
  ::dup2(STDERR_FILENO, STDOUT_FILENO);
  g_data_fd = saved;
  g_reserved = true;
}

bool stdout_reserved_for_data() { return g_reserved; }

Status write_file_atomic(const std::string& path, const std::function<void(std::ostream&)>& writer) {
  if (path == "-") {
    std::ostringstream os;
    writer(os);
    std::fflush(stdout);
    std::cout.flush();
    return write_all(g_data_fd, os.str(), "standard output");
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    if (S_ISDIR(st.st_mode)) return Status::invalid(path + ": is a directory, not a file");
    // A device or FIFO: no rename onto it; written in place with every error checked.
    const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) return Status::io_error(path + ": cannot open for writing: " + std::strerror(errno));
    std::ostringstream os;
    writer(os);
    Status s = write_all(fd, os.str(), path);
    if (::close(fd) != 0 && s.is_ok()) s = Status::io_error(path + ": write failed: " + std::strerror(errno));
    return s;
  }
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return Status::io_error(path + ": cannot open " + tmp + " for writing: " + std::strerror(errno));
    writer(f);
    f.flush();
    const bool written = static_cast<bool>(f);
    const int err = errno;
    f.close();
    if (!written || f.fail()) {
      std::remove(tmp.c_str());
      return Status::io_error(path + ": write failed (" + std::strerror(err ? err : EIO) +
                              "); the previous file, if any, is untouched");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    return Status::io_error(path + ": cannot rename " + tmp + " into place: " + std::strerror(err));
  }
  return Status::ok();
}

Status write_file_atomic(const std::string& path, const std::string& content) {
  return write_file_atomic(path, [&](std::ostream& os) { os.write(content.data(), static_cast<std::streamsize>(content.size())); });
}

}  // namespace mosaic
