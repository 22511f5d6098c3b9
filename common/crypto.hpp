// Hashing, message authentication and random tokens, through OpenSSL's libcrypto (no hand-written
// primitives): SHA-256 for the sandbox's content-addressed cache keys and the verifier's code
// hashes, HMAC-SHA256 and constant-time comparison for the verifier nodes' shared-secret proof
// and the daemon's bearer token, and nonces from OpenSSL's CSPRNG. Every function is thread-safe.
//
// The digests are lower-case hex, as every cache key written so far is: a key computed by this
// code is byte-identical to one computed before, so existing caches stay valid.
#pragma once

#include "common/result.hpp"

#include <cstddef>
#include <string>
#include <string_view>

namespace leap::crypto {

// Lower-case hex SHA-256 of `data` (FIPS 180-4), 64 digits. Pure function. OpenSSL's SHA-256
// fails only on allocation failure or a broken installation (no default provider): the process
// then aborts with OpenSSL's reason on stderr, as it would on any failed allocation.
[[nodiscard]] std::string sha256_hex(std::string_view data);

// Lower-case hex HMAC-SHA256 of `message` under `key` (RFC 2104), 64 digits. Pure function; fails
// as sha256_hex does.
[[nodiscard]] std::string hmac_sha256_hex(std::string_view key, std::string_view message);

// Whether a == b, in time that depends on their lengths only (not on where they differ):
// CRYPTO_memcmp over the common length. Pure function.
[[nodiscard]] bool constant_time_equal(std::string_view a, std::string_view b);

// `bytes` random bytes from OpenSSL's CSPRNG (RAND_bytes, seeded by the OS), as 2 * bytes
// lower-case hex digits. An error (with OpenSSL's reason) when the generator cannot be seeded.
[[nodiscard]] result<std::string> random_hex(std::size_t bytes);

}  // namespace leap::crypto
