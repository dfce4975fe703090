// Fuzzes the kernel log parsers (agent/inspection/kernel_log.h): /dev/kmsg records and
// dmesg lines, then the Xid and block I/O error matchers on their messages (and on the
// raw text, as a message). Every line of the input is tried.
#include <cstddef>
#include <cstdint>

#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "agent/inspection/kernel_log.h"

namespace {

void Message(absl::string_view message) {
  auto xid = peregrine::ParseXid(message);
  if (xid.ok() && xid->has_value()) {
    (void)peregrine::ClassifyXidEvent(**xid);
    (void)peregrine::XidDescription((*xid)->xid);
  }
  (void)peregrine::ParseBlockIoError(message);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    auto kmsg = peregrine::ParseKmsgRecord(line);
    if (kmsg.ok()) Message(kmsg->message);
    auto dmesg = peregrine::ParseDmesgLine(line);
    if (dmesg.ok()) Message(dmesg->message);
    Message(line);
  }
  return 0;
}
