// The tokenizer on small tokenizer.json files written here: added-token flags, post-processing,
// invalid input, concurrent use, and the refusal of every component it lacks.
#include "tokenizer/tokenizer.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace leap::tokenizer {
namespace {

using json = nlohmann::json;

// GPT-2's byte alphabet, as the files spell bytes.
std::string byte_char(int b) {
  int next = 256;
  for (int x = 0; x < 256; ++x) {
    const bool printable =
        (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255);
    const int cp = printable ? x : next++;
    if (x == b) {
      std::string s;
      if (cp < 0x80) {
        s += static_cast<char>(cp);
      } else {
        s += static_cast<char>(0xC0 | (cp >> 6));
        s += static_cast<char>(0x80 | (cp & 0x3F));
      }
      return s;
    }
  }
  return {};
}

// A byte-level file: id b for byte b, "ab" = 256 and " ab" = 257 by merges, and added tokens.
json byte_level_file() {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) {
    vocab[byte_char(b)] = b;
  }
  vocab["ab"] = 256;
  vocab[byte_char(' ') + "ab"] = 257;
  return json{
      {"version", "1.0"},
      {"added_tokens", json::array({
                           {{"id", 300},
                            {"content", "<mask>"},
                            {"lstrip", true},
                            {"rstrip", true},
                            {"single_word", false},
                            {"normalized", false},
                            {"special", true}},
                           {{"id", 301},
                            {"content", "cd"},
                            {"lstrip", false},
                            {"rstrip", false},
                            {"single_word", true},
                            {"normalized", false},
                            {"special", false}},
                           {{"id", 302},
                            {"content", "<|x|>"},
                            {"lstrip", false},
                            {"rstrip", false},
                            {"single_word", false},
                            {"normalized", false},
                            {"special", true}},
                           {{"id", 303},
                            {"content", "<s>"},
                            {"lstrip", false},
                            {"rstrip", false},
                            {"single_word", false},
                            {"normalized", false},
                            {"special", true}},
                       })},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                                {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
        {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {303}}, {"tokens", {"<s>"}}}}}}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model",
       {{"type", "BPE"},
        {"vocab", vocab},
        {"merges", json::array({json::array({"a", "b"}), json::array({byte_char(' '), "ab"})})}}},
  };
}

hf_tokenizer make(const json& file, const json& config = json()) {
  auto t = hf_tokenizer::from_json(file.dump(), config.is_null() ? "" : config.dump());
  if (!t) {
    throw std::runtime_error(t.err().message);
  }
  return std::move(t.value());
}

std::vector<token_id> bytes_of(std::string_view s) {
  std::vector<token_id> ids;
  for (const char c : s) {
    ids.push_back(static_cast<unsigned char>(c));
  }
  return ids;
}

TEST(Tokenizer, MergesByRank) {
  const auto t = make(byte_level_file());
  EXPECT_EQ(t.encode("ab ab"), (std::vector<token_id>{256, 257}));
  EXPECT_EQ(t.encode("abc"), (std::vector<token_id>{256, 'c'}));
  EXPECT_EQ(t.decode(t.encode("ab ab")), "ab ab");
}

TEST(Tokenizer, AddedTokenFlags) {
  const auto t = make(byte_level_file());
  // lstrip and rstrip swallow the whitespace around <mask>.
  EXPECT_EQ(t.encode("a  <mask>\n b"), (std::vector<token_id>{'a', 300, 'b'}));
  // single_word: "cd" is a token only where no word character touches it.
  EXPECT_EQ(t.encode("cd"), (std::vector<token_id>{301}));
  EXPECT_EQ(t.encode("x cd."), (std::vector<token_id>{'x', ' ', 301, '.'}));
  EXPECT_EQ(t.encode("xcd"), bytes_of("xcd"));
  EXPECT_EQ(t.encode("cdx"), bytes_of("cdx"));
}

TEST(Tokenizer, SpecialTextsAreOrdinaryTextUnlessParsed) {
  const auto t = make(byte_level_file());
  EXPECT_EQ(t.encode("<|x|>"), (std::vector<token_id>{302}));
  const auto plain = t.encode("<|x|>", false, /*parse_special=*/false);
  EXPECT_EQ(plain, bytes_of("<|x|>"));
  EXPECT_EQ(t.decode(plain), "<|x|>");
  // Non-special added tokens are still recognised.
  EXPECT_EQ(t.encode("cd", false, false), (std::vector<token_id>{301}));
}

TEST(Tokenizer, PostProcessorAndDecodeOptions) {
  const auto t =
      make(byte_level_file(), json{{"bos_token", "<s>"}, {"eos_token", {{"content", "<|x|>"}}}});
  EXPECT_EQ(t.encode("ab", /*add_special=*/true), (std::vector<token_id>{303, 256}));
  const std::vector<token_id> ids{303, 256, 302};
  EXPECT_EQ(t.decode(ids), "<s>ab<|x|>");
  EXPECT_EQ(t.decode(ids, /*skip_special=*/true), "ab");
  EXPECT_EQ(t.named().bos, 303);
  EXPECT_EQ(t.named().eos, 302);
  EXPECT_FALSE(t.named().pad.has_value());
  EXPECT_TRUE(t.is_special(302));
  EXPECT_FALSE(t.is_special(301));
  EXPECT_EQ(t.vocab_size(), 304);
  EXPECT_EQ(t.token_to_id(byte_char(' ') + "ab"), 257);
  EXPECT_EQ(t.id_to_token(257), byte_char(' ') + "ab");
  EXPECT_EQ(t.id_to_token(9999), "");
  // Ids outside the vocabulary render as nothing.
  const std::vector<token_id> odd{-1, 9999, 'a'};
  EXPECT_EQ(t.decode(odd), "a");
}

TEST(Tokenizer, InvalidUtf8IsReadAsReplacementCharacters) {
  const auto t = make(byte_level_file());
  EXPECT_EQ(t.encode("a\xFF"
                     "b"),
            (std::vector<token_id>{'a', 0xEF, 0xBF, 0xBD, 'b'}));
  // A cut multi-byte character too.
  EXPECT_EQ(t.decode(t.encode("\xE2\x82")), "\xEF\xBF\xBD\xEF\xBF\xBD");
}

// \s is Oniguruma's (Hugging Face's regex engine; its doc/RE: 0009-000D, 0085, Zl, Zp, Zs), which
// is Unicode's White_Space: NEL is whitespace, the BOM and U+180E are not. PCRE2 10.42 alone would
// match U+180E, and ECMAScript's \s (the JS port's) matches the BOM but not NEL.
TEST(Tokenizer, WhiteSpaceIsOnigurumas) {
  json file = byte_level_file();
  file["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers", json::array({{{"type", "Split"},
                                      {"pattern", {{"Regex", "\\s+"}}},
                                      {"behavior", "Removed"},
                                      {"invert", false}},
                                     {{"type", "ByteLevel"}, {"use_regex", false}}})}};
  const auto t = make(file);
  EXPECT_EQ(t.encode("a\u0085\u00a0\u2028\u3000\t b"), bytes_of("ab"));
  EXPECT_EQ(t.encode("a\ufeffb"), bytes_of("a\ufeffb"));
  EXPECT_EQ(t.encode("a\u180eb"), bytes_of("a\u180eb"));
  EXPECT_EQ(t.encode("a\u200bb"), bytes_of("a\u200bb"));
  // \S is the complement, inside a class too.
  file["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Regex", "[\\S]+"}};
  EXPECT_EQ(make(file).encode("a\u180e \u0085b"), bytes_of(" \u0085"));
}

// A SentencePiece-style file (Llama-2's shape): Prepend and Replace normalizers, no pre-tokenizer,
// unknown characters fused into one <unk> or spelled as <0xNN> bytes.
json sentencepiece_file(bool byte_fallback, bool fuse_unk) {
  return json{
      {"added_tokens", json::array()},
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers",
         json::array(
             {{{"type", "Prepend"}, {"prepend", "\u2581"}},
              {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}}})}}},
      {"pre_tokenizer", nullptr},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders",
         json::array({{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
                      {{"type", "ByteFallback"}},
                      {{"type", "Fuse"}},
                      {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}}},
      {"model",
       {{"type", "BPE"},
        {"unk_token", "<unk>"},
        {"fuse_unk", fuse_unk},
        {"byte_fallback", byte_fallback},
        {"vocab",
         {{"<unk>", 0},
          {"\u2581", 1},
          {"a", 2},
          {"b", 3},
          {"\u2581a", 4},
          {"<0xE2>", 5},
          {"<0x82>", 6},
          {"<0xAC>", 7}}},
        {"merges", json::array({"\u2581 a"})}}},
  };
}

TEST(Tokenizer, UnknownsFuseOrFallBackToBytes) {
  const std::string text = "a\u20ac\u20ac b";  // a, two euro signs, a space, b
  EXPECT_EQ(make(sentencepiece_file(false, true)).encode(text),
            (std::vector<token_id>{4, 0, 1, 3}));
  EXPECT_EQ(make(sentencepiece_file(false, false)).encode(text),
            (std::vector<token_id>{4, 0, 0, 1, 3}));
  const auto bytes = make(sentencepiece_file(true, true));
  const auto ids = bytes.encode(text);
  EXPECT_EQ(ids, (std::vector<token_id>{4, 5, 6, 7, 5, 6, 7, 1, 3}));
  EXPECT_EQ(bytes.decode(ids), text);
}

TEST(Tokenizer, ConcurrentEncodesAgree) {
  const auto t = make(byte_level_file());
  std::vector<std::string> texts;
  texts.reserve(2000);
  for (int i = 0; i < 2000; ++i) {
    texts.push_back("ab " + std::to_string(i) + " cd <mask> x" + std::string(i % 7, ' '));
  }
  std::vector<std::vector<token_id>> expected;
  expected.reserve(texts.size());
  for (const auto& s : texts) {
    expected.push_back(t.encode(s));
  }
  std::vector<int> wrong(4, 0);
  std::vector<std::thread> threads;
  threads.reserve(4);
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      for (std::size_t i = 0; i < texts.size(); ++i) {
        wrong[k] += t.encode(texts[i]) != expected[i];
      }
    });
  }
  for (auto& th : threads) {
    th.join();
  }
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(wrong[k], 0) << "thread " << k;
  }
}

TEST(Tokenizer, LoadNamesTheMissingFile) {
  const auto r = hf_tokenizer::load("/nonexistent-leap-tokenizer-dir");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.err().message.find("cannot read /nonexistent-leap-tokenizer-dir/tokenizer.json"),
            std::string::npos)
      << r.err().message;
}

TEST(Tokenizer, LoadReadsTheConfigBesideIt) {
  std::string name = (std::filesystem::temp_directory_path() / "leap-tokenizer-XXXXXX").string();
  ASSERT_NE(::mkdtemp(name.data()), nullptr);
  const std::filesystem::path dir = name;
  std::ofstream(dir / "tokenizer.json") << byte_level_file().dump();
  std::ofstream(dir / "tokenizer_config.json") << json{{"eos_token", "<|x|>"}}.dump();
  auto t = hf_tokenizer::load(dir);
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(t.ok()) << t.err().message;
  EXPECT_EQ(t->named().eos, 302);
}

// A file that needs a component this module lacks is refused, naming it.
struct refusal {
  const char* name;
  std::function<void(json&)> edit;
  const char* message;
};

// NOLINTNEXTLINE(readability-identifier-naming): gtest names the test suite after the fixture.
class Refused : public ::testing::TestWithParam<refusal> {};

TEST_P(Refused, NamesTheComponent) {
  json file = byte_level_file();
  GetParam().edit(file);
  auto t = hf_tokenizer::from_json(file.dump());
  ASSERT_FALSE(t.ok()) << GetParam().name << " was accepted";
  EXPECT_NE(t.err().message.find(GetParam().message), std::string::npos) << t.err().message;
}

INSTANTIATE_TEST_SUITE_P(
    Files, Refused,
    ::testing::Values(
        refusal{"whitespace",
                [](json& f) {
                  f["pre_tokenizer"] = {{"type", "Whitespace"}};
                },
                "pre_tokenizer type 'Whitespace' is not supported"},
        refusal{"nested",
                [](json& f) {
                  f["pre_tokenizer"] = {{"type", "Sequence"},
                                        {"pretokenizers", json::array({{{"type", "Digits"}}})}};
                },
                "pre_tokenizer type 'Digits' is not supported"},
        refusal{"invert",
                [](json& f) {
                  f["pre_tokenizer"] = {{"type", "Split"},
                                        {"pattern", {{"String", " "}}},
                                        {"behavior", "Isolated"},
                                        {"invert", true}};
                },
                "pre_tokenizer Split with invert true is not supported"},
        refusal{"behavior",
                [](json& f) {
                  f["pre_tokenizer"] = {
                      {"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "Sideways"}};
                },
                "pre_tokenizer Split behavior 'Sideways' is not supported"},
        refusal{"regex",
                [](json& f) {
                  f["pre_tokenizer"] = {{"type", "Split"},
                                        {"pattern", {{"Regex", "(unclosed"}}},
                                        {"behavior", "Isolated"}};
                },
                "regex '(unclosed' does not compile"},
        refusal{"lowercase",
                [](json& f) {
                  f["normalizer"] = {{"type", "Lowercase"}};
                },
                "normalizer type 'Lowercase' is not supported"},
        refusal{"precompiled",
                [](json& f) {
                  f["normalizer"] = {{"type", "Sequence"},
                                     {"normalizers", json::array({{{"type", "Precompiled"}}})}};
                },
                "normalizer type 'Precompiled' is not supported"},
        refusal{"unigram", [](json& f) { f["model"]["type"] = "Unigram"; },
                "model type 'Unigram' is not supported"},
        refusal{"wordpiece_prefix", [](json& f) { f["model"]["continuing_subword_prefix"] = "##"; },
                "model BPE with continuing_subword_prefix is not supported"},
        refusal{"dropout", [](json& f) { f["model"]["dropout"] = 0.1; },
                "model BPE with dropout is not supported"},
        refusal{"merge",
                [](json& f) {
                  f["model"]["merges"].push_back(json::array({"zz", "q"}));
                },
                "model.merges: 'zz q' names a token that is not in the vocabulary"},
        refusal{"wordpiece_decoder",
                [](json& f) {
                  f["decoder"] = {{"type", "WordPiece"}};
                },
                "decoder type 'WordPiece' is not supported"},
        refusal{"roberta",
                [](json& f) {
                  f["post_processor"] = {{"type", "RobertaProcessing"}};
                },
                "post_processor type 'RobertaProcessing' is not supported"},
        refusal{"unk", [](json& f) { f["model"]["unk_token"] = "<nope>"; },
                "model.unk_token '<nope>' is not in the vocabulary"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(Tokenizer, RefusesTextThatIsNotJson) {
  auto t = hf_tokenizer::from_json("{not json");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.err().message.find("tokenizer.json is not JSON"), std::string::npos)
      << t.err().message;
}

}  // namespace
}  // namespace leap::tokenizer
