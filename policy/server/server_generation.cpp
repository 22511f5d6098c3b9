#include "policy/server/detail/server_generation.hpp"

#include <algorithm>

namespace leap::policy {

stop_rules make_stop_rules(const sampling_params& sampling, int max_tokens) {
  stop_rules rules;
  rules.max_tokens = max_tokens;
  rules.min_tokens = sampling.min_tokens;
  rules.stop = sampling.stop;
  rules.stop_token_ids = sampling.stop_token_ids;
  rules.ignore_eos = sampling.ignore_eos;
  rules.skip_special_tokens = sampling.skip_special_tokens;
  rules.include_stop_str_in_output = sampling.include_stop_str_in_output;
  return rules;
}

sequence_builder::sequence_builder(stop_rules rules, int index, std::vector<token_id> prompt_ids)
    : rules_(std::move(rules)) {
  output_.index = index;
  output_.prompt_ids = std::move(prompt_ids);
}

bool sequence_builder::push(const token_step& step) {
  if (finished()) {
    return true;
  }
  output_.token_ids.push_back(step.id);
  output_.logprobs.push_back(step.logprob);
  output_.top_logprobs.push_back(step.top);
  const auto count = static_cast<int>(output_.token_ids.size());
  const bool may_stop = count - 1 >= rules_.min_tokens;
  const model_vocabulary& vocab = rules_.vocab != nullptr ? *rules_.vocab : *byte_vocabulary();
  const bool shown = !(rules_.skip_special_tokens && vocab.is_special(step.id));

  const bool is_eos = !rules_.ignore_eos && vocab.is_end_of_generation(step.id);
  const bool is_stop_id = std::find(rules_.stop_token_ids.begin(), rules_.stop_token_ids.end(),
                                    step.id) != rules_.stop_token_ids.end();
  if (may_stop && (is_eos || is_stop_id)) {
    if (rules_.include_stop_str_in_output && shown) {
      output_.text += vocab.token_text(step.id);
    }
    // vLLM checks the end-of-sequence token first: its stop_reason is then null.
    if (is_eos) {
      output_.eos_token = step.id;
    } else {
      output_.stop_token = step.id;
    }
    text_after_.push_back(output_.text.size());
    finish(finish_reason::stop);
    return true;
  }

  const std::size_t before = output_.text.size();
  if (shown) {
    output_.text += vocab.token_text(step.id);
  }
  if (!rules_.stop.empty() && output_.text.size() > before) {
    // Only a match that ends in the new text is new; find the earliest one.
    std::size_t best = std::string::npos;
    const std::string* matched = nullptr;
    for (const auto& stop : rules_.stop) {
      if (stop.empty()) {
        continue;
      }
      const std::size_t from = before >= stop.size() - 1 ? before - (stop.size() - 1) : 0;
      const std::size_t at = output_.text.find(stop, from);
      if (at != std::string::npos && at < best) {
        best = at;
        matched = &stop;
      }
    }
    if (matched != nullptr) {
      output_.text.resize(rules_.include_stop_str_in_output ? best + matched->size() : best);
      output_.stop_string = *matched;
      text_after_.push_back(output_.text.size());
      finish(finish_reason::stop);
      return true;
    }
  }
  text_after_.push_back(output_.text.size());
  if (count >= rules_.max_tokens) {
    finish(finish_reason::length);
    return true;
  }
  return false;
}

void sequence_builder::finish_natural() {
  if (!finished()) {
    finish(finish_reason::stop);
  }
}

void sequence_builder::finish_abort(std::string message) {
  if (!finished()) {
    output_.abort_message = std::move(message);
    finish(finish_reason::abort);
  }
}

void sequence_builder::finish(finish_reason reason) { output_.finish = reason; }

std::size_t sequence_builder::safe_text_end() const {
  const std::string& text = output_.text;
  std::size_t end = text.size();
  // Hold back a trailing, incomplete UTF-8 character.
  for (std::size_t back = 1; back <= 4 && back <= end; ++back) {
    const auto byte = static_cast<unsigned char>(text[end - back]);
    if ((byte & 0xC0U) == 0x80U) {
      continue;  // a continuation byte: keep looking for the lead byte
    }
    std::size_t length = 1;
    if ((byte & 0xE0U) == 0xC0U) {
      length = 2;
    } else if ((byte & 0xF0U) == 0xE0U) {
      length = 3;
    } else if ((byte & 0xF8U) == 0xF0U) {
      length = 4;
    }
    if (length > back) {
      end -= back;
    }
    break;
  }
  // Hold back a suffix that a stop string could still complete.
  std::size_t hold = 0;
  for (const auto& stop : rules_.stop) {
    if (stop.empty()) {
      continue;
    }
    for (std::size_t k = std::min(stop.size() - 1, end); k > hold; --k) {
      if (text.compare(end - k, k, stop, 0, k) == 0) {
        hold = k;
        break;
      }
    }
  }
  end -= hold;
  return std::max(end, sent_text_);
}

bool sequence_builder::has_delta() const {
  if (sent_tokens_ < output_.token_ids.size()) {
    return true;
  }
  if (finished()) {
    return !finish_sent_;
  }
  return safe_text_end() > sent_text_;
}

sequence_output sequence_builder::take_delta(std::size_t max_tokens) {
  sequence_output delta;
  delta.index = output_.index;
  if (sent_tokens_ == 0 && sent_text_ == 0) {
    delta.prompt_ids = output_.prompt_ids;
  }
  const std::size_t take = std::min(max_tokens, output_.token_ids.size() - sent_tokens_);
  const auto from = static_cast<std::ptrdiff_t>(sent_tokens_);
  const auto to = from + static_cast<std::ptrdiff_t>(take);
  delta.token_ids.assign(output_.token_ids.begin() + from, output_.token_ids.begin() + to);
  delta.logprobs.assign(output_.logprobs.begin() + from, output_.logprobs.begin() + to);
  delta.top_logprobs.assign(output_.top_logprobs.begin() + from, output_.top_logprobs.begin() + to);
  sent_tokens_ += take;

  const bool all_tokens_sent = sent_tokens_ == output_.token_ids.size();
  std::size_t end = finished() && all_tokens_sent ? output_.text.size() : safe_text_end();
  if (!all_tokens_sent && sent_tokens_ > 0) {
    // Not past the text of the tokens handed out (a stop string may have cut the text shorter).
    end = std::max(sent_text_, std::min(end, text_after_[sent_tokens_ - 1]));
  } else if (!all_tokens_sent) {
    end = sent_text_;
  }
  delta.text_offset = sent_text_;
  delta.text = output_.text.substr(sent_text_, end - sent_text_);
  sent_text_ = end;

  if (finished() && all_tokens_sent && sent_text_ == output_.text.size()) {
    delta.finish = output_.finish;
    delta.stop_token = output_.stop_token;
    delta.stop_string = output_.stop_string;
    delta.eos_token = output_.eos_token;
    delta.abort_message = output_.abort_message;
    finish_sent_ = true;
  }
  return delta;
}

}  // namespace leap::policy
