#include "actors/node_guard.hpp"

#include "actors/node_protocol.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/atom.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/detail/socket_guard.hpp>
#include <caf/io/basp_broker.hpp>
#include <caf/io/middleman.hpp>
#include <caf/io/middleman_actor_impl.hpp>
#include <caf/io/network/default_multiplexer.hpp>
#include <caf/io/network/doorman_impl.hpp>
#include <caf/io/network/interfaces.hpp>
#include <caf/io/network/native_socket.hpp>
#include <caf/io/network/stream_impl.hpp>
#include <caf/io/scribe.hpp>
#include <caf/make_message.hpp>
#include <caf/openssl/session.hpp>
#include <caf/policy/tcp.hpp>

#include <condition_variable>
#include <deque>
#include <sys/socket.h>
#include <thread>

namespace leap::actors {

// --- the frame checks (pure) ---

namespace {

constexpr std::uint8_t op_server_handshake = 0;
constexpr std::uint8_t op_client_handshake = 1;
constexpr std::uint8_t op_direct_message = 2;
constexpr std::uint8_t op_monitor_message = 4;
constexpr std::uint8_t op_heartbeat = 6;
constexpr std::uint8_t named_receiver_flag = 0x01;
// The registered name CAF's BASP queries on every node it learns of (basp_broker.cpp,
// learned_new_node): an atom's value, as the header's destination.
const auto spawn_server_name = static_cast<std::uint64_t>(caf::atom("SpawnServ"));

std::uint32_t read_u32(std::string_view b, std::size_t at) {
  std::uint32_t v = 0;
  for (std::size_t i = 0; i < 4; ++i) {
    v = (v << 8) | static_cast<unsigned char>(b[at + i]);
  }
  return v;
}

std::uint64_t read_u64(std::string_view b, std::size_t at) {
  return (std::uint64_t{read_u32(b, at)} << 32) | read_u32(b, at + 4);
}

// CAF's varbyte sequence length (7 bits per byte, at most 5 bytes for 32 bits).
bool read_varbyte(std::string_view b, std::size_t& at, std::uint32_t& out) {
  out = 0;
  for (int n = 0; n < 5; ++n) {
    if (at >= b.size()) {
      return false;
    }
    const auto byte = static_cast<unsigned char>(b[at++]);
    out |= static_cast<std::uint32_t>(byte & 0x7fU) << (7 * n);
    if ((byte & 0x80U) == 0) {
      return true;
    }
  }
  return false;
}

}  // namespace

bool parse_basp_header(std::string_view bytes, basp_header& out) {
  if (bytes.size() != basp_header_bytes) {
    return false;
  }
  out.operation = static_cast<std::uint8_t>(bytes[0]);
  out.flags = static_cast<std::uint8_t>(bytes[3]);
  out.payload_len = read_u32(bytes, 4);
  out.dest_actor = read_u64(bytes, 24);
  return true;
}

std::string direct_message_types(std::string_view payload) {
  std::size_t at = 0;
  std::uint32_t stack = 0;
  if (!read_varbyte(payload, at, stack) || stack != 0) {
    return {};
  }
  if (payload.size() < at + 2 || payload[at] != 0 || payload[at + 1] != 0) {
    return {};
  }
  at += 2;
  std::uint32_t length = 0;
  if (!read_varbyte(payload, at, length) || length > payload.size() - at) {
    return {};
  }
  return std::string(payload.substr(at, length));
}

frame_guard::frame_guard(frame_limits limits, bool accepted, before_auth_messages allowed)
    : limits_(limits), accepted_(accepted), allowed_(std::move(allowed)) {}

std::string frame_guard::check(std::string_view chunk, bool admitted) {
  handshake_payload_ = {};
  return expect_payload_ ? check_payload(chunk, admitted) : check_header(chunk, admitted);
}

std::string frame_guard::check_header(std::string_view chunk, bool admitted) {
  if (!parse_basp_header(chunk, header_)) {
    return "a frame header of " + std::to_string(chunk.size()) + " bytes (BASP's has " +
           std::to_string(basp_header_bytes) + ")";
  }
  const bool trusted = !accepted_ || admitted;
  const std::size_t limit = trusted ? limits_.after_auth : limits_.before_auth;
  if (header_.payload_len > limit) {
    return "a frame of " + std::to_string(header_.payload_len) + " bytes" +
           (trusted ? "" : " before proving the secret") + " (at most " + std::to_string(limit) +
           ")";
  }
  if (!trusted) {
    switch (header_.operation) {
      case op_client_handshake:
      case op_direct_message:
      case op_monitor_message:
      case op_heartbeat:
        break;
      default:
        return "frame type " + std::to_string(header_.operation) +
               " before proving the secret (only the handshake, hello and auth are taken)";
    }
  }
  expect_payload_ = header_.payload_len > 0;
  return {};
}

std::string frame_guard::check_payload(std::string_view chunk, bool admitted) {
  expect_payload_ = false;
  if (chunk.size() != header_.payload_len) {
    return "a payload of " + std::to_string(chunk.size()) + " bytes after a header that said " +
           std::to_string(header_.payload_len);
  }
  const bool trusted = !accepted_ || admitted;
  if (!trusted && header_.operation == op_direct_message) {
    // CAF's own query goes out right after its handshake, before the orchestrator's hello.
    if (!spawn_server_query_taken_ && !allowed_.spawn_server_query.empty() &&
        (header_.flags & named_receiver_flag) != 0 && header_.dest_actor == spawn_server_name &&
        chunk == allowed_.spawn_server_query) {
      spawn_server_query_taken_ = true;
      return {};
    }
    const auto types = direct_message_types(chunk);
    // The peer's answer to the node's own query, sent as the node learned of the peer.
    if (!spawn_server_reply_taken_ && !allowed_.spawn_server_reply_types.empty() &&
        (header_.flags & named_receiver_flag) == 0 && chunk.size() <= spawn_server_reply_bytes &&
        types == allowed_.spawn_server_reply_types) {
      spawn_server_reply_taken_ = true;
      return {};
    }
    bool allowed = false;
    for (const auto& a : allowed_.types) {
      allowed = allowed || (!types.empty() && types == a);
    }
    if (!allowed) {
      return "a message of types '" + types.substr(0, 200) +
             "' before proving the secret (only CAF's handshake query, hello and auth are taken)";
    }
  }
  if (header_.operation == op_client_handshake) {
    handshake_payload_ = chunk;
  }
  return {};
}

// --- admitted nodes ---

void admitted_nodes::add(const caf::node_id& node) {
  std::lock_guard lock(mutex_);
  ++count_[node];
}

void admitted_nodes::remove(const caf::node_id& node) {
  std::lock_guard lock(mutex_);
  auto it = count_.find(node);
  if (it != count_.end() && --it->second <= 0) {
    count_.erase(it);
  }
}

bool admitted_nodes::contains(const caf::node_id& node) const {
  std::lock_guard lock(mutex_);
  return count_.count(node) > 0;
}

namespace {

// A direct message's payload as BASP writes it: an empty forwarding stack, then the message.
std::string direct_message_payload(caf::actor_system& system, const caf::message& msg) {
  std::vector<char> bytes;
  caf::binary_serializer sink{system, bytes};
  std::vector<caf::strong_actor_ptr> stack;
  auto copy = msg;  // CAF 0.17's serializer takes its arguments by non-const reference
  if (auto err = sink(stack, copy)) {
    return {};
  }
  return {bytes.begin(), bytes.end()};
}

}  // namespace

before_auth_messages handshake_messages(caf::actor_system& system) {
  before_auth_messages out;
  for (const auto& msg :
       {caf::make_message(node_hello_atom_v), caf::make_message(node_auth_atom_v, std::string{})}) {
    if (auto types = direct_message_types(direct_message_payload(system, msg)); !types.empty()) {
      out.types.push_back(std::move(types));
    }
  }
  out.spawn_server_query = direct_message_payload(
      system, caf::make_message(caf::sys_atom_v, caf::get_atom_v, std::string("info")));
  // As scheduled_actor answers it (CAF 0.17's scheduled_actor.cpp, categorize).
  out.spawn_server_reply_types = direct_message_types(direct_message_payload(
      system, caf::make_message(caf::ok_atom_v, std::string("info"), caf::strong_actor_ptr{},
                                std::string("spawn_server"))));
  return out;
}

// --- CAF I/O glue ---

namespace {

namespace io = caf::io;
namespace net = caf::io::network;
using default_mpx = net::default_multiplexer;

struct ssl_policy {
  explicit ssl_policy(caf::openssl::session_ptr session) : session_(std::move(session)) {}
  net::rw_state read_some(size_t& result, net::native_socket fd, void* buf, size_t len) {
    return session_->read_some(result, fd, buf, len);
  }
  net::rw_state write_some(size_t& result, net::native_socket fd, const void* buf, size_t len) {
    return session_->write_some(result, fd, buf, len);
  }
  bool try_accept(net::native_socket& result, net::native_socket fd) {
    return caf::policy::tcp::try_accept(result, fd) && session_->try_accept(result);
  }
  bool must_read_more(net::native_socket fd, size_t threshold) {
    return session_->must_read_more(fd, threshold);
  }

 private:
  caf::openssl::session_ptr session_;
};

// What the deadline thread knows of one accepted connection: its socket while the scribe lives
// (CAF closes the socket only when the scribe's stream is destroyed, after ~guarded_scribe has
// cleared `fd` under the lock, so a shutdown can never reach a socket number reused meanwhile)
// and the node the connection belongs to, once its handshake said.
struct auth_watch {
  std::mutex mutex;
  net::native_socket fd = net::invalid_native_socket;
  bool known_peer = false;
  caf::node_id peer;
  std::string where;  // "addr:port", for the log
};

// One thread per guarded middleman that closes accepted connections still unproven at their
// deadline. CAF 0.17's multiplexer has no timers; a shutdown(2) from here makes the multiplexer
// read EOF, and BASP drops the connection as any lost one. It holds only weak references, so
// that the last owner of a scribe (and of this object) is never this thread.
class auth_deadlines {
 public:
  auth_deadlines(std::chrono::milliseconds timeout, std::shared_ptr<admitted_nodes> admitted,
                 log_sink log)
      : timeout_(timeout), admitted_(std::move(admitted)), log_(std::move(log)) {}

  ~auth_deadlines() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    changed_.notify_all();
    if (thread_.joinable()) {
      thread_.join();
    }
  }

  auth_deadlines(const auth_deadlines&) = delete;
  auth_deadlines& operator=(const auth_deadlines&) = delete;

  // The connection's deadline is now + timeout. Every deadline has the same timeout, so the
  // queue is in deadline order.
  void watch(std::weak_ptr<auth_watch> connection) {
    std::lock_guard lock(mutex_);
    queue_.emplace_back(std::chrono::steady_clock::now() + timeout_, std::move(connection));
    if (!thread_.joinable()) {
      thread_ = std::thread([this] { run(); });
    }
    changed_.notify_all();
  }

 private:
  void run() {
    std::unique_lock lock(mutex_);
    while (!stop_) {
      if (queue_.empty()) {
        changed_.wait(lock);
        continue;
      }
      const auto due = queue_.front().first;
      if (std::chrono::steady_clock::now() < due) {
        changed_.wait_until(lock, due);
        continue;
      }
      auto connection = std::move(queue_.front().second);
      queue_.pop_front();
      lock.unlock();
      expire(connection);
      lock.lock();
    }
  }

  void expire(const std::weak_ptr<auth_watch>& connection) {
    auto w = connection.lock();
    if (!w) {
      return;
    }
    std::string where;
    {
      std::lock_guard lock(w->mutex);
      if (w->fd == net::invalid_native_socket ||
          (w->known_peer && admitted_ && admitted_->contains(w->peer))) {
        return;
      }
      ::shutdown(w->fd, SHUT_RDWR);
      where = w->where;
    }
    emit(log_, log::level::warn,
         "closed the connection of " + where + ": no proof of the secret within " +
             std::to_string(timeout_.count()) + " ms (auth_timeout)");
  }

  const std::chrono::milliseconds timeout_;
  const std::shared_ptr<admitted_nodes> admitted_;
  const log_sink log_;
  std::mutex mutex_;
  std::condition_variable changed_;
  bool stop_ = false;
  std::deque<std::pair<std::chrono::steady_clock::time_point, std::weak_ptr<auth_watch>>> queue_;
  std::thread thread_;  // started with the first watch: an orchestrator's middleman never needs it
};

struct shared_guard {
  guard_settings settings;
  before_auth_messages allowed;
  std::unique_ptr<auth_deadlines> deadlines;  // null when auth_timeout is 0
};

// A scribe (CAF's connection) whose every chunk passes its frame_guard before BASP sees it.
template <class Policy>
class guarded_scribe final : public io::scribe {
 public:
  template <class... Ts>
  guarded_scribe(default_mpx& mpx, net::native_socket fd, bool accepted,
                 std::shared_ptr<const shared_guard> shared, Ts&&... policy_args)
      : scribe(net::conn_hdl_from_socket(fd)),
        stream_(mpx, fd, std::forward<Ts>(policy_args)...),
        shared_(std::move(shared)),
        guard_(shared_->settings.limits, accepted, shared_->allowed),
        system_(&mpx.system()) {
    if (accepted && shared_->deadlines) {
      watch_ = std::make_shared<auth_watch>();
      watch_->fd = fd;
      watch_->where = addr() + ":" + std::to_string(port());
      shared_->deadlines->watch(watch_);
    }
  }

  ~guarded_scribe() override {
    if (watch_) {
      std::lock_guard lock(watch_->mutex);
      watch_->fd = net::invalid_native_socket;
    }
  }

  guarded_scribe(const guarded_scribe&) = delete;
  guarded_scribe& operator=(const guarded_scribe&) = delete;

  bool consume(caf::execution_unit* ctx, const void* buf, size_t n) override {
    if (detached()) {
      return false;
    }
    const std::string_view chunk(static_cast<const char*>(buf), n);
    const bool admitted =
        known_peer_ && shared_->settings.admitted && shared_->settings.admitted->contains(peer_);
    if (auto why = guard_.check(chunk, admitted); !why.empty()) {
      emit(shared_->settings.log, log::level::warn,
           "closed the connection of " + addr() + ":" + std::to_string(port()) + ": " + why);
      // BASP learns of it as of any lost connection; nothing was allocated for the frame.
      io_failure(ctx, net::operation::read);
      return false;
    }
    if (auto hs = guard_.handshake_payload(); !hs.empty()) {
      caf::binary_deserializer source{*system_, hs.data(), hs.size()};
      caf::node_id node;
      if (!source(node)) {
        peer_ = node;
        known_peer_ = true;
        if (watch_) {
          std::lock_guard lock(watch_->mutex);
          watch_->peer = node;
          watch_->known_peer = true;
        }
      }
    }
    return scribe::consume(ctx, buf, n);
  }

  void configure_read(io::receive_policy::config config) override {
    stream_.configure_read(config);
    if (!launched_) {
      launch();
    }
  }
  void ack_writes(bool enable) override { stream_.ack_writes(enable); }
  std::vector<char>& wr_buf() override { return stream_.wr_buf(); }
  std::vector<char>& rd_buf() override { return stream_.rd_buf(); }
  void graceful_shutdown() override {
    stream_.graceful_shutdown();
    detach(&stream_.backend(), false);
  }
  void flush() override { stream_.flush(this); }
  std::string addr() const override {
    auto x = net::remote_addr_of_fd(stream_.fd());
    return x ? *x : std::string{};
  }
  uint16_t port() const override {
    auto x = net::remote_port_of_fd(stream_.fd());
    return x ? *x : 0;
  }
  void add_to_loop() override { stream_.activate(this); }
  void remove_from_loop() override { stream_.passivate(); }

 private:
  void launch() {
    launched_ = true;
    stream_.start(this);
    // With TLS, SSL_accept or SSL_connect may still need a write (as caf::openssl does).
    if constexpr (std::is_same_v<Policy, ssl_policy>) {
      stream_.force_empty_write(this);
    }
  }

  bool launched_ = false;
  net::stream_impl<Policy> stream_;
  std::shared_ptr<const shared_guard> shared_;
  frame_guard guard_;
  caf::actor_system* system_;
  caf::node_id peer_;
  bool known_peer_ = false;
  std::shared_ptr<auth_watch> watch_;  // accepted connections, when auth_timeout > 0
};

io::scribe_ptr make_scribe(caf::actor_system& system, default_mpx& mpx, net::native_socket fd,
                           bool accepted, const std::shared_ptr<const shared_guard>& shared) {
  if (!shared->settings.tls) {
    net::keepalive(fd, true);
    return caf::make_counted<guarded_scribe<caf::policy::tcp>>(mpx, fd, accepted, shared);
  }
  auto session = caf::openssl::make_session(system, fd, accepted);
  if (!session) {
    return nullptr;
  }
  return caf::make_counted<guarded_scribe<ssl_policy>>(mpx, fd, accepted, shared,
                                                       std::move(session));
}

class guarded_doorman final : public net::doorman_impl {
 public:
  guarded_doorman(default_mpx& mpx, net::native_socket fd,
                  std::shared_ptr<const shared_guard> shared)
      : net::doorman_impl(mpx, fd), shared_(std::move(shared)) {}

  bool new_connection() override {
    if (detached()) {
      return false;
    }
    auto& mpx = acceptor_.backend();
    auto fd = acceptor_.accepted_socket();
    caf::detail::socket_guard guard{fd};
    net::nonblocking(fd, true);
    auto scribe = make_scribe(parent()->system(), mpx, fd, true, shared_);
    if (!scribe) {
      return false;
    }
    guard.release();  // the scribe owns the socket now
    auto hdl = scribe->hdl();
    parent()->add_scribe(std::move(scribe));
    return doorman::new_connection(&mpx, hdl);
  }

 private:
  std::shared_ptr<const shared_guard> shared_;
};

class guarded_middleman final : public io::middleman_actor_impl {
 public:
  guarded_middleman(caf::actor_config& cfg, caf::actor broker,
                    std::shared_ptr<const shared_guard> shared)
      : io::middleman_actor_impl(cfg, std::move(broker)), shared_(std::move(shared)) {}

  const char* name() const override { return "leap.guarded_middleman"; }

 protected:
  caf::expected<io::scribe_ptr> connect(const std::string& host, uint16_t port) override {
    auto fd = net::new_tcp_connection(host, port);
    if (!fd) {
      return std::move(fd.error());
    }
    net::nonblocking(*fd, true);
    auto scribe = make_scribe(system(), mpx(), *fd, false, shared_);
    if (!scribe) {
      net::close_socket(*fd);
      return caf::make_error(caf::sec::cannot_connect_to_node);
    }
    return scribe;
  }

  caf::expected<io::doorman_ptr> open(uint16_t port, const char* addr, bool reuse) override {
    auto fd = net::new_tcp_acceptor_impl(port, addr, reuse);
    if (!fd) {
      return std::move(fd.error());
    }
    return caf::make_counted<guarded_doorman>(mpx(), *fd, shared_);
  }

 private:
  default_mpx& mpx() { return static_cast<default_mpx&>(system().middleman().backend()); }

  std::shared_ptr<const shared_guard> shared_;
};

}  // namespace

caf::io::middleman_actor spawn_guarded_middleman(caf::actor_system& system,
                                                 guard_settings settings) {
  auto shared = std::make_shared<shared_guard>();
  shared->allowed = handshake_messages(system);
  shared->settings = std::move(settings);
  if (shared->settings.auth_timeout.count() > 0) {
    shared->deadlines = std::make_unique<auth_deadlines>(
        shared->settings.auth_timeout, shared->settings.admitted, shared->settings.log);
  }
  auto broker = system.middleman().named_broker<io::basp_broker>(caf::atom("BASP"));
  return caf::actor_cast<io::middleman_actor>(
      system.spawn<guarded_middleman, caf::detached + caf::hidden>(
          std::move(broker), std::shared_ptr<const shared_guard>(std::move(shared))));
}

}  // namespace leap::actors
