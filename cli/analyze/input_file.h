// The one way `peregrinectl analyze` reads an input file: the bytes of the file, inflated
// when they are gzip (by content: the magic bytes 1f 8b, whatever the file is called), so
// that every analysis (steps, nccl, stacks, fr) takes `.gz` files as users have them.
//
// InflateGzip(bytes, source, max_bytes): the decompressed content of one or more
// concatenated gzip members (what `gzip` and `cat a.gz b.gz` produce). Errors are
// kInvalidArgument naming `source`: a truncated stream ("truncated gzip data: the stream
// ends after N of its bytes"), corrupt data (zlib's reason), or output beyond `max_bytes`
// ("inflates to more than N bytes"; a decompression bomb stops there, not at memory's end).
//
// ReadAnalysisInput(path, max_bytes): kInvalidArgument for a directory, kNotFound when the
// file cannot be opened, kInvalidArgument when the file itself exceeds `max_bytes`; then
// InflateGzip when LooksLikeGzip. Every message starts with the path.
//
// Thread-compatible. InflateGzip is pure; ReadAnalysisInput reads the file system.
#ifndef PEREGRINE_CLI_ANALYZE_INPUT_FILE_H_
#define PEREGRINE_CLI_ANALYZE_INPUT_FILE_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace peregrine {

// The default cap on a file and on its inflated content: 1 GiB.
inline constexpr size_t kMaxAnalysisInputBytes = size_t{1} << 30;

// True when `bytes` starts with the gzip magic (RFC 1952: 0x1f 0x8b).
bool LooksLikeGzip(absl::string_view bytes);

absl::StatusOr<std::string> InflateGzip(absl::string_view bytes, absl::string_view source,
                                        size_t max_bytes = kMaxAnalysisInputBytes);

absl::StatusOr<std::string> ReadAnalysisInput(const std::string& path,
                                              size_t max_bytes = kMaxAnalysisInputBytes);

}  // namespace peregrine

#endif  // PEREGRINE_CLI_ANALYZE_INPUT_FILE_H_
