// A job status with every field of JobStatus set to a value other than its default, for
// the status JSON round trip (tests/controller) and the CRD status schema (tests/deploy):
// a job mid-recovery on two machines (one replaced by a standby), a pool refilling, a
// closed and an open incident with a failed diagnosis stage, an eviction, a rollback in
// the version history, a localized and validated fail-slow, a stop-time diagnosis in its
// replay stage, a hang investigation that evicted and an MFU-drop investigation waiting
// for its next round. Times are kSampleT0 plus whole seconds. Pure values; thread-safe.
#ifndef PEREGRINE_TESTS_TESTING_STATUS_SAMPLES_H_
#define PEREGRINE_TESTS_TESTING_STATUS_SAMPLES_H_

#include <cstdint>
#include <string>

#include "controller/core/job_spec.h"
#include "controller/core/job_state.h"

namespace peregrine::testing {

inline constexpr int64_t kSampleT0 = 1'735'787'045'123'456'000;  // 2025-01-02T03:04:05.123456Z
inline constexpr int64_t kSampleSecond = 1'000'000'000;

// A code version of the sample's training image at `revision`, with a command and env.
CodeVersionSpec SampleCode(const std::string& revision);

JobStatus PopulatedStatus();

}  // namespace peregrine::testing

#endif  // PEREGRINE_TESTS_TESTING_STATUS_SAMPLES_H_
