// The keys of the policy section (the inference servers, how the learner's weights reach them)
// and the rules that tie them to the learner and the rollout.

#include "orchestrator/detail/schema_fields.hpp"
#include "orchestrator/detail/schema_sections.hpp"

#include <optional>
#include <string>

namespace leap::config_detail {
namespace {

// policy.weight_sync is an enum key, whose automatic value configs and stored runs from before the
// enum spell "" (the name table cannot hold an empty name): that still reads as auto, and is
// written back as auto, so a resumed old run finds no difference.
field_spec weight_sync_field(std::string meaning) {
  field_spec f =
      choice_field("policy.weight_sync", LEAP_FIELD(policy.weight_sync), std::move(meaning));
  f.read = [by_name = std::move(f.read)](const YAML::Node& n, experiment_config& c, sink& s) {
    if (n.IsScalar() && n.Scalar().empty()) {
      c.policy.weight_sync = weight_sync_method::automatic;
      return true;
    }
    return by_name(n, c, s);
  };
  return f;
}

std::optional<std::string> check_weight_sync_delta(const std::string& dtype) {
  if (dtype.empty() || dtype == "bfloat16" || dtype == "float16" || dtype == "float32" ||
      dtype == "float64") {
    return std::nullopt;
  }
  return "must be the servers' dtype (bfloat16, float16, float32, float64) or empty, got '" +
         dtype + "'";
}

}  // namespace

void add_policy_fields(std::vector<field_spec>& f) {
  f.push_back(
      choice_field("policy.flavour", LEAP_FIELD(policy.flavour), "Inference server protocol"));
  f.push_back(weight_sync_field(
      "How the torch learner's weights reach the servers: disk (a folder per step, loaded "
      "through the server's route: vLLM /collective_rpc reload_weights, SGLang "
      "/update_weights_from_disk), in_memory (embedded server only: copied in the process), nccl "
      "(vLLM's weight-transfer engine: one vllm server with --weight-transfer-config "
      "'{\"backend\": \"nccl\"}' receives a broadcast from the learner; gloo on cpu), ipc "
      "(one vllm server on the learner's GPU, on this host, with --weight-transfer-config "
      "'{\"backend\": \"ipc\"}': it copies the weights out of the learner's CUDA buffer); auto: "
      "in_memory for an embedded server with policy.model, else disk (\"\", as older configs "
      "write it, reads as auto)."));
  f.push_back(text_field(
      "policy.weight_sync_delta", LEAP_FIELD(policy.weight_sync_delta), check_weight_sync_delta,
      "With weight_sync disk or nccl and the torch learner: the dtype the servers hold their "
      "weights in (bfloat16, float16, float32, float64). Each step then also makes a delta from "
      "the previous step's weights in that dtype (the changed elements, a checksum per tensor): "
      "a folder beside the step's (disk) or tensors broadcast to the project's server (nccl), "
      "which the sync sends first; a server not on the previous version, or whose weights fail "
      "a checksum, refuses it and takes the full weights (sync.delta_fallbacks). Empty: full "
      "weights only."));
  f.push_back(operational(text_list_field(
      "policy.endpoints", LEAP_FIELD(policy.endpoints), check_url, true,
      "Base URLs http(s)://host[:port] of the servers, no path (the client adds the "
      "route); load-balanced, a conversation pinned to one. The default is "
      "vLLM's default port.")));
  f.push_back(text_field(
      "policy.model", LEAP_FIELD(policy.model), nullptr,
      "Model name sent with requests (vLLM's --served-model-name); empty: the endpoint's "
      "only model. For embedded: a model folder served by LibTorch in-process, with its own "
      "tokenizer.json and chat template when it has them, else byte-level; empty: the "
      "scripted backend."));
  f.push_back(
      text_field("policy.tokenizer", LEAP_FIELD(policy.tokenizer), nullptr,
                 "Folder with tokenizer.json and tokenizer_config.json (chat template), rendered "
                 "locally for every flavour (an embedded model then serves it); empty: the "
                 "endpoint tokenises (vLLM's /tokenize), or an embedded server its model folder's "
                 "tokenizer.json when there is one, else the byte-level template."));
  f.push_back(operational(
      integer_field("policy.max_in_flight", LEAP_FIELD(policy.max_in_flight), at_least(1),
                    "Most requests in flight per endpoint (back-pressure); >= 1.")));
  f.push_back(operational(
      real_field("policy.request_timeout_s", LEAP_FIELD(policy.request_timeout_s), above(0),
                 "Seconds a generation request may take before it is retried; > 0.")));
  f.push_back(operational(
      integer_field("policy.retries", LEAP_FIELD(policy.retries), at_least(0),
                    "Retries of a failed or timed-out request before the rollout fails.")));
  f.push_back(operational(
      bool_field("policy.stream", LEAP_FIELD(policy.stream),
                 "Ask for streamed responses (SSE): a cut stream resumes from the tokens "
                 "already received instead of generating them again.")));
  f.push_back(bool_field(
      "policy.inflight_updates", LEAP_FIELD(policy.inflight_updates),
      "With the torch learner and weight_sync disk or in_memory: a weight sync does not wait "
      "for the turns in flight; it pauses the servers in abort mode (SGLang's and the embedded "
      "server's /pause_generation, vLLM's /pause), loads the weights, resumes them, and the client "
      "resumes the aborted turns under the new weights. Each token keeps the version that "
      "sampled it (the turn's weight segments), for the learner's per-token importance weights "
      "and staleness cap. false: a sync waits until the server's turns are done."));
}

void add_policy_endpoint_checks(std::vector<cross_check>& checks) {
  checks.push_back({{"policy.endpoints", "policy.flavour"},
                    [](const experiment_config& c) -> std::optional<std::string> {
                      if (c.policy.flavour != server_flavour::embedded &&
                          c.policy.endpoints.empty()) {
                        return "must list at least one URL when policy.flavour is " +
                               to_string(c.policy.flavour);
                      }
                      return std::nullopt;
                    }});
}

void add_policy_checks(std::vector<cross_check>& checks) {
  checks.push_back(
      {{"policy.model", "learner.kind", "policy.flavour"},
       [](const experiment_config& c) -> std::optional<std::string> {
         if (c.learner.kind == learner_kind::torch &&
             c.policy.flavour == server_flavour::embedded && c.policy.model.empty()) {
           return std::optional<std::string>{
               "is required when learner.kind is torch and policy.flavour is embedded: the model "
               "folder the embedded server serves (normally learner.model_path)"};
         }
         return std::nullopt;
       }});
  checks.push_back(
      {{"policy.weight_sync", "policy.flavour", "policy.model", "learner.kind", "policy.endpoints"},
       [](const experiment_config& c) -> std::optional<std::string> {
         switch (c.policy.weight_sync) {
           case weight_sync_method::automatic:
           case weight_sync_method::disk:
           case weight_sync_method::ipc:  // its own rule below
             return std::nullopt;
           case weight_sync_method::in_memory:
             if (c.policy.flavour != server_flavour::embedded || c.policy.model.empty()) {
               return std::optional<std::string>{
                   "in_memory needs policy.flavour embedded with a policy.model (the server must "
                   "share the learner's process)"};
             }
             return std::nullopt;
           case weight_sync_method::nccl:
             // vLLM's weight-transfer routes; one broadcast group per run, with one server in it.
             if (c.policy.flavour != server_flavour::vllm) {
               return "nccl needs policy.flavour vllm (the weight-transfer routes of vllm serve "
                      "--weight-transfer-config and leap serve-policy), got " +
                      to_string(c.policy.flavour);
             }
             if (c.learner.kind != learner_kind::torch) {
               return std::optional<std::string>{
                   "nccl needs learner.kind torch (the learner broadcasts its weights)"};
             }
             if (c.policy.endpoints.size() != 1) {
               return "nccl drives exactly one server (one broadcast group per run), got " +
                      show(c.policy.endpoints.size()) + " endpoints";
             }
             return std::nullopt;
         }
         return std::nullopt;
       }});
  checks.push_back(
      {{"policy.inflight_updates", "policy.weight_sync", "policy.flavour", "policy.model",
        "learner.kind"},
       [](const experiment_config& c) -> std::optional<std::string> {
         if (!c.policy.inflight_updates) {
           return std::nullopt;
         }
         if (c.learner.kind != learner_kind::torch) {
           return std::optional<std::string>{
               "needs learner.kind torch (only its weights are synced to the servers)"};
         }
         // The disk plans pause in abort mode around the load (vLLM's /pause, SGLang's
         // /pause_generation, served by the project's servers too), which hands running requests
         // back aborted with their tokens; the transfer engines' plans drain the server instead.
         const weight_sync_method method = effective_weight_sync(c.policy);
         if (method != weight_sync_method::disk && method != weight_sync_method::in_memory) {
           return "needs policy.weight_sync disk or in_memory (the plans that load a folder and "
                  "can pause around it), got " +
                  to_string(method);
         }
         return std::nullopt;
       }});
  checks.push_back(
      {{"policy.weight_sync_delta", "policy.weight_sync", "policy.flavour", "policy.model",
        "learner.kind"},
       [](const experiment_config& c) -> std::optional<std::string> {
         if (c.policy.weight_sync_delta.empty()) {
           return std::nullopt;
         }
         if (c.learner.kind != learner_kind::torch) {
           return std::optional<std::string>{
               "needs learner.kind torch (the learner writes the deltas)"};
         }
         // Deltas are folders the servers load (disk) or changed tensors the learner broadcasts
         // (nccl); in_memory and ipc copy whole weights on one host, cheaper than comparing.
         const weight_sync_method method = effective_weight_sync(c.policy);
         if (method != weight_sync_method::disk && method != weight_sync_method::nccl) {
           return "applies to policy.weight_sync disk (delta folders a server loads) and nccl "
                  "(changed tensors broadcast), got " +
                  to_string(method) +
                  (c.policy.weight_sync == weight_sync_method::automatic
                       ? std::string(" (auto's choice for the embedded server)")
                       : std::string());
         }
         return std::nullopt;
       }});
  checks.push_back(
      {{"policy.weight_sync", "policy.flavour", "learner.kind", "learner.device",
        "policy.endpoints"},
       [](const experiment_config& c) -> std::optional<std::string> {
         if (c.policy.weight_sync != weight_sync_method::ipc) {
           return std::nullopt;
         }
         // CUDA IPC: the learner exports a device buffer that one server process on the same host
         // opens, through vLLM's weight-transfer routes.
         if (c.policy.flavour != server_flavour::vllm) {
           return "ipc needs policy.flavour vllm (the weight-transfer routes of leap serve-policy "
                  "--weight-transfer-config), got " +
                  to_string(c.policy.flavour);
         }
         if (c.learner.kind != learner_kind::torch) {
           return std::optional<std::string>{
               "ipc needs learner.kind torch (the learner exports its weights)"};
         }
         if (!c.learner.device.starts_with("cuda")) {
           return "ipc needs learner.device cuda (the weights are shared in GPU memory), got " +
                  c.learner.device;
         }
         if (c.policy.endpoints.size() != 1) {
           return "ipc drives exactly one server (on the learner's host), got " +
                  show(c.policy.endpoints.size()) + " endpoints";
         }
         if (!is_loopback_url(c.policy.endpoints.front())) {
           return "ipc needs the server on this host: its endpoint must be a loopback address "
                  "(127.0.0.1, localhost, [::1]), got " +
                  c.policy.endpoints.front();
         }
         return std::nullopt;
       }});
  checks.push_back(
      {{"policy.tokenizer"}, [](const experiment_config& c) -> std::optional<std::string> {
         // The embedded scripted backend (no policy.model) reads prompts as the
         // byte-level ChatML it answers in; a model serves any vocabulary.
         if (!c.policy.tokenizer.empty() && c.policy.flavour == server_flavour::embedded &&
             c.policy.model.empty()) {
           return std::optional<std::string>{
               "needs policy.model with policy.flavour embedded: the embedded "
               "scripted backend speaks the byte-level tokenizer only"};
         }
         return std::nullopt;
       }});
  checks.push_back(
      {{"policy.tokenizer", "policy.flavour", "rollout.max_turns"},
       [](const experiment_config& c) -> std::optional<std::string> {
         // A debug turn appends the feedback to the conversation as a token delta, learned from
         // renderings without the generation prompt; SGLang's /tokenize always adds it, so only
         // a local template can render them.
         if (wire_of(c.policy.flavour) == wire_flavour::sglang && c.rollout.max_turns > 1 &&
             c.policy.tokenizer.empty()) {
           return "needed with policy.flavour sglang and rollout.max_turns > 1 (got " +
                  show(c.rollout.max_turns) +
                  "): debug turns render the feedback with the model's chat template here, "
                  "SGLang's /tokenize cannot; set policy.tokenizer to the served model's folder "
                  "(tokenizer.json and its chat template)";
         }
         return std::nullopt;
       }});
}

}  // namespace leap::config_detail
