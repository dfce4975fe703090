#include "diagnosis/tools/collective_tool.h"

#include <cstdio>

#include "absl/strings/str_cat.h"

namespace peregrine {

int CollectiveTool::Usage(absl::string_view error) const {
  std::fprintf(stderr, "%s: %s\nusage: RANK=r WORLD_SIZE=n MASTER_ADDR=a MASTER_PORT=p %s %s\n", name_,
               std::string(error).c_str(), name_, flags_usage_);
  return kToolUsageExit;
}

int CollectiveTool::ParseCommandLine(int argc, char** argv, std::initializer_list<absl::string_view> switches,
                                     const FlagSetter& apply, NcclWorld* world) const {
  absl::StatusOr<NcclWorld> w = NcclWorldFromEnv();
  if (!w.ok()) return Usage(w.status().message());
  *world = *w;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    bool is_switch = false;
    for (absl::string_view s : switches) is_switch = is_switch || arg == s;
    if (is_switch) {
      if (!apply(arg, "")) return Usage(absl::StrCat("bad flag ", arg));
      continue;
    }
    if (i + 1 >= argc) return Usage(absl::StrCat(arg, " needs a value"));
    const std::string value = argv[++i];
    if (!apply(arg, value)) return Usage(absl::StrCat("bad flag ", arg, " ", value));
  }
  return 0;
}

int CollectiveTool::Join(const NcclWorld& world, const std::string& device_buffers, int timeout_ms,
                         std::unique_ptr<DeviceMemory>* memory, ncclComm_t* comm) const {
  std::string memory_error;
  *memory = DeviceMemory::Open(device_buffers, world.local_rank, reinterpret_cast<const void*>(&ncclGetVersion),
                               &memory_error);
  if (*memory == nullptr) return Usage(memory_error);
  absl::StatusOr<ncclComm_t> joined = JoinNcclWorld(world, timeout_ms);
  if (!joined.ok()) return RankError(world.rank, joined.status().ToString());
  *comm = *joined;
  return 0;
}

int CollectiveTool::RankError(int rank, absl::string_view message) const {
  std::fprintf(stderr, "%s: rank %d: %s\n", name_, rank, std::string(message).c_str());
  return kToolNcclExit;
}

bool CollectiveTool::NcclOk(ncclResult_t result, int rank, const char* call) const {
  if (result == ncclSuccess) return true;
  RankError(rank, absl::StrCat(call, " failed: ", ncclGetErrorString(result)));
  return false;
}

}  // namespace peregrine
