// The control API's pure parts: the bearer-token check, the one error shape, the parsing of
// requests into typed values, and the JSON bodies of the answers. The routes themselves live in
// daemon.cpp and only call these.
//
//   POST /v1/experiments              config YAML in the body -> 201 record | 400 config errors
//                                     ?seeds=1-3 (or 1,2,3 or 1-3,7): one run per seed, each in
//                                     RUN_DIR/seed-N, as `leap run CONFIG --seeds`; the record
//                                     lists the seeds and their states
//   GET  /v1/experiments              {"experiments": [record, ...]}
//   GET  /v1/experiments/ID           record | 404
//   POST /v1/experiments/ID/cancel    record | 404 | 409 (already finished)
//   GET  /v1/experiments/ID/logs      text/plain, ?tail=N for the last N lines
//   GET  /v1/status                   JSON status of the daemon
//   GET  /metrics                     Prometheus text 0.0.4
// Every route needs "Authorization: Bearer TOKEN", else 401.
#pragma once

#include "common/result.hpp"
#include "tools/daemon/experiment.hpp"
#include "tools/daemon/settings.hpp"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace leap::daemon {

// Headers `leap submit` sends with the config: the name errors should give the file (its path as
// the user typed it), and the folder relative paths in the config are relative to.
inline constexpr const char* config_name_header = "X-Leap-Config-Name";
inline constexpr const char* cwd_header = "X-Leap-Cwd";

// The largest request body the API reads, in bytes: a config is a few KiB, so 4 MiB leaves room
// for any real one while bounding what a client can make the daemon hold. A longer body gets 413
// before it is read. Requests without the token are refused before their body is read, and
// their request line and headers together may not exceed max_request_head_bytes.
inline constexpr std::size_t max_request_body_bytes = std::size_t{4} << 20;
inline constexpr std::size_t max_request_head_bytes = std::size_t{64} << 10;
// Seconds a client has to send its request line and headers (else 408), counted from its
// connect; and its body, counted from its headers. A connection waits for its request line,
// headers and body (after the token check, made in the gate) without holding a worker
// (policy/http/http.hpp), so trickling clients cannot starve the API.
inline constexpr int max_request_head_seconds = 10;
inline constexpr int max_request_body_seconds = 30;
// Workers serving whole requests (a submission's config check runs on one); the connections open
// at once are daemon.yaml's max_connections (by default as many).
inline constexpr std::size_t api_threads = 8;

// How deep a submitted config may nest flow collections ([ ] and { }): real configs nest 2 or 3
// deep; a parser recursing through 100,000 levels would overflow the stack.
inline constexpr std::size_t max_config_nesting = 64;

// The one error shape of every route: {"error": {"message", "type", "code"}}. Types:
// "invalid_request_error" (400), "authentication_error" (401), "not_found_error" (404),
// "conflict_error" (409), "request_too_large_error" (413), "unavailable_error" (503),
// "server_error" (500). Never throws: bytes of the message that are not UTF-8 become U+FFFD.
[[nodiscard]] std::string error_body(int code, const std::string& message);

// The offset of the first byte of `text` that is not part of well-formed UTF-8 (overlong forms,
// surrogates and code points past U+10FFFF included); nullopt when all of it is UTF-8.
[[nodiscard]] std::optional<std::size_t> first_invalid_utf8(std::string_view text);

// The deepest nesting of YAML flow collections ([ ] and { }) in `text`, outside quoted strings
// and comments. A scan without recursion, so that it is safe on any input.
[[nodiscard]] std::size_t flow_nesting_depth(std::string_view text);

// Whether an Authorization header value carries `token` ("Bearer TOKEN", scheme case-insensitive),
// compared in constant time (crypto::constant_time_equal).
[[nodiscard]] bool authorized(const std::string& authorization, const std::string& token);

// ?tail=N: nullopt when absent (the whole log); an error for anything but a number >= 1.
[[nodiscard]] result<std::optional<std::size_t>> parse_tail(const std::string& value, bool present);

struct submit_request {
  std::string yaml;
  std::string seeds_spec;              // ?seeds= as given; empty: one run of the config
  std::vector<std::uint64_t> seeds;    // its seeds (tools/launch's parse_seeds), in order
  std::string source = "config.yaml";  // the config's name in errors and status
  std::string cwd;                     // absolute, or empty: the experiment's own folder
};

// Checks the raw request: a non-empty UTF-8 body whose flow collections nest at most
// max_config_nesting deep, UTF-8 header values, a cwd that is absolute, and the `seeds` query
// parameter when present (`leap run --seeds`'s syntax and limits; present but empty is an
// error). Errors are 400's messages; a bad seed list's starts with "seeds".
[[nodiscard]] result<submit_request> parse_submit(
    const std::string& body, const std::string& source_value, const std::string& cwd_value,
    const std::optional<std::string>& seeds_value = std::nullopt);

// Validates the config with the project's parse_config (errors "SOURCE:LINE: key: ..." for 400)
// and builds the queued record: id from `seq`, name, cwd (the request's, else
// `experiment_dir`), the run folder resolved against that cwd, and the request's seeds, queued.
[[nodiscard]] result<experiment_record> make_submission(const submit_request& request,
                                                        std::uint64_t seq,
                                                        const std::string& experiment_dir,
                                                        std::int64_t now_ms);

// An experiment that is queued or running and uses `run_dir`, which a new one must not share
// (two `leap run` on one store). nullopt when none.
[[nodiscard]] std::optional<std::string> run_dir_user(const std::vector<experiment_record>& records,
                                                      const std::string& run_dir);

// GET /v1/status.
[[nodiscard]] nlohmann::json status_json(const std::vector<experiment_record>& records,
                                         const daemon_settings& settings, bool stopping,
                                         std::int64_t now_ms, std::int64_t started_ms);

}  // namespace leap::daemon
