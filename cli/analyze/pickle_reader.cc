#include "cli/analyze/pickle_reader.h"

#include <cstring>
#include <optional>
#include <unordered_map>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

// The pickle virtual machine (Python's Lib/pickletools.py documents every opcode): a
// stack of values, a stack of MARK positions and a memo (index -> value). Values live in
// an arena of nodes addressed by index, so that the memo, the stack and the containers can
// share one value (a list memoized before its APPENDS must be the list that the APPENDS
// fills) without reference counting, and so that a container made to contain itself leaks
// nothing: it only fails the depth limit when the arena is turned into the result tree at
// STOP. Each opcode that creates a value adds one node; the arena, the stack and the memo
// are bounded by PickleLimits.
//
// Calls: GLOBAL / STACK_GLOBAL push a reference to a name, and REDUCE applies it to an
// argument tuple. Only these pure builders are evaluated, by this code:
//   torch.jit._pickle.restore_type_tag(value, type_string)     -> value
//   torch.jit._pickle.build_intlist / build_doublelist / build_boollist(list) -> list
//   collections.OrderedDict()                                    -> empty dict
//   builtins.set / frozenset (list) (also __builtin__.)          -> set
//   _codecs.encode(str, "latin1")                                 -> bytes (protocol <3 bytes)
// Anything else is refused; so are BUILD, NEWOBJ, NEWOBJ_EX, INST, OBJ, PERSID, BINPERSID,
// EXT1/2/4 and the out-of-band buffer opcodes.

namespace peregrine {
namespace {

using Kind = PickleValue::Kind;

struct Node {
  Kind kind = Kind::kNone;
  bool is_global = false;  // a GLOBAL reference: string_value is "module.name"
  bool bool_value = false;
  int64_t int_value = 0;
  double float_value = 0;
  std::string string_value;
  std::vector<uint32_t> items;
  std::vector<std::pair<uint32_t, uint32_t>> entries;
};

struct OpCode {
  uint8_t code;
  const char* name;
};
constexpr OpCode kOpCodes[] = {
    {'(', "MARK"}, {'.', "STOP"}, {'0', "POP"}, {'1', "POP_MARK"}, {'2', "DUP"}, {'F', "FLOAT"},
    {'I', "INT"}, {'J', "BININT"}, {'K', "BININT1"}, {'L', "LONG"}, {'M', "BININT2"}, {'N', "NONE"},
    {'P', "PERSID"}, {'Q', "BINPERSID"}, {'R', "REDUCE"}, {'S', "STRING"}, {'T', "BINSTRING"},
    {'U', "SHORT_BINSTRING"}, {'V', "UNICODE"}, {'X', "BINUNICODE"}, {'a', "APPEND"}, {'b', "BUILD"},
    {'c', "GLOBAL"}, {'d', "DICT"}, {'}', "EMPTY_DICT"}, {'e', "APPENDS"}, {'g', "GET"}, {'h', "BINGET"},
    {'i', "INST"}, {'j', "LONG_BINGET"}, {'l', "LIST"}, {']', "EMPTY_LIST"}, {'o', "OBJ"}, {'p', "PUT"},
    {'q', "BINPUT"}, {'r', "LONG_BINPUT"}, {'s', "SETITEM"}, {'t', "TUPLE"}, {')', "EMPTY_TUPLE"},
    {'u', "SETITEMS"}, {'G', "BINFLOAT"}, {'B', "BINBYTES"}, {'C', "SHORT_BINBYTES"}, {0x80, "PROTO"},
    {0x81, "NEWOBJ"}, {0x82, "EXT1"}, {0x83, "EXT2"}, {0x84, "EXT4"}, {0x85, "TUPLE1"}, {0x86, "TUPLE2"},
    {0x87, "TUPLE3"}, {0x88, "NEWTRUE"}, {0x89, "NEWFALSE"}, {0x8a, "LONG1"}, {0x8b, "LONG4"},
    {0x8c, "SHORT_BINUNICODE"}, {0x8d, "BINUNICODE8"}, {0x8e, "BINBYTES8"}, {0x8f, "EMPTY_SET"},
    {0x90, "ADDITEMS"}, {0x91, "FROZENSET"}, {0x92, "NEWOBJ_EX"}, {0x93, "STACK_GLOBAL"}, {0x94, "MEMOIZE"},
    {0x95, "FRAME"}, {0x96, "BYTEARRAY8"}, {0x97, "NEXT_BUFFER"}, {0x98, "READONLY_BUFFER"},
};

const char* OpName(uint8_t op) {
  for (const OpCode& c : kOpCodes) {
    if (c.code == op) return c.name;
  }
  return "unknown opcode";
}

// Latin-1 bytes of UTF-8 text whose code points are all below 256, else nullopt.
std::optional<std::string> Latin1FromUtf8(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
    } else if ((c == 0xc2 || c == 0xc3) && i + 1 < s.size()) {
      const auto d = static_cast<unsigned char>(s[++i]);
      if ((d & 0xc0) != 0x80) return std::nullopt;
      out.push_back(static_cast<char>(((c & 0x03) << 6) | (d & 0x3f)));
    } else {
      return std::nullopt;
    }
  }
  return out;
}

class Machine {
 public:
  Machine(absl::string_view in, const PickleLimits& limits) : in_(in), limits_(limits) {}

  absl::StatusOr<PickleValue> Run() {
    while (true) {
      if (pos_ >= in_.size()) {
        op_pos_ = in_.size();
        return absl::InvalidArgumentError(absl::StrFormat(
            "offset %d: truncated: the pickle ends without its STOP opcode", in_.size()));
      }
      op_pos_ = pos_;
      op_ = static_cast<uint8_t>(in_[pos_++]);
      if (op_ == '.') return Finish();
      if (absl::Status s = Step(); !s.ok()) return s;
    }
  }

 private:
  absl::Status Fail(absl::string_view reason) const {
    return absl::InvalidArgumentError(
        absl::StrFormat("offset %d: opcode 0x%02x (%s): %s", op_pos_, op_, OpName(op_), reason));
  }

  // The next `n` bytes, or a truncation error.
  absl::Status Take(uint64_t n, absl::string_view* out) {
    if (n > in_.size() - pos_) {
      return Fail(absl::StrCat("truncated: needs ", n, " byte(s), ", in_.size() - pos_, " left"));
    }
    *out = in_.substr(pos_, n);
    pos_ += n;
    return absl::OkStatus();
  }
  template <typename T>
  absl::Status TakeLittle(T* v) {  // unsigned little-endian
    absl::string_view b;
    if (absl::Status s = Take(sizeof(T), &b); !s.ok()) return s;
    uint64_t x = 0;
    for (size_t i = 0; i < sizeof(T); ++i) x |= static_cast<uint64_t>(static_cast<uint8_t>(b[i])) << (8 * i);
    *v = static_cast<T>(x);
    return absl::OkStatus();
  }
  absl::Status TakeLine(absl::string_view* line) {
    const size_t nl = in_.find('\n', pos_);
    if (nl == absl::string_view::npos) return Fail("truncated: no end of line after the argument");
    *line = in_.substr(pos_, nl - pos_);
    pos_ = nl + 1;
    return absl::OkStatus();
  }

  absl::StatusOr<uint32_t> NewNode(Node node) {
    if (nodes_.size() >= limits_.max_values) {
      return Fail(absl::StrCat("more than ", limits_.max_values, " values"));
    }
    nodes_.push_back(std::move(node));
    return static_cast<uint32_t>(nodes_.size() - 1);
  }
  absl::Status Push(uint32_t id) {
    if (stack_.size() >= limits_.max_values) return Fail("stack deeper than the value limit");
    stack_.push_back(id);
    return absl::OkStatus();
  }
  absl::Status PushNew(Node node) {
    absl::StatusOr<uint32_t> id = NewNode(std::move(node));
    if (!id.ok()) return id.status();
    return Push(*id);
  }
  absl::Status PushString(Kind kind, absl::string_view bytes) {
    Node n;
    n.kind = kind;
    n.string_value = std::string(bytes);
    return PushNew(std::move(n));
  }
  absl::Status PushInt(int64_t v) {
    Node n;
    n.kind = Kind::kInt;
    n.int_value = v;
    return PushNew(std::move(n));
  }
  absl::Status Pop(uint32_t* id) {
    const size_t floor = marks_.empty() ? 0 : marks_.back();
    if (stack_.size() <= floor) return Fail("stack underflow (nothing above the mark)");
    *id = stack_.back();
    stack_.pop_back();
    return absl::OkStatus();
  }
  // The values above the last MARK, removing them and the mark.
  absl::Status PopMark(std::vector<uint32_t>* items) {
    if (marks_.empty()) return Fail("no MARK on the stack");
    const size_t m = marks_.back();
    marks_.pop_back();
    items->assign(stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
    stack_.resize(m);
    return absl::OkStatus();
  }
  absl::Status Top(Kind want, uint32_t* id) {
    const size_t floor = marks_.empty() ? 0 : marks_.back();
    if (stack_.size() <= floor) return Fail("stack underflow (no container to add to)");
    *id = stack_.back();
    if (nodes_[*id].kind != want || nodes_[*id].is_global) {
      return Fail(absl::StrCat("expected a ", PickleKindName(want), " on the stack, found ", Describe(*id)));
    }
    return absl::OkStatus();
  }
  std::string Describe(uint32_t id) const {
    const Node& n = nodes_[id];
    return n.is_global ? absl::StrCat("a reference to '", n.string_value, "'") : std::string(PickleKindName(n.kind));
  }
  absl::Status Put(uint64_t index) {
    if (stack_.empty()) return Fail("memoizing an empty stack");
    if (memo_.size() >= limits_.max_memo && !memo_.count(index)) {
      return Fail(absl::StrCat("more than ", limits_.max_memo, " memo entries"));
    }
    memo_[index] = stack_.back();
    return absl::OkStatus();
  }
  absl::Status Get(uint64_t index) {
    auto it = memo_.find(index);
    if (it == memo_.end()) return Fail(absl::StrCat("memo index ", index, " was never stored"));
    return Push(it->second);
  }
  absl::Status AddItems(uint32_t list, const std::vector<uint32_t>& items) {
    std::vector<uint32_t>& dst = nodes_[list].items;
    dst.insert(dst.end(), items.begin(), items.end());
    return absl::OkStatus();
  }
  absl::Status SetItems(uint32_t dict, const std::vector<uint32_t>& kv) {
    if (kv.size() % 2 != 0) return Fail("an odd number of values for key/value pairs");
    for (size_t i = 0; i < kv.size(); i += 2) nodes_[dict].entries.emplace_back(kv[i], kv[i + 1]);
    return absl::OkStatus();
  }
  absl::Status MakeTuple(std::vector<uint32_t> items) {
    Node n;
    n.kind = Kind::kTuple;
    n.items = std::move(items);
    return PushNew(std::move(n));
  }
  absl::Status PopN(size_t k, std::vector<uint32_t>* items) {
    items->assign(k, 0);
    for (size_t i = k; i-- > 0;) {
      if (absl::Status s = Pop(&(*items)[i]); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

  absl::Status Integer(absl::string_view bytes) {  // little-endian two's complement
    if (bytes.size() > 8) {
      return Fail(absl::StrCat("an integer of ", bytes.size(), " bytes does not fit in 64 bits"));
    }
    uint64_t x = 0;
    for (size_t i = 0; i < bytes.size(); ++i) x |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[i])) << (8 * i);
    if (!bytes.empty() && bytes.size() < 8 && (static_cast<uint8_t>(bytes.back()) & 0x80)) {
      x |= ~uint64_t{0} << (8 * bytes.size());
    }
    return PushInt(static_cast<int64_t>(x));
  }

  absl::Status Sized(Kind kind, uint64_t n) {
    if (n > limits_.max_string_bytes) {
      return Fail(absl::StrCat("a string of ", n, " bytes exceeds the limit of ", limits_.max_string_bytes));
    }
    absl::string_view b;
    if (absl::Status s = Take(n, &b); !s.ok()) return s;
    return PushString(kind, b);
  }

  absl::Status Global(std::string module, std::string name) {
    Node n;
    n.is_global = true;
    n.string_value = absl::StrCat(module, ".", name);
    return PushNew(std::move(n));
  }

  // REDUCE: evaluates one of the builders the file comment lists, else refuses.
  absl::Status Reduce() {
    uint32_t args_id = 0, fn_id = 0;
    if (absl::Status s = Pop(&args_id); !s.ok()) return s;
    if (absl::Status s = Pop(&fn_id); !s.ok()) return s;
    const Node& fn = nodes_[fn_id];
    if (!fn.is_global) return Fail(absl::StrCat("calling ", Describe(fn_id), ", not a function"));
    const std::string name = fn.string_value;
    const Node& args = nodes_[args_id];
    if (args.kind != Kind::kTuple || args.is_global) return Fail(absl::StrCat("arguments of '", name, "' are not a tuple"));
    const std::vector<uint32_t> a = args.items;
    auto arg_is = [&](size_t i, Kind k) { return a.size() > i && !nodes_[a[i]].is_global && nodes_[a[i]].kind == k; };
    if (name == "torch.jit._pickle.restore_type_tag" && a.size() == 2) return Push(a[0]);
    if ((name == "torch.jit._pickle.build_intlist" || name == "torch.jit._pickle.build_doublelist" ||
         name == "torch.jit._pickle.build_boollist") &&
        a.size() == 1 && arg_is(0, Kind::kList)) {
      return Push(a[0]);
    }
    if (name == "collections.OrderedDict" && a.empty()) {
      Node d;
      d.kind = Kind::kDict;
      return PushNew(std::move(d));
    }
    if ((name == "builtins.set" || name == "__builtin__.set" || name == "builtins.frozenset" ||
         name == "__builtin__.frozenset") &&
        a.size() <= 1 && (a.empty() || arg_is(0, Kind::kList))) {
      Node s;
      s.kind = Kind::kSet;
      if (!a.empty()) s.items = nodes_[a[0]].items;
      return PushNew(std::move(s));
    }
    if (name == "_codecs.encode" && a.size() == 2 && arg_is(0, Kind::kString) && arg_is(1, Kind::kString) &&
        (nodes_[a[1]].string_value == "latin1" || nodes_[a[1]].string_value == "latin-1")) {
      std::optional<std::string> bytes = Latin1FromUtf8(nodes_[a[0]].string_value);
      if (!bytes) return Fail("_codecs.encode of text that is not latin-1");
      return PushString(Kind::kBytes, *bytes);
    }
    return Fail(absl::StrCat("refusing to call '", name,
                             "': this reader holds data only and constructs no objects"));
  }

  absl::Status Step() {
    std::vector<uint32_t> items;
    uint32_t id = 0;
    switch (op_) {
      case 0x80: {  // PROTO
        uint8_t v = 0;
        if (absl::Status s = TakeLittle(&v); !s.ok()) return s;
        if (v > 5) return Fail(absl::StrCat("protocol ", static_cast<int>(v), " is newer than 5"));
        return absl::OkStatus();
      }
      case 0x95: {  // FRAME: frames are contiguous; the length is only a hint
        uint64_t n = 0;
        return TakeLittle(&n);
      }
      case '(':
        if (marks_.size() >= limits_.max_values) return Fail("too many marks");
        marks_.push_back(stack_.size());
        return absl::OkStatus();
      case '0': return Pop(&id);
      case '1': return PopMark(&items);
      case '2':
        if (stack_.empty()) return Fail("stack underflow");
        return Push(stack_.back());
      case 'N': return PushNew(Node{});
      case 0x88:
      case 0x89: {
        Node n;
        n.kind = Kind::kBool;
        n.bool_value = op_ == 0x88;
        return PushNew(std::move(n));
      }
      case 'K': {
        uint8_t v = 0;
        if (absl::Status s = TakeLittle(&v); !s.ok()) return s;
        return PushInt(v);
      }
      case 'M': {
        uint16_t v = 0;
        if (absl::Status s = TakeLittle(&v); !s.ok()) return s;
        return PushInt(v);
      }
      case 'J': {
        uint32_t v = 0;
        if (absl::Status s = TakeLittle(&v); !s.ok()) return s;
        return PushInt(static_cast<int32_t>(v));
      }
      case 0x8a:
      case 0x8b: {
        uint64_t n = 0;
        if (op_ == 0x8a) {
          uint8_t m = 0;
          if (absl::Status s = TakeLittle(&m); !s.ok()) return s;
          n = m;
        } else {
          uint32_t m = 0;
          if (absl::Status s = TakeLittle(&m); !s.ok()) return s;
          n = m;
        }
        absl::string_view b;
        if (absl::Status s = Take(n, &b); !s.ok()) return s;
        return Integer(b);
      }
      case 'I':
      case 'L': {
        absl::string_view line;
        if (absl::Status s = TakeLine(&line); !s.ok()) return s;
        if (op_ == 'I' && (line == "00" || line == "01")) {
          Node n;
          n.kind = Kind::kBool;
          n.bool_value = line == "01";
          return PushNew(std::move(n));
        }
        if (op_ == 'L' && !line.empty() && line.back() == 'L') line.remove_suffix(1);
        int64_t v = 0;
        if (!absl::SimpleAtoi(line, &v)) return Fail("not a 64-bit integer");
        return PushInt(v);
      }
      case 'F': {
        absl::string_view line;
        if (absl::Status s = TakeLine(&line); !s.ok()) return s;
        Node n;
        n.kind = Kind::kFloat;
        if (!absl::SimpleAtod(line, &n.float_value)) return Fail("not a float");
        return PushNew(std::move(n));
      }
      case 'G': {
        absl::string_view b;
        if (absl::Status s = Take(8, &b); !s.ok()) return s;
        uint64_t bits = 0;
        for (int i = 0; i < 8; ++i) bits = (bits << 8) | static_cast<uint8_t>(b[i]);
        Node n;
        n.kind = Kind::kFloat;
        std::memcpy(&n.float_value, &bits, sizeof bits);
        return PushNew(std::move(n));
      }
      case 0x8c:
      case 'U':
      case 'C': {
        uint8_t n = 0;
        if (absl::Status s = TakeLittle(&n); !s.ok()) return s;
        return Sized(op_ == 'C' ? Kind::kBytes : Kind::kString, n);
      }
      case 'X':
      case 'T':
      case 'B': {
        uint32_t n = 0;
        if (absl::Status s = TakeLittle(&n); !s.ok()) return s;
        return Sized(op_ == 'B' ? Kind::kBytes : Kind::kString, n);
      }
      case 0x8d:
      case 0x8e:
      case 0x96: {
        uint64_t n = 0;
        if (absl::Status s = TakeLittle(&n); !s.ok()) return s;
        return Sized(op_ == 0x8d ? Kind::kString : Kind::kBytes, n);
      }
      case ']':
      case ')':
      case '}':
      case 0x8f: {
        Node n;
        n.kind = op_ == ']' ? Kind::kList : op_ == ')' ? Kind::kTuple : op_ == '}' ? Kind::kDict : Kind::kSet;
        return PushNew(std::move(n));
      }
      case 'a':
        if (absl::Status s = Pop(&id); !s.ok()) return s;
        items = {id};
        if (absl::Status s = Top(Kind::kList, &id); !s.ok()) return s;
        return AddItems(id, items);
      case 'e':
        if (absl::Status s = PopMark(&items); !s.ok()) return s;
        if (absl::Status s = Top(Kind::kList, &id); !s.ok()) return s;
        return AddItems(id, items);
      case 0x90:
        if (absl::Status s = PopMark(&items); !s.ok()) return s;
        if (absl::Status s = Top(Kind::kSet, &id); !s.ok()) return s;
        return AddItems(id, items);
      case 's':
        if (absl::Status s = PopN(2, &items); !s.ok()) return s;
        if (absl::Status s = Top(Kind::kDict, &id); !s.ok()) return s;
        return SetItems(id, items);
      case 'u':
        if (absl::Status s = PopMark(&items); !s.ok()) return s;
        if (absl::Status s = Top(Kind::kDict, &id); !s.ok()) return s;
        return SetItems(id, items);
      case 'l':
      case 'd':
      case 0x91: {
        if (absl::Status s = PopMark(&items); !s.ok()) return s;
        Node n;
        n.kind = op_ == 'l' ? Kind::kList : op_ == 0x91 ? Kind::kSet : Kind::kDict;
        if (op_ == 'd') {
          if (items.size() % 2 != 0) return Fail("an odd number of values for key/value pairs");
          for (size_t i = 0; i < items.size(); i += 2) n.entries.emplace_back(items[i], items[i + 1]);
        } else {
          n.items = std::move(items);
        }
        return PushNew(std::move(n));
      }
      case 't':
        if (absl::Status s = PopMark(&items); !s.ok()) return s;
        return MakeTuple(std::move(items));
      case 0x85:
      case 0x86:
      case 0x87:
        if (absl::Status s = PopN(op_ - 0x84, &items); !s.ok()) return s;
        return MakeTuple(std::move(items));
      case 'p':
      case 'g': {
        absl::string_view line;
        if (absl::Status s = TakeLine(&line); !s.ok()) return s;
        uint32_t index = 0;
        if (!absl::SimpleAtoi(line, &index)) return Fail("memo index is not a number");
        return op_ == 'p' ? Put(index) : Get(index);
      }
      case 'q':
      case 'h': {
        uint8_t index = 0;
        if (absl::Status s = TakeLittle(&index); !s.ok()) return s;
        return op_ == 'q' ? Put(index) : Get(index);
      }
      case 'r':
      case 'j': {
        uint32_t index = 0;
        if (absl::Status s = TakeLittle(&index); !s.ok()) return s;
        return op_ == 'r' ? Put(index) : Get(index);
      }
      case 0x94: return Put(memo_.size());
      case 'c': {
        absl::string_view module, name;
        if (absl::Status s = TakeLine(&module); !s.ok()) return s;
        if (absl::Status s = TakeLine(&name); !s.ok()) return s;
        return Global(std::string(module), std::string(name));
      }
      case 0x93: {
        uint32_t name_id = 0, module_id = 0;
        if (absl::Status s = Pop(&name_id); !s.ok()) return s;
        if (absl::Status s = Pop(&module_id); !s.ok()) return s;
        const Node& name = nodes_[name_id];
        const Node& module = nodes_[module_id];
        if (name.is_global || module.is_global || name.kind != Kind::kString || module.kind != Kind::kString) {
          return Fail("module and name are not strings");
        }
        return Global(module.string_value, name.string_value);
      }
      case 'R': return Reduce();
      case 'b':
      case 0x81:
      case 0x92:
      case 'i':
      case 'o':
        return Fail("refusing to construct an object: this reader holds data only");
      case 'P':
      case 'Q':
        return Fail("refusing a persistent id (tensor or external storage reference)");
      case 0x82:
      case 0x83:
      case 0x84:
        return Fail("refusing an extension-registry reference");
      case 0x97:
      case 0x98:
        return Fail("refusing an out-of-band buffer");
      case 'S':
      case 'V':
        return Fail("protocol 0 quoted strings are not supported");
      default:
        return Fail("not a pickle opcode");
    }
  }

  absl::StatusOr<PickleValue> Finish() {
    uint32_t root = 0;
    if (absl::Status s = Pop(&root); !s.ok()) return s;
    if (!marks_.empty() || !stack_.empty()) return Fail("values left on the stack at STOP");
    size_t count = 0;
    PickleValue out;
    if (absl::Status s = Build(root, 0, &count, &out); !s.ok()) return s;
    return out;
  }

  absl::Status Build(uint32_t id, int depth, size_t* count, PickleValue* out) const {
    if (depth > limits_.max_depth) {
      return Fail(absl::StrCat("containers nested deeper than ", limits_.max_depth,
                               " (or a container that contains itself)"));
    }
    if (++*count > limits_.max_values) {
      return Fail(absl::StrCat("more than ", limits_.max_values, " values once shared ones are expanded"));
    }
    const Node& n = nodes_[id];
    if (n.is_global) return Fail(absl::StrCat("the data holds a reference to '", n.string_value, "'"));
    out->kind = n.kind;
    out->bool_value = n.bool_value;
    out->int_value = n.int_value;
    out->float_value = n.float_value;
    out->string_value = n.string_value;
    out->items.resize(n.items.size());
    for (size_t i = 0; i < n.items.size(); ++i) {
      if (absl::Status s = Build(n.items[i], depth + 1, count, &out->items[i]); !s.ok()) return s;
    }
    out->entries.resize(n.entries.size());
    for (size_t i = 0; i < n.entries.size(); ++i) {
      if (absl::Status s = Build(n.entries[i].first, depth + 1, count, &out->entries[i].key); !s.ok()) return s;
      if (absl::Status s = Build(n.entries[i].second, depth + 1, count, &out->entries[i].value); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

  absl::string_view in_;
  const PickleLimits& limits_;
  size_t pos_ = 0;
  size_t op_pos_ = 0;
  uint8_t op_ = 0;
  std::vector<Node> nodes_;
  std::vector<uint32_t> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, uint32_t> memo_;
};

}  // namespace

const PickleValue* PickleValue::Find(absl::string_view key) const {
  if (kind != Kind::kDict) return nullptr;
  for (const auto& [k, v] : entries) {
    if (k.kind == Kind::kString && k.string_value == key) return &v;
  }
  return nullptr;
}

absl::string_view PickleKindName(PickleValue::Kind kind) {
  switch (kind) {
    case Kind::kNone: return "None";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kBytes: return "bytes";
    case Kind::kList: return "list";
    case Kind::kTuple: return "tuple";
    case Kind::kSet: return "set";
    case Kind::kDict: return "dict";
  }
  return "?";
}

absl::StatusOr<PickleValue> ReadPickle(absl::string_view bytes, const PickleLimits& limits) {
  if (bytes.empty()) return absl::InvalidArgumentError("offset 0: empty input, not a pickle");
  return Machine(bytes, limits).Run();
}

}  // namespace peregrine
