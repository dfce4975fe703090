#include "agent/inspection/sysfs_read.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace peregrine::inspection_internal {

absl::StatusOr<std::string> ReadSmallFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) return absl::NotFoundError(absl::StrCat(path, ": not found"));
    return absl::UnavailableError(absl::StrCat(path, ": ", std::strerror(err)));
  }
  std::string out;
  char buf[4096];
  while (out.size() < (1u << 20)) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      close(fd);
      return absl::UnavailableError(absl::StrCat(path, ": ", std::strerror(err)));
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return out;
}

absl::StatusOr<std::vector<std::string>> ListDirectory(const std::string& path) {
  DIR* dir = opendir(path.c_str());
  if (dir == nullptr) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) return absl::NotFoundError(absl::StrCat(path, ": not found"));
    return absl::UnavailableError(absl::StrCat(path, ": ", std::strerror(err)));
  }
  std::vector<std::string> names;
  while (dirent* e = readdir(dir)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  closedir(dir);
  std::sort(names.begin(), names.end());
  return names;
}

bool PathExists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

}  // namespace peregrine::inspection_internal
