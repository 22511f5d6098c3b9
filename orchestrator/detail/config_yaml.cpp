#include "orchestrator/detail/config_yaml.hpp"

#include <yaml-cpp/eventhandler.h>

#include <algorithm>
#include <cmath>
#include <sstream>

namespace leap::config_detail {

std::string format_problem(const std::string& source, const problem& p) {
  std::string out = source;
  if (p.line > 0) {
    out += (out.empty() ? "" : ":") + std::to_string(p.line);
  }
  if (!p.key.empty()) {
    out += (out.empty() ? "" : ": ") + p.key;
  }
  out += (out.empty() ? "" : ": ") + p.message;
  return out;
}

error join_problems(const std::string& source, std::vector<problem> problems) {
  // By line, so the message reads like the file; problems without a line (defaults in conflict)
  // last.
  std::stable_sort(problems.begin(), problems.end(), [](const problem& a, const problem& b) {
    const int la = a.line > 0 ? a.line : std::numeric_limits<int>::max();
    const int lb = b.line > 0 ? b.line : std::numeric_limits<int>::max();
    return la < lb;
  });
  return error{join(problems, "\n", [&](const problem& p) { return format_problem(source, p); })};
}

bool is_quoted(const YAML::Node& n) { return n.Tag() == "!" || n.Tag() == "tag:yaml.org,2002:str"; }

std::string describe(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Scalar:
      return is_quoted(n) ? "the quoted string '" + excerpt(n.Scalar()) + "'"
                          : "'" + excerpt(n.Scalar()) + "'";
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      break;
  }
  return "nothing (null)";
}

int line_of(const YAML::Node& n) { return n.Mark().is_null() ? 0 : n.Mark().line + 1; }

std::optional<std::string> number_text(const YAML::Node& n, const std::string& expected,
                                       std::string& text) {
  if (!n.IsScalar() || is_quoted(n)) {
    return expected + describe(n) + (n.IsScalar() ? " (remove the quotes)" : "");
  }
  text = n.Scalar();
  if (!text.empty() && text.front() == '+') {
    text.erase(0, 1);
  }
  return std::nullopt;
}

std::optional<std::string> read_real(const YAML::Node& n, double& out) {
  const std::string expected = "expected a number, got ";
  std::string text;
  if (auto why = number_text(n, expected, text)) {
    return why;
  }
  double value = 0.0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size() || text.empty()) {
    return expected + describe(n);
  }
  if (!std::isfinite(value)) {
    return "expected a finite number, got " + describe(n);
  }
  out = value;
  return std::nullopt;
}

std::optional<std::string> read_text(const YAML::Node& n, std::string& out) {
  if (!n.IsScalar()) {
    return "expected a string, got " + describe(n);
  }
  out = n.Scalar();
  return std::nullopt;
}

std::optional<std::string> read_bool(const YAML::Node& n, bool& out) {
  if (n.IsScalar() && (n.Scalar() == "true" || n.Scalar() == "false")) {
    out = n.Scalar() == "true";
    return std::nullopt;
  }
  return "expected true or false, got " + describe(n);
}

namespace {

// Records where each document starts. yaml-cpp 0.7's LoadAll never returns on a
// stray ',' outside brackets: it yields empty documents at the same place for ever. Counting with
// the event parser, which stops early, turns that into an error instead of a hang.
class document_counter : public YAML::EventHandler {
 public:
  std::vector<YAML::Mark> starts;

  void OnDocumentStart(const YAML::Mark& mark) override { starts.push_back(mark); }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& /*mark*/, YAML::anchor_t /*anchor*/) override {}
  void OnAlias(const YAML::Mark& /*mark*/, YAML::anchor_t /*anchor*/) override {}
  void OnScalar(const YAML::Mark& /*mark*/, const std::string& /*tag*/, YAML::anchor_t /*anchor*/,
                const std::string& /*value*/) override {}
  void OnSequenceStart(const YAML::Mark& /*mark*/, const std::string& /*tag*/,
                       YAML::anchor_t /*anchor*/, YAML::EmitterStyle::value /*style*/) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark& /*mark*/, const std::string& /*tag*/, YAML::anchor_t /*anchor*/,
                  YAML::EmitterStyle::value /*style*/) override {}
  void OnMapEnd() override {}
};

}  // namespace

std::vector<YAML::Mark> document_starts(const std::string& text) {
  std::istringstream stream(text);
  YAML::Parser parser(stream);
  document_counter counter;
  while (counter.starts.size() < 3 && parser.HandleNextDocument(counter)) {
  }
  return std::move(counter.starts);
}

}  // namespace leap::config_detail
