#include "agent/log_tail.h"

#include <utility>

namespace peregrine {

LineAssembler::LineAssembler(size_t max_line_bytes)
    : max_line_bytes_(max_line_bytes == 0 ? 1 : max_line_bytes) {}

std::vector<std::string> LineAssembler::Append(std::string_view bytes) {
  std::vector<std::string> lines;
  for (char c : bytes) {
    if (c == '\n') {
      if (!partial_.empty() && partial_.back() == '\r') partial_.pop_back();
      lines.push_back(std::move(partial_));
      partial_.clear();
      continue;
    }
    partial_.push_back(c);
    if (partial_.size() >= max_line_bytes_) {
      lines.push_back(std::move(partial_));
      partial_.clear();
    }
  }
  return lines;
}

std::vector<std::string> LineAssembler::Flush() {
  std::vector<std::string> lines;
  if (!partial_.empty()) {
    if (partial_.back() == '\r') partial_.pop_back();
    lines.push_back(std::move(partial_));
    partial_.clear();
  }
  return lines;
}

LogTail::LogTail(size_t capacity) : capacity_(capacity) {}

void LogTail::Add(std::string line) {
  if (capacity_ == 0) return;
  if (lines_.size() == capacity_) lines_.pop_front();
  lines_.push_back(std::move(line));
}

std::vector<std::string> LogTail::Lines() const {
  return std::vector<std::string>(lines_.begin(), lines_.end());
}

}  // namespace peregrine
