#include "policy/server.hpp"

#include "policy/server_generation.hpp"
#include "policy/server_metrics.hpp"
#include "policy/server_random.hpp"
#include "policy/sse.hpp"
#include "policy/wire.hpp"

#include <httplib.h>

#include <algorithm>
#include <arpa/inet.h>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <ctime>
#include <map>
#include <mutex>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

namespace leap::policy {
namespace {

using nlohmann::json;
using steady = std::chrono::steady_clock;

// ---------------------------------------------------------------------------------------------
// Connections. cpp-httplib gives a handler no way to close its connection without a reply, which
// the "drop" fault needs. So the server runs its own keep-alive loop per connection (httplib's
// process_and_close_socket is virtual) over its own stream, and a handler that wants the
// connection dropped marks it: every later write on it fails, httplib gives up on the response,
// and the loop closes the socket having sent nothing.

struct connection_state {
  bool drop = false;
};

thread_local connection_state* current_connection = nullptr;

bool wait_for(int fd, short events, std::chrono::milliseconds timeout) {
  pollfd p{fd, events, 0};
  int rc = 0;
  do {
    rc = ::poll(&p, 1, static_cast<int>(timeout.count()));
  } while (rc < 0 && errno == EINTR);
  return rc > 0;
}

void endpoint_of(int fd, bool peer, std::string& ip, int& port) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  const int rc = peer ? ::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len)
                      : ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  if (rc != 0) {
    return;
  }
  char buffer[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&addr);
    ::inet_ntop(AF_INET, &in->sin_addr, buffer, sizeof(buffer));
    port = ntohs(in->sin_port);
  } else if (addr.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&addr);
    ::inet_ntop(AF_INET6, &in6->sin6_addr, buffer, sizeof(buffer));
    port = ntohs(in6->sin6_port);
  }
  ip = buffer;
}

class socket_stream final : public httplib::Stream {
 public:
  socket_stream(int fd, std::chrono::milliseconds read_timeout,
                std::chrono::milliseconds write_timeout, const connection_state& state)
      : fd_(fd), read_timeout_(read_timeout), write_timeout_(write_timeout), state_(state) {}

  [[nodiscard]] bool has_buffered() const { return offset_ < size_; }

  // A request with neither Content-Length nor Transfer-Encoding has no body (RFC 9112, 6.3), but
  // httplib 0.11 reads a POST's body until the peer closes or the read times out. So the stream
  // watches the header block go by (httplib reads it a byte at a time) and answers end-of-stream
  // for the body of such a request. Called before each request on the connection.
  void start_request() {
    header_.clear();
    in_body_ = false;
    no_body_ = false;
  }

  bool is_readable() const override {
    return no_body_ || has_buffered() || wait_for(fd_, POLLIN, read_timeout_);
  }
  bool is_writable() const override {
    return !state_.drop && wait_for(fd_, POLLOUT, write_timeout_);
  }

  ssize_t read(char* ptr, size_t size) override {
    if (no_body_) {
      return 0;
    }
    const ssize_t n = read_bytes(ptr, size);
    if (n > 0 && !in_body_) {
      watch_header(std::string_view(ptr, static_cast<std::size_t>(n)));
    }
    return n;
  }

 private:
  void watch_header(std::string_view bytes) {
    header_.append(bytes);
    const auto end = header_.find("\r\n\r\n");
    if (end == std::string::npos) {
      // httplib refuses headers this long itself; stop watching rather than grow.
      if (header_.size() > 65536) {
        in_body_ = true;
      }
      return;
    }
    in_body_ = true;
    std::string lower(header_, 0, end + 2);
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    no_body_ = lower.find("\r\ncontent-length:") == std::string::npos &&
               lower.find("\r\ntransfer-encoding:") == std::string::npos;
    header_.clear();
  }

  ssize_t read_bytes(char* ptr, size_t size) {
    if (!has_buffered()) {
      if (!wait_for(fd_, POLLIN, read_timeout_)) {
        return -1;
      }
      if (size >= buffer_.size()) {
        return recv_some(ptr, size);
      }
      const ssize_t n = recv_some(buffer_.data(), buffer_.size());
      if (n <= 0) {
        return n;
      }
      offset_ = 0;
      size_ = static_cast<std::size_t>(n);
    }
    const std::size_t n = std::min(size, size_ - offset_);
    std::memcpy(ptr, buffer_.data() + offset_, n);
    offset_ += n;
    return static_cast<ssize_t>(n);
  }

 public:
  ssize_t write(const char* ptr, size_t size) override {
    if (state_.drop || !wait_for(fd_, POLLOUT, write_timeout_)) {
      return -1;
    }
    ssize_t n = 0;
    do {
      n = ::send(fd_, ptr, size, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    return n;
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    endpoint_of(fd_, true, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    endpoint_of(fd_, false, ip, port);
  }
  socket_t socket() const override { return fd_; }

 private:
  ssize_t recv_some(char* ptr, std::size_t size) {
    ssize_t n = 0;
    do {
      n = ::recv(fd_, ptr, size, 0);
    } while (n < 0 && errno == EINTR);
    return n;
  }

  int fd_;
  std::chrono::milliseconds read_timeout_;
  std::chrono::milliseconds write_timeout_;
  const connection_state& state_;
  std::array<char, 16384> buffer_{};
  std::size_t offset_ = 0;
  std::size_t size_ = 0;
  std::string header_;  // the current request's header block so far
  bool in_body_ = false;
  bool no_body_ = false;
};

class http_server final : public httplib::Server {
 public:
  explicit http_server(const server_config& config)
      : keep_alive_timeout_(config.keep_alive_timeout),
        keep_alive_max_(std::max<std::size_t>(1, config.keep_alive_max_requests)),
        read_timeout_(config.read_timeout),
        write_timeout_(config.write_timeout) {}

  // httplib listens with a backlog of 5, too short for thousands of clients connecting at once;
  // listen() on a listening socket only changes the backlog.
  bool widen_backlog(int backlog) {
    const socket_t fd = svr_sock_;
    return fd != INVALID_SOCKET && ::listen(fd, backlog) == 0;
  }

  // httplib's stop() does nothing until its accept loop has marked itself running, so a stop
  // right after start could be lost. Closing the listening socket ourselves works at any moment:
  // the accept loop checks it before every accept and fails the accept it is blocked in.
  void halt() {
    const socket_t fd = svr_sock_.exchange(INVALID_SOCKET);
    if (fd != INVALID_SOCKET) {
      ::shutdown(fd, SHUT_RDWR);
      ::close(fd);
    }
  }

 private:
  bool process_and_close_socket(socket_t sock) override {
    connection_state state;
    current_connection = &state;
    bool ok = false;
    {
      socket_stream stream(sock, read_timeout_, write_timeout_, state);
      std::size_t left = keep_alive_max_;
      while (left > 0 && wait_for_request(stream)) {
        bool closed = false;
        stream.start_request();
        ok = process_request(stream, left == 1, closed, nullptr);
        if (!ok || closed || state.drop) {
          break;
        }
        --left;
      }
    }
    current_connection = nullptr;
    ::shutdown(sock, SHUT_RDWR);
    ::close(sock);
    return ok;
  }

  // Waits for the next request on a kept-alive connection, looking every 100 ms whether the
  // server is stopping so that shutdown never waits out an idle client.
  bool wait_for_request(const socket_stream& stream) {
    if (stream.has_buffered()) {
      return true;
    }
    const auto deadline = steady::now() + keep_alive_timeout_;
    while (svr_sock_ != INVALID_SOCKET) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - steady::now());
      if (left.count() <= 0) {
        return false;
      }
      if (wait_for(stream.socket(), POLLIN, std::min(left, std::chrono::milliseconds(100)))) {
        return true;
      }
    }
    return false;
  }

  std::chrono::milliseconds keep_alive_timeout_;
  std::size_t keep_alive_max_;
  std::chrono::milliseconds read_timeout_;
  std::chrono::milliseconds write_timeout_;
};

// ---------------------------------------------------------------------------------------------
// Generation.

struct sequence_job {
  backend_request request;
  stop_rules rules;
  int index = 0;
};

// Called with a sequence's builder after each batch of tokens (and once at its end); returns false
// when the client is gone.
using progress_fn = std::function<bool(sequence_builder&)>;

result<sequence_output> run_sequence(policy_backend& backend, const sequence_job& job,
                                     generation_control& control,
                                     std::optional<std::size_t> abort_after,
                                     const progress_fn& progress) {
  sequence_builder builder(job.rules, job.index, job.request.prompt);
  bool client_gone = false;
  const token_sink sink = [&](std::span<const token_step> steps) {
    for (const auto& step : steps) {
      if (abort_after && builder.output().token_ids.size() >= *abort_after) {
        control.abort("injected fault: the generation was aborted");
        break;
      }
      if (builder.push(step)) {
        break;
      }
    }
    if (progress && !progress(builder)) {
      client_gone = true;
      control.abort("the client closed the connection");
      return false;
    }
    return !builder.finished() && !control.should_stop();
  };
  auto generated = backend.generate(job.request, control, sink);
  if (!generated) {
    return generated.err();
  }
  if (!builder.finished()) {
    if (control.should_stop()) {
      std::string message = control.abort_message();
      builder.finish_abort(message.empty() ? "the server is shutting down" : std::move(message));
    } else {
      builder.finish_natural();
    }
  }
  if (progress && !client_gone) {
    progress(builder);
  }
  return builder.output();
}

// Runs every sequence of a request, concurrently when there are several (n > 1 or a batch), so that
// a latency model overlaps them as a real engine batches them.
result<std::vector<sequence_output>> run_sequences(policy_backend& backend,
                                                   const std::vector<sequence_job>& jobs,
                                                   generation_control& control,
                                                   std::optional<std::size_t> abort_after,
                                                   const progress_fn& progress) {
  std::vector<std::optional<result<sequence_output>>> results(jobs.size());
  if (jobs.size() == 1) {
    results[0] = run_sequence(backend, jobs[0], control, abort_after, progress);
  } else {
    std::atomic<std::size_t> next{0};
    const auto work = [&] {
      for (std::size_t i = next++; i < jobs.size(); i = next++) {
        results[i] = run_sequence(backend, jobs[i], control, abort_after, progress);
      }
    };
    std::vector<std::thread> workers;
    const std::size_t count = std::min<std::size_t>(jobs.size(), 16);
    for (std::size_t w = 1; w < count; ++w) {
      workers.emplace_back(work);
    }
    work();
    for (auto& worker : workers) {
      worker.join();
    }
  }
  std::vector<sequence_output> outputs;
  outputs.reserve(jobs.size());
  for (auto& r : results) {
    if (!r->ok()) {
      return r->err();
    }
    outputs.push_back(std::move(r->value()));
  }
  return outputs;
}

// Writes SSE events to the response, serialised across a request's sequences, applying the
// stream faults: a malformed event (its JSON cut in half; the `malformed_at`-th, 0-based), or a
// cut after a few events.
class event_stream {
 public:
  event_stream(httplib::DataSink& sink, std::optional<std::size_t> cut_after,
               std::optional<std::size_t> malformed_at)
      : sink_(sink), cut_after_(cut_after), malformed_at_(malformed_at) {}

  bool write_event(const std::string& data) {
    std::lock_guard lock(mutex_);
    return write_locked(data);
  }

  // Runs `render` and writes its events under the stream's lock, so that renderers keeping state
  // across calls (SGLang's cumulative chunks) see one call at a time.
  bool write_with(const std::function<std::vector<std::string>()>& render) {
    std::lock_guard lock(mutex_);
    for (const auto& data : render()) {
      if (!write_locked(data)) {
        return false;
      }
    }
    return !failed_;
  }

  bool write_done() {
    std::lock_guard lock(mutex_);
    if (cut_after_ || failed_) {
      return false;  // a truncated stream never ends properly
    }
    const std::string done = sse_done();
    failed_ = !sink_.write(done.data(), done.size());
    return !failed_;
  }

  [[nodiscard]] bool truncated() const {
    std::lock_guard lock(mutex_);
    return cut_after_.has_value();
  }

 private:
  bool write_locked(const std::string& data) {
    if (failed_) {
      return false;
    }
    if (cut_after_ && written_ >= *cut_after_) {
      failed_ = true;
      return false;
    }
    std::string event = malformed_at_ && written_ == *malformed_at_
                            ? sse_event(data.substr(0, data.size() / 2))
                            : sse_event(data);
    failed_ = !sink_.write(event.data(), event.size());
    ++written_;
    return !failed_;
  }

  httplib::DataSink& sink_;
  std::optional<std::size_t> cut_after_;
  std::optional<std::size_t> malformed_at_;
  mutable std::mutex mutex_;
  std::size_t written_ = 0;
  bool failed_ = false;
};

std::string hex_id(std::uint64_t a, std::uint64_t b) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out(32, '0');
  for (std::size_t i = 0; i < 16; ++i) {
    const auto shift = 60U - 4U * static_cast<unsigned>(i);
    out[i] = digits[(a >> shift) & 0xFU];
    out[16 + i] = digits[(b >> shift) & 0xFU];
  }
  return out;
}

std::optional<http_error> check_vocabulary(int vocab_size, const std::vector<token_id>& ids,
                                           const char* key) {
  for (const token_id id : ids) {
    if (id < 0 || id >= vocab_size) {
      return http_error{400, "token id " + std::to_string(id) + " in '" + key +
                                 "' is outside the vocabulary [0, " + std::to_string(vocab_size) +
                                 ")"};
    }
  }
  return std::nullopt;
}

}  // namespace

// ---------------------------------------------------------------------------------------------

struct policy_server::impl {
  impl(server_config c, std::shared_ptr<policy_backend> b)
      : config(std::move(c)),
        backend(std::move(b)),
        weight_version(config.weight_version),
        http(config) {}

  server_config config;
  std::shared_ptr<policy_backend> backend;
  std::shared_ptr<generation_gate> gate = std::make_shared<generation_gate>();
  server_metrics metrics;
  std::atomic<std::int64_t> weight_version;
  std::atomic<std::uint64_t> generation_serial{0};
  std::atomic<std::uint64_t> id_counter{0};

  // Who holds generation back: a /pause_generation, and vLLM's sleep mode (weights and KV cache
  // asleep separately). The gate is paused while either holds; guarded by flights_mutex.
  bool user_paused = false;
  bool weights_asleep = false;
  bool kv_asleep = false;

  // Runtime LoRA adapters by name (vLLM's /v1/load_lora_adapter): name -> path. Loads run one at
  // a time (adapter_load_mutex), so that versions and the table change together.
  mutable std::mutex adapters_mutex;
  std::map<std::string, std::string> adapters;
  std::mutex adapter_load_mutex;

  // vLLM's weight-transfer engine session (see init_weight_transfer); guarded by transfer_mutex,
  // held for a whole route call so that calls of one session run one at a time.
  std::mutex transfer_mutex;
  bool transfer_initialized = false;
  bool transfer_active = false;
  std::optional<std::string> staged_path;  // disk: the folder update_weights named
  bool staged_tensors = false;             // nccl/ipc: the backend holds staged tensors

  // Generation requests in the server: true once admitted (running), false while held by a pause.
  std::mutex flights_mutex;
  std::condition_variable flights_changed;
  std::map<generation_control*, bool> flights;

  http_server http;
  std::thread listener;
  int port = 0;
  std::once_flag stop_once;

  // A generation request's place in the server, from arrival to its response's end.
  class flight {
   public:
    flight(impl& server, std::shared_ptr<generation_control> control)
        : server_(server), control_(std::move(control)) {
      std::lock_guard lock(server_.flights_mutex);
      server_.flights[control_.get()] = false;
      server_.metrics.waiting.fetch_add(1);
    }
    ~flight() {
      std::lock_guard lock(server_.flights_mutex);
      server_.flights.erase(control_.get());
      (running_ ? server_.metrics.running : server_.metrics.waiting).fetch_sub(1);
      server_.flights_changed.notify_all();
    }
    flight(const flight&) = delete;
    flight& operator=(const flight&) = delete;

    // Waits out a pause, then counts as running. False when the server is stopping.
    bool admit() {
      while (true) {
        {
          std::lock_guard lock(server_.flights_mutex);
          if (server_.gate->stopping()) {
            return false;
          }
          if (!server_.gate->paused()) {
            server_.flights[control_.get()] = true;
            running_ = true;
            server_.metrics.waiting.fetch_sub(1);
            server_.metrics.running.fetch_add(1);
            return true;
          }
        }
        if (!server_.gate->wait_while_paused(nullptr)) {
          return false;
        }
      }
    }

   private:
    impl& server_;
    std::shared_ptr<generation_control> control_;
    bool running_ = false;
  };

  [[nodiscard]] std::string next_id(const char* prefix) {
    const std::uint64_t n = id_counter++;
    return prefix + hex_id(random::combine(config.seed, n), random::mix(n ^ 0x1D5ULL));
  }

  [[nodiscard]] response_meta make_meta(const char* prefix) {
    response_meta meta;
    meta.id = next_id(prefix);
    meta.created = static_cast<std::int64_t>(std::time(nullptr));
    meta.model = config.model_name;
    meta.weight_version = weight_version.load();
    meta.vocab = config.vocab.get();
    return meta;
  }

  [[nodiscard]] std::optional<http_error> check_model(
      const std::optional<std::string>& model) const {
    if (model && !model->empty() && *model != config.model_name) {
      std::lock_guard lock(adapters_mutex);
      if (adapters.count(*model) == 0) {
        return http_error{404, "The model `" + *model + "` does not exist."};
      }
    }
    return std::nullopt;
  }

  // vLLM's context check: prompt + max_tokens must fit; max_tokens defaults per route.
  [[nodiscard]] result<int> resolve_max_tokens(std::size_t prompt_len, std::optional<int> requested,
                                               int fallback, bool clamp) const {
    const auto limit = static_cast<std::size_t>(config.max_model_len);
    if (prompt_len >= limit) {
      return error{"This model's maximum context length is " + std::to_string(limit) +
                   " tokens. However, your request has " + std::to_string(prompt_len) +
                   " input tokens. Please reduce the length of the input messages."};
    }
    const auto room = static_cast<int>(limit - prompt_len);
    const int wanted = requested ? *requested : (fallback > 0 ? fallback : room);
    if (wanted > room) {
      if (clamp) {
        return room;
      }
      return error{"This model's maximum context length is " + std::to_string(limit) +
                   " tokens. However, you requested " +
                   std::to_string(prompt_len + static_cast<std::size_t>(wanted)) + " tokens (" +
                   std::to_string(prompt_len) + " in the messages, " + std::to_string(wanted) +
                   " in the completion). Please reduce the length of the messages or completion."};
    }
    return wanted;
  }

  // Builds the jobs of one request: prompt-major, n samples each.
  [[nodiscard]] result<std::vector<sequence_job>> make_jobs(
      const std::vector<std::vector<token_id>>& prompts, const sampling_params& sampling,
      int fallback_max_tokens, bool clamp, int top_logprobs, std::uint64_t serial) const {
    std::vector<sequence_job> jobs;
    for (std::size_t p = 0; p < prompts.size(); ++p) {
      auto max_tokens =
          resolve_max_tokens(prompts[p].size(), sampling.max_tokens, fallback_max_tokens, clamp);
      if (!max_tokens) {
        return max_tokens.err();
      }
      for (int j = 0; j < sampling.n; ++j) {
        sequence_job job;
        job.request.prompt = prompts[p];
        job.request.sampling = sampling;
        job.request.sampling.max_tokens = *max_tokens;
        job.request.sample_index = j;
        job.request.top_logprobs = top_logprobs;
        job.request.request_serial = serial;
        job.rules = make_stop_rules(sampling, *max_tokens);
        job.rules.vocab = config.vocab.get();
        job.index = static_cast<int>(p) * sampling.n + j;
        jobs.push_back(std::move(job));
      }
    }
    return jobs;
  }

  [[nodiscard]] std::optional<http_error> resolve_prompts(
      const std::vector<prompt_input>& inputs, const char* key,
      std::vector<std::vector<token_id>>& out) const {
    for (const auto& input : inputs) {
      if (input.text) {
        out.push_back(config.vocab->encode(*input.text));
      } else {
        if (auto bad = check_vocabulary(config.vocab_size, input.ids, key)) {
          return bad;
        }
        out.push_back(input.ids);
      }
      if (out.back().empty()) {
        return http_error{400, std::string("'") + key + "' must not be empty"};
      }
    }
    return std::nullopt;
  }

  // How a route turns sequences into bodies.
  struct renderers {
    // The whole non-streaming body.
    std::function<json(const response_meta&, const std::vector<sequence_output>&)> full;
    // The events for one streamed delta (several for SGLang's cumulative form: one).
    std::function<std::vector<std::string>(const response_meta&, const sequence_output& delta)>
        delta;
    // Events after every sequence has finished, before [DONE] (the usage chunk).
    std::function<std::vector<std::string>(const response_meta&,
                                           const std::vector<sequence_output>&)>
        tail;
  };

  // Everything after parsing, shared by the three generation routes: faults, admission past a
  // pause, generation, rendering, streaming.
  std::optional<http_error> serve_generation(httplib::Response& res, std::vector<sequence_job> jobs,
                                             bool stream, const char* id_prefix, renderers render,
                                             std::uint64_t serial) {
    const fault_decision fault = decide_fault(config.faults, serial);
    if (fault.kind != fault_kind::none) {
      metrics.count_fault(fault.kind);
    }
    if (fault.kind == fault_kind::drop) {
      if (current_connection != nullptr) {
        current_connection->drop = true;
      }
      res.status = 500;
      return std::nullopt;
    }
    if (fault.kind == fault_kind::http_5xx) {
      return http_error{fault.http_status,
                        "injected fault: the server answered " + std::to_string(fault.http_status)};
    }
    auto control = std::make_shared<generation_control>(gate);
    auto place = std::make_shared<flight>(*this, control);
    if (!place->admit()) {
      return http_error{503, "the server is shutting down"};
    }
    if (fault.kind == fault_kind::stall &&
        !control->sleep_until(steady::now() + config.faults.stall_duration) && gate->stopping()) {
      return http_error{503, "the server is shutting down"};
    }
    const auto start = steady::now();
    response_meta meta = make_meta(id_prefix);
    res.set_header("x-weight-version", std::to_string(meta.weight_version));
    const std::optional<std::size_t> abort_after =
        fault.kind == fault_kind::abort ? std::optional<std::size_t>(1 + fault.detail % 8)
                                        : std::nullopt;
    std::int64_t prompt_tokens = 0;
    for (const auto& job : jobs) {
      if (job.request.sample_index == 0) {
        prompt_tokens += static_cast<std::int64_t>(job.request.prompt.size());
      }
    }

    if (!stream) {
      auto outputs = run_sequences(*backend, jobs, *control, abort_after, nullptr);
      if (!outputs) {
        return http_error{500, outputs.err().message};
      }
      std::int64_t generated = 0;
      for (const auto& o : *outputs) {
        generated += static_cast<std::int64_t>(o.token_ids.size());
      }
      metrics.add_tokens(prompt_tokens, generated);
      meta.e2e_latency_s = std::chrono::duration<double>(steady::now() - start).count();
      std::string body = dump_json(render.full(meta, *outputs));
      if (fault.kind == fault_kind::malformed) {
        body.resize(body.size() / 2);
        res.set_content(body, "application/json");
      } else if (fault.kind == fault_kind::truncate) {
        const std::size_t total = body.size();
        res.set_content_provider(
            total, "application/json",
            [body = std::move(body)](std::size_t, std::size_t, httplib::DataSink& sink) {
              sink.write(body.data(), body.size() / 2);
              return false;  // httplib closes the connection mid-body
            });
      } else {
        res.set_content(body, "application/json");
      }
      return std::nullopt;
    }

    // Streaming: headers go out when this handler returns; the provider then generates and
    // writes events on this same worker thread.
    struct stream_state {
      std::vector<sequence_job> jobs;
      std::shared_ptr<generation_control> control;
      std::shared_ptr<flight> place;
      response_meta meta;
      renderers render;
      fault_decision fault;
      std::optional<std::size_t> abort_after;
      std::int64_t prompt_tokens = 0;
      steady::time_point start;
    };
    auto state = std::make_shared<stream_state>();
    state->jobs = std::move(jobs);
    state->control = control;
    state->place = place;
    state->meta = meta;
    state->render = std::move(render);
    state->fault = fault;
    state->abort_after = abort_after;
    state->prompt_tokens = prompt_tokens;
    state->start = start;
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream", [this, state](std::size_t, httplib::DataSink& sink) {
          try {
            return stream_events(*state, sink);
          } catch (const std::exception& e) {
            // Nothing may escape into httplib's worker; the stream just ends broken.
            state->control->abort(std::string("internal error: ") + e.what());
            return false;
          }
        });
    return std::nullopt;
  }

  template <class State>
  bool stream_events(State& state, httplib::DataSink& sink) {
    const std::optional<std::size_t> cut =
        state.fault.kind == fault_kind::truncate
            ? std::optional<std::size_t>(1 + state.fault.detail % 3)
            : std::nullopt;
    // The malformed event is one of the first three, so that a client may have tokens before it.
    const std::optional<std::size_t> malformed_at =
        state.fault.kind == fault_kind::malformed
            ? std::optional<std::size_t>(state.fault.detail % 3)
            : std::nullopt;
    event_stream events(sink, cut, malformed_at);
    const progress_fn progress = [&](sequence_builder& builder) {
      return events.write_with([&] {
        std::vector<std::string> out;
        while (builder.has_delta()) {
          for (auto& e :
               state.render.delta(state.meta, builder.take_delta(config.stream_chunk_tokens))) {
            out.push_back(std::move(e));
          }
        }
        return out;
      });
    };
    auto outputs = run_sequences(*backend, state.jobs, *state.control, state.abort_after, progress);
    if (!outputs) {
      events.write_event(dump_json(render_error({500, outputs.err().message})));
      events.write_done();
      sink.done();
      return true;
    }
    std::int64_t generated = 0;
    for (const auto& o : *outputs) {
      generated += static_cast<std::int64_t>(o.token_ids.size());
    }
    metrics.add_tokens(state.prompt_tokens, generated);
    state.meta.e2e_latency_s = std::chrono::duration<double>(steady::now() - state.start).count();
    if (state.render.tail) {
      events.write_with([&] { return state.render.tail(state.meta, *outputs); });
    }
    if (!events.write_done()) {
      return false;  // truncated on purpose, or the client left: close without the final chunk
    }
    sink.done();
    return true;
  }

  // ---- routes ----

  std::optional<http_error> completions(const httplib::Request& req, httplib::Response& res) {
    auto body = parse_json_body(req.body);
    if (!body) {
      return http_error{400, body.err().message};
    }
    auto parsed = parse_completion_request(*body);
    if (!parsed) {
      return http_error{400, parsed.err().message};
    }
    auto request = std::make_shared<completion_request>(std::move(*parsed));
    if (auto bad = check_model(request->model)) {
      return bad;
    }
    std::vector<std::vector<token_id>> prompts;
    if (auto bad = resolve_prompts(request->prompts, "prompt", prompts)) {
      return bad;
    }
    const std::uint64_t serial = generation_serial++;
    auto jobs =
        make_jobs(prompts, request->sampling, 16, false, request->logprobs.value_or(0), serial);
    if (!jobs) {
      return http_error{400, jobs.err().message};
    }
    renderers render;
    render.full = [request](const response_meta& meta, const std::vector<sequence_output>& out) {
      return render_completion_response(meta, out, *request);
    };
    auto started = std::make_shared<std::vector<bool>>(jobs->size(), false);
    render.delta = [request, started](const response_meta& meta, const sequence_output& delta) {
      const auto i = static_cast<std::size_t>(delta.index);
      const bool first = !(*started)[i];
      (*started)[i] = true;
      return std::vector<std::string>{
          dump_json(render_completion_chunk(meta, delta, *request, first))};
    };
    if (request->include_usage) {
      render.tail = [](const response_meta& meta, const std::vector<sequence_output>& out) {
        return std::vector<std::string>{
            dump_json(render_usage_chunk(meta, "text_completion", usage_of(out)))};
      };
    }
    return serve_generation(res, std::move(*jobs), request->stream, "cmpl-", std::move(render),
                            serial);
  }

  std::optional<http_error> chat(const httplib::Request& req, httplib::Response& res) {
    auto body = parse_json_body(req.body);
    if (!body) {
      return http_error{400, body.err().message};
    }
    auto parsed = parse_chat_request(*body);
    if (!parsed) {
      return http_error{400, parsed.err().message};
    }
    auto request = std::make_shared<chat_request>(std::move(*parsed));
    if (auto bad = check_model(request->model)) {
      return bad;
    }
    auto rendered = config.vocab->render_chat(request->messages, request->render);
    if (!rendered) {
      return http_error{400, rendered.err().wrap("rendering the chat template").message};
    }
    const std::vector<std::vector<token_id>> prompts{std::move(*rendered)};
    const std::uint64_t serial = generation_serial++;
    auto jobs = make_jobs(prompts, request->sampling, 0, false,
                          request->logprobs ? request->top_logprobs : 0, serial);
    if (!jobs) {
      return http_error{400, jobs.err().message};
    }
    renderers render;
    render.full = [request](const response_meta& meta, const std::vector<sequence_output>& out) {
      return render_chat_response(meta, out, *request);
    };
    auto started = std::make_shared<std::vector<bool>>(jobs->size(), false);
    render.delta = [request, started](const response_meta& meta, const sequence_output& delta) {
      const auto i = static_cast<std::size_t>(delta.index);
      const bool first = !(*started)[i];
      (*started)[i] = true;
      return std::vector<std::string>{dump_json(render_chat_chunk(meta, delta, *request, first))};
    };
    if (request->include_usage) {
      render.tail = [](const response_meta& meta, const std::vector<sequence_output>& out) {
        return std::vector<std::string>{
            dump_json(render_usage_chunk(meta, "chat.completion.chunk", usage_of(out)))};
      };
    }
    return serve_generation(res, std::move(*jobs), request->stream, "chatcmpl-", std::move(render),
                            serial);
  }

  std::optional<http_error> generate(const httplib::Request& req, httplib::Response& res) {
    auto body = parse_json_body(req.body);
    if (!body) {
      return http_error{400, body.err().message};
    }
    auto parsed = parse_generate_request(*body);
    if (!parsed) {
      return http_error{400, parsed.err().message};
    }
    auto request = std::make_shared<generate_request>(std::move(*parsed));
    std::vector<std::vector<token_id>> prompts;
    if (auto bad = resolve_prompts(request->prompts, "input_ids", prompts)) {
      return bad;
    }
    const std::uint64_t serial = generation_serial++;
    // SGLang clips max_new_tokens to the room left in the context instead of refusing.
    auto jobs = make_jobs(prompts, request->sampling, 128, true,
                          request->return_logprob ? request->top_logprobs_num : 0, serial);
    if (!jobs) {
      return http_error{400, jobs.err().message};
    }
    const bool listed = request->batch || request->sampling.n > 1;
    renderers render;
    const std::string rid = request->rid.value_or("");
    render.full = [request, listed, rid](const response_meta& meta,
                                         const std::vector<sequence_output>& out) {
      json all = json::array();
      for (const auto& o : out) {
        response_meta m = meta;
        if (!rid.empty()) {
          m.id = rid;
        } else if (listed) {
          m.id = meta.id + "-" + std::to_string(o.index);
        }
        all.push_back(render_generate_response(m, o, *request));
      }
      return listed ? all : all.front();
    };
    // SGLang streams cumulative objects: each event holds everything so far.
    auto cumulative = std::make_shared<std::map<int, sequence_output>>();
    render.delta = [request, listed, rid, cumulative](const response_meta& meta,
                                                      const sequence_output& delta) {
      sequence_output& c = (*cumulative)[delta.index];
      c.index = delta.index;
      if (!delta.prompt_ids.empty()) {
        c.prompt_ids = delta.prompt_ids;
      }
      c.token_ids.insert(c.token_ids.end(), delta.token_ids.begin(), delta.token_ids.end());
      c.logprobs.insert(c.logprobs.end(), delta.logprobs.begin(), delta.logprobs.end());
      c.top_logprobs.insert(c.top_logprobs.end(), delta.top_logprobs.begin(),
                            delta.top_logprobs.end());
      c.text += delta.text;
      c.finish = delta.finish;
      c.stop_token = delta.stop_token;
      c.stop_string = delta.stop_string;
      c.eos_token = delta.eos_token;
      c.abort_message = delta.abort_message;
      response_meta m = meta;
      if (!rid.empty()) {
        m.id = rid;
      }
      json event = render_generate_response(m, c, *request);
      if (listed) {
        event["index"] = c.index;
      }
      return std::vector<std::string>{dump_json(event)};
    };
    return serve_generation(res, std::move(*jobs), request->stream, "", std::move(render), serial);
  }

  static usage_counts usage_of(const std::vector<sequence_output>& out) {
    usage_counts usage;
    const std::vector<token_id>* last = nullptr;
    for (const auto& o : out) {
      if (last == nullptr || *last != o.prompt_ids) {
        usage.prompt_tokens += static_cast<std::int64_t>(o.prompt_ids.size());
        last = &o.prompt_ids;
      }
      usage.completion_tokens += static_cast<std::int64_t>(o.token_ids.size());
    }
    return usage;
  }

  std::optional<http_error> tokenize(const httplib::Request& req, httplib::Response& res) {
    auto body = parse_json_body(req.body);
    if (!body) {
      return http_error{400, body.err().message};
    }
    auto request = parse_tokenize_request(*body);
    if (!request) {
      return http_error{400, request.err().message};
    }
    if (auto bad = check_model(request->model)) {
      return bad;
    }
    std::vector<token_id> ids;
    if (request->prompt) {
      ids = config.vocab->encode(*request->prompt);
    } else {
      auto rendered = config.vocab->render_chat(*request->messages, request->render);
      if (!rendered) {
        return http_error{400, rendered.err().wrap("rendering the chat template").message};
      }
      ids = std::move(*rendered);
    }
    json out{{"count", ids.size()},
             {"max_model_len", config.max_model_len},
             {"tokens", ids},
             {"token_strs", nullptr}};
    if (request->return_token_strs) {
      json strs = json::array();
      for (const token_id id : ids) {
        strs.push_back(config.vocab->token_text(id));
      }
      out["token_strs"] = std::move(strs);
    }
    res.set_content(dump_json(out), "application/json");
    return std::nullopt;
  }

  std::optional<http_error> detokenize(const httplib::Request& req, httplib::Response& res) {
    auto body = parse_json_body(req.body);
    if (!body) {
      return http_error{400, body.err().message};
    }
    auto request = parse_detokenize_request(*body);
    if (!request) {
      return http_error{400, request.err().message};
    }
    if (auto bad = check_vocabulary(config.vocab_size, request->tokens, "tokens")) {
      return bad;
    }
    const std::string text = config.vocab->decode(request->tokens);
    // vLLM answers "prompt", SGLang "text": both, so that either client reads it.
    res.set_content(dump_json(json{{"prompt", text}, {"text", text}}), "application/json");
    return std::nullopt;
  }

  // SGLang's /update_weights_from_disk.
  std::optional<http_error> update_weights_from_disk(const httplib::Request& req,
                                                     httplib::Response& res) {
    auto body = parse_json_body(req.body);
    if (!body) {
      return http_error{400, body.err().message};
    }
    auto request = parse_sglang_update_weights_request(*body);
    if (!request) {
      return http_error{400, request.err().message};
    }
    const std::int64_t version = request->version.value_or(weight_version.load() + 1);
    auto loaded = backend->load_weights(request->path, version);
    if (!loaded) {
      // SGLang reports a failed load as success: false; the status says it too.
      res.status = 400;
      res.set_content(
          dump_json(json{{"success", false},
                         {"message", loaded.err().message},
                         {"weight_version", weight_version.load()},
                         {"error", render_error({400, loaded.err().message})["error"]}}),
          "application/json");
      return std::nullopt;
    }
    weight_version.store(version);
    res.set_header("x-weight-version", std::to_string(version));
    res.set_content(
        dump_json(json{{"success", true},
                       {"message", "weights loaded as version " + std::to_string(version)},
                       {"weight_version", version},
                       {"num_paused_requests", 0}}),
        "application/json");
    return std::nullopt;
  }

  // ---- vLLM's weight-transfer engine ----
  // One update session at a time: start, one or more update_weights, finish. Nothing reaches the
  // served weights before finish: the disk backend only records the folder, nccl/ipc stage the
  // tensors in the backend; finish loads (disk) or swaps (the backend's exclusive lock), so a
  // generation samples wholly from the old or wholly from the new weights, and a session cut
  // half-way leaves the old ones served. A failed update_weights ends the session (as vLLM's disk
  // engine aborts its session); a start while a session is open discards it (its client is gone:
  // a retry must be able to begin again).

  [[nodiscard]] bool disk_transfer() const { return config.weight_transfer_backend == "disk"; }

  void end_transfer_session() {
    if (transfer_active && !disk_transfer()) {
      backend->discard_weights();
    }
    transfer_active = false;
    staged_path.reset();
    staged_tensors = false;
  }

  std::optional<http_error> init_weight_transfer(const httplib::Request& req,
                                                 httplib::Response& res) {
    auto body = parse_json_body(req.body);
    if (!body) {
      return http_error{400, body.err().message};
    }
    auto request = parse_weight_transfer_request(*body, "init_info");
    if (!request) {
      return http_error{400, request.err().message};
    }
    std::lock_guard lock(transfer_mutex);
    if (disk_transfer() && request->info.is_object() && !request->info.empty()) {
      // A trainer that expects a rendezvous (nccl's master_address, ...) would wait for a peer
      // that never comes: say so now.
      return http_error{400,
                        "this server's weight-transfer backend is disk, whose init_info is "
                        "empty; got " +
                            dump_json(request->info) +
                            " (start it with --weight-transfer-config '{\"backend\": \"nccl\"}' "
                            "for a broadcast)"};
    }
    if (!disk_transfer()) {
      end_transfer_session();
      if (auto ok = backend->init_weight_transfer(config.weight_transfer_backend, request->info);
          !ok) {
        transfer_initialized = false;
        return http_error{500, "init_weight_transfer_engine (" + config.weight_transfer_backend +
                                   "): " + ok.err().message};
      }
    }
    transfer_initialized = true;
    res.set_content(dump_json(json{{"message", "Weight transfer initialized"}}),
                    "application/json");
    return std::nullopt;
  }

  std::optional<http_error> start_weight_update(const httplib::Request& req,
                                                httplib::Response& res) {
    auto body = parse_json_body(req.body);  // optional: include_draft, is_checkpoint_format
    if (!body) {
      return http_error{400, body.err().message};
    }
    std::lock_guard lock(transfer_mutex);
    if (!disk_transfer() && !transfer_initialized) {
      return http_error{400, "the " + config.weight_transfer_backend +
                                 " weight-transfer engine is not initialized: POST "
                                 "/init_weight_transfer_engine first"};
    }
    end_transfer_session();
    transfer_active = true;
    res.set_content(dump_json(json{{"message", "Weight update started"}}), "application/json");
    return std::nullopt;
  }

  std::optional<http_error> transfer_update_weights(const httplib::Request& req,
                                                    httplib::Response& res) {
    auto body = parse_json_body(req.body);
    if (!body) {
      return http_error{400, body.err().message};
    }
    auto request = parse_weight_transfer_request(*body, "update_info");
    if (!request) {
      std::string message = request.err().message;
      if (body->is_object() && body->contains("path")) {
        // The body of this route before it became vLLM's.
        message +=
            " (this is vLLM's weight-transfer route: a folder loads with {\"update_info\": "
            "{\"path\": ...}} between /start_weight_update and /finish_weight_update, or with "
            "SGLang's /update_weights_from_disk)";
      }
      return http_error{400, message};
    }
    std::lock_guard lock(transfer_mutex);
    if (!transfer_active) {
      return http_error{400, "start_weight_update must be called before update_weights"};
    }
    if (disk_transfer()) {
      auto info = parse_disk_update_info(request->info);
      if (!info) {
        end_transfer_session();
        return http_error{400, info.err().message};
      }
      if (staged_path) {
        end_transfer_session();
        return http_error{400,
                          "the disk backend accepts exactly one checkpoint per update session"};
      }
      staged_path = info->path;
    } else {
      if (auto received = backend->receive_weights(request->info); !received) {
        end_transfer_session();
        return http_error{500, "update_weights (" + config.weight_transfer_backend +
                                   "): " + received.err().message +
                                   "; the update is abandoned, the served weights are unchanged"};
      }
      staged_tensors = true;
    }
    res.set_content(dump_json(json{{"message", "Weights updated"}}), "application/json");
    return std::nullopt;
  }

  std::optional<http_error> finish_weight_update(const httplib::Request& req,
                                                 httplib::Response& res) {
    auto body = parse_json_body(req.body);
    if (!body) {
      return http_error{400, body.err().message};
    }
    auto request = parse_finish_weight_update_request(*body);
    if (!request) {
      return http_error{400, request.err().message};
    }
    std::lock_guard lock(transfer_mutex);
    if (!transfer_active) {
      return http_error{400, "no weight update is active: POST /start_weight_update first"};
    }
    if (!staged_path && !staged_tensors) {
      end_transfer_session();
      return http_error{400, "no weights were received during this update session"};
    }
    const std::int64_t version = request->version.value_or(weight_version.load() + 1);
    status loaded = disk_transfer() ? backend->load_weights(*staged_path, version)
                                    : backend->commit_weights(version);
    staged_tensors = false;  // committed or refused: nothing left to discard
    end_transfer_session();
    if (!loaded) {
      return http_error{500, "finish_weight_update: " + loaded.err().message};
    }
    weight_version.store(version);
    res.set_header("x-weight-version", std::to_string(version));
    res.set_content(
        dump_json(json{{"message", "Weight update finished"}, {"weight_version", version}}),
        "application/json");
    return std::nullopt;
  }

  struct pause_counts {
    std::size_t aborted = 0;
    std::size_t running = 0;
  };

  // Holds new generations back and deals with running ones by `mode`. Takes flights_mutex; `hold`
  // runs under it first (it records who holds the gate).
  pause_counts hold_generation(pause_mode mode, const std::function<void()>& hold) {
    pause_counts counts;
    std::unique_lock lock(flights_mutex);
    hold();
    gate->pause(mode == pause_mode::in_place);
    if (mode == pause_mode::abort) {
      for (const auto& [control, running] : flights) {
        if (running) {
          control->abort("generation paused");
          ++counts.aborted;
        }
      }
    }
    if (mode == pause_mode::wait) {
      // Drain: every running generation finishes. Bounded by shutdown, not by a clock: the
      // caller's own deadline decides how long it will wait for this reply.
      while (!gate->stopping() &&
             std::any_of(flights.begin(), flights.end(), [](const auto& f) { return f.second; })) {
        flights_changed.wait_for(lock, std::chrono::milliseconds(50));
      }
    }
    counts.running = static_cast<std::size_t>(
        std::count_if(flights.begin(), flights.end(), [](const auto& f) { return f.second; }));
    return counts;
  }

  // Lets generation go on once neither a pause nor sleep holds it. Call under flights_mutex.
  void release_if_free() {
    if (!user_paused && !weights_asleep && !kv_asleep) {
      gate->resume();
    }
  }

  std::optional<http_error> pause(const httplib::Request& req, httplib::Response& res) {
    auto body = parse_json_body(req.body);
    if (!body) {
      return http_error{400, body.err().message};
    }
    auto request = parse_pause_request(*body);
    if (!request) {
      return http_error{400, request.err().message};
    }
    const auto counts = hold_generation(request->mode, [this] { user_paused = true; });
    res.set_content(dump_json(json{{"success", true},
                                   {"message", "generation paused"},
                                   {"aborted", counts.aborted},
                                   {"running", counts.running}}),
                    "application/json");
    return std::nullopt;
  }

  std::optional<http_error> resume(httplib::Response& res) {
    {
      std::lock_guard lock(flights_mutex);
      user_paused = false;
      release_if_free();
    }
    res.set_content(dump_json(json{{"success", true}, {"message", "generation resumed"}}),
                    "application/json");
    return std::nullopt;
  }

  // ---- vLLM's sleep mode ----
  // As vLLM (since its sleep pauses the scheduler): running generations are dealt with by the
  // sleep's mode (abort by default), and generation requests that arrive while asleep wait in
  // the server until a wake-up leaves nothing asleep; then they run (on the reloaded weights).

  static std::optional<std::string> query(const httplib::Request& req, const char* key) {
    if (!req.has_param(key)) {
      return std::nullopt;
    }
    return req.get_param_value(key);
  }

  std::optional<http_error> sleep(const httplib::Request& req, httplib::Response& res) {
    auto request = parse_sleep_request(query(req, "level"), query(req, "mode"));
    if (!request) {
      return http_error{400, request.err().message};
    }
    // Both levels put weights and KV cache to sleep; the level only says whether the weights
    // are kept (offloaded) or discarded, which a scripted or CPU backend need not tell apart.
    hold_generation(request->mode, [this] {
      weights_asleep = true;
      kv_asleep = true;
    });
    res.status = 200;  // vLLM answers an empty 200
    return std::nullopt;
  }

  std::optional<http_error> wake_up(const httplib::Request& req, httplib::Response& res) {
    std::vector<std::string> tags;
    for (std::size_t i = 0; i < req.get_param_value_count("tags"); ++i) {
      tags.push_back(req.get_param_value("tags", i));
    }
    auto request = parse_wake_up_request(tags);
    if (!request) {
      return http_error{400, request.err().message};
    }
    {
      std::lock_guard lock(flights_mutex);
      if (request->weights) {
        weights_asleep = false;
      }
      if (request->kv_cache) {
        kv_asleep = false;
      }
      release_if_free();
    }
    res.status = 200;
    return std::nullopt;
  }

  [[nodiscard]] bool sleeping() {
    std::lock_guard lock(flights_mutex);
    return weights_asleep || kv_asleep;
  }

  std::optional<http_error> collective_rpc(const httplib::Request& req, httplib::Response& res) {
    auto body = parse_json_body(req.body);
    if (!body) {
      return http_error{400, body.err().message};
    }
    auto request = parse_collective_rpc_request(*body);
    if (!request) {
      return http_error{400, request.err().message};
    }
    if (request->method != "reload_weights") {
      return http_error{400, "collective_rpc method '" + request->method +
                                 "' is not served here (served: reload_weights)"};
    }
    {
      std::lock_guard lock(flights_mutex);
      if (weights_asleep) {
        return http_error{400,
                          "the weights are asleep: POST /wake_up?tags=weights before "
                          "reload_weights"};
      }
    }
    const std::string path = request->weights_path.value_or(config.model_path);
    const std::int64_t version = weight_version.load() + 1;
    if (auto loaded = backend->load_weights(path, version); !loaded) {
      return http_error{500, "reload_weights failed: " + loaded.err().message};
    }
    weight_version.store(version);
    res.set_header("x-weight-version", std::to_string(version));
    // One result per worker (one here); reload_weights returns nothing.
    res.set_content(dump_json(json{{"results", json::array({nullptr})}}), "application/json");
    return std::nullopt;
  }

  // ---- vLLM's runtime LoRA routes ----

  std::optional<http_error> load_lora(const httplib::Request& req, httplib::Response& res) {
    auto body = parse_json_body(req.body);
    if (!body) {
      return http_error{400, body.err().message};
    }
    auto request = parse_load_lora_request(*body);
    if (!request) {
      return http_error{400, request.err().message};
    }
    if (!backend->supports_adapters()) {
      return http_error{501, "the " + backend->name() +
                                 " backend cannot load LoRA adapters (POST /v1/load_lora_adapter "
                                 "for '" +
                                 request->name + "')"};
    }
    if (request->name == config.model_name) {
      return http_error{
          400, "a LoRA adapter cannot take the base model's name '" + config.model_name + "'"};
    }
    std::lock_guard load_lock(adapter_load_mutex);
    {
      std::lock_guard lock(adapters_mutex);
      if (adapters.count(request->name) != 0 && !request->load_inplace) {
        return http_error{400, "The lora adapter '" + request->name +
                                   "' has already been loaded. (Use load_inplace: true to "
                                   "replace it.)"};
      }
    }
    const std::int64_t version = weight_version.load() + 1;
    if (auto loaded = backend->load_adapter(request->name, request->path, version); !loaded) {
      return http_error{400, "loading LoRA adapter '" + request->name + "' from " + request->path +
                                 " failed: " + loaded.err().message};
    }
    {
      std::lock_guard lock(adapters_mutex);
      adapters[request->name] = request->path;
    }
    weight_version.store(version);
    res.set_header("x-weight-version", std::to_string(version));
    res.set_content("Success: LoRA adapter '" + request->name + "' added successfully.",
                    "text/plain");
    return std::nullopt;
  }

  std::optional<http_error> unload_lora(const httplib::Request& req, httplib::Response& res) {
    auto body = parse_json_body(req.body);
    if (!body) {
      return http_error{400, body.err().message};
    }
    auto request = parse_unload_lora_request(*body);
    if (!request) {
      return http_error{400, request.err().message};
    }
    if (!backend->supports_adapters()) {
      return http_error{501, "the " + backend->name() + " backend cannot load LoRA adapters"};
    }
    {
      std::lock_guard lock(adapters_mutex);
      if (adapters.erase(request->name) == 0) {
        return http_error{404, "The lora adapter '" + request->name + "' cannot be found."};
      }
    }
    res.set_content("Success: LoRA adapter '" + request->name + "' removed successfully.",
                    "text/plain");
    return std::nullopt;
  }

  void install_routes() {
    using handler =
        std::function<std::optional<http_error>(const httplib::Request&, httplib::Response&)>;
    // The one wrapper every route goes through: a returned error and anything thrown become
    // OpenAI's error JSON, 400 for what the user can fix, 500 for the rest.
    const auto wrap = [this](std::string route, handler fn) {
      return [this, route = std::move(route), fn = std::move(fn)](const httplib::Request& req,
                                                                  httplib::Response& res) {
        metrics.count_request(route);
        std::optional<http_error> failure;
        try {
          failure = fn(req, res);
        } catch (const std::exception& e) {
          failure = http_error{500, std::string("internal error: ") + e.what()};
        } catch (...) {
          failure = http_error{500, "internal error"};
        }
        if (failure) {
          res.status = failure->status;
          res.set_content(dump_json(render_error(*failure)), "application/json");
        }
      };
    };
    http.Post("/v1/completions", wrap("/v1/completions", [this](const auto& q, auto& r) {
                return completions(q, r);
              }));
    http.Post("/v1/chat/completions",
              wrap("/v1/chat/completions", [this](const auto& q, auto& r) { return chat(q, r); }));
    http.Post("/generate",
              wrap("/generate", [this](const auto& q, auto& r) { return generate(q, r); }));
    http.Post("/tokenize",
              wrap("/tokenize", [this](const auto& q, auto& r) { return tokenize(q, r); }));
    http.Post("/detokenize",
              wrap("/detokenize", [this](const auto& q, auto& r) { return detokenize(q, r); }));
    http.Post("/update_weights_from_disk",
              wrap("/update_weights_from_disk",
                   [this](const auto& q, auto& r) { return update_weights_from_disk(q, r); }));
    http.Post("/init_weight_transfer_engine",
              wrap("/init_weight_transfer_engine",
                   [this](const auto& q, auto& r) { return init_weight_transfer(q, r); }));
    http.Post("/start_weight_update", wrap("/start_weight_update", [this](const auto& q, auto& r) {
                return start_weight_update(q, r);
              }));
    http.Post("/update_weights", wrap("/update_weights", [this](const auto& q, auto& r) {
                return transfer_update_weights(q, r);
              }));
    http.Post("/finish_weight_update",
              wrap("/finish_weight_update",
                   [this](const auto& q, auto& r) { return finish_weight_update(q, r); }));
    http.Post("/pause_generation",
              wrap("/pause_generation", [this](const auto& q, auto& r) { return pause(q, r); }));
    for (const char* route : {"/continue_generation", "/resume_generation"}) {
      http.Post(route, wrap(route, [this](const auto&, auto& r) { return resume(r); }));
    }
    for (const char* route : {"/flush_cache", "/reset_prefix_cache"}) {
      // No prefix cache here; the routes exist so that a weight-sync sequence runs unchanged.
      http.Post(route, wrap(route, [](const auto&, auto& r) -> std::optional<http_error> {
                  r.set_content(dump_json(json{{"success", true}, {"message", "cache flushed"}}),
                                "application/json");
                  return std::nullopt;
                }));
    }
    http.Post("/sleep", wrap("/sleep", [this](const auto& q, auto& r) { return sleep(q, r); }));
    http.Post("/wake_up",
              wrap("/wake_up", [this](const auto& q, auto& r) { return wake_up(q, r); }));
    http.Get("/is_sleeping",
             wrap("/is_sleeping", [this](const auto&, auto& r) -> std::optional<http_error> {
               r.set_content(dump_json(json{{"is_sleeping", sleeping()}}), "application/json");
               return std::nullopt;
             }));
    http.Post("/collective_rpc", wrap("/collective_rpc", [this](const auto& q, auto& r) {
                return collective_rpc(q, r);
              }));
    http.Post(
        "/v1/load_lora_adapter",
        wrap("/v1/load_lora_adapter", [this](const auto& q, auto& r) { return load_lora(q, r); }));
    http.Post("/v1/unload_lora_adapter",
              wrap("/v1/unload_lora_adapter",
                   [this](const auto& q, auto& r) { return unload_lora(q, r); }));
    http.Get("/is_paused",
             wrap("/is_paused", [this](const auto&, auto& r) -> std::optional<http_error> {
               r.set_content(dump_json(json{{"is_paused", gate->paused()}}), "application/json");
               return std::nullopt;
             }));
    http.Get("/health", wrap("/health", [this](const auto&, auto& r) -> std::optional<http_error> {
               if (gate->stopping()) {
                 return http_error{503, "the server is shutting down"};
               }
               r.status = 200;  // vLLM answers an empty 200
               return std::nullopt;
             }));
    http.Get("/v1/models",
             wrap("/v1/models", [this](const auto&, auto& r) -> std::optional<http_error> {
               const json model{{"id", config.model_name},
                                {"object", "model"},
                                {"created", static_cast<std::int64_t>(std::time(nullptr))},
                                {"owned_by", "leap"},
                                {"root", config.model_name},
                                {"parent", nullptr},
                                {"max_model_len", config.max_model_len},
                                // Our extension: a client bounds the ids it accepts by it.
                                {"vocab_size", config.vocab_size},
                                {"permission", json::array()}};
               json data = json::array({model});
               {
                 // Loaded LoRA adapters, as vLLM lists them: the adapter's name, its path as
                 // root, the base model as parent.
                 std::lock_guard lock(adapters_mutex);
                 for (const auto& [name, path] : adapters) {
                   data.push_back({{"id", name},
                                   {"object", "model"},
                                   {"created", model["created"]},
                                   {"owned_by", "leap"},
                                   {"root", path},
                                   {"parent", config.model_name},
                                   {"max_model_len", config.max_model_len},
                                   {"vocab_size", config.vocab_size},
                                   {"permission", json::array()}});
                 }
               }
               r.set_content(dump_json(json{{"object", "list"}, {"data", std::move(data)}}),
                             "application/json");
               return std::nullopt;
             }));
    http.Get("/get_model_info",
             wrap("/get_model_info", [this](const auto&, auto& r) -> std::optional<http_error> {
               r.set_content(
                   dump_json(json{{"model_path", config.model_name},
                                  {"tokenizer_path", "byte"},
                                  {"is_generation", true},
                                  {"backend", backend->name()},
                                  {"weight_version", std::to_string(weight_version.load())}}),
                   "application/json");
               return std::nullopt;
             }));
    http.Get("/metrics",
             wrap("/metrics", [this](const auto&, auto& r) -> std::optional<http_error> {
               r.set_content(metrics.render(weight_version.load(), gate->paused()),
                             "text/plain; version=0.0.4");
               return std::nullopt;
             }));

    http.set_error_handler(httplib::Server::HandlerWithResponse(
        [](const httplib::Request& req, httplib::Response& res) {
          if (!res.body.empty() || res.content_provider_) {
            return httplib::Server::HandlerResponse::Unhandled;
          }
          const int status = res.status == -1 ? 404 : res.status;
          res.status = status;
          std::string message = "request failed with status " + std::to_string(status);
          if (status == 404) {
            message = "no route " + req.method + " " + req.path;
          } else if (status == 413) {
            // httplib refuses form-encoded bodies over 8 KB (and any body over the payload limit).
            message =
                "the request body is too large for its content type (form-encoded bodies: "
                "8192 bytes at most); send JSON with Content-Type: application/json";
          }
          res.set_content(dump_json(render_error({status, message})), "application/json");
          return httplib::Server::HandlerResponse::Handled;
        }));
    // Runs just before a response is written, so that a client reading /metrics right after its
    // response already sees it counted (a logger would run after the write).
    http.set_post_routing_handler([this](const httplib::Request&, httplib::Response& res) {
      if (!res.has_header("x-weight-version")) {
        res.set_header("x-weight-version", std::to_string(weight_version.load()));
      }
      if (current_connection == nullptr || !current_connection->drop) {
        metrics.count_response(res.status);
      }
    });
  }
};

// ---------------------------------------------------------------------------------------------

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
  if (config.weight_transfer_backend != "disk" &&
      !backend->supports_weight_transfer(config.weight_transfer_backend)) {
    return error{"policy server: the " + backend->name() + " backend has no '" +
                 config.weight_transfer_backend +
                 "' weight-transfer engine (disk works with every backend; nccl and ipc need the "
                 "LibTorch backend, --model)"};
  }
  auto state = std::make_unique<impl>(std::move(config), std::move(backend));
  impl& s = *state;
  const std::size_t threads = s.config.threads;
  s.http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  s.http.set_payload_max_length(std::size_t{64} << 20U);
  // httplib's default sets SO_REUSEPORT, which lets a second server bind a port in use and share
  // its connections; SO_REUSEADDR alone still allows a quick restart on the same port.
  s.http.set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  s.install_routes();
  if (s.config.port == 0) {
    s.port = s.http.bind_to_any_port(s.config.host);
    if (s.port < 0) {
      return error{"policy server: cannot bind a free port on " + s.config.host};
    }
  } else {
    if (!s.http.bind_to_port(s.config.host, s.config.port)) {
      return error{"policy server: cannot bind " + s.config.host + ":" +
                   std::to_string(s.config.port) + " (in use, or not an address of this host)"};
    }
    s.port = s.config.port;
  }
  s.http.widen_backlog(s.config.listen_backlog);
  s.listener = std::thread([&s] { s.http.listen_after_bind(); });
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

std::int64_t policy_server::weight_version() const { return impl_->weight_version.load(); }

void policy_server::stop() {
  std::call_once(impl_->stop_once, [this] {
    impl_->gate->stop();
    {
      std::lock_guard lock(impl_->flights_mutex);
      impl_->flights_changed.notify_all();
    }
    impl_->http.halt();
    if (impl_->listener.joinable()) {
      impl_->listener.join();
    }
  });
}

}  // namespace leap::policy
