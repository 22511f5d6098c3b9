#include "common/crypto.hpp"

#include <climits>

#include <cstdio>
#include <cstdlib>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <vector>

namespace leap::crypto {
namespace {

std::string openssl_reason() {
  const unsigned long code = ERR_get_error();
  if (code == 0) {
    return "no reason given";
  }
  char text[256];
  ERR_error_string_n(code, text, sizeof text);
  return text;
}

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "leap: OpenSSL %s failed: %s\n", what, openssl_reason().c_str());
  std::abort();
}

std::string to_hex(const unsigned char* bytes, std::size_t n) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n);
  for (std::size_t i = 0; i < n; ++i) {
    out.push_back(digits[bytes[i] >> 4U]);
    out.push_back(digits[bytes[i] & 0xfU]);
  }
  return out;
}

}  // namespace

std::string sha256_hex(std::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  if (EVP_Digest(data.data(), data.size(), digest, &size, EVP_sha256(), nullptr) != 1) {
    fail("SHA-256");
  }
  return to_hex(digest, size);
}

std::string hmac_sha256_hex(std::string_view key, std::string_view message) {
  // HMAC() takes the key length as an int; a longer key is hashed first anyway (RFC 2104), so
  // hashing it here gives the same MAC.
  std::string hashed;
  if (key.size() > INT_MAX) {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int size = 0;
    if (EVP_Digest(key.data(), key.size(), digest, &size, EVP_sha256(), nullptr) != 1) {
      fail("SHA-256");
    }
    hashed.assign(reinterpret_cast<const char*>(digest), size);
    key = hashed;
  }
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  if (HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
           reinterpret_cast<const unsigned char*>(message.data()), message.size(), mac,
           &size) == nullptr) {
    fail("HMAC-SHA256");
  }
  return to_hex(mac, size);
}

bool constant_time_equal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) {
    return false;
  }
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

result<std::string> random_hex(std::size_t bytes) {
  if (bytes > INT_MAX) {
    return error{"random_hex: " + std::to_string(bytes) + " bytes is too many"};
  }
  std::vector<unsigned char> buffer(bytes);
  if (bytes > 0 && RAND_bytes(buffer.data(), static_cast<int>(bytes)) != 1) {
    return error{"OpenSSL's random generator failed: " + openssl_reason()};
  }
  return to_hex(buffer.data(), bytes);
}

}  // namespace leap::crypto
