// The container images against everything that relies on them. Docker is not needed:
// no image is built here; instead docker/Dockerfile is parsed and every promise it makes
// is checked against the real thing:
//   - the agent image: the controller's pod builder (BuildPod, with the --agent-image
//     the rendered chart passes) copies <prefix>/. out of the image and runs
//     /peregrine/bin/peregrine-agent with PEREGRINE_NCCL_HOOK; the Dockerfile's agent
//     stage puts the bundle at that prefix; the same bundle script, run here on this
//     build's binaries, yields every path the pod uses, the launcher starts the real
//     agent, and the bundled loader resolves every library inside the bundle;
//   - the controller image: it holds what the Deployment runs, and installs the Debian
//     package of every shared library the built binaries link (ldd + dpkg -S);
//   - the build: each --target the Dockerfile builds is a target of this build, and
//     each file it takes from build/ is one of their outputs;
//   - scripts/build-images.sh --dry-run names exactly the images the chart deploys,
//     with its default tag and with an explicit one;
//   - the checkpoint client in the agent bundle: the Dockerfile builds and bundles
//     libperegrine_client.so and the `peregrine` package where the agent's client dir
//     (the bundle's root) points training processes; the bundled client needs nothing
//     outside its bundle but glibc, libstdc++ and libgcc_s (readelf), and Debian's
//     /usr/bin/python3 with real torch imports it from the bundle, maps Abseil from the
//     bundle (not the system's) and round-trips a checkpoint.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "controller/kube/kube_cluster.h"
#include "tests/deploy/chart_render.h"
#include "tests/deploy/deploy_tools.h"
#include "tests/testing/child_process.h"
#include "tests/testing/eventually.h"

namespace peregrine {
namespace {

namespace fs = std::filesystem;

// absl::ConsumePrefix/ConsumeSuffix for std::string.
bool ConsumePrefix(std::string* s, const std::string& prefix) {
  if (!absl::StartsWith(*s, prefix)) return false;
  s->erase(0, prefix.size());
  return true;
}
bool ConsumeSuffix(std::string* s, const std::string& suffix) {
  if (!absl::EndsWith(*s, suffix)) return false;
  s->resize(s->size() - suffix.size());
  return true;
}

// One Dockerfile instruction: keyword (upper case) and its arguments, continuation
// lines joined.
struct Instruction {
  std::string keyword;
  std::string args;
};

struct Stage {
  std::string base;  // FROM image (ARG defaults substituted)
  std::vector<Instruction> instructions;
};

// Parses docker/Dockerfile into stages by name ("" for unnamed). Global ARG defaults
// are substituted into FROM lines.
std::map<std::string, Stage> ParseDockerfile(const std::string& text) {
  std::vector<Instruction> all;
  std::string pending;
  for (absl::string_view raw : absl::StrSplit(text, '\n')) {
    std::string line(absl::StripAsciiWhitespace(raw));
    if (pending.empty() && (line.empty() || line[0] == '#')) continue;
    if (!pending.empty() && !line.empty() && line[0] == '#') continue;  // comment inside a continuation
    if (!line.empty() && line.back() == '\\') {
      line.pop_back();
      pending += line + " ";
      continue;
    }
    pending += line;
    const size_t space = pending.find(' ');
    Instruction ins{pending.substr(0, space), space == std::string::npos ? "" : pending.substr(space + 1)};
    std::transform(ins.keyword.begin(), ins.keyword.end(), ins.keyword.begin(), ::toupper);
    all.push_back(ins);
    pending.clear();
  }
  std::map<std::string, std::string> args;
  std::map<std::string, Stage> stages;
  Stage* current = nullptr;
  for (const Instruction& ins : all) {
    if (ins.keyword == "ARG" && current == nullptr) {
      std::vector<std::string> kv = absl::StrSplit(ins.args, absl::MaxSplits('=', 1));
      if (kv.size() == 2) args[kv[0]] = kv[1];
      continue;
    }
    if (ins.keyword == "FROM") {
      std::vector<std::string> words = absl::StrSplit(ins.args, ' ', absl::SkipWhitespace());
      std::string base = words.at(0);
      for (const auto& [k, v] : args) {
        if (base == "${" + k + "}" || base == "$" + k) base = v;
      }
      const std::string name = words.size() >= 3 && (words[1] == "AS" || words[1] == "as") ? words[2] : "";
      INFO("stage " << name);
      REQUIRE(stages.count(name) == 0);
      current = &stages[name];
      current->base = base;
      continue;
    }
    REQUIRE(current != nullptr);
    current->instructions.push_back(ins);
  }
  return stages;
}

std::map<std::string, Stage> Dockerfile() {
  return ParseDockerfile(ReadText(SourceDir() / "docker/Dockerfile"));
}

std::vector<std::string> Words(const std::string& s) { return absl::StrSplit(s, ' ', absl::SkipWhitespace()); }

// The RUN instruction of `stage` whose words start with `first_words`; REQUIREs one.
std::vector<std::string> RunWords(const Stage& stage, const std::vector<std::string>& first_words) {
  for (const Instruction& ins : stage.instructions) {
    if (ins.keyword != "RUN") continue;
    // A RUN may chain commands with &&: look at each.
    for (absl::string_view part : absl::StrSplit(ins.args, "&&")) {
      std::vector<std::string> w = Words(std::string(part));
      if (w.size() >= first_words.size() && std::equal(first_words.begin(), first_words.end(), w.begin())) return w;
    }
  }
  FAIL("no RUN " << absl::StrJoin(first_words, " "));
  return {};
}

// COPY --from=<from> sources... destination, for every such COPY in `stage`.
std::vector<std::vector<std::string>> CopiesFrom(const Stage& stage, const std::string& from) {
  std::vector<std::vector<std::string>> out;
  for (const Instruction& ins : stage.instructions) {
    if (ins.keyword != "COPY") continue;
    std::vector<std::string> w = Words(ins.args);
    if (!w.empty() && w[0] == "--from=" + from) out.emplace_back(w.begin() + 1, w.end());
  }
  return out;
}

// Packages named by `apt-get install` in `stage` (options skipped).
std::set<std::string> AptPackages(const Stage& stage) {
  std::set<std::string> out;
  for (const Instruction& ins : stage.instructions) {
    if (ins.keyword != "RUN") continue;
    for (absl::string_view part : absl::StrSplit(ins.args, "&&")) {
      std::vector<std::string> w = Words(std::string(part));
      auto install = std::find(w.begin(), w.end(), "install");
      if (install == w.end() || std::find(w.begin(), install, "apt-get") == install) continue;
      for (auto it = install + 1; it != w.end(); ++it) {
        if ((*it)[0] != '-') out.insert(*it);
      }
    }
  }
  return out;
}

fs::path BinaryDir() { return PEREGRINE_BINARY_DIR; }

// A path inside the image's /src/build (or relative build/) mapped onto this build.
fs::path LocalBuildPath(const std::string& image_path) {
  std::string rel = image_path;
  if (!ConsumePrefix(&rel, "/src/build/")) REQUIRE(ConsumePrefix(&rel, "build/"));
  return BinaryDir() / rel;
}

std::string Env(const nlohmann::json& container, const std::string& name) {
  for (const nlohmann::json& e : container.value("env", nlohmann::json::array())) {
    if (e.value("name", "") == name) return e.value("value", "");
  }
  return "";
}

TEST_CASE("the agent image holds what the controller's pods copy and run", "[integration]") {
  // The agent image the chart hands the controller, and the pod the controller builds.
  Helm helm;
  const std::vector<YAML::Node> objects = helm.Render();
  const YAML::Node deployment = One(objects, "Deployment");
  const KubeMainOptions flags = ParseControllerArgs(deployment["spec"]["template"]["spec"]["containers"][0]);
  TrainingJob job;
  job.metadata.name = "llm";
  job.metadata.namespace_ = "train";
  job.spec.code.image = "example.com/train:1";
  job.spec.code.command = {"python", "train.py"};
  KubeClusterOptions kopts;
  kopts.controller_address = "peregrine-grpc.peregrine-system.svc:7400";
  kopts.agent_image = flags.mode.agent_image;
  PodToCreate request;
  request.name = "llm-m0";
  request.slot = 0;
  auto pod = BuildPod(job, request, kopts);
  REQUIRE(pod.ok());
  const nlohmann::json& init = (*pod)["spec"]["initContainers"][0];
  CHECK(init["image"] == flags.mode.agent_image);
  // cp -a <prefix>/. <mount>/
  const std::vector<std::string> cp = init["command"].get<std::vector<std::string>>();
  REQUIRE(cp.size() == 4);
  CHECK(cp[0] == "cp");
  std::string prefix = cp[2];
  REQUIRE(ConsumeSuffix(&prefix, "/."));
  std::string mount = cp[3];
  REQUIRE(ConsumeSuffix(&mount, "/"));
  CHECK(init["volumeMounts"][0]["mountPath"] == mount);
  // The paths the training container uses, relative to the mount.
  const nlohmann::json& trainer = (*pod)["spec"]["containers"][0];
  std::vector<std::string> used = {trainer["command"][0].get<std::string>(), Env(trainer, "PEREGRINE_NCCL_HOOK")};
  for (std::string& p : used) {
    INFO(p);
    REQUIRE(ConsumePrefix(&p, mount + "/"));
  }
  CHECK(used == std::vector<std::string>{"bin/peregrine-agent", "lib/libperegrine_nccl.so"});

  // The Dockerfile's agent stage copies the bundle the build stage made to that prefix.
  const auto stages = Dockerfile();
  REQUIRE(stages.count("agent") == 1);
  REQUIRE(stages.count("build") == 1);
  CHECK(stages.at("agent").base == "debian:bookworm-slim");
  const auto copies = CopiesFrom(stages.at("agent"), "build");
  REQUIRE(copies.size() == 1);
  REQUIRE(copies[0].size() == 2);
  CHECK(copies[0][1] == prefix + "/");
  const std::vector<std::string> bundle = RunWords(stages.at("build"), {"docker/bundle-runtime.sh"});
  REQUIRE(bundle.size() >= 3);
  CHECK(bundle[1] + "/" == copies[0][0]);

  // The same bundle step on this build's binaries yields every path the pod uses.
  ScratchDir scratch;
  const fs::path image_prefix = scratch.path() / "opt/peregrine";
  std::vector<std::string> argv = {(SourceDir() / "docker/bundle-runtime.sh").string(), image_prefix.string()};
  for (size_t i = 2; i < bundle.size(); ++i) argv.push_back(LocalBuildPath(bundle[i]).string());
  const ProcessResult made = Run(argv);
  INFO(made.err);
  REQUIRE(made.exit_code == 0);
  for (const std::string& p : used) {
    INFO(p);
    CHECK(fs::is_regular_file(image_prefix / p));
  }
  // The launcher runs the real agent through the bundled loader: with no flags it
  // starts and refuses, naming the missing flag.
  const ProcessResult agent = Run({(image_prefix / "bin/peregrine-agent").string()});
  CHECK(agent.exit_code != 0);
  CHECK_THAT(agent.err + agent.out, Catch::Contains("--controller"));
  // Every library the agent needs resolves inside the bundle (ld.so --list).
  fs::path loader;
  for (const auto& entry : fs::directory_iterator(image_prefix / "lib")) {
    if (absl::StartsWith(entry.path().filename().string(), "ld-linux")) loader = entry.path();
  }
  REQUIRE(!loader.empty());
  const ProcessResult list = Run({loader.string(), "--library-path", (image_prefix / "lib").string(), "--list",
                                  (image_prefix / "libexec/peregrine-agent").string()});
  REQUIRE(list.exit_code == 0);
  int resolved = 0;
  for (absl::string_view line : absl::StrSplit(list.out, '\n')) {
    if (!absl::StrContains(line, "=>")) continue;
    INFO(line);
    CHECK(absl::StrContains(line, "=> " + (image_prefix / "lib").string() + "/"));
    ++resolved;
  }
  CHECK(resolved >= 5);  // libc, libstdc++, gRPC, protobuf, Abseil at least

  // The node DaemonSet runs the same image: its command is in the bundle and starts there
  // (without a node name it refuses, naming it).
  const std::string daemonset = ReadText(SourceDir() / "helm/peregrine/templates/node-inspector-daemonset.yaml");
  CHECK_THAT(daemonset, Catch::Contains("command: [\"" + prefix + "/bin/peregrine-node-inspector\"]"));
  const ProcessResult inspector = Run({(image_prefix / "bin/peregrine-node-inspector").string()});
  CHECK(inspector.exit_code == 2);
  CHECK_THAT(inspector.err, Catch::Contains("--node (or NODE_NAME) is required"));
}

TEST_CASE("the controller image holds what the Deployment runs, with its runtime libraries", "[integration]") {
  Helm helm;
  const YAML::Node deployment = One(helm.Render(), "Deployment");
  const YAML::Node container = deployment["spec"]["template"]["spec"]["containers"][0];
  const std::vector<std::string> command = Strings(container["command"]);
  REQUIRE(command == std::vector<std::string>{"peregrine-controller"});
  const auto stages = Dockerfile();
  REQUIRE(stages.count("controller") == 1);
  const Stage& controller = stages.at("controller");
  CHECK(controller.base == "debian:bookworm-slim");
  const auto copies = CopiesFrom(controller, "build");
  REQUIRE(copies.size() == 1);
  const std::vector<std::string>& copy = copies[0];
  CHECK(copy.back() == "/usr/local/bin/");  // on debian's PATH
  std::set<std::string> shipped;
  for (size_t i = 0; i + 1 < copy.size(); ++i) shipped.insert(fs::path(copy[i]).filename().string());
  CHECK(shipped == std::set<std::string>{"peregrine-controller", "peregrinectl"});

  // Every shared library the built binaries link comes from a package the image installs.
  const std::set<std::string> installed = AptPackages(controller);
  for (size_t i = 0; i + 1 < copy.size(); ++i) {
    const fs::path binary = LocalBuildPath(copy[i]);
    INFO(binary);
    REQUIRE(fs::is_regular_file(binary));
    const ProcessResult ldd = Run({"ldd", binary.string()});
    REQUIRE(ldd.exit_code == 0);
    for (absl::string_view line : absl::StrSplit(ldd.out, '\n')) {
      const size_t arrow = line.find("=> /");
      if (arrow == absl::string_view::npos) continue;
      std::string lib(line.substr(arrow + 3));
      lib = lib.substr(0, lib.find(' '));
      const std::string real = fs::canonical(lib).string();
      // merged /usr: dpkg knows a library under the path its package ships it at.
      std::string package;
      for (const std::string& candidate : {real, "/usr" + real, lib, "/usr" + lib}) {
        const ProcessResult owner = Run({"dpkg", "-S", candidate});
        if (owner.exit_code == 0) {
          package = owner.out.substr(0, owner.out.find(':'));
          break;
        }
      }
      INFO(lib);
      REQUIRE(!package.empty());
      CHECK(installed.count(package) == 1);
    }
  }
}

TEST_CASE("the Dockerfile builds targets this build has, and takes only their outputs", "[integration]") {
  const auto stages = Dockerfile();
  const std::vector<std::string> build = RunWords(stages.at("build"), {"cmake", "--build", "build", "--target"});
  const std::set<std::string> targets(build.begin() + 4, build.end());
  REQUIRE(!targets.empty());
  const ProcessResult ninja = Run({"ninja", "-C", BinaryDir().string(), "-t", "targets", "all"});
  REQUIRE(ninja.exit_code == 0);
  for (const std::string& t : targets) {
    INFO("target " << t);
    CHECK(absl::StrContains("\n" + ninja.out, "\n" + t + ": phony"));
  }
  // Each file taken from build/ is a target's output: bin/<target> or lib/lib<target>.so.
  std::vector<std::string> taken;
  const std::vector<std::string> bundle = RunWords(stages.at("build"), {"docker/bundle-runtime.sh"});
  taken.insert(taken.end(), bundle.begin() + 2, bundle.end());
  for (const auto& copy : CopiesFrom(stages.at("controller"), "build")) {
    taken.insert(taken.end(), copy.begin(), copy.end() - 1);
  }
  for (const std::string& file : taken) {
    INFO(file);
    const fs::path local = LocalBuildPath(file);
    CHECK(fs::is_regular_file(local));
    const std::string name = local.filename().string();
    std::string stem = name;
    const bool library = ConsumePrefix(&stem, "lib") && ConsumeSuffix(&stem, ".so");
    CHECK(targets.count(library ? stem : name) == 1);
    CHECK(local.parent_path().filename() == (library ? "lib" : "bin"));
  }
}

// The NEEDED entries and the RPATH/RUNPATH of an ELF file (readelf -d).
struct DynamicSection {
  std::vector<std::string> needed;
  std::string search_path;
};
DynamicSection ReadDynamic(const fs::path& elf) {
  const ProcessResult r = Run({"readelf", "-d", elf.string()});
  INFO(elf << ": " << r.err);
  REQUIRE(r.exit_code == 0);
  DynamicSection out;
  for (absl::string_view line : absl::StrSplit(r.out, '\n')) {
    const size_t open = line.find('[');
    const size_t close = line.rfind(']');
    if (open == absl::string_view::npos || close == absl::string_view::npos || close < open) continue;
    const std::string value(line.substr(open + 1, close - open - 1));
    if (absl::StrContains(line, "(NEEDED)")) out.needed.push_back(value);
    if (absl::StrContains(line, "(RPATH)") || absl::StrContains(line, "(RUNPATH)")) out.search_path = value;
  }
  return out;
}

// What the training image provides to the client: glibc's libraries and the C++ runtime.
bool FromTheImage(const std::string& soname) {
  for (const char* prefix : {"libc.so.", "libm.so.", "libpthread.so.", "libdl.so.", "librt.so.", "ld-linux",
                             "libstdc++.so.", "libgcc_s.so."}) {
    if (absl::StartsWith(soname, prefix)) return true;
  }
  return false;
}

// Saves a checkpoint through the bundled package, finishes it as the agent would, loads
// it back and compares; then lists where the client, Abseil and libstdc++ were mapped from.
constexpr char kRoundTrip[] = R"py(
import os, subprocess, torch, peregrine
from peregrine import checkpoint, _lib
assert _lib.lib() is not None, "the client library did not load"
state = {"w": torch.arange(12, dtype=torch.float32).reshape(3, 4), "step": 7}
assert checkpoint.save(7, state)
assert checkpoint.wait()
shard = os.path.join(os.environ["PEREGRINE_CHECKPOINT_DIR"], "step-%020d.shard" % 7)
subprocess.run([os.environ["FINISH_SHARD"], shard], check=True)
os.environ["PEREGRINE_RESUME_STEP"] = "7"
step, loaded = checkpoint.load()
assert step == 7 and torch.equal(loaded["w"], state["w"]) and loaded["step"] == 7, (step, loaded)
print("round trip ok")
for line in open("/proc/self/maps"):
    p = line.split()[-1]
    if "absl" in p or "peregrine_client" in p or "libstdc++" in p:
        print("mapped", p)
)py";

TEST_CASE("the agent bundle carries the checkpoint client where the agent points training, loadable in a foreign image", "[integration]") {
  const auto stages = Dockerfile();
  const Stage& build = stages.at("build");
  // Built: the library and the package.
  const std::vector<std::string> targets = RunWords(build, {"cmake", "--build", "build", "--target"});
  CHECK(std::count(targets.begin(), targets.end(), "peregrine_client") == 1);
  CHECK(std::count(targets.begin(), targets.end(), "peregrine_python") == 1);
  // Bundled: the library by the bundle script, the package copied to <bundle>/python/.
  const std::vector<std::string> bundle = RunWords(build, {"docker/bundle-runtime.sh"});
  REQUIRE(bundle.size() >= 3);
  CHECK(std::count(bundle.begin() + 2, bundle.end(), "build/lib/libperegrine_client.so") == 1);
  const std::vector<std::string> copy = RunWords(build, {"cp", "-r"});
  REQUIRE(copy.size() == 4);
  CHECK(copy[2] == "build/python/peregrine");
  CHECK(copy[3] == bundle[1] + "/python/");

  // The same steps on this build.
  ScratchDir scratch;
  const fs::path prefix = scratch.path() / "opt/peregrine";
  std::vector<std::string> argv = {(SourceDir() / "docker/bundle-runtime.sh").string(), prefix.string()};
  for (size_t i = 2; i < bundle.size(); ++i) argv.push_back(LocalBuildPath(bundle[i]).string());
  // readlink, bundled like the agent, shows what /proc/self/exe is for a bundled program.
  argv.push_back("/usr/bin/readlink");
  const ProcessResult made = Run(argv);
  INFO(made.err);
  REQUIRE(made.exit_code == 0);
  fs::create_directories(prefix / "python");
  REQUIRE(Run({"cp", "-r", LocalBuildPath(copy[2]).string(), (prefix / "python/").string()}).exit_code == 0);

  // The agent's client dir (no --client-dir; the pod sets none): the parent of the
  // directory of /proc/self/exe, which for a bundled program is the loader in lib/.
  const ProcessResult exe = Run({(prefix / "bin/readlink").string(), "/proc/self/exe"});
  REQUIRE(exe.exit_code == 0);
  const fs::path client_dir = fs::path(std::string(absl::StripAsciiWhitespace(exe.out))).parent_path().parent_path();
  CHECK(client_dir == prefix);
  // What the agent sets for training (agent/launch_plan.h).
  const fs::path client_lib = client_dir / "lib/libperegrine_client.so";
  const fs::path python_dir = client_dir / "python";
  REQUIRE(fs::is_regular_file(client_lib));
  REQUIRE(fs::is_regular_file(python_dir / "peregrine/__init__.py"));

  // (a) Every library the client needs, directly or through its bundled dependencies,
  // is in its dependency dir or comes from the image (glibc, the C++ runtime).
  const DynamicSection client = ReadDynamic(client_lib);
  std::string deps_name = client.search_path;
  REQUIRE(ConsumePrefix(&deps_name, "$ORIGIN/"));
  const fs::path deps = client_lib.parent_path() / deps_name;
  REQUIRE(fs::is_directory(deps));
  std::vector<fs::path> checked = {client_lib};
  int bundled = 0;
  for (const auto& entry : fs::directory_iterator(deps)) {
    checked.push_back(entry.path());
    const std::string name = entry.path().filename().string();
    INFO(name);
    CHECK(!FromTheImage(name));
    ++bundled;
  }
  CHECK(bundled >= 5);  // Abseil's status, statusor, strings, str_format, cord at least
  for (const fs::path& elf : checked) {
    for (const std::string& needed : ReadDynamic(elf).needed) {
      INFO(elf << " needs " << needed);
      CHECK((FromTheImage(needed) || fs::is_regular_file(deps / needed)));
    }
  }

  // (b) Debian's python3 with real torch imports the bundled package and client and
  // round-trips a checkpoint; Abseil comes from the bundle even though the system has it.
  ScratchDir store;
  const ProcessResult py = Run(
      {"/usr/bin/python3", "-c", kRoundTrip},
      {"PYTHONPATH=" + python_dir.string(), "PEREGRINE_CLIENT_LIB=" + client_lib.string(),
       "PEREGRINE_CHECKPOINT_DIR=" + store.path().string(), "RANK=0", "WORLD_SIZE=1", "PYTHONDONTWRITEBYTECODE=1",
       "FINISH_SHARD=" + (BinaryDir() / "bin/peregrine-finish-shard").string()});
  INFO(py.out << py.err);
  REQUIRE(py.exit_code == 0);
  CHECK(absl::StrContains(py.out, "round trip ok"));
  int absl_mapped = 0;
  bool client_mapped = false;
  for (absl::string_view line : absl::StrSplit(py.out, '\n')) {
    std::string path(line);
    if (!ConsumePrefix(&path, "mapped ")) continue;
    INFO(path);
    if (absl::StrContains(path, "absl")) {
      CHECK(absl::StartsWith(path, deps.string() + "/"));
      ++absl_mapped;
    } else if (absl::StrContains(path, "libstdc++")) {
      CHECK(!absl::StartsWith(path, prefix.string()));  // the image's own
    } else {
      CHECK(path == client_lib.string());
      client_mapped = true;
    }
  }
  CHECK(absl_mapped >= 5);
  CHECK(client_mapped);
}

// "docker build ... --target T --tag REF ..." lines of the dry run: target -> ref.
std::map<std::string, std::string> DryRunImages(const std::vector<std::string>& extra) {
  std::vector<std::string> argv = {(SourceDir() / "scripts/build-images.sh").string(), "--dry-run"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  const ProcessResult r = Run(argv);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  std::map<std::string, std::string> out;
  for (absl::string_view line : absl::StrSplit(r.out, '\n')) {
    std::vector<std::string> w = Words(std::string(line));
    if (w.size() < 2 || w[0] != "docker" || w[1] != "build") continue;
    std::string target, tag;
    for (size_t i = 2; i + 1 < w.size(); ++i) {
      if (w[i] == "--target") target = w[i + 1];
      if (w[i] == "--tag") tag = w[i + 1];
      if (w[i] == "--file") CHECK(w[i + 1] == (SourceDir() / "docker/Dockerfile").string());
    }
    out[target] = tag;
  }
  return out;
}

TEST_CASE("the agent bundle carries eu-stack and gdb, which run from it and capture a real process's stack", "[integration]") {
  const auto stages = Dockerfile();
  const Stage& build = stages.at("build");
  // Installed in the build stage: elfutils (eu-stack) and gdb without Python.
  const std::set<std::string> packages = AptPackages(build);
  CHECK(packages.count("elfutils") == 1);
  CHECK(packages.count("gdb-minimal") == 1);
  CHECK(packages.count("gdb") == 0);  // the full gdb does not start without its Python
  // Bundled into the agent bundle's bin/ (where the agent looks after PATH).
  const std::vector<std::string> agent_bundle = RunWords(build, {"docker/bundle-runtime.sh"});
  std::vector<std::string> tools;
  for (const Instruction& ins : build.instructions) {
    if (ins.keyword != "RUN") continue;
    for (absl::string_view part : absl::StrSplit(ins.args, "&&")) {
      std::vector<std::string> w = Words(std::string(part));
      if (w.size() >= 2 && w[0] == "docker/bundle-runtime.sh" && w != agent_bundle) tools = w;
    }
  }
  REQUIRE(tools.size() == 4);
  CHECK(tools[1] == agent_bundle[1]);
  CHECK(std::set<std::string>(tools.begin() + 2, tools.end()) == std::set<std::string>{"/usr/bin/eu-stack", "/usr/bin/gdb"});

  // The same step on this host's tools (its gdb is the full one) yields launchers that run
  // through the bundled loader with every library from the bundle.
  for (const char* tool : {"/usr/bin/eu-stack", "/usr/bin/gdb"}) {
    if (!fs::exists(tool)) {
      WARN(tool << " is not installed here");
      return;
    }
  }
  ScratchDir scratch;
  const fs::path prefix = scratch.path() / "opt/peregrine";
  const ProcessResult made = Run({(SourceDir() / "docker/bundle-runtime.sh").string(), prefix.string(),
                                  "/usr/bin/eu-stack", "/usr/bin/gdb"});
  INFO(made.err);
  REQUIRE(made.exit_code == 0);
  fs::path loader;
  for (const auto& entry : fs::directory_iterator(prefix / "lib")) {
    if (absl::StartsWith(entry.path().filename().string(), "ld-linux")) loader = entry.path();
  }
  REQUIRE(!loader.empty());
  for (const char* name : {"eu-stack", "gdb"}) {
    INFO(name);
    CHECK(fs::is_regular_file(prefix / "bin" / name));
    const ProcessResult list = Run({loader.string(), "--library-path", (prefix / "lib").string(), "--list",
                                    (prefix / "libexec" / name).string()});
    REQUIRE(list.exit_code == 0);
    for (absl::string_view line : absl::StrSplit(list.out, '\n')) {
      if (!absl::StrContains(line, "=>")) continue;
      INFO(line);
      CHECK(absl::StrContains(line, "=> " + (prefix / "lib").string() + "/"));
    }
  }
  // The bundled tools capture the stack of a live process, as the agent runs them.
  auto sleeper = testing::ChildProcess::Start({{"/bin/sleep", "60"}, {}, false, false, "", ""});
  REQUIRE(sleeper != nullptr);
  const std::string pid = std::to_string(sleeper->pid());
  REQUIRE(testing::Eventually([&] { return ReadText(fs::path("/proc") / pid / "cmdline").rfind("/bin/sleep", 0) == 0; }));
  const ProcessResult eu = Run({(prefix / "bin/eu-stack").string(), "-p", pid});
  INFO(eu.out << eu.err);
  CHECK(eu.exit_code == 0);
  CHECK(absl::StrContains(eu.out, "nanosleep"));
  const ProcessResult gdb = Run({(prefix / "bin/gdb").string(), "-nx", "-batch", "-ex", "thread apply all bt", "-p", pid});
  INFO(gdb.out << gdb.err);
  CHECK(gdb.exit_code == 0);
  CHECK(absl::StrContains(gdb.out, "nanosleep"));
}

TEST_CASE("scripts/build-images.sh names exactly the images the chart deploys", "[integration]") {
  const auto stages = Dockerfile();
  Helm helm;
  for (const std::string& tag : {std::string(""), std::string("1.2.3")}) {
    INFO("tag '" << tag << "'");
    const std::map<std::string, std::string> images =
        DryRunImages(tag.empty() ? std::vector<std::string>{} : std::vector<std::string>{"--tag", tag});
    REQUIRE(images.size() == 2);
    for (const auto& [target, ref] : images) CHECK(stages.count(target) == 1);
    const std::vector<YAML::Node> objects =
        tag.empty() ? helm.Render() : helm.Render({"--set", "image.tag=" + tag, "--set", "agent.image.tag=" + tag});
    const YAML::Node container = One(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0];
    CHECK(images.at("controller") == container["image"].Scalar());
    CHECK(images.at("agent") == ParseControllerArgs(container).mode.agent_image);
    if (tag.empty()) CHECK(absl::EndsWith(images.at("controller"), ":" + AppVersion()));
  }
}

}  // namespace
}  // namespace peregrine
