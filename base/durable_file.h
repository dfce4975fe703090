// WriteFileDurably: replaces a file so that a crash (SIGKILL, power loss) at any moment
// leaves either the old content or the new one, never a torn or empty file, and the new
// content survives once the call returned OK: write a temporary file next to `path`,
// fsync it, rename it over `path`, fsync the directory (the rename itself is durable only
// then). Used for the controller's state files (local mode's job status, pods, token).
//
// Errors: kInternal naming the step (open, write, fsync, rename) and the path, with the
// errno text; the temporary file is removed on every error. Thread-safe for distinct
// paths; concurrent writers of one path need their own serialisation (the last rename
// wins, each sees a whole file).
#ifndef PEREGRINE_BASE_DURABLE_FILE_H_
#define PEREGRINE_BASE_DURABLE_FILE_H_

#include <sys/types.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace peregrine {

// Replaces `path` with `content` (file mode `mode`, before the umask) durably.
absl::Status WriteFileDurably(const std::string& path, absl::string_view content, mode_t mode = 0644);

}  // namespace peregrine

#endif  // PEREGRINE_BASE_DURABLE_FILE_H_
