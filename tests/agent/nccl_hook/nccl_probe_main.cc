// nccl-hook-probe: a small NCCL program the nccl_hook integration tests run, with and
// without LD_PRELOAD=libperegrine_nccl.so, against the real libnccl.so.2 or sim's.
// It links libnccl.so.2 by soname; LD_LIBRARY_PATH picks the library.
//
//   nccl-hook-probe real
//       calls that work without a GPU; prints key=value lines (version, error string,
//       unique-id hash, results of calls that fail without a device).
//   nccl-hook-probe sim <rank> <nranks> <uid_file> <iterations>
//       rank 0 writes a unique id to uid_file (atomically), the others wait for it; then
//       all-reduce, grouped send/recv ring, split + all-reduce on the child, destroy.
//       Verifies every result; prints key=value lines; exit status 0 only if all correct.
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "agent/nccl_ring/ring_format.h"
#include "nccl.h"

namespace {

int Real() {
  int version = 0;
  std::printf("version_rc=%d\n", static_cast<int>(ncclGetVersion(&version)));
  std::printf("version=%d\n", version);
  std::printf("error_string=%s\n", ncclGetErrorString(ncclInvalidArgument));
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  const ncclResult_t uid_rc = ncclGetUniqueId(&id);
  std::printf("uid_rc=%d\n", static_cast<int>(uid_rc));
  if (uid_rc == ncclSuccess) {
    std::printf("uid_hash=%016" PRIx64 "\n",
                peregrine::nccl_ring::HashBytes(id.internal, sizeof(id.internal)));
  }
  // No GPU: these fail inside NCCL; the hook must return exactly what NCCL returns.
  std::printf("allreduce_null_comm_rc=%d\n",
              static_cast<int>(ncclAllReduce(nullptr, nullptr, 1, ncclFloat32, ncclSum,
                                             nullptr, nullptr)));
  std::printf("send_null_comm_rc=%d\n",
              static_cast<int>(ncclSend(nullptr, 1, ncclFloat32, 0, nullptr, nullptr)));
  std::printf("group_start_rc=%d\n", static_cast<int>(ncclGroupStart()));
  std::printf("group_end_rc=%d\n", static_cast<int>(ncclGroupEnd()));
  // A simulated group end closes the group too: the send after it is outside any group.
  std::printf("group_start2_rc=%d\n", static_cast<int>(ncclGroupStart()));
  ncclSimInfo_t sim_info = NCCL_SIM_INFO_INITIALIZER;
  std::printf("group_simulate_end_rc=%d\n", static_cast<int>(ncclGroupSimulateEnd(&sim_info)));
  std::printf("revoke_null_comm_rc=%d\n", static_cast<int>(ncclCommRevoke(nullptr, 0)));
  std::printf("send_after_simulate_rc=%d\n",
              static_cast<int>(ncclSend(nullptr, 1, ncclFloat32, 0, nullptr, nullptr)));
  std::fflush(stdout);
  return 0;
}

bool ReadUid(const std::string& path, ncclUniqueId* id) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream in(path, std::ios::binary);
    if (in && in.read(id->internal, sizeof(id->internal))) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

int Fail(const char* what, int rc) {
  std::printf("error=%s rc=%d\n", what, rc);
  std::fflush(stdout);
  return 1;
}

int Sim(int rank, int nranks, const std::string& uid_file, int iterations) {
  ncclUniqueId id;
  if (rank == 0) {
    if (ncclGetUniqueId(&id) != ncclSuccess) return Fail("GetUniqueId", -1);
    const std::string tmp = uid_file + ".tmp";
    {
      std::ofstream out(tmp, std::ios::binary);
      out.write(id.internal, sizeof(id.internal));
      if (!out) return Fail("write uid", -1);
    }
    if (std::rename(tmp.c_str(), uid_file.c_str()) != 0) return Fail("rename uid", -1);
  } else if (!ReadUid(uid_file, &id)) {
    return Fail("read uid", -1);
  }
  std::printf("uid_hash=%016" PRIx64 "\n",
              peregrine::nccl_ring::HashBytes(id.internal, sizeof(id.internal)));
  ncclComm_t comm = nullptr;
  ncclResult_t rc = ncclCommInitRank(&comm, nranks, id, rank);
  if (rc != ncclSuccess) return Fail("CommInitRank", rc);
  ncclComm_t child = nullptr;
  rc = ncclCommSplit(comm, /*color=*/0, /*key=*/rank, &child, nullptr);
  if (rc != ncclSuccess) return Fail("CommSplit", rc);

  constexpr size_t kCount = 64;
  std::vector<float> send(kCount), recv(kCount);
  const int next = (rank + 1) % nranks;
  const int prev = (rank + nranks - 1) % nranks;
  for (int it = 0; it < iterations; ++it) {
    for (size_t i = 0; i < kCount; ++i) send[i] = static_cast<float>((rank + 1) * (it + 1) + i);
    rc = ncclAllReduce(send.data(), recv.data(), kCount, ncclFloat32, ncclSum, comm, nullptr);
    if (rc != ncclSuccess) return Fail("AllReduce", rc);
    for (size_t i = 0; i < kCount; ++i) {
      // sum over r of (r+1)(it+1) + i
      const float want = static_cast<float>(nranks * (nranks + 1) / 2 * (it + 1) +
                                            static_cast<int>(i) * nranks);
      if (recv[i] != want) return Fail("AllReduce value", static_cast<int>(i));
    }
    if ((rc = ncclGroupStart()) != ncclSuccess) return Fail("GroupStart", rc);
    if ((rc = ncclSend(send.data(), kCount, ncclFloat32, next, comm, nullptr)) != ncclSuccess) {
      return Fail("Send", rc);
    }
    if ((rc = ncclRecv(recv.data(), kCount, ncclFloat32, prev, comm, nullptr)) != ncclSuccess) {
      return Fail("Recv", rc);
    }
    if ((rc = ncclGroupEnd()) != ncclSuccess) return Fail("GroupEnd", rc);
    for (size_t i = 0; i < kCount; ++i) {
      if (recv[i] != static_cast<float>((prev + 1) * (it + 1) + i)) {
        return Fail("Recv value", static_cast<int>(i));
      }
    }
    rc = ncclAllReduce(send.data(), recv.data(), kCount, ncclFloat32, ncclMax, child, nullptr);
    if (rc != ncclSuccess) return Fail("AllReduce child", rc);
    if (recv[0] != static_cast<float>(nranks * (it + 1))) return Fail("child value", 0);
  }
  if ((rc = ncclCommDestroy(child)) != ncclSuccess) return Fail("Destroy child", rc);
  if ((rc = ncclCommDestroy(comm)) != ncclSuccess) return Fail("Destroy", rc);
  std::printf("iterations=%d\nresults_ok=1\n", iterations);
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "real") == 0) return Real();
  if (argc == 6 && std::strcmp(argv[1], "sim") == 0) {
    return Sim(std::atoi(argv[2]), std::atoi(argv[3]), argv[4], std::atoi(argv[5]));
  }
  std::fprintf(stderr, "usage: %s real | sim <rank> <nranks> <uid_file> <iterations>\n",
               argv[0]);
  return 2;
}
