// peregrine-checkpoint-peer-bench: the agent's CheckpointPeer data channel on loopback.
// Two real agent stores and a real PeerServer (gRPC, bearer token, 1 MiB CRC'd chunks,
// verified on receipt) in one process: for each shard size it times
//   - backup: SendShard (PutShard) of one finished shard to the holder, until the holder
//     has verified and stored it;
//   - restore from a peer: FetchShard (GetShard) of that held shard back into a rank
//     directory, verified, as the agent's restore does;
// and prints time and throughput (median of --runs). The holder's copy and the fetched
// copy are compared with the original byte for byte.
//
// Usage: peregrine-checkpoint-peer-bench [--sizes 64M,1G] [--runs 3] [--root DIR]
// The stores live in a fresh directory under --root (default /dev/shm), removed at exit.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "agent/checkpoint/backup_sender.h"
#include "agent/checkpoint/data_token.h"
#include "agent/checkpoint/peer_service.h"
#include "agent/checkpoint/restore_fetch.h"
#include "agent/checkpoint/shard_store.h"
#include "base/clock.h"
#include "checkpoint/shard_format.h"

namespace peregrine::checkpoint {
namespace {

namespace v1 = ::peregrine::v1;
constexpr char kToken[] = "bench-job-token";

[[noreturn]] void Die(const std::string& why) {
  std::fprintf(stderr, "peer_bench: %s\n", why.c_str());
  std::exit(1);
}

uint64_t ParseSize(std::string s) {
  uint64_t unit = 1;
  if (!s.empty()) {
    switch (s.back()) {
      case 'K': case 'k': unit = 1ull << 10; break;
      case 'M': case 'm': unit = 1ull << 20; break;
      case 'G': case 'g': unit = 1ull << 30; break;
      default: break;
    }
    if (unit != 1) s.pop_back();
  }
  uint64_t n = 0;
  if (!absl::SimpleAtoi(s, &n) || n == 0) Die("bad size \"" + s + "\" (e.g. 64M, 1G)");
  return n * unit;
}

std::unique_ptr<ShardStore> MakeStore(const std::string& root, const std::string& pod) {
  ShardStoreOptions options;
  options.root = root;
  options.job_namespace = "bench";
  options.job_name = "peer";
  options.pod_name = pod;
  auto store = ShardStore::Create(options);
  if (!store.ok()) Die(std::string(store.status().message()));
  return std::move(*store);
}

// Writes a finished shard of `payload` random bytes (two segments) at `path`.
void WriteShard(const std::string& path, uint64_t step, uint64_t payload) {
  auto h = LayoutShard(step, 0, 2, 1700000000000000000, {payload / 3, payload - payload / 3});
  if (!h.ok()) Die(std::string(h.status().message()));
  const uint64_t bytes = ShardFileBytes(*h);
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0) Die("cannot create " + path);
  void* map = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (map == MAP_FAILED) Die("cannot map " + path);
  auto* base = static_cast<uint8_t*>(map);
  std::mt19937_64 rng(step);
  for (uint64_t i = kShardHeaderBytes; i + 8 <= bytes; i += 8) {
    const uint64_t v = rng();
    std::memcpy(base + i, &v, 8);
  }
  EncodeShardHeader(*h, absl::MakeSpan(base, kShardHeaderBytes));
  if (!FinishShard(absl::MakeSpan(base, bytes)).ok()) Die("cannot finish " + path);
  munmap(map, bytes);
}

bool SameBytes(const std::string& a, const std::string& b) {
  std::FILE* fa = std::fopen(a.c_str(), "rb");
  std::FILE* fb = std::fopen(b.c_str(), "rb");
  bool same = fa != nullptr && fb != nullptr;
  std::vector<char> ba(1 << 20), bb(1 << 20);
  while (same) {
    const size_t na = std::fread(ba.data(), 1, ba.size(), fa);
    const size_t nb = std::fread(bb.data(), 1, bb.size(), fb);
    if (na != nb || std::memcmp(ba.data(), bb.data(), na) != 0) same = false;
    if (na == 0) break;
  }
  if (fa != nullptr) std::fclose(fa);
  if (fb != nullptr) std::fclose(fb);
  return same;
}

std::string HeldPath(const ShardStore& holder, uint32_t slot, uint32_t rank, uint64_t step) {
  return absl::StrCat(holder.area(), "/held/slot-", slot, "/rank-", rank, "/", ShardFileName(step));
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int Main(int argc, char** argv) {
  std::string sizes = "64M,1G", root_parent = "/dev/shm";
  int runs = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) Die(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--sizes") {
      sizes = value();
    } else if (arg == "--runs") {
      if (!absl::SimpleAtoi(value(), &runs) || runs < 1) Die("--runs must be a positive integer");
    } else if (arg == "--root") {
      root_parent = value();
    } else {
      Die("unknown argument " + arg + " (--sizes, --runs, --root)");
    }
  }
  std::string root = root_parent + "/peregrine-peer-bench-XXXXXX";
  if (mkdtemp(root.data()) == nullptr) Die("cannot create a directory under " + root_parent);
  struct Cleanup {
    std::string dir;
    ~Cleanup() { std::filesystem::remove_all(dir); }
  } cleanup{root};

  // Slot 0 (rank 0) backs up to slot 1 (rank 1), which holds for slot 0.
  std::unique_ptr<ShardStore> sender = MakeStore(root, "pod-a");
  std::unique_ptr<ShardStore> holder = MakeStore(root, "pod-b");
  PeerServerOptions server_options;
  server_options.bind = "127.0.0.1";
  const checkpoint::DataToken server_token(kToken);
  server_options.token = &server_token;
  server_options.store = holder.get();
  auto server = PeerServer::Start(server_options);
  if (!server.ok()) Die(std::string(server.status().message()));
  const std::string address = absl::StrCat("127.0.0.1:", (*server)->port());
  v1::CheckpointPlan sender_plan, holder_plan;
  sender_plan.set_interval_steps(1);
  holder_plan.set_interval_steps(1);
  v1::CheckpointPeerAddress* to = sender_plan.add_backup_to();
  to->set_slot(1);
  to->set_address(address);
  holder_plan.add_hold_for(0);
  if (!sender->Configure(0, {0}, 1, sender_plan).ok() || !holder->Configure(1, {1}, 1, holder_plan).ok()) {
    Die("cannot configure the stores");
  }
  std::printf("peer_bench: CheckpointPeer over gRPC on loopback (%s), stores under %s, %d runs each (median), "
              "%u CPUs\n",
              address.c_str(), root.c_str(), runs, std::thread::hardware_concurrency());
  uint64_t step = 0;
  for (const auto& part : absl::StrSplit(sizes, ',')) {
    const uint64_t payload = ParseSize(std::string(part));
    std::vector<double> put, get;
    uint64_t file_bytes = 0;
    for (int r = 0; r < runs; ++r) {
      ++step;
      const std::string source = sender->OwnShardPath(0, step);
      WriteShard(source, step, payload);
      file_bytes = std::filesystem::file_size(source);
      v1::ShardKey key;
      key.set_slot(0);
      key.set_global_rank(0);
      key.set_step(step);
      auto start = std::chrono::steady_clock::now();
      const absl::Status sent = SendShard(address, kToken, key, source, nullptr, RealClock(), [] { return false; });
      put.push_back(Seconds(start));
      if (!sent.ok()) Die("PutShard: " + std::string(sent.message()));
      const std::string held = HeldPath(*holder, 0, 0, step);
      if (!SameBytes(source, held)) Die("the held copy differs from the original at " + held);
      const std::string fetched = root + "/fetched-" + ShardFileName(step);
      start = std::chrono::steady_clock::now();
      const absl::Status got = FetchShard(address, kToken, key, fetched);
      get.push_back(Seconds(start));
      if (!got.ok()) Die("GetShard: " + std::string(got.message()));
      if (!SameBytes(source, fetched)) Die("the fetched copy differs from the original");
      std::filesystem::remove(fetched);
      std::filesystem::remove(source);
      holder->Poll();  // retention: the holder keeps the newest two steps per slot
    }
    const double mib = static_cast<double>(file_bytes) / (1 << 20);
    std::printf("shard %.0f MiB:\n", mib);
    std::printf("  backup  (PutShard, verified on receipt)  %8.1f ms  %7.0f MiB/s\n", 1e3 * Median(put),
                mib / Median(put));
    std::printf("  restore (GetShard from the holder)       %8.1f ms  %7.0f MiB/s\n", 1e3 * Median(get),
                mib / Median(get));
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace peregrine::checkpoint

int main(int argc, char** argv) { return peregrine::checkpoint::Main(argc, argv); }
