#include "diagnosis/stack_frame_kinds.h"

#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "tests/diagnosis/stack_fixtures.h"

namespace peregrine {
namespace {

StackFrame Py(const std::string& function, const std::string& file) { return {function, file, 1, "", 0}; }
StackFrame Native(const std::string& function, const std::string& module) { return {function, "", 0, module, 0x10}; }

// The main thread of the first process of a py-spy dump.
ThreadStack PySpyMain(const std::string& text) {
  absl::StatusOr<std::vector<ProcessStack>> p = ParsePySpyDump(text);
  REQUIRE(p.ok());
  REQUIRE(!p->empty());
  REQUIRE(!p->front().threads.empty());
  return p->front().threads.front();
}

TEST_CASE("frame kinds: py-spy, gdb and eu-stack frame names", "[unit]") {
  CHECK(ClassifyFrame(Py("all_gather_coalesced", "deepspeed/runtime/zero/partition_parameters.py")) ==
        FrameKind::kCollectiveWait);
  CHECK(ClassifyFrame(Py("wait", "torch/distributed/distributed_c10d.py")) == FrameKind::kCollectiveWait);
  CHECK(ClassifyFrame(Py("synchronize", "torch/cuda/__init__.py")) == FrameKind::kCollectiveWait);
  CHECK(ClassifyFrame(Py("recv_forward", "megatron/core/pipeline_parallel/p2p_communication.py")) ==
        FrameKind::kCollectiveWait);
  CHECK(ClassifyFrame(Native("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
                             "libnccl.so.2")) == FrameKind::kCollectiveWait);
  CHECK(ClassifyFrame(Native("cudaStreamSynchronize", "libcudart.so.12")) == FrameKind::kCollectiveWait);
  CHECK(ClassifyFrame(Native("c10d::ProcessGroupNCCL::WorkNCCL::wait(std::chrono::duration<long, std::ratio<1l, "
                             "1000l> >)",
                             "libtorch_cuda.so")) == FrameKind::kCollectiveWait);
  CHECK(ClassifyFrame(Native("demo::RecvActivations()", "stackdemo")) == FrameKind::kCollectiveWait);

  CHECK(ClassifyFrame(Py("_try_get_data", "torch/utils/data/dataloader.py")) == FrameKind::kDataLoading);
  CHECK(ClassifyFrame(Py("__getitem__", "my_project/dataset.py")) == FrameKind::kDataLoading);
  CHECK(ClassifyFrame(Py("get_batch", "pretrain_gpt.py")) == FrameKind::kDataLoading);

  CHECK(ClassifyFrame(Py("get", "queue.py")) == FrameKind::kQueueOrLock);
  CHECK(ClassifyFrame(Py("wait", "threading.py")) == FrameKind::kQueueOrLock);
  CHECK(ClassifyFrame(Native("pthread_cond_wait@@GLIBC_2.3.2", "libc.so.6")) == FrameKind::kQueueOrLock);
  CHECK(ClassifyFrame(Native("__lll_lock_wait", "libc.so.6")) == FrameKind::kQueueOrLock);

  CHECK(ClassifyFrame(Native("clock_nanosleep@GLIBC_2.2.5", "libc.so.6")) == FrameKind::kIdle);
  CHECK(ClassifyFrame(Native("__GI___libc_read", "libc.so.6")) == FrameKind::kIdle);
  CHECK(ClassifyFrame(Native("epoll_wait", "libc.so.6")) == FrameKind::kIdle);
  CHECK(ClassifyFrame(Py("readinto", "socket.py")) == FrameKind::kIdle);
  CHECK(ClassifyFrame(Native("recv", "libc.so.6")) == FrameKind::kIdle);  // a socket, not p2p

  CHECK(ClassifyFrame(Py("forward", "transformers/models/mixtral/modeling_mixtral.py")) == FrameKind::kCompute);
  CHECK(ClassifyFrame(Native("at::native::addmm_out_cuda_impl(at::Tensor&)", "libtorch_cuda.so")) ==
        FrameKind::kCompute);
  CHECK(ClassifyFrame(Py("<module>", "train.py")) == FrameKind::kUnknown);
  CHECK(std::string(FrameKindName(FrameKind::kDataLoading)) == "data loading");
}

TEST_CASE("frame kinds: a thread's activity is the innermost strong frame", "[unit]") {
  // A DataLoader wait: the innermost frames are a queue and a lock, the outer ones say why.
  const ThreadStack loader = PySpyMain(StackFixture("tie_dataloader/rank-5.txt"));
  ThreadActivity a = ClassifyThread(loader);
  CHECK(a.kind == FrameKind::kDataLoading);
  CHECK(a.frame == "_try_get_data @ dataloader.py");
  // The real ZeRO-3 all-gather of huggingface/accelerate#3104 (README).
  a = ClassifyThread(PySpyMain(StackFixture("tie_dataloader/rank-0.txt")));
  CHECK(a.kind == FrameKind::kCollectiveWait);
  CHECK(a.frame == "all_gather_coalesced @ partition_parameters.py");
  // Real gdb captures: a condition variable inside a collective; read() inside a p2p receive.
  absl::StatusOr<ProcessStack> gdb0 = ParseGdbBacktrace(StackFixture("gdb_rank0.txt"));
  absl::StatusOr<ProcessStack> gdb3 = ParseGdbBacktrace(StackFixture("gdb_rank3.txt"));
  REQUIRE(gdb0.ok());
  REQUIRE(gdb3.ok());
  bool collective0 = false, collective3 = false;
  for (const ThreadStack& t : gdb0->threads) collective0 |= ClassifyThread(t).kind == FrameKind::kCollectiveWait;
  for (const ThreadStack& t : gdb3->threads) collective3 |= ClassifyThread(t).kind == FrameKind::kCollectiveWait;
  CHECK(collective0);
  CHECK(collective3);
  // Only weak kinds: the innermost queue/lock or idle frame; else compute; else unknown.
  ThreadStack weak;
  weak.frames = {Py("select", "selectors.py"), Py("get", "multiprocessing/queues.py"), Py("forward", "model.py")};
  CHECK(ClassifyThread(weak).kind == FrameKind::kIdle);
  weak.frames = {Py("forward", "model.py"), Py("<module>", "train.py")};
  CHECK(ClassifyThread(weak).kind == FrameKind::kCompute);
  weak.frames = {Py("<module>", "train.py")};
  CHECK(ClassifyThread(weak).kind == FrameKind::kUnknown);
  CHECK(ClassifyThread(ThreadStack{}).frame.empty());
  CHECK(IsIdleSignature(FrameKind::kDataLoading));
  CHECK(IsIdleSignature(FrameKind::kQueueOrLock));
  CHECK(IsIdleSignature(FrameKind::kIdle));
  CHECK_FALSE(IsIdleSignature(FrameKind::kCollectiveWait));
  CHECK_FALSE(IsIdleSignature(FrameKind::kCompute));
}

}  // namespace
}  // namespace peregrine
