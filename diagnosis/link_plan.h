// The text form of link-validation rounds, "r0:s>d,s>d;r1:s>d": what the controller sends
// in a p2p_rounds diagnostic, what the agent validates before running anything and what
// peregrine-linkcheck --plan runs. One parser for all of them.
//
// ParseLinkRoundsPlan: round labels must be r0, r1, ... in order; a round may be empty
// ("r2:"); every transfer is SENDER>RECEIVER with distinct ranks in [0, ranks); no rank is
// in two transfers of one round (the transfers of a round run at the same time). Fails
// with kInvalidArgument naming what is wrong (the round, the transfer, the rank).
// FormatLinkRoundsPlan is its inverse.
//
// Pure functions; thread-safe.
#ifndef PEREGRINE_DIAGNOSIS_LINK_PLAN_H_
#define PEREGRINE_DIAGNOSIS_LINK_PLAN_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "diagnosis/link_rounds.h"

namespace peregrine {

absl::StatusOr<ValidationRounds> ParseLinkRoundsPlan(absl::string_view text, int ranks);

std::string FormatLinkRoundsPlan(const ValidationRounds& plan);

}  // namespace peregrine

#endif  // PEREGRINE_DIAGNOSIS_LINK_PLAN_H_
