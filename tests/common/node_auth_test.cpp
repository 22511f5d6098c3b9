// common/node_auth: nonces, proofs and secret files of the verifier nodes' shared secret (the
// primitives are tested in tests/common/crypto_test.cpp).
#include "common/node_auth.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

namespace leap::node_auth {
namespace {

TEST(NodeAuth, ProofsDependOnSecretAndNonce) {
  const auto n1 = make_nonce();
  const auto n2 = make_nonce();
  ASSERT_TRUE(n1) << n1.err().message;
  ASSERT_TRUE(n2) << n2.err().message;
  EXPECT_EQ(n1->size(), 64u);
  EXPECT_NE(*n1, *n2);
  EXPECT_EQ(node_proof("s", *n1), node_proof("s", *n1));
  EXPECT_NE(node_proof("s", *n1), node_proof("t", *n1));
  EXPECT_NE(node_proof("s", *n1), node_proof("s", *n2));
  // The proof is the HMAC of the labelled nonce: what every node deployed so far checks.
  EXPECT_EQ(node_proof("s3cret", std::string(64, 'a')),
            "bbd28c35a8b22bef648eecd50608a3b1753ce3bd8c48a48659546dbfd1847d3a");
}

TEST(NodeAuth, SecretFilesAreTrimmedAndErrorsNameTheFile) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("leap-node-auth-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "secret") << "s3cret\n";
  std::ofstream(dir / "empty") << "\n";
  auto ok = read_secret_file((dir / "secret").string());
  ASSERT_TRUE(ok) << ok.err().message;
  EXPECT_EQ(*ok, "s3cret");
  auto empty = read_secret_file((dir / "empty").string());
  ASSERT_FALSE(empty);
  EXPECT_NE(empty.err().message.find("empty"), std::string::npos);
  auto missing = read_secret_file((dir / "nope").string());
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.err().message.find((dir / "nope").string()), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace leap::node_auth
