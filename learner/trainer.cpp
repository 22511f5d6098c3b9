// The update step: micro-batched forward/backward with the chunked log-probs, AdamW with float32
// master weights, atomic checkpoints and resumption.
//
// The trainable tensors, their gradients and the optimiser state each live in one flat buffer (the
// tensors the model and autograd see are views of it), so gradient accumulation, the gradient norm
// and AdamW are a few large kernels rather than several per parameter: with hundreds of parameter
// tensors the per-tensor loop was bound by kernel launches on a GPU.
//
// What only data parallelism needs (gradient buckets, rank 0's commands, the other ranks' loop) is
// in trainer_parallel.cpp; the state both use is learner/detail/trainer_state.hpp.
#include "learner/trainer.hpp"

#include "common/durable_file.hpp"
#include "learner/detail/files.hpp"
#include "learner/detail/loss.hpp"
#include "learner/detail/trainer_state.hpp"

#include <nlohmann/json.hpp>

#include <ATen/record_function.h>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <numeric>
#include <unistd.h>

namespace leap::learner {
namespace {

using json = nlohmann::json;
using clock_type = std::chrono::steady_clock;

constexpr int checkpoint_format = 1;

using detail::command_checkpoint;
using detail::command_gradients;
using detail::command_update;
using detail::metric_sums;
using detail::param_state;
using detail::slice_view;

// Elementwise optimiser work goes through slices of this many elements, which bounds the
// temporaries (the AdamW denominator) to a fraction of a buffer.
constexpr std::int64_t optimizer_slice = std::int64_t{1} << 26;

std::string step_name(std::int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%08lld", static_cast<long long>(step));
  return buf;
}

// A copy of the base weights that no later update touches: the KL reference.
std::unique_ptr<detail::transformer> clone_base(const detail::transformer& src) {
  at::NoGradGuard no_grad;
  auto out = std::make_unique<detail::transformer>(src.config, src.device, src.dtype);
  auto copy = [](const at::Tensor& t) { return t.defined() ? t.detach().clone() : at::Tensor(); };
  out->embed_tokens = copy(src.embed_tokens);
  out->norm = copy(src.norm);
  out->lm_head = copy(src.lm_head);
  out->logprob_chunk = src.logprob_chunk;
  for (std::size_t i = 0; i < src.layers.size(); ++i) {
    const auto& s = src.layers[i];
    auto& d = out->layers[i];
    d.input_norm = copy(s.input_norm);
    d.post_norm = copy(s.post_norm);
    d.q_norm = copy(s.q_norm);
    d.k_norm = copy(s.k_norm);
    const detail::linear* from[] = {&s.q_proj,    &s.k_proj,  &s.v_proj,   &s.o_proj,
                                    &s.gate_proj, &s.up_proj, &s.down_proj};
    detail::linear* to[] = {&d.q_proj,    &d.k_proj,  &d.v_proj,   &d.o_proj,
                            &d.gate_proj, &d.up_proj, &d.down_proj};
    for (std::size_t k = 0; k < 7; ++k) {
      to[k]->weight = copy(from[k]->weight);
      to[k]->bias = copy(from[k]->bias);
    }
  }
  return out;
}

status validate(const trainer_options& o) {
  if (auto s = validate(o.loss); !s) {
    return s;
  }
  const auto& opt = o.optimizer;
  if (!(opt.lr >= 0) || !std::isfinite(opt.lr)) {
    return error{"'lr' must be >= 0"};
  }
  if (!(opt.beta1 >= 0 && opt.beta1 < 1) || !(opt.beta2 >= 0 && opt.beta2 < 1)) {
    return error{"'beta1' and 'beta2' must be in [0, 1)"};
  }
  if (!(opt.eps > 0)) {
    return error{"'eps' must be > 0"};
  }
  if (!(opt.weight_decay >= 0)) {
    return error{"'weight_decay' must be >= 0"};
  }
  if (!(opt.max_grad_norm >= 0)) {
    return error{"'max_grad_norm' must be >= 0 (0 = no clipping)"};
  }
  if (opt.warmup_steps < 0) {
    return error{"'warmup_steps' must be >= 0"};
  }
  if (o.batching.micro_batch_tokens < 1) {
    return error{"'micro_batch_tokens' must be at least 1"};
  }
  if (o.batching.mini_batches < 1) {
    return error{"'mini_batches' must be at least 1"};
  }
  if (o.batching.epochs < 1) {
    return error{"'epochs' must be at least 1"};
  }
  if (o.checkpoint.every < 1) {
    return error{"checkpoint 'every' must be at least 1"};
  }
  if (o.checkpoint.keep_last < 0) {
    return error{"checkpoint 'keep_last' must be >= 0 (0 keeps all)"};
  }
  return ok_status();
}

status validate(const update_batch& batch, std::int64_t vocab) {
  if (batch.sequences.empty()) {
    return error{"the batch has no sequences"};
  }
  std::int64_t trained = 0;
  std::size_t with_reference = 0;
  for (std::size_t i = 0; i < batch.sequences.size(); ++i) {
    const auto& s = batch.sequences[i];
    const std::string where = "sequence " + std::to_string(i);
    const auto n = s.token_ids.size();
    if (n == 0) {
      return error{where + ": no tokens"};
    }
    if (s.loss_mask.size() != n || s.behaviour_logprobs.size() != n || s.advantages.size() != n) {
      return error{where + ": token_ids (" + std::to_string(n) + "), loss_mask (" +
                   std::to_string(s.loss_mask.size()) + "), behaviour_logprobs (" +
                   std::to_string(s.behaviour_logprobs.size()) + ") and advantages (" +
                   std::to_string(s.advantages.size()) + ") must have the same length"};
    }
    if (!s.reference_logprobs.empty()) {
      ++with_reference;
      if (s.reference_logprobs.size() != n) {
        return error{where + ": reference_logprobs must be empty or as long as token_ids"};
      }
    }
    if (!s.staleness.empty()) {
      if (s.staleness.size() != n) {
        return error{where + ": staleness must be empty or as long as token_ids"};
      }
      if (std::any_of(s.staleness.begin(), s.staleness.end(), [](auto v) { return v < 0; })) {
        return error{where + ": staleness must be >= 0 (versions behind the learner)"};
      }
    }
    if (s.loss_mask[0] != 0) {
      return error{where + ": loss_mask[0] must be 0 (nothing predicts the first token)"};
    }
    for (std::size_t t = 0; t < n; ++t) {
      if (s.token_ids[t] < 0 || s.token_ids[t] >= vocab) {
        return error{where + ": token id " + std::to_string(s.token_ids[t]) + " at position " +
                     std::to_string(t) + " is outside the vocabulary [0, " + std::to_string(vocab) +
                     ")"};
      }
      if (s.loss_mask[t] > 1) {
        return error{where + ": loss_mask values must be 0 or 1"};
      }
      if (s.loss_mask[t] != 0) {
        ++trained;
        if (!std::isfinite(s.behaviour_logprobs[t]) || !std::isfinite(s.advantages[t]) ||
            (!s.reference_logprobs.empty() && !std::isfinite(s.reference_logprobs[t]))) {
          return error{where + ": non-finite log-prob or advantage at trained position " +
                       std::to_string(t)};
        }
      }
    }
  }
  if (with_reference != 0 && with_reference != batch.sequences.size()) {
    return error{"reference_logprobs are given for " + std::to_string(with_reference) + " of " +
                 std::to_string(batch.sequences.size()) + " sequences; give them for all or none"};
  }
  if (trained == 0) {
    return error{"the batch has no trained token (every loss_mask is 0)"};
  }
  return ok_status();
}

// The off-policy filter on one micro-batch's trained rows: `starts` holds each sequence's first row
// and its place in the mini-batch's order. Multiplies `token_weights` by the filter's keep, adds
// the counts to `sums`, writes each sequence's ratio into `ratios`, and returns the surrogate's
// factor per row (truncate_token). The log-probs are read detached: the filter carries no gradient.
std::vector<double> filter_offpolicy_rows(
    const at::Tensor& logp, const std::vector<double>& behaviour,
    const std::vector<std::int64_t>& staleness,
    const std::vector<std::pair<std::size_t, std::size_t>>& starts,
    std::vector<double>& token_weights, metric_sums& sums, std::vector<double>& ratios,
    const offpolicy_options& options) {
  const auto host = logp.detach().to(at::kCPU, at::kDouble).contiguous();
  const double* lp = host.data_ptr<double>();
  std::vector<double> pg_scale(behaviour.size(), 1.0);
  for (std::size_t q = 0; q < starts.size(); ++q) {
    const auto first = starts[q].first;
    const auto last = q + 1 < starts.size() ? starts[q + 1].first : behaviour.size();
    if (first == last) {
      continue;
    }
    std::vector<double> log_ratios;
    for (auto r = first; r < last; ++r) {
      log_ratios.push_back(lp[r] - behaviour[r]);
    }
    const std::vector<std::int64_t> stale(staleness.begin() + static_cast<std::ptrdiff_t>(first),
                                          staleness.begin() + static_cast<std::ptrdiff_t>(last));
    const auto d = filter_offpolicy(options, log_ratios, stale);
    ratios[starts[q].second] = d.ratio;
    sums.dropped += d.dropped ? 1 : 0;
    sums.masked += d.masked;
    if (!d.dropped) {
      sums.kept_sequences += 1;
      sums.kept_sequence_tokens += static_cast<std::int64_t>(last - first);
    }
    for (auto r = first; r < last; ++r) {
      token_weights[r] *= d.keep[r - first];
      pg_scale[r] = d.pg_scale[r - first];
      sums.kept_tokens += d.keep[r - first] > 0 ? 1 : 0;
    }
  }
  return pg_scale;
}

step_metrics to_metrics(const metric_sums& s, double seconds) {
  step_metrics m;
  const auto trained = static_cast<double>(std::max<std::int64_t>(s.trained, 1));
  m.loss = s.loss;
  m.pg_loss = s.pg_loss;
  m.kl = s.kl / trained;
  m.behaviour_kl = s.behaviour_kl / trained;
  m.clip_fraction = s.clipped / trained;
  m.dropped_sequences = s.dropped;
  m.masked_tokens = s.masked;
  m.ratio_p5 = quantile(s.ratios, 0.05);
  m.ratio_p50 = quantile(s.ratios, 0.5);
  m.ratio_p95 = quantile(s.ratios, 0.95);
  m.entropy = s.entropy / trained;
  m.tokens = s.tokens;
  m.trained_tokens = s.trained;
  m.sequences = s.sequences;
  m.seconds = seconds;
  m.tokens_per_second = seconds > 0 ? static_cast<double>(s.tokens) / seconds : 0.0;
  return m;
}

}  // namespace

status trainer::state::init(const std::string& dir, const trainer_options& o) {
  options = o;
  model_dir = dir;
  auto& m = net();
  if (o.lora && !model.has_lora()) {
    if (auto s = m.add_lora(*o.lora); !s) {
      return s;
    }
  }
  if (o.loss.kl_coef > 0 && m.lora_rank == 0) {
    if (!o.reference_model_dir.empty()) {
      auto config = read_model_config(o.reference_model_dir);
      if (!config) {
        return config.err();
      }
      if (parameter_shapes(*config) != parameter_shapes(m.config)) {
        return error{"reference model '" + o.reference_model_dir +
                     "' has a different architecture"};
      }
      auto weights = detail::mapped_checkpoint::open_dir(o.reference_model_dir);
      if (!weights) {
        return weights.err();
      }
      policy_options ref_options = o.policy;
      ref_options.device = detail::device_name(m.device);
      ref_options.dtype = detail::dtype_name(m.dtype);
      auto ref = detail::make_transformer(*config, weights->tensors(), ref_options);
      if (!ref) {
        return ref.err().wrap("reference model");
      }
      reference_model = std::move(*ref);
    } else {
      reference_model = clone_base(m);
    }
  }
  m.set_trainable();
  allocate_flat();
  if (o.checkpoint.resume && !o.checkpoint.dir.empty()) {
    auto latest = latest_checkpoint(o.checkpoint.dir);
    if (!latest) {
      return latest.err();
    }
    if (!latest->empty()) {
      if (auto s = read_checkpoint(*latest); !s) {
        return s.err().wrap("resuming from '" + *latest + "'");
      }
    }
  }
  if (dp) {
    make_buckets();  // after the resume, which may replace the LoRA tensors the hooks attach to
  }
  return ok_status();
}

void trainer::state::allocate_flat() {
  auto& m = net();
  std::vector<std::pair<std::size_t, detail::named_tensor>> trainables;
  for (auto& t : m.trainable_parameters()) {
    trainables.emplace_back(trainables.size(), t);
  }
  std::stable_partition(trainables.begin(), trainables.end(),
                        [](const auto& t) { return t.second.tensor->dim() >= 2; });
  std::int64_t total = 0;
  for (auto& [index, named] : trainables) {
    param_state p;
    p.name = named.name;
    p.param = named.tensor;
    p.offset = total;
    p.numel = named.tensor->numel();
    p.forward_index = index;
    total += p.numel;
    if (named.tensor->dim() >= 2) {
      flat.decayed = total;
    }
    params.push_back(std::move(p));
  }
  const std::int64_t ranks = options.distributed.world_size;
  shard_size = (total + ranks - 1) / ranks;
  shard_begin = shard_size * options.distributed.rank;
  const auto padded = shard_size * ranks;
  const auto tensor_options = at::TensorOptions().dtype(m.dtype).device(m.device);
  const auto acc = tensor_options.dtype(detail::accumulate_type(m.dtype));
  accumulate_options = acc;
  flat.weights = at::empty({padded}, tensor_options);
  flat.weights.narrow(0, total, padded - total).zero_();
  flat.grads = at::zeros({padded}, tensor_options);
  flat.exp_avg = at::zeros({shard_size}, acc);
  flat.exp_avg_sq = at::zeros({shard_size}, acc);
  if (m.dtype != at::kFloat && m.dtype != at::kDouble) {
    flat.master = at::empty({shard_size}, acc);
  }
  bind_model_to_flat();
  if (flat.master.defined()) {
    flat.master.copy_(flat.weights.narrow(0, shard_begin, shard_size));
  }
}

// Copies the model's trainable tensors into the flat buffer and makes them views of it, their
// gradients views of the gradient buffer. Again after anything that replaces the model's tensors
// (loading a checkpoint).
void trainer::state::bind_model_to_flat() {
  at::NoGradGuard no_grad;
  for (auto& p : params) {
    auto weight = slice_view(flat.weights, p);
    if (p.param->data_ptr() != weight.data_ptr()) {
      weight.copy_(*p.param);
      // set_data keeps the parameter the same autograd leaf and only moves its storage (a plain
      // view would make it a view of the buffer in autograd's eyes).
      p.param->set_data(weight);
    }
    p.param->requires_grad_(true);
    p.param->mutable_grad() = slice_view(flat.grads, p);
  }
}

void trainer::state::zero_grads() {
  flat.grads.zero_();
  if (dp && flat.master.defined()) {
    // Every rank reduces float32 sums, whatever its number of micro-batches.
    if (flat.grad_accum.defined()) {
      flat.grad_accum.zero_();
    } else {
      flat.grad_accum = at::zeros({flat.grads.numel()}, accumulate_options);
    }
  } else {
    flat.grad_accum = at::Tensor();
  }
}

// Called before each backward pass after the first of a mini-batch, and after the last: moves what
// autograd summed into the model-dtype buffer into the float32 sum.
void trainer::state::spill_gradients() {
  if (!flat.master.defined()) {
    return;  // float32 / float64 models accumulate in .grad itself
  }
  at::NoGradGuard no_grad;
  if (!flat.grad_accum.defined()) {
    flat.grad_accum = at::zeros({flat.grads.numel()}, accumulate_options);
  }
  flat.grad_accum.add_(flat.grads);
  flat.grads.zero_();
}

const at::Tensor& trainer::state::gradient() const {
  return flat.grad_accum.defined() ? flat.grad_accum : flat.grads;
}

std::vector<std::pair<std::string, const at::Tensor*>> trainer::state::saved_buffers() const {
  std::vector<std::pair<std::string, const at::Tensor*>> out{{"exp_avg/", &flat.exp_avg},
                                                             {"exp_avg_sq/", &flat.exp_avg_sq}};
  if (flat.master.defined()) {
    out.emplace_back("master/", &flat.master);
  }
  return out;
}

result<metric_sums> trainer::state::accumulate(const update_batch& batch,
                                               const std::vector<std::size_t>& indices,
                                               bool use_given_reference) {
  auto& m = net();
  const auto& lo = options.loss;
  const bool need_reference = lo.kl_coef > 0 && !use_given_reference;
  metric_sums sums;

  std::vector<std::int64_t> counts;
  for (auto i : indices) {
    const auto& mask = batch.sequences[i].loss_mask;
    counts.push_back(std::accumulate(mask.begin(), mask.end(), std::int64_t{0}));
  }
  const auto weights = sequence_token_weights(lo.aggregation, counts);
  // Each sequence's geometric-mean ratio at its place in `order` (0 where it trains nothing).
  std::vector<double> ratios(indices.size(), 0.0);

  // Longest first, so each micro-batch pads little; a fixed order keeps the sums reproducible.
  std::vector<std::size_t> order(indices.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return batch.sequences[indices[a]].token_ids.size() >
           batch.sequences[indices[b]].token_ids.size();
  });
  const auto budget = options.batching.micro_batch_tokens;
  std::vector<std::pair<std::size_t, std::size_t>> micro;  // [begin, end) of `order`
  for (std::size_t begin = 0; begin < order.size();) {
    const auto longest =
        static_cast<std::int64_t>(batch.sequences[indices[order[begin]]].token_ids.size());
    std::size_t end = begin + 1;
    while (end < order.size() && longest * static_cast<std::int64_t>(end - begin + 1) <= budget) {
      ++end;
    }
    micro.emplace_back(begin, end);
    begin = end;
  }
  // Data parallel: micro-batch k (longest first) is rank k mod ranks's, so every rank forms the
  // same micro-batches as one process would. A rank arms its bucket hooks for its last backward.
  const std::size_t ranks = dp ? static_cast<std::size_t>(dp->size()) : 1;
  const std::size_t rank = dp ? static_cast<std::size_t>(dp->rank()) : 0;
  std::size_t last_backward = micro.size();
  for (std::size_t k = rank; k < micro.size(); k += ranks) {
    for (std::size_t j = micro[k].first; j < micro[k].second; ++j) {
      const auto& mask = batch.sequences[indices[order[j]]].loss_mask;
      if (std::find(mask.begin(), mask.end(), 1) != mask.end()) {
        last_backward = k;
      }
    }
  }
  for (std::size_t k = rank; k < micro.size(); k += ranks) {
    const auto [begin, end] = micro[k];
    const auto longest =
        static_cast<std::int64_t>(batch.sequences[indices[order[begin]]].token_ids.size());
    // Gather the micro-batch: ids padded to `longest`, and one row per trained token.
    std::vector<std::int64_t> ids(static_cast<std::size_t>(longest) * (end - begin), 0);
    std::vector<std::int64_t> rows;
    std::vector<std::int64_t> targets;
    std::vector<double> behaviour;
    std::vector<double> advantages;
    std::vector<double> given_reference;
    std::vector<double> token_weights;
    std::vector<std::int64_t> staleness;
    // Per sequence of the micro-batch with trained tokens: its first row and its place in `order`.
    std::vector<std::pair<std::size_t, std::size_t>> starts;
    for (std::size_t k = begin; k < end; ++k) {
      const auto j = order[k];
      const auto& s = batch.sequences[indices[j]];
      const auto base = static_cast<std::int64_t>(k - begin) * longest;
      std::copy(s.token_ids.begin(), s.token_ids.end(), ids.begin() + base);
      sums.tokens += static_cast<std::int64_t>(s.token_ids.size());
      sums.sequences += 1;
      starts.emplace_back(rows.size(), j);
      for (std::size_t t = 1; t < s.token_ids.size(); ++t) {
        if (s.loss_mask[t] == 0) {
          continue;
        }
        rows.push_back(base + static_cast<std::int64_t>(t) - 1);
        targets.push_back(s.token_ids[t]);
        behaviour.push_back(s.behaviour_logprobs[t]);
        advantages.push_back(s.advantages[t]);
        if (use_given_reference) {
          given_reference.push_back(s.reference_logprobs[t]);
        }
        token_weights.push_back(weights[j]);
        staleness.push_back(s.staleness.empty() ? 0 : s.staleness[t]);
      }
    }
    if (rows.empty()) {
      continue;  // nothing trained in these sequences: no forward pass needed
    }
    const auto device = m.device;
    const auto acc = detail::accumulate_type(m.dtype);
    const auto long_opts = at::TensorOptions().dtype(at::kLong);
    const auto f64 = at::TensorOptions().dtype(at::kDouble);
    const auto ids_t = at::tensor(ids, long_opts).view({-1, longest}).to(device);
    const auto rows_t = at::tensor(rows, long_opts).to(device);
    const auto targets_t = at::tensor(targets, long_opts).to(device);
    auto to_device = [&](const std::vector<double>& v) {
      return at::tensor(v, f64).to(device, acc);
    };

    at::Tensor reference;
    // The phases are named for profiler traces (bench_learner --trace); free when not profiling.
    if (use_given_reference) {
      reference = to_device(given_reference);
    } else if (need_reference) {
      RECORD_FUNCTION("leap::reference", std::vector<c10::IValue>());
      at::NoGradGuard no_grad;
      // Under LoRA the reference is the base model: the same weights with the adapters off.
      const detail::transformer& ref = reference_model ? *reference_model : m;
      const bool saved = m.lora_active;
      m.lora_active = false;
      const auto hidden = ref.forward_hidden(ids_t, nullptr);
      m.lora_active = saved;
      reference =
          detail::chunked_logprobs(hidden.reshape({-1, hidden.size(-1)}).index_select(0, rows_t),
                                   ref.output_weight(), targets_t, ref.logprob_chunk, false)
              .first;
    }
    at::Tensor hidden;
    {
      RECORD_FUNCTION("leap::forward", std::vector<c10::IValue>());
      hidden = m.forward_hidden(ids_t, nullptr);
    }
    at::Tensor entropy;
    detail::loss_terms terms;
    {
      RECORD_FUNCTION("leap::logprobs", std::vector<c10::IValue>());
      const auto selected = hidden.reshape({-1, hidden.size(-1)}).index_select(0, rows_t);
      at::Tensor logp;
      std::tie(logp, entropy) =
          detail::chunked_logprobs(selected, m.output_weight(), targets_t, m.logprob_chunk, true);
      const auto pg_scale = filter_offpolicy_rows(logp, behaviour, staleness, starts, token_weights,
                                                  sums, ratios, lo.offpolicy);
      terms = detail::policy_loss(
          logp, to_device(behaviour), to_device(advantages), reference, to_device(token_weights),
          lo.offpolicy.mode == offpolicy_mode::truncate_token ? to_device(pg_scale) : at::Tensor(),
          lo);
    }
    {
      RECORD_FUNCTION("leap::backward", std::vector<c10::IValue>());
      if (sums.trained > 0) {
        spill_gradients();  // keep the earlier micro-batches' sum in float32
      }
      if (dp && k == last_backward) {
        arm_buckets();
      }
      terms.loss.backward();
    }
    sums.loss += terms.loss.item<double>();
    sums.pg_loss += terms.pg_loss.item<double>();
    sums.kl += terms.kl_sum.item<double>();
    sums.behaviour_kl += terms.behaviour_kl_sum.item<double>();
    sums.clipped += terms.clipped_count.item<double>();
    sums.entropy += entropy.sum().item<double>();
    sums.trained += static_cast<std::int64_t>(rows.size());
  }
  if (dp) {
    finish_buckets();
    const auto f64 = at::TensorOptions().dtype(at::kDouble);
    auto all =
        at::tensor(
            std::vector<double>{
                sums.loss, sums.pg_loss, sums.kl, sums.behaviour_kl, sums.clipped, sums.entropy,
                static_cast<double>(sums.tokens), static_cast<double>(sums.trained),
                static_cast<double>(sums.sequences), static_cast<double>(sums.dropped),
                static_cast<double>(sums.masked), static_cast<double>(sums.kept_sequences),
                static_cast<double>(sums.kept_sequence_tokens),
                static_cast<double>(sums.kept_tokens)},
            f64)
            .to(dp->wire_device());
    dp->all_reduce(all, "the metric sums");
    const auto host = all.cpu();
    const auto* v = host.data_ptr<double>();
    sums.loss = v[0];
    sums.pg_loss = v[1];
    sums.kl = v[2];
    sums.behaviour_kl = v[3];
    sums.clipped = v[4];
    sums.entropy = v[5];
    sums.tokens = std::llround(v[6]);
    sums.trained = std::llround(v[7]);
    sums.sequences = std::llround(v[8]);
    sums.dropped = std::llround(v[9]);
    sums.masked = std::llround(v[10]);
    sums.kept_sequences = std::llround(v[11]);
    sums.kept_sequence_tokens = std::llround(v[12]);
    sums.kept_tokens = std::llround(v[13]);
    // Every sequence is one rank's: summing the ranks' vectors gathers them.
    auto r = at::tensor(ratios, f64).to(dp->wire_device());
    dp->all_reduce(r, "the off-policy ratios");
    const auto rh = r.cpu();
    std::copy(rh.data_ptr<double>(), rh.data_ptr<double>() + rh.numel(), ratios.begin());
  } else if (flat.grad_accum.defined()) {
    spill_gradients();  // the last micro-batch joins the float32 sum
  }
  for (auto r : ratios) {
    if (r > 0) {
      sums.ratios.push_back(r);
    }
  }
  if (sums.dropped > 0) {
    // Dropped sequences leave the normaliser (kept_weight_factor).
    std::int64_t all_sequences = 0;
    std::int64_t all_tokens = 0;
    for (auto n : counts) {
      all_sequences += n > 0 ? 1 : 0;
      all_tokens += n;
    }
    const double factor = kept_weight_factor(lo.aggregation, all_sequences, all_tokens,
                                             sums.kept_sequences, sums.kept_sequence_tokens);
    at::NoGradGuard no_grad;
    flat.grads.mul_(factor);
    if (flat.grad_accum.defined()) {
      flat.grad_accum.mul_(factor);
    }
    sums.loss *= factor;
    sums.pg_loss *= factor;
  }
  return sums;
}

result<double> trainer::state::gradient_norm() {
  RECORD_FUNCTION("leap::grad_norm", std::vector<c10::IValue>());
  at::NoGradGuard no_grad;
  const auto& g = gradient();
  double norm = 0;
  if (dp) {
    // Each rank's shard of the summed gradient; the squares summed over the ranks.
    auto squares =
        at::linalg_vector_norm(g.narrow(0, shard_begin, shard_size), 2, {}, false, at::kDouble)
            .pow(2)
            .reshape({1});
    dp->all_reduce(squares, "the gradient norm");
    norm = std::sqrt(squares.item<double>());
  } else if (g.numel() != 0) {
    norm = at::linalg_vector_norm(g, 2, {}, false, accumulate_options.dtype().toScalarType())
               .item<double>();
  }
  if (!std::isfinite(norm)) {
    return error{"the gradient is not finite (norm " + std::to_string(norm) + "); step skipped"};
  }
  return norm;
}

double trainer::state::learning_rate() const {
  const auto& o = options.optimizer;
  const auto next = optimizer_step + 1;
  if (o.warmup_steps > 0 && next < o.warmup_steps) {
    return o.lr * static_cast<double>(next) / static_cast<double>(o.warmup_steps);
  }
  return o.lr;
}

void trainer::state::adamw_step(double grad_norm) {
  RECORD_FUNCTION("leap::adamw", std::vector<c10::IValue>());
  at::NoGradGuard no_grad;
  const auto& o = options.optimizer;
  const double lr = learning_rate();
  const double clip = o.max_grad_norm > 0 && grad_norm > o.max_grad_norm
                          ? o.max_grad_norm / (grad_norm + 1e-6)
                          : 1.0;
  ++optimizer_step;
  const double bias1 = 1.0 - std::pow(o.beta1, static_cast<double>(optimizer_step));
  const double bias2 = 1.0 - std::pow(o.beta2, static_cast<double>(optimizer_step));
  const auto& grads = gradient();
  const auto acc = accumulate_options.dtype().toScalarType();
  // This rank's shard (everything with one rank): [base, base + shard_size) of the flat buffers.
  const auto base = shard_begin;
  const auto weights =
      flat.master.defined() ? flat.master : flat.weights.narrow(0, base, shard_size);
  const auto total = weights.numel();
  for (std::int64_t start = 0; start < total; start += optimizer_slice) {
    const auto n = std::min(optimizer_slice, total - start);
    // The gradient buffers are zeroed after the step, so scaling in place is fine.
    auto g = grads.narrow(0, base + start, n).to(acc);
    auto w = weights.narrow(0, start, n);
    auto m = flat.exp_avg.narrow(0, start, n);
    auto v = flat.exp_avg_sq.narrow(0, start, n);
    if (clip != 1.0) {
      g.mul_(clip);
    }
    if (o.weight_decay > 0 && base + start < flat.decayed) {
      w.narrow(0, 0, std::min(n, flat.decayed - base - start)).mul_(1.0 - lr * o.weight_decay);
    }
    m.lerp_(g, 1.0 - o.beta1);
    v.mul_(o.beta2).addcmul_(g, g, 1.0 - o.beta2);
    const auto denom = at::sqrt(v).div_(std::sqrt(bias2)).add_(o.eps);
    w.addcdiv_(m, denom, -lr / bias1);
    if (flat.master.defined()) {
      flat.weights.narrow(0, base + start, n).copy_(w);
    }
  }
  if (dp) {
    // Every rank's updated shard into every rank's model weights, in the model dtype.
    dp->all_gather_pieces(flat.weights, "the updated weights");
  }
}

std::vector<std::pair<std::string, at::Tensor>> trainer::state::whole_optimizer_buffers() {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& [prefix, buffer] : saved_buffers()) {
    if (!dp) {
      out.emplace_back(prefix, *buffer);
      continue;
    }
    auto whole = at::empty({shard_size * dp->size()}, buffer->options());
    whole.narrow(0, shard_begin, shard_size).copy_(*buffer);
    dp->all_gather_pieces(whole, "the optimizer state " + prefix);
    out.emplace_back(prefix, std::move(whole));
  }
  return out;
}

result<std::string> trainer::state::write_checkpoint() {
  const auto& co = options.checkpoint;
  if (co.dir.empty()) {
    return error{"no checkpoint dir is configured"};
  }
  const auto buffers = whole_optimizer_buffers();  // a collective: before rank 0 goes its own way
  if (dp && dp->rank() != 0) {
    return std::string();
  }
  const std::string& root = co.dir;
  const auto name = step_name(step);
  const auto final_dir = detail::join(root, name);
  const auto tmp_dir = detail::join(root, "." + name + ".tmp-" + std::to_string(::getpid()));
  detail::remove_tree(tmp_dir);
  if (auto s = detail::make_directories(tmp_dir); !s) {
    return s.err();
  }
  auto& m = net();
  const bool lora = m.lora_rank > 0;
  if (lora) {
    if (auto s = model.save_lora_adapter(tmp_dir, model_dir); !s) {
      return s.err();
    }
  } else if (auto s = model.save(tmp_dir, "", co.max_shard_bytes); !s) {
    return s.err();
  }
  tensor_map optimizer;
  for (const auto& [prefix, buffer] : buffers) {
    for (const auto& p : params) {
      auto host = detail::to_host(slice_view(buffer, p));
      if (!host) {
        return host.err();
      }
      optimizer.emplace(prefix + p.name, std::move(*host));
    }
  }
  if (auto s = write_safetensors(detail::join(tmp_dir, "optimizer.safetensors"), optimizer,
                                 {{"format", "leap"}});
      !s) {
    return s.err();
  }
  const json state_doc = {{"format", checkpoint_format},          {"step", step},
                          {"optimizer_step", optimizer_step},     {"lora", lora},
                          {"dtype", detail::dtype_name(m.dtype)}, {"base_model", model_dir}};
  // trainer_state.json last: its presence marks the folder complete (latest_checkpoint checks it).
  if (auto s =
          write_file_durably(detail::join(tmp_dir, "trainer_state.json"), state_doc.dump(2) + "\n");
      !s) {
    return s.err();
  }
  // A folder of the same step (a step redone after a crash) is moved aside, then replaced.
  const auto old_dir = detail::join(root, "." + name + ".old-" + std::to_string(::getpid()));
  if (detail::path_exists(final_dir)) {
    if (auto s = rename_durably(final_dir, old_dir); !s) {
      return s.err();
    }
  }
  if (auto s = rename_durably(tmp_dir, final_dir); !s) {
    return s.err();
  }
  detail::remove_tree(old_dir);
  if (co.keep_last > 0) {
    auto entries = detail::list_directory(root);
    if (!entries) {
      return entries.err();
    }
    std::vector<std::pair<std::int64_t, std::string>> steps;
    for (const auto& file : *entries) {
      long long n = 0;
      if (file.size() == 13 && std::sscanf(file.c_str(), "step-%lld", &n) == 1) {
        steps.emplace_back(n, detail::join(root, file));
      }
    }
    std::sort(steps.begin(), steps.end());
    for (std::size_t i = 0; i + static_cast<std::size_t>(co.keep_last) < steps.size(); ++i) {
      detail::remove_tree(steps[i].second);
    }
  }
  return final_dir;
}

status trainer::state::read_checkpoint(const std::string& dir) {
  std::ifstream in(detail::join(dir, "trainer_state.json"));
  json doc;
  try {
    doc = json::parse(in);
  } catch (const json::exception& e) {
    return error{"trainer_state.json: " + std::string(e.what())};
  }
  auto& m = net();
  try {
    if (doc.at("format").get<int>() != checkpoint_format) {
      return error{"trainer_state.json: unsupported format " + doc.at("format").dump()};
    }
    if (doc.at("lora").get<bool>() != (m.lora_rank > 0)) {
      return error{std::string("the checkpoint was written ") +
                   (m.lora_rank > 0 ? "without" : "with") + " LoRA, the trainer is configured " +
                   (m.lora_rank > 0 ? "with" : "without")};
    }
    step = doc.at("step").get<std::int64_t>();
    optimizer_step = doc.at("optimizer_step").get<std::int64_t>();
  } catch (const json::exception& e) {
    return error{"trainer_state.json: " + std::string(e.what())};
  }
  if (m.lora_rank > 0) {
    if (auto s = model.load_lora_adapter(dir); !s) {
      return s;
    }
  } else {
    auto weights = detail::mapped_checkpoint::open_dir(dir);
    if (!weights) {
      return weights.err();
    }
    if (auto s = m.assign_weights(weights->tensors()); !s) {
      return s;
    }
  }
  m.set_trainable();
  bind_model_to_flat();
  auto optimizer = read_safetensors(detail::join(dir, "optimizer.safetensors"));
  if (!optimizer) {
    return optimizer.err();
  }
  at::NoGradGuard no_grad;
  // Data parallel: rank 0 reads the whole buffers and share_initial_state() deals the shards.
  std::vector<std::pair<std::string, at::Tensor>> targets;
  for (const auto& [prefix, buffer] : saved_buffers()) {
    if (dp) {
      resumed_full[prefix] = at::zeros({flat.weights.numel()}, buffer->options());
      targets.emplace_back(prefix, resumed_full[prefix]);
    } else {
      targets.emplace_back(prefix, *buffer);
    }
  }
  for (const auto& [prefix, buffer] : targets) {
    for (const auto& p : params) {
      auto t = slice_view(buffer, p);
      auto it = optimizer->find(prefix + p.name);
      if (it == optimizer->end()) {
        return error{"optimizer.safetensors lacks '" + std::string(prefix) + p.name + "'"};
      }
      if (!std::equal(it->second.shape.begin(), it->second.shape.end(), t.sizes().begin(),
                      t.sizes().end())) {
        return error{"optimizer.safetensors: '" + std::string(prefix) + p.name +
                     "' has the wrong shape"};
      }
      t.copy_(detail::to_tensor(it->second, t.device(), t.scalar_type()));
    }
  }
  if (flat.master.defined() && !dp) {
    flat.weights.copy_(flat.master);
  }
  return ok_status();
}

trainer::trainer(std::unique_ptr<state> s) : state_(std::move(s)) {}
trainer::trainer(trainer&&) noexcept = default;
trainer& trainer::operator=(trainer&&) noexcept = default;
trainer::~trainer() = default;

namespace {

status validate_create(const trainer_options& options) {
  if (auto s = validate(options); !s) {
    return s.err();
  }
  const auto& d = options.distributed;
  if (auto s = validate(d); !s) {
    return s.err();
  }
  if (d.world_size > 1 && d.rank != 0) {
    return error{"distributed 'rank' " + std::to_string(d.rank) +
                 ": a trainer is rank 0; the other ranks run run_rank_worker"};
  }
  if (d.world_size > 1 && !options.reference_model_dir.empty()) {
    return error{
        "'reference_model_dir' is not supported with world_size > 1 (the reference is "
        "the initial model, or reference_logprobs in the batch)"};
  }
  return ok_status();
}

}  // namespace

// Rank 0 of a data-parallel trainer: forms the group and sends the model before init (so every
// rank's KL reference copy is the initial model), then the resumed state after it.
result<trainer> trainer::create(const std::string& model_dir, const trainer_options& options) {
  if (auto s = validate_create(options); !s) {
    return s.err();
  }
  auto p = policy::load(model_dir, options.policy);
  if (!p) {
    return p.err();
  }
  auto s = std::make_unique<state>(std::move(*p));
  return create_from(std::move(s), model_dir, options);
}

result<trainer> trainer::create(policy initial, const trainer_options& options) {
  if (auto s = validate_create(options); !s) {
    return s.err();
  }
  if (options.distributed.world_size > 1 && initial.has_lora()) {
    return error{
        "world_size > 1: give LoRA through trainer_options.lora, not on the initial policy"};
  }
  auto s = std::make_unique<state>(std::move(initial));
  return create_from(std::move(s), "", options);
}

result<trainer> trainer::create_from(std::unique_ptr<state> s, const std::string& model_dir,
                                     const trainer_options& options) {
  if (options.distributed.world_size > 1) {
    auto group = detail::dp_group::connect(options.distributed, s->net().device);
    if (!group) {
      return group.err();
    }
    s->dp = std::move(*group);
  }
  if (auto st = detail::guarded("creating the trainer",
                                [&]() -> status {
                                  if (s->dp) {
                                    s->send_model(options);
                                  }
                                  if (auto i = s->init(model_dir, options); !i) {
                                    return i;
                                  }
                                  if (s->dp) {
                                    s->share_initial_state();
                                  }
                                  return ok_status();
                                });
      !st) {
    return st.err();
  }
  return trainer(std::move(s));
}

result<update_report> trainer::state::run_update(const update_batch& batch, bool given_reference) {
  auto& s = *this;
  const auto start = clock_type::now();
  update_report report;
  const auto overlapped_before = s.overlapped;
  const auto count = batch.sequences.size();
  const auto minis =
      std::min<std::size_t>(static_cast<std::size_t>(s.options.batching.mini_batches), count);
  metric_sums total;
  double weighted_norm = 0;
  for (std::int64_t epoch = 0; epoch < s.options.batching.epochs; ++epoch) {
    for (std::size_t mb = 0; mb < minis; ++mb) {
      const auto t0 = clock_type::now();
      std::vector<std::size_t> indices;
      for (std::size_t i = mb * count / minis; i < (mb + 1) * count / minis; ++i) {
        indices.push_back(i);
      }
      s.zero_grads();
      auto sums = s.accumulate(batch, indices, given_reference);
      if (!sums) {
        s.zero_grads();
        return sums.err();
      }
      total.dropped += sums->dropped;
      total.masked += sums->masked;
      total.ratios.insert(total.ratios.end(), sums->ratios.begin(), sums->ratios.end());
      if (sums->trained == 0 || sums->kept_tokens == 0) {
        // A mini-batch without trained tokens, or all of them filtered off-policy, has no
        // gradient: no step.
        continue;
      }
      auto norm = s.gradient_norm();
      if (!norm) {
        s.zero_grads();
        return norm.err();
      }
      const double lr = s.learning_rate();
      s.adamw_step(*norm);
      s.zero_grads();
      auto m = to_metrics(*sums, std::chrono::duration<double>(clock_type::now() - t0).count());
      m.optimizer_step = s.optimizer_step;
      m.lr = lr;
      m.grad_norm = *norm;
      report.optimizer_steps.push_back(m);
      total.loss += sums->loss * static_cast<double>(sums->trained);
      total.pg_loss += sums->pg_loss * static_cast<double>(sums->trained);
      total.kl += sums->kl;
      total.behaviour_kl += sums->behaviour_kl;
      total.clipped += sums->clipped;
      total.entropy += sums->entropy;
      total.tokens += sums->tokens;
      total.trained += sums->trained;
      total.sequences += sums->sequences;
      weighted_norm += *norm * static_cast<double>(sums->trained);
    }
  }
  ++s.step;
  const double seconds = std::chrono::duration<double>(clock_type::now() - start).count();
  report.summary = to_metrics(total, seconds);
  const auto trained = static_cast<double>(std::max<std::int64_t>(total.trained, 1));
  report.summary.loss = total.loss / trained;
  report.summary.pg_loss = total.pg_loss / trained;
  report.summary.grad_norm = weighted_norm / trained;
  report.summary.optimizer_step = s.optimizer_step;
  report.summary.lr =
      report.optimizer_steps.empty() ? s.learning_rate() : report.optimizer_steps.back().lr;
  report.step = s.step;
  report.buckets_overlapped = s.overlapped - overlapped_before;
  const auto& co = s.options.checkpoint;
  if (!co.dir.empty() && s.step % co.every == 0) {
    auto dir = s.write_checkpoint();
    if (!dir) {
      return dir.err().wrap("checkpoint of step " + std::to_string(s.step));
    }
    report.checkpoint_dir = *dir;
  }
  return report;
}

result<gradient_report> trainer::state::run_compute_gradients(const update_batch& batch,
                                                              bool given_reference) {
  auto& s = *this;
  std::vector<std::size_t> indices(batch.sequences.size());
  std::iota(indices.begin(), indices.end(), 0);
  s.zero_grads();
  auto sums = s.accumulate(batch, indices, given_reference);
  if (!sums) {
    s.zero_grads();
    return sums.err();
  }
  gradient_report out;
  auto norm = s.gradient_norm();
  out.metrics = to_metrics(*sums, 0);
  out.metrics.grad_norm = norm ? *norm : std::nan("");
  out.loss = sums->loss;
  for (auto& p : s.params) {
    auto host = detail::to_host(slice_view(s.gradient(), p).to(s.accumulate_options.dtype()));
    if (!host) {
      return host.err();
    }
    out.gradients.emplace(p.name, std::move(*host));
  }
  s.zero_grads();
  return out;
}

result<update_report> trainer::update(const update_batch& batch) {
  auto& s = *state_;
  if (auto v = validate(batch, s.net().config.vocab_size); !v) {
    return v.err();
  }
  const bool given_reference = !batch.sequences.front().reference_logprobs.empty();
  return detail::guarded("update step " + std::to_string(s.step + 1),
                         [&]() -> result<update_report> {
                           if (s.dp) {
                             s.send_command(command_update, &batch);
                           }
                           return s.run_update(batch, given_reference);
                         });
}

result<gradient_report> trainer::compute_gradients(const update_batch& batch) {
  auto& s = *state_;
  if (auto v = validate(batch, s.net().config.vocab_size); !v) {
    return v.err();
  }
  const bool given_reference = !batch.sequences.front().reference_logprobs.empty();
  return detail::guarded("computing gradients", [&]() -> result<gradient_report> {
    if (s.dp) {
      s.send_command(command_gradients, &batch);
    }
    return s.run_compute_gradients(batch, given_reference);
  });
}

result<std::string> trainer::save_checkpoint() {
  return detail::guarded("writing a checkpoint", [&] {
    if (state_->dp && !state_->options.checkpoint.dir.empty()) {
      state_->send_command(command_checkpoint, nullptr);
    }
    return state_->write_checkpoint();
  });
}

const policy& trainer::current_policy() const { return state_->model; }

std::int64_t trainer::step() const { return state_->step; }

std::int64_t trainer::optimizer_step() const { return state_->optimizer_step; }

result<std::string> latest_checkpoint(const std::string& dir) {
  if (!detail::path_exists(dir)) {
    return std::string();
  }
  auto entries = detail::list_directory(dir);
  if (!entries) {
    return entries.err().wrap("checkpoint dir");
  }
  std::int64_t best = -1;
  std::string best_path;
  for (const auto& file : *entries) {
    long long n = 0;
    const auto path = detail::join(dir, file);
    if (file.size() == 13 && std::sscanf(file.c_str(), "step-%lld", &n) == 1 && n > best &&
        detail::path_exists(detail::join(path, "trainer_state.json"))) {
      best = n;
      best_path = path;
    }
  }
  return best_path;
}

}  // namespace leap::learner
