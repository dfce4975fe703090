#include "client/shard_writer.h"

// Why the child-safe discipline: after fork() in a multi-threaded process only the
// forking thread exists in the child, and any lock another thread held (malloc's, stdio's,
// the language runtime's) stays held forever. So the writer formats its messages into the
// caller's fixed buffer with the tiny Text helper below, takes error texts from
// strerrordesc_np (static English strings, no locale, no allocation), and uses only
// open/ftruncate/posix_fallocate/mmap/memcpy/rename/unlink. The parallel copy (threads,
// a mutex, a std::vector) is used only when the caller says it runs in the trainer.
//
// Releasing the sources (the snapshot child only): after fork every page of the trainer
// is shared with the child, and each page the trainer writes while the child lives costs
// a fault, a fresh page and a 4 KiB copy. Once the child has copied a piece of a segment
// it never reads it again, so it drops its own mapping of those pages (MADV_DONTNEED on
// its private view: the trainer's memory is untouched); the page is then the trainer's
// alone and its next write keeps it in place: a cheap fault, no copy, no extra memory.

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "client/copy_pool.h"
#include "client/peregrine_client.h"

namespace peregrine::client {
namespace {

// Appends C strings and numbers to a fixed buffer, truncating; no allocation.
class Text {
 public:
  Text(char* buf, size_t size) : buf_(buf), size_(size) { buf_[0] = '\0'; }
  Text& operator<<(const char* s) {
    while (*s != '\0' && used_ + 1 < size_) buf_[used_++] = *s++;
    buf_[used_] = '\0';
    return *this;
  }
  Text& operator<<(const std::string& s) { return *this << s.c_str(); }
  Text& operator<<(uint64_t v) {
    char digits[24];
    int n = 0;
    do {
      digits[n++] = static_cast<char>('0' + v % 10);
      v /= 10;
    } while (v != 0);
    char out[24];
    for (int i = 0; i < n; ++i) out[i] = digits[n - 1 - i];
    out[n] = '\0';
    return *this << static_cast<const char*>(out);
  }
  const char* c_str() const { return buf_; }
  size_t size() const { return used_; }

 private:
  char* buf_;
  size_t size_;
  size_t used_ = 0;
};

const char* ErrorText(int e) {
  const char* s = strerrordesc_np(e);
  return s == nullptr ? "unknown error" : s;
}

// The snapshot child copies and releases its sources this much at a time.
constexpr uint64_t kReleaseChunkBytes = uint64_t{4} << 20;

bool NoRoom(int e) { return e == ENOSPC || e == EDQUOT || e == EFBIG; }

// Writes the reason into the skipped marker (temp + rename: the agent never reads half).
bool WriteMarker(const ShardPlan& plan, const char* reason, size_t reason_len) {
  const int fd = open(plan.marker_tmp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  const bool written = write(fd, reason, reason_len) == static_cast<ssize_t>(reason_len) && write(fd, "\n", 1) == 1;
  close(fd);
  if (!written || rename(plan.marker_tmp_path.c_str(), plan.marker_path.c_str()) != 0) {
    unlink(plan.marker_tmp_path.c_str());
    return false;
  }
  return true;
}

void CopyRanges(const ShardPlan& plan, uint8_t* base, bool parallel, bool release_sources) {
  if (parallel) {
    std::vector<CopyPiece> pieces;
    pieces.reserve(plan.ranges.size());
    for (const ShardRange& r : plan.ranges) {
      if (r.src == nullptr) {
        std::memset(base + r.offset, 0, r.length);
      } else if (r.length > 0) {
        pieces.push_back({base + r.offset, r.src, r.length});
      }
    }
    ParallelCopy(pieces);
    return;
  }
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  for (const ShardRange& r : plan.ranges) {
    if (r.src == nullptr) {
      std::memset(base + r.offset, 0, r.length);
      continue;
    }
    for (uint64_t done = 0; done < r.length;) {
      const uint64_t n = std::min(kReleaseChunkBytes, r.length - done);
      const auto src = reinterpret_cast<uintptr_t>(r.src) + done;
      std::memcpy(base + r.offset + done, reinterpret_cast<const void*>(src), n);
      if (release_sources) {
        // This process will not read these source pages again: drop its reference, so
        // that the trainer's next write to them reuses its page instead of copying it.
        // Only whole pages inside the chunk (an edge page may hold other data).
        const uintptr_t lo = (src + page - 1) / page * page;
        const uintptr_t hi = (src + n) / page * page;
        if (hi > lo) madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
      }
      done += n;
    }
  }
}

}  // namespace

void WriteShard(const ShardPlan& plan, bool parallel, WriteOutcome* out) {
  Text message(out->message, sizeof(out->message));
  out->code = PG_ERROR;
  // The rename is the claim: whoever renames the free buffer first owns its pages.
  const bool reused = !plan.free_buffer.empty() && rename(plan.free_buffer.c_str(), plan.tmp_path.c_str()) == 0;
  const int fd = open(plan.tmp_path.c_str(), reused ? O_RDWR | O_CLOEXEC : O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC,
                      0600);
  if (fd < 0) {
    const int e = errno;
    message << "cannot create " << plan.tmp_path << ": " << ErrorText(e);
    // The marker tells the agent why the step is missing (it fails too when the
    // directory is gone; the caller still gets the message).
    WriteMarker(plan, message.c_str(), message.size());
    return;
  }
  auto abandon = [&](bool no_room) {
    close(fd);
    unlink(plan.tmp_path.c_str());
    if (no_room && WriteMarker(plan, message.c_str(), message.size())) out->code = PG_SKIPPED;
  };
  if (ftruncate(fd, static_cast<off_t>(plan.bytes)) != 0) {
    const int e = errno;
    message << "cannot size " << plan.tmp_path << " to " << plan.bytes << " bytes: " << ErrorText(e);
    return abandon(NoRoom(e));
  }
  if (const int e = posix_fallocate(fd, 0, static_cast<off_t>(plan.bytes)); e != 0) {
    message << "no room for a shard of " << plan.bytes << " bytes in " << plan.dir << ": " << ErrorText(e);
    return abandon(NoRoom(e));
  }
  // MAP_POPULATE maps every page up front (one pass in the kernel) instead of one fault
  // per 4 KiB page during the copy.
  void* map = mmap(nullptr, plan.bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (map == MAP_FAILED) {
    const int e = errno;
    message << "cannot map " << plan.tmp_path << ": " << ErrorText(e);
    return abandon(false);
  }
  auto* base = static_cast<uint8_t*>(map);
  CopyRanges(plan, base, parallel, !parallel && plan.release_sources);
  std::memcpy(base, plan.header.data(), plan.header.size());
  munmap(map, plan.bytes);
  close(fd);
  if (rename(plan.tmp_path.c_str(), plan.shard_path.c_str()) != 0) {
    const int e = errno;
    unlink(plan.tmp_path.c_str());
    message << "cannot publish " << plan.shard_path << ": " << ErrorText(e);
    return;
  }
  out->code = PG_OK;
}

}  // namespace peregrine::client
