#include "agent/checkpoint/persist_writer.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "agent/checkpoint/shard_files.h"
#include "checkpoint/shard_format.h"

// How a step is persisted. The source shards live in shared memory and may be pruned
// (renamed to a free buffer the client then overwrites) while they are copied, so the
// copy is read with plain read() into the temp file and then verified as a whole; a
// source that changed fails the verification and the step is retried later. The store's
// lock is never held during the copy: the writer takes a snapshot of the paths first.
// Every file goes temp -> fsync -> rename, the manifest last, and the directories are
// fsynced after, so a crash leaves either a complete slot copy with its manifest or one
// without a manifest (not counted, removed when its step is dropped).

namespace peregrine::checkpoint {
namespace v1 = ::peregrine::v1;

namespace {

constexpr size_t kCopyChunk = 1 << 20;

absl::Status ErrnoStatus(int err, const char* what, const std::string& path) {
  const std::string message = absl::StrCat(what, " ", path, ": ", std::strerror(err));
  switch (err) {
    case ENOSPC:
    case EDQUOT:
      return absl::ResourceExhaustedError(message);
    case EACCES:
    case EPERM:
    case EROFS:
      return absl::PermissionDeniedError(message);
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(message);
    default:
      return absl::InternalError(message);
  }
}

absl::Status MakeDir(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) == 0 || errno == EEXIST) return absl::OkStatus();
  return ErrnoStatus(errno, "mkdir", path);
}

absl::Status SyncDir(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "open", path);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  return rc == 0 ? absl::OkStatus() : ErrnoStatus(err, "fsync", path);
}

absl::Status WriteAll(int fd, const char* data, size_t size, const std::string& path) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(errno, "write", path);
    data += n;
    size -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

// Copies `src` to a new file `dst` (replacing a leftover) and fsyncs it.
absl::Status CopyFile(const std::string& src, const std::string& dst) {
  const int in = ::open(src.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) return ErrnoStatus(errno, "open", src);
  absl::Cleanup close_in = [in] { ::close(in); };
  ::unlink(dst.c_str());
  const int out = ::open(dst.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (out < 0) return ErrnoStatus(errno, "create", dst);
  absl::Status status = absl::OkStatus();
  std::vector<char> buffer(kCopyChunk);
  for (;;) {
    const ssize_t n = ::read(in, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      status = ErrnoStatus(errno, "read", src);
      break;
    }
    if (n == 0) break;
    status = WriteAll(out, buffer.data(), static_cast<size_t>(n), dst);
    if (!status.ok()) break;
  }
  if (status.ok() && ::fsync(out) != 0) status = ErrnoStatus(errno, "fsync", dst);
  if (::close(out) != 0 && status.ok()) status = ErrnoStatus(errno, "close", dst);
  if (!status.ok()) ::unlink(dst.c_str());
  return status;
}

absl::Status WriteFileDurably(const std::string& path, const std::string& text) {
  const std::string temp = path + ".tmp";
  ::unlink(temp.c_str());
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus(errno, "create", temp);
  absl::Status status = WriteAll(fd, text.data(), text.size(), temp);
  if (status.ok() && ::fsync(fd) != 0) status = ErrnoStatus(errno, "fsync", temp);
  if (::close(fd) != 0 && status.ok()) status = ErrnoStatus(errno, "close", temp);
  if (status.ok() && ::rename(temp.c_str(), path.c_str()) != 0) status = ErrnoStatus(errno, "rename to", path);
  if (!status.ok()) ::unlink(temp.c_str());
  return status;
}

absl::StatusOr<std::string> ReadSmallFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "open", path);
  std::string text;
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return ErrnoStatus(err, "read", path);
    }
    if (n == 0) break;
    text.append(buffer, static_cast<size_t>(n));
    if (text.size() > (1 << 20)) {
      ::close(fd);
      return absl::DataLossError(absl::StrCat(path, " is larger than a manifest can be"));
    }
  }
  ::close(fd);
  return text;
}

absl::StatusOr<PersistManifest> ReadManifest(const std::string& dir, uint32_t slot, uint64_t step) {
  const std::string path = PersistManifestPath(dir, step, slot);
  absl::StatusOr<std::string> text = ReadSmallFile(path);
  if (!text.ok()) return text.status();
  absl::StatusOr<PersistManifest> manifest = ParsePersistManifest(*text);
  if (!manifest.ok()) return absl::DataLossError(absl::StrCat(path, ": ", manifest.status().message()));
  if (manifest->step != step || manifest->slot != slot) {
    return absl::DataLossError(absl::StrCat(path, " names step ", manifest->step, " slot ", manifest->slot));
  }
  return manifest;
}

}  // namespace

absl::Status PersistStepFiles(const std::string& dir, uint32_t slot, uint64_t step,
                              const std::vector<std::pair<uint32_t, std::string>>& sources) {
  // persistPath may name a directory below the mounted volume: it is created on first use.
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return ErrnoStatus(ec.value(), "persist directory", dir);
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return ErrnoStatus(errno, "persist directory", dir);
  if (!S_ISDIR(st.st_mode)) return absl::NotFoundError(absl::StrCat("persist directory ", dir, " is not a directory"));
  const std::string step_dir = PersistStepDir(dir, step);
  const std::string slot_dir = PersistSlotDir(dir, step, slot);
  if (auto s = MakeDir(step_dir); !s.ok()) return s;
  if (auto s = MakeDir(slot_dir); !s.ok()) return s;
  PersistManifest manifest;
  manifest.step = step;
  manifest.slot = slot;
  for (const auto& [rank, source] : sources) {
    const std::string final_path = PersistShardPath(dir, step, slot, rank);
    const std::string temp = final_path + ".tmp";
    if (auto s = CopyFile(source, temp); !s.ok()) return s;
    absl::StatusOr<ShardHeader> header = VerifyShardFileFor(temp, step, rank);
    if (!header.ok()) {
      ::unlink(temp.c_str());
      return absl::DataLossError(absl::StrCat("copy of ", source, " does not verify (changed while copied?): ",
                                              header.status().message()));
    }
    if (::rename(temp.c_str(), final_path.c_str()) != 0) {
      const int err = errno;
      ::unlink(temp.c_str());
      return ErrnoStatus(err, "rename to", final_path);
    }
    manifest.ranks.push_back({rank, ShardFileBytes(*header), header->payload_crc32c});
  }
  if (auto s = SyncDir(slot_dir); !s.ok()) return s;
  if (auto s = WriteFileDurably(PersistManifestPath(dir, step, slot), EncodePersistManifest(manifest)); !s.ok()) {
    return s;
  }
  if (auto s = SyncDir(step_dir); !s.ok()) return s;
  return SyncDir(dir);
}

absl::StatusOr<std::vector<uint64_t>> ScanPersisted(const std::string& dir, uint32_t slot) {
  std::vector<uint64_t> steps;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    if (errno == ENOENT) return steps;
    return ErrnoStatus(errno, "open", dir);
  }
  while (const dirent* e = ::readdir(d)) {
    const std::optional<uint64_t> step = ParsePersistStepDirName(e->d_name);
    if (step && ReadManifest(dir, slot, *step).ok()) steps.push_back(*step);
  }
  ::closedir(d);
  std::sort(steps.begin(), steps.end());
  return steps;
}

absl::Status DropPersistedStep(const std::string& dir, uint32_t slot, uint64_t step) {
  const std::string manifest = PersistManifestPath(dir, step, slot);
  if (::unlink(manifest.c_str()) != 0 && errno != ENOENT) return ErrnoStatus(errno, "unlink", manifest);
  ::unlink((manifest + ".tmp").c_str());
  const std::string slot_dir = PersistSlotDir(dir, step, slot);
  if (DIR* d = ::opendir(slot_dir.c_str())) {
    std::vector<std::string> names;
    while (const dirent* e = ::readdir(d)) {
      if (absl::StartsWith(e->d_name, "rank-")) names.emplace_back(e->d_name);
    }
    ::closedir(d);
    for (const std::string& name : names) {
      const std::string path = absl::StrCat(slot_dir, "/", name);
      if (::unlink(path.c_str()) != 0 && errno != ENOENT) return ErrnoStatus(errno, "unlink", path);
    }
    if (::rmdir(slot_dir.c_str()) != 0 && errno != ENOENT) return ErrnoStatus(errno, "rmdir", slot_dir);
  }
  // Other slots' copies of the step keep the directory; the last slot removes it.
  ::rmdir(PersistStepDir(dir, step).c_str());
  return absl::OkStatus();
}

absl::Status ReadPersistedShard(const std::string& dir, uint32_t slot, uint32_t global_rank, uint64_t step,
                                const std::string& dest_path) {
  absl::StatusOr<PersistManifest> manifest = ReadManifest(dir, slot, step);
  if (!manifest.ok()) return manifest.status();
  const auto entry = std::find_if(manifest->ranks.begin(), manifest->ranks.end(),
                                  [&](const PersistManifest::Rank& r) { return r.global_rank == global_rank; });
  if (entry == manifest->ranks.end()) {
    return absl::NotFoundError(
        absl::StrCat(PersistManifestPath(dir, step, slot), " lists no shard of rank ", global_rank));
  }
  const std::string source = PersistShardPath(dir, step, slot, global_rank);
  const std::string temp = dest_path + ".persisted";
  if (auto s = CopyFile(source, temp); !s.ok()) return s;
  absl::StatusOr<ShardHeader> header = VerifyShardFileFor(temp, step, global_rank);
  absl::Status status = header.status();
  if (status.ok() && (ShardFileBytes(*header) != entry->bytes || header->payload_crc32c != entry->crc32c)) {
    status = absl::DataLossError(absl::StrCat(source, " does not match its manifest (", ShardFileBytes(*header),
                                              " bytes, crc ", header->payload_crc32c, "; manifest: ", entry->bytes,
                                              " bytes, crc ", entry->crc32c, ")"));
  }
  if (status.ok() && ::rename(temp.c_str(), dest_path.c_str()) != 0) status = ErrnoStatus(errno, "rename to", dest_path);
  if (!status.ok()) {
    ::unlink(temp.c_str());
    return absl::Status(status.code(), absl::StrCat("persisted copy ", source, ": ", status.message()));
  }
  return absl::OkStatus();
}

PersistWriter::PersistWriter(ShardStore* store) : store_(store) {
  thread_ = std::thread([this] { Run(); });
}

PersistWriter::~PersistWriter() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.SignalAll();
  thread_.join();
}

void PersistWriter::Wake() {
  {
    absl::MutexLock lock(&mu_);
    woken_ = true;
  }
  cv_.SignalAll();
}

void PersistWriter::DiscardNewerThan(uint64_t step) {
  {
    absl::MutexLock lock(&mu_);
    discard_above_ = discard_above_ ? std::min(*discard_above_, step) : step;
    woken_ = true;
  }
  store_->DiscardPersistedNewerThan(step);
  cv_.SignalAll();
}

void PersistWriter::Run() {
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      while (!stop_ && !woken_) cv_.Wait(&mu_);
      if (stop_) return;
      woken_ = false;
    }
    Pass();
  }
}

void PersistWriter::Pass() {
  const PersistSource source = store_->PersistView();
  if (source.dir.empty() || source.every == 0) return;
  auto event = [&](uint64_t step, std::string detail) {
    v1::CheckpointEvent e;
    e.set_kind(v1::CheckpointEvent::PERSIST_FAILED);
    e.set_step(step);
    e.set_global_rank(-1);
    e.set_detail(std::move(detail));
    store_->AddEvent(std::move(e));
  };
  if (source.dir != scanned_dir_ || static_cast<int64_t>(source.slot) != scanned_slot_) {
    absl::StatusOr<std::vector<uint64_t>> found = ScanPersisted(source.dir, source.slot);
    if (!found.ok()) {
      event(0, absl::StrCat("reading persisted checkpoints: ", found.status().message()));
      scanned_dir_ = source.dir;  // reported once; writes still try
      scanned_slot_ = source.slot;
      return;
    }
    scanned_dir_ = source.dir;
    scanned_slot_ = source.slot;
    persisted_ = std::move(*found);
    failed_step_ = 0;
    store_->SetPersistedSteps(persisted_);
  }
  std::optional<uint64_t> discard;
  {
    absl::MutexLock lock(&mu_);
    std::swap(discard, discard_above_);
  }
  if (discard) {
    for (uint64_t step : persisted_) {
      if (step > *discard) (void)DropPersistedStep(source.dir, source.slot, step);
    }
    std::erase_if(persisted_, [&](uint64_t s) { return s > *discard; });
    failed_step_ = std::min(failed_step_, *discard);
    store_->SetPersistedSteps(persisted_);
  }
  if (source.ranks.empty()) return;
  const std::optional<uint64_t> step = NextPersistStep(source.eligible, persisted_, failed_step_, source.every);
  if (!step) return;
  std::vector<std::pair<uint32_t, std::string>> files;
  for (uint32_t rank : source.ranks) files.emplace_back(rank, store_->OwnShardPath(rank, *step));
  absl::Status written = PersistStepFiles(source.dir, source.slot, *step, files);
  if (!written.ok()) {
    failed_step_ = *step;
    // A source pruned or rewritten under the copy is no failure of the disk: the next
    // eligible step is tried quietly.
    bool source_gone = false;
    for (const auto& [rank, path] : files) {
      if (!VerifyShardFileFor(path, *step, rank).ok()) source_gone = true;
    }
    if (!source_gone) {
      event(*step, absl::StrCat("writing step ", *step, " to ", source.dir, " failed (retried at the next eligible step): ",
                                written.message()));
    }
    (void)DropPersistedStep(source.dir, source.slot, *step);
    return;
  }
  persisted_.push_back(*step);
  for (uint64_t old : PersistedToDrop(persisted_)) {
    if (absl::Status s = DropPersistedStep(source.dir, source.slot, old); !s.ok()) {
      event(old, absl::StrCat("deleting persisted step ", old, ": ", s.message()));
    }
    std::erase(persisted_, old);
  }
  store_->SetPersistedSteps(persisted_);
}

}  // namespace peregrine::checkpoint
