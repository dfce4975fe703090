// libnccl_probe_local.so: NCCL calls made from a library that a program opens with
// RTLD_LOCAL, as Python opens PyTorch's extension modules (which pull in libnccl.so.2):
// the library and its libnccl.so.2 live in a local scope that RTLD_NEXT does not search,
// while its calls still bind to an LD_PRELOADed hook. Links libnccl.so.2 by soname; the
// test picks sim's with LD_LIBRARY_PATH and opens this from Python's ctypes.
#include <cstdio>
#include <vector>

#include "nccl.h"

// A one-rank communicator, `iterations` verified all-reduces, destroyed. 0 when every
// call succeeded and every result is right; else the failing call's number (1-based),
// printed with its NCCL result.
extern "C" __attribute__((visibility("default"))) int PeregrineProbeLocal(int iterations) {
  int version = 0;
  ncclResult_t rc = ncclGetVersion(&version);
  std::printf("version_rc=%d version=%d\n", static_cast<int>(rc), version);
  if (rc != ncclSuccess) return 1;
  ncclUniqueId id;
  if ((rc = ncclGetUniqueId(&id)) != ncclSuccess) return std::printf("uid_rc=%d\n", static_cast<int>(rc)), 2;
  ncclComm_t comm = nullptr;
  if ((rc = ncclCommInitRank(&comm, 1, id, 0)) != ncclSuccess) {
    return std::printf("init_rc=%d\n", static_cast<int>(rc)), 3;
  }
  std::vector<float> send(16), recv(16);
  for (int it = 0; it < iterations; ++it) {
    for (size_t i = 0; i < send.size(); ++i) send[i] = static_cast<float>(it + i);
    rc = ncclAllReduce(send.data(), recv.data(), send.size(), ncclFloat32, ncclSum, comm, nullptr);
    if (rc != ncclSuccess) return std::printf("allreduce_rc=%d\n", static_cast<int>(rc)), 4;
    if (recv != send) return std::printf("allreduce_value_wrong\n"), 5;
  }
  if ((rc = ncclCommDestroy(comm)) != ncclSuccess) return std::printf("destroy_rc=%d\n", static_cast<int>(rc)), 6;
  std::printf("results_ok=1\n");
  std::fflush(stdout);
  return 0;
}
