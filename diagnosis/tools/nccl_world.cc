#include "diagnosis/tools/nccl_world.h"

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "diagnosis/tools/nccl_rendezvous.h"

namespace peregrine {
namespace {

bool EnvInt(const char* name, int* out) {
  const char* v = std::getenv(name);
  return v != nullptr && absl::SimpleAtoi(v, out);
}

}  // namespace

absl::StatusOr<NcclWorld> NcclWorldFromEnv() {
  NcclWorld w;
  if (!EnvInt("RANK", &w.rank) || !EnvInt("WORLD_SIZE", &w.world) || w.world < 1 || w.rank < 0 ||
      w.rank >= w.world) {
    return absl::InvalidArgumentError("RANK and WORLD_SIZE must be set (0 <= RANK < WORLD_SIZE)");
  }
  if (const char* a = std::getenv("MASTER_ADDR"); a != nullptr && *a != '\0') w.master_addr = a;
  if (!EnvInt("LOCAL_RANK", &w.local_rank)) w.local_rank = w.rank;
  if (std::getenv("MASTER_PORT") != nullptr && !EnvInt("MASTER_PORT", &w.master_port)) {
    return absl::InvalidArgumentError("MASTER_PORT is not a number");
  }
  return w;
}

absl::StatusOr<ncclComm_t> JoinNcclWorld(const NcclWorld& w, int timeout_ms) {
  ncclUniqueId id;
  if (w.rank == 0) {
    if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) {
      return absl::InternalError(absl::StrCat("ncclGetUniqueId failed: ", ncclGetErrorString(r)));
    }
    if (absl::Status s = ServeUniqueId(w.master_addr, w.master_port, w.world, id, timeout_ms); !s.ok()) return s;
  } else {
    absl::StatusOr<ncclUniqueId> fetched = FetchUniqueId(w.master_addr, w.master_port, w.rank, w.world, timeout_ms);
    if (!fetched.ok()) return fetched.status();
    id = *fetched;
  }
  ncclComm_t comm;
  if (ncclResult_t r = ncclCommInitRank(&comm, w.world, id, w.rank); r != ncclSuccess) {
    return absl::InternalError(absl::StrCat("ncclCommInitRank failed: ", ncclGetErrorString(r)));
  }
  return comm;
}

}  // namespace peregrine
