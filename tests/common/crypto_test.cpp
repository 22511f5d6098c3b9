// common/crypto.hpp against published vectors (FIPS 180-4's SHA-256 examples, RFC 4231's
// HMAC-SHA256 cases) and against digests the hand-written SHA-256 it replaced computed, so that
// the sandbox's cache keys stay byte-identical and existing caches stay valid.
#include "common/crypto.hpp"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

namespace leap::crypto {
namespace {

struct digest_case {
  std::string input;
  const char* expected;
};

std::string alphabet_prefix(std::size_t n) {
  std::string out;
  for (std::size_t i = 0; i < n; ++i) {
    out.push_back(static_cast<char>('a' + i % 26));
  }
  return out;
}

TEST(Crypto, Sha256KnownVectors) {
  const std::vector<digest_case> cases = {
      {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
      {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
      {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
       "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
      {std::string(1000000, 'a'),
       "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(sha256_hex(c.input), c.expected) << c.input.size();
  }
}

// Digests computed by the removed sandbox/hash.cpp: lengths around the padding boundaries (one and
// two final blocks), every byte value, and a key material shaped as engine_native.cpp builds it.
TEST(Crypto, Sha256MatchesTheKeysOfExistingCaches) {
  const std::vector<digest_case> cases = {
      {alphabet_prefix(55), "595615dbe4f0f407ae397d08b4c2cb870cb9b0e11937416f950c5160acf9c005"},
      {alphabet_prefix(56), "784f623b787495078e93ff28a25b581df0584055a7e71d8cd90c454716b92f51"},
      {alphabet_prefix(63), "5ca3e1ef5207490eac01a795e5cc94d59582a5118bf9534665c8668d87aa647c"},
      {alphabet_prefix(64), "2fcd5a0d60e4c941381fcc4e00a4bf8be422c3ddfafb93c809e8d1e2bfffae8e"},
      {alphabet_prefix(65), "1b3cd1877ab2f2f19f7be001722554f336cb799df0329de0bb4c118dc6abc06d"},
      {alphabet_prefix(119), "faef67da856d6fd9c8d12f9ed0a4fefd3cf0ce085ab43e2907418d457e3c354b"},
      {alphabet_prefix(120), "c9512b08619c19fbb503c7da6b46ef20301e5f7a7a5f43989182398536f5c5c8"},
      {alphabet_prefix(127), "1b9907986f18ddc2b37e18be502d82d69d6e18bb9dff9e16f2aceea7d88cb933"},
      {alphabet_prefix(128), "6c05be2c4268843ae47e68e611277ce62c02153f2f4d2e1e2a1a4b44f766cf74"},
      {alphabet_prefix(129), "cd6bba8374324cbcc0c296b94f35299c0b9820393116358ac3afaf091a4955a5"},
      {[] {
         std::string all;
         for (int i = 0; i < 256; ++i) {
           all.push_back(static_cast<char>(i));
         }
         return all;
       }(),
       "40aff2e9d2d8922e47afd4648e6967497158785fbd1da870e7110266bf944880"},
      {"harness-object\ng++ (Debian 12.2.0-14) 12.2.0\ng++\n-O2\n-c\nharness.cpp\n-o\nharness.o\n"
       "int main() { return 0; }\n",
       "1b0873d20081d78e8c75e9669a44605d97018fa7cb29603794c4ef93cb5c0412"},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(sha256_hex(c.input), c.expected) << c.input.size();
  }
}

struct hmac_case {
  std::string key;
  std::string message;
  const char* expected;
};

TEST(Crypto, HmacSha256MatchesRfc4231) {
  const std::vector<hmac_case> cases = {
      {std::string(20, '\x0b'), "Hi There",
       "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
      {"Jefe", "what do ya want for nothing?",
       "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
      // A key longer than SHA-256's block is hashed first.
      {std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First",
       "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
      // An empty key and message are valid input.
      {"", "", "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad"},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(hmac_sha256_hex(c.key, c.message), c.expected);
  }
}

TEST(Crypto, ConstantTimeEqual) {
  struct row {
    std::string a;
    std::string b;
    bool equal;
  };
  const std::vector<row> rows = {
      {"", "", true},
      {"abc", "abc", true},
      {"abc", "abd", false},
      {"abc", "abcd", false},
      {"a", "", false},
      {std::string("a\0b", 3), std::string("a\0c", 3), false},  // not a C-string compare
  };
  for (const auto& r : rows) {
    EXPECT_EQ(constant_time_equal(r.a, r.b), r.equal) << r.a << "|" << r.b;
  }
}

TEST(Crypto, RandomHexIsFreshLowerCaseHex) {
  std::set<std::string> seen;
  for (int i = 0; i < 16; ++i) {
    auto r = random_hex(32);
    ASSERT_TRUE(r) << r.err().message;
    ASSERT_EQ(r->size(), 64U);
    EXPECT_EQ(r->find_first_not_of("0123456789abcdef"), std::string::npos) << *r;
    seen.insert(*r);
  }
  EXPECT_EQ(seen.size(), 16U);
  auto empty = random_hex(0);
  ASSERT_TRUE(empty) << empty.err().message;
  EXPECT_EQ(*empty, "");
}

}  // namespace
}  // namespace leap::crypto
