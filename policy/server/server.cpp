// The server is split as llama.cpp splits tools/server: the transport (sockets, httplib, the one
// route wrapper: server_transport), the state with its rules (server_state), and the routes as
// tables (server_generation_routes.cpp, server_control_routes.cpp). This file only wires them.
#include "policy/server/server.hpp"

#include "policy/server/detail/server_metrics.hpp"
#include "policy/server/detail/server_routes.hpp"
#include "policy/server/detail/server_state.hpp"
#include "policy/server/detail/server_transport.hpp"

#include <algorithm>
#include <mutex>

namespace leap::policy {

struct policy_server::impl {
  impl(server_config c, std::shared_ptr<policy_backend> b)
      : config(std::move(c)),
        backend(std::move(b)),
        state(config.weight_version, metrics),
        transport(config) {}

  server_config config;
  std::shared_ptr<policy_backend> backend;
  server_metrics metrics;
  server_state state;
  http_transport transport;  // last: stopped and destroyed first, before what routes use
  int port = 0;
  std::once_flag stop_once;
};

result<std::unique_ptr<policy_server>> policy_server::start(
    server_config config, std::shared_ptr<policy_backend> backend) {
  if (!backend) {
    return error{"policy server: no backend given"};
  }
  if (config.stream_chunk_tokens == 0) {
    config.stream_chunk_tokens = 1;
  }
  if (!config.vocab) {
    config.vocab = byte_vocabulary();
  }
  config.vocab_size = std::max(config.vocab_size, config.vocab->vocab_size());
  if (config.threads == 0) {
    return error{"policy server: 'threads' must be at least 1"};
  }
  if (config.max_model_len < 2) {
    return error{"policy server: 'max_model_len' must be at least 2 (got " +
                 std::to_string(config.max_model_len) + ")"};
  }
  if (config.port < 0 || config.port > 65535) {
    return error{"policy server: port " + std::to_string(config.port) + " is not in [0, 65535]"};
  }
  if (stages_tensors(config.weight_transfer_backend) &&
      !backend->supports_weight_transfer(config.weight_transfer_backend)) {
    return error{"policy server: the " + backend->name() + " backend has no '" +
                 to_string(config.weight_transfer_backend) +
                 "' weight-transfer engine (disk works with every backend; nccl and ipc need the "
                 "LibTorch backend, --model)"};
  }
  auto state = std::make_unique<impl>(std::move(config), std::move(backend));
  impl& s = *state;
  const server_context context{s.config, *s.backend, s.state, s.metrics};
  std::vector<route> routes = generation_routes(context);
  for (auto& r : control_routes(context)) {
    routes.push_back(std::move(r));
  }
  auto port =
      s.transport.start(std::move(routes), s.metrics, [&s] { return s.state.weight_version(); });
  if (!port) {
    return port.err();
  }
  s.port = *port;
  return std::unique_ptr<policy_server>(new policy_server(std::move(state)));
}

policy_server::policy_server(std::unique_ptr<impl> state) : impl_(std::move(state)) {}

policy_server::~policy_server() { stop(); }

int policy_server::port() const { return impl_->port; }

const std::string& policy_server::host() const { return impl_->config.host; }

std::string policy_server::base_url() const {
  const std::string& h = impl_->config.host;
  const bool v6 = h.find(':') != std::string::npos;
  return "http://" + (v6 ? "[" + h + "]" : h) + ":" + std::to_string(impl_->port);
}

std::int64_t policy_server::weight_version() const { return impl_->state.weight_version(); }

void policy_server::stop() {
  std::call_once(impl_->stop_once, [this] {
    impl_->state.stop();
    impl_->transport.stop();
  });
}

}  // namespace leap::policy
