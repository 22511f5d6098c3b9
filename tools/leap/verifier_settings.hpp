// The sandbox's settings from a config's verifier section: one mapping for `leap run` and
// `leap verifier-node`, so that a node verifies exactly as the orchestrator's own pool would.
#pragma once

#include "orchestrator/config.hpp"
#include "sandbox/verifier.hpp"

#include <string>

namespace leap::cli {

// `cache_dir`, when not empty, overrides the section's verifier.cache_dir; with both empty the
// sandbox's default cache folder is used. GPU run slots only when the task set has cuda tasks.
[[nodiscard]] sandbox::verifier_config sandbox_settings(const verifier_section& s, bool has_cuda,
                                                        const std::string& cache_dir);

}  // namespace leap::cli
