// policy_client's turns (detail/client_impl.hpp): admission, routing, attempts and their replies,
// retries and resumptions, completion, the deadline sweep, and the endpoints' health checks.
#include "policy/client/detail/client_impl.hpp"

#include <span>

namespace leap::policy {

using detail::bump;
using detail::steady;
using detail::turn_state;

// ---- turns --------------------------------------------------------------------------------------

void policy_client::impl::accept_turn(turn_request request, turn_callback callback) {
  auto t = std::make_unique<turn_state>();
  t->key = next_key_++;
  t->request = std::move(request);
  t->callback = std::move(callback);
  if (t->request.request_id.empty()) {
    t->request.request_id = id_prefix_ + std::to_string(t->key);
  }
  t->deadline = steady::now() + config_.turn_deadline;
  turn_state& turn = *t;
  turns_.emplace(t->key, std::move(t));
  if (stopping()) {
    complete(turn, turn_status::cancelled, "policy client stopped", {});
    return;
  }
  const auto admitted = detail::admit_turn(turn.request.prompt.size(),
                                           turn.request.sampling.max_tokens, context_tokens_);
  if (!admitted.fits) {
    complete(turn, turn_status::truncated, admitted.message, {});
    return;
  }
  turn.max_tokens = admitted.max_tokens;
  route_turn(turn);
}

int policy_client::impl::pin_of(const turn_state& t) {
  return t.endpoint >= 0 ? t.endpoint : t.request.pinned_endpoint;
}

void policy_client::impl::route_turn(turn_state& t) {
  if (const auto e = sched_.route(t.key, pin_of(t))) {
    send_turn(t, *e);
  } else {
    t.queued = true;
  }
}

void policy_client::impl::pump() {
  while (const auto ready = sched_.next_ready()) {
    if (auto* t = queued_turn(ready->key)) {
      send_turn(*t, ready->endpoint);
    }
  }
}

turn_state* policy_client::impl::queued_turn(std::uint64_t key) {
  auto it = turns_.find(key);
  if (it == turns_.end() || !it->second->queued) {
    return nullptr;
  }
  return it->second.get();
}

std::vector<token_id> policy_client::impl::sent_ids(const turn_state& t) {
  std::vector<token_id> sent = t.request.prompt;
  sent.insert(sent.end(), t.partial.ids.begin(), t.partial.ids.end());
  return sent;
}

void policy_client::impl::send_turn(turn_state& t, int e) {
  t.queued = false;
  t.endpoint = e;
  ++t.attempts;
  bump(stats_.attempts);
  bump(stats_.in_flight);
  sched_.sent(e);
  views_dirty_ = true;
  std::string wire_id = t.request.request_id + "." + std::to_string(t.attempts);
  auto body = build_generate_body(
      config_.flavour, config_.model, t.request.prompt, t.partial.ids, t.request.sampling,
      t.max_tokens - static_cast<int>(t.partial.ids.size()), wire_id, config_.stream);
  // A streamed reply is read event by event as it arrives; the accumulator outlives the
  // exchange in the completion callback.
  std::shared_ptr<stream_accumulator> stream;
  std::function<bool(std::string_view)> sink;
  if (config_.stream) {
    stream =
        std::make_shared<stream_accumulator>(config_.flavour, t.request.sampling.n, sent_ids(t));
    // Once the stream went bad (an event that is not JSON, an error event), reading on would
    // only add tokens after a gap: the sink ends the exchange; what arrived before is kept.
    sink = [acc = stream.get()](std::string_view bytes) { return acc->feed(bytes); };
  }
  const auto key = t.key;
  send(
      e, "POST", route_path_, std::move(body), std::move(wire_id), config_.request_timeout,
      [this, key, e, stream = std::move(stream)](const http_outcome& out) {
        on_turn_done(key, e, out, stream.get());
      },
      std::move(sink));
}

void policy_client::impl::on_turn_done(std::uint64_t key, int e, const http_outcome& out,
                                       const stream_accumulator* stream) {
  sched_.answered(e);
  stats_.in_flight.fetch_sub(1, std::memory_order_relaxed);
  views_dirty_ = true;
  auto it = turns_.find(key);
  if (it != turns_.end()) {
    handle_turn_outcome(*it->second, e, out, stream);
  }
  apply_sync(e, syncs_[e].in_flight_changed(sched_.endpoint(e).in_flight));
}

void policy_client::impl::handle_turn_outcome(turn_state& t, int e, const http_outcome& out,
                                              const stream_accumulator* stream) {
  if (stopping()) {
    complete(t, turn_status::cancelled, "policy client stopped", {});
    return;
  }
  std::vector<token_id> joined;
  std::span<const token_id> sent = t.request.prompt;
  if (!t.partial.ids.empty()) {
    joined = sent_ids(t);
    sent = joined;
  }
  detail::reply_context ctx;
  ctx.flavour = config_.flavour;
  ctx.retry = &config_.retry;
  ctx.n = t.request.sampling.n;
  ctx.vocab_size = vocab_size_;
  ctx.where = sched_.endpoint(e).base_url;
  ctx.sent = sent;
  // A stream cut mid-way ends with a transport error after a 2xx status: what arrived counts.
  const bool streamed_2xx = stream != nullptr && out.status >= 200 && out.status < 300;
  auto verdict =
      streamed_2xx ? detail::judge_stream(out, *stream, ctx) : detail::judge_reply(out, ctx);
  switch (verdict.action) {
    case detail::reply_action::complete:
      if (verdict.endpoint_fault) {
        note_failure(e);
      }
      complete(t, verdict.status, std::move(verdict.message), {});
      return;
    case detail::reply_action::retry:
      retry_turn(t, verdict.message, verdict.endpoint_fault, e, verdict.retry_after);
      return;
    case detail::reply_action::accept:
      if (verdict.endpoint_fault) {
        // A stream cut after some tokens: they are kept and resumed from.
        note_failure(e);
        t.last_error = std::move(verdict.message);
      } else {
        record_success(sched_.endpoint(e));
      }
      accept_choices(t, e, std::move(verdict.choices));
      return;
  }
}

void policy_client::impl::accept_choices(turn_state& t, int e,
                                         std::vector<generated_turn> choices) {
  auto d = detail::continue_piece(std::move(choices), t.partial, t.max_tokens, t.resumes,
                                  config_.retry.max_resumes, steady::now() >= t.deadline,
                                  sched_.endpoint(e).base_url);
  if (d.resumed) {
    ++t.resumes;
    bump(stats_.resumes);
  }
  switch (d.action) {
    case detail::piece_action::done:
      complete(t, turn_status::ok, {}, std::move(d.choices));
      return;
    case detail::piece_action::retry:
      retry_turn(t, d.message, /*endpoint_fault=*/false, e);
      return;
    case detail::piece_action::give_up:
      complete(t, turn_status::unavailable, std::move(d.message), {});
      return;
    case detail::piece_action::resume:
      t.partial.ids = std::move(d.so_far.ids);
      t.partial.logprobs = std::move(d.so_far.logprobs);
      t.partial.text = std::move(d.so_far.text);
      t.partial.weight_segments = std::move(d.so_far.weight_segments);
      route_turn(t);
      return;
  }
}

void policy_client::impl::note_failure(int e) {
  views_dirty_ = true;
  if (record_failure(sched_.endpoint(e), config_.health.down_after_failures)) {
    on_not_routable(e);
  }
}

void policy_client::impl::retry_turn(turn_state& t, const std::string& why, bool endpoint_fault,
                                     int e, std::optional<std::chrono::milliseconds> retry_after) {
  if (endpoint_fault) {
    note_failure(e);
  }
  t.last_error = why;
  ++t.failures;
  const auto d =
      sched_.backoff(config_.retry, t.failures, why, steady::now(), t.deadline, retry_after);
  if (d.give_up) {
    complete(t, turn_status::unavailable, d.message, {});
    return;
  }
  bump(stats_.retries);
  const auto key = t.key;
  // Backing off counts as pending: the turn is held, not on the wire.
  net_.schedule(d.when, [this, key] {
    auto it = turns_.find(key);
    if (it != turns_.end()) {
      route_turn(*it->second);
    }
  });
}

void policy_client::impl::complete(turn_state& t, turn_status status, std::string message,
                                   std::vector<generated_turn> choices) {
  turn_result r;
  r.request_id = t.request.request_id;
  r.status = status;
  r.message = status == turn_status::ok ? t.last_error : std::move(message);
  r.choices = std::move(choices);
  r.endpoint = t.endpoint;
  r.attempts = t.attempts;
  r.resumes = t.resumes;
  if (t.endpoint >= 0) {
    r.endpoint_weight_version = sched_.endpoint(t.endpoint).weight_version;
  }
  auto it = turns_.find(t.key);
  auto owned = std::move(it->second);  // keeps `t` alive until the callback returned
  turns_.erase(it);
  outstanding_.fetch_sub(1);
  bump(stats_.completed);
  switch (status) {
    case turn_status::ok:
      bump(stats_.ok);
      break;
    case turn_status::truncated:
      bump(stats_.truncated);
      break;
    case turn_status::rejected:
      bump(stats_.rejected);
      break;
    case turn_status::protocol_error:
      bump(stats_.protocol_errors);
      break;
    case turn_status::unavailable:
      bump(stats_.unavailable);
      break;
    case turn_status::cancelled:
      bump(stats_.cancelled);
      break;
  }
  publish_views();  // so that a callback reading endpoints() sees the state it was called in
  owned->callback(std::move(r));
}

void policy_client::impl::sweep() {
  const auto now = steady::now();
  sched_.retain_queued([this, now](std::uint64_t key) {
    auto* t = queued_turn(key);
    if (t == nullptr) {
      return false;
    }
    if (now < t->deadline) {
      return true;
    }
    std::string why = "turn deadline passed while waiting for an endpoint";
    if (!t->last_error.empty()) {
      why += "; last error: " + t->last_error;
    }
    complete(*t, turn_status::unavailable, std::move(why), {});
    return false;
  });
  net_.schedule(now + sweep_interval, [this] { sweep(); });
}

void policy_client::impl::on_not_routable(int e) {
  sched_.unpin(e);
  views_dirty_ = true;
}

// ---- health -------------------------------------------------------------------------------------

void policy_client::impl::health_tick(int e) {
  net_.schedule(steady::now() + config_.health.interval, [this, e] { health_tick(e); });
  if (health_busy_[e]) {
    return;
  }
  health_busy_[e] = true;
  bump(stats_.health_checks);
  send(e, "GET", config_.health.path, {}, {}, config_.health.timeout,
       [this, e](const http_outcome& out) {
         health_busy_[e] = false;
         if (stopping()) {
           return;
         }
         const bool passed = out.transport_ok && out.status >= 200 && out.status < 300;
         auto& endpoint = sched_.endpoint(e);
         const bool was_up = endpoint.up;
         record_health_check(endpoint, passed, config_.health.down_after_failures);
         views_dirty_ = true;
         if (was_up && !endpoint.up) {
           on_not_routable(e);
         }
       });
}

}  // namespace leap::policy
