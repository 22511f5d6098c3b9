// What the weight-delta tests (disk and broadcast) share: a tiny random policy saved as the model
// both ends start from, a trainer on it, and one batch whose updates change its weights; the real
// policy server on loopback whose served weights the test reads back through a probe.
#pragma once

#include "actors/torch/torch_policy_backend.hpp"
#include "learner/policy.hpp"
#include "learner/trainer.hpp"
#include "policy/server/server.hpp"
#include "tests/actors/test_support.hpp"

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <utility>

namespace leap::actors::testing {

struct delta_learner {
  std::string initial;  // the model both ends start from (bf16 on disk)
  std::unique_ptr<learner::trainer> trainer;
  learner::update_batch batch;
};

inline delta_learner make_delta_learner(const temp_dir& dir) {
  delta_learner l;
  auto config = byte_model_preset("tiny");
  EXPECT_TRUE(config.ok());
  auto p = learner::policy::create_random(*config, 11);
  EXPECT_TRUE(p.ok());
  l.initial = (dir.path() / "initial").string();
  EXPECT_TRUE(p->save(l.initial, "bfloat16").ok());
  // Two sequences of 12 tokens, completion after 4, advantages +1 / -1.
  for (int i = 0; i < 2; ++i) {
    learner::sequence s;
    for (int t = 0; t < 12; ++t) {
      s.token_ids.push_back(40 + ((t * 7 + i * 3) % 50));
    }
    auto logp = p->token_logprobs({s.token_ids});
    EXPECT_TRUE(logp.ok());
    s.behaviour_logprobs = (*logp)[0];
    s.loss_mask.assign(12, 0);
    for (int t = 4; t < 12; ++t) {
      s.loss_mask[t] = 1;
    }
    s.advantages.assign(12, i == 0 ? 1.0F : -1.0F);
    l.batch.sequences.push_back(std::move(s));
  }
  learner::trainer_options options;
  options.optimizer.lr = 1e-5;
  auto t = learner::trainer::create(std::move(*p), options);
  EXPECT_TRUE(t.ok()) << t.err().message;
  l.trainer = std::make_unique<learner::trainer>(std::move(*t));
  return l;
}

// The served model's weights, copied out through the backend's in-memory source (the embedded
// server's hook), so the test reads exactly what the server samples from.
struct weight_probe {
  std::unique_ptr<learner::policy> copy;  // set by the source
};

struct probed_server {
  std::shared_ptr<weight_probe> seen = std::make_shared<weight_probe>();
  std::string model_dir;
  std::unique_ptr<policy::policy_server> server;
  std::unique_ptr<httplib::Client> http;
};

// The policy server over `model_dir` in bf16, taking weights by `transfer` (its broadcasts waiting
// at most `transfer_timeout`), with `threads` and the client's read timeout as given.
inline probed_server serve_probed(const std::string& model_dir, transfer_backend transfer,
                                  int threads, std::chrono::seconds read_timeout,
                                  std::chrono::seconds transfer_timeout) {
  probed_server s;
  s.model_dir = model_dir;
  torch_backend_options options;
  options.dtype = "bfloat16";
  options.transfer_timeout = transfer_timeout;
  options.source = [seen = s.seen](learner::policy& target, std::int64_t) -> status {
    if (!seen->copy) {
      return error{"no probe policy"};
    }
    return seen->copy->copy_weights_from(target);
  };
  auto backend = make_torch_policy_backend(model_dir, options);
  EXPECT_TRUE(backend.ok()) << backend.err().message;
  if (!backend.ok()) {
    return s;
  }
  policy::server_config sc;
  sc.threads = threads;
  sc.model_path = model_dir;
  sc.weight_transfer_backend = transfer;
  auto server = policy::policy_server::start(sc, *backend);
  EXPECT_TRUE(server.ok()) << server.err().message;
  if (!server.ok()) {
    return s;
  }
  s.server = std::move(*server);
  s.http = std::make_unique<httplib::Client>(s.server->host(), s.server->port());
  s.http->set_read_timeout(read_timeout);
  return s;
}

struct http_reply {
  int status = 0;
  std::string body;
};

inline http_reply post_json(httplib::Client& http, const std::string& path,
                            const nlohmann::json& body) {
  auto r = http.Post(path, body.dump(), "application/json");
  if (!r) {
    return {0, httplib::to_string(r.error())};
  }
  return {r->status, r->body};
}

}  // namespace leap::actors::testing
