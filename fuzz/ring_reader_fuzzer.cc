// Fuzzes the NCCL ring reader (agent/nccl_ring/ring_reader.h): the agent maps ring files
// that training processes (the hook, or anything else that can write the ring
// directory) create, validates their header and reads their communicator table and
// records. The input describes a ring file:
//   byte 0   bits 0-2: capacity 2^(1+n) records (2..256);
//            bit 6: the file ends where the input ends (a truncated ring);
//            bit 7: the header bytes below start at offset 0 (magic, version and layout
//            are fuzzed too) instead of after the layout fields (a well-formed header);
//   then     the header's bytes (up to sizeof(RingHeader)), 2 communicator slots
//            (256 bytes), then the records.
// The file is a memfd opened through /proc/self/fd, so nothing is left behind.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "agent/nccl_ring/ring_format.h"
#include "agent/nccl_ring/ring_reader.h"
#include "fuzz/fuzz_check.h"

namespace ring = peregrine::nccl_ring;

namespace {

// Magic, version and the five layout fields come before pid.
constexpr size_t kLayoutBytes = offsetof(ring::RingHeader, pid);
constexpr size_t kHeaderFuzzBytes = sizeof(ring::RingHeader);
constexpr size_t kCommFuzzBytes = 2 * ring::kCommSlotSize;

int RingFd() {
  static const int fd = [] {
    const int f = memfd_create("peregrine-ring-fuzz", MFD_CLOEXEC);
    FUZZ_CHECK(f >= 0);
    return f;
  }();
  return fd;
}

// Takes up to `n` bytes from the front of the input.
const uint8_t* Take(const uint8_t** data, size_t* size, size_t n, size_t* got) {
  *got = std::min(n, *size);
  const uint8_t* p = *data;
  *data += *got;
  *size -= *got;
  return p;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t flags = data[0];
  ++data;
  --size;
  const uint32_t capacity = 2u << (flags & 7);
  std::vector<uint8_t> file(ring::RingBytes(capacity), 0);
  ring::InitRing(file.data(), capacity, /*pid=*/1234, /*global_rank=*/0, /*local_rank=*/0,
                 /*now_ns=*/1);

  size_t got = 0;
  const size_t header_at = (flags & 0x80) ? 0 : kLayoutBytes;
  const uint8_t* header = Take(&data, &size, kHeaderFuzzBytes - header_at, &got);
  std::memcpy(file.data() + header_at, header, got);
  const uint8_t* comms = Take(&data, &size, kCommFuzzBytes, &got);
  std::memcpy(file.data() + ring::kCommTableOffset, comms, got);
  const uint8_t* records = Take(&data, &size, static_cast<size_t>(capacity) * ring::kRecordSlotSize, &got);
  std::memcpy(file.data() + ring::RecordsOffset(), records, got);
  if (flags & 0x40) file.resize(ring::RecordsOffset() + got);

  const int fd = RingFd();
  FUZZ_CHECK(ftruncate(fd, 0) == 0);
  FUZZ_CHECK(pwrite(fd, file.data(), file.size(), 0) == static_cast<ssize_t>(file.size()));

  auto reader = peregrine::NcclRingReader::Open("/proc/self/fd/" + std::to_string(fd));
  if (!reader.ok()) return 0;
  const peregrine::NcclRingInfo info = (*reader)->Info();
  (void)(*reader)->Comms();
  for (const uint64_t cursor : {uint64_t{0}, info.write_index / 2, info.write_index + 1}) {
    const peregrine::NcclPollResult polled = (*reader)->Poll(cursor, 1024);
    for (const peregrine::NcclRecord& rec : polled.records) {
      (void)peregrine::CallRecordOf(rec);
      (void)peregrine::NcclOpName(rec.op);
    }
  }
  return 0;
}
