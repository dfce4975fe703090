#include "agent/checkpoint/shard_store.h"

#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <system_error>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "agent/checkpoint/shard_files.h"
#include "checkpoint/shard_format.h"

// How a pass works. Poll() scans own/rank-<g>/ of every local rank: a step-N.shard whose
// checksum is set (read from its 4 KiB header, cached by inode, size and mtime) is
// finished; one without is queued for the worker thread, which maps it and runs
// FinishShard (the client published it with a rename, so its bytes are complete); one
// whose header does not decode is corrupt: an event, and the file is removed. Markers
// step-N.skipped become SKIPPED events carrying their one-line reason. Then the pure
// policy picks the shards to prune and the store renames or deletes them: a rank keeps at
// most one free-<n>.buf, which the client claims by renaming it (so the agent never
// touches a free buffer after creating it). The budget is re-read each pass (the
// filesystem and cgroup can change); MEMORY_SHORT is reported once each time the budget
// stops holding two versions.
//
// Held backups arrive through BeginHeld/CommitHeld from the server's threads; retention
// (newest two complete steps per slot in hold_for) runs on each commit and each pass.

namespace peregrine::checkpoint {
namespace v1 = ::peregrine::v1;
namespace fs = std::filesystem;

namespace {

constexpr char kFreePrefix[] = "free-";
constexpr char kFreeSuffix[] = ".buf";

uint64_t ReadLimitFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return 0;
  std::string text;
  std::getline(in, text);
  text = std::string(absl::StripAsciiWhitespace(text));
  uint64_t value = 0;
  if (text == "max" || !absl::SimpleAtoi(text, &value)) return 0;
  // cgroup v1 reports "no limit" as a page-rounded LONG_MAX.
  if (value >= (std::numeric_limits<uint64_t>::max() >> 2)) return 0;
  return value;
}

bool ParseStepFile(const std::string& name, const std::string& suffix, uint64_t* step) {
  // step-<20 digits><suffix>
  if (name.size() != 5 + 20 + suffix.size() || !absl::StartsWith(name, "step-") || !absl::EndsWith(name, suffix)) {
    return false;
  }
  return absl::SimpleAtoi(name.substr(5, 20), step);
}

v1::CheckpointEvent MakeEvent(v1::CheckpointEvent::Kind kind, uint64_t step, int32_t rank, std::string detail) {
  v1::CheckpointEvent event;
  event.set_kind(kind);
  event.set_step(step);
  event.set_global_rank(rank);
  event.set_detail(std::move(detail));
  return event;
}

uint64_t FileBytes(const std::string& path) {
  std::error_code ec;
  const uint64_t size = fs::file_size(path, ec);
  return ec ? 0 : size;
}

}  // namespace

BudgetInputs ReadSystemBudgetInputs(const std::string& root, const std::string& cgroup_root) {
  BudgetInputs in;
  struct statvfs vfs {};
  if (::statvfs(root.c_str(), &vfs) == 0) in.filesystem_bytes = static_cast<uint64_t>(vfs.f_blocks) * vfs.f_frsize;
  in.cgroup_limit_bytes = ReadLimitFile(cgroup_root + "/memory.max");
  if (in.cgroup_limit_bytes == 0) in.cgroup_limit_bytes = ReadLimitFile(cgroup_root + "/memory/memory.limit_in_bytes");
  struct rlimit limit {};
  if (::getrlimit(RLIMIT_FSIZE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) in.file_size_limit = limit.rlim_cur;
  return in;
}

absl::StatusOr<std::unique_ptr<ShardStore>> ShardStore::Create(ShardStoreOptions options) {
  if (options.root.empty()) return absl::InvalidArgumentError("checkpoint root is empty");
  if (options.job_namespace.empty() || options.job_name.empty() || options.pod_name.empty()) {
    return absl::InvalidArgumentError("checkpoint store: job namespace, job name and pod name are required");
  }
  const std::string area =
      absl::StrCat(options.root, "/", options.job_namespace, ".", options.job_name, "/", options.pod_name);
  std::error_code ec;
  fs::create_directories(area + "/own", ec);
  if (!ec) fs::create_directories(area + "/held", ec);
  if (ec) return absl::InternalError(absl::StrCat("checkpoint area ", area, ": ", ec.message()));
  fs::permissions(area, fs::perms::owner_all, fs::perm_options::replace, ec);
  if (ec) return absl::InternalError(absl::StrCat("checkpoint area ", area, ": chmod 0700: ", ec.message()));
  if (!options.system_limits) {
    options.system_limits = [root = options.root] { return ReadSystemBudgetInputs(root); };
  }
  std::unique_ptr<ShardStore> store(new ShardStore(std::move(options), area));
  {
    absl::MutexLock lock(&store->mu_);
    store->ScanHeldLocked();
  }
  return store;
}

ShardStore::ShardStore(ShardStoreOptions options, std::string area)
    : options_(std::move(options)), area_(std::move(area)) {
  finisher_ = std::thread([this] { FinisherLoop(); });
}

ShardStore::~ShardStore() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  finisher_.join();
}

std::string ShardStore::OwnRankDir(uint32_t global_rank) const {
  return absl::StrCat(area_, "/own/rank-", global_rank);
}

std::string ShardStore::OwnShardPath(uint32_t global_rank, uint64_t step) const {
  return absl::StrCat(OwnRankDir(global_rank), "/", ShardFileName(step));
}

std::string ShardStore::HeldDir(uint32_t slot, uint32_t global_rank) const {
  return absl::StrCat(area_, "/held/slot-", slot, "/rank-", global_rank);
}

void ShardStore::FinisherLoop() {
  for (;;) {
    std::string path;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](ShardStore* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) { return s->stopping_ || !s->to_finish_.empty(); },
          this));
      if (stopping_) return;
      path = std::move(to_finish_.front());
      to_finish_.pop_front();
    }
    absl::Status status = FinishShardFile(path);
    absl::MutexLock lock(&mu_);
    finished_results_.emplace_back(std::move(path), std::move(status));
  }
}

absl::Status ShardStore::Configure(uint32_t slot, const std::vector<uint32_t>& ranks, uint32_t ranks_per_slot,
                                   const v1::CheckpointPlan& plan) {
  for (uint32_t rank : ranks) {
    std::error_code ec;
    fs::create_directories(OwnRankDir(rank), ec);
    if (ec) return absl::InternalError(absl::StrCat("checkpoint dir ", OwnRankDir(rank), ": ", ec.message()));
  }
  absl::MutexLock lock(&mu_);
  if (slot != slot_ || ranks != ranks_) {
    acks_.clear();
    backed_up_.clear();
  }
  slot_ = slot;
  ranks_ = ranks;
  ranks_per_slot_ = ranks_per_slot;
  plan_ = plan;
  configured_ = true;
  DropHeldLocked();
  return absl::OkStatus();
}

void ShardStore::SetCommittedStep(uint64_t step) {
  absl::MutexLock lock(&mu_);
  plan_.set_committed_step(step);
}

bool ShardStore::SetBackupPeers(const google::protobuf::RepeatedPtrField<v1::CheckpointPeerAddress>& peers) {
  absl::MutexLock lock(&mu_);
  if (peers.size() != plan_.backup_to().size()) return false;
  for (int i = 0; i < peers.size(); ++i) {
    if (peers[i].slot() != plan_.backup_to(i).slot()) return false;
  }
  bool changed = false;
  for (int i = 0; i < peers.size(); ++i) {
    if (peers[i].address() == plan_.backup_to(i).address()) continue;
    plan_.mutable_backup_to(i)->set_address(peers[i].address());
    changed = true;
  }
  return changed;
}

std::vector<RankFiles> ShardStore::ScanOwn(const std::vector<uint32_t>& ranks, std::vector<v1::CheckpointEvent>* events) {
  std::vector<RankFiles> out;
  std::vector<std::string> to_queue;
  for (uint32_t rank : ranks) {
    RankFiles files;
    files.global_rank = rank;
    std::error_code ec;
    for (fs::directory_iterator it(OwnRankDir(rank), ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      const std::string path = it->path().string();
      uint64_t step = 0;
      if (absl::StartsWith(name, kFreePrefix) && absl::EndsWith(name, kFreeSuffix)) {
        files.has_free_buffer = true;
      } else if (ParseStepFile(name, ".skipped", &step)) {
        std::ifstream in(path);
        std::string reason;
        std::getline(in, reason);
        events->push_back(MakeEvent(v1::CheckpointEvent::SKIPPED, step, static_cast<int32_t>(rank),
                                    reason.empty() ? "save skipped" : reason));
        ::unlink(path.c_str());
      } else if (ParseShardFileName(name, &step)) {
        struct stat st {};
        if (::stat(path.c_str(), &st) != 0) continue;
        const FileId id{static_cast<uint64_t>(st.st_ino), static_cast<uint64_t>(st.st_size),
                        static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
        {
          absl::MutexLock lock(&mu_);
          if (auto f = finished_files_.find(path); f != finished_files_.end() && f->second == id) {
            files.finished[step] = id.size;
            continue;
          }
          if (finishing_.contains(path)) {
            files.unfinished.insert(step);
            continue;
          }
        }
        absl::StatusOr<ShardHeader> header = ReadShardFileHeader(path);
        if (!header.ok()) {
          events->push_back(MakeEvent(v1::CheckpointEvent::CORRUPT_SHARD, step, static_cast<int32_t>(rank),
                                      std::string(header.status().message())));
          ::unlink(path.c_str());
        } else if (header->checksum_set) {
          absl::MutexLock lock(&mu_);
          finished_files_[path] = id;
          files.finished[step] = id.size;
        } else {
          files.unfinished.insert(step);
          to_queue.push_back(path);
        }
      }
    }
    out.push_back(std::move(files));
  }
  absl::MutexLock lock(&mu_);
  for (std::string& path : to_queue) {
    finishing_.insert(path);
    to_finish_.push_back(std::move(path));
  }
  return out;
}

std::vector<v1::CheckpointEvent> ShardStore::Poll() {
  std::vector<v1::CheckpointEvent> events;
  std::vector<uint32_t> ranks;
  {
    absl::MutexLock lock(&mu_);
    ranks = ranks_;
    // Results of the worker: finished shards are picked up by the scan below; a shard
    // that could not be finished is corrupt or truncated.
    for (auto& [path, status] : finished_results_) {
      finishing_.erase(path);
      if (status.ok()) continue;
      uint64_t step = 0;
      ParseShardFileName(fs::path(path).filename().string(), &step);
      int32_t rank = -1;
      for (uint32_t r : ranks_) {
        if (absl::StartsWith(path, OwnRankDir(r) + "/")) rank = static_cast<int32_t>(r);
      }
      events.push_back(MakeEvent(v1::CheckpointEvent::CORRUPT_SHARD, step, rank, std::string(status.message())));
      ::unlink(path.c_str());
    }
    finished_results_.clear();
  }
  std::vector<RankFiles> own = ScanOwn(ranks, &events);

  absl::MutexLock lock(&mu_);
  const std::vector<uint64_t> stored = StoredSteps(own);
  const uint64_t backed_up = backed_up_.empty() ? 0 : *backed_up_.rbegin();
  for (const PrunedShard& p : DecidePrune(own, plan_.committed_step(), backed_up)) {
    const std::string path = OwnShardPath(p.global_rank, p.step);
    for (RankFiles& f : own) {
      if (f.global_rank == p.global_rank) f.finished.erase(p.step);
    }
    finished_files_.erase(path);
    if (p.recycle) {
      const std::string free_path = absl::StrCat(OwnRankDir(p.global_rank), "/", kFreePrefix, p.step, kFreeSuffix);
      if (::rename(path.c_str(), free_path.c_str()) == 0) continue;
    }
    ::unlink(path.c_str());
  }
  // What the own area holds now: shards and free buffers (their pages are memory too).
  own_bytes_ = 0;
  uint64_t last_shard = 0;
  for (const RankFiles& f : own) {
    for (const auto& [step, bytes] : f.finished) own_bytes_ += bytes;
    if (!f.finished.empty()) last_shard = std::max(last_shard, f.finished.rbegin()->second);
    std::error_code ec;
    for (fs::directory_iterator it(OwnRankDir(f.global_rank), ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (absl::StartsWith(name, kFreePrefix) && absl::EndsWith(name, kFreeSuffix)) own_bytes_ += FileBytes(it->path());
    }
  }
  own_ = std::move(own);
  stored_ = stored;
  // Forget acknowledgements of steps that are gone.
  for (auto it = acks_.begin(); it != acks_.end();) {
    it = std::binary_search(stored_.begin(), stored_.end(), it->first) ? std::next(it) : acks_.erase(it);
  }
  for (auto it = backed_up_.begin(); it != backed_up_.end();) {
    it = std::binary_search(stored_.begin(), stored_.end(), *it) ? std::next(it) : backed_up_.erase(it);
  }

  BudgetInputs inputs = options_.system_limits();
  inputs.plan_limit_bytes = plan_.memory_limit_bytes();
  budget_ = MemoryBudget(inputs);
  allowance_ = DecideAllowance(budget_, static_cast<uint32_t>(ranks_.size()), held_bytes_, last_shard);
  if (allowance_.memory_short && !memory_short_reported_) {
    events.push_back(MakeEvent(v1::CheckpointEvent::MEMORY_SHORT, stored_.empty() ? 0 : stored_.back(), -1,
                               absl::StrCat("budget ", budget_, " bytes (held backups ", held_bytes_, ") holds fewer than two ",
                                            last_shard, "-byte versions for ", ranks_.size(),
                                            " rank(s); one version each, a save that does not fit is skipped")));
  }
  memory_short_reported_ = allowance_.memory_short;
  DropHeldLocked();
  for (v1::CheckpointEvent& e : events_) events.push_back(std::move(e));
  events_.clear();
  return events;
}

v1::CheckpointReport ShardStore::Report() const {
  absl::MutexLock lock(&mu_);
  v1::CheckpointReport report;
  for (uint64_t step : stored_) report.add_stored_steps(step);
  for (uint64_t step : backed_up_) report.add_backed_up_steps(step);
  for (uint64_t step : persisted_) report.add_persisted_steps(step);
  report.set_store_bytes(own_bytes_ + held_bytes_);
  report.set_memory_budget_bytes(budget_);
  for (const HeldKey& k : CompleteHeld(held_, ranks_per_slot_)) {
    v1::HeldBackup* h = report.add_held();
    h->set_slot(k.slot);
    h->set_step(k.step);
  }
  return report;
}

uint64_t ShardStore::AllowanceBytes() const {
  absl::MutexLock lock(&mu_);
  return allowance_.per_rank_bytes;
}

void ShardStore::AddEvent(v1::CheckpointEvent event) {
  absl::MutexLock lock(&mu_);
  events_.push_back(std::move(event));
}

std::optional<BackupJob> ShardStore::NextBackup() const {
  absl::MutexLock lock(&mu_);
  if (plan_.backup_to().empty() || ranks_.empty()) return std::nullopt;
  std::optional<uint64_t> step = NextBackupStep(stored_, backed_up_);
  if (!step) return std::nullopt;
  BackupJob job;
  job.slot = slot_;
  job.step = *step;
  for (uint32_t rank : ranks_) job.shards.push_back(BackupJob::Shard{rank, OwnShardPath(rank, *step)});
  const auto acked = acks_.find(*step);
  for (const v1::CheckpointPeerAddress& peer : plan_.backup_to()) {
    if (peer.address().empty()) continue;  // not registered yet: its address comes later
    for (uint32_t rank : ranks_) {
      if (acked == acks_.end() || !acked->second.contains({peer.address(), rank})) {
        job.peers.push_back(peer.address());
        break;
      }
    }
  }
  return job;
}

void ShardStore::AcknowledgeBackup(uint64_t step, const std::string& peer, uint32_t global_rank) {
  absl::MutexLock lock(&mu_);
  if (!std::binary_search(stored_.begin(), stored_.end(), step)) return;
  auto& acked = acks_[step];
  acked.insert({peer, global_rank});
  for (const v1::CheckpointPeerAddress& p : plan_.backup_to()) {
    for (uint32_t rank : ranks_) {
      if (!acked.contains({p.address(), rank})) return;
    }
  }
  backed_up_.insert(step);
}

uint64_t ShardStore::backup_bandwidth() const {
  absl::MutexLock lock(&mu_);
  return plan_.backup_bandwidth_bytes_per_second();
}

absl::StatusOr<std::string> ShardStore::BeginHeld(const v1::ShardKey& key, uint64_t total_bytes) {
  if (total_bytes < kShardHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat("shard of ", total_bytes, " bytes is smaller than its header"));
  }
  const std::string dir = HeldDir(key.slot(), key.global_rank());
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("held dir ", dir, ": ", ec.message()));
  absl::MutexLock lock(&mu_);
  uint64_t receiving = 0;
  for (const auto& [path, bytes] : receiving_) receiving += bytes;
  const uint64_t in_use = own_bytes_ + held_bytes_ + receiving;
  if (budget_ > 0 && (in_use > budget_ || total_bytes > budget_ - in_use)) {
    return absl::ResourceExhaustedError(absl::StrCat("a ", total_bytes, "-byte shard does not fit the store: ", in_use,
                                                     " of ", budget_, " budget bytes in use"));
  }
  const std::string path = absl::StrCat(dir, "/", TempShardFileName(key.step()), ".", ++temp_counter_);
  receiving_[path] = total_bytes;
  return path;
}

absl::Status ShardStore::CommitHeld(const v1::ShardKey& key, const std::string& temp_path) {
  absl::StatusOr<ShardHeader> header = VerifyShardFileFor(temp_path, key.step(), key.global_rank());
  if (!header.ok()) {
    ::unlink(temp_path.c_str());
    absl::MutexLock lock(&mu_);
    receiving_.erase(temp_path);
    events_.push_back(MakeEvent(v1::CheckpointEvent::CORRUPT_SHARD, key.step(), static_cast<int32_t>(key.global_rank()),
                                absl::StrCat("received backup of slot ", key.slot(), ": ", header.status().message())));
    return header.status();
  }
  const std::string final_path = absl::StrCat(HeldDir(key.slot(), key.global_rank()), "/", ShardFileName(key.step()));
  const uint64_t bytes = FileBytes(temp_path);
  absl::MutexLock lock(&mu_);
  receiving_.erase(temp_path);
  const bool replaced = held_[key.slot()][key.step()].contains(key.global_rank());
  if (::rename(temp_path.c_str(), final_path.c_str()) != 0) {
    ::unlink(temp_path.c_str());
    return absl::InternalError(absl::StrCat("rename ", temp_path, " -> ", final_path, " failed"));
  }
  if (!replaced) held_bytes_ += bytes;
  held_[key.slot()][key.step()].insert(key.global_rank());
  DropHeldLocked();
  return absl::OkStatus();
}

void ShardStore::AbortHeld(const std::string& temp_path) {
  absl::MutexLock lock(&mu_);
  receiving_.erase(temp_path);
}

absl::StatusOr<std::string> ShardStore::FindShard(const v1::ShardKey& key) const {
  absl::MutexLock lock(&mu_);
  if (auto s = held_.find(key.slot()); s != held_.end()) {
    if (auto st = s->second.find(key.step()); st != s->second.end() && st->second.contains(key.global_rank())) {
      return absl::StrCat(HeldDir(key.slot(), key.global_rank()), "/", ShardFileName(key.step()));
    }
  }
  if (key.slot() == slot_) {
    for (const RankFiles& f : own_) {
      if (f.global_rank == key.global_rank() && f.finished.contains(key.step())) {
        return OwnShardPath(key.global_rank(), key.step());
      }
    }
  }
  return absl::NotFoundError(
      absl::StrCat("no shard of slot ", key.slot(), " rank ", key.global_rank(), " step ", key.step(), " here"));
}

PersistSource ShardStore::PersistView() const {
  absl::MutexLock lock(&mu_);
  PersistSource source;
  source.slot = slot_;
  source.ranks = ranks_;
  source.every = plan_.persist_every_steps();
  source.dir = plan_.persist_dir();
  if (plan_.backup_to().empty()) {
    source.eligible = stored_;
  } else {
    source.eligible.assign(backed_up_.begin(), backed_up_.end());
  }
  return source;
}

void ShardStore::SetPersistedSteps(std::vector<uint64_t> steps) {
  std::sort(steps.begin(), steps.end());
  absl::MutexLock lock(&mu_);
  persisted_ = std::move(steps);
}

void ShardStore::DiscardPersistedNewerThan(uint64_t step) {
  absl::MutexLock lock(&mu_);
  std::erase_if(persisted_, [step](uint64_t s) { return s > step; });
}

void ShardStore::DiscardOwnNewerThan(uint64_t step) {
  std::vector<uint32_t> ranks;
  {
    absl::MutexLock lock(&mu_);
    ranks = ranks_;
  }
  for (uint32_t rank : ranks) {
    std::error_code ec;
    for (fs::directory_iterator it(OwnRankDir(rank), ec), end; !ec && it != end; it.increment(ec)) {
      uint64_t s = 0;
      if (ParseShardFileName(it->path().filename().string(), &s) && s > step) {
        absl::MutexLock lock(&mu_);
        finished_files_.erase(it->path().string());
        ::unlink(it->path().c_str());
      }
    }
  }
  absl::MutexLock lock(&mu_);
  for (RankFiles& f : own_) {
    f.finished.erase(f.finished.upper_bound(step), f.finished.end());
  }
  stored_.erase(std::upper_bound(stored_.begin(), stored_.end(), step), stored_.end());
}

void ShardStore::RemoveAreaIfEmpty() {
  // rmdir removes only empty directories, so whatever another agent or a rank put there stays.
  for (const char* sub : {"/own", "/held"}) {
    std::error_code ec;
    std::vector<fs::path> dirs;
    for (fs::recursive_directory_iterator it(area_ + sub, ec), end; !ec && it != end; it.increment(ec)) {
      if (it->is_directory()) dirs.push_back(it->path());
    }
    std::sort(dirs.begin(), dirs.end(), [](const fs::path& a, const fs::path& b) {
      return a.string().size() > b.string().size();  // children before their parents
    });
    for (const fs::path& d : dirs) ::rmdir(d.c_str());
    ::rmdir((area_ + sub).c_str());
  }
  const fs::path area(area_);
  if (::rmdir(area.c_str()) == 0 && ::rmdir(area.parent_path().c_str()) == 0) ::rmdir(options_.root.c_str());
}

void ShardStore::ScanHeldLocked() {
  held_.clear();
  held_bytes_ = 0;
  std::error_code ec;
  for (fs::directory_iterator slot_it(area_ + "/held", ec), end; !ec && slot_it != end; slot_it.increment(ec)) {
    uint32_t slot = 0;
    const std::string slot_name = slot_it->path().filename().string();
    if (!absl::StartsWith(slot_name, "slot-") || !absl::SimpleAtoi(slot_name.substr(5), &slot)) continue;
    std::error_code ec2;
    for (fs::directory_iterator rank_it(slot_it->path(), ec2); !ec2 && rank_it != end; rank_it.increment(ec2)) {
      uint32_t rank = 0;
      const std::string rank_name = rank_it->path().filename().string();
      if (!absl::StartsWith(rank_name, "rank-") || !absl::SimpleAtoi(rank_name.substr(5), &rank)) continue;
      std::error_code ec3;
      for (fs::directory_iterator f(rank_it->path(), ec3); !ec3 && f != end; f.increment(ec3)) {
        uint64_t step = 0;
        if (ParseShardFileName(f->path().filename().string(), &step)) {
          held_[slot][step].insert(rank);
          held_bytes_ += FileBytes(f->path());
        } else {
          ::unlink(f->path().c_str());  // a transfer cut short by an agent restart
        }
      }
    }
  }
}

void ShardStore::DropHeldLocked() {
  if (!configured_) return;
  const std::set<uint32_t> hold_for(plan_.hold_for().begin(), plan_.hold_for().end());
  for (const HeldKey& k : HeldToDrop(held_, hold_for, ranks_per_slot_, plan_.committed_step())) {
    for (uint32_t rank : held_[k.slot][k.step]) {
      const std::string path = absl::StrCat(HeldDir(k.slot, rank), "/", ShardFileName(k.step));
      const uint64_t bytes = FileBytes(path);
      if (::unlink(path.c_str()) == 0) held_bytes_ -= std::min(held_bytes_, bytes);
    }
    held_[k.slot].erase(k.step);
    if (held_[k.slot].empty()) held_.erase(k.slot);
  }
}

}  // namespace peregrine::checkpoint
