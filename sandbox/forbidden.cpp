#include "sandbox/forbidden.hpp"

#include "common/lines.hpp"
#include "sandbox/kinds.hpp"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <cxxabi.h>
#include <initializer_list>
#include <memory>
#include <set>
#include <string_view>
#include <system_error>

namespace leap::sandbox {
namespace {

// What every refusal of a forbidden name ends with.
constexpr std::string_view k_forbidden_advice =
    ", which this task forbids. Write the computation yourself instead of calling a library.";

// The parts one after another: a refusal's text, built without a temporary per part.
std::string join(std::initializer_list<std::string_view> parts) {
  std::string out;
  for (const std::string_view part : parts) {
    out += part;
  }
  return out;
}

// Blanks comments (keeping newlines so line numbers stay right). String literals are kept: a
// forbidden name in a string is suspicious enough (dlopen("libcublas.so")).
std::string strip_comments(std::string_view code, bool python) {
  std::string out(code);
  enum { normal, line_comment, block_comment, string_lit, char_lit } state = normal;
  for (std::size_t i = 0; i < out.size(); ++i) {
    const char c = out[i];
    const char next = i + 1 < out.size() ? out[i + 1] : '\0';
    switch (state) {
      case normal:
        if ((python && c == '#') || (!python && c == '/' && next == '/')) {
          state = line_comment;
          out[i] = ' ';
        } else if (!python && c == '/' && next == '*') {
          state = block_comment;
          out[i] = ' ';
          out[i + 1] = ' ';
          ++i;
        } else if (c == '"') {
          state = string_lit;
        } else if (c == '\'') {
          state = char_lit;
        }
        break;
      case line_comment:
        if (c == '\n') {
          state = normal;
        } else {
          out[i] = ' ';
        }
        break;
      case block_comment:
        if (c == '*' && next == '/') {
          out[i] = ' ';
          out[i + 1] = ' ';
          ++i;
          state = normal;
        } else if (c != '\n') {
          out[i] = ' ';
        }
        break;
      case string_lit:
        if (c == '\\') {
          ++i;
        } else if (c == '"' || c == '\n') {
          state = normal;
        }
        break;
      case char_lit:
        if (c == '\\') {
          ++i;
        } else if (c == '\'' || c == '\n') {
          state = normal;
        }
        break;
    }
  }
  return out;
}

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

std::string trim(std::string_view s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string_view::npos) {
    return {};
  }
  const auto e = s.find_last_not_of(" \t\r");
  return std::string(s.substr(b, e - b + 1));
}

bool ident_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$';
}

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

std::string shorten(std::string s, std::size_t max = 160) {
  for (char& c : s) {
    if (static_cast<unsigned char>(c) < 0x20) {
      c = ' ';
    }
  }
  if (s.size() > max) {
    s = s.substr(0, max) + "...";
  }
  return s;
}

// Where `item` occurs in `text` as a name (see find_forbidden_in_dump), or npos.
std::size_t find_name(std::string_view text, std::string_view item, std::size_t from = 0) {
  const bool qualified = item.find("::") != std::string_view::npos;
  if (qualified) {
    for (auto pos = text.find(item, from); pos != std::string_view::npos;
         pos = text.find(item, pos + 1)) {
      const bool left = pos == 0 || !ident_char(text[pos - 1]);
      const std::size_t end = pos + item.size();
      const bool right = end >= text.size() || !ident_char(text[end]) || item.back() == ':';
      if (left && right) {
        return pos;
      }
    }
    return std::string_view::npos;
  }
  const std::string needle = lower(item);
  if (needle.empty()) {
    return std::string_view::npos;
  }
  for (std::size_t pos = from; pos + needle.size() <= text.size(); ++pos) {
    if (pos > 0 && ident_char(text[pos - 1])) {
      continue;
    }
    bool same = true;
    for (std::size_t k = 0; k < needle.size() && same; ++k) {
      same = std::tolower(static_cast<unsigned char>(text[pos + k])) == needle[k];
    }
    if (same) {
      return pos;
    }
  }
  return std::string_view::npos;
}

std::string demangle(const std::string& name) {
  if (!starts_with(name, "_Z")) {
    return name;
  }
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> out(
      abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status), &std::free);
  return status == 0 && out ? std::string(out.get()) : name;
}

// Whether a mangled name lives in namespace std, __gnu_cxx or __cxxabiv1 (vtables, typeinfo and
// guard variables of such entities included).
bool in_reserved_namespace(std::string_view m) {
  if (!starts_with(m, "_Z")) {
    return false;
  }
  m.remove_prefix(2);
  for (std::string_view special : {"TV", "TT", "TI", "TS", "GV", "GR", "TH", "TW"}) {
    if (starts_with(m, special)) {
      m.remove_prefix(2);
      break;
    }
  }
  if (starts_with(m, "N")) {
    m.remove_prefix(1);
    while (!m.empty() && (m.front() == 'r' || m.front() == 'V' || m.front() == 'K' ||
                          m.front() == 'R' || m.front() == 'O')) {
      m.remove_prefix(1);
    }
  }
  for (std::string_view ns :
       {"St", "Sa", "Sb", "Ss", "Si", "So", "Sd", "9__gnu_cxx", "10__cxxabiv1"}) {
    if (starts_with(m, ns)) {
      return true;
    }
  }
  return false;
}

bool generated_symbol(std::string_view name) {
  for (std::string_view p : {"DW.ref.", "__cuda", "__nv_", "__fatbin", "__device_stub"}) {
    if (starts_with(name, p)) {
      return true;
    }
  }
  return false;
}

// Objects of the C library and the C++ runtime that a program can name: a definition would replace
// the library's for the whole process (the harness's stdout included).
bool c_library_object(std::string_view name) {
  static const std::set<std::string, std::less<>> names{"stdin",
                                                        "stdout",
                                                        "stderr",
                                                        "environ",
                                                        "__environ",
                                                        "errno",
                                                        "optarg",
                                                        "optind",
                                                        "opterr",
                                                        "optopt",
                                                        "timezone",
                                                        "daylight",
                                                        "tzname",
                                                        "signgam",
                                                        "program_invocation_name",
                                                        "program_invocation_short_name",
                                                        "__progname",
                                                        "__progname_full",
                                                        "_IO_2_1_stdin_",
                                                        "_IO_2_1_stdout_",
                                                        "_IO_2_1_stderr_",
                                                        "__libc_single_threaded"};
  return names.count(name) > 0 || starts_with(name, "__malloc_") || starts_with(name, "_rtld_");
}

}  // namespace

std::optional<forbidden_hit> find_forbidden(std::string_view code, task_kind kind,
                                            const std::vector<std::string>& items) {
  const bool python = traits_of(kind).hash_comments;
  const std::string clean = strip_comments(code, python);
  // A line's trailing '\r' and a final empty line hold nothing to find.
  const auto clean_lines = split_lines(clean);
  const auto raw_lines = split_lines(code);
  for (std::size_t i = 0; i < clean_lines.size(); ++i) {
    const std::string line = lower(clean_lines[i]);
    const std::string excerpt = i < raw_lines.size() ? trim(raw_lines[i]) : std::string{};
    if (!python) {
      const std::string t = trim(line);
      if (t.rfind('#', 0) == 0) {
        std::string directive = trim(std::string_view(t).substr(1));
        if (directive.rfind("include", 0) == 0) {
          const std::string target = trim(std::string_view(directive).substr(7));
          const bool angle = !target.empty() && target.front() == '<';
          if (!angle || target.find("..") != std::string::npos ||
              (target.size() > 1 && target[1] == '/')) {
            return forbidden_hit{
                "#include", static_cast<int>(i + 1), excerpt,
                "Line " + std::to_string(i + 1) + ": `" + excerpt +
                    "` is not allowed: include only system headers with <...>; the whole "
                    "solution must be in this one file."};
          }
        }
      }
    }
    for (const auto& item : items) {
      if (item.empty()) {
        continue;
      }
      if (line.find(lower(item)) != std::string::npos) {
        return forbidden_hit{item, static_cast<int>(i + 1), excerpt,
                             join({"Line ", std::to_string(i + 1), ": `", excerpt, "` uses '", item,
                                   "'", k_forbidden_advice})};
      }
    }
  }
  return std::nullopt;
}

std::vector<std::string> parse_make_deps(std::string_view deps) {
  std::vector<std::string> tokens;
  std::string current;
  bool have = false;
  auto flush = [&] {
    if (have) {
      tokens.push_back(current);
    }
    current.clear();
    have = false;
  };
  for (std::size_t i = 0; i < deps.size(); ++i) {
    const char c = deps[i];
    if (c == '\\' && i + 1 < deps.size()) {
      const char next = deps[i + 1];
      if (next == '\n') {
        flush();
        ++i;
        continue;
      }
      if (next == ' ' || next == '#' || next == '\\' || next == '\t') {
        current += next;
        have = true;
        ++i;
        continue;
      }
    }
    if (c == '$' && i + 1 < deps.size() && deps[i + 1] == '$') {
      current += '$';
      have = true;
      ++i;
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      flush();
      continue;
    }
    current += c;
    have = true;
  }
  flush();
  std::vector<std::string> files;
  bool after_target = false;
  for (auto& t : tokens) {
    if (!after_target) {
      after_target = t.back() == ':';  // "a.o:" or a ":" of its own
      continue;
    }
    files.push_back(std::move(t));
  }
  return files;
}

std::vector<std::string> parse_line_markers(std::string_view text) {
  std::vector<std::string> files;
  std::set<std::string, std::less<>> seen;
  std::size_t pos = 0;
  while (pos < text.size()) {
    auto end = text.find('\n', pos);
    if (end == std::string_view::npos) {
      end = text.size();
    }
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line.empty() || line.front() != '#') {
      continue;
    }
    line.remove_prefix(1);
    if (starts_with(line, "line")) {
      line.remove_prefix(4);
    }
    const auto first = line.find_first_not_of(" \t");
    if (first == std::string_view::npos || !std::isdigit(static_cast<unsigned char>(line[first]))) {
      continue;
    }
    auto q = line.find('"', first);
    if (q == std::string_view::npos) {
      continue;
    }
    std::string name;
    bool closed = false;
    for (std::size_t i = q + 1; i < line.size(); ++i) {
      if (line[i] == '\\' && i + 1 < line.size()) {
        name += line[++i];
      } else if (line[i] == '"') {
        closed = true;
        break;
      } else {
        name += line[i];
      }
    }
    if (!closed || name == "<built-in>" || name == "<command-line>") {
      continue;
    }
    if (seen.insert(name).second) {
      files.push_back(std::move(name));
    }
  }
  return files;
}

std::vector<std::string> parse_nvcc_include_dirs(std::string_view dryrun) {
  std::vector<std::string> dirs;
  std::size_t pos = 0;
  while (pos < dryrun.size()) {
    auto end = dryrun.find('\n', pos);
    if (end == std::string_view::npos) {
      end = dryrun.size();
    }
    std::string_view line = dryrun.substr(pos, end - pos);
    pos = end + 1;
    const bool includes = starts_with(line, "#$ INCLUDES=");
    if (!includes && !starts_with(line, "#$ SYSTEM_INCLUDES=")) {
      continue;
    }
    line.remove_prefix(line.find('=') + 1);
    // The value is shell words, each in double quotes: "-I/a" or "-isystem" "/b".
    std::vector<std::string> words;
    for (std::size_t i = 0; i < line.size(); ++i) {
      if (line[i] != '"') {
        continue;
      }
      const auto close = line.find('"', i + 1);
      if (close == std::string_view::npos) {
        break;
      }
      words.emplace_back(line.substr(i + 1, close - i - 1));
      i = close;
    }
    for (std::size_t i = 0; i < words.size(); ++i) {
      if (starts_with(words[i], "-I") && words[i].size() > 2) {
        dirs.push_back(words[i].substr(2));
      } else if ((words[i] == "-isystem" || words[i] == "-I") && i + 1 < words.size()) {
        dirs.push_back(words[++i]);
      } else if (starts_with(words[i], "-isystem") && words[i].size() > 8) {
        dirs.push_back(words[i].substr(8));
      }
    }
  }
  return dirs;
}

std::vector<std::string> forbidden_libraries(const std::vector<std::string>& items) {
  std::vector<std::string> keys;
  for (const auto& item : items) {
    std::string key = item;
    if (key.size() > 2 && key.compare(key.size() - 2, 2, "::") == 0) {
      key.resize(key.size() - 2);
    }
    if (key.empty() || key.find("::") != std::string::npos) {
      continue;
    }
    if (!std::all_of(key.begin(), key.end(), [](char c) { return ident_char(c); })) {
      continue;
    }
    keys.push_back(lower(key));
  }
  return keys;
}

std::optional<forbidden_hit> check_included_files(const std::vector<std::string>& files,
                                                  const include_policy& policy) {
  namespace fs = std::filesystem;
  auto refuse = [&](const std::string& file, const std::string& why) {
    return forbidden_hit{"#include", 0, shorten(file),
                         policy.candidate_file + " includes '" + shorten(file) + "', " + why};
  };
  for (const auto& file : files) {
    if (file == policy.candidate_file || file.empty()) {
      continue;
    }
    const fs::path p(file);
    if (!p.is_absolute()) {
      return refuse(
          file,
          "which is not a system header: include only system headers with <...>; the whole "
          "solution must be in this one file.");
    }
    std::error_code ec;
    const fs::path real = fs::weakly_canonical(p, ec);
    const fs::path* home = nullptr;
    fs::path rel;
    if (!ec) {
      for (const auto& dir : policy.system_dirs) {
        auto r = real.lexically_relative(dir);
        if (!r.empty() && *r.begin() != ".." && r != ".") {
          home = &dir;
          rel = std::move(r);
          break;
        }
      }
    }
    if (home == nullptr) {
      return refuse(
          file,
          "which is not a system header: include only the compiler's system headers with <...>; "
          "the whole solution must be in this one file.");
    }
    for (const auto& part : rel) {
      const std::string component = lower(part.string());
      for (const auto& key : policy.refused_libraries) {
        if (starts_with(component, key) &&
            (component.size() == key.size() ||
             !std::islower(static_cast<unsigned char>(component[key.size()])))) {
          forbidden_hit hit =
              refuse(rel.string(), "a header of '" + key +
                                       "', which this task forbids. Write the computation yourself "
                                       "instead of calling a library.");
          hit.item = key;
          return hit;
        }
      }
    }
  }
  return std::nullopt;
}

std::optional<forbidden_hit> check_assembler_files(const std::vector<std::string>& files,
                                                   std::string_view candidate_stem) {
  namespace fs = std::filesystem;
  for (const auto& file : files) {
    const std::string base = fs::path(file).filename().string();
    if (starts_with(base, std::string(candidate_stem) + ".")) {
      continue;
    }
    if (starts_with(base, "cc") && base.size() == 10 && base.compare(8, 2, ".s") == 0) {
      continue;
    }
    return forbidden_hit{".incbin", 0, shorten(file),
                         "An assembler directive (.incbin or .include) in the solution reads '" +
                             shorten(file) + "': the solution may not read files at compile time."};
  }
  return std::nullopt;
}

std::optional<forbidden_hit> find_forbidden_in_dump(std::string_view dump,
                                                    const std::vector<std::string>& items) {
  for (const auto& item : items) {
    if (item.empty()) {
      continue;
    }
    const auto pos = find_name(dump, item);
    if (pos == std::string_view::npos) {
      continue;
    }
    std::size_t end = pos + item.size();
    int depth = 0;
    while (end < dump.size() && end - pos < 120) {
      const char c = dump[end];
      if (c == '<') {
        ++depth;
      }
      if (c == '>') {
        --depth;
      }
      if (depth <= 0 && (c == '(' || c == ' ' || c == ';' || c == ',' || c == '\n' || c == ')')) {
        break;
      }
      if (depth < 0) {
        break;
      }
      ++end;
    }
    const std::string resolved = shorten(std::string(dump.substr(pos, end - pos)));
    return forbidden_hit{item, 0, resolved,
                         join({"The solution uses '", item, "' (the compiler resolved it to ",
                               resolved, ")", k_forbidden_advice})};
  }
  return std::nullopt;
}

std::vector<object_symbol> parse_nm(std::string_view text) {
  std::vector<object_symbol> out;
  std::size_t pos = 0;
  while (pos < text.size()) {
    auto end = text.find('\n', pos);
    if (end == std::string_view::npos) {
      end = text.size();
    }
    const std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    const auto space = line.find(' ');
    if (space == std::string_view::npos || space == 0 || space + 1 >= line.size()) {
      continue;
    }
    object_symbol s;
    s.name = std::string(line.substr(0, space));
    s.type = line[space + 1];
    out.push_back(std::move(s));
  }
  return out;
}

namespace {

template <class T>
bool read_le(std::string_view bytes, std::uint64_t offset, T& out) {
  if (offset > bytes.size() || bytes.size() - offset < sizeof(T)) {
    return false;
  }
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i) {
    v |= static_cast<std::uint64_t>(static_cast<unsigned char>(bytes[offset + i])) << (8 * i);
  }
  out = static_cast<T>(v);
  return true;
}

}  // namespace

result<std::vector<object_symbol>> parse_elf_symbols(std::string_view object) {
  if (object.size() < 64 || object.substr(0, 4) != std::string_view("\x7f"
                                                                    "ELF",
                                                                    4)) {
    return error{"not an ELF object"};
  }
  if (object[4] != 2 || object[5] != 1) {
    return error{"not a 64-bit little-endian ELF object"};
  }
  std::uint64_t shoff = 0;
  std::uint16_t shentsize = 0, shnum16 = 0;
  if (!read_le(object, 0x28, shoff) || !read_le(object, 0x3A, shentsize) ||
      !read_le(object, 0x3C, shnum16)) {
    return error{"truncated ELF header"};
  }
  if (shentsize < 64) {
    return error{"bad section header size"};
  }
  std::uint64_t shnum = shnum16;
  if (shnum == 0 && !read_le(object, shoff + 0x20, shnum)) {
    return error{"truncated section headers"};
  }
  if (shnum > object.size() / shentsize) {
    return error{"too many section headers"};
  }
  std::vector<object_symbol> out;
  for (std::uint64_t i = 0; i < shnum; ++i) {
    const std::uint64_t sh = shoff + i * shentsize;
    std::uint32_t type = 0, link = 0;
    std::uint64_t offset = 0, size = 0, entsize = 0;
    if (!read_le(object, sh + 0x04, type) || !read_le(object, sh + 0x18, offset) ||
        !read_le(object, sh + 0x20, size) || !read_le(object, sh + 0x28, link) ||
        !read_le(object, sh + 0x38, entsize)) {
      return error{"truncated section header"};
    }
    if (type != 2) {
      continue;  // SHT_SYMTAB
    }
    if (entsize < 24 || offset > object.size() || size > object.size() - offset || link >= shnum) {
      return error{"bad symbol table"};
    }
    std::uint64_t str_offset = 0, str_size = 0;
    const std::uint64_t strh = shoff + static_cast<std::uint64_t>(link) * shentsize;
    if (!read_le(object, strh + 0x18, str_offset) || !read_le(object, strh + 0x20, str_size) ||
        str_offset > object.size() || str_size > object.size() - str_offset) {
      return error{"bad string table"};
    }
    const std::string_view strings = object.substr(str_offset, str_size);
    for (std::uint64_t at = offset; at + 24 <= offset + size; at += entsize) {
      std::uint32_t name = 0;
      std::uint8_t info = 0;
      std::uint16_t shndx = 0;
      read_le(object, at, name);
      read_le(object, at + 4, info);
      read_le(object, at + 6, shndx);
      const int bind = info >> 4;
      const int kind = info & 0xf;
      if (bind != 1 && bind != 2 && bind != 10) {
        continue;  // GLOBAL, WEAK, GNU_UNIQUE
      }
      if (name >= strings.size()) {
        return error{"bad symbol name"};
      }
      const auto end = strings.find('\0', name);
      object_symbol sym;
      sym.name = std::string(strings.substr(
          name, end == std::string_view::npos ? std::string_view::npos : end - name));
      const bool data = kind == 1 || kind == 5 || kind == 6;  // OBJECT, COMMON, TLS
      if (shndx == 0) {
        sym.type = bind == 2 ? (data ? 'v' : 'w') : 'U';
      } else if (bind == 2) {
        sym.type = data ? 'V' : 'W';
      } else if (bind == 10) {
        sym.type = 'u';
      } else if (shndx == 0xfff2) {
        sym.type = 'C';
      } else if (kind == 10) {
        sym.type = 'i';
      } else {
        sym.type = data ? 'D' : 'T';
      }
      out.push_back(std::move(sym));
    }
  }
  return out;
}

std::optional<forbidden_hit> check_object_symbols(const std::vector<object_symbol>& candidate,
                                                  const std::vector<object_symbol>& harness,
                                                  const std::vector<std::string>& forbidden_items,
                                                  std::string_view file) {
  std::set<std::string, std::less<>> harness_needs;
  std::set<std::string, std::less<>> harness_defines;
  for (const auto& s : harness) {
    if (!s.defined()) {
      harness_needs.insert(s.name);
    } else {
      harness_defines.insert(s.name);
    }
  }
  const std::string f(file);
  auto refuse = [&](const std::string& item, std::initializer_list<std::string_view> text) {
    return forbidden_hit{item, 0, item, join(text)};
  };
  for (const auto& s : candidate) {
    const std::string shown = shorten(demangle(s.name), 200);
    if (!s.defined()) {
      for (const auto& item : forbidden_items) {
        if (item.find("::") == std::string::npos || item.back() == ':') {
          std::string key = item;
          if (key.back() == ':') {
            key.resize(key.size() - 2);
          }
          if (!key.empty() && find_name(shown, key) != std::string::npos) {
            return refuse(item, {f, " calls ", shown, ", from '", item, "'", k_forbidden_advice});
          }
        }
      }
      if (!forbidden_items.empty() &&
          (s.name == "dlopen" || s.name == "dlmopen" || s.name == "dlsym" || s.name == "dlvsym")) {
        return refuse(s.name,
                      {f, " calls ", s.name,
                       ": loading libraries at run time is not allowed in this task (it forbids ",
                       forbidden_items.front(), " and others)."});
      }
      continue;
    }
    if (s.name == "main") {
      return refuse(
          s.name,
          {f, " defines main(): do not define main(); the harness provides it and calls solve()."});
    }
    if (s.name == "solve" || starts_with(shown, "solve(") || generated_symbol(s.name)) {
      continue;
    }
    const bool mangled = starts_with(s.name, "_Z");
    const bool function = s.type == 'T' || s.type == 'W' || s.type == 'i';
    const std::string why = ": candidates may not replace library functions or objects.";
    if (harness_needs.count(s.name) > 0 || (!s.weak() && harness_defines.count(s.name) > 0)) {
      return refuse(s.name, {f, " defines ", shown, ", which the harness uses", why});
    }
    // The judge times calls with its own clock in its own process, so a replaced clock fakes
    // nothing; but a candidate that defines one (weak or not) is trying to, and gets told so.
    if (mangled && starts_with(shown, "std::chrono::") &&
        shown.find("::now(") != std::string::npos) {
      return refuse(s.name, {f, " defines ", shown, ", a clock of the standard library", why});
    }
    if (!mangled && function) {
      return refuse(s.name,
                    {f, " defines ", shown, " with C linkage", why,
                     " Give your own functions C++ linkage (no extern \"C\", no asm labels)."});
    }
    if (!mangled && c_library_object(s.name)) {
      return refuse(s.name, {f, " defines ", shown, why});
    }
    // Weak definitions in std are what the library's headers emit (template instantiations, and
    // inline members such as GCC 13's std::thread::_M_thread_deps_never_run): refusing them refuses
    // std::thread. They cannot reach the harness: one the harness uses is refused above, and the
    // harness object comes first on the link line, so its own weak copies win.
    if (mangled && in_reserved_namespace(s.name) && !s.weak()) {
      return refuse(s.name,
                    {f, " defines ", shown, " in a namespace of the standard library", why});
    }
  }
  return std::nullopt;
}

}  // namespace leap::sandbox
