#include "tests/testing/test_pki.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/testing/files.h"

extern char** environ;

// Each step is one `openssl` run (posix_spawnp, no shell) with its output in
// <dir>/openssl.log, shown when it fails. Keys are EC P-256: quick to make on a busy
// machine. Serial numbers start at a random 48-bit value per CA, so certificates of two
// CAs (or two runs) do not share them.

namespace peregrine::testing {
namespace {

void RunOpenssl(const std::string& dir, std::vector<std::string> args) {
  args.insert(args.begin(), "openssl");
  const std::string log = dir + "/openssl.log";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int spawned = posix_spawnp(&pid, "openssl", &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  INFO("openssl " << absl::StrJoin(args, " "));
  REQUIRE(spawned == 0);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  INFO(ReadFileIfExists(log));
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
}

std::vector<std::string> NewKeyArgs(const std::string& key_file) {
  return {"-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key_file};
}

}  // namespace

TestCa::TestCa(std::string dir, std::string name)
    : dir_(std::move(dir)), name_(std::move(name)), next_serial_(std::random_device{}() | 0x10000u) {
  next_serial_ = (next_serial_ << 16) | 1;
  ca_.cert_file = absl::StrCat(dir_, "/", name_, "-ca.crt");
  ca_.key_file = absl::StrCat(dir_, "/", name_, "-ca.key");
  ca_.serial = next_serial_++;
  std::vector<std::string> args = {"req", "-x509"};
  for (const std::string& a : NewKeyArgs(ca_.key_file)) args.push_back(a);
  for (const std::string& a :
       {std::string("-out"), ca_.cert_file, std::string("-days"), std::string("2"), std::string("-subj"),
        absl::StrCat("/CN=", name_), std::string("-set_serial"), absl::StrCat(ca_.serial), std::string("-addext"),
        std::string("basicConstraints=critical,CA:TRUE"), std::string("-addext"),
        std::string("keyUsage=critical,keyCertSign,cRLSign")}) {
    args.push_back(a);
  }
  RunOpenssl(dir_, args);
  ca_.cert_pem = ReadFile(ca_.cert_file);
}

TestCert TestCa::Issue(const std::string& name, const std::vector<std::string>& dns_names,
                       const std::vector<std::string>& ips) {
  TestCert cert;
  cert.cert_file = absl::StrCat(dir_, "/", name, ".crt");
  cert.key_file = absl::StrCat(dir_, "/", name, ".key");
  cert.serial = next_serial_++;
  const std::string csr = absl::StrCat(dir_, "/", name, ".csr");
  const std::string ext = absl::StrCat(dir_, "/", name, ".ext");
  std::vector<std::string> sans;
  for (const std::string& d : dns_names) sans.push_back("DNS:" + d);
  for (const std::string& ip : ips) sans.push_back("IP:" + ip);
  std::string extensions = "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
                           "extendedKeyUsage=serverAuth\n";
  if (!sans.empty()) extensions += absl::StrCat("subjectAltName=", absl::StrJoin(sans, ","), "\n");
  WriteFile(ext, extensions);
  std::vector<std::string> req = {"req"};
  for (const std::string& a : NewKeyArgs(cert.key_file)) req.push_back(a);
  req.insert(req.end(), {"-out", csr, "-subj", absl::StrCat("/CN=", name)});
  RunOpenssl(dir_, req);
  RunOpenssl(dir_, {"x509", "-req", "-in", csr, "-CA", ca_.cert_file, "-CAkey", ca_.key_file, "-set_serial",
                    absl::StrCat(cert.serial), "-days", "2", "-extfile", ext, "-out", cert.cert_file});
  cert.cert_pem = ReadFile(cert.cert_file);
  return cert;
}

}  // namespace peregrine::testing
