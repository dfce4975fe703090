// ReadPickle (cli/analyze/pickle_reader.h) on pickles written by real Python
// (/usr/bin/python3's pickle module, protocols 2 to 5, run at test time), on the byte forms
// libtorch writes, and on truncated and hostile bytes.
#include "cli/analyze/pickle_reader.h"

#include <chrono>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tests/testing/child_process.h"
#include "tests/testing/files.h"
#include "tests/testing/temp_dir.h"

namespace peregrine {
namespace {

using namespace std::string_literals;
using Kind = PickleValue::Kind;
using testing::ChildProcess;
using testing::TempDir;

// Runs `code` with /usr/bin/python3 (argv[1] = an output path) and returns what it wrote there.
std::string Python(const std::string& code) {
  TempDir dir("pickle-test");
  const std::string out = dir.Path("out.pickle");
  const std::string err = dir.Path("stderr");
  ChildProcess::Options options;
  options.argv = {"/usr/bin/python3", "-c", code, out};
  options.stderr_path = err;
  auto child = ChildProcess::Start(options);
  REQUIRE(child != nullptr);
  const std::optional<int> status = child->Wait(std::chrono::seconds(120));
  INFO(testing::ReadFileIfExists(err));
  REQUIRE(testing::ExitedWith(status, 0));
  return testing::ReadFile(out);
}

constexpr char kSample[] = R"py(
import pickle, sys
shared = [7, 8]
data = {
    "ints": [0, 1, 255, 256, 65535, 65536, -1, -2**31, 2**31 - 1, 2**31, 2**63 - 1, -2**63],
    "float": 1.5, "neg": -2.25e-300, "none": None, "yes": True, "no": False,
    "text": "h\u00e9llo \u2603", "long": "x" * 300, "bytes": b"\x00\x01\xff",
    "tuple0": (), "tuple1": (1,), "tuple2": (1, "a"), "tuple3": (1, 2, 3), "tuple5": (1, 2, 3, 4, 5),
    "set": {3}, "frozen": frozenset([4]), "nested": {"a": [{"b": ("c",)}]},
    "shared1": shared, "shared2": shared, 7: "int key",
}
open(sys.argv[1], "wb").write(pickle.dumps(data, protocol=PROTO))
)py";

void CheckSample(const PickleValue& v) {
  REQUIRE(v.kind == Kind::kDict);
  const PickleValue* ints = v.Find("ints");
  REQUIRE(ints != nullptr);
  REQUIRE(ints->kind == Kind::kList);
  const std::vector<int64_t> want = {0, 1, 255, 256, 65535, 65536, -1, INT32_MIN, INT32_MAX, 2147483648LL,
                                     INT64_MAX, INT64_MIN};
  REQUIRE(ints->items.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO(i);
    CHECK(ints->items[i].kind == Kind::kInt);
    CHECK(ints->items[i].int_value == want[i]);
  }
  CHECK(v.Find("float")->float_value == 1.5);
  CHECK(v.Find("neg")->float_value == -2.25e-300);
  CHECK(v.Find("none")->kind == Kind::kNone);
  CHECK(v.Find("yes")->kind == Kind::kBool);
  CHECK(v.Find("yes")->bool_value);
  CHECK_FALSE(v.Find("no")->bool_value);
  CHECK(v.Find("text")->string_value == "h\xc3\xa9llo \xe2\x98\x83");
  CHECK(v.Find("long")->string_value == std::string(300, 'x'));
  CHECK(v.Find("bytes")->kind == Kind::kBytes);
  CHECK(v.Find("bytes")->string_value == std::string("\x00\x01\xff", 3));
  CHECK(v.Find("tuple0")->kind == Kind::kTuple);
  CHECK(v.Find("tuple0")->items.empty());
  CHECK(v.Find("tuple1")->items.size() == 1);
  CHECK(v.Find("tuple2")->items[1].string_value == "a");
  CHECK(v.Find("tuple3")->items[2].int_value == 3);
  CHECK(v.Find("tuple5")->items.size() == 5);
  CHECK(v.Find("set")->kind == Kind::kSet);
  CHECK(v.Find("set")->items[0].int_value == 3);
  CHECK(v.Find("frozen")->kind == Kind::kSet);
  CHECK(v.Find("frozen")->items[0].int_value == 4);
  CHECK(v.Find("nested")->Find("a")->items[0].Find("b")->items[0].string_value == "c");
  CHECK(v.Find("shared1")->items.size() == 2);
  CHECK(v.Find("shared2")->items[1].int_value == 8);  // a memo reference (BINGET) to the same list
  bool int_key = false;
  for (const auto& [k, val] : v.entries) int_key |= k.kind == Kind::kInt && k.int_value == 7 && val.string_value == "int key";
  CHECK(int_key);
}

TEST_CASE("pickle reader: every protocol 2-5 pickle of real Python reads back the same data", "[unit]") {
  for (int proto : {2, 3, 4, 5}) {
    INFO("protocol " << proto);
    std::string code = kSample;
    code.replace(code.find("PROTO"), 5, std::to_string(proto));
    const std::string bytes = Python(code);
    absl::StatusOr<PickleValue> v = ReadPickle(bytes);
    INFO(v.status());
    REQUIRE(v.ok());
    CheckSample(*v);
  }
}

TEST_CASE("pickle reader: every truncation of a real pickle is an error naming an offset", "[unit]") {
  std::string code = kSample;
  code.replace(code.find("PROTO"), 5, "4");
  const std::string bytes = Python(code);
  for (size_t n = 0; n < bytes.size(); ++n) {
    absl::StatusOr<PickleValue> v = ReadPickle(bytes.substr(0, n));
    INFO(n);
    REQUIRE_FALSE(v.ok());
    CHECK(absl::StartsWith(v.status().message(), "offset "));
  }
  // Bytes after STOP are ignored, as pickle.loads ignores them.
  CHECK(ReadPickle(bytes + "trailing").ok());
}

TEST_CASE("pickle reader: libtorch's forms (type tags, list builders, 8-byte LONG1, BINUNICODE8) read as data", "[unit]") {
  // restore_type_tag(EMPTY_DICT MARK 'k' build_intlist([1, 2**40]) SETITEMS, "Dict[str, List[int]]")
  std::string b = "\x80\x02"s;
  b += "ctorch.jit._pickle\nrestore_type_tag\nq\x00"s;
  b += "}(X\x01\x00\x00\x00kq\x01"s;
  b += "ctorch.jit._pickle\nbuild_intlist\nq\x02(](K\x01\x8a\x08"s;
  b += "\x00\x00\x00\x00\x00\x01\x00\x00"s;
  b += "etR"s;
  b += "uX\x14\x00\x00\x00"s + "Dict[str, List[int]]q\x03\x86R."s;
  absl::StatusOr<PickleValue> v = ReadPickle(b);
  INFO(v.status());
  REQUIRE(v.ok());
  REQUIRE(v->kind == Kind::kDict);
  const PickleValue* k = v->Find("k");
  REQUIRE(k != nullptr);
  REQUIRE(k->items.size() == 2);
  CHECK(k->items[1].int_value == (int64_t{1} << 40));

  const std::string big = "\x80\x04\x8d\x03\x00\x00\x00\x00\x00\x00\x00"s + "abc."s;
  absl::StatusOr<PickleValue> s = ReadPickle(big);
  REQUIRE(s.ok());
  CHECK(s->string_value == "abc");
}

TEST_CASE("pickle reader: pickles that call code or build objects are refused, naming what they call", "[unit]") {
  // The classic: os.system("true") through REDUCE.
  absl::StatusOr<PickleValue> v = ReadPickle("\x80\x02"s + "cos\nsystem\nX\x04\x00\x00\x00true\x85R."s);
  REQUIRE_FALSE(v.ok());
  CHECK(absl::StrContains(v.status().message(), "refusing to call 'os.system'"));
  CHECK(absl::StrContains(v.status().message(), "opcode 0x52 (REDUCE)"));

  // A real object from real Python: datetime.date through REDUCE (protocol 2) and a class
  // instance through NEWOBJ/BUILD (protocol 4, STACK_GLOBAL).
  v = ReadPickle(Python("import pickle, sys, datetime\n"
                        "open(sys.argv[1], 'wb').write(pickle.dumps(datetime.date(2024, 1, 2), protocol=2))"));
  REQUIRE_FALSE(v.ok());
  CHECK(absl::StrContains(v.status().message(), "refusing to call 'datetime.date'"));
  v = ReadPickle(Python("import pickle, sys, argparse\n"
                        "open(sys.argv[1], 'wb').write(pickle.dumps(argparse.Namespace(a=1), protocol=4))"));
  REQUIRE_FALSE(v.ok());
  CHECK(absl::StrContains(v.status().message(), "NEWOBJ"));
  CHECK(absl::StrContains(v.status().message(), "refusing to construct an object"));

  // A persistent id (how torch.save refers to tensor storage).
  v = ReadPickle("\x80\x02X\x01\x00\x00\x00"s + "aQ."s);
  REQUIRE_FALSE(v.ok());
  CHECK(absl::StrContains(v.status().message(), "BINPERSID"));
  // A global left in the data.
  v = ReadPickle("\x80\x02"s + "cos\nsystem\n."s);
  REQUIRE_FALSE(v.ok());
  CHECK(absl::StrContains(v.status().message(), "reference to 'os.system'"));
}

TEST_CASE("pickle reader: hostile structure hits the limits with a clear error", "[unit]") {
  // A list that contains itself (real Python writes it with a memo reference).
  absl::StatusOr<PickleValue> v =
      ReadPickle(Python("import pickle, sys\nl = []\nl.append(l)\nopen(sys.argv[1], 'wb').write(pickle.dumps(l, 2))"));
  REQUIRE_FALSE(v.ok());
  CHECK(absl::StrContains(v.status().message(), "contains itself"));

  // Exponential sharing ("billion laughs"): each list holds the previous one twice.
  std::string b = "\x80\x02]q\x00"s + "0"s;
  for (int i = 1; i < 40; ++i) {
    const std::string prev(1, static_cast<char>(i - 1));
    b += "](h"s + prev + "h"s + prev + "eq"s + std::string(1, static_cast<char>(i)) + "0"s;
  }
  b += "h\x27."s;
  v = ReadPickle(b);
  REQUIRE_FALSE(v.ok());
  CHECK(absl::StrContains(v.status().message(), "values once shared ones are expanded"));

  // Depth.
  std::string deep = "\x80\x02";
  for (int i = 0; i < 150; ++i) deep += "]";
  for (int i = 0; i < 149; ++i) deep += "a";
  deep += ".";
  v = ReadPickle(deep);
  REQUIRE_FALSE(v.ok());
  CHECK(absl::StrContains(v.status().message(), "nested deeper than 100"));

  // Memo, marks, sizes, stack.
  v = ReadPickle("\x80\x02h\x05."s);
  REQUIRE_FALSE(v.ok());
  CHECK(v.status().message() == "offset 2: opcode 0x68 (BINGET): memo index 5 was never stored");
  v = ReadPickle("\x80\x02X\xff\xff\xff\xff"s);
  REQUIRE_FALSE(v.ok());
  CHECK(absl::StrContains(v.status().message(), "exceeds the limit"));
  v = ReadPickle("\x80\x02K\x01K\x02."s);
  REQUIRE_FALSE(v.ok());
  CHECK(absl::StrContains(v.status().message(), "values left on the stack"));
  v = ReadPickle("\x80\x02"s + "e."s);
  REQUIRE_FALSE(v.ok());
  CHECK(absl::StrContains(v.status().message(), "no MARK"));
  v = ReadPickle("\x80\x02\x8a\x09"s + std::string(9, '\x01') + "."s);
  REQUIRE_FALSE(v.ok());
  CHECK(absl::StrContains(v.status().message(), "does not fit in 64 bits"));
  v = ReadPickle("\x80\x06N.");
  REQUIRE_FALSE(v.ok());
  CHECK(absl::StrContains(v.status().message(), "protocol 6"));
  v = ReadPickle("hello");
  REQUIRE_FALSE(v.ok());
  CHECK(absl::StrContains(v.status().message(), "opcode 0x68 (BINGET)"));
  CHECK_FALSE(ReadPickle("").ok());

  PickleLimits small;
  small.max_memo = 2;
  v = ReadPickle("\x80\x04K\x01\x94K\x02\x94K\x03\x94\x87."s, small);
  REQUIRE_FALSE(v.ok());
  CHECK(absl::StrContains(v.status().message(), "more than 2 memo entries"));
}

}  // namespace
}  // namespace peregrine
