#include "diagnosis/link_plan.h"

#include <set>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace peregrine {

absl::StatusOr<ValidationRounds> ParseLinkRoundsPlan(absl::string_view text, int ranks) {
  if (text.empty()) return absl::InvalidArgumentError("empty plan");
  ValidationRounds plan;
  for (absl::string_view round : absl::StrSplit(text, ';')) {
    const std::string label = absl::StrCat("r", plan.size());
    const size_t colon = round.find(':');
    if (colon == absl::string_view::npos || round.substr(0, colon) != label) {
      return absl::InvalidArgumentError(
          absl::StrCat("round ", plan.size(), " must start with \"", label, ":\", got \"", round, "\""));
    }
    std::vector<LinkTransfer> transfers;
    std::set<int> busy;  // the ranks already in a transfer of this round
    const absl::string_view body = round.substr(colon + 1);
    if (!body.empty()) {
      for (absl::string_view t : absl::StrSplit(body, ',')) {
        std::pair<absl::string_view, absl::string_view> sd = absl::StrSplit(t, absl::MaxSplits('>', 1));
        LinkTransfer x;
        if (!absl::SimpleAtoi(sd.first, &x.sender) || !absl::SimpleAtoi(sd.second, &x.receiver) || x.sender < 0 ||
            x.receiver < 0 || x.sender >= ranks || x.receiver >= ranks || x.sender == x.receiver) {
          return absl::InvalidArgumentError(absl::StrCat("bad transfer \"", t, "\" in ", label,
                                                         " (expected SENDER>RECEIVER, distinct ranks below ", ranks,
                                                         ")"));
        }
        for (int rank : {x.sender, x.receiver}) {
          if (!busy.insert(rank).second) {
            return absl::InvalidArgumentError(
                absl::StrCat("rank ", rank, " used twice in round ", label, " (transfer \"", t, "\")"));
          }
        }
        transfers.push_back(x);
      }
    }
    plan.push_back(std::move(transfers));
  }
  return plan;
}

std::string FormatLinkRoundsPlan(const ValidationRounds& plan) {
  std::vector<std::string> rounds;
  rounds.reserve(plan.size());
  for (size_t r = 0; r < plan.size(); ++r) {
    std::vector<std::string> ts;
    for (const LinkTransfer& t : plan[r]) ts.push_back(absl::StrCat(t.sender, ">", t.receiver));
    rounds.push_back(absl::StrCat("r", r, ":", absl::StrJoin(ts, ",")));
  }
  return absl::StrJoin(rounds, ";");
}

}  // namespace peregrine
