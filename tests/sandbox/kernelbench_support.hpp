// What the KernelBench tests share: whether a python has (or imports) a module, and the scale-add
// problem whose candidates they verify.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>
#include <unistd.h>

namespace leap::sandbox::testing {

// Whether `python` has `module` (torch on the CPU: Debian's python3-torch); `why` says what is
// missing when not. The module is found, not imported: the tests that ask are skipped only where
// it is missing, and an import of torch costs about 2 CPU-s and 3 s, once in every test process
// that asks (ctest runs each test as one). A module that is there but fails to import is not
// skipped over: the engine's own probe then fails the test, naming it.
inline bool python_has_module(const std::string& python, const std::string& module,
                              std::string* why) {
  if (std::system(("PATH=/usr/local/bin:/usr/bin:/bin " + python +
                   " -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec(\"" +
                   module + "\") is None)' >/dev/null 2>&1")
                      .c_str()) == 0) {
    return true;
  }
  *why = python + " has no module " + module +
         (module == "torch" ? " (install Debian's python3-torch)" : "");
  return false;
}

// Whether `python` imports `module`, for a module whose import may fail where it is installed (a
// Triton built for another torch); `why` says why not.
inline bool python_imports(const std::string& python, const std::string& module, std::string* why) {
  if (std::system(("PATH=/usr/local/bin:/usr/bin:/bin " + python + " -c 'import " + module +
                   "' >/dev/null 2>&1")
                      .c_str()) == 0) {
    return true;
  }
  *why = python + " cannot import " + module;
  return false;
}

inline bool under_tmp(const std::filesystem::path& p) {
  const std::string text = std::filesystem::weakly_canonical(p).string();
  for (const char* hidden : {"/tmp", "/var/tmp", "/run", "/dev"}) {
    const std::string dir = hidden;
    if (text == dir || text.starts_with(dir + "/")) {
      return true;
    }
  }
  return false;
}

// A fresh cache folder the sandbox can show its builds: beside the test binary, else under HOME;
// empty when both lie under a folder the sandbox replaces with its own.
inline std::filesystem::path cache_outside_tmp(const std::string& prefix) {
  const std::string name = prefix + std::to_string(::getpid());
  const std::filesystem::path beside =
      std::filesystem::read_symlink("/proc/self/exe").parent_path();
  if (!under_tmp(beside)) {
    return beside / name;
  }
  const char* home = std::getenv("HOME");
  if (home != nullptr && *home == '/' && !under_tmp(home)) {
    return std::filesystem::path(home) / ".cache" / name;
  }
  return {};
}

// A KernelBench problem: `a * scale + b` over two 32 x 16 inputs, the scale an init input.
inline constexpr const char* k_scale_add_problem =
    "import torch\n"
    "import torch.nn as nn\n"
    "\n"
    "class Model(nn.Module):\n"
    "    def __init__(self, scale):\n"
    "        super().__init__()\n"
    "        self.scale = scale\n"
    "\n"
    "    def forward(self, a, b):\n"
    "        return a * self.scale + b\n"
    "\n"
    "def get_inputs():\n"
    "    return [torch.randn(32, 16), torch.randn(32, 16)]\n"
    "\n"
    "def get_init_inputs():\n"
    "    return [3.0]\n";

// A ModelNew of the problem above made of PyTorch's ops, with a __global__ function in an unused
// string: a kernel of its own as far as the profiler's name filter reads the source, without an
// extension to build (the profiling pool's tests on the CPU). `tag` makes each candidate's text its
// own; `op` "-" makes it wrong. The whole answer, fenced.
inline std::string scale_add_ops_candidate(const std::string& tag, const std::string& op = "+") {
  return "Here is my solution:\n```python\nimport torch\n# " + tag +
         "\nunused = '__global__ void scale_add_kernel(float* x) {}'\n"
         "class ModelNew(torch.nn.Module):\n"
         "    def __init__(self, s):\n"
         "        super().__init__()\n"
         "        self.s = s\n"
         "    def forward(self, a, b):\n"
         "        return a * self.s " +
         op + " b\n```\n";
}

// Python that builds `ext`, a load_inline CUDA extension named `name` whose scale_add(a, b, s)
// launches the __global__ scale_add_kernel (for the GPU tests' candidates of the problem above).
inline std::string scale_add_cuda_extension(const std::string& name) {
  return R"PY(cuda_src = r'''
__global__ void scale_add_kernel(const float* a, const float* b, float* out, float s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] * s + b[i];
}
torch::Tensor scale_add(torch::Tensor a, torch::Tensor b, double s) {
  auto out = torch::empty_like(a);
  int n = a.numel();
  scale_add_kernel<<<(n + 255) / 256, 256>>>(a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), (float)s, n);
  return out;
}
'''
ext = load_inline(name=')PY" +
         name +
         R"PY(', cpp_sources='torch::Tensor scale_add(torch::Tensor a, torch::Tensor b, double s);',
                  cuda_sources=cuda_src, functions=['scale_add'])
)PY";
}

}  // namespace leap::sandbox::testing
