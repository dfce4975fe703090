// Leader election on a coordination.k8s.io/v1 Lease, with client-go's semantics, so that
// of several controller replicas at most one acts at a time.
//
// The decision (DecideLease) is a pure function of the Lease record as read, what this
// candidate last observed, the local time and the configuration. A candidate may take
// a lease held by someone else only when the record has not changed for
// leaseDurationSeconds *as measured on its own clock since it first saw that record*
// (client-go's observedTime): clocks of different machines are never compared.
//
// The elector loop (LeaderElector) tries to acquire every retry period (jittered), then
// renews every retry period. IsLeader() turns false by itself the moment the last
// successful renewal is older than the renew deadline, even while the loop is stuck in
// a request, so a replica that cannot renew stops acting before any other can take
// over (renew_deadline < lease_duration). Lost leadership is never regained silently:
// OnStoppedLeading runs and the elector keeps competing as a fresh candidate.
//
// Thread safety: LeaderElector is thread-safe; callbacks run on the elector's thread and
// must not call Stop(). RestClient, Clock and Random must outlive the elector.
#ifndef PEREGRINE_CONTROLLER_KUBE_LEADER_ELECTION_H_
#define PEREGRINE_CONTROLLER_KUBE_LEADER_ELECTION_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "controller/kube/rest_client.h"

namespace peregrine::kube {

// The Lease spec fields that leader election uses.
struct LeaseRecord {
  std::string holder_identity;
  int lease_duration_seconds = 0;
  absl::Time acquire_time = absl::UnixEpoch();
  absl::Time renew_time = absl::UnixEpoch();
  int lease_transitions = 0;

  bool operator==(const LeaseRecord&) const = default;
};

// What a candidate remembers between attempts: the last record it read and when (on its
// own clock) that record last changed.
struct LeaseObservation {
  std::optional<LeaseRecord> record;
  absl::Time observed_time = absl::InfinitePast();
};

enum class LeaseAction {
  kCreate,    // no Lease exists: create one holding it
  kTakeOver,  // the holder is gone (expired or released): write ourselves as holder
  kRenew,     // we hold it: write a fresh renewTime
  kWait,      // someone else holds a valid lease
};

struct LeaseDecision {
  LeaseAction action = LeaseAction::kWait;
  LeaseRecord desired;              // the record to write (not kWait)
  LeaseObservation observation;     // what to remember for the next attempt
  absl::Time holder_valid_until;    // kWait: when the holder's lease expires locally
};

// `current` is the record read now (nullopt: the Lease does not exist).
LeaseDecision DecideLease(const std::optional<LeaseRecord>& current,
                          const LeaseObservation& last, absl::Time now,
                          absl::string_view identity, absl::Duration lease_duration);

// Lease spec JSON <-> LeaseRecord (MicroTime: RFC 3339 with microseconds, UTC).
absl::StatusOr<LeaseRecord> LeaseRecordFromJson(const nlohmann::json& lease);
nlohmann::json LeaseSpecToJson(const LeaseRecord& record);
std::string FormatMicroTime(absl::Time t);
absl::StatusOr<absl::Time> ParseMicroTime(absl::string_view text);

struct LeaderElectionConfig {
  std::string lease_namespace;
  std::string lease_name;
  std::string identity;  // unique per replica (pod name + random suffix)
  absl::Duration lease_duration = absl::Seconds(15);
  absl::Duration renew_deadline = absl::Seconds(10);
  absl::Duration retry_period = absl::Seconds(2);
  // On Stop(), a leader writes an empty holder so a successor need not wait.
  bool release_on_stop = true;
  // After losing the lease (renewals failed past the renew deadline, or another holder),
  // try to acquire it again (true) or end the election loop for good (false, like
  // client-go's Run returning: the process is expected to exit). A loser that keeps
  // trying would renew its own still-valid record as soon as the API server answers
  // again and keep a replica that no longer acts as the holder.
  bool reacquire_after_loss = true;
};

// lease_duration > renew_deadline > 1.2 * retry_period > 0, and non-empty names.
absl::Status ValidateLeaderElectionConfig(const LeaderElectionConfig& config);

struct LeaderCallbacks {
  std::function<void()> on_started_leading;
  std::function<void()> on_stopped_leading;
  std::function<void(const std::string& holder)> on_new_leader;  // optional
};

class LeaderElector {
 public:
  static absl::StatusOr<std::unique_ptr<LeaderElector>> Create(RestClient* client,
                                                               LeaderElectionConfig config,
                                                               LeaderCallbacks callbacks,
                                                               Clock* clock, Random* random);
  ~LeaderElector();  // Stop()s
  LeaderElector(const LeaderElector&) = delete;
  LeaderElector& operator=(const LeaderElector&) = delete;

  void Start();
  // Ends the loop, releases the lease when configured and held, calls
  // OnStoppedLeading if leading, and joins the thread. Idempotent.
  void Stop();
  // True only while the last successful acquire/renew started less than renew_deadline ago.
  bool IsLeader();
  // The holder identity last read ("" if unknown).
  std::string CurrentHolder();

 private:
  LeaderElector(RestClient* client, LeaderElectionConfig config, LeaderCallbacks callbacks,
                Clock* clock, Random* random);
  void Run();
  // One acquire-or-renew attempt; true when we hold the lease afterwards.
  bool TryAcquireOrRenew();
  void Release();
  bool LeadingLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits `d` on the clock unless stopping; returns false when stopping.
  bool Pause(absl::Duration d);

  RestClient* const client_;
  const LeaderElectionConfig config_;
  const LeaderCallbacks callbacks_;
  const ResourcePath leases_;
  Clock* const clock_;
  Random* const random_;

  absl::Mutex mu_;
  absl::CondVar cv_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Start time of the last successful acquire/renew while leading; InfinitePast if not.
  absl::Time leading_since_renew_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::string holder_ ABSL_GUARDED_BY(mu_);
  LeaseObservation observation_;           // loop thread only
  std::string observed_resource_version_;  // loop thread only
  std::thread thread_;
};

}  // namespace peregrine::kube

#endif  // PEREGRINE_CONTROLLER_KUBE_LEADER_ELECTION_H_
