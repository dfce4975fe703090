// MappedRing: a ring file (agent/nccl_ring/ring_format.h) created, sized and initialised
// the way libperegrine_nccl.so creates its own, and mapped for producing, so that a test
// can append records as the hook does. The mapping goes with the object; the file stays
// (the test's temporary directory removes it). Creating or mapping the file failing fails
// the test (Catch2 REQUIRE). Append is as thread-safe as the hook's (many producers); the
// object itself is owned by one test. Header-only: the agent and nccl_hook suites use it.
#ifndef PEREGRINE_TESTS_AGENT_MAPPED_RING_H_
#define PEREGRINE_TESTS_AGENT_MAPPED_RING_H_

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <utility>

#include "agent/nccl_ring/ring_format.h"

namespace peregrine {

class MappedRing {
 public:
  // Creates `path` with room for `capacity` records (a power of two); the header names the
  // producing process `pid`, its global and local rank, and `created_ns`.
  MappedRing(std::string path, uint32_t capacity, int32_t pid, int32_t global_rank, int32_t local_rank,
             uint64_t created_ns)
      : path_(std::move(path)), bytes_(nccl_ring::RingBytes(capacity)) {
    const int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
    REQUIRE(fd >= 0);
    REQUIRE(::ftruncate(fd, static_cast<off_t>(bytes_)) == 0);
    base_ = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    REQUIRE(base_ != MAP_FAILED);
    nccl_ring::InitRing(base_, capacity, pid, global_rank, local_rank, created_ns);
  }
  ~MappedRing() { ::munmap(base_, bytes_); }
  MappedRing(const MappedRing&) = delete;
  MappedRing& operator=(const MappedRing&) = delete;

  // The name the hook gives the ring of global rank `rank` (< 0: unknown) in process `pid`.
  static std::string FileName(int rank, int pid) {
    return "peregrine-nccl-r" + (rank >= 0 ? std::to_string(rank) : std::string("x")) + "-p" +
           std::to_string(pid) + ".ring";
  }

  const std::string& path() const { return path_; }
  nccl_ring::RingHeader* header() { return static_cast<nccl_ring::RingHeader*>(base_); }
  nccl_ring::RingSlot* slots() { return nccl_ring::Records(base_); }
  // Appends `p` as the hook does; returns the record's sequence number.
  uint64_t Append(const nccl_ring::RecordPayload& p) { return nccl_ring::AppendRecord(header(), slots(), p); }

 private:
  std::string path_;
  size_t bytes_;
  void* base_ = nullptr;
};

}  // namespace peregrine

#endif  // PEREGRINE_TESTS_AGENT_MAPPED_RING_H_
