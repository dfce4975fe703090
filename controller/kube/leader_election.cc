#include "controller/kube/leader_election.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace peregrine::kube {

using nlohmann::json;

// ---------------------------------------------------------------------------------------
// The decision.

LeaseDecision DecideLease(const std::optional<LeaseRecord>& current, const LeaseObservation& last,
                          absl::Time now, absl::string_view identity,
                          absl::Duration lease_duration) {
  LeaseDecision decision;
  const int duration_seconds = static_cast<int>(absl::ToInt64Seconds(lease_duration));
  if (!current.has_value()) {
    decision.action = LeaseAction::kCreate;
    decision.desired.holder_identity = std::string(identity);
    decision.desired.lease_duration_seconds = duration_seconds;
    decision.desired.acquire_time = now;
    decision.desired.renew_time = now;
    decision.desired.lease_transitions = 0;
    decision.observation = {decision.desired, now};
    return decision;
  }
  // The record's age is measured from when *we* first saw it as it is now.
  LeaseObservation observation = last;
  if (!last.record.has_value() || *last.record != *current) observation = {*current, now};
  const absl::Duration holder_duration = current->lease_duration_seconds > 0
                                             ? absl::Seconds(current->lease_duration_seconds)
                                             : lease_duration;
  const bool held_by_other =
      !current->holder_identity.empty() && current->holder_identity != identity;
  if (held_by_other && now < observation.observed_time + holder_duration) {
    decision.action = LeaseAction::kWait;
    decision.observation = observation;
    decision.holder_valid_until = observation.observed_time + holder_duration;
    return decision;
  }
  LeaseRecord desired = *current;
  desired.holder_identity = std::string(identity);
  desired.lease_duration_seconds = duration_seconds;
  desired.renew_time = now;
  if (current->holder_identity == identity) {
    decision.action = LeaseAction::kRenew;
  } else {
    decision.action = LeaseAction::kTakeOver;
    desired.acquire_time = now;
    desired.lease_transitions = current->lease_transitions + 1;
  }
  decision.desired = desired;
  decision.observation = {desired, now};
  return decision;
}

// ---------------------------------------------------------------------------------------
// JSON translation.

std::string FormatMicroTime(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", t, absl::UTCTimeZone());
}

absl::StatusOr<absl::Time> ParseMicroTime(absl::string_view text) {
  absl::Time t;
  std::string error;
  if (!absl::ParseTime(absl::RFC3339_full, text, &t, &error)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text, "' is not an RFC 3339 time: ", error));
  }
  return t;
}

absl::StatusOr<LeaseRecord> LeaseRecordFromJson(const json& lease) {
  LeaseRecord record;
  if (!lease.is_object()) return absl::InvalidArgumentError("Lease is not a JSON object");
  auto spec = lease.find("spec");
  if (spec == lease.end() || spec->is_null()) return record;
  if (!spec->is_object()) return absl::InvalidArgumentError("Lease.spec is not an object");
  auto field = [&](const char* name) -> const json* {
    auto it = spec->find(name);
    return it == spec->end() || it->is_null() ? nullptr : &*it;
  };
  if (const json* v = field("holderIdentity")) {
    if (!v->is_string()) return absl::InvalidArgumentError("Lease.spec.holderIdentity is not a string");
    record.holder_identity = v->get<std::string>();
  }
  if (const json* v = field("leaseDurationSeconds")) {
    if (!v->is_number_integer()) {
      return absl::InvalidArgumentError("Lease.spec.leaseDurationSeconds is not an integer");
    }
    record.lease_duration_seconds = v->get<int>();
  }
  if (const json* v = field("leaseTransitions")) {
    if (!v->is_number_integer()) {
      return absl::InvalidArgumentError("Lease.spec.leaseTransitions is not an integer");
    }
    record.lease_transitions = v->get<int>();
  }
  for (auto [name, target] : {std::pair{"acquireTime", &record.acquire_time},
                              std::pair{"renewTime", &record.renew_time}}) {
    if (const json* v = field(name)) {
      if (!v->is_string()) {
        return absl::InvalidArgumentError(absl::StrCat("Lease.spec.", name, " is not a string"));
      }
      absl::StatusOr<absl::Time> t = ParseMicroTime(v->get<std::string>());
      if (!t.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("Lease.spec.", name, ": ", t.status().message()));
      }
      *target = *t;
    }
  }
  return record;
}

json LeaseSpecToJson(const LeaseRecord& record) {
  return json{{"holderIdentity", record.holder_identity},
              {"leaseDurationSeconds", record.lease_duration_seconds},
              {"acquireTime", FormatMicroTime(record.acquire_time)},
              {"renewTime", FormatMicroTime(record.renew_time)},
              {"leaseTransitions", record.lease_transitions}};
}

absl::Status ValidateLeaderElectionConfig(const LeaderElectionConfig& config) {
  if (config.lease_namespace.empty() || config.lease_name.empty()) {
    return absl::InvalidArgumentError("leader election: lease namespace and name are required");
  }
  if (config.identity.empty()) {
    return absl::InvalidArgumentError("leader election: identity is required");
  }
  if (config.retry_period <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("leader election: retry_period must be positive");
  }
  if (config.lease_duration < absl::Seconds(1)) {
    return absl::InvalidArgumentError("leader election: lease_duration must be at least 1s");
  }
  if (config.lease_duration <= config.renew_deadline) {
    return absl::InvalidArgumentError(
        "leader election: lease_duration must be greater than renew_deadline");
  }
  if (config.renew_deadline <= config.retry_period * 1.2) {
    return absl::InvalidArgumentError(
        "leader election: renew_deadline must be greater than 1.2 * retry_period");
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------
// The loop.

absl::StatusOr<std::unique_ptr<LeaderElector>> LeaderElector::Create(
    RestClient* client, LeaderElectionConfig config, LeaderCallbacks callbacks, Clock* clock,
    Random* random) {
  if (absl::Status s = ValidateLeaderElectionConfig(config); !s.ok()) return s;
  return std::unique_ptr<LeaderElector>(
      new LeaderElector(client, std::move(config), std::move(callbacks), clock, random));
}

LeaderElector::LeaderElector(RestClient* client, LeaderElectionConfig config,
                             LeaderCallbacks callbacks, Clock* clock, Random* random)
    : client_(client),
      config_(std::move(config)),
      callbacks_(std::move(callbacks)),
      leases_{.group = "coordination.k8s.io",
              .version = "v1",
              .plural = "leases",
              .namespace_name = config_.lease_namespace},
      clock_(clock),
      random_(random) {}

LeaderElector::~LeaderElector() { Stop(); }

void LeaderElector::Start() {
  absl::MutexLock lock(&mu_);
  if (thread_.joinable() || stopping_) return;
  thread_ = std::thread([this] { Run(); });
}

void LeaderElector::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    cv_.SignalAll();
  }
  if (thread_.joinable()) thread_.join();
}

bool LeaderElector::LeadingLocked(absl::Time now) {
  return leading_since_renew_ != absl::InfinitePast() &&
         now < leading_since_renew_ + config_.renew_deadline;
}

bool LeaderElector::IsLeader() {
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  return LeadingLocked(now);
}

std::string LeaderElector::CurrentHolder() {
  absl::MutexLock lock(&mu_);
  return holder_;
}

bool LeaderElector::Pause(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  const absl::Time deadline = clock_->Now() + d;
  while (!stopping_) {
    if (clock_->WaitWithDeadline(cv_, mu_, deadline)) break;
  }
  return !stopping_;
}

bool LeaderElector::TryAcquireOrRenew() {
  const absl::Time now = clock_->Now();
  absl::StatusOr<json> got = client_->Get(leases_, config_.lease_name);
  std::optional<LeaseRecord> current;
  if (got.ok()) {
    absl::StatusOr<LeaseRecord> record = LeaseRecordFromJson(*got);
    if (!record.ok()) return false;  // a garbled Lease: nobody can prove it expired
    current = *record;
  } else if (!absl::IsNotFound(got.status())) {
    return false;
  }
  const LeaseDecision decision =
      DecideLease(current, observation_, now, config_.identity, config_.lease_duration);
  observation_ = decision.observation;
  std::string previous_holder;
  const std::string holder = current.has_value() ? current->holder_identity : "";
  {
    absl::MutexLock lock(&mu_);
    previous_holder = holder_;
    holder_ = holder;
  }
  if (holder != previous_holder && !holder.empty() && callbacks_.on_new_leader) {
    callbacks_.on_new_leader(holder);
  }
  absl::StatusOr<json> written;
  switch (decision.action) {
    case LeaseAction::kWait:
      return false;
    case LeaseAction::kCreate: {
      json lease = {{"apiVersion", "coordination.k8s.io/v1"},
                    {"kind", "Lease"},
                    {"metadata", {{"name", config_.lease_name},
                                  {"namespace", config_.lease_namespace}}},
                    {"spec", LeaseSpecToJson(decision.desired)}};
      written = client_->Create(leases_, lease);
      break;
    }
    case LeaseAction::kTakeOver:
    case LeaseAction::kRenew: {
      json lease = *got;  // keeps metadata.resourceVersion: the write is conditional
      json spec = LeaseSpecToJson(decision.desired);
      if (!lease["spec"].is_object()) lease["spec"] = json::object();
      for (auto& [key, value] : spec.items()) lease["spec"][key] = value;
      written = client_->Update(leases_, config_.lease_name, lease);
      break;
    }
  }
  if (!written.ok()) return false;
  {
    absl::MutexLock lock(&mu_);
    holder_ = config_.identity;
  }
  if (previous_holder != config_.identity && callbacks_.on_new_leader) {
    callbacks_.on_new_leader(config_.identity);
  }
  return true;
}

void LeaderElector::Release() {
  absl::StatusOr<json> got = client_->Get(leases_, config_.lease_name);
  if (!got.ok()) return;
  absl::StatusOr<LeaseRecord> record = LeaseRecordFromJson(*got);
  if (!record.ok() || record->holder_identity != config_.identity) return;
  const absl::Time now = clock_->Now();
  LeaseRecord released;
  released.lease_duration_seconds = 1;
  released.acquire_time = now;
  released.renew_time = now;
  released.lease_transitions = record->lease_transitions;
  json lease = *got;
  lease["spec"] = LeaseSpecToJson(released);
  // Best effort: if this fails the successor waits for the lease to expire instead.
  (void)client_->Update(leases_, config_.lease_name, lease);
}

void LeaderElector::Run() {
  auto jittered = [this] {
    return config_.retry_period + config_.retry_period * (1.2 * random_->Uniform01());
  };
  while (true) {
    // Acquire.
    while (true) {
      {
        absl::MutexLock lock(&mu_);
        if (stopping_) return;
      }
      const absl::Time attempt_start = clock_->Now();
      if (TryAcquireOrRenew()) {
        absl::MutexLock lock(&mu_);
        leading_since_renew_ = attempt_start;
        break;
      }
      if (!Pause(jittered())) return;
    }
    if (callbacks_.on_started_leading) callbacks_.on_started_leading();
    // Renew until stopped or the renew deadline passes.
    bool stopped = false;
    while (true) {
      if (!Pause(config_.retry_period)) {
        stopped = true;
        break;
      }
      const absl::Time attempt_start = clock_->Now();
      const bool renewed = TryAcquireOrRenew();
      absl::MutexLock lock(&mu_);
      if (renewed && LeadingLocked(attempt_start)) {
        leading_since_renew_ = attempt_start;
        continue;
      }
      // Someone else holds it now, or the deadline passed: stop acting at once.
      if (!renewed && holder_ != config_.identity && !holder_.empty()) {
        leading_since_renew_ = absl::InfinitePast();
      }
      if (!LeadingLocked(clock_->Now())) {
        leading_since_renew_ = absl::InfinitePast();
        break;
      }
    }
    {
      absl::MutexLock lock(&mu_);
      leading_since_renew_ = absl::InfinitePast();
    }
    if (stopped && config_.release_on_stop) Release();
    if (callbacks_.on_stopped_leading) callbacks_.on_stopped_leading();
    if (stopped || !config_.reacquire_after_loss) return;
  }
}

}  // namespace peregrine::kube
