// Every check `leap run` makes of a config before it starts, in one place: `leap config check`,
// `leap run` and the daemon's `leap submit` call the same function, so that a config one of them
// accepts never fails another's start for a reason of the config (a key, a file it names, a task
// kind, a remote node's secret). What only the run can find out (a server that does not answer, a
// store that is in use) is not a config reason and is not checked here.
#pragma once

#include "actors/remote_verifier.hpp"
#include "actors/tasks.hpp"
#include "common/result.hpp"
#include "orchestrator/config.hpp"
#include "policy/hf_renderer.hpp"

#include <filesystem>
#include <functional>
#include <optional>
#include <string>

namespace leap::cli {

struct run_preflight {
  std::string text;  // the config file as read: what the run stores
  experiment_config config;
  actors::run_tasks tasks;
  bool has_cuda = false;                             // a training or validation task of kind cuda
  std::optional<actors::dispatcher_settings> nodes;  // verifier.nodes set
  // The tokenizer and chat template prompts are rendered with here (tokenizer_folder's rule),
  // loaded; null when the endpoint renders (its /tokenize) or the byte-level template applies.
  std::shared_ptr<const policy::hf_chat_renderer> renderer;
  std::string renderer_dir;  // the folder it was loaded from
};

// The one rule for which folder's tokenizer a run uses: policy.tokenizer when set (any flavour);
// else, for the embedded server with a policy.model folder holding tokenizer.json, that folder
// (the embedded server then serves that vocabulary too); else "" (the embedded server's byte-level
// template, or the endpoint's /tokenize). `resolve` maps a configured path to the one to open.
[[nodiscard]] std::string tokenizer_folder(
    const experiment_config& config, const std::function<std::string(const std::string&)>& resolve);

// Reads `path` and checks it for `leap run`. Errors, one problem per line, each as
// "PATH:LINE: key: what is wrong" where the key is set in the file (parse_config's format): the
// file missing, unreadable or a folder; everything parse_config refuses; an empty config;
// data.train empty, missing, unreadable or without a task of data.task_kinds; an unknown task kind;
// the verifier nodes' secret and TLS files; policy.tokenizer's folder (its tokenizer and chat
// template load, and the template can continue a conversation with feedback). Relative paths are
// the process's (as `leap run` reads them).
[[nodiscard]] result<run_preflight> preflight_run(const std::string& path);

// The same for config text whose relative paths are relative to `base_dir` (the daemon checks a
// submission against the folder its `leap run` will start in). `source` names the text in errors.
[[nodiscard]] result<run_preflight> preflight_run_text(const std::string& text,
                                                       const std::string& source,
                                                       const std::filesystem::path& base_dir);

}  // namespace leap::cli
