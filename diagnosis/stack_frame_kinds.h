// What a rank is doing, read from its captured stack: each frame is classified into a
// kind by its function name and file (as py-spy, gdb and eu-stack print them), and a
// thread's activity is the kind that best explains where it is blocked. The hang verdict
// (stack_aggregation.h) uses it to break ties between stack groups: a rank idling in a
// data loader, a queue or a sleep while its peers sit in collectives is the likely culprit.
//
// The patterns and the precedence are described in stack_frame_kinds.cc.
//
// Pure functions; no I/O; thread-safe.
#ifndef PEREGRINE_DIAGNOSIS_STACK_FRAME_KINDS_H_
#define PEREGRINE_DIAGNOSIS_STACK_FRAME_KINDS_H_

#include <string>

#include "diagnosis/stack_parse.h"

namespace peregrine {

enum class FrameKind {
  kUnknown,         // nothing recognised
  kCompute,         // forward/backward, kernels, optimizer: running or launching work
  kIdle,            // sleep, file or socket read, poll/select/epoll: waiting on the outside
  kQueueOrLock,     // a queue get, a lock, a condition variable, a futex
  kDataLoading,     // a data loader (torch DataLoader, its workers, collate, a dataset)
  kCollectiveWait,  // NCCL/c10d collectives and barriers, p2p send/recv, device synchronize
};

// "unknown", "compute", "idle", "queue/lock", "data loading", "collective wait".
const char* FrameKindName(FrameKind kind);

// The kind of one frame, from its (raw or normalised) function name and its file.
FrameKind ClassifyFrame(const StackFrame& frame);

// Whether a rank in this activity waits for something other than its peers (it is not in
// a collective, so peers blocked in a collective may be waiting for it).
bool IsIdleSignature(FrameKind kind);

struct ThreadActivity {
  FrameKind kind = FrameKind::kUnknown;
  std::string frame;  // the normalised frame that decided the kind; empty when unknown
};

// The activity of a thread: the innermost frame of the strongest kind present, where
// collective wait and data loading are strong, then queue/lock, idle, compute.
ThreadActivity ClassifyThread(const ThreadStack& thread);

}  // namespace peregrine

#endif  // PEREGRINE_DIAGNOSIS_STACK_FRAME_KINDS_H_
