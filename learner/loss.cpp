#include "learner/loss.hpp"

#include "learner/detail/loss.hpp"
#include "learner/detail/transformer.hpp"

#include <algorithm>
#include <cmath>

namespace leap::learner {
namespace {

constexpr double max_log_ratio = 20.0;

}  // namespace

offpolicy_decision filter_offpolicy(const offpolicy_options& o,
                                    const std::vector<double>& log_ratios,
                                    const std::vector<std::int64_t>& staleness) {
  offpolicy_decision d;
  const auto n = log_ratios.size();
  d.keep.assign(n, 1.0);
  d.pg_scale.assign(n, 1.0);
  double sum = 0;
  for (auto lr : log_ratios) {
    sum += std::clamp(lr, -max_log_ratio, max_log_ratio);
  }
  if (n > 0) {
    d.ratio = std::exp(sum / static_cast<double>(n));
  }
  if (o.mode == offpolicy_mode::drop_sequence && n > 0 && (d.ratio < o.low || d.ratio > o.high)) {
    d.dropped = true;
    d.keep.assign(n, 0.0);
    return d;
  }
  for (std::size_t t = 0; t < n; ++t) {
    const double r = std::exp(std::clamp(log_ratios[t], -max_log_ratio, max_log_ratio));
    const bool stale =
        o.max_staleness >= 0 && t < staleness.size() && staleness[t] > o.max_staleness;
    const bool outside = o.mode == offpolicy_mode::mask_token && (r < o.low || r > o.high);
    if (stale || outside) {
      d.keep[t] = 0.0;
      ++d.masked;
      d.stale += stale ? 1 : 0;
      continue;
    }
    if (o.mode == offpolicy_mode::truncate_token && r > o.high) {
      d.pg_scale[t] = o.high / r;
    }
  }
  return d;
}

double quantile(std::vector<double> values, double p) {
  if (values.empty()) {
    return 0;
  }
  std::sort(values.begin(), values.end());
  const double at = std::clamp(p, 0.0, 1.0) * static_cast<double>(values.size() - 1);
  const auto below = static_cast<std::size_t>(std::floor(at));
  const auto above = std::min(below + 1, values.size() - 1);
  return values[below] + (at - static_cast<double>(below)) * (values[above] - values[below]);
}

std::vector<double> sequence_token_weights(loss_aggregation aggregation,
                                           const std::vector<std::int64_t>& trained_tokens) {
  std::int64_t total = 0;
  std::int64_t sequences = 0;
  for (auto n : trained_tokens) {
    total += n;
    sequences += n > 0 ? 1 : 0;
  }
  std::vector<double> w(trained_tokens.size(), 0.0);
  for (std::size_t i = 0; i < w.size(); ++i) {
    const auto n = trained_tokens[i];
    if (n <= 0) {
      continue;
    }
    switch (aggregation) {
      case loss_aggregation::token_mean:
        w[i] = 1.0 / static_cast<double>(total);
        break;
      case loss_aggregation::seq_mean_token_mean:
        w[i] = 1.0 / (static_cast<double>(sequences) * static_cast<double>(n));
        break;
      case loss_aggregation::seq_mean_token_sum:
        w[i] = 1.0 / static_cast<double>(sequences);
        break;
    }
  }
  return w;
}

double kept_weight_factor(loss_aggregation aggregation, std::int64_t all_sequences,
                          std::int64_t all_tokens, std::int64_t kept_sequences,
                          std::int64_t kept_tokens) {
  const auto ratio = [](std::int64_t all, std::int64_t kept) {
    return kept > 0 ? static_cast<double>(all) / static_cast<double>(kept) : 0.0;
  };
  switch (aggregation) {
    case loss_aggregation::token_mean:
      return ratio(all_tokens, kept_tokens);
    case loss_aggregation::seq_mean_token_mean:
    case loss_aggregation::seq_mean_token_sum:
      return ratio(all_sequences, kept_sequences);
  }
  return 0.0;
}

namespace detail {

loss_terms policy_loss(const at::Tensor& logprobs, const at::Tensor& behaviour,
                       const at::Tensor& advantages, const at::Tensor& reference,
                       const at::Tensor& weights, const at::Tensor& pg_scale,
                       const loss_options& options) {
  const auto log_ratio = (logprobs - behaviour).clamp(-max_log_ratio, max_log_ratio);
  const auto ratio = at::exp(log_ratio);
  const auto unclipped = ratio * advantages;
  const auto clipped = ratio.clamp(1.0 - options.clip_low, 1.0 + options.clip_high) * advantages;
  const auto pg = pg_scale.defined() ? -at::minimum(unclipped, clipped) * pg_scale
                                     : -at::minimum(unclipped, clipped);
  loss_terms out;
  auto per_token = pg;
  if (options.kl_coef > 0 && reference.defined()) {
    const auto d = (reference - logprobs).clamp(-max_log_ratio, max_log_ratio);
    const auto k3 = at::exp(d) - d - 1.0;
    per_token = per_token + options.kl_coef * k3;
    out.kl_sum = k3.detach().sum();
  } else {
    out.kl_sum = at::zeros({}, logprobs.options().requires_grad(false));
  }
  out.loss = (per_token * weights).sum();
  const auto r = ratio.detach();
  const auto lr = log_ratio.detach();
  out.pg_loss = (pg.detach() * weights).sum();
  out.behaviour_kl_sum = (r - lr - 1.0).sum();
  // The clipped term is active exactly where it is the strictly smaller one: there the token's
  // gradient is zero.
  out.clipped_count = (clipped.detach() < unclipped.detach()).sum().to(logprobs.scalar_type());
  return out;
}

}  // namespace detail

result<loss_value> compute_loss(const std::vector<loss_tokens>& sequences,
                                const loss_options& options) {
  if (auto s = validate(options); !s) {
    return s.err();
  }
  std::vector<std::int64_t> counts;
  std::vector<std::int64_t> kept_counts;  // 0 for a dropped sequence: it leaves the normaliser
  std::vector<offpolicy_decision> decisions;
  std::vector<double> logp;
  std::vector<double> behaviour;
  std::vector<double> advantages;
  std::vector<double> reference;
  std::vector<double> pg_scale;
  for (std::size_t i = 0; i < sequences.size(); ++i) {
    const auto& s = sequences[i];
    const auto n = s.logprobs.size();
    if (s.behaviour_logprobs.size() != n || s.advantages.size() != n ||
        (!s.staleness.empty() && s.staleness.size() != n)) {
      return error{"sequence " + std::to_string(i) +
                   ": logprobs, behaviour_logprobs, advantages and staleness differ in length"};
    }
    if (options.kl_coef > 0 && s.reference_logprobs.size() != n) {
      return error{"sequence " + std::to_string(i) +
                   ": kl_coef > 0 needs reference_logprobs of the same length"};
    }
    std::vector<double> log_ratios(n);
    for (std::size_t t = 0; t < n; ++t) {
      log_ratios[t] = s.logprobs[t] - s.behaviour_logprobs[t];
    }
    decisions.push_back(filter_offpolicy(options.offpolicy, log_ratios, s.staleness));
    counts.push_back(static_cast<std::int64_t>(n));
    kept_counts.push_back(decisions.back().dropped ? 0 : static_cast<std::int64_t>(n));
    logp.insert(logp.end(), s.logprobs.begin(), s.logprobs.end());
    behaviour.insert(behaviour.end(), s.behaviour_logprobs.begin(), s.behaviour_logprobs.end());
    advantages.insert(advantages.end(), s.advantages.begin(), s.advantages.end());
    pg_scale.insert(pg_scale.end(), decisions.back().pg_scale.begin(),
                    decisions.back().pg_scale.end());
    if (options.kl_coef > 0) {
      reference.insert(reference.end(), s.reference_logprobs.begin(), s.reference_logprobs.end());
    }
  }
  const auto seq_weights = sequence_token_weights(options.aggregation, kept_counts);
  std::vector<double> weights;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    for (auto keep : decisions[i].keep) {
      weights.push_back(seq_weights[i] * keep);
    }
  }
  return detail::guarded("computing the loss", [&]() -> result<loss_value> {
    const auto opts = at::TensorOptions().dtype(at::kDouble);
    auto lp = at::tensor(logp, opts).requires_grad_(true);
    const auto terms = detail::policy_loss(
        lp, at::tensor(behaviour, opts), at::tensor(advantages, opts),
        options.kl_coef > 0 ? at::tensor(reference, opts) : at::Tensor(), at::tensor(weights, opts),
        options.offpolicy.mode == offpolicy_mode::truncate_token ? at::tensor(pg_scale, opts)
                                                                 : at::Tensor(),
        options);
    loss_value v;
    v.loss = terms.loss.item<double>();
    v.pg_loss = terms.pg_loss.item<double>();
    const auto tokens = static_cast<double>(logp.size());
    v.kl = tokens > 0 ? terms.kl_sum.item<double>() / tokens : 0.0;
    v.clip_fraction = tokens > 0 ? terms.clipped_count.item<double>() / tokens : 0.0;
    for (const auto& d : decisions) {
      v.dropped_sequences += d.dropped ? 1 : 0;
      v.masked_tokens += d.masked;
      v.sequence_ratios.push_back(d.ratio);
    }
    std::vector<double> grad(logp.size(), 0.0);
    if (!logp.empty()) {
      terms.loss.backward();
      const auto g = lp.grad().contiguous();
      std::copy(g.data_ptr<double>(), g.data_ptr<double>() + g.numel(), grad.begin());
    }
    std::size_t k = 0;
    for (auto n : counts) {
      v.grad_logprobs.emplace_back(
          grad.begin() + static_cast<std::ptrdiff_t>(k),
          grad.begin() + static_cast<std::ptrdiff_t>(k + static_cast<std::size_t>(n)));
      k += static_cast<std::size_t>(n);
    }
    return v;
  });
}

}  // namespace leap::learner
