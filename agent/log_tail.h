// Line assembly and bounded tails of a process's output.
//
// LineAssembler turns the byte chunks read from a pipe into complete lines
// (without the trailing '\n'; a '\r' before it is dropped too). A line longer
// than max_line_bytes is emitted in pieces of that size so a process that never
// prints a newline cannot make the agent grow without bound.
//
// LogTail keeps the last `capacity` lines, oldest first; older lines are dropped.
//
// Thread safety: none; each instance belongs to one thread (the agent's control
// loop). Ownership: plain values, no resources.
#ifndef PEREGRINE_AGENT_LOG_TAIL_H_
#define PEREGRINE_AGENT_LOG_TAIL_H_

#include <cstddef>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

namespace peregrine {

class LineAssembler {
 public:
  explicit LineAssembler(size_t max_line_bytes = 8192);

  // Appends `bytes` and returns the lines completed by them, in order.
  std::vector<std::string> Append(std::string_view bytes);

  // Returns the unterminated rest (if any) as a final line and clears it. Call
  // when the stream ended or the process exited.
  std::vector<std::string> Flush();

 private:
  size_t max_line_bytes_;
  std::string partial_;
};

class LogTail {
 public:
  explicit LogTail(size_t capacity = 50);

  void Add(std::string line);
  // The retained lines, oldest first.
  std::vector<std::string> Lines() const;
  size_t size() const { return lines_.size(); }
  void Clear() { lines_.clear(); }

 private:
  size_t capacity_;
  std::deque<std::string> lines_;
};

}  // namespace peregrine

#endif  // PEREGRINE_AGENT_LOG_TAIL_H_
