#include "policy/server/detail/server_generation.hpp"
#include "policy/server/detail/server_random.hpp"
#include "policy/server/detail/server_routes.hpp"
#include "policy/wire/wire.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <ctime>
#include <map>
#include <mutex>
#include <thread>

namespace leap::policy {
namespace {

using nlohmann::json;
using steady = std::chrono::steady_clock;

struct sequence_job {
  backend_request request;
  stop_rules rules;
  int index = 0;
};

// Called with a sequence's builder after each batch of tokens (and once at its end); returns false
// when the client is gone.
using progress_fn = std::function<bool(sequence_builder&)>;

// The generation faults that act inside a sequence: an abort after `abort_after` tokens, and the
// hold fault's wait (`hold`) once `hold_after` tokens are out. Checked per token, since a backend
// may hand over a whole sequence at once (the LibTorch one does): what comes after an abort was
// never sent.
struct sequence_faults {
  std::optional<std::size_t> abort_after;
  std::optional<std::size_t> hold_after;
  std::function<void(generation_control&)> hold;
};

result<sequence_output> run_sequence(policy_backend& backend, const sequence_job& job,
                                     generation_control& control, const sequence_faults& faults,
                                     const progress_fn& progress) {
  sequence_builder builder(job.rules, job.index, job.request.prompt);
  bool client_gone = false;
  bool held = false;
  const auto report = [&] {
    if (progress && !progress(builder)) {
      client_gone = true;
      control.abort("the client closed the connection");
      return false;
    }
    return true;
  };
  const token_sink sink = [&](std::span<const token_step> steps) {
    for (const auto& step : steps) {
      if (faults.abort_after && builder.output().token_ids.size() >= *faults.abort_after) {
        control.abort("injected fault: the generation was aborted");
        break;
      }
      if (builder.push(step)) {
        break;
      }
      if (faults.hold_after && !held && builder.output().token_ids.size() >= *faults.hold_after) {
        // The tokens so far go out first (streams), so a client holds them while this waits.
        held = true;
        if (!report()) {
          return false;
        }
        faults.hold(control);
        if (control.should_stop()) {
          break;
        }
      }
    }
    if (!report()) {
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
                                                   const sequence_faults& faults,
                                                   const progress_fn& progress) {
  std::vector<std::optional<result<sequence_output>>> results(jobs.size());
  if (jobs.size() == 1) {
    results[0] = run_sequence(backend, jobs[0], control, faults, progress);
  } else {
    std::atomic<std::size_t> next{0};
    const auto work = [&] {
      for (std::size_t i = next++; i < jobs.size(); i = next++) {
        results[i] = run_sequence(backend, jobs[i], control, faults, progress);
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

// The HTTP error faults, in the engines' own words, so that a client classifies them as it would
// the real engine's. The context-length wording is vLLM's
// (vllm-project/vllm, vllm/entrypoints/openai/serving_engine.py, OpenAIServing._validate_input)
// and SGLang's (sgl-project/sglang, python/sglang/srt/managers/tokenizer_manager.py,
// _validate_one_request); the bad request is vLLM's sampling check (vllm/sampling_params.py,
// SamplingParams._verify_args; SGLang's python/sglang/srt/sampling/sampling_params.py says the
// same). The body is render_error's, the shape both engines answer.
std::optional<http_error> injected_error(const fault_decision& fault, std::size_t prompt_tokens,
                                         int max_tokens, int max_model_len, bool sglang) {
  const std::string prefix = "injected fault: ";
  switch (fault.kind) {
    case fault_kind::http_5xx:
    case fault_kind::status_502:
    case fault_kind::status_503:
    case fault_kind::status_504:
      return http_error{fault.http_status,
                        prefix + "the server answered " + std::to_string(fault.http_status)};
    case fault_kind::status_429:
      return http_error{429, prefix + "too many requests: the waiting queue is full"};
    case fault_kind::status_500:
      return http_error{500, prefix + "the engine died"};
    case fault_kind::context_too_long: {
      const std::string limit = std::to_string(max_model_len);
      if (sglang) {
        return http_error{400, prefix + "The input (" + std::to_string(prompt_tokens) +
                                   " tokens) is longer than the model's context length (" + limit +
                                   " tokens)."};
      }
      return http_error{
          400, prefix + "This model's maximum context length is " + limit +
                   " tokens. However, you requested " +
                   std::to_string(prompt_tokens + static_cast<std::size_t>(max_tokens)) +
                   " tokens (" + std::to_string(prompt_tokens) + " in the messages, " +
                   std::to_string(max_tokens) +
                   " in the completion). Please reduce the length of the messages or completion."};
    }
    case fault_kind::bad_request:
      return http_error{400, prefix + "temperature must be non-negative, got -1.0."};
    case fault_kind::none:
    case fault_kind::drop:
    case fault_kind::stall:
    case fault_kind::malformed:
    case fault_kind::truncate:
    case fault_kind::abort:
    case fault_kind::no_token_ids:
    case fault_kind::hold:
      return std::nullopt;
  }
  return std::nullopt;
}

// The no_token_ids fault: vLLM's token_ids and SGLang's output_ids taken out, wherever they are.
void strip_token_ids(json& value) {
  if (value.is_object()) {
    value.erase("token_ids");
    value.erase("output_ids");
    for (auto& item : value) {
      strip_token_ids(item);
    }
  } else if (value.is_array()) {
    for (auto& item : value) {
      strip_token_ids(item);
    }
  }
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

// The generation routes' handlers, with the counters they share (arrival numbers, response ids).
class generation_service {
 public:
  explicit generation_service(const server_context& context)
      : config_(context.config),
        backend_(context.backend),
        state_(context.state),
        metrics_(context.metrics) {}

  [[nodiscard]] std::string next_id(const char* prefix) {
    const std::uint64_t n = id_counter_++;
    return prefix + hex_id(random::combine(config_.seed, n), random::mix(n ^ 0x1D5ULL));
  }

  [[nodiscard]] response_meta make_meta(const char* prefix) {
    response_meta meta;
    meta.id = next_id(prefix);
    meta.created = static_cast<std::int64_t>(std::time(nullptr));
    meta.model = config_.model_name;
    meta.weight_version = state_.weight_version();
    meta.vocab = config_.vocab.get();
    return meta;
  }

  [[nodiscard]] std::optional<http_error> check_model(
      const std::optional<std::string>& model) const {
    if (model && !model->empty() && *model != config_.model_name) {
      if (!state_.has_adapter(*model)) {
        return http_error{404, "The model `" + *model + "` does not exist."};
      }
    }
    return std::nullopt;
  }

  // vLLM's context check: prompt + max_tokens must fit; max_tokens defaults per route.
  [[nodiscard]] result<int> resolve_max_tokens(std::size_t prompt_len, std::optional<int> requested,
                                               int fallback, bool clamp) const {
    const auto limit = static_cast<std::size_t>(config_.max_model_len);
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
        job.rules.vocab = config_.vocab.get();
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
        out.push_back(config_.vocab->encode(*input.text));
      } else {
        if (auto bad = check_vocabulary(config_.vocab_size, input.ids, key)) {
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
  std::optional<http_error> serve_generation(const http_request& req, httplib::Response& res,
                                             std::vector<sequence_job> jobs, bool stream,
                                             const char* id_prefix, renderers render,
                                             std::uint64_t serial) {
    const fault_decision fault = decide_fault(config_.faults, serial);
    const std::size_t prompt_tokens_0 = jobs.empty() ? 0 : jobs.front().request.prompt.size();
    const int max_tokens_0 =
        jobs.empty() ? 0 : jobs.front().request.sampling.max_tokens.value_or(0);
    if (config_.on_generation) {
      config_.on_generation(generation_arrival{serial, req.path(), req.header("X-Request-Id"),
                                               prompt_tokens_0, max_tokens_0, fault});
    }
    if (fault.kind != fault_kind::none) {
      metrics_.count_fault(fault.kind);
    }
    if (fault.kind == fault_kind::drop) {
      drop_current_connection();
      res.status = 500;
      return std::nullopt;
    }
    if (auto refused = injected_error(fault, prompt_tokens_0, max_tokens_0, config_.max_model_len,
                                      req.path() == "/generate")) {
      if (fault.kind == fault_kind::status_429) {
        res.set_header("Retry-After", std::to_string(config_.faults.retry_after.count()));
      }
      return refused;
    }
    if (fault.kind == fault_kind::no_token_ids) {
      render.full = [full = std::move(render.full)](const response_meta& meta,
                                                    const std::vector<sequence_output>& out) {
        json body = full(meta, out);
        strip_token_ids(body);
        return body;
      };
      render.delta = [delta = std::move(render.delta)](const response_meta& meta,
                                                       const sequence_output& part) {
        std::vector<std::string> events = delta(meta, part);
        for (auto& event : events) {
          json parsed = json::parse(event, nullptr, false);
          if (!parsed.is_discarded()) {
            strip_token_ids(parsed);
            event = dump_json(parsed);
          }
        }
        return events;
      };
    }
    auto control = std::make_shared<generation_control>(state_.gate());
    auto place = std::make_shared<server_state::flight>(state_, control);
    if (!place->admit()) {
      return http_error{503, "the server is shutting down"};
    }
    if (fault.kind == fault_kind::stall &&
        !control->sleep_until(steady::now() + config_.faults.stall_duration) &&
        state_.gate()->stopping()) {
      return http_error{503, "the server is shutting down"};
    }
    const auto start = steady::now();
    response_meta meta = make_meta(id_prefix);
    res.set_header("x-weight-version", std::to_string(meta.weight_version));
    sequence_faults faults;
    if (fault.kind == fault_kind::abort) {
      faults.abort_after =
          config_.faults.abort_tokens > 0 ? config_.faults.abort_tokens : 1 + fault.detail % 8;
    }
    if (fault.kind == fault_kind::hold) {
      faults.hold_after = std::max<std::size_t>(config_.faults.hold_tokens, 1);
      faults.hold = [this, admitted = meta.weight_version](generation_control& held) {
        hold_generation(held, admitted);
      };
    }
    std::int64_t prompt_tokens = 0;
    for (const auto& job : jobs) {
      if (job.request.sample_index == 0) {
        prompt_tokens += static_cast<std::int64_t>(job.request.prompt.size());
      }
    }

    if (!stream) {
      auto outputs = run_sequences(backend_, jobs, *control, faults, nullptr);
      if (!outputs) {
        return http_error{500, outputs.err().message};
      }
      std::int64_t generated = 0;
      for (const auto& o : *outputs) {
        generated += static_cast<std::int64_t>(o.token_ids.size());
      }
      metrics_.add_tokens(prompt_tokens, generated);
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
      std::shared_ptr<server_state::flight> place;
      response_meta meta;
      renderers render;
      fault_decision fault;
      sequence_faults faults;
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
    state->faults = std::move(faults);
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
               state.render.delta(state.meta, builder.take_delta(config_.stream_chunk_tokens))) {
            out.push_back(std::move(e));
          }
        }
        return out;
      });
    };
    auto outputs = run_sequences(backend_, state.jobs, *state.control, state.faults, progress);
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
    metrics_.add_tokens(state.prompt_tokens, generated);
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

  std::optional<http_error> completions(const http_request& req, httplib::Response& res) {
    auto parsed = parse_body(req, parse_completion_request);
    if (!parsed) {
      return bad_request(parsed.err());
    }
    auto request = std::make_shared<completion_request>(std::move(*parsed));
    if (auto bad = check_model(request->model)) {
      return bad;
    }
    std::vector<std::vector<token_id>> prompts;
    if (auto bad = resolve_prompts(request->prompts, "prompt", prompts)) {
      return bad;
    }
    const std::uint64_t serial = generation_serial_++;
    auto jobs =
        make_jobs(prompts, request->sampling, 16, false, request->logprobs.value_or(0), serial);
    if (!jobs) {
      return bad_request(jobs.err());
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
    return serve_generation(req, res, std::move(*jobs), request->stream, "cmpl-", std::move(render),
                            serial);
  }

  std::optional<http_error> chat(const http_request& req, httplib::Response& res) {
    auto parsed = parse_body(req, parse_chat_request);
    if (!parsed) {
      return bad_request(parsed.err());
    }
    auto request = std::make_shared<chat_request>(std::move(*parsed));
    if (auto bad = check_model(request->model)) {
      return bad;
    }
    auto rendered = config_.vocab->render_chat(request->messages, request->render);
    if (!rendered) {
      return bad_request(rendered.err().wrap("rendering the chat template"));
    }
    const std::vector<std::vector<token_id>> prompts{std::move(*rendered)};
    const std::uint64_t serial = generation_serial_++;
    auto jobs = make_jobs(prompts, request->sampling, 0, false,
                          request->logprobs ? request->top_logprobs : 0, serial);
    if (!jobs) {
      return bad_request(jobs.err());
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
    return serve_generation(req, res, std::move(*jobs), request->stream, "chatcmpl-",
                            std::move(render), serial);
  }

  std::optional<http_error> generate(const http_request& req, httplib::Response& res) {
    auto parsed = parse_body(req, parse_generate_request);
    if (!parsed) {
      return bad_request(parsed.err());
    }
    auto request = std::make_shared<generate_request>(std::move(*parsed));
    std::vector<std::vector<token_id>> prompts;
    if (auto bad = resolve_prompts(request->prompts, "input_ids", prompts)) {
      return bad;
    }
    const std::uint64_t serial = generation_serial_++;
    // SGLang clips max_new_tokens to the room left in the context instead of refusing.
    auto jobs = make_jobs(prompts, request->sampling, 128, true,
                          request->return_logprob ? request->top_logprobs_num : 0, serial);
    if (!jobs) {
      return bad_request(jobs.err());
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
    return serve_generation(req, res, std::move(*jobs), request->stream, "", std::move(render),
                            serial);
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

  std::optional<http_error> tokenize(const http_request& req, httplib::Response& res) {
    auto request = parse_body(req, parse_tokenize_request);
    if (!request) {
      return bad_request(request.err());
    }
    if (auto bad = check_model(request->model)) {
      return bad;
    }
    std::vector<token_id> ids;
    if (request->prompt) {
      ids = config_.vocab->encode(*request->prompt);
    } else {
      auto rendered = config_.vocab->render_chat(*request->messages, request->render);
      if (!rendered) {
        return bad_request(rendered.err().wrap("rendering the chat template"));
      }
      ids = std::move(*rendered);
    }
    json out{{"count", ids.size()},
             {"max_model_len", config_.max_model_len},
             {"tokens", ids},
             {"token_strs", nullptr}};
    if (request->return_token_strs) {
      json strs = json::array();
      for (const token_id id : ids) {
        strs.push_back(config_.vocab->token_text(id));
      }
      out["token_strs"] = std::move(strs);
    }
    res.set_content(dump_json(out), "application/json");
    return std::nullopt;
  }

  std::optional<http_error> detokenize(const http_request& req, httplib::Response& res) {
    auto request = parse_body(req, parse_detokenize_request);
    if (!request) {
      return bad_request(request.err());
    }
    if (auto bad = check_vocabulary(config_.vocab_size, request->tokens, "tokens")) {
      return bad;
    }
    const std::string text = config_.vocab->decode(request->tokens);
    // vLLM answers "prompt", SGLang "text": both, so that either client reads it.
    res.set_content(dump_json(json{{"prompt", text}, {"text", text}}), "application/json");
    return std::nullopt;
  }

 private:
  // The hold fault's wait: until the generation must end (a pause in abort mode, the client gone,
  // shutdown), the served weight version is no longer the one it was admitted at, or
  // hold_duration has passed. The version has no signal of its own, so it is polled.
  void hold_generation(generation_control& control, std::int64_t admitted) const {
    const auto until = steady::now() + config_.faults.hold_duration;
    constexpr auto poll = std::chrono::milliseconds(20);
    while (state_.weight_version() == admitted && steady::now() < until &&
           control.sleep_until(std::min(until, steady::now() + poll))) {
    }
  }

  const server_config& config_;
  policy_backend& backend_;
  server_state& state_;
  server_metrics& metrics_;
  std::atomic<std::uint64_t> generation_serial_{0};
  std::atomic<std::uint64_t> id_counter_{0};
};

}  // namespace

std::vector<route> generation_routes(const server_context& context) {
  const auto bind = route_binder(std::make_shared<generation_service>(context));
  return {
      {http_method::post, "/v1/completions", bind(&generation_service::completions)},
      {http_method::post, "/v1/chat/completions", bind(&generation_service::chat)},
      {http_method::post, "/generate", bind(&generation_service::generate)},
      {http_method::post, "/tokenize", bind(&generation_service::tokenize)},
      {http_method::post, "/detokenize", bind(&generation_service::detokenize)},
  };
}

}  // namespace leap::policy
