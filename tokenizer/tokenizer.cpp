// The pipeline follows Hugging Face tokenizers (github.com/huggingface/tokenizers, tokenizers/src:
// tokenizer/added_vocabulary.rs, normalizers/, pre_tokenizers/, models/bpe/word.rs, decoders/);
// every component parsed here behaves as its Rust namesake does on the files the tests load.
#include "tokenizer/tokenizer.hpp"

#include "common/utf8.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cstring>
#include <fstream>
#include <functional>
#include <mutex>
#include <pcre2.h>
#include <queue>
#include <sstream>
#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unordered_map>

namespace leap::tokenizer {
namespace {

using json = nlohmann::json;

// A member of an object by reference, or null when absent: json::value() would copy it (the whole
// vocabulary, for "model").
const json& member(const json& j, const char* key) {
  static const json null_value;
  if (!j.is_object()) {
    return null_value;
  }
  const auto it = j.find(key);
  return it == j.end() ? null_value : *it;
}

// The same for a member that must be an array when present; an empty array when absent.
const json& array_member(const json& j, const char* key) {
  static const json empty = json::array();
  const json& m = member(j, key);
  return m.is_null() ? empty : m;
}

// ---------------------------------------------------------------------------------------- UTF-8

// Length of the UTF-8 sequence at s[i] if it is valid (1..4), else 0.
std::size_t valid_utf8_at(std::string_view s, std::size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) {
    return 1;
  }
  std::size_t n = 0;
  char32_t cp = 0;
  if ((c & 0xE0) == 0xC0) {
    n = 2;
    cp = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    n = 3;
    cp = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    n = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (i + n > s.size()) {
    return 0;
  }
  for (std::size_t k = 1; k < n; ++k) {
    const auto d = static_cast<unsigned char>(s[i + k]);
    if ((d & 0xC0) != 0x80) {
      return 0;
    }
    cp = (cp << 6) | (d & 0x3F);
  }
  // Overlong forms, surrogates and code points past U+10FFFF are invalid.
  if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
      (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) {
    return 0;
  }
  return n;
}

// Length of the (valid) UTF-8 sequence starting with byte c.
std::size_t utf8_len(unsigned char c) {
  if (c < 0x80) {
    return 1;
  }
  if ((c & 0xE0) == 0xC0) {
    return 2;
  }
  if ((c & 0xF0) == 0xE0) {
    return 3;
  }
  return 4;
}

char32_t decode_at(std::string_view s, std::size_t i, std::size_t n) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (n == 1) {
    return c;
  }
  char32_t cp = c & (n == 2 ? 0x1F : n == 3 ? 0x0F : 0x07);
  for (std::size_t k = 1; k < n; ++k) {
    cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  }
  return cp;
}

bool is_valid_utf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const std::size_t n = valid_utf8_at(s, i);
    if (n == 0) {
      return false;
    }
    i += n;
  }
  return true;
}

std::string replace_invalid_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = valid_utf8_at(s, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  return out;
}

// Unicode White_Space, as Rust's char::is_whitespace (which lstrip/rstrip and Strip use).
bool is_whitespace(char32_t cp) {
  return u_hasBinaryProperty(static_cast<UChar32>(cp), UCHAR_WHITE_SPACE);
}

// GPT-2's bytes_to_unicode: the printable bytes stand for themselves, the others for U+0100
// onwards.
struct byte_level_alphabet {
  std::array<std::string, 256> byte_to_text;
  // Code point -> byte + 1 (0: not in the alphabet); the alphabet ends below U+0144.
  std::array<std::uint16_t, 0x144> char_to_byte{};

  byte_level_alphabet() {
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable =
          (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      const char32_t cp = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(next++);
      append_utf8(byte_to_text[b], cp);
      char_to_byte[cp] = static_cast<std::uint16_t>(b + 1);
    }
  }

  // The raw bytes a byte-level spelling stands for, or nothing if a character is outside the
  // alphabet.
  [[nodiscard]] std::optional<std::string> to_bytes(std::string_view spelled) const {
    std::string out;
    out.reserve(spelled.size());
    for (std::size_t i = 0; i < spelled.size();) {
      const std::size_t n = valid_utf8_at(spelled, i);
      if (n == 0 || n > 2) {
        return std::nullopt;
      }
      const char32_t cp = decode_at(spelled, i, n);
      if (cp >= char_to_byte.size() || char_to_byte[cp] == 0) {
        return std::nullopt;
      }
      out += static_cast<char>(char_to_byte[cp] - 1);
      i += n;
    }
    return out;
  }

  [[nodiscard]] std::string to_text(std::string_view bytes) const {
    std::string out;
    for (const char c : bytes) {
      out += byte_to_text[static_cast<unsigned char>(c)];
    }
    return out;
  }
};

const byte_level_alphabet& alphabet() {
  static const byte_level_alphabet instance;
  return instance;
}

// ---------------------------------------------------------------------------------------- regex

// PCRE2 with UTF and UCP: \p{L}, \s, \w and case folding by Unicode properties, as Oniguruma (the
// engine Hugging Face tokenizers use) treats them.
class regex {
 public:
  static result<std::shared_ptr<regex>> compile(const std::string& pattern) {
    int code = 0;
    PCRE2_SIZE offset = 0;
    const std::string rewritten = white_space_classes(pattern);
    pcre2_code* compiled =
        pcre2_compile(reinterpret_cast<PCRE2_SPTR>(rewritten.data()), rewritten.size(),
                      PCRE2_UTF | PCRE2_UCP, &code, &offset, nullptr);
    if (compiled == nullptr) {
      std::array<PCRE2_UCHAR, 256> message{};
      pcre2_get_error_message(code, message.data(), message.size());
      return error{"regex '" + pattern + "' does not compile at offset " + std::to_string(offset) +
                   ": " + reinterpret_cast<const char*>(message.data())};
    }
    // JIT is an optimisation; the interpreter gives the same matches where JIT is unavailable.
    pcre2_jit_compile(compiled, PCRE2_JIT_COMPLETE);
    return std::shared_ptr<regex>(new regex(compiled));
  }

  regex(const regex&) = delete;
  regex& operator=(const regex&) = delete;
  ~regex() { pcre2_code_free(code_); }

  // Calls on_match(begin, end) for each non-empty match, left to right. text is valid UTF-8.
  template <class F>
  void for_each_match(std::string_view text, F&& on_match) const {
    thread_local match_state state;
    std::size_t start = 0;
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    while (start < text.size()) {
      const int rc = pcre2_match(code_, subject, text.size(), start, PCRE2_NO_UTF_CHECK, state.data,
                                 state.context);
      if (rc < 0 && rc != PCRE2_ERROR_NOMATCH) {
        // Only resource limits fail here (the pattern compiled, the subject is valid UTF-8); the
        // rest of the text stays one piece rather than being dropped.
        on_match(start, text.size());
        return;
      }
      if (rc == PCRE2_ERROR_NOMATCH) {
        return;
      }
      const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.data);
      const std::size_t b = ovector[0];
      const std::size_t e = ovector[1];
      if (e > b) {
        on_match(b, e);
        start = e;
      } else {
        start =
            b + utf8_len(static_cast<unsigned char>(text[b < text.size() ? b : text.size() - 1]));
      }
    }
  }

 private:
  // \s and \S as the Unicode White_Space property, as Oniguruma (Hugging Face's engine) reads \s
  // with current Unicode data (spaces, line and paragraph separators, \t-\r, NEL). PCRE2
  // before 10.43 reads \s under UCP as Perl's space list, which still holds U+180E (no longer
  // White_Space since Unicode 6.3): "\u180E" would split differently. \p{White_Space} works both
  // inside and outside a character class. Escape pairs are copied whole, so "\\s" stays a
  // backslash and an s.
  static std::string white_space_classes(const std::string& pattern) {
    std::string out;
    out.reserve(pattern.size() + 32);
    for (std::size_t i = 0; i < pattern.size(); ++i) {
      if (pattern[i] != '\\' || i + 1 == pattern.size()) {
        out += pattern[i];
        continue;
      }
      const char next = pattern[++i];
      if (next == 's') {
        out += "\\p{White_Space}";
      } else if (next == 'S') {
        out += "\\P{White_Space}";
      } else {
        out += '\\';
        out += next;
      }
    }
    return out;
  }

  struct match_state {
    pcre2_match_data* data = pcre2_match_data_create(16, nullptr);
    pcre2_jit_stack* stack =
        pcre2_jit_stack_create(std::size_t{32} * 1024, std::size_t{4} * 1024 * 1024, nullptr);
    pcre2_match_context* context = make_context(stack);
    match_state() = default;
    match_state(const match_state&) = delete;
    match_state& operator=(const match_state&) = delete;
    ~match_state() {
      pcre2_match_context_free(context);
      pcre2_jit_stack_free(stack);
      pcre2_match_data_free(data);
    }
    static pcre2_match_context* make_context(pcre2_jit_stack* stack) {
      pcre2_match_context* c = pcre2_match_context_create(nullptr);
      pcre2_jit_stack_assign(c, nullptr, stack);
      return c;
    }
  };

  explicit regex(pcre2_code* code) : code_(code) {}
  pcre2_code* code_;
};

// A pattern as the files spell it: {"String": literal} or {"Regex": pattern}.
struct pattern {
  std::string literal;  // when re is null
  std::shared_ptr<regex> re;

  template <class F>
  void for_each_match(std::string_view text, F&& on_match) const {
    if (re) {
      re->for_each_match(text, on_match);
      return;
    }
    if (literal.empty()) {
      return;
    }
    for (std::size_t pos = text.find(literal); pos != std::string_view::npos;
         pos = text.find(literal, pos + literal.size())) {
      on_match(pos, pos + literal.size());
    }
  }
};

result<pattern> parse_pattern(const json& j) {
  if (j.is_object() && j.contains("String") && j["String"].is_string()) {
    return pattern{j["String"].get<std::string>(), nullptr};
  }
  if (j.is_object() && j.contains("Regex") && j["Regex"].is_string()) {
    auto re = regex::compile(j["Regex"].get<std::string>());
    if (!re) {
      return re.err();
    }
    return pattern{{}, std::move(re.value())};
  }
  return error{"'pattern' must be {\"String\": ...} or {\"Regex\": ...}"};
}

// ----------------------------------------------------------------------------------- normalizers

using normalize_step = std::function<void(std::string&)>;

result<std::vector<normalize_step>> parse_normalizer(const json& j) {
  std::vector<normalize_step> steps;
  if (j.is_null()) {
    return steps;
  }
  const std::string type = j.value("type", "");
  if (type == "Sequence") {
    for (const auto& sub : array_member(j, "normalizers")) {
      auto inner = parse_normalizer(sub);
      if (!inner) {
        return inner.err();
      }
      for (auto& s : inner.value()) {
        steps.push_back(std::move(s));
      }
    }
    return steps;
  }
  if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    UErrorCode status = U_ZERO_ERROR;
    const icu::Normalizer2* n = type == "NFC"    ? icu::Normalizer2::getNFCInstance(status)
                                : type == "NFD"  ? icu::Normalizer2::getNFDInstance(status)
                                : type == "NFKC" ? icu::Normalizer2::getNFKCInstance(status)
                                                 : icu::Normalizer2::getNFKDInstance(status);
    if (U_FAILURE(status)) {
      return error{std::string("ICU has no ") + type + " normalizer: " + u_errorName(status)};
    }
    steps.emplace_back([n](std::string& s) {
      // ASCII is in every normalization form.
      if (std::all_of(s.begin(), s.end(),
                      [](char c) { return static_cast<unsigned char>(c) < 0x80; })) {
        return;
      }
      UErrorCode st = U_ZERO_ERROR;
      if (n->isNormalizedUTF8(icu::StringPiece(s.data(), static_cast<int32_t>(s.size())), st) &&
          U_SUCCESS(st)) {
        return;
      }
      std::string out;
      icu::StringByteSink<std::string> sink(&out);
      st = U_ZERO_ERROR;
      n->normalizeUTF8(0, icu::StringPiece(s.data(), static_cast<int32_t>(s.size())), sink, nullptr,
                       st);
      if (U_SUCCESS(st)) {
        s = std::move(out);
      }
    });
    return steps;
  }
  if (type == "Prepend") {
    if (!j.contains("prepend") || !j["prepend"].is_string()) {
      return error{"normalizer Prepend needs 'prepend'"};
    }
    steps.emplace_back([p = j["prepend"].get<std::string>()](std::string& s) {
      if (!s.empty()) {
        s.insert(0, p);
      }
    });
    return steps;
  }
  if (type == "Replace") {
    if (!j.contains("content") || !j["content"].is_string()) {
      return error{"normalizer Replace needs 'content'"};
    }
    auto pat = parse_pattern(member(j, "pattern"));
    if (!pat) {
      return pat.err().wrap("normalizer Replace");
    }
    steps.emplace_back(
        [pat = std::move(pat.value()), content = j["content"].get<std::string>()](std::string& s) {
          std::string out;
          std::size_t last = 0;
          bool any = false;
          pat.for_each_match(s, [&](std::size_t b, std::size_t e) {
            any = true;
            out.append(s, last, b - last);
            out += content;
            last = e;
          });
          if (!any) {
            return;
          }
          out.append(s, last, std::string::npos);
          s = std::move(out);
        });
    return steps;
  }
  if (type == "Strip") {
    steps.emplace_back([left = j.value("strip_left", false),
                        right = j.value("strip_right", false)](std::string& s) {
      std::size_t b = 0;
      std::size_t e = s.size();
      if (left) {
        while (b < e) {
          const std::size_t n = utf8_len(static_cast<unsigned char>(s[b]));
          if (!is_whitespace(decode_at(s, b, n))) {
            break;
          }
          b += n;
        }
      }
      if (right) {
        while (e > b) {
          std::size_t p = e - 1;
          while (p > b && (static_cast<unsigned char>(s[p]) & 0xC0) == 0x80) {
            --p;
          }
          if (!is_whitespace(decode_at(s, p, e - p))) {
            break;
          }
          e = p;
        }
      }
      s = s.substr(b, e - b);
    });
    return steps;
  }
  return error{"normalizer type '" + type + "' is not supported"};
}

// -------------------------------------------------------------------------------- pre-tokenizers

// Pre-tokenizers stream: each step hands its pieces of a piece to the next step, the last to the
// model, without copying a piece that no step changes. at_start: the piece starts the text
// (Metaspace's "first" scheme).
// A non-owning callable reference: a std::function would allocate for every piece it wraps.
class piece_sink {
 public:
  template <class F>
  piece_sink(const F& f)  // NOLINT(google-explicit-constructor)
      : object_(&f), call_([](const void* o, std::string_view text, bool at_start) {
          (*static_cast<const F*>(o))(text, at_start);
        }) {}
  void operator()(std::string_view text, bool at_start) const { call_(object_, text, at_start); }

 private:
  const void* object_;
  void (*call_)(const void*, std::string_view, bool);
};
using pre_tokenize_step = std::function<void(std::string_view, bool at_start, const piece_sink&)>;

enum class split_behavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };

// Splits a piece on the pattern's matches, keeping the delimiters as the behaviour says (as
// tokenizers/src/tokenizer/normalizer.rs NormalizedString::split).
void split_piece(std::string_view text, bool at_start, const pattern& pat, split_behavior behavior,
                 const piece_sink& sink) {
  auto emit = [&](std::size_t b, std::size_t e) {
    if (e > b) {
      sink(text.substr(b, e - b), at_start && b == 0);
    }
  };
  if (behavior == split_behavior::isolated || behavior == split_behavior::removed) {
    std::size_t last = 0;
    pat.for_each_match(text, [&](std::size_t b, std::size_t e) {
      emit(last, b);
      if (behavior == split_behavior::isolated) {
        emit(b, e);
      }
      last = e;
    });
    emit(last, text.size());
    return;
  }
  // (begin, end, is_match) spans covering the piece, then merged as the behaviour says.
  std::vector<std::tuple<std::size_t, std::size_t, bool>> spans;
  std::size_t last = 0;
  pat.for_each_match(text, [&](std::size_t b, std::size_t e) {
    if (b > last) {
      spans.emplace_back(last, b, false);
    }
    spans.emplace_back(b, e, true);
    last = e;
  });
  if (last < text.size()) {
    spans.emplace_back(last, text.size(), false);
  }
  std::vector<std::pair<std::size_t, std::size_t>> kept;
  bool previous_was_match = false;
  for (auto& [b, e, m] : spans) {
    const bool join =
        !kept.empty() &&
        ((behavior == split_behavior::merged_with_previous && m && !previous_was_match) ||
         (behavior == split_behavior::merged_with_next && !m && previous_was_match) ||
         (behavior == split_behavior::contiguous && m && previous_was_match));
    if (join) {
      kept.back().second = e;
    } else {
      kept.emplace_back(b, e);
    }
    previous_was_match = m;
  }
  for (auto& [b, e] : kept) {
    emit(b, e);
  }
}

// The pre-tokenizer parse also says whether words are byte-level (ByteLevel present).
struct pre_tokenizer_parse {
  std::vector<pre_tokenize_step> steps;
  bool byte_level = false;
};

// GPT-2's pattern, which ByteLevel applies when use_regex is true (pre_tokenizers/byte_level.rs).
constexpr const char* gpt2_pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

status parse_pre_tokenizer(const json& j, pre_tokenizer_parse& out) {
  if (j.is_null()) {
    return ok_status();
  }
  const std::string type = j.value("type", "");
  if (type == "Sequence") {
    for (const auto& sub : array_member(j, "pretokenizers")) {
      if (auto s = parse_pre_tokenizer(sub, out); !s) {
        return s;
      }
    }
    return ok_status();
  }
  if (type == "Split") {
    if (j.value("invert", false)) {
      return error{"pre_tokenizer Split with invert true is not supported"};
    }
    auto pat = parse_pattern(member(j, "pattern"));
    if (!pat) {
      return pat.err().wrap("pre_tokenizer Split");
    }
    const std::string b = j.value("behavior", "");
    split_behavior behavior{};
    if (b == "Removed") {
      behavior = split_behavior::removed;
    } else if (b == "Isolated") {
      behavior = split_behavior::isolated;
    } else if (b == "MergedWithPrevious") {
      behavior = split_behavior::merged_with_previous;
    } else if (b == "MergedWithNext") {
      behavior = split_behavior::merged_with_next;
    } else if (b == "Contiguous") {
      behavior = split_behavior::contiguous;
    } else {
      return error{"pre_tokenizer Split behavior '" + b + "' is not supported"};
    }
    out.steps.emplace_back([pat = std::move(pat.value()), behavior](
                               std::string_view text, bool at_start, const piece_sink& sink) {
      split_piece(text, at_start, pat, behavior, sink);
    });
    return ok_status();
  }
  if (type == "ByteLevel") {
    out.byte_level = true;
    const bool prefix = j.value("add_prefix_space", false);
    const bool use_regex = j.value("use_regex", true);
    if (!prefix && !use_regex) {
      return ok_status();
    }
    std::shared_ptr<regex> re;
    if (use_regex) {
      auto compiled = regex::compile(gpt2_pattern);
      if (!compiled) {
        return compiled.err();
      }
      re = std::move(compiled.value());
    }
    out.steps.emplace_back([prefix, re, gpt2 = pattern{{}, re}](
                               std::string_view text, bool at_start, const piece_sink& sink) {
      std::string prefixed;
      if (prefix && (text.empty() || text[0] != ' ')) {
        prefixed = " " + std::string(text);
        text = prefixed;
      }
      if (re) {
        split_piece(text, at_start, gpt2, split_behavior::isolated, sink);
      } else {
        sink(text, at_start);
      }
    });
    return ok_status();
  }
  if (type == "Metaspace") {
    const std::string replacement = j.value("replacement", "\u2581");
    std::string scheme = j.value("prepend_scheme", "");
    // Files from before prepend_scheme spell "always" and "never" as add_prefix_space.
    if (scheme.empty()) {
      scheme = j.value("add_prefix_space", true) ? "always" : "never";
    }
    if (scheme != "always" && scheme != "first" && scheme != "never") {
      return error{"pre_tokenizer Metaspace prepend_scheme '" + scheme + "' is not supported"};
    }
    const bool split = j.value("split", true);
    out.steps.emplace_back([replacement, scheme, split, space = pattern{replacement, nullptr}](
                               std::string_view text, bool at_start, const piece_sink& sink) {
      std::string replaced;
      replaced.reserve(text.size() + replacement.size());
      for (char c : text) {
        if (c == ' ') {
          replaced += replacement;
        } else {
          replaced += c;
        }
      }
      const bool prepend = scheme == "always" || (scheme == "first" && at_start);
      if (prepend && replaced.rfind(replacement, 0) != 0) {
        replaced.insert(0, replacement);
      }
      if (split) {
        split_piece(replaced, at_start, space, split_behavior::merged_with_next, sink);
      } else {
        sink(replaced, at_start);
      }
    });
    return ok_status();
  }
  return error{"pre_tokenizer type '" + type + "' is not supported"};
}

// -------------------------------------------------------------------------------------- decoders

using decode_step = std::function<void(std::vector<std::string>&)>;

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  if (from.empty()) {
    return std::string(s);
  }
  std::string out;
  std::size_t last = 0;
  for (std::size_t pos = s.find(from); pos != std::string_view::npos; pos = s.find(from, last)) {
    out.append(s.substr(last, pos - last));
    out.append(to);
    last = pos + from.size();
  }
  out.append(s.substr(last));
  return out;
}

// "<0xNN>" -> the byte.
std::optional<unsigned char> byte_fallback_value(std::string_view t) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') {
    return std::nullopt;
  }
  unsigned v = 0;
  for (std::size_t i = 3; i < 5; ++i) {
    const char c = t[i];
    v <<= 4;
    if (c >= '0' && c <= '9') {
      v |= static_cast<unsigned>(c - '0');
    } else if (c >= 'A' && c <= 'F') {
      v |= static_cast<unsigned>(c - 'A' + 10);
    } else {
      return std::nullopt;
    }
  }
  return static_cast<unsigned char>(v);
}

result<std::vector<decode_step>> parse_decoder(const json& j) {
  std::vector<decode_step> steps;
  if (j.is_null()) {
    return steps;
  }
  const std::string type = j.value("type", "");
  if (type == "Sequence") {
    for (const auto& sub : array_member(j, "decoders")) {
      auto inner = parse_decoder(sub);
      if (!inner) {
        return inner.err();
      }
      for (auto& s : inner.value()) {
        steps.push_back(std::move(s));
      }
    }
    return steps;
  }
  if (type == "ByteLevel") {
    // A token whose every character is in the byte alphabet becomes those bytes; any other token
    // (an added token spelled with other characters) stays as it is (decoders/byte_level.rs).
    steps.emplace_back([](std::vector<std::string>& tokens) {
      std::string bytes;
      for (const auto& t : tokens) {
        auto raw = alphabet().to_bytes(t);
        bytes += raw ? *raw : t;
      }
      tokens.assign(1, bytes);
    });
    return steps;
  }
  if (type == "Replace") {
    const auto& p = member(j, "pattern");
    if (!p.is_object() || !p.contains("String")) {
      return error{"decoder Replace with a regex pattern is not supported"};
    }
    steps.emplace_back([from = p["String"].get<std::string>(),
                        to = j.value("content", "")](std::vector<std::string>& tokens) {
      for (auto& t : tokens) {
        t = replace_all(t, from, to);
      }
    });
    return steps;
  }
  if (type == "ByteFallback") {
    // Runs of <0xNN> become their bytes. Hugging Face replaces a run that is not valid UTF-8 by
    // U+FFFD per byte; raw bytes are kept here so that a decoded prefix is a prefix of the text.
    steps.emplace_back([](std::vector<std::string>& tokens) {
      std::vector<std::string> out;
      std::string run;
      for (auto& t : tokens) {
        if (auto b = byte_fallback_value(t)) {
          run += static_cast<char>(*b);
          continue;
        }
        if (!run.empty()) {
          out.push_back(std::move(run)), run.clear();
        }
        out.push_back(std::move(t));
      }
      if (!run.empty()) {
        out.push_back(std::move(run));
      }
      tokens = std::move(out);
    });
    return steps;
  }
  if (type == "Fuse") {
    steps.emplace_back([](std::vector<std::string>& tokens) {
      std::string all;
      for (auto& t : tokens) {
        all += t;
      }
      tokens.assign(1, all);
    });
    return steps;
  }
  if (type == "Strip") {
    const std::string content = j.value("content", " ");
    const int start = j.value("start", 0);
    const int stop = j.value("stop", 0);
    if (content.size() != 1) {
      return error{"decoder Strip with a non-ASCII content is not supported"};
    }
    steps.emplace_back([c = content[0], start, stop](std::vector<std::string>& tokens) {
      for (auto& t : tokens) {
        std::size_t b = 0;
        while (b < t.size() && static_cast<int>(b) < start && t[b] == c) {
          ++b;
        }
        std::size_t e = t.size();
        while (e > b && static_cast<int>(t.size() - e) < stop && t[e - 1] == c) {
          --e;
        }
        t = t.substr(b, e - b);
      }
    });
    return steps;
  }
  if (type == "Metaspace") {
    const std::string replacement = j.value("replacement", "\u2581");
    std::string scheme = j.value("prepend_scheme", "");
    if (scheme.empty()) {
      scheme = j.value("add_prefix_space", true) ? "always" : "never";
    }
    steps.emplace_back([replacement, strip = scheme != "never"](std::vector<std::string>& tokens) {
      for (std::size_t i = 0; i < tokens.size(); ++i) {
        tokens[i] = replace_all(tokens[i], replacement, " ");
        if (i == 0 && strip && !tokens[i].empty() && tokens[i][0] == ' ') {
          tokens[i].erase(0, 1);
        }
      }
    });
    return steps;
  }
  return error{"decoder type '" + type + "' is not supported"};
}

// ---------------------------------------------------------------------------------- added tokens

struct added_token {
  std::string content;
  token_id id = 0;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
  bool special = false;
};

// Leftmost-longest matching of a set of added tokens, as the Aho-Corasick automaton of
// added_vocabulary.rs (MatchKind::LeftmostLongest) finds them.
class added_matcher {
 public:
  void add(const added_token* token) {
    if (token->content.empty()) {
      return;
    }
    int node = 0;
    for (const char c : token->content) {
      const auto byte = static_cast<unsigned char>(c);
      auto& children = nodes_[node].children;
      auto it =
          std::lower_bound(children.begin(), children.end(), byte,
                           [](const auto& child, unsigned char v) { return child.first < v; });
      if (it == children.end() || it->first != byte) {
        const int fresh = static_cast<int>(nodes_.size());
        it = children.insert(it, {byte, fresh});
        nodes_.emplace_back();
      }
      node = it->second;
    }
    nodes_[node].token = token;
    first_byte_[static_cast<unsigned char>(token->content[0])] = true;
    any_ = true;
  }

  [[nodiscard]] bool empty() const { return !any_; }

  // Calls on_piece(text, nullptr) for text between tokens and on_piece("", token) for each token
  // found, left to right, honouring single_word, lstrip and rstrip.
  template <class F>
  void split(std::string_view text, bool parse_special, F&& on_piece) const {
    split(
        text, parse_special, [](std::size_t, std::size_t) { return true; }, on_piece);
  }

  // The same, where a special token matched at [begin, end) only counts when special_allowed(begin,
  // end) says so (encode_segments: not inside plain text).
  template <class Allow, class F>
  void split(std::string_view text, bool parse_special, Allow&& special_allowed,
             F&& on_piece) const {
    std::size_t emitted = 0;  // text before this was handed out
    std::size_t i = 0;
    while (i < text.size()) {
      if (!first_byte_[static_cast<unsigned char>(text[i])]) {
        ++i;
        continue;
      }
      const added_token* best = nullptr;
      std::size_t best_end = 0;
      int node = 0;
      for (std::size_t k = i; k < text.size(); ++k) {
        const auto byte = static_cast<unsigned char>(text[k]);
        const auto& children = nodes_[node].children;
        auto it =
            std::lower_bound(children.begin(), children.end(), byte,
                             [](const auto& child, unsigned char v) { return child.first < v; });
        if (it == children.end() || it->first != byte) {
          break;
        }
        node = it->second;
        const added_token* t = nodes_[node].token;
        if (t != nullptr && (parse_special || !t->special) && word_bounded(text, i, k + 1, *t) &&
            (!t->special || special_allowed(i, k + 1))) {
          best = t;
          best_end = k + 1;
        }
      }
      if (best == nullptr) {
        ++i;
        continue;
      }
      std::size_t begin = i;
      std::size_t end = best_end;
      if (best->lstrip) {
        while (begin > emitted) {
          std::size_t p = begin - 1;
          while (p > emitted && (static_cast<unsigned char>(text[p]) & 0xC0) == 0x80) {
            --p;
          }
          if (!is_whitespace(decode_at(text, p, begin - p))) {
            break;
          }
          begin = p;
        }
      }
      if (best->rstrip) {
        while (end < text.size()) {
          const std::size_t n = utf8_len(static_cast<unsigned char>(text[end]));
          if (!is_whitespace(decode_at(text, end, n))) {
            break;
          }
          end += n;
        }
      }
      if (begin > emitted) {
        on_piece(text.substr(emitted, begin - emitted), nullptr);
      }
      on_piece(std::string_view(), best);
      emitted = end;
      i = end;
    }
    if (emitted < text.size()) {
      on_piece(text.substr(emitted), nullptr);
    }
  }

 private:
  // single_word: no word character touches the match on either side.
  static bool word_bounded(std::string_view text, std::size_t b, std::size_t e,
                           const added_token& t) {
    if (!t.single_word) {
      return true;
    }
    auto is_word = [](char32_t cp) { return cp == U'_' || u_isalnum(static_cast<UChar32>(cp)); };
    if (b > 0) {
      std::size_t p = b - 1;
      while (p > 0 && (static_cast<unsigned char>(text[p]) & 0xC0) == 0x80) {
        --p;
      }
      if (is_word(decode_at(text, p, b - p))) {
        return false;
      }
    }
    if (e < text.size() &&
        is_word(decode_at(text, e, utf8_len(static_cast<unsigned char>(text[e]))))) {
      return false;
    }
    return true;
  }

  struct node {
    std::vector<std::pair<unsigned char, int>> children;
    const added_token* token = nullptr;
  };
  std::vector<node> nodes_{1};
  std::array<bool, 256> first_byte_{};
  bool any_ = false;
};

// ------------------------------------------------------------------------------------ BPE model

struct string_hash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using string_map = std::unordered_map<std::string, token_id, string_hash, std::equal_to<>>;

struct merge_target {
  std::int32_t rank;
  token_id id;
};

// Open addressing over (left id, right id) pairs: one probe sequence in one array, where the
// node-based std::unordered_map costs a pointer chase per lookup on the hot path of BPE.
class merge_table {
 public:
  void reserve(std::size_t n) {
    std::size_t size = 16;
    while (size < 2 * n) {
      size *= 2;
    }
    slots_.assign(size, slot{empty, {0, 0}});
    mask_ = size - 1;
  }
  // Keeps the first target of a key, as the Rust library keeps a pair's first (best) rank.
  void emplace(std::uint64_t key, merge_target target) {
    if (2 * (count_ + 1) > slots_.size()) {
      grow();
    }
    for (std::size_t i = index(key);; i = (i + 1) & mask_) {
      if (slots_[i].key == key) {
        return;
      }
      if (slots_[i].key == empty) {
        slots_[i] = {key, target};
        ++count_;
        return;
      }
    }
  }
  [[nodiscard]] const merge_target* find(std::uint64_t key) const {
    if (slots_.empty()) {
      return nullptr;
    }
    for (std::size_t i = index(key);; i = (i + 1) & mask_) {
      if (slots_[i].key == key) {
        return &slots_[i].target;
      }
      if (slots_[i].key == empty) {
        return nullptr;
      }
    }
  }

 private:
  // Ids are non-negative int32s, so no pair's key has all bits set.
  static constexpr std::uint64_t empty = ~0ULL;
  struct slot {
    std::uint64_t key;
    merge_target target;
  };
  [[nodiscard]] std::size_t index(std::uint64_t key) const {
    return static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ULL) >> 20) & mask_;
  }
  void grow() {
    std::vector<slot> old = std::move(slots_);
    reserve(std::max<std::size_t>(16, old.size()));
    count_ = 0;
    for (const auto& s : old) {
      if (s.key != empty) {
        emplace(s.key, s.target);
      }
    }
  }
  std::vector<slot> slots_;
  std::size_t mask_ = 0;
  std::size_t count_ = 0;
};

struct bpe_model {
  bool byte_level = false;
  bool byte_fallback = false;
  bool fuse_unk = false;
  bool ignore_merges = false;
  std::optional<token_id> unk;
  string_map vocab;  // raw bytes (byte-level files) or the spelling (others) -> id
  merge_table merges;
  std::array<token_id, 256> byte_ids{};      // byte-level: the id of each single byte, -1 if none
  std::array<token_id, 256> fallback_ids{};  // byte fallback: the id of <0xNN>, -1 if none

  static std::uint64_t key(token_id a, token_id b) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) |
           static_cast<std::uint32_t>(b);
  }

  // One word's ids, appended to out (models/bpe/model.rs merge_word and word.rs merge_all).
  void encode_word(std::string_view word, std::vector<token_id>& out) const {
    struct symbol {
      token_id id;
      int prev;
      int next;
      bool alive;
    };
    thread_local std::vector<symbol> symbols;
    symbols.clear();
    auto push = [&](token_id id) {
      const int n = static_cast<int>(symbols.size());
      symbols.push_back({id, n - 1, -1, true});
      if (n > 0) {
        symbols[n - 1].next = n;
      }
    };
    if (byte_level) {
      for (const char c : word) {
        const token_id id = byte_ids[static_cast<unsigned char>(c)];
        if (id >= 0) {
          push(id);
        } else if (unk) {
          push(*unk);
        }
      }
    } else {
      bool last_unk = false;
      for (std::size_t i = 0; i < word.size();) {
        const std::size_t n = utf8_len(static_cast<unsigned char>(word[i]));
        const std::string_view ch = word.substr(i, n);
        i += n;
        if (auto it = vocab.find(ch); it != vocab.end()) {
          push(it->second);
          last_unk = false;
          continue;
        }
        if (byte_fallback && std::all_of(ch.begin(), ch.end(), [&](char c) {
              return fallback_ids[static_cast<unsigned char>(c)] >= 0;
            })) {
          for (const char c : ch) {
            push(fallback_ids[static_cast<unsigned char>(c)]);
          }
          last_unk = false;
          continue;
        }
        if (unk) {
          if (!(fuse_unk && last_unk)) {
            push(*unk);
          }
          last_unk = true;
        }
      }
    }

    struct candidate {
      std::int32_t rank;
      int pos;
      token_id id;
      bool operator>(const candidate& o) const {
        return rank != o.rank ? rank > o.rank : pos > o.pos;
      }
    };
    thread_local std::vector<candidate> heap;
    heap.clear();
    auto consider = [&](int pos) {
      const int next = symbols[pos].next;
      if (next < 0) {
        return;
      }
      if (const merge_target* m = merges.find(key(symbols[pos].id, symbols[next].id))) {
        heap.push_back({m->rank, pos, m->id});
        std::push_heap(heap.begin(), heap.end(), std::greater<>());
      }
    };
    for (int i = 0; i + 1 < static_cast<int>(symbols.size()); ++i) {
      consider(i);
    }
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end(), std::greater<>());
      const candidate top = heap.back();
      heap.pop_back();
      symbol& left = symbols[top.pos];
      if (!left.alive || left.next < 0) {
        continue;
      }
      symbol& right = symbols[left.next];
      // Stale: the pair at this position changed since the candidate was queued.
      const merge_target* m = merges.find(key(left.id, right.id));
      if (m == nullptr || m->id != top.id) {
        continue;
      }
      left.id = top.id;
      right.alive = false;
      left.next = right.next;
      if (right.next >= 0) {
        symbols[right.next].prev = top.pos;
      }
      if (left.prev >= 0) {
        consider(left.prev);
      }
      consider(top.pos);
    }
    for (int i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[i].next) {
      out.push_back(symbols[i].id);
    }
    // The scratch space is per thread and kept between words; a huge word (a SentencePiece file
    // has no pre-tokenizer: a whole message is one word) must not pin its size for good.
    constexpr std::size_t kept = 1 << 16;
    if (symbols.capacity() > kept) {
      std::vector<symbol>().swap(symbols);
    }
    if (heap.capacity() > kept) {
      std::vector<candidate>().swap(heap);
    }
  }
};

std::string read_file(const std::filesystem::path& path, std::error_code& ec) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    ec = std::make_error_code(std::errc::no_such_file_or_directory);
    return {};
  }
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

// ------------------------------------------------------------------------------------- tokenizer

struct hf_tokenizer::impl {
  std::vector<normalize_step> normalizer;
  pre_tokenizer_parse pre_tokenizer;
  std::vector<decode_step> decoder;
  bpe_model model;
  std::vector<std::unique_ptr<added_token>> added;
  std::unordered_map<token_id, const added_token*> added_by_id;
  string_map added_by_content;
  added_matcher raw_added;            // matched on the text as given (normalized: false)
  added_matcher normalized_added;     // matched after normalization (normalized: true)
  std::vector<std::string> spelling;  // id -> the vocabulary's spelling ("" for a hole)
  // The post-processor's single-sequence template: ids before and after the text.
  std::vector<token_id> prefix;
  std::vector<token_id> suffix;
  named_tokens names;

  // The word cache: most words repeat, and BPE of a word is a pure function of its bytes.
  static constexpr std::size_t cache_capacity = 1 << 17;
  static constexpr std::size_t cache_max_word = 256;
  mutable std::mutex cache_mutex;
  mutable std::unordered_map<std::string, std::vector<token_id>, string_hash, std::equal_to<>>
      cache;

  void encode_word(std::string_view word, std::vector<token_id>& out) const {
    if (model.ignore_merges) {
      if (auto it = model.vocab.find(word); it != model.vocab.end()) {
        out.push_back(it->second);
        return;
      }
    }
    if (word.size() <= cache_max_word) {
      std::lock_guard lock(cache_mutex);
      if (auto it = cache.find(word); it != cache.end()) {
        out.insert(out.end(), it->second.begin(), it->second.end());
        return;
      }
    }
    const std::size_t before = out.size();
    model.encode_word(word, out);
    if (word.size() <= cache_max_word) {
      std::lock_guard lock(cache_mutex);
      if (cache.size() < cache_capacity) {
        cache.emplace(
            std::string(word),
            std::vector<token_id>(out.begin() + static_cast<std::ptrdiff_t>(before), out.end()));
      }
    }
  }

  void pre_tokenize(std::size_t step, std::string_view text, bool at_start,
                    std::vector<token_id>& out) const {
    if (text.empty()) {
      return;
    }
    if (step == pre_tokenizer.steps.size()) {
      encode_word(text, out);
      return;
    }
    const auto next = [&](std::string_view sub, bool sub_at_start) {
      pre_tokenize(step + 1, sub, sub_at_start, out);
    };
    pre_tokenizer.steps[step](text, at_start, piece_sink(next));
  }

  void encode_normalized(std::string_view text, bool at_start, std::vector<token_id>& out) const {
    pre_tokenize(0, text, at_start, out);
  }

  void encode_piece(std::string_view text, bool at_start, bool parse_special,
                    std::vector<token_id>& out) const {
    if (normalizer.empty() && normalized_added.empty()) {
      encode_normalized(text, at_start, out);
      return;
    }
    std::string normalized(text);
    for (const auto& step : normalizer) {
      step(normalized);
    }
    if (normalized_added.empty()) {
      encode_normalized(normalized, at_start, out);
      return;
    }
    bool first = true;
    normalized_added.split(normalized, parse_special,
                           [&](std::string_view sub, const added_token* token) {
                             if (token != nullptr) {
                               out.push_back(token->id);
                             } else {
                               encode_normalized(sub, at_start && first, out);
                             }
                             first = false;
                           });
  }
};

hf_tokenizer::hf_tokenizer(std::unique_ptr<impl> state) : impl_(std::move(state)) {}
hf_tokenizer::hf_tokenizer(hf_tokenizer&&) noexcept = default;
hf_tokenizer& hf_tokenizer::operator=(hf_tokenizer&&) noexcept = default;
hf_tokenizer::~hf_tokenizer() = default;

namespace {

status parse_template(const json& j,
                      const std::unordered_map<std::string, std::vector<token_id>>& specials,
                      std::vector<token_id>& prefix, std::vector<token_id>& suffix) {
  bool seen_sequence = false;
  for (const auto& item : j) {
    if (item.contains("Sequence")) {
      if (seen_sequence) {
        return error{
            "post_processor TemplateProcessing with two sequences in 'single' is not supported"};
      }
      seen_sequence = true;
      continue;
    }
    if (!item.contains("SpecialToken")) {
      return error{"post_processor TemplateProcessing item must be Sequence or SpecialToken"};
    }
    const std::string name = item["SpecialToken"].value("id", "");
    const auto it = specials.find(name);
    if (it == specials.end()) {
      return error{"post_processor TemplateProcessing names '" + name +
                   "' without listing its ids"};
    }
    auto& target = seen_sequence ? suffix : prefix;
    target.insert(target.end(), it->second.begin(), it->second.end());
  }
  return ok_status();
}

// ByteLevel post-processing only moves offsets; TemplateProcessing adds ids around the text.
status parse_post_processor(const json& j, std::vector<token_id>& prefix,
                            std::vector<token_id>& suffix) {
  if (j.is_null()) {
    return ok_status();
  }
  const std::string type = j.value("type", "");
  if (type == "Sequence") {
    for (const auto& sub : array_member(j, "processors")) {
      if (auto s = parse_post_processor(sub, prefix, suffix); !s) {
        return s;
      }
    }
    return ok_status();
  }
  if (type == "ByteLevel") {
    return ok_status();
  }
  if (type == "TemplateProcessing") {
    std::unordered_map<std::string, std::vector<token_id>> specials;
    const json& listed = member(j, "special_tokens");
    if (!listed.is_null() && !listed.is_object()) {
      return error{"post_processor TemplateProcessing 'special_tokens' must be an object"};
    }
    for (const auto& [name, entry] : listed.items()) {
      specials[name] = entry.value("ids", std::vector<token_id>{});
    }
    return parse_template(array_member(j, "single"), specials, prefix, suffix);
  }
  return error{"post_processor type '" + type + "' is not supported"};
}

// A special token of tokenizer_config.json: a string or {"content": ...}.
std::optional<std::string> config_token(const json& config, const char* key) {
  if (!config.contains(key)) {
    return std::nullopt;
  }
  const auto& v = config[key];
  if (v.is_string()) {
    return v.get<std::string>();
  }
  if (v.is_object() && v.contains("content") && v["content"].is_string()) {
    return v["content"].get<std::string>();
  }
  return std::nullopt;
}

result<std::unique_ptr<hf_tokenizer::impl>> build(const json& root, const json& config);

}  // namespace

result<hf_tokenizer> hf_tokenizer::from_json(std::string_view tokenizer_json,
                                             std::string_view config_json) {
  json root;
  json config = json::object();
  try {
    root = json::parse(tokenizer_json);
  } catch (const json::exception& e) {
    return error{std::string("tokenizer.json is not JSON: ") + e.what()};
  }
  if (!config_json.empty()) {
    try {
      config = json::parse(config_json);
    } catch (const json::exception& e) {
      return error{std::string("tokenizer_config.json is not JSON: ") + e.what()};
    }
  }
  try {
    auto state = build(root, config);
    if (!state) {
      return state.err();
    }
    return hf_tokenizer(std::move(state.value()));
  } catch (const json::exception& e) {
    // A key of the wrong type (a number where a string belongs, ...).
    return error{std::string("tokenizer.json: ") + e.what()};
  }
}

result<hf_tokenizer> hf_tokenizer::load(const std::filesystem::path& dir) {
  std::error_code ec;
  const auto json_path = dir / "tokenizer.json";
  const std::string text = read_file(json_path, ec);
  if (ec) {
    return error{"cannot read " + json_path.string()};
  }
  const auto config_path = dir / "tokenizer_config.json";
  std::string config;
  if (std::filesystem::exists(config_path)) {
    config = read_file(config_path, ec);
    if (ec) {
      return error{"cannot read " + config_path.string()};
    }
  }
  auto t = from_json(text, config);
  if (!t) {
    return t.err().wrap(dir.string());
  }
  return t;
}

namespace {

result<std::unique_ptr<hf_tokenizer::impl>> build(const json& root, const json& config) {
  auto state = std::make_unique<hf_tokenizer::impl>();
  auto normalizer = parse_normalizer(member(root, "normalizer"));
  if (!normalizer) {
    return normalizer.err();
  }
  state->normalizer = std::move(normalizer.value());
  if (auto s = parse_pre_tokenizer(member(root, "pre_tokenizer"), state->pre_tokenizer); !s) {
    return s.err();
  }
  auto decoder = parse_decoder(member(root, "decoder"));
  if (!decoder) {
    return decoder.err();
  }
  state->decoder = std::move(decoder.value());
  if (auto s = parse_post_processor(member(root, "post_processor"), state->prefix, state->suffix);
      !s) {
    return s.err();
  }

  const json& m = member(root, "model");
  if (!m.is_object()) {
    return error{"'model' must be an object"};
  }
  const std::string type = m.value("type", "BPE");
  if (type != "BPE") {
    return error{"model type '" + type + "' is not supported"};
  }
  if (m.contains("dropout") && !m["dropout"].is_null() && m["dropout"].get<double>() != 0.0) {
    return error{"model BPE with dropout is not supported"};
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (m.contains(key) && m[key].is_string() && !m[key].get<std::string>().empty()) {
      return error{std::string("model BPE with ") + key + " is not supported"};
    }
  }
  bpe_model& model = state->model;
  model.byte_level = state->pre_tokenizer.byte_level;
  model.byte_fallback = m.value("byte_fallback", false);
  model.fuse_unk = m.value("fuse_unk", false);
  model.ignore_merges = m.value("ignore_merges", false);
  model.byte_ids.fill(-1);
  model.fallback_ids.fill(-1);

  const json& vocab = member(m, "vocab");
  if (!vocab.is_object()) {
    return error{"model.vocab must be an object"};
  }
  token_id max_id = -1;
  std::vector<std::pair<token_id, std::string>> spelled;
  spelled.reserve(vocab.size());
  model.vocab.reserve(vocab.size());
  for (const auto& [spelling, id_json] : vocab.items()) {
    const auto id = id_json.get<token_id>();
    if (id < 0) {
      return error{"model.vocab: negative id for '" + spelling + "'"};
    }
    max_id = std::max(max_id, id);
    if (model.byte_level) {
      // Tokens outside the byte alphabet cannot come out of BPE; they stay decodable by id.
      if (auto raw = alphabet().to_bytes(spelling)) {
        model.vocab.emplace(std::move(*raw), id);
      }
    } else {
      model.vocab.emplace(spelling, id);
    }
    spelled.emplace_back(id, spelling);
  }
  for (const auto& a : array_member(root, "added_tokens")) {
    max_id = std::max(max_id, a.value("id", 0));
  }
  state->spelling.resize(static_cast<std::size_t>(max_id) + 1);
  for (auto& [id, s] : spelled) {
    state->spelling[static_cast<std::size_t>(id)] = std::move(s);
  }

  for (int b = 0; b < 256; ++b) {
    const std::string byte(1, static_cast<char>(b));
    if (auto it = model.vocab.find(byte); model.byte_level && it != model.vocab.end()) {
      model.byte_ids[b] = it->second;
    }
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    if (auto it = model.vocab.find(std::string_view(name)); it != model.vocab.end()) {
      model.fallback_ids[b] = it->second;
    }
  }
  if (m.contains("unk_token") && m["unk_token"].is_string()) {
    const auto it = model.vocab.find(m["unk_token"].get<std::string>());
    if (it == model.vocab.end()) {
      return error{"model.unk_token '" + m["unk_token"].get<std::string>() +
                   "' is not in the vocabulary"};
    }
    model.unk = it->second;
  }

  const json& merges = array_member(m, "merges");
  model.merges.reserve(merges.size());
  std::int32_t rank = 0;
  for (const auto& merge : merges) {
    std::string a;
    std::string b;
    if (merge.is_string()) {
      // The older spelling "a b": tokens never contain a space in the files that use it.
      const auto s = merge.get<std::string>();
      const auto space = s.find(' ');
      if (space == std::string::npos) {
        return error{"model.merges: '" + s + "' is not two tokens"};
      }
      a = s.substr(0, space);
      b = s.substr(space + 1);
    } else if (merge.is_array() && merge.size() == 2) {
      a = merge[0].get<std::string>();
      b = merge[1].get<std::string>();
    } else {
      return error{"model.merges: entry " + std::to_string(rank) +
                   " is neither \"a b\" nor [a, b]"};
    }
    // The raw forms to look up; a spelling outside the byte alphabet has none (nullopt).
    std::optional<std::string> ra;
    std::optional<std::string> rb;
    if (model.byte_level) {
      ra = alphabet().to_bytes(a);
      rb = alphabet().to_bytes(b);
    }
    const std::string_view va =
        model.byte_level ? (ra ? std::string_view(*ra) : std::string_view()) : a;
    const std::string_view vb =
        model.byte_level ? (rb ? std::string_view(*rb) : std::string_view()) : b;
    auto id_of = [&](std::string_view raw) -> std::optional<token_id> {
      const auto it = model.vocab.find(raw);
      if (it == model.vocab.end()) {
        return std::nullopt;
      }
      return it->second;
    };
    const bool spelled_ok = !model.byte_level || (ra && rb);
    const auto ia = spelled_ok ? id_of(va) : std::nullopt;
    const auto ib = spelled_ok ? id_of(vb) : std::nullopt;
    std::string joined(va);
    joined += vb;
    const auto merged = spelled_ok ? id_of(joined) : std::nullopt;
    if (!ia || !ib || !merged) {
      std::string message = "model.merges: '";
      message.append(a).append(" ").append(b).append(
          "' names a token that is not in the vocabulary");
      return error{std::move(message)};
    }
    // A pair listed twice keeps its first (better) rank, as the Rust library's map does.
    model.merges.emplace(bpe_model::key(*ia, *ib), merge_target{rank, *merged});
    ++rank;
  }

  for (const auto& a : array_member(root, "added_tokens")) {
    auto token = std::make_unique<added_token>();
    token->content = a.value("content", "");
    token->id = a.value("id", 0);
    token->single_word = a.value("single_word", false);
    token->lstrip = a.value("lstrip", false);
    token->rstrip = a.value("rstrip", false);
    token->normalized = a.value("normalized", !a.value("special", false));
    token->special = a.value("special", false);
    state->added_by_id[token->id] = token.get();
    state->added_by_content[token->content] = token->id;
    (token->normalized ? state->normalized_added : state->raw_added).add(token.get());
    state->added.push_back(std::move(token));
  }

  auto id_of_name = [&](const char* key) -> std::optional<token_id> {
    const auto name = config_token(config, key);
    if (!name) {
      return std::nullopt;
    }
    if (auto it = state->added_by_content.find(*name); it != state->added_by_content.end()) {
      return it->second;
    }
    for (std::size_t id = 0; id < state->spelling.size(); ++id) {
      if (state->spelling[id] == *name) {
        return static_cast<token_id>(id);
      }
    }
    return std::nullopt;
  };
  state->names.bos = id_of_name("bos_token");
  state->names.eos = id_of_name("eos_token");
  state->names.pad = id_of_name("pad_token");
  state->names.unk = id_of_name("unk_token");
  return state;
}

}  // namespace

std::vector<token_id> hf_tokenizer::encode(std::string_view text, bool add_special,
                                           bool parse_special) const {
  std::string repaired;
  if (!is_valid_utf8(text)) {
    repaired = replace_invalid_utf8(text);
    text = repaired;
  }
  std::vector<token_id> out;
  out.reserve(text.size() / 3 + 8);
  if (add_special) {
    out.insert(out.end(), impl_->prefix.begin(), impl_->prefix.end());
  }
  if (impl_->raw_added.empty()) {
    impl_->encode_piece(text, true, parse_special, out);
  } else {
    bool first = true;
    impl_->raw_added.split(text, parse_special,
                           [&](std::string_view piece, const added_token* token) {
                             if (token != nullptr) {
                               out.push_back(token->id);
                             } else {
                               impl_->encode_piece(piece, first, parse_special, out);
                             }
                             first = false;
                           });
  }
  if (add_special) {
    out.insert(out.end(), impl_->suffix.begin(), impl_->suffix.end());
  }
  return out;
}

std::vector<token_id> hf_tokenizer::encode_segments(std::span<const text_segment> segments) const {
  std::string text;
  std::vector<std::pair<std::size_t, std::size_t>>
      plain;  // byte ranges of plain segments, in order
  for (const auto& s : segments) {
    const std::size_t begin = text.size();
    if (is_valid_utf8(s.text)) {
      text += s.text;
    } else {
      text += replace_invalid_utf8(s.text);
    }
    if (s.plain && text.size() > begin) {
      plain.emplace_back(begin, text.size());
    }
  }
  if (plain.empty()) {
    return encode(text);
  }
  // A special token's text counts only where it overlaps no plain range.
  auto allowed = [&](std::size_t b, std::size_t e) {
    auto it = std::lower_bound(plain.begin(), plain.end(), std::pair{b, std::size_t{0}});
    if (it != plain.end() && it->first < e) {
      return false;
    }
    return it == plain.begin() || std::prev(it)->second <= b;
  };
  std::vector<token_id> out;
  out.reserve(text.size() / 3 + 8);
  const std::string_view all(text);
  auto piece_plain = [&](std::string_view piece) {
    const auto b = static_cast<std::size_t>(piece.data() - all.data());
    return !allowed(b, b + piece.size());
  };
  auto encode_piece = [&](std::string_view piece, bool at_start) {
    // normalized added tokens are matched after normalization, where offsets have moved: a piece
    // that overlaps plain text gets none of its special tokens recognised.
    impl_->encode_piece(piece, at_start, !piece_plain(piece), out);
  };
  if (impl_->raw_added.empty()) {
    encode_piece(all, true);
  } else {
    bool first = true;
    impl_->raw_added.split(all, true, allowed,
                           [&](std::string_view piece, const added_token* token) {
                             if (token != nullptr) {
                               out.push_back(token->id);
                             } else {
                               encode_piece(piece, first);
                             }
                             first = false;
                           });
  }
  return out;
}

std::string hf_tokenizer::decode(std::span<const token_id> ids, bool skip_special) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const token_id id : ids) {
    if (auto it = impl_->added_by_id.find(id); it != impl_->added_by_id.end()) {
      if (!(skip_special && it->second->special)) {
        tokens.push_back(it->second->content);
      }
      continue;
    }
    if (id >= 0 && static_cast<std::size_t>(id) < impl_->spelling.size()) {
      tokens.push_back(impl_->spelling[static_cast<std::size_t>(id)]);
    }
  }
  if (impl_->decoder.empty()) {
    // Without a decoder Hugging Face joins the tokens with spaces.
    std::string out;
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      out += (i ? " " : "") + tokens[i];
    }
    return out;
  }
  for (const auto& step : impl_->decoder) {
    step(tokens);
  }
  std::string out;
  for (const auto& t : tokens) {
    out += t;
  }
  return out;
}

std::string hf_tokenizer::normalize(std::string_view text) const {
  std::string out = is_valid_utf8(text) ? std::string(text) : replace_invalid_utf8(text);
  for (const auto& step : impl_->normalizer) {
    step(out);
  }
  return out;
}

round_trip classify_round_trip(const hf_tokenizer& tok, std::string_view text,
                               std::string_view decoded) {
  if (decoded == text) {
    return round_trip::exact;
  }
  if (decoded == tok.normalize(text)) {
    return round_trip::normalized;
  }
  return round_trip::other;
}

std::string hf_tokenizer::id_to_token(token_id id) const {
  if (auto it = impl_->added_by_id.find(id); it != impl_->added_by_id.end()) {
    return it->second->content;
  }
  if (id < 0 || static_cast<std::size_t>(id) >= impl_->spelling.size()) {
    return {};
  }
  return impl_->spelling[static_cast<std::size_t>(id)];
}

std::optional<token_id> hf_tokenizer::token_to_id(std::string_view token) const {
  if (auto it = impl_->added_by_content.find(token); it != impl_->added_by_content.end()) {
    return it->second;
  }
  if (impl_->model.byte_level) {
    auto raw = alphabet().to_bytes(token);
    if (!raw) {
      return std::nullopt;
    }
    if (auto it = impl_->model.vocab.find(*raw); it != impl_->model.vocab.end()) {
      return it->second;
    }
    return std::nullopt;
  }
  if (auto it = impl_->model.vocab.find(token); it != impl_->model.vocab.end()) {
    return it->second;
  }
  return std::nullopt;
}

int hf_tokenizer::vocab_size() const { return static_cast<int>(impl_->spelling.size()); }

bool hf_tokenizer::is_special(token_id id) const {
  const auto it = impl_->added_by_id.find(id);
  return it != impl_->added_by_id.end() && it->second->special;
}

const named_tokens& hf_tokenizer::named() const { return impl_->names; }

}  // namespace leap::tokenizer
