// The shared secret of verifier nodes, as plain code: the node sends a random nonce, the
// orchestrator proves it knows the secret with HMAC-SHA256(secret, nonce), and the node compares
// the proof in constant time. The secret itself never crosses the network. No CAF.
#pragma once

#include "common/result.hpp"

#include <string>
#include <string_view>

namespace leap::actors {

// Lower-case hex HMAC-SHA256 of `message` under `key` (RFC 2104). Pure function.
[[nodiscard]] std::string hmac_sha256_hex(std::string_view key, std::string_view message);

// Whether a == b, in time that depends on their lengths only (not on where they differ).
[[nodiscard]] bool constant_time_equal(std::string_view a, std::string_view b);

// 32 random bytes from the OS (std::random_device), as 64 hex digits. Thread-safe.
[[nodiscard]] std::string make_nonce();

// The proof the orchestrator sends for a node's nonce. Pure function.
[[nodiscard]] std::string node_proof(std::string_view secret, std::string_view nonce);

// The secret in `path`: the file's text without trailing whitespace. Errors name the file: it
// cannot be read, or holds no secret.
[[nodiscard]] result<std::string> read_secret_file(const std::string& path);

}  // namespace leap::actors
