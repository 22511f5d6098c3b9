#include "tools/daemon/client.hpp"

#include "tools/daemon/home.hpp"

#include <httplib.h>
#include <nlohmann/json.hpp>

namespace leap::daemon {

result<daemon_client> daemon_client::open(const std::filesystem::path& home) {
  daemon_client c;
  c.home_ = home;
  const auto port_file = home / "port";
  std::error_code ec;
  if (!std::filesystem::exists(port_file, ec)) {
    return error{"no daemon is running with home " + home.string() + " (no " + port_file.string() +
                 "); start one with `leap daemon --home " + home.string() +
                 "`, or point --home / LEAP_HOME at its home"};
  }
  auto text = read_text(port_file);
  if (!text) {
    return text.err();
  }
  try {
    c.port_ = std::stoi(*text);
  } catch (const std::exception&) {
    return error{port_file.string() + ": expected a port number"};
  }
  auto token = read_token(home);
  if (!token) {
    return token.err();
  }
  c.token_ = *token;
  return c;
}

namespace {

httplib::Headers with_token(const std::string& token,
                            const std::vector<std::pair<std::string, std::string>>& extra) {
  httplib::Headers h{{"Authorization", "Bearer " + token}};
  for (const auto& [k, v] : extra) {
    h.emplace(k, v);
  }
  return h;
}

void set_timeouts(httplib::Client& cli, double timeout_s) {
  const auto whole = static_cast<time_t>(timeout_s);
  const auto micro = static_cast<time_t>((timeout_s - static_cast<double>(whole)) * 1e6);
  cli.set_connection_timeout(5, 0);
  cli.set_read_timeout(whole, micro);
  cli.set_write_timeout(whole, micro);
}

}  // namespace

result<client_reply> daemon_client::get(const std::string& path, double timeout_s) const {
  httplib::Client cli("127.0.0.1", port_);
  set_timeouts(cli, timeout_s);
  auto res = cli.Get(path.c_str(), with_token(token_, {}));
  if (!res) {
    return error{"no answer from the daemon at 127.0.0.1:" + std::to_string(port_) + " (home " +
                 home_.string() + "): " + httplib::to_string(res.error()) +
                 "; is `leap daemon` running?"};
  }
  return client_reply{res->status, res->body};
}

result<client_reply> daemon_client::post(
    const std::string& path, const std::string& body, const std::string& content_type,
    const std::vector<std::pair<std::string, std::string>>& headers, double timeout_s) const {
  httplib::Client cli("127.0.0.1", port_);
  set_timeouts(cli, timeout_s);
  auto res = cli.Post(path.c_str(), with_token(token_, headers), body, content_type.c_str());
  if (!res) {
    return error{"no answer from the daemon at 127.0.0.1:" + std::to_string(port_) + " (home " +
                 home_.string() + "): " + httplib::to_string(res.error()) +
                 "; is `leap daemon` running?"};
  }
  return client_reply{res->status, res->body};
}

std::string error_message(const client_reply& reply) {
  auto j = nlohmann::json::parse(reply.body, nullptr, false);
  if (!j.is_discarded() && j.is_object() && j.contains("error") && j["error"].is_object() &&
      j["error"].contains("message") && j["error"]["message"].is_string()) {
    return j["error"]["message"].get<std::string>();
  }
  return "HTTP " + std::to_string(reply.status) + ": " + reply.body;
}

}  // namespace leap::daemon
