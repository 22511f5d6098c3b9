#include "sandbox/extract.hpp"

#include "sandbox/forbidden.hpp"

#include <gtest/gtest.h>

namespace leap::sandbox {
namespace {

struct extract_case {
  std::string name;
  std::string answer;
  task_kind kind;
  std::string expected_code;   // when ok
  std::string expected_error;  // substring, when not ok
};

TEST(ExtractTest, Cases) {
  const std::vector<extract_case> cases{
      {"single_cuda_block", "text\n```cuda\nint a;\n```\nmore", task_kind::cuda, "int a;\n", ""},
      {"last_block_of_the_language_wins", "```cpp\nold();\n```\nthen\n```cpp\nnew_one();\n```\n",
       task_kind::cpp, "new_one();\n", ""},
      {"labelled_beats_unlabelled", "```cuda\nkernel();\n```\n```\nnvcc a.cu\n```\n",
       task_kind::cuda, "kernel();\n", ""},
      {"unlabelled_when_nothing_labelled", "```\nx = 1\n```\n", task_kind::python, "x = 1\n", ""},
      {"cpp_block_accepted_for_cuda", "```c++\n__global__ void k() {}\n```", task_kind::cuda,
       "__global__ void k() {}\n", ""},
      {"other_language_ignored", "```python\nprint(1)\n```\n```cpp\nint main;\n```\n",
       task_kind::cpp, "int main;\n", ""},
      {"info_string_with_attributes", "```python title=sol.py\ndef f(): pass\n```",
       task_kind::python, "def f(): pass\n", ""},
      {"crlf_line_ends", "```py\r\nx = 1\r\n```\r\n", task_kind::python, "x = 1\n", ""},
      {"indented_fence", "  ```cpp\nint a;\n  ```\n", task_kind::cpp, "int a;\n", ""},
      {"four_backticks", "````cpp\nint a;\n````\n", task_kind::cpp, "int a;\n", ""},
      {"no_block", "I think the answer is 42.", task_kind::cuda, "", "No fenced code block found"},
      {"only_other_languages", "```python\nprint(1)\n```\n```bash\nls\n```", task_kind::cuda, "",
       "only in 'python', 'bash'; this task needs a ```cuda block"},
      {"unclosed", "```cpp\nint a;\n", task_kind::cpp, "",
       "opened at line 1 of the answer is never closed"},
      {"empty", "```cpp\n\n```", task_kind::cpp, "", "is empty"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto r = extract_code(c.answer, c.kind);
    if (c.expected_error.empty()) {
      ASSERT_TRUE(r.ok()) << r.err().message;
      EXPECT_EQ(r->code, c.expected_code);
    } else {
      ASSERT_FALSE(r.ok()) << r->code;
      EXPECT_NE(r.err().message.find(c.expected_error), std::string::npos) << r.err().message;
    }
  }
}

struct forbidden_case {
  std::string name;
  std::string code;
  task_kind kind;
  std::vector<std::string> items;
  std::string expected_item;  // empty: clean
  int expected_line;
};

TEST(ForbiddenTest, Cases) {
  const auto cuda_defaults = default_forbidden(task_kind::cuda);
  const std::vector<forbidden_case> cases{
      {"clean_kernel", "__global__ void k(float* y) { y[0] = 1; }\n", task_kind::cuda,
       cuda_defaults, "", 0},
      {"cublas_call", "#include <cuda_runtime.h>\nvoid solve() {\n  cublasSgemm(h);\n}\n",
       task_kind::cuda, cuda_defaults, "cublas", 3},
      {"cublas_header", "#include <cublas_v2.h>\n", task_kind::cuda, cuda_defaults, "cublas", 1},
      {"windows_line_ends", "#include \"ref.cpp\"\r\nvoid solve() {\r\n  cublasSgemm(h);\r\n}\r\n",
       task_kind::cuda, cuda_defaults, "#include", 1},
      {"windows_line_ends_later_line", "void solve() {\r\n  cublasSgemm(h);\r\n}\r\n",
       task_kind::cuda, cuda_defaults, "cublas", 2},
      {"case_insensitive", "auto r = CUBLAS_STATUS_SUCCESS;\n", task_kind::cuda, cuda_defaults,
       "cublas", 1},
      {"in_a_comment_is_fine", "// do not use cublas here\n/* nor thrust */ int a;\n",
       task_kind::cuda, cuda_defaults, "", 0},
      {"cub_namespace", "cub::DeviceReduce::Sum(a);\n", task_kind::cuda, cuda_defaults, "cub::", 1},
      {"quoted_include", "#include \"reference.cpp\"\n", task_kind::cpp, {}, "#include", 1},
      {"absolute_include", "#include </etc/passwd>\n", task_kind::cpp, {}, "#include", 1},
      {"parent_include", "#  include <../x.h>\n", task_kind::cpp, {}, "#include", 1},
      {"system_include", "#include <vector>\n#include <cuda_fp16.h>\n", task_kind::cuda,
       cuda_defaults, "", 0},
      {"python_import",
       "import torch\n",
       task_kind::kernelbench,
       {"torch.matmul", "torch"},
       "torch",
       1},
      {"python_comment", "# torch would be easier\nx = 1\n", task_kind::python, {"torch"}, "", 0},
      {"python_hash_in_string_is_not_a_comment",
       "s = '#'; import torch\n",
       task_kind::python,
       {"torch"},
       "torch",
       1},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto hit = find_forbidden(c.code, c.kind, c.items);
    if (c.expected_item.empty()) {
      EXPECT_FALSE(hit.has_value()) << hit->reason;
    } else {
      ASSERT_TRUE(hit.has_value());
      EXPECT_EQ(hit->item, c.expected_item);
      EXPECT_EQ(hit->line, c.expected_line);
      EXPECT_NE(hit->reason.find("Line " + std::to_string(c.expected_line)), std::string::npos)
          << hit->reason;
    }
  }
}

}  // namespace
}  // namespace leap::sandbox
