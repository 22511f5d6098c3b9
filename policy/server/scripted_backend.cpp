#include "policy/server/detail/server_random.hpp"
#include "policy/server/server.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <set>

namespace leap::policy {
namespace {

constexpr const char* first_turn_sentence = "Here is my implementation.";
constexpr const char* debug_turn_sentence = "Thanks for the feedback. Here is a corrected version.";
constexpr const char* unknown_task_text =
    "I do not recognise this task, so I cannot write a solution for it.";
constexpr const char* no_code_text = "I am not sure how to solve this task.";

// Salts that keep independent draws independent.
constexpr std::uint64_t salt_pass = 1;
constexpr std::uint64_t salt_wrong = 2;
constexpr std::uint64_t salt_latency = 3;
constexpr std::uint64_t salt_logprob = 0x109B;

std::string trim(const std::string& s) {
  const auto first = s.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) {
    return {};
  }
  const auto last = s.find_last_not_of(" \t\r\n");
  return s.substr(first, last - first + 1);
}

bool starts_with(const std::string& text, const std::string& prefix) {
  return text.size() >= prefix.size() && text.compare(0, prefix.size(), prefix) == 0;
}

double token_logprob(std::uint64_t context, std::size_t position, token_id id) {
  const double u = random::unit(random::combine(
      context, (static_cast<std::uint64_t>(position) << 12U) ^ static_cast<std::uint64_t>(id)));
  // Mostly close to 0 (a confident model), with a tail down to about -4.
  return -(0.0005 + 4.0 * std::pow(u, 6.0));
}

std::vector<top_logprob> alternatives(std::uint64_t context, std::size_t position, token_id id,
                                      double logprob, int count) {
  std::vector<top_logprob> top;
  for (int j = 0; j < count; ++j) {
    const auto alt = static_cast<token_id>((id + 1 + 53 * j) % 256);
    const double u = random::unit(random::combine(context ^ 0xA17ULL, position * 64U + j));
    top.push_back({alt, logprob - 1.0 - j - 0.5 * u});
  }
  return top;
}

}  // namespace

std::string render_scripted_answer(const std::string& sentence, const std::string& language,
                                   const std::string& code) {
  std::string text = sentence;
  text += "\n\n```";
  text += language;
  text += '\n';
  text += code;
  if (!code.empty() && code.back() != '\n') {
    text += '\n';
  }
  text += "```";
  return text;
}

std::string last_fenced_block(const std::string& text) {
  std::string found;
  std::size_t at = 0;
  while (true) {
    const std::size_t open = text.find("```", at);
    if (open == std::string::npos) {
      break;
    }
    const std::size_t line_end = text.find('\n', open);
    if (line_end == std::string::npos) {
      break;
    }
    const std::size_t close = text.find("```", line_end + 1);
    if (close == std::string::npos) {
      break;
    }
    found = text.substr(line_end + 1, close - line_end - 1);
    at = close + 3;
  }
  return found;
}

scripted_backend::scripted_backend(scripted_config config) : config_(std::move(config)) {
  for (const auto& task : config_.tasks) {
    by_prompt_.emplace(trim(task.prompt), &task);
    by_length_.push_back(&task);
  }
  std::sort(by_length_.begin(), by_length_.end(), [](const auto* a, const auto* b) {
    if (a->prompt.size() != b->prompt.size()) {
      return a->prompt.size() > b->prompt.size();
    }
    return a->id < b->id;
  });
}

result<std::shared_ptr<scripted_backend>> scripted_backend::create(scripted_config config) {
  const auto probability = [](double p) { return std::isfinite(p) && p >= 0.0 && p <= 1.0; };
  for (std::size_t d = 0; d < config.first_turn_pass.size(); ++d) {
    if (!probability(config.first_turn_pass[d])) {
      return error{"scripted backend: the first-turn pass probability of difficulty " +
                   std::to_string(d + 1) + " must be in [0, 1] (got " +
                   std::to_string(config.first_turn_pass[d]) + ")"};
    }
  }
  if (!probability(config.fix_probability)) {
    return error{"scripted backend: the fix probability must be in [0, 1] (got " +
                 std::to_string(config.fix_probability) + ")"};
  }
  const latency_model& l = config.latency;
  if (!(l.ttft_ms >= 0.0) || !(l.tokens_per_s >= 0.0) || !(l.jitter >= 0.0 && l.jitter < 1.0)) {
    return error{
        "scripted backend: latency needs ttft_ms >= 0, tokens_per_s >= 0 and jitter in "
        "[0, 1)"};
  }
  std::set<std::string> ids;
  std::map<std::string, std::string> prompts;
  for (const auto& task : config.tasks) {
    const std::string where = "scripted backend: task '" + task.id + "'";
    if (task.id.empty()) {
      return error{"scripted backend: a task has an empty id"};
    }
    if (!ids.insert(task.id).second) {
      return error{where + " appears twice"};
    }
    const std::string prompt = trim(task.prompt);
    if (prompt.empty()) {
      return error{where + " has an empty prompt"};
    }
    if (auto [it, inserted] = prompts.emplace(prompt, task.id); !inserted) {
      return error{where + " has the same prompt as task '" + it->second +
                   "'; the backend could not tell them apart"};
    }
    if (task.solution.empty()) {
      return error{where + " has no solution"};
    }
    if (task.difficulty < 1 || task.difficulty > 3) {
      return error{where + ": difficulty must be 1, 2 or 3 (got " +
                   std::to_string(task.difficulty) + ")"};
    }
    if (task.first_turn_pass && !probability(*task.first_turn_pass)) {
      return error{where + ": the first-turn pass probability must be in [0, 1]"};
    }
  }
  return std::shared_ptr<scripted_backend>(new scripted_backend(std::move(config)));
}

const scripted_task* scripted_backend::find_task(const std::string& user_text) const {
  const std::string text = trim(user_text);
  if (const auto it = by_prompt_.find(text); it != by_prompt_.end()) {
    return it->second;
  }
  for (const auto* task : by_length_) {
    if (text.find(trim(task->prompt)) != std::string::npos) {
      return task;
    }
  }
  return nullptr;
}

double scripted_backend::pass_probability(const scripted_task& task) const {
  if (task.first_turn_pass) {
    return *task.first_turn_pass;
  }
  return config_.first_turn_pass[static_cast<std::size_t>(std::clamp(task.difficulty, 1, 3) - 1)];
}

scripted_answer scripted_backend::plan(const backend_request& request) const {
  const parsed_chat chat = parse_chat(request.prompt);
  scripted_answer answer;
  const chat_message* first_user = nullptr;
  const chat_message* last_assistant = nullptr;
  for (const auto& m : chat.messages) {
    if (m.role == "user" && first_user == nullptr) {
      first_user = &m;
    }
    if (m.role == "assistant") {
      ++answer.turn;
      last_assistant = &m;
    }
  }
  answer.task = first_user != nullptr ? find_task(first_user->content) : nullptr;
  if (answer.task == nullptr) {
    answer.label = "unknown";
    answer.text = unknown_task_text;
    return answer;
  }
  const scripted_task& task = *answer.task;

  const std::size_t context_len =
      chat.open_assistant ? chat.open_assistant_offset : request.prompt.size();
  std::uint64_t key =
      random::combine(config_.seed, random::hash_ids(std::span(request.prompt).first(context_len)));
  if (request.sampling.temperature > 0.0) {
    const std::uint64_t draw = request.sampling.seed
                                   ? static_cast<std::uint64_t>(*request.sampling.seed)
                                   : random::combine(0x5E41ULL, request.request_serial);
    key = random::combine(random::combine(key, draw),
                          static_cast<std::uint64_t>(request.sample_index));
  }
  const double u = random::unit(random::combine(key, salt_pass));
  if (answer.turn == 1) {
    answer.correct = u < pass_probability(task);
  } else {
    const std::string previous =
        last_assistant != nullptr ? last_fenced_block(last_assistant->content) : std::string{};
    answer.correct = trim(previous) == trim(task.solution) || u < config_.fix_probability;
  }
  const char* sentence = answer.turn == 1 ? first_turn_sentence : debug_turn_sentence;
  if (answer.correct) {
    answer.label = "solution";
    answer.text = render_scripted_answer(sentence, task.language, task.solution);
  } else if (task.wrong.empty()) {
    answer.label = "no_code";
    answer.text = no_code_text;
  } else {
    const auto& wrong = task.wrong[random::combine(key, salt_wrong) % task.wrong.size()];
    answer.label = wrong.label;
    answer.text = render_scripted_answer(sentence, task.language, wrong.code);
  }
  return answer;
}

status scripted_backend::generate(const backend_request& request, generation_control& control,
                                  const token_sink& sink) {
  const auto start = std::chrono::steady_clock::now();
  scripted_answer answer = plan(request);
  const parsed_chat chat = parse_chat(request.prompt);

  // A prompt that ends inside the assistant message resumes it: continue the planned answer, or
  // any candidate answer that the partial text is the start of.
  std::string partial;
  if (chat.open_assistant) {
    partial = *chat.open_assistant;
  }
  std::string text = answer.text;
  if (!partial.empty() && !starts_with(text, partial) && answer.task != nullptr) {
    const char* sentence = answer.turn == 1 ? first_turn_sentence : debug_turn_sentence;
    std::vector<std::string> candidates{
        render_scripted_answer(sentence, answer.task->language, answer.task->solution)};
    for (const auto& wrong : answer.task->wrong) {
      candidates.push_back(render_scripted_answer(sentence, answer.task->language, wrong.code));
    }
    for (const auto& candidate : candidates) {
      if (starts_with(candidate, partial)) {
        text = candidate;
        break;
      }
    }
  }
  std::size_t skip = 0;
  if (!partial.empty() && starts_with(text, partial)) {
    skip = partial.size();
  }
  std::vector<token_id> ids = byte_tokenizer::encode(std::string_view(text).substr(skip), false);
  ids.push_back(special::im_end);

  const std::size_t context_len =
      chat.open_assistant ? chat.open_assistant_offset : request.prompt.size();
  const std::uint64_t context = random::combine(
      config_.seed ^ salt_logprob, random::hash_ids(std::span(request.prompt).first(context_len)));
  const std::size_t position_base = partial.size();

  const latency_model& l = config_.latency;
  const double jitter_u =
      random::unit(random::combine(random::combine(context ^ salt_latency, request.request_serial),
                                   static_cast<std::uint64_t>(request.sample_index)));
  const double scale = 1.0 + l.jitter * (2.0 * jitter_u - 1.0);
  const auto ttft = std::chrono::duration<double, std::milli>(l.ttft_ms * scale);
  const std::chrono::duration<double> per_token(l.tokens_per_s > 0.0 ? scale / l.tokens_per_s
                                                                     : 0.0);
  const auto first_at =
      start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(ttft);
  constexpr auto min_slice = std::chrono::milliseconds(10);

  std::vector<token_step> batch;
  std::size_t next = 0;
  auto deadline = first_at;
  while (next < ids.size()) {
    if (!control.sleep_until(deadline) || !control.checkpoint()) {
      return ok_status();  // aborted or stopping: the server finishes the sequence
    }
    const auto now = std::chrono::steady_clock::now();
    std::size_t due = ids.size();
    if (per_token.count() > 0.0) {
      const double elapsed = std::chrono::duration<double>(now - first_at).count();
      due = std::min(ids.size(),
                     static_cast<std::size_t>(std::max(0.0, elapsed / per_token.count())) + 1);
      due = std::max(due, next + 1);
    }
    batch.clear();
    for (; next < due; ++next) {
      const std::size_t position = position_base + next;
      token_step step;
      step.id = ids[next];
      step.logprob = token_logprob(context, position, step.id);
      if (request.top_logprobs > 0) {
        step.top = alternatives(context, position, step.id, step.logprob, request.top_logprobs);
      }
      batch.push_back(std::move(step));
    }
    if (!sink(batch)) {
      return ok_status();
    }
    const auto paced = first_at + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                      per_token * static_cast<double>(next));
    deadline = std::max(paced, now + min_slice);
  }
  return ok_status();
}

status scripted_backend::load_weights(const std::string& /*path*/, std::int64_t /*version*/) {
  return ok_status();
}

status scripted_backend::load_adapter(const std::string& /*name*/, const std::string& path,
                                      std::int64_t version) {
  return load_weights(path, version);
}

}  // namespace leap::policy
