// The data-parallel half of the trainer (learner/detail/trainer_state.hpp): the gradient buckets
// reduced over the ranks while the backward pass runs, the model and initial state rank 0 sends,
// rank 0's commands and their wire format, and the loop of ranks 1..N-1 (run_rank_worker).
#include "learner/detail/loss_json.hpp"
#include "learner/detail/trainer_state.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <stdexcept>

namespace leap::learner {
namespace {

using json = nlohmann::json;
using detail::command_checkpoint;
using detail::command_gradients;
using detail::command_stop;
using detail::command_update;

// ---- Data-parallel wire formats (rank 0 to the other ranks) ----

json options_to_json(const trainer_options& o, const std::string& dtype) {
  json j;
  j["dtype"] = dtype;
  j["policy"] = {{"logprob_chunk", o.policy.logprob_chunk},
                 {"activation_checkpointing", o.policy.activation_checkpointing}};
  j["loss"] = detail::loss_options_json(o.loss);
  const auto& op = o.optimizer;
  j["optimizer"] = {{"lr", op.lr},
                    {"beta1", op.beta1},
                    {"beta2", op.beta2},
                    {"eps", op.eps},
                    {"weight_decay", op.weight_decay},
                    {"max_grad_norm", op.max_grad_norm},
                    {"warmup_steps", op.warmup_steps}};
  j["batching"] = {{"micro_batch_tokens", o.batching.micro_batch_tokens},
                   {"mini_batches", o.batching.mini_batches},
                   {"epochs", o.batching.epochs}};
  // The other ranks take part in checkpoints (they hold optimiser shards) but never write.
  j["checkpoint"] = {{"dir", o.checkpoint.dir}, {"every", o.checkpoint.every}};
  if (o.lora) {
    j["lora"] = {{"rank", o.lora->rank},
                 {"alpha", o.lora->alpha},
                 {"target_modules", o.lora->target_modules},
                 {"seed", o.lora->seed}};
  }
  j["bucket_bytes"] = o.distributed.bucket_bytes;
  return j;
}

result<trainer_options> options_from_json(const json& j, const distributed_options& own) {
  trainer_options o;
  o.policy.dtype = j.at("dtype").get<std::string>();
  o.policy.logprob_chunk = j.at("policy").at("logprob_chunk").get<std::int64_t>();
  o.policy.activation_checkpointing = j.at("policy").at("activation_checkpointing").get<bool>();
  auto loss = detail::loss_options_from_json(j.at("loss"));
  if (!loss) {
    return loss.err().wrap("loss");
  }
  o.loss = *loss;
  const auto& op = j.at("optimizer");
  o.optimizer.lr = op.at("lr").get<double>();
  o.optimizer.beta1 = op.at("beta1").get<double>();
  o.optimizer.beta2 = op.at("beta2").get<double>();
  o.optimizer.eps = op.at("eps").get<double>();
  o.optimizer.weight_decay = op.at("weight_decay").get<double>();
  o.optimizer.max_grad_norm = op.at("max_grad_norm").get<double>();
  o.optimizer.warmup_steps = op.at("warmup_steps").get<std::int64_t>();
  const auto& b = j.at("batching");
  o.batching.micro_batch_tokens = b.at("micro_batch_tokens").get<std::int64_t>();
  o.batching.mini_batches = b.at("mini_batches").get<std::int64_t>();
  o.batching.epochs = b.at("epochs").get<std::int64_t>();
  o.checkpoint.dir = j.at("checkpoint").at("dir").get<std::string>();
  o.checkpoint.every = j.at("checkpoint").at("every").get<std::int64_t>();
  o.checkpoint.resume = false;  // rank 0 resumes and sends the state
  if (j.contains("lora")) {
    const auto& lj = j.at("lora");
    lora_options lo;
    lo.rank = lj.at("rank").get<std::int64_t>();
    lo.alpha = lj.at("alpha").get<double>();
    lo.target_modules = lj.at("target_modules").get<std::vector<std::string>>();
    lo.seed = lj.at("seed").get<std::uint64_t>();
    o.lora = lo;
  }
  o.distributed = own;
  o.distributed.bucket_bytes = j.at("bucket_bytes").get<std::int64_t>();
  return o;
}

template <class T>
void put_vector(std::string& out, const std::vector<T>& v) {
  const auto n = static_cast<std::uint64_t>(v.size());
  out.append(reinterpret_cast<const char*>(&n), sizeof n);
  out.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

template <class T>
std::vector<T> take_vector(const std::string& in, std::size_t& at) {
  std::uint64_t n = 0;
  if (at + sizeof n > in.size()) {
    throw std::runtime_error("truncated batch message");
  }
  std::memcpy(&n, in.data() + at, sizeof n);
  at += sizeof n;
  if (n > (in.size() - at) / sizeof(T)) {
    throw std::runtime_error("truncated batch message");
  }
  std::vector<T> v(static_cast<std::size_t>(n));
  std::memcpy(v.data(), in.data() + at, v.size() * sizeof(T));
  at += v.size() * sizeof(T);
  return v;
}

// Command byte, then per sequence its six vectors (host byte order: the ranks share a host
// architecture).
std::string encode_command(char command, const update_batch* batch) {
  std::string out(1, command);
  if (batch != nullptr) {
    for (const auto& seq : batch->sequences) {
      put_vector(out, seq.token_ids);
      put_vector(out, seq.loss_mask);
      put_vector(out, seq.behaviour_logprobs);
      put_vector(out, seq.advantages);
      put_vector(out, seq.reference_logprobs);
      put_vector(out, seq.staleness);
    }
  }
  return out;
}

update_batch decode_batch(const std::string& in) {
  update_batch batch;
  std::size_t at = 1;
  while (at < in.size()) {
    sequence seq;
    seq.token_ids = take_vector<std::int32_t>(in, at);
    seq.loss_mask = take_vector<std::uint8_t>(in, at);
    seq.behaviour_logprobs = take_vector<float>(in, at);
    seq.advantages = take_vector<float>(in, at);
    seq.reference_logprobs = take_vector<float>(in, at);
    seq.staleness = take_vector<std::int32_t>(in, at);
    batch.sequences.push_back(std::move(seq));
  }
  return batch;
}

}  // namespace

// Rank 0 releases the other ranks (their run_rank_worker returns).
trainer::state::~state() {
  if (dp && dp->rank() == 0 && !dp->failed()) {
    try {
      auto stop = encode_command(command_stop, nullptr);
      dp->broadcast_bytes(stop, "the stop command");
    } catch (const std::exception&) {  // NOLINT(bugprone-empty-catch): a dead rank needs no stop
    }
  }
}

void trainer::state::make_buckets() {
  const auto element =
      static_cast<std::int64_t>(c10::elementSize(accumulate_options.dtype().toScalarType()));
  const auto limit = std::max<std::int64_t>(1, options.distributed.bucket_bytes / element);
  bucket_of_param.assign(params.size(), 0);
  for (std::size_t i = 0; i < params.size(); ++i) {
    const auto& p = params[i];
    if (buckets.empty() || (buckets.back().end - buckets.back().begin) + p.numel > limit) {
      detail::grad_bucket b;
      b.begin = p.offset;
      b.end = p.offset;
      b.first_forward = p.forward_index;
      buckets.push_back(b);
    }
    auto& b = buckets.back();
    b.end = p.offset + p.numel;
    b.params += 1;
    b.first_forward = std::min(b.first_forward, p.forward_index);
    bucket_of_param[i] = buckets.size() - 1;
  }
  // Backward visits the parameters roughly in reverse forward order: a bucket whose earliest
  // parameter comes late in the forward pass is complete early. Every rank computes the same
  // order, which the collectives need (they pair up by order, not by name).
  launch_order.resize(buckets.size());
  std::iota(launch_order.begin(), launch_order.end(), 0);
  std::stable_sort(launch_order.begin(), launch_order.end(), [&](std::size_t a, std::size_t b) {
    return buckets[a].first_forward > buckets[b].first_forward;
  });
  pending.assign(buckets.size(), 0);
  for (std::size_t i = 0; i < params.size(); ++i) {
    hooks.push_back(
        detail::on_gradient_accumulated(*params[i].param, [this, i] { gradient_ready(i); }));
  }
}

void trainer::state::arm_buckets() {
  for (std::size_t b = 0; b < buckets.size(); ++b) {
    pending[b] = buckets[b].params;
  }
  launched = 0;
  in_flight.clear();
  armed = true;
}

void trainer::state::gradient_ready(std::size_t param) {
  if (!armed) {
    return;
  }
  auto& left = pending[bucket_of_param[param]];
  if (left > 0) {
    --left;
  }
  // In launch order only, so that every rank issues the same sequence of collectives.
  while (launched < launch_order.size() && pending[launch_order[launched]] == 0) {
    launch_bucket(launch_order[launched++]);
    ++overlapped;
  }
}

void trainer::state::launch_bucket(std::size_t b) {
  at::NoGradGuard no_grad;
  const auto& bucket = buckets[b];
  auto grads = flat.grads.narrow(0, bucket.begin, bucket.end - bucket.begin);
  const auto what = "gradient bucket " + std::to_string(b);
  if (flat.master.defined()) {
    auto sum = flat.grad_accum.narrow(0, bucket.begin, bucket.end - bucket.begin);
    sum.add_(grads);
    grads.zero_();
    in_flight.push_back(dp->all_reduce_async(sum, what));
  } else {
    in_flight.push_back(dp->all_reduce_async(grads, what));
  }
}

// Launches the buckets no hook launched (all of them on a rank without a micro-batch: it adds
// zeros) and waits for every reduction.
void trainer::state::finish_buckets() {
  if (!armed) {
    arm_buckets();
  }
  armed = false;
  while (launched < launch_order.size()) {
    launch_bucket(launch_order[launched++]);
  }
  auto works = std::move(in_flight);
  in_flight.clear();
  for (auto& wait : works) {
    wait();
  }
}

void trainer::state::send_model(const trainer_options& o) {
  at::NoGradGuard no_grad;
  auto& m = net();
  std::string hello = json{{"options", options_to_json(o, detail::dtype_name(m.dtype))},
                           {"config", json::parse(to_json(m.config))}}
                          .dump();
  dp->broadcast_bytes(hello, "the trainer options and model config");
  for (auto& [name, tensor] : m.base_parameters()) {
    dp->broadcast(*tensor, "weight " + name);
  }
}

void trainer::state::receive_model() {
  at::NoGradGuard no_grad;
  for (auto& [name, tensor] : net().base_parameters()) {
    dp->broadcast(*tensor, "weight " + name);
  }
}

// After init on every rank: the step counters, rank 0's weights (a resumed checkpoint's or the
// initial ones) and, after a resume, each rank's shard of the optimiser state.
void trainer::state::share_initial_state() {
  at::NoGradGuard no_grad;
  const auto wire = dp->wire_device();
  auto counters = at::tensor(std::vector<std::int64_t>{step, optimizer_step,
                                                       resumed_full.empty() ? std::int64_t{0} : 1},
                             at::TensorOptions().dtype(at::kLong))
                      .to(wire);
  dp->broadcast(counters, "the step counters");
  const auto host = counters.cpu();
  step = host.data_ptr<std::int64_t>()[0];
  optimizer_step = host.data_ptr<std::int64_t>()[1];
  const bool resumed = host.data_ptr<std::int64_t>()[2] != 0;
  dp->broadcast(flat.weights, "the initial weights");
  if (flat.master.defined()) {
    flat.master.copy_(flat.weights.narrow(0, shard_begin, shard_size));
  }
  if (resumed) {
    for (const auto& [prefix, buffer] : saved_buffers()) {
      auto whole = dp->rank() == 0 ? resumed_full.at(prefix)
                                   : at::zeros({flat.weights.numel()}, buffer->options());
      dp->broadcast(whole, "the optimizer state " + prefix);
      const_cast<at::Tensor*>(buffer)->copy_(whole.narrow(0, shard_begin, shard_size));
    }
  }
  resumed_full.clear();
}

void trainer::state::send_command(char command, const update_batch* batch) {
  auto message = encode_command(command, batch);
  dp->broadcast_bytes(message, "a command");
}

// The other ranks' loop: rank 0's commands, run on this rank's share, until the stop command.
// An error that every rank meets alike (a non-finite gradient) leaves the group usable; a failed
// collective ends the loop.
status trainer::state::serve() {
  // Rank 0 may take long between commands (rollouts): the wait for one has no timeout, and a
  // rank 0 that goes away closes the connection, which ends it.
  for (;;) {
    std::string message;
    if (auto s = detail::guarded("waiting for rank 0's next command",
                                 [&]() -> status {
                                   dp->broadcast_bytes(message, "a command", true);
                                   return ok_status();
                                 });
        !s) {
      return s;
    }
    if (message.empty()) {
      return error{"data-parallel: an empty command from rank 0"};
    }
    status done = ok_status();
    switch (message[0]) {
      case command_stop:
        return ok_status();
      case command_update:
      case command_gradients: {
        auto batch = detail::guarded(
            "decoding a batch", [&]() -> result<update_batch> { return decode_batch(message); });
        if (!batch) {
          return batch.err();
        }
        const bool given =
            !batch->sequences.empty() && !batch->sequences.front().reference_logprobs.empty();
        if (message[0] == command_update) {
          auto r = detail::guarded("update step " + std::to_string(step + 1),
                                   [&] { return run_update(*batch, given); });
          if (!r) {
            done = r.err();
          }
        } else {
          auto r = detail::guarded("computing gradients",
                                   [&] { return run_compute_gradients(*batch, given); });
          if (!r) {
            done = r.err();
          }
        }
        break;
      }
      case command_checkpoint: {
        auto r = detail::guarded("writing a checkpoint", [&] { return write_checkpoint(); });
        if (!r) {
          done = r.err();
        }
        break;
      }
      default:
        return error{"data-parallel: unknown command from rank 0"};
    }
    if (!done && dp->failed()) {
      return done;
    }
  }
}

status run_rank_worker(const distributed_options& options, const std::string& device) {
  if (auto s = validate(options); !s) {
    return s;
  }
  if (options.rank == 0) {
    return error{"distributed 'rank' 0 is the trainer's process; workers are ranks 1 and up"};
  }
  auto parsed = detail::parse_device(device);
  if (!parsed) {
    return parsed.err();
  }
  auto group = detail::dp_group::connect(options, *parsed);
  if (!group) {
    return group.err();
  }
  std::string hello;
  if (auto s = detail::guarded("receiving the model from rank 0",
                               [&]() -> status {
                                 (*group)->broadcast_bytes(hello,
                                                           "the trainer options and model config");
                                 return ok_status();
                               });
      !s) {
    return s;
  }
  trainer_options o;
  model_config config;
  try {
    const auto doc = json::parse(hello);
    auto parsed = options_from_json(doc.at("options"), options);
    if (!parsed) {
      return parsed.err().wrap("the trainer options from rank 0");
    }
    o = std::move(*parsed);
    auto c = parse_model_config(doc.at("config").dump());
    if (!c) {
      return c.err().wrap("the model config from rank 0");
    }
    config = *c;
  } catch (const json::exception& e) {
    return error{"the trainer options from rank 0: " + std::string(e.what())};
  }
  o.policy.device = device;
  auto p = policy::create_random_on_device(config, 0, o.policy);
  if (!p) {
    return p.err();
  }
  auto s = std::make_unique<trainer::state>(std::move(*p));
  s->dp = std::move(*group);
  if (auto st = detail::guarded("joining the trainer",
                                [&]() -> status {
                                  s->receive_model();
                                  if (auto i = s->init("", o); !i) {
                                    return i;
                                  }
                                  s->share_initial_state();
                                  return ok_status();
                                });
      !st) {
    return st;
  }
  return s->serve();
}

}  // namespace leap::learner
