// Exports of stored trajectories for tools outside LEAP (pandas, an external trainer, jq).
//
// JSONL: one group per line, every field of the group record with its rollouts and turns, token ids
// and log-probs included; enums by name (orchestrator/trajectory.hpp's to_string). Text that is not
// valid UTF-8 (a model can emit half a multi-byte character) is written with U+FFFD in place of
// the invalid bytes, since JSON strings must be UTF-8; the binary store keeps the exact bytes.
//
// CSV (RFC 4180: comma-separated, CRLF-free "\n" line ends, fields with a comma, quote or line
// break quoted and quotes doubled): a header row, then one row per rollout turn with the group's
// and the rollout's columns repeated (csv_columns() lists them). The columns are the records'
// fields (orchestrator/trajectory.hpp), in their listed order, named by the field or its
// csv_name: token counts instead of token ids, no log-probs, weight segments as one cell
// ("first:version" pairs, space-separated), and the turn's index in its rollout (`turn`) and its
// profile's columns besides. A rollout without turns still gets one row, with the turn columns
// empty.
// A number a field marks as not measured (a turn's `speedup` and `compiled_speedup` when not
// timed, their noise when not stated) is null in JSON and an empty cell in CSV; a JSON line
// without it reads as not measured.
//
// A turn's profile (verifier.profile, issue 34), stored apart from the group (it is made after the
// verdict), is joined to its turn here: JSON's `profile` is null or {kernels: [{name, duration_ns,
// bottleneck, findings}], note, seconds, source}; CSV's profile_* cells are empty for a turn
// without one, else one space-separated entry per kernel (profile_findings: a kernel's analysers
// joined by '+', "-" for none) and profile_source ("ncu" or "events"). A profile whose group was
// never stored (dropped) is not exported.
//
// Numbers are written in the shortest form that reads back to the same double.
// All functions are thread-safe for distinct output streams.
#pragma once

#include "common/result.hpp"
#include "orchestrator/trajectory.hpp"
#include "orchestrator/turn_profile.hpp"
#include "storage/trajectory_store.hpp"

#include <cstddef>
#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace leap {

struct export_query {
  std::string run_id;  // empty: every run in the store. Default: ""
};

struct export_counts {
  std::size_t groups = 0;
  std::size_t rows = 0;  // lines written after the header (JSONL: one per group)
};

// Writes every selected group to `out`. Errors: the store's read errors, and a failed write to
// `out` ("write failed after N groups"); `out` then holds a partial export.
[[nodiscard]] result<export_counts> export_jsonl(const trajectory_store& store,
                                                 const export_query& query, std::ostream& out);
[[nodiscard]] result<export_counts> export_csv(const trajectory_store& store,
                                               const export_query& query, std::ostream& out);

// The profiles of one group's turns, by (rollout index, turn).
using group_profiles = std::map<std::pair<std::uint32_t, std::uint32_t>, turn_profile_record>;

// One group as one JSON line (no line break at the end), with its turns' profiles, and back
// (group_from_json reads no profile: the group record holds none). group_from_json errors name the
// missing or mistyped field ("rollouts[2].turns[0].verdict: unknown verdict 'ok'").
[[nodiscard]] std::string to_json_line(const group_record& group,
                                       const group_profiles& profiles = {});
[[nodiscard]] result<group_record> group_from_json(std::string_view line);

[[nodiscard]] const std::vector<std::string>& csv_columns();
// The header row, "\n"-terminated.
[[nodiscard]] std::string csv_header();
// Appends the group's rows ("\n"-terminated) to `out`; returns how many.
std::size_t append_csv_rows(const group_record& group, std::string& out,
                            const group_profiles& profiles = {});

}  // namespace leap
