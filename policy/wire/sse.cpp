#include "policy/wire/wire.hpp"

namespace leap::policy {

std::string sse_event(std::string_view data) {
  std::string out;
  out.reserve(data.size() + 8);
  std::size_t start = 0;
  while (true) {
    const std::size_t end = data.find('\n', start);
    out += "data: ";
    out += data.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
    out += '\n';
    if (end == std::string_view::npos) {
      break;
    }
    start = end + 1;
  }
  out += '\n';
  return out;
}

std::string sse_done() { return "data: [DONE]\n\n"; }

std::vector<std::string> sse_reader::feed(std::string_view bytes) {
  std::vector<std::string> events;
  buffer_.append(bytes);
  std::size_t start = 0;
  while (true) {
    const std::size_t end = buffer_.find('\n', start);
    if (end == std::string::npos) {
      break;
    }
    std::string_view line(buffer_.data() + start, end - start);
    if (!line.empty() && line.back() == '\r') {
      line.remove_suffix(1);
    }
    start = end + 1;
    if (line.empty()) {
      if (has_data_) {
        events.push_back(std::move(data_));
      }
      data_.clear();
      has_data_ = false;
      continue;
    }
    if (line.front() == ':') {
      continue;  // a comment (keep-alive)
    }
    const std::size_t colon = line.find(':');
    const std::string_view field = line.substr(0, colon);
    if (field != "data") {
      continue;
    }
    std::string_view value =
        colon == std::string_view::npos ? std::string_view{} : line.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') {
      value.remove_prefix(1);
    }
    if (has_data_) {
      data_ += '\n';
    }
    data_.append(value);
    has_data_ = true;
  }
  buffer_.erase(0, start);
  return events;
}

bool sse_reader::is_partial() const { return has_data_ || !buffer_.empty(); }

}  // namespace leap::policy
