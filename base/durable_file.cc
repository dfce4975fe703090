#include "base/durable_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

// The order is what makes it crash-consistent: the data reaches the disk (fsync of the
// temporary file) before the rename can make it visible under `path`, and the directory
// entry naming the new inode reaches the disk (fsync of the directory) before the call
// reports success. A crash before the rename leaves the old file and a stray temporary
// (named <path>.tmp.<pid>.<n>, overwritten by a later write of the same process id).

namespace peregrine {
namespace {

absl::Status Errno(int err, absl::string_view what, absl::string_view path) {
  return absl::InternalError(absl::StrCat(what, " ", path, ": ", std::strerror(err)));
}

std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

absl::Status FsyncPath(const std::string& path, int flags, absl::string_view what) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) return Errno(errno, absl::StrCat("open ", what), path);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  return rc == 0 ? absl::OkStatus() : Errno(err, absl::StrCat("fsync ", what), path);
}

}  // namespace

absl::Status WriteFileDurably(const std::string& path, absl::string_view content, mode_t mode) {
  static std::atomic<uint64_t> counter{0};
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid(), ".", counter.fetch_add(1));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return Errno(errno, "create", tmp);
  absl::Status status;
  size_t done = 0;
  while (status.ok() && done < content.size()) {
    const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) status = Errno(errno, "write", tmp);
    if (n > 0) done += static_cast<size_t>(n);
  }
  if (status.ok() && ::fsync(fd) != 0) status = Errno(errno, "fsync", tmp);
  if (::close(fd) != 0 && status.ok()) status = Errno(errno, "close", tmp);
  if (status.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) status = Errno(errno, absl::StrCat("rename ", tmp, " to"), path);
  if (!status.ok()) {
    ::unlink(tmp.c_str());
    return status;
  }
  return FsyncPath(DirectoryOf(path), O_RDONLY | O_DIRECTORY, "directory");
}

}  // namespace peregrine
