// RankRanges: a sorted list of ranks (or machine indexes) as compact text for the analyses'
// reports: {0,1,2,3,5,7,8} -> "0-3,5,7-8". Pure; thread-safe.
#ifndef PEREGRINE_CLI_ANALYZE_RANK_RANGES_H_
#define PEREGRINE_CLI_ANALYZE_RANK_RANGES_H_

#include <string>
#include <vector>

namespace peregrine {

// Runs of consecutive values become "a-b"; "" for an empty list. `sorted` must ascend.
std::string RankRanges(const std::vector<int>& sorted);

}  // namespace peregrine

#endif  // PEREGRINE_CLI_ANALYZE_RANK_RANGES_H_
