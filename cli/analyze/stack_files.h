// Per-rank stack dumps from a directory, for `peregrinectl analyze stacks`.
//
// Every regular file in the directory whose name does not start with '.' is one capture of
// one rank, as printed by `py-spy dump`, `gdb -batch -ex 'thread apply all bt'` or
// `eu-stack -p PID` (the tool is recognised from the text; see diagnosis/stack_parse.h).
// The rank of a file, first rule that applies:
//   1. a line "rank: N" (or "rank=N", any case) among its first 5 lines (the line is
//      removed before parsing);
//   2. "rank" followed by an optional '-', '_' or '.' and digits in the file name:
//      rank-3.txt, rank_3.log, gdb_rank3.txt, rank.3.pyspy;
//   3. the last run of digits in the file name: stack.3.txt, 3.txt, dump-07.log.
// A file matching none is an error. Several files for one rank are merged (e.g. a py-spy
// dump of the trainer and a gdb dump of a helper process).
//
// Garbage in: a line the tool's parser rejects (a truncated last frame, a line of another
// tool's chatter, a corrupted byte run) is skipped and counted, and the rest of the file is
// parsed, as long as the skipped lines are at most a quarter of the file's non-blank lines
// and at least one frame remains; otherwise the file fails with its first bad line. In a
// directory, a file that fails is skipped with its error as a warning as long as another
// file parses; when none does, the first error is returned.
//
// LoadStackDirectory does the I/O; ParseRankStackText and RankFromFileName are pure.
// Errors are kInvalidArgument (kNotFound for a missing directory) and name the file and,
// where it applies, the line. Thread-compatible.
#ifndef PEREGRINE_CLI_ANALYZE_STACK_FILES_H_
#define PEREGRINE_CLI_ANALYZE_STACK_FILES_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "diagnosis/stack_parse.h"

namespace peregrine {

// One parsed file.
struct RankStackFile {
  std::string path;
  int rank = 0;
  std::string rank_rule;  // "header line", "file name (rank-N)", "file name (last number)"
  StackTool tool = StackTool::kPySpy;
  std::vector<ProcessStack> processes;
  int skipped_lines = 0;              // lines the parser rejected and that were skipped
  std::vector<std::string> warnings;  // "PATH:LINE: reason", the first few skipped lines
};

// The parsed files of a directory and what was left out.
struct StackDirectory {
  std::vector<RankStackFile> files;  // ordered by rank then path
  int skipped_files = 0;
  int skipped_lines = 0;              // over the files kept
  std::vector<std::string> warnings;  // skipped files ("PATH: error") and lines, bounded
};

// The tool that printed `text`, or kInvalidArgument naming `source` when none fits.
absl::StatusOr<StackTool> DetectStackTool(absl::string_view text, absl::string_view source);

// Rules 2 and 3 above applied to a base name; nullopt when neither applies.
std::optional<int> RankFromFileName(absl::string_view file_name);

// Parses one file's text (rule 1, then 2-3 on `file_name`, tool detection, parsing).
absl::StatusOr<RankStackFile> ParseRankStackText(absl::string_view text, absl::string_view path);

// Reads and parses every file of `dir`. Fails when the directory holds no file, or no
// file parses (with the first file's error).
absl::StatusOr<StackDirectory> LoadStackDirectory(const std::string& dir);

}  // namespace peregrine

#endif  // PEREGRINE_CLI_ANALYZE_STACK_FILES_H_
