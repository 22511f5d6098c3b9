// Hugging Face tokenizers from their `tokenizer.json` (and `tokenizer_config.json`): the byte-level
// BPE of Qwen2/2.5/3, Llama-3, DeepSeek-V3 and DeepSeek-Coder, and the SentencePiece-style BPE
// (Metaspace or Prepend/Replace normalizers, byte fallback `<0xNN>`, fused unknowns) of Llama-2,
// Mistral and Gemma.
//
// The pipeline is Hugging Face's (github.com/huggingface/tokenizers, tokenizers/src): added tokens
// are split out first, then each remaining piece is normalized, pre-tokenized into words, and each
// word is BPE-merged by merge rank; `add_special` runs the post-processor (TemplateProcessing adds
// e.g. `<s>`). A file that needs a component this module lacks is refused by `load` with a message
// naming it (`pre_tokenizer type 'Whitespace' is not supported`): it is never tokenised differently.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.hpp"

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

  // Ids to text through the file's decoder. Unlike Hugging Face, which ends with a lossy UTF-8
  // conversion, the result is the raw bytes: decoding a prefix that cuts a character gives its
  // first bytes, so concatenated decodes equal the decode of the concatenation for byte-level
  // files. Ids outside the vocabulary render as nothing; skip_special drops special tokens.
  [[nodiscard]] std::string decode(std::span<const token_id> ids, bool skip_special = false) const;

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

}  // namespace leap::tokenizer
