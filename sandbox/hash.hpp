// SHA-256, for content-addressed cache keys.
#pragma once

#include <string>
#include <string_view>

namespace leap::sandbox {

// Lower-case hex SHA-256 of `data` (FIPS 180-4). Pure function.
std::string sha256_hex(std::string_view data);

}  // namespace leap::sandbox
