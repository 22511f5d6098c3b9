// The client side of the control API, for `leap submit/status/cancel/logs`: finds the daemon's
// port and token in its home, sends one request with the bearer token and a timeout, and turns
// the one error shape back into a message.
#pragma once

#include "common/result.hpp"

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace leap::daemon {

struct client_reply {
  int status = 0;
  std::string body;
};

class daemon_client {
 public:
  // Reads HOME/port and HOME/token. Errors name the missing file.
  [[nodiscard]] static result<daemon_client> open(const std::filesystem::path& home);

  // One request; an error when no daemon answers (with the address and the home in the message)
  // or after `timeout_s` seconds. HTTP errors are replies, not errors.
  [[nodiscard]] result<client_reply> get(const std::string& path, double timeout_s = 30) const;
  [[nodiscard]] result<client_reply> post(
      const std::string& path, const std::string& body, const std::string& content_type,
      const std::vector<std::pair<std::string, std::string>>& headers = {},
      double timeout_s = 30) const;

  [[nodiscard]] int port() const { return port_; }

 private:
  std::filesystem::path home_;
  int port_ = 0;
  std::string token_;
};

// The message of an error reply ({"error": {"message": ...}}), else the body itself.
[[nodiscard]] std::string error_message(const client_reply& reply);

}  // namespace leap::daemon
