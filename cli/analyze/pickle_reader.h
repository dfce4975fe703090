// A reader of Python pickles that holds only data: None, bools, integers, floats,
// strings, bytes, lists, tuples, sets and dicts, as Python's pickle module writes them
// (protocols 1-5; of protocol 0 all but its quoted-text strings) and as libtorch's Pickler
// writes them (protocol 2, with the torch.jit._pickle list builders and type tags).
//
// It never executes anything: a pickle that names a class or function (GLOBAL,
// STACK_GLOBAL) may only call the few pure builders listed in the .cc (the libtorch list
// builders, restore_type_tag and an empty collections.OrderedDict), which it evaluates
// itself; any other call, object construction (REDUCE, BUILD, NEWOBJ, INST, OBJ),
// persistent id, extension code or out-of-band buffer is refused. Limits on nesting,
// values, memo entries and string sizes bound memory and time on hostile input.
//
// Errors are kInvalidArgument "offset N: opcode 0xXX (NAME): reason" (N the byte offset of
// the opcode). Pure functions; thread-compatible.
#ifndef PEREGRINE_CLI_ANALYZE_PICKLE_READER_H_
#define PEREGRINE_CLI_ANALYZE_PICKLE_READER_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace peregrine {

struct PickleEntry;

// One value of the pickled data, a plain tree (a value shared in the pickle through its
// memo appears once per reference).
struct PickleValue {
  enum class Kind { kNone, kBool, kInt, kFloat, kString, kBytes, kList, kTuple, kSet, kDict };

  Kind kind = Kind::kNone;
  bool bool_value = false;
  int64_t int_value = 0;
  double float_value = 0;
  std::string string_value;                                // kString (UTF-8) and kBytes
  std::vector<PickleValue> items;                          // kList, kTuple, kSet
  std::vector<PickleEntry> entries;                         // kDict, in insertion order

  bool IsString() const { return kind == Kind::kString; }
  bool IsInt() const { return kind == Kind::kInt; }
  // The value of the dict entry whose key is the string `key`; nullptr when this is not a
  // dict or has no such key.
  const PickleValue* Find(absl::string_view key) const;
};

// One key/value pair of a dict.
struct PickleEntry {
  PickleValue key;
  PickleValue value;
};

// "None", "bool", "int", "float", "str", "bytes", "list", "tuple", "set", "dict".
absl::string_view PickleKindName(PickleValue::Kind kind);

struct PickleLimits {
  int max_depth = 100;               // containers inside containers
  size_t max_values = 1u << 22;      // values in the result tree, shared ones counted each time
  size_t max_memo = 1u << 20;        // memo entries
  size_t max_string_bytes = 1u << 28;  // one string or bytes object
};

// Reads the pickle at the start of `bytes` up to its STOP opcode; bytes after it are
// ignored, as Python's pickle.loads ignores them.
// kInvalidArgument on anything else, naming the offset, opcode and reason.
absl::StatusOr<PickleValue> ReadPickle(absl::string_view bytes, const PickleLimits& limits = {});

}  // namespace peregrine

#endif  // PEREGRINE_CLI_ANALYZE_PICKLE_READER_H_
