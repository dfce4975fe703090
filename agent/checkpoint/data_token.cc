#include "agent/checkpoint/data_token.h"

#include <utility>

#include "base/secret_token.h"

namespace peregrine::checkpoint {

void DataToken::Set(std::string token) {
  absl::MutexLock lock(&mu_);
  token_ = std::move(token);
}

std::string DataToken::Get() const {
  absl::MutexLock lock(&mu_);
  return token_;
}

// An agent that has not registered yet has no token: every call is refused, whatever it
// carries (an empty expected token must never match an absent one).
absl::Status DataToken::Check(absl::string_view presented) const {
  const std::string expected = Get();
  if (expected.empty()) {
    return absl::UnauthenticatedError("this agent has no data-channel token yet (not registered with the controller)");
  }
  if (presented.empty()) return absl::UnauthenticatedError("no data-channel token presented");
  if (!SecretTokensEqual(presented, expected)) return absl::UnauthenticatedError("wrong data-channel token");
  return absl::OkStatus();
}

}  // namespace peregrine::checkpoint
