#include "agent/checkpoint/shard_files.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace peregrine::checkpoint {
namespace {

absl::Status Errno(const std::string& what, const std::string& path) {
  const int err = errno;
  if (err == ENOENT) return absl::NotFoundError(absl::StrCat(what, " ", path, ": ", std::strerror(err)));
  return absl::InternalError(absl::StrCat(what, " ", path, ": ", std::strerror(err)));
}

absl::Status WithPath(const absl::Status& status, const std::string& path) {
  return absl::Status(status.code(), absl::StrCat(path, ": ", status.message()));
}

// A whole file mapped (read-only or shared writable); unmapped and closed on destruction.
class Mapping {
 public:
  static absl::StatusOr<Mapping> Open(const std::string& path, bool writable) {
    const int fd = ::open(path.c_str(), (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC);
    if (fd < 0) return Errno("open", path);
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      absl::Status s = Errno("stat", path);
      ::close(fd);
      return s;
    }
    Mapping m;
    m.fd_ = fd;
    m.size_ = static_cast<size_t>(st.st_size);
    if (m.size_ == 0) return m;
    void* p = ::mmap(nullptr, m.size_, writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return Errno("mmap", path);
    m.data_ = static_cast<uint8_t*>(p);
    return m;
  }
  Mapping() = default;
  Mapping(Mapping&& o) noexcept
      : fd_(std::exchange(o.fd_, -1)), data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  ~Mapping() {
    if (data_ != nullptr) ::munmap(data_, size_);
    if (fd_ >= 0) ::close(fd_);
  }
  absl::Span<uint8_t> bytes() { return absl::Span<uint8_t>(data_, size_); }

 private:
  int fd_ = -1;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace

absl::StatusOr<ShardHeader> ReadShardFileHeader(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Errno("open", path);
  uint8_t header[kShardHeaderBytes];
  const ssize_t n = ::pread(fd, header, sizeof(header), 0);
  ::close(fd);
  if (n < 0) return Errno("read", path);
  if (static_cast<size_t>(n) < sizeof(header)) {
    return absl::DataLossError(absl::StrCat(path, ": truncated header (", n, " bytes)"));
  }
  absl::StatusOr<ShardHeader> decoded = DecodeShardHeader(absl::Span<const uint8_t>(header, sizeof(header)));
  if (!decoded.ok()) return WithPath(decoded.status(), path);
  return decoded;
}

absl::Status FinishShardFile(const std::string& path) {
  absl::StatusOr<Mapping> m = Mapping::Open(path, /*writable=*/true);
  if (!m.ok()) return m.status();
  if (absl::Status s = FinishShard(m->bytes()); !s.ok()) return WithPath(s, path);
  return absl::OkStatus();
}

absl::StatusOr<ShardHeader> VerifyShardFile(const std::string& path) {
  absl::StatusOr<Mapping> m = Mapping::Open(path, /*writable=*/false);
  if (!m.ok()) return m.status();
  absl::StatusOr<ShardHeader> header = VerifyShard(m->bytes());
  if (!header.ok()) return WithPath(header.status(), path);
  return header;
}

absl::StatusOr<ShardHeader> VerifyShardFileFor(const std::string& path, uint64_t step, uint32_t global_rank) {
  absl::StatusOr<ShardHeader> header = VerifyShardFile(path);
  if (!header.ok()) return header;
  if (header->step != step || header->global_rank != global_rank) {
    return absl::DataLossError(absl::StrCat(path, ": holds step ", header->step, " of rank ", header->global_rank,
                                            ", expected step ", step, " of rank ", global_rank));
  }
  return header;
}

absl::StatusOr<ShardFileWriter> ShardFileWriter::Create(const std::string& path, uint64_t total_bytes) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Errno("create", path);
  if (::ftruncate(fd, static_cast<off_t>(total_bytes)) != 0) {
    absl::Status s = Errno("size", path);
    ::close(fd);
    ::unlink(path.c_str());
    return s;
  }
  return ShardFileWriter(path, fd, total_bytes);
}

ShardFileWriter::ShardFileWriter(ShardFileWriter&& o) noexcept
    : path_(std::move(o.path_)),
      fd_(std::exchange(o.fd_, -1)),
      total_(o.total_),
      written_(o.written_),
      keep_(std::exchange(o.keep_, true)) {}

ShardFileWriter::~ShardFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!keep_ && !path_.empty()) ::unlink(path_.c_str());
}

absl::Status ShardFileWriter::Append(uint64_t offset, absl::Span<const uint8_t> data) {
  if (offset != written_) {
    return absl::DataLossError(absl::StrCat(path_, ": chunk at offset ", offset, ", expected ", written_));
  }
  if (data.size() > total_ - written_) {
    return absl::DataLossError(
        absl::StrCat(path_, ": chunk of ", data.size(), " bytes at ", offset, " runs past the total ", total_));
  }
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::pwrite(fd_, data.data() + done, data.size() - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno("write", path_);
    }
    done += static_cast<size_t>(n);
  }
  written_ += data.size();
  return absl::OkStatus();
}

absl::Status ShardFileWriter::Close() {
  if (written_ != total_) {
    return absl::DataLossError(absl::StrCat(path_, ": ", written_, " of ", total_, " bytes arrived"));
  }
  if (fd_ >= 0 && ::close(std::exchange(fd_, -1)) != 0) return Errno("close", path_);
  return absl::OkStatus();
}

}  // namespace peregrine::checkpoint
