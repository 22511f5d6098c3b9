#include "actors/node_auth.hpp"

#include "sandbox/hash.hpp"

#include <array>
#include <fstream>
#include <random>
#include <sstream>

namespace leap::actors {
namespace {

std::string hex_to_bytes(std::string_view hex) {
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return c - 'A' + 10;
  };
  std::string out;
  out.reserve(hex.size() / 2);
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>((nibble(hex[i]) << 4) | nibble(hex[i + 1])));
  }
  return out;
}

}  // namespace

std::string hmac_sha256_hex(std::string_view key, std::string_view message) {
  constexpr std::size_t block = 64;  // SHA-256's block size
  std::string k = key.size() > block ? hex_to_bytes(sandbox::sha256_hex(key)) : std::string(key);
  k.resize(block, '\0');
  std::string inner(block, '\0');
  std::string outer(block, '\0');
  for (std::size_t i = 0; i < block; ++i) {
    inner[i] = static_cast<char>(k[i] ^ 0x36);
    outer[i] = static_cast<char>(k[i] ^ 0x5c);
  }
  inner.append(message);
  outer += hex_to_bytes(sandbox::sha256_hex(inner));
  return sandbox::sha256_hex(outer);
}

bool constant_time_equal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  }
  return diff == 0;
}

std::string make_nonce() {
  static constexpr char digits[] = "0123456789abcdef";
  std::random_device device;
  std::string out;
  for (int i = 0; i < 8; ++i) {
    const auto word = static_cast<std::uint32_t>(device());
    for (int b = 0; b < 4; ++b) {
      const auto byte = (word >> (8 * b)) & 0xffU;
      out.push_back(digits[byte >> 4]);
      out.push_back(digits[byte & 0xfU]);
    }
  }
  return out;
}

std::string node_proof(std::string_view secret, std::string_view nonce) {
  // A fixed label keeps the proof from being reusable as an HMAC of the bare nonce elsewhere.
  std::string message = "leap-verifier-node/1:";
  message.append(nonce);
  return hmac_sha256_hex(secret, message);
}

result<std::string> read_secret_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return error{path + ": cannot read the secret file"};
  std::ostringstream text;
  text << in.rdbuf();
  std::string secret = text.str();
  while (!secret.empty() && (secret.back() == '\n' || secret.back() == '\r' ||
                             secret.back() == ' ' || secret.back() == '\t')) {
    secret.pop_back();
  }
  if (secret.empty()) return error{path + ": the secret file is empty"};
  return secret;
}

}  // namespace leap::actors
