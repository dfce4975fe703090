#include "cli/analyze/input_file.h"

#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "absl/strings/str_cat.h"

namespace peregrine {

bool LooksLikeGzip(absl::string_view bytes) {
  return bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x1f &&
         static_cast<unsigned char>(bytes[1]) == 0x8b;
}

// zlib's inflate with windowBits 15 + 16 reads one gzip member (header, deflate data,
// CRC-32 and length trailer, both checked). At Z_STREAM_END the next member, if any bytes
// follow, starts with inflateReset; trailing zero padding (tape-era tools) is accepted.
// The input is fed in slices of at most 1 GiB because zlib counts in 32-bit unsigned ints.
absl::StatusOr<std::string> InflateGzip(absl::string_view bytes, absl::string_view source,
                                        size_t max_bytes) {
  z_stream z{};
  if (inflateInit2(&z, 15 + 16) != Z_OK) {
    return absl::InternalError(absl::StrCat(source, ": cannot initialise zlib"));
  }
  std::string out;
  const unsigned char* next = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t left = bytes.size();
  char buffer[64 * 1024];
  absl::Status status;
  while (true) {
    if (z.avail_in == 0 && left > 0) {
      const size_t slice = std::min<size_t>(left, size_t{1} << 30);
      z.next_in = const_cast<unsigned char*>(next);
      z.avail_in = static_cast<uInt>(slice);
      next += slice;
      left -= slice;
    }
    z.next_out = reinterpret_cast<unsigned char*>(buffer);
    z.avail_out = sizeof(buffer);
    const int rc = inflate(&z, Z_NO_FLUSH);
    const size_t produced = sizeof(buffer) - z.avail_out;
    if (out.size() + produced > max_bytes) {
      status = absl::InvalidArgumentError(
          absl::StrCat(source, ": gzip data inflates to more than ", max_bytes, " bytes"));
      break;
    }
    out.append(buffer, produced);
    if (rc == Z_STREAM_END) {
      // Skip zero padding; anything else must be another gzip member.
      while (true) {
        while (z.avail_in > 0 && *z.next_in == 0) {
          ++z.next_in;
          --z.avail_in;
        }
        if (z.avail_in > 0 || left == 0) break;
        const size_t slice = std::min<size_t>(left, size_t{1} << 30);
        z.next_in = const_cast<unsigned char*>(next);
        z.avail_in = static_cast<uInt>(slice);
        next += slice;
        left -= slice;
      }
      if (z.avail_in == 0) break;  // all members read
      if (inflateReset(&z) != Z_OK) {
        status = absl::InternalError(absl::StrCat(source, ": zlib reset failed"));
        break;
      }
      continue;
    }
    if (rc == Z_OK || (rc == Z_BUF_ERROR && z.avail_in == 0 && left > 0)) continue;
    if (rc == Z_BUF_ERROR && z.avail_in == 0 && left == 0) {
      status = absl::InvalidArgumentError(absl::StrCat(
          source, ": truncated gzip data: the stream ends after ", bytes.size(),
          " bytes, before its end marker (an interrupted copy or download?)"));
      break;
    }
    status = absl::InvalidArgumentError(absl::StrCat(
        source, ": corrupt gzip data at compressed byte ", z.total_in, ": ",
        z.msg != nullptr ? z.msg : "inflate failed", rc == Z_NEED_DICT ? " (needs a dictionary)" : ""));
    break;
  }
  inflateEnd(&z);
  if (!status.ok()) return status;
  return out;
}

absl::StatusOr<std::string> ReadAnalysisInput(const std::string& path, size_t max_bytes) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": is a directory, expected a file"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open (does it exist?)"));
  std::string bytes;
  char buffer[64 * 1024];
  while (in.read(buffer, sizeof(buffer)) || in.gcount() > 0) {
    if (bytes.size() + static_cast<size_t>(in.gcount()) > max_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": larger than ", max_bytes, " bytes, the limit of an analysis input"));
    }
    bytes.append(buffer, static_cast<size_t>(in.gcount()));
  }
  if (in.bad()) return absl::InvalidArgumentError(absl::StrCat(path, ": read error"));
  if (!LooksLikeGzip(bytes)) return bytes;
  return InflateGzip(bytes, path, max_bytes);
}

}  // namespace peregrine
