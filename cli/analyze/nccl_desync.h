// Cross-rank desync in NCCL call streams, for `peregrinectl analyze nccl` given several
// ranks: the first call at which the ranks of one communicator disagree on the collective
// (op, element count, datatype, or the communicator itself where the input names it across
// processes). A real failure class: one rank calls AllGather while its peers call
// AllReduce, and all of them hang (or, for a count mismatch, corrupt data or hang).
//
// FindNcclDesync(streams): the streams are split into communicator classes (by global
// communicator id where every stream has one, else by communicator size [nranks=N], else
// one class); in each class with two or more streams the calls are aligned by opCount /
// sequence number when every call has one and they increase strictly in every stream, else
// by position, and the first aligned call where the streams' signatures differ is reported,
// the streams grouped by signature (largest group first). Streams whose calls stop before
// the others' are reported as behind (the ranks that never reached a collective the
// others entered). Pure; thread-compatible.
#ifndef PEREGRINE_CLI_ANALYZE_NCCL_DESYNC_H_
#define PEREGRINE_CLI_ANALYZE_NCCL_DESYNC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "cli/analyze/nccl_trace.h"

namespace peregrine {

// The streams that made the same call at the disagreeing position.
struct NcclDesyncSide {
  std::string call;                  // "AllGather count=59205120 dtype=0 nranks=4"
  std::vector<std::string> streams;  // labels
  std::vector<int> ranks;            // the known ranks among them
};

// A stream whose calls end before its peers' in a class.
struct NcclBehindStream {
  std::string stream;
  int rank = -1;
  int64_t last_position = -1;  // its last call: opCount (aligned by opCount) or index
  int64_t peers_last = -1;     // the furthest peer's last position
};

// One communicator class.
struct NcclDesyncClass {
  std::string group;                 // "communicators of 4 ranks", "process group 0x1f..", "all streams"
  std::vector<std::string> streams;  // the streams compared
  std::string aligned_by;            // "opCount" or "call index"
  int64_t compared_calls = 0;        // aligned positions where two or more streams have a call
  bool desync = false;
  int64_t position = -1;  // the first disagreeing opCount or call index
  std::vector<NcclDesyncSide> sides;
  std::vector<NcclBehindStream> behind;
};

struct NcclDesyncReport {
  std::vector<NcclDesyncClass> classes;  // classes with two or more streams, largest first
  bool any_desync = false;
};

NcclDesyncReport FindNcclDesync(const std::vector<NcclCallStream>& streams);

}  // namespace peregrine

#endif  // PEREGRINE_CLI_ANALYZE_NCCL_DESYNC_H_
