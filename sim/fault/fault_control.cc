#include "sim/fault/fault_control.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"

namespace peregrine::sim {
namespace {

absl::Status Errno(const std::string& what, const std::string& path) {
  return absl::InternalError(absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

void StoreWords(void* dst, const void* src, size_t bytes) {
  uint64_t* d = static_cast<uint64_t*>(dst);
  const uint64_t* s = static_cast<const uint64_t*>(src);
  for (size_t i = 0; i < bytes / 8; ++i) __atomic_store_n(&d[i], s[i], __ATOMIC_RELAXED);
}

// A locked, mapped, validated table; unlocks and unmaps on destruction.
class LockedTable {
 public:
  static absl::StatusOr<std::unique_ptr<LockedTable>> Open(const std::string& path) {
    int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT) return absl::NotFoundError(absl::StrCat("no fault table at ", path));
      return Errno("cannot open fault table", path);
    }
    std::unique_ptr<LockedTable> t(new LockedTable(fd));
    if (flock(fd, LOCK_EX) != 0) return Errno("cannot lock fault table", path);
    struct stat st;
    if (fstat(fd, &st) != 0) return Errno("cannot stat fault table", path);
    if (static_cast<size_t>(st.st_size) < kFaultTableBytes) {
      return absl::DataLossError(absl::StrCat("fault table ", path, " is truncated (",
                                              st.st_size, " bytes)"));
    }
    void* p = mmap(nullptr, st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return Errno("cannot map fault table", path);
    t->base_ = p;
    t->bytes_ = st.st_size;
    std::string error;
    FaultTableSnapshot snap;
    if (!ReadMappedFaultTable(p, st.st_size, &snap, &error)) {
      return absl::DataLossError(absl::StrCat(path, ": ", error));
    }
    const auto* h = static_cast<const FaultTableHeader*>(p);
    if (h->rank_capacity != kRankFaultCapacity || h->link_capacity != kLinkFaultCapacity) {
      return absl::DataLossError(absl::StrCat(path, ": unexpected capacities"));
    }
    t->snapshot_ = std::move(snap);
    return t;
  }

  ~LockedTable() {
    if (base_ != nullptr) munmap(base_, bytes_);
    flock(fd_, LOCK_UN);
    close(fd_);
  }

  FaultTableSnapshot& snapshot() { return snapshot_; }

  // Writes snapshot() back under the seqlock.
  void Commit() {
    auto* h = static_cast<FaultTableHeader*>(base_);
    const uint64_t g = __atomic_load_n(&h->generation, __ATOMIC_RELAXED);
    __atomic_store_n(&h->generation, g + 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    char* rank_base = static_cast<char*>(base_) + sizeof(FaultTableHeader);
    char* link_base = rank_base + kRankFaultCapacity * sizeof(RankFaultRecord);
    for (size_t i = 0; i < snapshot_.ranks.size(); ++i) {
      RankFaultRecord r = EncodeRankFault(snapshot_.ranks[i]);
      StoreWords(rank_base + i * sizeof(r), &r, sizeof(r));
    }
    for (size_t i = 0; i < snapshot_.links.size(); ++i) {
      LinkFaultRecord r = EncodeLinkFault(snapshot_.links[i]);
      StoreWords(link_base + i * sizeof(r), &r, sizeof(r));
    }
    __atomic_store_n(&h->rank_count, static_cast<uint32_t>(snapshot_.ranks.size()),
                     __ATOMIC_RELAXED);
    __atomic_store_n(&h->link_count, static_cast<uint32_t>(snapshot_.links.size()),
                     __ATOMIC_RELAXED);
    __atomic_store_n(&h->generation, g + 2, __ATOMIC_RELEASE);
  }

 private:
  explicit LockedTable(int fd) : fd_(fd) {}
  int fd_;
  void* base_ = nullptr;
  size_t bytes_ = 0;
  FaultTableSnapshot snapshot_;
};

absl::Status Mutate(const std::string& path,
                    const std::function<absl::Status(FaultTableSnapshot&)>& change) {
  absl::StatusOr<std::unique_ptr<LockedTable>> t = LockedTable::Open(path);
  if (!t.ok()) return t.status();
  absl::Status s = change((*t)->snapshot());
  if (!s.ok()) return s;
  if ((*t)->snapshot().ranks.size() > kRankFaultCapacity) {
    return absl::ResourceExhaustedError(
        absl::StrCat("fault table ", path, " holds at most ", kRankFaultCapacity, " rank faults"));
  }
  if ((*t)->snapshot().links.size() > kLinkFaultCapacity) {
    return absl::ResourceExhaustedError(
        absl::StrCat("fault table ", path, " holds at most ", kLinkFaultCapacity, " link faults"));
  }
  (*t)->Commit();
  return absl::OkStatus();
}

void PutLink(FaultTableSnapshot& s, int src, int dst, const LinkFault& fault) {
  for (auto it = s.links.begin(); it != s.links.end(); ++it) {
    if (it->src_machine == src && it->dst_machine == dst) {
      s.links.erase(it);
      break;
    }
  }
  if (fault.Any()) s.links.push_back(LinkFaultEntry{src, dst, fault});
}

}  // namespace

absl::Status CreateFaultTable(const std::string& path) {
  {
    absl::StatusOr<std::unique_ptr<LockedTable>> existing = LockedTable::Open(path);
    if (existing.ok()) {
      (*existing)->snapshot().ranks.clear();
      (*existing)->snapshot().links.clear();
      (*existing)->Commit();
      return absl::OkStatus();
    }
  }
  std::vector<char> image(kFaultTableBytes, 0);
  FaultTableHeader h{};
  std::memcpy(h.magic, kFaultTableMagic, sizeof(h.magic));
  h.version = kFaultTableVersion;
  h.header_bytes = sizeof(FaultTableHeader);
  h.rank_capacity = kRankFaultCapacity;
  h.link_capacity = kLinkFaultCapacity;
  std::memcpy(image.data(), &h, sizeof(h));
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("cannot create fault table", tmp);
  size_t off = 0;
  while (off < image.size()) {
    ssize_t n = write(fd, image.data() + off, image.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      absl::Status s = Errno("cannot write fault table", tmp);
      close(fd);
      unlink(tmp.c_str());
      return s;
    }
    off += n;
  }
  close(fd);
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    absl::Status s = Errno("cannot rename fault table into", path);
    unlink(tmp.c_str());
    return s;
  }
  return absl::OkStatus();
}

absl::Status SetRankFault(const std::string& path, int machine_id, int local_rank,
                          const RankFault& fault) {
  if (machine_id < 0) {
    return absl::InvalidArgumentError(absl::StrCat("machine_id must be >= 0, got ", machine_id));
  }
  if (local_rank < -1) {
    return absl::InvalidArgumentError(
        absl::StrCat("local_rank must be >= -1 (-1 = whole machine), got ", local_rank));
  }
  if (!(fault.compute_slowdown >= 1.0) || fault.compute_slowdown > 1e6) {
    return absl::InvalidArgumentError(
        absl::StrCat("compute_slowdown must be in [1, 1e6], got ", fault.compute_slowdown));
  }
  if (!(fault.jitter_fraction >= 0.0 && fault.jitter_fraction < 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("jitter_fraction must be in [0, 1), got ", fault.jitter_fraction));
  }
  return Mutate(path, [&](FaultTableSnapshot& s) {
    for (auto it = s.ranks.begin(); it != s.ranks.end(); ++it) {
      if (it->machine_id == machine_id && it->local_rank == local_rank) {
        s.ranks.erase(it);
        break;
      }
    }
    if (fault.Any()) s.ranks.push_back(RankFaultEntry{machine_id, local_rank, fault});
    return absl::OkStatus();
  });
}

absl::Status SetLinkFault(const std::string& path, int src_machine, int dst_machine,
                          const LinkFault& fault, bool both_directions) {
  if (src_machine < -1 || dst_machine < -1 || (src_machine == -1 && dst_machine == -1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "machine ids must be >= 0 (-1 = every other machine, at one end only), got ", src_machine, " -> ",
        dst_machine));
  }
  if (fault.delay_us < 0 || !(fault.bandwidth_bytes_per_s >= 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "delay_us and bandwidth_bytes_per_s must be >= 0, got ", fault.delay_us, " and ",
        fault.bandwidth_bytes_per_s));
  }
  return Mutate(path, [&](FaultTableSnapshot& s) {
    PutLink(s, src_machine, dst_machine, fault);
    if (both_directions && src_machine != dst_machine) PutLink(s, dst_machine, src_machine, fault);
    return absl::OkStatus();
  });
}

absl::Status ClearFaults(const std::string& path) {
  return Mutate(path, [](FaultTableSnapshot& s) {
    s.ranks.clear();
    s.links.clear();
    return absl::OkStatus();
  });
}

absl::Status ClearMachineFaults(const std::string& path, int machine_id, int local_rank) {
  if (machine_id < 0 || local_rank < -1) {
    return absl::InvalidArgumentError(absl::StrCat("machine_id must be >= 0 and local_rank >= -1, got ", machine_id,
                                                   " and ", local_rank));
  }
  return Mutate(path, [&](FaultTableSnapshot& s) {
    std::erase_if(s.ranks, [&](const RankFaultEntry& e) {
      return e.machine_id == machine_id && (local_rank == -1 || e.local_rank == local_rank);
    });
    if (local_rank == -1) {
      std::erase_if(s.links, [&](const LinkFaultEntry& e) {
        return e.src_machine == machine_id || e.dst_machine == machine_id;
      });
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<FaultTableSnapshot> ReadFaults(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat("no fault table at ", path));
    return Errno("cannot open fault table", path);
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    absl::Status s = Errno("cannot stat fault table", path);
    close(fd);
    return s;
  }
  if (st.st_size == 0) {
    close(fd);
    return absl::DataLossError(absl::StrCat("fault table ", path, " is empty"));
  }
  void* p = mmap(nullptr, st.st_size, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return Errno("cannot map fault table", path);
  FaultTableSnapshot snap;
  std::string error;
  const bool ok = ReadMappedFaultTable(p, st.st_size, &snap, &error);
  munmap(p, st.st_size);
  if (!ok) return absl::DataLossError(absl::StrCat(path, ": ", error));
  return snap;
}

}  // namespace peregrine::sim
