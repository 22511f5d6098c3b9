#include "policy/client/detail/client_scheduler.hpp"

#include <algorithm>

namespace leap::policy::detail {

admission admit_turn(std::size_t prompt_tokens, int max_tokens, int context_tokens) {
  admission a;
  a.max_tokens = max_tokens;
  if (context_tokens <= 0) {
    return a;
  }
  const long room = static_cast<long>(context_tokens) - static_cast<long>(prompt_tokens);
  if (room <= 0) {
    a.fits = false;
    a.message = "prompt of " + std::to_string(prompt_tokens) +
                " tokens fills the context window of " + std::to_string(context_tokens);
    return a;
  }
  a.max_tokens = static_cast<int>(std::min<long>(max_tokens, room));
  return a;
}

retry_decision decide_retry(const retry_config& retry, int failures, std::string_view why,
                            steady::time_point now, steady::time_point deadline,
                            const std::function<double()>& unit_random,
                            std::optional<std::chrono::milliseconds> retry_after) {
  retry_decision d;
  if (failures >= retry.max_attempts) {
    d.give_up = true;
    d.message = "gave up after " + std::to_string(failures) +
                " failed attempts (retry.max_attempts); last: " + std::string(why);
    return d;
  }
  d.when = now + retry_wait(retry, backoff_delay(retry, failures, unit_random()), retry_after);
  if (d.when >= deadline) {
    d.give_up = true;
    d.message = "turn deadline would pass before the next attempt; last: " + std::string(why);
  }
  return d;
}

namespace {

reply_verdict complete(turn_status status, std::string message, bool endpoint_fault = false) {
  reply_verdict v;
  v.action = reply_action::complete;
  v.status = status;
  v.message = std::move(message);
  v.endpoint_fault = endpoint_fault;
  return v;
}

reply_verdict retry(std::string message, bool endpoint_fault) {
  reply_verdict v;
  v.action = reply_action::retry;
  v.message = std::move(message);
  v.endpoint_fault = endpoint_fault;
  return v;
}

reply_verdict accept(std::vector<generated_turn> choices) {
  reply_verdict v;
  v.action = reply_action::accept;
  v.choices = std::move(choices);
  return v;
}

}  // namespace

reply_verdict judge_reply(const http_outcome& out, const reply_context& ctx) {
  const std::string where(ctx.where);
  if (!out.transport_ok) {
    std::string why = where + ": " + out.transport_error;
    if (transport_retryable(out)) {
      return retry(std::move(why), /*endpoint_fault=*/true);
    }
    return complete(turn_status::rejected, std::move(why));
  }
  if (out.status < 200 || out.status >= 300) {
    auto verdict = classify_http_status(out.status, out.body, *ctx.retry);
    std::string why = where + ": " + verdict.message;
    switch (verdict.kind) {
      case attempt_kind::retry: {
        auto v = retry(std::move(why), verdict.endpoint_fault);
        v.retry_after = out.retry_after;
        return v;
      }
      case attempt_kind::truncated:
        return complete(turn_status::truncated, std::move(why));
      case attempt_kind::rejected:
        return complete(turn_status::rejected, std::move(why), verdict.endpoint_fault);
    }
  }
  parsed_choices parsed =
      parse_generate_response(ctx.flavour, out.body, out.weight_version, ctx.sent);
  if (parsed.problem == parse_problem::none) {
    parsed = check_choices(std::move(parsed.choices), ctx.n, ctx.vocab_size);
  }
  switch (parsed.problem) {
    case parse_problem::malformed:
      return retry(where + ": " + parsed.message, /*endpoint_fault=*/true);
    case parse_problem::invalid:
      return retry(where + ": invalid reply: " + parsed.message, /*endpoint_fault=*/true);
    case parse_problem::schema:
      return complete(turn_status::protocol_error, where + ": " + parsed.message);
    case parse_problem::none:
      break;
  }
  return accept(std::move(parsed.choices));
}

reply_verdict judge_stream(const http_outcome& out, const stream_accumulator& stream,
                           const reply_context& ctx) {
  const std::string where(ctx.where);
  streamed_choices s = stream.finish(out.weight_version);
  if (s.problem == parse_problem::schema) {
    return complete(turn_status::protocol_error, where + ": " + s.message);
  }
  if (s.problem == parse_problem::none) {
    // The accumulator holds exactly n choices; the ids may still be beyond the vocabulary.
    auto checked = check_choices(s.choices, ctx.n, ctx.vocab_size);
    if (checked.problem != parse_problem::none) {
      s.problem = checked.problem;
      s.message = checked.message;
    }
  }
  if (s.problem == parse_problem::invalid) {
    // Nothing of a faulty reply is kept: the request is retried whole.
    return retry(where + ": invalid reply: " + s.message, /*endpoint_fault=*/true);
  }
  if (s.complete) {
    return accept(std::move(s.choices));
  }
  if (out.transport_ok && stream.events() == 0) {
    // A whole 2xx body without a single event: the server did not stream (e.g. it ignored
    // "stream": true and sent JSON). Retrying would only get the same.
    return complete(
        turn_status::protocol_error,
        where + ": asked for a stream (\"stream\": true) but the 2xx body held no SSE event");
  }
  std::string why = where + ": stream cut short: " + s.message;
  if (!out.transport_ok && !stopped_by_sink(out)) {
    why += " (" + out.transport_error + ")";
  }
  if (s.choices.size() == 1 && !s.choices[0].ids.empty()) {
    s.choices[0].finish = finish_reason::abort;
    auto v = accept(std::move(s.choices));
    v.message = std::move(why);
    v.endpoint_fault = true;
    return v;
  }
  return retry(std::move(why), /*endpoint_fault=*/true);
}

piece_decision continue_piece(std::vector<generated_turn> choices,
                              const partial_generation& partial, int max_tokens, int resumes,
                              int max_resumes, bool deadline_passed, std::string_view where) {
  piece_decision d;
  const bool single = choices.size() == 1;
  const bool aborted = std::any_of(choices.begin(), choices.end(),
                                   [](const auto& c) { return c.finish == finish_reason::abort; });
  if (aborted && !(single && !choices[0].ids.empty())) {
    // Nothing to resume from (no tokens, or several completions that cannot be continued as one).
    d.action = piece_action::retry;
    d.message = std::string(where) + ": generation aborted by the server";
    return d;
  }
  if (single) {
    // This piece's ids start after the earlier pieces'; a version change starts a segment, and so
    // does a resumed piece from a server that reports no version (vLLM): the client cannot tell
    // whether new weights sampled it, the pool can (it knows which sync came in between).
    auto& c = choices[0];
    auto segments = partial.weight_segments;
    const bool unknown_resume = !partial.ids.empty() && !c.weight_version;
    if (segments.empty() || segments.back().version != c.weight_version || unknown_resume) {
      segments.push_back({partial.ids.size(), c.weight_version});
    }
    c.weight_segments = std::move(segments);
  }
  if (!partial.ids.empty()) {
    // Stitch the earlier pieces of a resumed generation in front of this one.
    auto& c = choices[0];
    c.ids.insert(c.ids.begin(), partial.ids.begin(), partial.ids.end());
    c.logprobs.insert(c.logprobs.begin(), partial.logprobs.begin(), partial.logprobs.end());
    c.text.insert(0, partial.text);
  }
  if (!aborted) {
    d.choices = std::move(choices);
    return d;
  }
  d.resumed = true;
  const int made = resumes + 1;
  if (static_cast<int>(choices[0].ids.size()) >= max_tokens) {
    // The abort came as the last wanted token arrived: the turn is complete, cut by length.
    choices[0].finish = finish_reason::length;
    d.choices = std::move(choices);
    return d;
  }
  if (made > max_resumes) {
    d.action = piece_action::give_up;
    d.message = std::string(where) + ": generation aborted " + std::to_string(made) +
                " times (retry.max_resumes = " + std::to_string(max_resumes) + ")";
    return d;
  }
  if (deadline_passed) {
    d.action = piece_action::give_up;
    d.message = "turn deadline passed while resuming an aborted generation";
    return d;
  }
  d.action = piece_action::resume;
  d.so_far = std::move(choices[0]);
  return d;
}

scheduler_state::scheduler_state(std::vector<endpoint_state> endpoints, std::uint64_t seed)
    : endpoints_(std::move(endpoints)), pinned_queues_(endpoints_.size()), rng_(seed) {
  for (auto& e : endpoints_) {
    while (!e.base_url.empty() && e.base_url.back() == '/') {
      e.base_url.pop_back();
    }
  }
}

std::optional<int> scheduler_state::route(std::uint64_t key, int pinned) {
  const policy::route r = choose_route(endpoints_, pinned);
  switch (r.kind) {
    case route_kind::send:
      return r.endpoint;
    case route_kind::wait_pinned:
      pinned_queues_[static_cast<std::size_t>(r.endpoint)].push_back(key);
      return std::nullopt;
    case route_kind::wait_any:
      any_queue_.push_back(key);
      return std::nullopt;
  }
  return std::nullopt;
}

std::optional<scheduler_state::ready_turn> scheduler_state::next_ready() {
  for (std::size_t e = 0; e < endpoints_.size(); ++e) {
    auto& queue = pinned_queues_[e];
    if (!queue.empty() && endpoints_[e].can_take()) {
      const ready_turn ready{queue.front(), static_cast<int>(e)};
      queue.pop_front();
      return ready;
    }
  }
  if (any_queue_.empty()) {
    return std::nullopt;
  }
  const policy::route r = choose_route(endpoints_, -1);
  if (r.kind != route_kind::send) {
    return std::nullopt;
  }
  const ready_turn ready{any_queue_.front(), r.endpoint};
  any_queue_.pop_front();
  return ready;
}

void scheduler_state::unpin(int e) {
  auto& queue = pinned_queues_[static_cast<std::size_t>(e)];
  any_queue_.insert(any_queue_.end(), queue.begin(), queue.end());
  queue.clear();
}

void scheduler_state::retain_queued(const std::function<bool(std::uint64_t)>& keep) {
  auto filter = [&keep](std::deque<std::uint64_t>& queue) {
    std::deque<std::uint64_t> kept;
    for (const auto key : queue) {
      if (keep(key)) {
        kept.push_back(key);
      }
    }
    queue.swap(kept);
  };
  filter(any_queue_);
  for (auto& queue : pinned_queues_) {
    filter(queue);
  }
}

retry_decision scheduler_state::backoff(const retry_config& retry, int failures,
                                        std::string_view why, steady::time_point now,
                                        steady::time_point deadline,
                                        std::optional<std::chrono::milliseconds> retry_after) {
  return decide_retry(
      retry, failures, why, now, deadline, [this] { return unit_(rng_); }, retry_after);
}

}  // namespace leap::policy::detail
