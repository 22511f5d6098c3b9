#include "sandbox/verdict.hpp"

namespace leap::sandbox {

const char* to_string(verdict_category c) {
  switch (c) {
    case verdict_category::pass: return "pass";
    case verdict_category::format: return "format";
    case verdict_category::compile: return "compile";
    case verdict_category::forbidden: return "forbidden";
    case verdict_category::runtime: return "runtime";
    case verdict_category::timeout: return "timeout";
    case verdict_category::wrong_answer: return "wrong_answer";
  }
  return "?";
}

}  // namespace leap::sandbox
