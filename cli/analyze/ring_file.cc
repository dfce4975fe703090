#include "cli/analyze/ring_file.h"

#include <stdlib.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "agent/nccl_ring/ring_format.h"
#include "agent/nccl_ring/ring_reader.h"

namespace peregrine {
namespace {

namespace ring = nccl_ring;

// A private temporary file holding a copy of the ring, removed on destruction.
class TempRingFile {
 public:
  static absl::StatusOr<std::unique_ptr<TempRingFile>> Write(absl::string_view bytes) {
    std::error_code ec;
    std::filesystem::path dir = std::filesystem::temp_directory_path(ec);
    if (ec) dir = "/tmp";
    std::string path = (dir / "peregrine-analyze-ring-XXXXXX").string();
    const int fd = mkstemp(path.data());
    if (fd < 0) {
      return absl::InternalError(
          absl::StrCat("cannot create a temporary copy in ", dir.string(), ": ", std::strerror(errno)));
    }
    auto file = std::unique_ptr<TempRingFile>(new TempRingFile(path));
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
      if (n < 0) {
        if (errno == EINTR) continue;
        const int err = errno;
        ::close(fd);
        return absl::InternalError(absl::StrCat("cannot write ", path, ": ", std::strerror(err)));
      }
      done += static_cast<size_t>(n);
    }
    ::close(fd);
    return file;
  }
  ~TempRingFile() { ::unlink(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  explicit TempRingFile(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

}  // namespace

bool LooksLikeNcclRing(absl::string_view bytes) {
  if (bytes.size() < sizeof(uint64_t)) return false;
  uint64_t magic = 0;
  std::memcpy(&magic, bytes.data(), sizeof magic);
  return magic == ring::kMagic;
}

absl::StatusOr<NcclTrace> ReadNcclRingFile(absl::string_view bytes, absl::string_view source) {
  if (!LooksLikeNcclRing(bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": not a Peregrine NCCL ring (no \"PEGRRING\" magic)"));
  }
  if (bytes.size() < ring::RecordsOffset()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: truncated Peregrine NCCL ring: %d bytes, smaller than its header and "
        "communicator table (%d bytes)",
        source, bytes.size(), ring::RecordsOffset()));
  }
  absl::StatusOr<std::unique_ptr<TempRingFile>> copy = TempRingFile::Write(bytes);
  if (!copy.ok()) {
    return absl::InternalError(absl::StrCat(source, ": ", copy.status().message()));
  }
  const std::string& tmp = (*copy)->path();
  absl::StatusOr<std::unique_ptr<NcclRingReader>> reader = NcclRingReader::Open(tmp);
  if (!reader.ok()) {
    // The reader names its file: name the user's instead.
    const std::string message = absl::StrReplaceAll(
        reader.status().message(), {{absl::StrCat("NCCL ring ", tmp, ": "), ""},
                                    {absl::StrCat("NCCL ring ", tmp), "the ring"},
                                    {tmp, "the copy"}});
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": truncated or corrupt Peregrine NCCL ring: ", message));
  }
  const NcclRingInfo info = (*reader)->Info();
  NcclCallStream stream;
  stream.rank = info.global_rank;
  stream.label = info.global_rank >= 0
                     ? absl::StrCat("rank ", info.global_rank, " (pid ", info.pid, ")")
                     : absl::StrCat("pid ", info.pid);
  stream.has_timestamps = true;
  uint64_t cursor = 0, lost = 0, records = 0, other = 0;
  while (true) {
    NcclPollResult poll = (*reader)->Poll(cursor);
    lost += poll.lost;
    records += poll.records.size();
    for (const NcclRecord& r : poll.records) {
      if (std::optional<NcclCallRecord> call = CallRecordOf(r)) {
        stream.calls.push_back(*call);
      } else {
        ++other;
      }
    }
    if (poll.next_cursor == cursor) break;  // at the write index, or an uncommitted record
    cursor = poll.next_cursor;
  }
  NcclTrace trace;
  trace.format = NcclTraceFormat::kPeregrineRing;
  trace.notes.push_back(absl::StrFormat(
      "ring of %s: NCCL %d, %d records written, %d read (%d traffic calls, %d other "
      "records), %d communicators",
      stream.label, info.nccl_version, info.write_index, records, stream.calls.size(), other,
      (*reader)->Comms().size()));
  if (lost > 0 || info.dropped_records > 0) {
    trace.notes.push_back(absl::StrFormat(
        "%d older records were overwritten (the ring keeps the newest %d) and %d were dropped "
        "by the writer: the analysis covers the calls that remain",
        lost, info.capacity, info.dropped_records));
  }
  if (info.write_index > cursor) {
    trace.notes.push_back(absl::StrFormat(
        "%d records after the first uncommitted one were not read (the process was writing)",
        info.write_index - cursor));
  }
  if (stream.calls.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": the Peregrine NCCL ring holds no collective, send or recv call (",
                     records, " records)"));
  }
  trace.streams.push_back(std::move(stream));
  return trace;
}

}  // namespace peregrine
