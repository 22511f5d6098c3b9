// policy_client's /tokenize calls and its start-up check (detail/client_impl.hpp), which renders
// a probe conversation through /tokenize and sends a one-token generation to every endpoint.
#include "policy/client/detail/client_impl.hpp"

#include <algorithm>

namespace leap::policy {

using detail::bump;
using detail::steady;

// ---- tokenize -----------------------------------------------------------------------------------

void policy_client::impl::start_tokenize(
    int endpoint, std::string body, std::function<void(result<std::vector<token_id>>)> callback) {
  if (stopping()) {
    callback(error{"policy client stopped"});
    return;
  }
  if (endpoint >= 0 && static_cast<std::size_t>(endpoint) >= sched_.size()) {
    callback(error{"tokenize: no endpoint " + std::to_string(endpoint)});
    return;
  }
  const std::uint64_t key = next_tokenize_++;
  auto& call = tokenizes_[key];
  call.pinned = endpoint;
  call.body = std::move(body);
  call.callback = std::move(callback);
  call.deadline = steady::now() + config_.turn_deadline;
  send_tokenize(key);
}

void policy_client::impl::send_tokenize(std::uint64_t key) {
  auto it = tokenizes_.find(key);
  if (it == tokenizes_.end()) {
    return;
  }
  int e = it->second.pinned;
  if (e < 0) {
    const route r = choose_route(sched_.endpoints(), -1);
    e = r.kind == route_kind::send ? r.endpoint : 0;
  }
  bump(stats_.tokenize_attempts);
  send(e, "POST", config_.tokenize_path, it->second.body, {}, config_.request_timeout,
       [this, key, e](const http_outcome& out) { on_tokenize_done(key, e, out); });
}

void policy_client::impl::on_tokenize_done(std::uint64_t key, int e, const http_outcome& out) {
  auto it = tokenizes_.find(key);
  if (it == tokenizes_.end()) {
    return;
  }
  const std::string where = sched_.endpoint(e).base_url + config_.tokenize_path;
  if (stopping()) {
    end_tokenize(it, error{where + ": policy client stopped"});
    return;
  }
  if (!out.transport_ok) {
    const std::string why = where + ": " + out.transport_error;
    if (detail::transport_retryable(out)) {
      retry_tokenize(it, e, why, /*endpoint_fault=*/true);
    } else {
      end_tokenize(it, error{why});
    }
    return;
  }
  if (out.status < 200 || out.status >= 300) {
    auto verdict = classify_http_status(out.status, out.body, config_.retry);
    const std::string why = where + ": " + verdict.message;
    if (verdict.kind == attempt_kind::retry) {
      retry_tokenize(it, e, why, verdict.endpoint_fault, out.retry_after);
    } else {
      if (verdict.endpoint_fault) {
        note_failure(e);
      }
      end_tokenize(it, error{why});
    }
    return;
  }
  auto ids = parse_tokenize_response(out.body);
  if (!ids) {
    // Not JSON, cut short, or ids no tokenizer makes: a faulty reply, as for a generation.
    retry_tokenize(it, e, where + ": " + ids.err().message, /*endpoint_fault=*/true);
    return;
  }
  if (vocab_size_ > 0) {
    for (const token_id id : *ids) {
      if (id >= vocab_size_) {
        retry_tokenize(it, e,
                       where + ": token id " + std::to_string(id) +
                           " is outside the vocabulary (vocab_size " + std::to_string(vocab_size_) +
                           ")",
                       /*endpoint_fault=*/true);
        return;
      }
    }
  }
  record_success(sched_.endpoint(e));
  end_tokenize(it, std::move(ids));
}

void policy_client::impl::retry_tokenize(std::map<std::uint64_t, tokenize_call>::iterator it, int e,
                                         const std::string& why, bool endpoint_fault,
                                         std::optional<std::chrono::milliseconds> retry_after) {
  if (endpoint_fault) {
    note_failure(e);
  }
  auto& call = it->second;
  ++call.failures;
  const auto d =
      sched_.backoff(config_.retry, call.failures, why, steady::now(), call.deadline, retry_after);
  if (d.give_up) {
    end_tokenize(it, error{d.message});
    return;
  }
  bump(stats_.retries);
  const std::uint64_t key = it->first;
  net_.schedule(d.when, [this, key] { send_tokenize(key); });
}

void policy_client::impl::end_tokenize(std::map<std::uint64_t, tokenize_call>::iterator it,
                                       result<std::vector<token_id>> ids) {
  auto callback = std::move(it->second.callback);
  tokenizes_.erase(it);
  callback(std::move(ids));
}

// ---- start-up check -----------------------------------------------------------------------------

void policy_client::impl::start_preflight(const std::shared_ptr<preflight_state>& p) {
  p->outstanding = static_cast<int>(sched_.size());
  p->checks.resize(sched_.size());
  for (std::size_t e = 0; e < sched_.size(); ++e) {
    p->checks[e].base_url = sched_.endpoints()[e].base_url;
    preflight_models(p, static_cast<int>(e));
  }
}

void policy_client::impl::preflight_done(const std::shared_ptr<preflight_state>& p, int e,
                                         const std::string& problem) {
  if (!problem.empty()) {
    p->errors += (p->errors.empty() ? "" : "; ") + sched_.endpoint(e).base_url + problem;
  }
  if (--p->outstanding > 0) {
    return;
  }
  if (!p->errors.empty()) {
    p->callback(error{p->errors});
    return;
  }
  // A served model's own vocabulary (the smallest reported) replaces the fallback: a model's
  // embedding may have more rows than its tokenizer has ids, and it can sample any of them.
  if (config_.vocab_size == 0) {
    int reported = 0;
    for (const auto& c : p->checks) {
      if (c.vocab_size > 0 && (reported == 0 || c.vocab_size < reported)) {
        reported = c.vocab_size;
      }
    }
    if (reported > 0) {
      vocab_size_ = reported;
    }
  }
  // vLLM answers a request whose prompt + max_tokens exceeds its max_model_len with a 400, which
  // ends the turn as `truncated` with no tokens: with a max_tokens set for a larger model, every
  // turn of the run would be empty. The reported window lowers max_tokens to what fits instead.
  if (context_tokens_ == 0) {
    for (const auto& c : p->checks) {
      if (c.max_model_len > 0 && (context_tokens_ == 0 || c.max_model_len < context_tokens_)) {
        context_tokens_ = c.max_model_len;
      }
    }
  }
  p->callback(std::move(p->checks));
}

void policy_client::impl::preflight_models(const std::shared_ptr<preflight_state>& p, int e) {
  send(
      e, "GET", "/v1/models", {}, {}, config_.request_timeout,
      [this, p, e](const http_outcome& out) {
        if (!out.transport_ok) {
          preflight_done(p, e, "/v1/models: " + out.transport_error);
          return;
        }
        if (out.status == 404 && config_.model.empty()) {
          preflight_tokenize(p, e);  // nothing to check the model against, nor needed
          return;
        }
        if (out.status < 200 || out.status >= 300) {
          preflight_done(
              p, e,
              "/v1/models: HTTP " + std::to_string(out.status) + ": " + error_message(out.body) +
                  (config_.model.empty() ? ""
                                         : " (needed to check the model '" + config_.model + "')"));
          return;
        }
        auto listed = parse_models_response(out.body);
        if (!listed) {
          preflight_done(p, e, "/v1/models: " + listed.err().message);
          return;
        }
        auto& check = p->checks[static_cast<std::size_t>(e)];
        check.models = std::move(listed->models);
        check.max_model_len = listed->max_model_len;
        check.vocab_size = listed->vocab_size;
        if (!config_.model.empty() && std::find(check.models.begin(), check.models.end(),
                                                config_.model) == check.models.end()) {
          std::string served;
          for (const auto& m : check.models) {
            served += (served.empty() ? "'" : ", '") + m + "'";
          }
          preflight_done(p, e,
                         ": the server does not serve the model '" + config_.model +
                             "' (GET /v1/models lists " +
                             (served.empty() ? std::string("none") : served) + ")");
          return;
        }
        preflight_tokenize(p, e);
      });
}

void policy_client::impl::preflight_tokenize(const std::shared_ptr<preflight_state>& p, int e) {
  if (p->request.tokenize_probe.empty()) {
    preflight_generate(p, e, p->request.prompt);
    return;
  }
  auto body = build_tokenize_body(config_.flavour, config_.model, p->request.tokenize_probe,
                                  /*add_generation_prompt=*/true);
  if (!body) {
    preflight_done(p, e, config_.tokenize_path + ": " + body.err().message);
    return;
  }
  start_tokenize(e, std::move(*body), [this, p, e](result<std::vector<token_id>> ids) {
    if (!ids) {
      preflight_done(p, e,
                     config_.tokenize_path + " (prompts are rendered there): " + ids.err().message);
      return;
    }
    if (ids->empty()) {
      preflight_done(p, e, config_.tokenize_path + ": rendered a conversation as no ids");
      return;
    }
    preflight_generate(p, e, std::move(*ids));
  });
}

void policy_client::impl::preflight_generate(const std::shared_ptr<preflight_state>& p, int e,
                                             std::vector<token_id> prompt) {
  if (prompt.empty() || stopping()) {
    preflight_done(p, e, stopping() ? ": policy client stopped" : "");
    return;
  }
  turn_request t;
  t.request_id = "leap-preflight-" + std::to_string(e);
  t.prompt = std::move(prompt);
  t.sampling.max_tokens = 1;
  t.pinned_endpoint = e;
  outstanding_.fetch_add(1);
  bump(stats_.submitted);
  accept_turn(std::move(t), [this, p, e](const turn_result& r) {
    // truncated: the server understood us; the tiny context is the only problem.
    if (r.status == turn_status::ok || r.status == turn_status::truncated) {
      preflight_done(p, e, "");
      return;
    }
    preflight_done(p, e,
                   route_path_ + ": a test generation of one token ended " +
                       std::string(to_string(r.status)) + ": " + r.message);
  });
}

}  // namespace leap::policy
