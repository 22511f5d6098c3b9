// The LibTorch parts of a run (launch::torch_parts, tools/launch/launch.hpp) over the torch actors
// (actors/torch/): what a process installs so that its runs may train with learner.kind torch,
// serve policy.model from the embedded server and transfer weights (policy.weight_sync nccl, ipc).
#pragma once

namespace leap::launch {

// install_torch_parts() with this library's parts: every later run of the process that needs
// LibTorch gets them. Not thread-safe: call before the first run (e.g. first thing in main).
void install_libtorch_parts();

}  // namespace leap::launch
