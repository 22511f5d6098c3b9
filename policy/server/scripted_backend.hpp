// The scripted backend: a policy that answers a task suite's prompts with the suite's own known
// good and known wrong solutions, at a configurable pass rate and speed. It is the load generator
// for benchmarks and the policy of CPU end-to-end tests; it knows tasks as plain data, not the
// sandbox.
//
// How it answers (every choice a pure function of the server seed, the request and the prompt):
//  - Task: the first user message of the conversation (for a prompt that is not ChatML, the whole
//    prompt text) is matched against the registered task prompts: first exactly (surrounding
//    whitespace ignored), else the longest registered prompt that occurs inside it (ties: the
//    smaller task id). No match: a fixed sentence without code ("unknown task").
//  - Turn: 1 + the number of assistant messages before the one being generated. Turn 1 answers
//    the solution with the task's first-turn pass probability, else one of its wrong candidates.
//    A later turn (a debug turn: feedback follows an earlier answer) answers the solution with the
//    fix probability, else a wrong candidate; an earlier correct answer is simply repeated.
//  - Answer text: one short sentence, a blank line, then the code in a ```<language> fence; the
//    model then ends its turn with <|im_end|>.
//  - Randomness: keyed on (seed, the prompt up to the assistant message being generated, the
//    request's seed, the sample index). Without a request seed, the server's arrival number for
//    the request stands in, so repeated calls sample anew as a real sampler does; temperature 0
//    ignores both (greedy: always the same answer for a prompt).
//  - Resume: a prompt that ends inside an assistant message (a client resuming after an abort)
//    continues the answer it would have given, from where the prompt stops.
//  - Log-probs: deterministic negative floats, mostly near 0, keyed on the context and position
//    (not on the request seed), so the same answer text always reports the same log-probs.
//  - Latency: time to first token, then tokens at tokens_per_s, both scaled by one per-request
//    jitter factor in [1 - jitter, 1 + jitter]; slept on the request's worker thread, in slices of
//    at least 10 ms, pausable and abortable through generation_control.
#pragma once

#include "common/result.hpp"
#include "policy/server/server_backend.hpp"

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace leap::policy {

struct scripted_wrong_answer {
  std::string label;  // the bug it shows: compile_error, off_by_one, race, ...
  std::string code;
};

struct scripted_task {
  std::string id;        // "cuda/vector_add"
  std::string prompt;    // the text the model is asked
  std::string language;  // the fence tag: "cuda", "cpp", "python"
  std::string solution;  // a correct answer's code
  std::vector<scripted_wrong_answer> wrong;
  int difficulty = 2;  // 1 (easy) .. 3 (hard)
  // Overrides the difficulty's first-turn pass probability when set.
  std::optional<double> first_turn_pass;
};

struct latency_model {
  double ttft_ms = 0.0;       // Default: 0 (no wait before the first token)
  double tokens_per_s = 0.0;  // Default: 0 (unlimited: every token at once)
  double jitter = 0.0;        // Default: 0; in [0, 1): per-request scale in [1 - j, 1 + j]
};

struct scripted_config {
  std::uint64_t seed = 0;  // Default: 0
  // First-turn pass probability for difficulty 1, 2, 3. Default: 0.7, 0.45, 0.2.
  std::array<double, 3> first_turn_pass{0.7, 0.45, 0.2};
  // Probability that a debug turn fixes a wrong answer. Default: 0.5.
  double fix_probability = 0.5;
  latency_model latency;
  std::vector<scripted_task> tasks;
};

// What the backend decided to answer, for tests and logs.
struct scripted_answer {
  const scripted_task* task = nullptr;  // null: unknown task
  int turn = 1;
  bool correct = false;
  std::string label;  // "solution", a wrong candidate's label, or "unknown"
  std::string text;   // the whole answer text (without the closing <|im_end|>)
};

class scripted_backend final : public policy_backend {
 public:
  // Validates the configuration: unique, non-empty task ids and prompts, a solution per task,
  // probabilities in [0, 1], difficulty in 1..3, non-negative latency, jitter in [0, 1). Errors
  // name the task and field.
  static result<std::shared_ptr<scripted_backend>> create(scripted_config config);

  [[nodiscard]] std::string name() const override { return "scripted"; }
  status generate(const backend_request& request, generation_control& control,
                  const token_sink& sink) override;
  // Accepts any path: there are no weights; the version is only remembered.
  status load_weights(const std::string& path, std::int64_t version) override;
  // A LoRA adapter is a version change like any weight load: the answers stay the suite's.
  [[nodiscard]] bool supports_adapters() const override { return true; }
  status load_adapter(const std::string& name, const std::string& path,
                      std::int64_t version) override;

  // The answer `generate` would give for this request, without latency. Pure, thread-safe.
  [[nodiscard]] scripted_answer plan(const backend_request& request) const;
  // The task a prompt text asks for (the matching rule above), or null.
  [[nodiscard]] const scripted_task* find_task(const std::string& user_text) const;
  // The first-turn pass probability that applies to a task.
  [[nodiscard]] double pass_probability(const scripted_task& task) const;

 private:
  explicit scripted_backend(scripted_config config);

  scripted_config config_;
  std::unordered_map<std::string, const scripted_task*> by_prompt_;  // trimmed prompt -> task
  std::vector<const scripted_task*> by_length_;  // longest prompt first, for substring matching
};

// The answer text for a piece of code: a sentence, then the code in a fence of the language.
[[nodiscard]] std::string render_scripted_answer(const std::string& sentence,
                                                 const std::string& language,
                                                 const std::string& code);

// The last fenced code block of a text ("" when none): how the backend reads its own earlier
// answer back on a debug turn.
[[nodiscard]] std::string last_fenced_block(const std::string& text);

}  // namespace leap::policy
