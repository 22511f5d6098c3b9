// One interface per wire dialect: everything the client does differently for vLLM's and SGLang's
// HTTP APIs (the generation route, the request body, the response and stream readers, the /tokenize
// body) sits behind wire_dialect, one implementation per wire_flavour (dialect_vllm.cpp,
// dialect_sglang.cpp), chosen by dialect_of(). client_protocol.hpp's functions and the client go
// through it; nothing else in policy/ branches on a flavour. What differs per server flavour beyond
// its dialect is read off common/enums/server_flavour.hpp (reload_routes_of picks disk_sync_plan's
// preset, declared in client.hpp), so policy/ never switches on a server flavour.
//
// A new dialect: its value in common/enums/wire_flavour.hpp, a dialect_NAME.cpp implementing
// wire_dialect, and its cases in dialect_of() and disk_sync_plan() (dialect.cpp). A new server
// flavour: its value and its cases in common/enums/server_flavour.hpp, nothing here.
// Every switch on either enum has no `default:`, so -Wswitch names each place a new value must
// reach. All functions are pure and thread-safe; the dialects are stateless singletons.
#pragma once

#include "common/enums/server_flavour.hpp"
#include "common/enums/wire_flavour.hpp"
#include "policy/client/client.hpp"
#include "policy/client/detail/client_protocol.hpp"

#include <nlohmann/json_fwd.hpp>

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace leap::policy {

struct stream_state;  // dialect_parts.hpp

class wire_dialect {
 public:
  wire_dialect() = default;
  wire_dialect(const wire_dialect&) = delete;
  wire_dialect& operator=(const wire_dialect&) = delete;
  virtual ~wire_dialect() = default;

  [[nodiscard]] virtual wire_flavour flavour() const = 0;

  // The route generation requests go to unless client_config.generate_path overrides it.
  [[nodiscard]] virtual std::string_view generate_route() const = 0;

  // Appends build_generate_body's body (client_protocol.hpp) to `out`.
  virtual void write_generate_body(std::string& out, std::string_view model,
                                   std::span<const token_id> prompt,
                                   std::span<const token_id> continuation,
                                   const sampling_config& sampling, int max_tokens,
                                   std::string_view wire_id, bool stream) const = 0;

  // The single-pass reader (policy/wire/wire.hpp's json_cursor): the choices of a 2xx body in
  // exactly the expected shape, nullopt for anything else, which then goes to parse_body. The two
  // agree on every body this one accepts (tests/policy/client_protocol_test.cpp,
  // SinglePassReaderAgreesWithTheDomParser).
  [[nodiscard]] virtual std::optional<parsed_choices> parse_body_fast(
      std::string_view body, const std::optional<std::string>& header_version,
      std::span<const token_id> prompt) const = 0;

  // The reference reader of a 2xx body parsed as JSON: its choices, or the problem with a message
  // that names the field. `header_version`: the x-weight-version header, when sent; a version in
  // the body wins. `prompt` (when not empty) is checked against an echoed prompt.
  [[nodiscard]] virtual parsed_choices parse_body(const nlohmann::json& root,
                                                  const std::optional<std::string>& header_version,
                                                  std::span<const token_id> prompt) const = 0;

  // Folds one stream event (a JSON object that is not an error event) into `state`. False once the
  // stream went bad; state.fail() has then recorded why.
  virtual bool on_stream_event(stream_state& state, const nlohmann::json& event) const = 0;

  // build_tokenize_body's body for this dialect's /tokenize, or why it cannot be asked for.
  [[nodiscard]] virtual result<std::string> tokenize_body(std::string_view model,
                                                          const std::vector<chat_message>& messages,
                                                          bool add_generation_prompt) const = 0;
};

// The dialect of `flavour`. Never fails for a value of the enum.
[[nodiscard]] const wire_dialect& dialect_of(wire_flavour flavour);

}  // namespace leap::policy
