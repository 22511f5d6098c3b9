#include "sandbox/kinds.hpp"

#include <array>

namespace leap::sandbox {
namespace {

using namespace std::string_view_literals;

// Block languages as chat models label them. A CUDA answer is often labelled as C++.
constexpr std::array cuda_languages{"cuda"sv, "cu"sv, "cuh"sv, "c++"sv, "cpp"sv,
                                    "cxx"sv,  "cc"sv, "c"sv,   "h"sv,   "hpp"sv};
constexpr std::array cpp_languages{"c++"sv, "cpp"sv, "cxx"sv, "cc"sv, "c"sv, "h"sv, "hpp"sv};
constexpr std::array python_languages{"python"sv, "py"sv, "python3"sv};

// The libraries a from-scratch kernel must not call.
constexpr std::array cuda_forbidden{"cublas"sv, "cudnn"sv, "cutlass"sv,
                                    "thrust"sv, "cub::"sv, "torch"sv};

constexpr kind_traits cuda_row{.kind = task_kind::cuda,
                               .judged_by = pipeline::native,
                               .compiler = toolchain::nvcc,
                               .entry = entry_linkage::cpp,
                               .gpu = true,
                               .needs = required_source::args_and_reference,
                               .extension = ".cu",
                               .fence = "cuda",
                               .fence_languages = cuda_languages,
                               .hash_comments = false,
                               .default_forbidden = cuda_forbidden};
constexpr kind_traits cpp_row{.kind = task_kind::cpp,
                              .judged_by = pipeline::native,
                              .compiler = toolchain::cxx,
                              .entry = entry_linkage::cpp,
                              .gpu = false,
                              .needs = required_source::args_and_reference,
                              .extension = ".cpp",
                              .fence = "cpp",
                              .fence_languages = cpp_languages,
                              .hash_comments = false,
                              .default_forbidden = {}};
constexpr kind_traits python_row{.kind = task_kind::python,
                                 .judged_by = pipeline::python_tests,
                                 .compiler = toolchain::python3,
                                 .entry = entry_linkage::cpp,
                                 .gpu = false,
                                 .needs = required_source::tests,
                                 .extension = ".py",
                                 .fence = "python",
                                 .fence_languages = python_languages,
                                 .hash_comments = true,
                                 .default_forbidden = {}};
constexpr kind_traits kernelbench_row{.kind = task_kind::kernelbench,
                                      .judged_by = pipeline::kernelbench,
                                      .compiler = toolchain::python3,
                                      .entry = entry_linkage::cpp,
                                      .gpu = true,
                                      .needs = required_source::problem,
                                      .extension = ".py",
                                      .fence = "python",
                                      .fence_languages = python_languages,
                                      .hash_comments = true,
                                      .default_forbidden = {}};
// The answer is text; any block (or none) holds the digits.
constexpr kind_traits digits_row{.kind = task_kind::digits,
                                 .judged_by = pipeline::text,
                                 .compiler = toolchain::none,
                                 .entry = entry_linkage::cpp,
                                 .gpu = false,
                                 .needs = required_source::target,
                                 .extension = ".txt",
                                 .fence = "digits",
                                 .fence_languages = {},
                                 .hash_comments = false,
                                 .default_forbidden = {}};

}  // namespace

const kind_traits& traits_of(task_kind kind) {
  switch (kind) {
    case task_kind::cuda:
      return cuda_row;
    case task_kind::cpp:
      return cpp_row;
    case task_kind::python:
      return python_row;
    case task_kind::kernelbench:
      return kernelbench_row;
    case task_kind::digits:
      return digits_row;
  }
  return cpp_row;
}

}  // namespace leap::sandbox
