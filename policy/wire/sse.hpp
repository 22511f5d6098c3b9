// Server-sent events as OpenAI-compatible servers stream them: each event is `data: <json>\n\n`,
// and the stream ends with `data: [DONE]\n\n`. Framing lives here and nowhere else.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace leap::policy {

// One event carrying `data`. A payload with newlines becomes several `data:` lines, as the SSE
// specification requires (a reader joins them back with '\n'). Pure, thread-safe.
[[nodiscard]] std::string sse_event(std::string_view data);

// The end-of-stream marker of OpenAI's streaming APIs: "data: [DONE]\n\n".
[[nodiscard]] std::string sse_done();

// Incremental reader: feed bytes as they arrive, get the data payloads of the events completed so
// far. Handles "\n" and "\r\n" line ends, multi-line data, comments (":...") and fields other than
// data (ignored). An event is complete at its blank line; an unterminated last event is pending
// (is_partial) and never returned, which is how a truncated stream shows. Not thread-safe.
class sse_reader {
 public:
  [[nodiscard]] std::vector<std::string> feed(std::string_view bytes);
  // True when bytes of an event without its terminating blank line are buffered.
  [[nodiscard]] bool is_partial() const;

 private:
  std::string buffer_;
  std::string data_;
  bool has_data_ = false;
};

}  // namespace leap::policy
