// The NCCL world of a collective tool that runs as every rank of a job (peregrine-linkcheck,
// peregrine-nccl-check): who this rank is, from RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
// and LOCAL_RANK as torchrun sets them, and the communicator joined through the
// rendezvous (nccl_rendezvous.h: rank 0 makes and serves the ncclUniqueId).
//
// Thread-compatible free functions.
#ifndef PEREGRINE_DIAGNOSIS_TOOLS_NCCL_WORLD_H_
#define PEREGRINE_DIAGNOSIS_TOOLS_NCCL_WORLD_H_

#include <string>

#include "absl/status/statusor.h"
#include "nccl.h"

namespace peregrine {

struct NcclWorld {
  int rank = 0;
  int world = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  int local_rank = 0;  // LOCAL_RANK, else RANK
};

// Reads the environment. kInvalidArgument naming the variable when RANK or WORLD_SIZE is
// missing or out of range (0 <= RANK < WORLD_SIZE), or MASTER_PORT is not a number.
absl::StatusOr<NcclWorld> NcclWorldFromEnv();

// Rank 0 makes the id and serves it to the others, which fetch it; then every rank calls
// ncclCommInitRank. Errors name the step (rendezvous or the NCCL call and its message).
absl::StatusOr<ncclComm_t> JoinNcclWorld(const NcclWorld& w, int timeout_ms);

}  // namespace peregrine

#endif  // PEREGRINE_DIAGNOSIS_TOOLS_NCCL_WORLD_H_
