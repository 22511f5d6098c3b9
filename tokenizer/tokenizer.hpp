// Hugging Face tokenizers from their `tokenizer.json` (and `tokenizer_config.json`): the byte-level
// BPE of Qwen2/2.5/3, Llama-3, DeepSeek-V3 and DeepSeek-Coder, and the SentencePiece-style BPE
// (Metaspace or Prepend/Replace normalizers, byte fallback `<0xNN>`, fused unknowns) of Llama-2,
// Mistral and Gemma.
//
// The pipeline is Hugging Face's (github.com/huggingface/tokenizers, tokenizers/src): added tokens
// are split out first, then each remaining piece is normalized, pre-tokenized into words, and each
// word is BPE-merged by merge rank; `add_special` runs the post-processor (TemplateProcessing adds
// e.g. `<s>`). A file that needs a component this module lacks is refused by `load` with a message
// naming it (`pre_tokenizer type 'Whitespace' is not supported`): it is never tokenised
// differently.
#pragma once

#include "common/result.hpp"

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace leap::tokenizer {

using token_id = std::int32_t;

// The named special tokens of `tokenizer_config.json` (`bos_token`, ...), where the file names
// them and the vocabulary has them.
struct named_tokens {
  std::optional<token_id> bos;
  std::optional<token_id> eos;
  std::optional<token_id> pad;
  std::optional<token_id> unk;
};

// Thread-safe after load: every member is const; the word cache inside locks itself.
class hf_tokenizer {
 public:
  // Reads DIR/tokenizer.json and, when present, DIR/tokenizer_config.json. Errors name the file and
  // what is wrong or unsupported in it.
  static result<hf_tokenizer> load(const std::filesystem::path& dir);
  // The same from the files' texts; config_json may be empty (no tokenizer_config.json).
  static result<hf_tokenizer> from_json(std::string_view tokenizer_json,
                                        std::string_view config_json = {});

  hf_tokenizer(hf_tokenizer&&) noexcept;
  hf_tokenizer& operator=(hf_tokenizer&&) noexcept;
  ~hf_tokenizer();

  // Text to ids, as Hugging Face's `Tokenizer.encode(text, add_special_tokens)`. Added tokens'
  // texts in `text` become their ids (as Hugging Face does by default); with parse_special false,
  // the texts of tokens marked special are encoded as ordinary text instead, so user content cannot
  // forge them. add_special runs the post-processor (a template's `<s>`/`<bos>`); Default: false.
  // Invalid UTF-8 is read as U+FFFD per bad byte (Hugging Face only accepts valid strings). Never
  // fails.
  [[nodiscard]] std::vector<token_id> encode(std::string_view text, bool add_special = false,
                                             bool parse_special = true) const;

  // Text made of pieces, some of them plain: a chat template's rendering where the messages'
  // contents are plain. As encode(concatenation) (add_special off), except that a special token's
  // text overlapping a plain segment is encoded as ordinary text: only the template's own markers
  // become special ids, and a message cannot forge `<|im_end|>`. Where no plain segment holds a
  // special token's text, the ids equal encode(concatenation). Never fails.
  struct text_segment {
    std::string_view text;
    bool plain = false;
  };
  [[nodiscard]] std::vector<token_id> encode_segments(std::span<const text_segment> segments) const;

  // Ids to text through the file's decoder. Unlike Hugging Face, which ends with a lossy UTF-8
  // conversion, the result is the raw bytes: decoding a prefix that cuts a character gives its
  // first bytes, so concatenated decodes equal the decode of the concatenation for byte-level
  // files. Ids outside the vocabulary render as nothing; skip_special drops special tokens.
  [[nodiscard]] std::string decode(std::span<const token_id> ids, bool skip_special = false) const;

  // `text` through the file's normalizer alone (Hugging Face's `normalizer.normalize_str`); the
  // text itself when the file has none. Invalid UTF-8 is read as encode reads it.
  [[nodiscard]] std::string normalize(std::string_view text) const;

  // The token's text as the vocabulary spells it (byte-level files spell bytes as `Ġ` etc.); ""
  // for an id outside the vocabulary.
  [[nodiscard]] std::string id_to_token(token_id id) const;
  // The id of a vocabulary or added token spelled as the file spells it.
  [[nodiscard]] std::optional<token_id> token_to_id(std::string_view token) const;
  // One more than the largest id (model vocabulary and added tokens).
  [[nodiscard]] int vocab_size() const;
  // Whether the id is an added token marked `special`.
  [[nodiscard]] bool is_special(token_id id) const;
  [[nodiscard]] const named_tokens& named() const;

  // Opaque: defined and built inside tokenizer.cpp only.
  struct impl;

 private:
  explicit hf_tokenizer(std::unique_ptr<impl> state);
  std::unique_ptr<impl> impl_;
};

// Why decode(encode(text)) is or is not `text`: the classes bench_tokenizer and the reference test
// report. `normalized`: the decode is the file's normalizer's output (e.g. NFC composed a
// decomposed character), which no decoder can undo; Hugging Face's own decode gives the same text
// (checked against @lenml/tokenizers on the tests' corpus). `other`: anything else, ours to
// explain.
enum class round_trip : std::uint8_t { exact, normalized, other };
[[nodiscard]] round_trip classify_round_trip(const hf_tokenizer& tok, std::string_view text,
                                             std::string_view decoded);

}  // namespace leap::tokenizer
