// peregrine-finish-shard: fills in the payload checksum of shard files (FinishShard), the
// step the agent's store takes before a shard counts as stored. For tests and benchmarks
// of the client library that run without an agent.
//
// Usage: peregrine-finish-shard SHARD_FILE...
// Exit 0 when every file was finished; 1 (with a message naming the file) otherwise.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/types/span.h"
#include "checkpoint/shard_format.h"

namespace {

bool Finish(const char* path) {
  const int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    std::fprintf(stderr, "peregrine-finish-shard: cannot open %s: %s\n", path, std::strerror(errno));
    return false;
  }
  struct stat st{};
  if (fstat(fd, &st) != 0 || st.st_size == 0) {
    std::fprintf(stderr, "peregrine-finish-shard: %s is empty or cannot be read\n", path);
    close(fd);
    return false;
  }
  const size_t bytes = static_cast<size_t>(st.st_size);
  void* map = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (map == MAP_FAILED) {
    std::fprintf(stderr, "peregrine-finish-shard: cannot map %s: %s\n", path, std::strerror(errno));
    return false;
  }
  const absl::Status s = peregrine::checkpoint::FinishShard(absl::MakeSpan(static_cast<uint8_t*>(map), bytes));
  munmap(map, bytes);
  if (!s.ok()) {
    std::fprintf(stderr, "peregrine-finish-shard: %s: %s\n", path, std::string(s.message()).c_str());
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: peregrine-finish-shard SHARD_FILE...\n");
    return 1;
  }
  bool ok = true;
  for (int i = 1; i < argc; ++i) ok = Finish(argv[i]) && ok;
  return ok ? 0 : 1;
}
