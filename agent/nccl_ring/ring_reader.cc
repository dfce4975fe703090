#include "agent/nccl_ring/ring_reader.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <cerrno>
#include <cstring>
#include <tuple>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "agent/nccl_ring/ring_format.h"

namespace peregrine {
namespace {

namespace ring = nccl_ring;

ring::RingHeader* Header(void* base) { return static_cast<ring::RingHeader*>(base); }

NcclRecord Decode(uint64_t seq, const ring::RecordPayload& p) {
  NcclRecord r;
  r.seq = seq;
  r.op = p.op;
  r.time_ns = p.time_ns;
  r.comm_id = p.comm_id;
  r.rank = p.rank;
  r.nranks = p.nranks;
  r.peer = p.peer;
  r.count = p.count;
  r.flags = p.flags;
  r.value = p.value;
  r.result = p.result;
  if (p.op == ring::kOpHostExit || p.op == ring::kOpDeviceTime) {
    r.call_seq = p.link;
    if (p.op == ring::kOpDeviceTime) r.timed_op = p.datatype;
  } else {
    r.call_index = p.link;
    r.datatype = p.datatype;
  }
  return r;
}

// Parses "peregrine-nccl-r<rank|x>-p<pid>[.ring]".
bool ParseRingName(const std::string& name, int32_t* rank, int32_t* pid) {
  constexpr std::string_view kPrefix = "peregrine-nccl-r";
  std::string_view s = name;
  if (s.substr(0, kPrefix.size()) != kPrefix) return false;
  s.remove_prefix(kPrefix.size());
  if (s.size() > 5 && s.substr(s.size() - 5) == ".ring") s.remove_suffix(5);
  const size_t dash = s.find("-p");
  if (dash == std::string_view::npos) return false;
  const std::string_view rank_text = s.substr(0, dash);
  const std::string_view pid_text = s.substr(dash + 2);
  if (rank_text == "x") {
    *rank = -1;
  } else if (!absl::SimpleAtoi(absl::string_view(rank_text.data(), rank_text.size()), rank) || *rank < 0) {
    return false;
  }
  return absl::SimpleAtoi(absl::string_view(pid_text.data(), pid_text.size()), pid) && *pid > 0;
}

}  // namespace

std::string NcclOpName(uint8_t op) {
  switch (op) {
    case ring::kOpGetUniqueId: return "GetUniqueId";
    case ring::kOpCommInitRank: return "CommInitRank";
    case ring::kOpCommInitRankConfig: return "CommInitRankConfig";
    case ring::kOpCommInitAll: return "CommInitAll";
    case ring::kOpCommSplit: return "CommSplit";
    case ring::kOpCommDestroy: return "CommDestroy";
    case ring::kOpCommAbort: return "CommAbort";
    case ring::kOpAllReduce: return "AllReduce";
    case ring::kOpBroadcast: return "Broadcast";
    case ring::kOpReduce: return "Reduce";
    case ring::kOpAllGather: return "AllGather";
    case ring::kOpReduceScatter: return "ReduceScatter";
    case ring::kOpSend: return "Send";
    case ring::kOpRecv: return "Recv";
    case ring::kOpGroupStart: return "GroupStart";
    case ring::kOpGroupEnd: return "GroupEnd";
    case ring::kOpAlltoAll: return "AlltoAll";
    case ring::kOpGather: return "Gather";
    case ring::kOpScatter: return "Scatter";
    case ring::kOpBcast: return "Bcast";
    case ring::kOpCommInitRankScalable: return "CommInitRankScalable";
    case ring::kOpCommShrink: return "CommShrink";
    case ring::kOpCommFinalize: return "CommFinalize";
    case ring::kOpCommRevoke: return "CommRevoke";
    case ring::kOpGroupSimulateEnd: return "GroupSimulateEnd";
    case ring::kOpHostExit: return "HostExit";
    case ring::kOpDeviceTime: return "DeviceTime";
    default: return absl::StrCat("Unknown(", op, ")");
  }
}

NcclOp NcclOpOfRingOp(uint8_t op) {
  switch (op) {
    case ring::kOpAllReduce: return NcclOp::kAllReduce;
    case ring::kOpAllGather: return NcclOp::kAllGather;
    case ring::kOpReduceScatter: return NcclOp::kReduceScatter;
    case ring::kOpBroadcast:
    case ring::kOpBcast: return NcclOp::kBroadcast;
    case ring::kOpReduce: return NcclOp::kReduce;
    case ring::kOpSend: return NcclOp::kSend;
    case ring::kOpRecv: return NcclOp::kRecv;
    case ring::kOpAlltoAll: return NcclOp::kAllToAll;
    default: return NcclOp::kOther;
  }
}

std::optional<NcclCallRecord> CallRecordOf(const NcclRecord& rec) {
  if (!IsNcclTrafficOp(rec.op)) return std::nullopt;
  NcclCallRecord call;
  call.op = NcclOpOfRingOp(rec.op);
  call.comm_id = rec.comm_id;
  call.count = rec.count;
  call.datatype = rec.datatype;
  call.enter_ns = static_cast<int64_t>(rec.time_ns);
  return call;
}

bool IsNcclTrafficOp(uint8_t op) {
  switch (op) {
    case ring::kOpAllReduce:
    case ring::kOpBroadcast:
    case ring::kOpReduce:
    case ring::kOpAllGather:
    case ring::kOpReduceScatter:
    case ring::kOpSend:
    case ring::kOpRecv:
    case ring::kOpAlltoAll:
    case ring::kOpGather:
    case ring::kOpScatter:
    case ring::kOpBcast:
      return true;
    default:
      return false;
  }
}

absl::StatusOr<std::unique_ptr<NcclRingReader>> NcclRingReader::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    const std::string msg = absl::StrCat("open NCCL ring ", path, ": ", std::strerror(err));
    return err == ENOENT ? absl::NotFoundError(msg) : absl::UnavailableError(msg);
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return absl::UnavailableError(absl::StrCat("stat NCCL ring ", path, ": ", std::strerror(err)));
  }
  const size_t bytes = static_cast<size_t>(st.st_size);
  if (bytes < ring::RecordsOffset()) {
    ::close(fd);
    return absl::FailedPreconditionError(absl::StrFormat(
        "NCCL ring %s is %d bytes, smaller than its header and comm table (%d): not "
        "initialised yet or not a ring",
        path, bytes, ring::RecordsOffset()));
  }
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (base == MAP_FAILED) {
    return absl::UnavailableError(absl::StrCat("mmap NCCL ring ", path, ": ", std::strerror(errno)));
  }
  std::unique_ptr<NcclRingReader> reader(new NcclRingReader(path, base, bytes));
  const ring::RingHeader* h = Header(base);
  const uint64_t magic = ring::LoadAcquire(&h->magic);
  if (magic == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("NCCL ring ", path, " has no magic yet: its process is still creating it"));
  }
  if (magic != ring::kMagic) {
    return absl::InvalidArgumentError(
        absl::StrFormat("NCCL ring %s: bad magic 0x%016x", path, magic));
  }
  if (h->version != ring::kVersion) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "NCCL ring %s: format version %d, this reader understands %d", path, h->version,
        ring::kVersion));
  }
  if (h->header_size != ring::kHeaderSize || h->record_size != ring::kRecordSlotSize ||
      h->comm_capacity != ring::kCommTableCapacity ||
      h->comm_slot_size != ring::kCommSlotSize) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "NCCL ring %s: layout mismatch (header %d, record %d, comm table %d x %d)", path,
        h->header_size, h->record_size, h->comm_capacity, h->comm_slot_size));
  }
  if (!ring::ValidCapacity(h->capacity)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("NCCL ring %s: capacity %d is not a power of two in [%d, %d]", path,
                        h->capacity, ring::kMinCapacity, ring::kMaxCapacity));
  }
  if (ring::RingBytes(h->capacity) > bytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("NCCL ring %s: capacity %d needs %d bytes, file has %d", path,
                        h->capacity, ring::RingBytes(h->capacity), bytes));
  }
  return reader;
}

NcclRingReader::~NcclRingReader() {
  if (base_ != nullptr) ::munmap(base_, bytes_);
}

NcclPollResult NcclRingReader::Poll(uint64_t cursor, size_t max_records) const {
  NcclPollResult out;
  const ring::RingHeader* h = Header(base_);
  const ring::RingSlot* slots = ring::Records(base_);
  const uint64_t capacity = h->capacity;
  uint64_t write = ring::LoadAcquire(&h->write_index);
  if (cursor > write) cursor = write;  // a cursor from a previous process incarnation
  if (write - cursor > capacity) {
    out.lost += write - cursor - capacity;
    cursor = write - capacity;
  }
  while (cursor < write && out.records.size() < max_records) {
    ring::RecordPayload p;
    const ring::SlotRead r = ring::ReadRecord(h, slots, cursor, &p);
    if (r == ring::SlotRead::kNotYet) break;
    if (r == ring::SlotRead::kLost) {
      ++out.lost;
    } else {
      out.records.push_back(Decode(cursor, p));
    }
    ++cursor;
  }
  out.next_cursor = cursor;
  return out;
}

std::vector<NcclCommInfo> NcclRingReader::Comms() const {
  std::vector<NcclCommInfo> out;
  const ring::RingHeader* h = Header(base_);
  const uint32_t n = std::min(ring::LoadAcquire(&h->comm_count), ring::kCommTableCapacity);
  const ring::CommSlot* table = ring::CommTable(base_);
  for (uint32_t i = 0; i < n; ++i) {
    const ring::CommSlot* s = &table[i];
    // Seqlock read: the hook rewrites an entry only at creation, rank discovery and
    // destruction, so a few retries always suffice; give up on a torn entry after many.
    for (int attempt = 0; attempt < 1000; ++attempt) {
      const uint64_t s1 = ring::LoadAcquire(&s->state);
      if (s1 == 0) break;
      if (s1 & 1) continue;
      NcclCommInfo c;
      c.comm_id = ring::LoadRelaxed(&s->comm_id);
      c.parent_id = ring::LoadRelaxed(&s->parent_id);
      c.created_ns = ring::LoadRelaxed(&s->created_ns);
      c.destroyed_ns = ring::LoadRelaxed(&s->destroyed_ns);
      c.rank = ring::LoadRelaxed(&s->rank);
      c.nranks = ring::LoadRelaxed(&s->nranks);
      c.global_rank = ring::LoadRelaxed(&s->global_rank);
      c.color = ring::LoadRelaxed(&s->color);
      c.key = ring::LoadRelaxed(&s->key);
      c.device = ring::LoadRelaxed(&s->device);
      c.created_by = ring::LoadRelaxed(&s->created_by);
      __atomic_thread_fence(__ATOMIC_ACQUIRE);
      if (ring::LoadRelaxed(&s->state) != s1) continue;
      out.push_back(c);
      break;
    }
  }
  return out;
}

NcclRingInfo NcclRingReader::Info() const {
  const ring::RingHeader* h = Header(base_);
  NcclRingInfo i;
  i.pid = h->pid;
  i.global_rank = h->global_rank;
  i.local_rank = h->local_rank;
  i.nccl_version = ring::LoadRelaxed(&h->nccl_version);
  i.capacity = h->capacity;
  i.lib_path.assign(h->lib_path, strnlen(h->lib_path, sizeof(h->lib_path)));
  i.created_ns = h->created_ns;
  i.write_index = ring::LoadAcquire(&h->write_index);
  i.dropped_records = ring::LoadRelaxed(&h->dropped_records);
  i.profiling_skipped = ring::LoadRelaxed(&h->profiling_skipped);
  i.comm_overflow = ring::LoadRelaxed(&h->comm_overflow);
  i.profiling = ring::LoadRelaxed(&h->profiling) != 0;
  i.trap = ring::LoadRelaxed(&h->trap) != 0;
  i.release_epoch = ring::LoadRelaxed(&h->release_epoch);
  i.cuda_state = ring::LoadRelaxed(&h->cuda_state);
  i.trapped_now = ring::LoadAcquire(&h->trapped_now);
  i.trapped_total = ring::LoadRelaxed(&h->trapped_total);
  return i;
}

void NcclRingReader::SetProfiling(bool on) {
  ring::StoreRelease(&Header(base_)->profiling, on ? 1u : 0u);
}

void NcclRingReader::SetTrap(bool on) {
  ring::StoreRelease(&Header(base_)->trap, on ? 1u : 0u);
}

uint64_t NcclRingReader::Release() {
  return __atomic_add_fetch(&Header(base_)->release_epoch, 1, __ATOMIC_ACQ_REL);
}

absl::StatusOr<std::vector<NcclRingFile>> ListNcclRings(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    const int err = errno;
    const std::string msg = absl::StrCat("list NCCL rings in ", dir, ": ", std::strerror(err));
    return err == ENOENT ? absl::NotFoundError(msg) : absl::UnavailableError(msg);
  }
  std::vector<NcclRingFile> out;
  while (const dirent* e = ::readdir(d)) {
    NcclRingFile f;
    if (!ParseRingName(e->d_name, &f.global_rank, &f.pid)) continue;
    f.path = absl::StrCat(dir, "/", e->d_name);
    f.process_alive = ::kill(f.pid, 0) == 0 || errno == EPERM;
    out.push_back(std::move(f));
  }
  ::closedir(d);
  std::sort(out.begin(), out.end(), [](const NcclRingFile& a, const NcclRingFile& b) {
    return std::tie(a.global_rank, a.pid) < std::tie(b.global_rank, b.pid);
  });
  return out;
}

absl::StatusOr<std::vector<NcclRingFailure>> ListNcclRingFailures(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    const int err = errno;
    const std::string msg = absl::StrCat("list NCCL ring failures in ", dir, ": ", std::strerror(err));
    return err == ENOENT ? absl::NotFoundError(msg) : absl::UnavailableError(msg);
  }
  constexpr std::string_view kSuffix = ".unavailable";
  std::vector<NcclRingFailure> out;
  while (const dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name.size() <= kSuffix.size() || name.substr(name.size() - kSuffix.size()) != kSuffix) continue;
    NcclRingFailure f;
    if (!ParseRingName(name.substr(0, name.size() - kSuffix.size()), &f.global_rank, &f.pid)) continue;
    f.path = absl::StrCat(dir, "/", name);
    f.process_alive = ::kill(f.pid, 0) == 0 || errno == EPERM;
    std::ifstream in(f.path);
    std::getline(in, f.reason);
    if (f.reason.empty()) f.reason = "(no reason recorded)";
    out.push_back(std::move(f));
  }
  ::closedir(d);
  std::sort(out.begin(), out.end(), [](const NcclRingFailure& a, const NcclRingFailure& b) {
    return std::tie(a.global_rank, a.pid) < std::tie(b.global_rank, b.pid);
  });
  return out;
}

absl::Status RemoveNcclRing(const std::string& path) {
  if (::unlink(path.c_str()) != 0) {
    const int err = errno;
    const std::string msg = absl::StrCat("remove NCCL ring ", path, ": ", std::strerror(err));
    return err == ENOENT ? absl::NotFoundError(msg) : absl::UnavailableError(msg);
  }
  return absl::OkStatus();
}

}  // namespace peregrine
