// The shared secret of verifier nodes, as plain code: the node sends a random nonce, the
// orchestrator proves it knows the secret with HMAC-SHA256(secret, nonce), and the node compares
// the proof in constant time (crypto::constant_time_equal). The secret itself never crosses the
// network. The primitives are OpenSSL's, through common/crypto.hpp (this file is part of the
// library leap::crypto). Used by actors/verifier_node (the node) and actors/remote_verifier (the
// orchestrator).
#pragma once

#include "common/result.hpp"

#include <string>
#include <string_view>

namespace leap::node_auth {

// 32 random bytes from OpenSSL's CSPRNG, as 64 lower-case hex digits; an error when the
// generator fails. Thread-safe.
[[nodiscard]] result<std::string> make_nonce();

// The proof the orchestrator sends for a node's nonce. Pure function.
[[nodiscard]] std::string node_proof(std::string_view secret, std::string_view nonce);

// The secret in `path`: the file's text without trailing whitespace. Errors name the file: it
// cannot be read, or holds no secret.
[[nodiscard]] result<std::string> read_secret_file(const std::string& path);

}  // namespace leap::node_auth
