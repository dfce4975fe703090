#include "diagnosis/stack_frame_kinds.h"

#include <initializer_list>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "diagnosis/stack_aggregation.h"

// Frame kinds. Each frame is matched on its normalised function name (lower case, argument
// lists and templates dropped: stack_aggregation.h NormalizeFunctionName) and its file
// path (lower case), in this order, first match wins:
//   1. collective wait: NCCL and c10d (any name with "nccl", "c10d::", files under
//      torch/distributed or deepspeed/comm, Megatron's p2p_communication.py), collective
//      names (all_reduce/allreduce, all_gather, reduce_scatter, broadcast, barrier,
//      all_to_all, isend/irecv, send_/recv_ forward/backward, RecvActivations-style p2p
//      names: "send"/"recv" inside a longer name that is not a libc call), and device
//      synchronisation (cudaStreamSynchronize, cudaDeviceSynchronize, cudaEventSynchronize,
//      cuStreamSynchronize, torch.cuda.synchronize): a rank blocked there waits for its
//      peers' kernels;
//   2. data loading: files under torch/utils/data (DataLoader, its workers, fetch,
//      collate, pin memory), file names with "dataset"/"dataloader"/"data_loader", names
//      with "dataloader", "data_loader", "_next_data", "_try_get_data", "collate",
//      "__getitem__", "get_batch", "_worker_loop";
//   3. queue/lock: queue.py, multiprocessing's queues.py/connection.py/synchronize.py,
//      threading.py, pthread_cond_*, pthread_mutex_lock, __lll_lock_wait, futex*, sem_*,
//      std::condition_variable / std::mutex, "acquire";
//   4. idle: sleeps (nanosleep, clock_nanosleep, usleep, sleep_for), reads and waits on
//      file descriptors (read, __libc_read, pread, readv, recv*, accept*, poll, ppoll,
//      select, pselect, epoll_wait), socket.py, ssl.py, selectors.py;
//   5. compute: forward/backward, nn.Module calls, autograd, optimizers, at:: operators,
//      GEMM/cuBLAS/cuDNN, kernel launches.
// A thread's activity: the innermost frame of a strong kind (collective wait, data
// loading) wherever it is in the stack, since the outer frame says why the inner wait
// happens (a DataLoader's queue get is data loading; c10d's Work::wait is a collective);
// else the innermost queue/lock or idle frame; else the innermost compute frame.

namespace peregrine {
namespace {

bool ContainsAny(absl::string_view s, std::initializer_list<absl::string_view> needles) {
  for (absl::string_view n : needles) {
    if (absl::StrContains(s, n)) return true;
  }
  return false;
}

bool EqualsAny(absl::string_view s, std::initializer_list<absl::string_view> names) {
  for (absl::string_view n : names) {
    if (s == n) return true;
  }
  return false;
}

absl::string_view BaseName(absl::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == absl::string_view::npos ? path : path.substr(slash + 1);
}

// The last component of a qualified C++ name ("c10d::Foo::wait" -> "wait").
absl::string_view LastComponent(absl::string_view name) {
  const size_t colon = name.rfind("::");
  return colon == absl::string_view::npos ? name : name.substr(colon + 2);
}

// libc / syscall names that read or wait on a descriptor or sleep.
bool IsIdleCall(absl::string_view f) {
  absl::string_view last = LastComponent(f);
  while (absl::ConsumePrefix(&last, "_")) {
  }
  return EqualsAny(last, {"read", "libc_read", "pread", "pread64", "readv", "recv", "libc_recv", "recvfrom",
                          "recvmsg", "recv_into", "readinto", "accept", "accept4", "poll", "ppoll", "select",
                          "pselect", "pselect6", "epoll_wait", "epoll_pwait", "nanosleep", "clock_nanosleep",
                          "libc_nanosleep", "usleep", "sleep", "sleep_for", "sleep_until", "wait4", "waitpid"});
}

bool IsCollective(absl::string_view f, absl::string_view path) {
  if (ContainsAny(f, {"nccl", "c10d::", "gloo::"})) return true;
  if (ContainsAny(path, {"torch/distributed/", "deepspeed/comm/", "p2p_communication", "torch/csrc/distributed"})) {
    return true;
  }
  if (ContainsAny(f, {"streamsynchronize", "devicesynchronize", "eventsynchronize", "ctxsynchronize"})) return true;
  if (LastComponent(f) == "synchronize" && absl::StrContains(path, "cuda")) return true;
  if (ContainsAny(f, {"all_reduce", "allreduce", "all_gather", "allgather", "reduce_scatter", "reducescatter",
                      "broadcast", "barrier", "all_to_all", "alltoall", "isend", "irecv", "send_forward",
                      "send_backward", "recv_forward", "recv_backward", "batch_isend_irecv"})) {
    return true;
  }
  // p2p in a named routine ("demo::RecvActivations", "pipe_send_tensor"), not a libc call.
  return !IsIdleCall(f) && ContainsAny(LastComponent(f), {"recv", "send"}) && LastComponent(f).size() > 8;
}

bool IsDataLoading(absl::string_view f, absl::string_view path) {
  if (absl::StrContains(path, "torch/utils/data/")) return true;
  const absl::string_view base = BaseName(path);
  if (ContainsAny(base, {"dataset", "dataloader", "data_loader"})) return true;
  return ContainsAny(f, {"dataloader", "data_loader", "_next_data", "_try_get_data", "collate", "__getitem__",
                         "get_batch", "_worker_loop"});
}

bool IsQueueOrLock(absl::string_view f, absl::string_view path) {
  const absl::string_view base = BaseName(path);
  if (EqualsAny(base, {"queue.py", "queues.py", "connection.py", "synchronize.py", "threading.py"})) return true;
  return ContainsAny(f, {"pthread_cond_", "pthread_mutex_lock", "lll_lock_wait", "futex", "sem_wait",
                         "sem_timedwait", "condition_variable", "std::mutex", "acquire", "pthread_join"});
}

bool IsIdle(absl::string_view f, absl::string_view path) {
  const absl::string_view base = BaseName(path);
  if (EqualsAny(base, {"socket.py", "ssl.py", "selectors.py", "subprocess.py"})) return true;
  return IsIdleCall(f);
}

bool IsCompute(absl::string_view f, absl::string_view path) {
  if (ContainsAny(path, {"torch/nn/", "torch/autograd/", "torch/optim/", "torch/_tensor.py"})) return true;
  const absl::string_view last = LastComponent(f);
  if (EqualsAny(last, {"forward", "backward", "_call_impl", "_wrapped_call_impl", "run_backward",
                       "_engine_run_backward", "step", "optimizer_step", "train_step", "forward_step",
                       "backward_step"})) {
    return true;
  }
  return ContainsAny(f, {"at::native", "at::_ops", "torch::autograd", "gemm", "cublas", "cudnn", "matmul",
                         "launchkernel", "cudalaunch", "culaunch"});
}

}  // namespace

const char* FrameKindName(FrameKind kind) {
  switch (kind) {
    case FrameKind::kUnknown: return "unknown";
    case FrameKind::kCompute: return "compute";
    case FrameKind::kIdle: return "idle";
    case FrameKind::kQueueOrLock: return "queue/lock";
    case FrameKind::kDataLoading: return "data loading";
    case FrameKind::kCollectiveWait: return "collective wait";
  }
  return "unknown";
}

FrameKind ClassifyFrame(const StackFrame& frame) {
  const std::string f = absl::AsciiStrToLower(NormalizeFunctionName(frame.function));
  const std::string path = absl::AsciiStrToLower(frame.file.empty() ? frame.module : frame.file);
  if (IsCollective(f, path)) return FrameKind::kCollectiveWait;
  if (IsDataLoading(f, path)) return FrameKind::kDataLoading;
  if (IsQueueOrLock(f, path)) return FrameKind::kQueueOrLock;
  if (IsIdle(f, path)) return FrameKind::kIdle;
  if (IsCompute(f, path)) return FrameKind::kCompute;
  return FrameKind::kUnknown;
}

bool IsIdleSignature(FrameKind kind) {
  return kind == FrameKind::kDataLoading || kind == FrameKind::kQueueOrLock || kind == FrameKind::kIdle;
}

ThreadActivity ClassifyThread(const ThreadStack& thread) {
  const StackFrame* weak = nullptr;
  FrameKind weak_kind = FrameKind::kUnknown;
  const StackFrame* compute = nullptr;
  for (const StackFrame& frame : thread.frames) {
    const FrameKind kind = ClassifyFrame(frame);
    if (kind == FrameKind::kCollectiveWait || kind == FrameKind::kDataLoading) {
      return {kind, NormalizeFrame(frame, false)};
    }
    if ((kind == FrameKind::kQueueOrLock || kind == FrameKind::kIdle) && weak == nullptr) {
      weak = &frame;
      weak_kind = kind;
    }
    if (kind == FrameKind::kCompute && compute == nullptr) compute = &frame;
  }
  if (weak != nullptr) return {weak_kind, NormalizeFrame(*weak, false)};
  if (compute != nullptr) return {FrameKind::kCompute, NormalizeFrame(*compute, false)};
  return {};
}

}  // namespace peregrine
