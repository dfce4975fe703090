// A throwaway PKI for TLS tests, made at run time with the `openssl` command-line tool in a
// directory the test owns (e.g. a TempDir): a CA, and certificates it signs for given DNS
// names and IP addresses (EC P-256 keys, valid for two days). Every openssl failure fails
// the test (Catch2 REQUIRE, with openssl's output). Not thread-safe; owned by one test.
#ifndef PEREGRINE_TESTS_TESTING_TEST_PKI_H_
#define PEREGRINE_TESTS_TESTING_TEST_PKI_H_

#include <cstdint>
#include <string>
#include <vector>

namespace peregrine::testing {

// A certificate and its key as PEM files.
struct TestCert {
  std::string cert_file;
  std::string key_file;
  std::string cert_pem;  // the content of cert_file
  uint64_t serial = 0;   // the certificate's serial number
};

class TestCa {
 public:
  // Makes a self-signed CA named `name` (its subject CN) in `dir`: <dir>/<name>-ca.crt/.key.
  TestCa(std::string dir, std::string name);

  const TestCert& ca() const { return ca_; }

  // Issues a server certificate (extendedKeyUsage serverAuth) with subject CN `name` and
  // subjectAltNames `dns_names` and `ips`, written to <dir>/<name>.crt and .key (replacing
  // earlier files of that name). Each certificate gets a fresh serial number.
  TestCert Issue(const std::string& name, const std::vector<std::string>& dns_names,
                 const std::vector<std::string>& ips = {});

 private:
  std::string dir_;
  std::string name_;
  TestCert ca_;
  uint64_t next_serial_;
};

}  // namespace peregrine::testing

#endif  // PEREGRINE_TESTS_TESTING_TEST_PKI_H_
