// Binary NCCL call rings written by libperegrine_nccl.so (agent/nccl_hook/ring_format.h:
// "PEGRRING" magic, header, communicator table, 64-byte records), as input to
// `peregrinectl analyze nccl`. A ring is one training process's calls: the newest
// `capacity` records (older ones were overwritten; the report says how many).
//
// LooksLikeNcclRing(bytes): the file starts with the ring magic.
// ReadNcclRingFile(bytes, source): decodes the ring with the agent's NcclRingReader. The
// reader maps a file, so the bytes are written to a private temporary file first (a
// snapshot: a ring still being written, or a read-only copy, is read the same way);
// the temporary file is removed before returning. The result is one stream of the
// process's traffic calls (collectives, send, recv) in record order with their enter
// times, labelled by rank (RANK of the process) and pid, plus notes on lost records.
// Errors are kInvalidArgument "SOURCE: problem": truncated files (smaller than the header
// and communicator table, or than the record area its capacity needs), bad layout or
// version, or a ring with no traffic call; kInternal when the temporary file cannot be
// written.
//
// Thread-compatible; the only I/O is the temporary file.
#ifndef PEREGRINE_CLI_ANALYZE_RING_FILE_H_
#define PEREGRINE_CLI_ANALYZE_RING_FILE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cli/analyze/nccl_trace.h"

namespace peregrine {

bool LooksLikeNcclRing(absl::string_view bytes);

absl::StatusOr<NcclTrace> ReadNcclRingFile(absl::string_view bytes, absl::string_view source);

}  // namespace peregrine

#endif  // PEREGRINE_CLI_ANALYZE_RING_FILE_H_
