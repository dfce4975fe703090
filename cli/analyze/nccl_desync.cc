#include "cli/analyze/nccl_desync.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

// How the calls are aligned. NCCL's opCount counts one communicator's operations and
// PyTorch's "Seq" one process group's, so within a class that holds one communicator per
// stream the k-th operation has the same number on every member: aligning by it survives
// logs that start or end at different points (an excerpt, a rotated file). It is used only
// when it increases strictly in every stream of the class; calls grouped under one opCount
// (ncclGroupStart/End) or several communicators of one size in one stream fall back to the
// position in the class's subsequence, which assumes the logs start together.
//
// Communicator addresses ("comm 0x55..") differ between processes, so the communicator
// takes part in the signature only when the input names it globally (commId, a process
// group's name); otherwise the class is the communicator size, which keeps the TP and DP
// collectives of a 3D-parallel job apart when their sizes differ.

namespace peregrine {
namespace {

constexpr int64_t kUnknown = -1;

struct Member {
  const NcclCallStream* stream = nullptr;
  std::vector<size_t> calls;  // indices into stream->calls, in stream order
};

std::string CallText(const NcclCallRecord& r, const NcclCallDetail* d, bool global_comm) {
  std::string s = absl::StrCat(NcclOpName(r.op), " count=", r.count, " dtype=", r.datatype);
  if (d != nullptr && d->nranks > 0) absl::StrAppend(&s, " nranks=", d->nranks);
  if (global_comm) absl::StrAppend(&s, absl::StrFormat(" comm=0x%x", r.comm_id));
  return s;
}

const NcclCallDetail* DetailOf(const NcclCallStream& s, size_t i) {
  return i < s.details.size() ? &s.details[i] : nullptr;
}

NcclDesyncClass Compare(const std::string& group, const std::vector<Member>& members, bool global_comm) {
  NcclDesyncClass c;
  c.group = group;
  for (const Member& m : members) c.streams.push_back(m.stream->label);
  // opCount alignment when every call has one, strictly increasing per stream.
  bool by_op_count = true;
  for (const Member& m : members) {
    int64_t previous = kUnknown;
    for (size_t i : m.calls) {
      const NcclCallDetail* d = DetailOf(*m.stream, i);
      if (d == nullptr || d->op_count < 0 || d->op_count <= previous) {
        by_op_count = false;
        break;
      }
      previous = d->op_count;
    }
    if (!by_op_count) break;
  }
  c.aligned_by = by_op_count ? "opCount" : "call index";
  // position -> (member, call index)
  std::map<int64_t, std::vector<std::pair<size_t, size_t>>> at;
  std::vector<int64_t> last(members.size(), kUnknown);
  for (size_t m = 0; m < members.size(); ++m) {
    for (size_t k = 0; k < members[m].calls.size(); ++k) {
      const size_t i = members[m].calls[k];
      const int64_t position = by_op_count ? DetailOf(*members[m].stream, i)->op_count : static_cast<int64_t>(k);
      at[position].emplace_back(m, i);
      last[m] = position;
    }
  }
  for (const auto& [position, calls] : at) {
    if (calls.size() < 2) continue;
    ++c.compared_calls;
    if (c.desync) continue;
    std::map<std::string, std::vector<size_t>> by_call;
    for (const auto& [m, i] : calls) {
      const NcclCallStream& s = *members[m].stream;
      by_call[CallText(s.calls[i], DetailOf(s, i), global_comm)].push_back(m);
    }
    if (by_call.size() < 2) continue;
    c.desync = true;
    c.position = position;
    for (const auto& [text, ms] : by_call) {
      NcclDesyncSide side;
      side.call = text;
      for (size_t m : ms) {
        side.streams.push_back(members[m].stream->label);
        if (members[m].stream->rank >= 0) side.ranks.push_back(members[m].stream->rank);
      }
      c.sides.push_back(std::move(side));
    }
    std::stable_sort(c.sides.begin(), c.sides.end(), [](const NcclDesyncSide& a, const NcclDesyncSide& b) {
      return a.streams.size() > b.streams.size();
    });
  }
  const int64_t furthest = *std::max_element(last.begin(), last.end());
  for (size_t m = 0; m < members.size(); ++m) {
    if (last[m] < furthest) {
      c.behind.push_back(NcclBehindStream{members[m].stream->label, members[m].stream->rank, last[m], furthest});
    }
  }
  return c;
}

}  // namespace

NcclDesyncReport FindNcclDesync(const std::vector<NcclCallStream>& streams) {
  NcclDesyncReport report;
  if (streams.size() < 2) return report;
  const bool global_comm = std::all_of(streams.begin(), streams.end(),
                                       [](const NcclCallStream& s) { return s.global_comm_ids; });
  // class key -> members; the key is the communicator id (global ids), else its size.
  std::map<uint64_t, std::vector<Member>> classes;
  for (const NcclCallStream& s : streams) {
    std::map<uint64_t, Member> mine;
    for (size_t i = 0; i < s.calls.size(); ++i) {
      const NcclCallDetail* d = DetailOf(s, i);
      const uint64_t key = global_comm ? s.calls[i].comm_id : static_cast<uint64_t>(d != nullptr ? d->nranks : 0);
      Member& m = mine[key];
      m.stream = &s;
      m.calls.push_back(i);
    }
    for (auto& [key, m] : mine) classes[key].push_back(std::move(m));
  }
  for (const auto& [key, members] : classes) {
    if (members.size() < 2) continue;
    std::string group;
    if (global_comm) {
      group = absl::StrFormat("communicator 0x%x", key);
    } else if (key > 0) {
      group = absl::StrCat("communicators of ", key, " ranks");
    } else {
      group = "all streams";
    }
    report.classes.push_back(Compare(group, members, global_comm));
    report.any_desync = report.any_desync || report.classes.back().desync;
  }
  std::stable_sort(report.classes.begin(), report.classes.end(),
                   [](const NcclDesyncClass& a, const NcclDesyncClass& b) { return a.streams.size() > b.streams.size(); });
  return report;
}

}  // namespace peregrine
