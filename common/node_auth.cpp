#include "common/node_auth.hpp"

#include "common/crypto.hpp"

#include <fstream>
#include <sstream>

namespace leap::node_auth {

result<std::string> make_nonce() {
  auto nonce = crypto::random_hex(32);
  if (!nonce) {
    return nonce.err().wrap("cannot make a nonce for the verifier node's challenge");
  }
  return nonce;
}

std::string node_proof(std::string_view secret, std::string_view nonce) {
  // A fixed label keeps the proof from being reusable as an HMAC of the bare nonce elsewhere.
  std::string message = "leap-verifier-node/1:";
  message.append(nonce);
  return crypto::hmac_sha256_hex(secret, message);
}

result<std::string> read_secret_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return error{path + ": cannot read the secret file"};
  }
  std::ostringstream text;
  text << in.rdbuf();
  std::string secret = text.str();
  while (!secret.empty() && (secret.back() == '\n' || secret.back() == '\r' ||
                             secret.back() == ' ' || secret.back() == '\t')) {
    secret.pop_back();
  }
  if (secret.empty()) {
    return error{path + ": the secret file is empty"};
  }
  return secret;
}

}  // namespace leap::node_auth
