#include "actors/generator.hpp"

#include "orchestrator/run_telemetry.hpp"
#include "policy/client/client.hpp"

#include <caf/actor_system.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include <array>
#include <charconv>
#include <chrono>
#include <deque>
#include <filesystem>
#include <limits>
#include <unordered_map>

namespace leap::actors {
namespace {

using pool_actor = generator_actor::extend<
    caf::reacts_to<completed_atom, std::uint64_t, generation_result>,
    caf::reacts_to<completed_atom, std::uint64_t, std::int32_t, std::vector<token_id>, std::string>,
    caf::reacts_to<weights_atom, std::uint64_t, ack>, caf::reacts_to<release_atom>>;

struct pending_turn {
  caf::typed_response_promise<generation_result> promise;
  policy::turn_request request;
  std::vector<token_id> input_tokens;
  double queued_ms = 0.0;
  double submitted_ms = 0.0;
  std::uint64_t weight_version = 0;
};

// A prompt being rendered by the server's /tokenize: up to three renderings (see
// policy/chat/chat.hpp's template_delta): 0 = the short conversation with assistant "a",
// 1 = the same with "b", 2 = "a" followed by the feedback with the generation prompt. A first
// prompt needs only rendering 2 (the messages themselves).
struct pending_render {
  caf::typed_response_promise<generation_result> promise;
  generation_request request;
  std::array<std::optional<std::vector<token_id>>, 3> parts;
  int outstanding = 0;
  std::string error;
  double queued_ms = 0.0;
};

struct sync_in_progress {
  caf::typed_response_promise<ack> promise;
  std::uint64_t version = 0;
  int outstanding = 0;
  std::string errors;
};

struct pool_state {
  // Not an aggregate: C++20 would let CAF construct it from the actor pointer.
  pool_state() = default;
  policy::policy_client* client = nullptr;
  std::shared_ptr<const prompt_renderer> renderer;
  generator_pool_config config;
  std::vector<std::string> endpoint_urls;
  std::uint64_t next_serial = 0;
  std::unordered_map<std::uint64_t, pending_turn> turns;
  std::deque<std::uint64_t> waiting;  // accepted by the pool, not yet by the client
  int in_flight = 0;
  bool retry_scheduled = false;
  std::uint64_t weight_version = 0;
  std::uint64_t next_sync = 0;
  std::unordered_map<std::uint64_t, sync_in_progress> syncs;
  std::unordered_map<std::uint64_t, pending_render> renders;
  // What the server's template does around an assistant turn, learned from the first feedback.
  std::optional<std::vector<token_id>> closing;
  std::optional<std::vector<token_id>> base_a;
  static inline const char* name = "leap.generator_pool";
};

// What a trajectory records for the server's reason: a reason the server names beyond stop, length
// and abort (`other`, e.g. "content_filter") ended an answer that is verified as it is.
finish_reason to_finish(finish_reason f) {
  switch (f) {
    case finish_reason::stop:
    case finish_reason::length:
    case finish_reason::abort:
    case finish_reason::error:
      return f;
    case finish_reason::other:
      return finish_reason::stop;
  }
  return finish_reason::stop;
}

// Runs on the client's loop thread: moves the answer into a message, nothing more.
// A segment's version the answer's handler replaces (record_segments' rules): the first segment's
// always, a later one's when the server reported none or not a number.
constexpr std::uint64_t unresolved_version = std::numeric_limits<std::uint64_t>::max();

// Runs on the client's thread: the versions it can read from the server's strings.
std::vector<turn_weight_segment> parse_segments(const std::vector<policy::weight_segment>& client) {
  std::vector<turn_weight_segment> out;
  out.reserve(client.size());
  for (std::size_t i = 0; i < client.size(); ++i) {
    std::uint64_t version = unresolved_version;
    const auto& text = client[i].version;
    if (i > 0 && text && !text->empty()) {
      std::uint64_t parsed = 0;
      const auto* end = text->data() + text->size();
      if (auto [p, ec] = std::from_chars(text->data(), end, parsed);
          ec == std::errc{} && p == end && parsed != unresolved_version) {
        version = parsed;
      }
    }
    out.push_back({static_cast<std::uint32_t>(client[i].first), version});
  }
  return out;
}

// Runs in the pool: the versions only the pool knows, then the merge.
std::vector<turn_weight_segment> resolve_segments(std::vector<turn_weight_segment> segments,
                                                  std::size_t tokens, std::uint64_t started,
                                                  std::uint64_t current) {
  std::vector<turn_weight_segment> out;
  out.reserve(segments.size());
  for (std::size_t i = 0; i < segments.size(); ++i) {
    auto s = segments[i];
    if (i > 0 && s.first >= tokens) {
      break;  // a resumed piece that sampled nothing
    }
    if (i == 0) {
      s.version = started;
    } else if (s.version == unresolved_version) {
      s.version = current;
    }
    if (out.empty() || out.back().version != s.version) {
      out.push_back(s);
    }
  }
  return out;
}

generation_result from_client(policy::turn_result r) {
  generation_result g;
  g.endpoint_index = r.endpoint;
  switch (r.status) {
    case policy::turn_status::ok:
      if (r.choices.empty()) {
        g.finish = finish_reason::error;
        g.error = "the server answered without a choice";
        break;
      }
      g.output_tokens = std::move(r.choices.front().ids);
      g.output_logprobs = std::move(r.choices.front().logprobs);
      g.text = std::move(r.choices.front().text);
      g.finish = to_finish(r.choices.front().finish);
      g.weight_segments = parse_segments(r.choices.front().weight_segments);
      break;
    case policy::turn_status::truncated:
      // The context is full: nothing to verify and nothing to continue.
      g.finish = finish_reason::length;
      g.error = "context full: " + r.message;
      break;
    default:
      g.finish = finish_reason::error;
      g.error = std::string(policy::to_string(r.status)) + ": " + r.message;
      break;
  }
  return g;
}

// Turns waiting for a request slot: in the pool's queue, or accepted by the client and not yet on
// the wire; stats() is the client's thread-safe counter read.
void publish_load(const pool_state& st) {
  auto* t = st.config.telemetry.get();
  if (t == nullptr) {
    return;
  }
  const auto stats = st.client->stats();
  t->generation_queue.set(static_cast<double>(st.waiting.size() + stats.pending));
  t->policy_in_flight.set(static_cast<double>(stats.in_flight));
}

void pump(pool_actor::stateful_pointer<pool_state> self) {
  auto& st = self->state;
  publish_load(st);
  while (st.in_flight < st.config.max_in_flight && !st.waiting.empty()) {
    const std::uint64_t serial = st.waiting.front();
    auto it = st.turns.find(serial);
    if (it == st.turns.end()) {
      st.waiting.pop_front();
      continue;
    }
    pool_actor handle = self;
    auto submitted = st.client->submit(it->second.request, [handle, serial](policy::turn_result r) {
      caf::anon_send(handle, completed_atom_v, serial, from_client(std::move(r)));
    });
    if (submitted == policy::submit_status::busy) {
      // Completions retry; with none outstanding a timer does, so a busy client cannot stall us.
      if (st.in_flight == 0 && !st.retry_scheduled) {
        st.retry_scheduled = true;
        self->delayed_send(self, std::chrono::milliseconds(20), release_atom_v);
      }
      return;
    }
    st.waiting.pop_front();
    if (submitted == policy::submit_status::stopped) {
      generation_result g;
      g.finish = finish_reason::error;
      g.error = "the policy client has stopped";
      it->second.promise.deliver(std::move(g));
      st.turns.erase(it);
      continue;
    }
    ++st.in_flight;
    it->second.submitted_ms = clock_ms();
    it->second.weight_version = st.weight_version;
    it->second.request.prompt.clear();  // the client has its copy
    it->second.request.prompt.shrink_to_fit();
  }
  publish_load(st);
}

policy::sampling_config to_client_sampling(const sampling_section& s, std::int64_t seed);

generation_result render_failure(const std::string& why) {
  generation_result g;
  g.finish = finish_reason::error;
  g.error = "cannot render the prompt: " + why;
  return g;
}

// Queues a rendered turn for the client.
void queue_turn(pool_actor::stateful_pointer<pool_state> self,
                caf::typed_response_promise<generation_result> promise, generation_request& request,
                std::vector<token_id> input, double queued_ms) {
  auto& st = self->state;
  pending_turn turn;
  turn.promise = std::move(promise);
  turn.request.request_id = request.request_id;
  turn.request.prompt = std::move(request.history);
  turn.request.prompt.insert(turn.request.prompt.end(), input.begin(), input.end());
  turn.request.sampling = to_client_sampling(request.sampling, request.seed);
  turn.request.pinned_endpoint = request.pinned_endpoint;
  turn.input_tokens = std::move(input);
  turn.queued_ms = queued_ms;
  const std::uint64_t serial = st.next_serial++;
  st.turns.emplace(serial, std::move(turn));
  st.waiting.push_back(serial);
  pump(self);
}

std::vector<policy::chat_message> to_chat(const std::vector<chat_text>& messages) {
  std::vector<policy::chat_message> out;
  out.reserve(messages.size());
  for (const auto& m : messages) {
    out.push_back({m.role, m.content});
  }
  return out;
}

// The renderings a feedback delta is computed from: a short conversation ending in an assistant
// message "a" (or "b"), and the same followed by the feedback.
std::vector<policy::chat_message> template_probe(const char* answer,
                                                 const std::vector<chat_text>& then = {}) {
  std::vector<policy::chat_message> out = {{"user", "u"}, {"assistant", answer}};
  for (const auto& m : then) {
    out.push_back({m.role, m.content});
  }
  return out;
}

void finish_render(pool_actor::stateful_pointer<pool_state> self, std::uint64_t serial) {
  auto& st = self->state;
  auto node = st.renders.extract(serial);
  auto& r = node.mapped();
  if (!r.error.empty()) {
    r.promise.deliver(render_failure(r.error));
    return;
  }
  if (r.request.history.empty()) {
    queue_turn(self, r.promise, r.request, std::move(*r.parts[2]), r.queued_ms);
    return;
  }
  if (!st.closing) {
    auto closing = policy::template_closing(*r.parts[0], *r.parts[1]);
    if (!closing) {
      r.promise.deliver(render_failure("the server's chat template: " + closing.err().message));
      return;
    }
    st.closing = std::move(*closing);
    st.base_a = *r.parts[0];
  }
  auto delta = policy::template_delta(*st.base_a, *r.parts[2]);
  if (!delta) {
    r.promise.deliver(render_failure("the server's chat template: " + delta.err().message));
    return;
  }
  auto input = policy::close_turn(r.request.history, *st.closing);
  input.insert(input.end(), delta->begin(), delta->end());
  queue_turn(self, r.promise, r.request, std::move(input), r.queued_ms);
}

// Renders through the server's /tokenize; the client's callbacks only anon_send the ids.
void render_on_server(pool_actor::stateful_pointer<pool_state> self,
                      caf::typed_response_promise<generation_result> promise,
                      generation_request request) {
  auto& st = self->state;
  const std::uint64_t serial = st.next_serial++;
  pending_render r;
  r.promise = std::move(promise);
  r.queued_ms = clock_ms();
  pool_actor handle = self;
  auto ask = [&](std::int32_t part, const std::vector<policy::chat_message>& messages,
                 bool generation_prompt) {
    ++r.outstanding;
    st.client->tokenize(
        -1, messages, generation_prompt, [handle, serial, part](result<std::vector<token_id>> ids) {
          if (ids) {
            caf::anon_send(handle, completed_atom_v, serial, part, std::move(*ids), std::string{});
          } else {
            caf::anon_send(handle, completed_atom_v, serial, part, std::vector<token_id>{},
                           ids.err().message);
          }
        });
  };
  if (request.history.empty()) {
    ask(2, to_chat(request.append), true);
  } else {
    if (!st.closing) {
      ask(0, template_probe("a"), false);
      ask(1, template_probe("b"), false);
    }
    ask(2, template_probe("a", request.append), true);
  }
  r.request = std::move(request);
  st.renders.emplace(serial, std::move(r));
}

policy::sampling_config to_client_sampling(const sampling_section& s, std::int64_t seed) {
  policy::sampling_config c;
  c.n = 1;
  c.temperature = s.temperature;
  c.top_p = s.top_p;
  c.top_k = s.top_k;
  c.max_tokens = s.max_tokens;
  if (seed >= 0) {
    c.seed = static_cast<std::uint64_t>(seed);
  }
  c.stop = s.stop;
  for (auto id : s.stop_token_ids) {
    c.stop_token_ids.push_back(static_cast<token_id>(id));
  }
  return c;
}

pool_actor::behavior_type pool_behavior(pool_actor::stateful_pointer<pool_state> self,
                                        policy::policy_client* client,
                                        std::shared_ptr<const prompt_renderer> renderer,
                                        generator_pool_config config) {
  auto& st = self->state;
  st.client = client;
  st.renderer = std::move(renderer);
  st.config = std::move(config);
  if (st.config.max_in_flight < 1) {
    st.config.max_in_flight = 1;
  }
  st.weight_version = st.config.initial_weight_version;
  for (const auto& e : client->endpoints()) {
    st.endpoint_urls.push_back(e.base_url);
  }
  return {
      [=](generate_atom, generation_request& request) -> caf::result<generation_result> {
        auto& st = self->state;
        auto promise = self->make_response_promise<generation_result>();
        if (!st.renderer) {
          render_on_server(self, promise, std::move(request));
          return promise;
        }
        auto input = st.renderer->render(request.history, request.append);
        if (!input) {
          return render_failure(input.err().message);
        }
        queue_turn(self, promise, request, std::move(*input), clock_ms());
        return promise;
      },
      [=](completed_atom, std::uint64_t serial, std::int32_t part, std::vector<token_id>& ids,
          const std::string& failure) {
        auto& st = self->state;
        auto it = st.renders.find(serial);
        if (it == st.renders.end()) {
          return;
        }
        auto& r = it->second;
        if (!failure.empty()) {
          if (r.error.empty()) {
            r.error = "/tokenize: " + failure;
          }
        } else if (part >= 0 && part < 3) {
          r.parts[static_cast<std::size_t>(part)] = std::move(ids);
        }
        if (--r.outstanding == 0) {
          finish_render(self, serial);
        }
      },
      [=](completed_atom, std::uint64_t serial, generation_result& result) {
        auto& st = self->state;
        auto it = st.turns.find(serial);
        if (it == st.turns.end()) {
          return;
        }
        --st.in_flight;
        auto& turn = it->second;
        result.input_tokens = std::move(turn.input_tokens);
        result.generation_ms = clock_ms() - turn.submitted_ms;
        result.queue_ms = turn.submitted_ms - turn.queued_ms;
        result.weight_version = turn.weight_version;
        result.weight_segments =
            resolve_segments(std::move(result.weight_segments), result.output_tokens.size(),
                             turn.weight_version, st.weight_version);
        result.finished_ms = clock_ms();
        if (result.endpoint_index >= 0 &&
            static_cast<std::size_t>(result.endpoint_index) < st.endpoint_urls.size()) {
          result.endpoint = st.endpoint_urls[static_cast<std::size_t>(result.endpoint_index)];
        }
        turn.promise.deliver(std::move(result));
        st.turns.erase(it);
        pump(self);
      },
      [=](release_atom) {
        self->state.retry_scheduled = false;
        pump(self);
      },
      [=](weights_atom, const weight_update& update) -> caf::result<ack> {
        auto& st = self->state;
        if (update.weights_path.empty()) {
          st.weight_version = update.version;
          return ack{};
        }
        if (!st.config.sync_plan) {
          return ack{"new weights at " + update.weights_path +
                     " but no weight sync is configured for the policy servers"};
        }
        const std::uint64_t id = st.next_sync++;
        sync_in_progress sync;
        sync.promise = self->make_response_promise<ack>();
        sync.version = update.version;
        sync.outstanding = static_cast<int>(st.endpoint_urls.size());
        auto promise = sync.promise;
        st.syncs.emplace(id, std::move(sync));
        pool_actor handle = self;
        std::string delta;
        if (!st.config.sync_delta_dir.empty()) {
          delta = policy::weight_delta_folder(st.config.sync_delta_dir, update.version);
          std::error_code ec;
          if (!std::filesystem::exists(std::filesystem::path(delta) / "weight_delta.json", ec)) {
            delta.clear();
          }
        }
        for (std::size_t i = 0; i < st.endpoint_urls.size(); ++i) {
          policy::weight_sync_request request;
          request.version = std::to_string(update.version);
          request.weights_path = update.weights_path;
          request.companion = st.config.sync_companion;
          request.delta_path = delta;
          if (st.config.sync_delta_info) {
            request.delta_update_info = [source = st.config.sync_delta_info,
                                         version = update.version] { return source(version); };
          }
          if (st.config.on_delta_refused) {
            request.on_delta_refused = [hook = st.config.on_delta_refused,
                                        url = st.endpoint_urls[i]](const std::string& why) {
              hook(url + ": " + why);
            };
          }
          st.client->sync_weights(static_cast<int>(i), *st.config.sync_plan, request,
                                  [handle, id, url = st.endpoint_urls[i]](const status& s) {
                                    caf::anon_send(
                                        handle, weights_atom_v, id,
                                        ack{s ? std::string{} : url + ": " + s.err().message});
                                  });
        }
        return promise;
      },
      [=](weights_atom, std::uint64_t id, const ack& done) {
        auto& st = self->state;
        auto it = st.syncs.find(id);
        if (it == st.syncs.end()) {
          return;
        }
        auto& sync = it->second;
        if (!done.ok()) {
          sync.errors += (sync.errors.empty() ? "" : "; ") + done.error;
        }
        if (--sync.outstanding > 0) {
          return;
        }
        if (sync.errors.empty()) {
          st.weight_version = sync.version;
        }
        sync.promise.deliver(
            ack{sync.errors.empty() ? std::string{} : "weight sync failed: " + sync.errors});
        st.syncs.erase(it);
      },
  };
}

}  // namespace

std::vector<turn_weight_segment> record_segments(const std::vector<policy::weight_segment>& client,
                                                 std::size_t tokens, std::uint64_t started,
                                                 std::uint64_t current) {
  return resolve_segments(parse_segments(client), tokens, started, current);
}

generator_actor spawn_generator_pool(caf::actor_system& system, policy::policy_client& client,
                                     std::shared_ptr<const prompt_renderer> renderer,
                                     generator_pool_config config) {
  return system.spawn(pool_behavior, &client, std::move(renderer), std::move(config));
}

}  // namespace leap::actors
