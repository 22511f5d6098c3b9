// The trajectory records' binary format: how storage/ writes orchestrator/trajectory.hpp's records
// into RocksDB values and reads them back. The store is its only production user; the format is
// the store's, the records' types are the orchestrator's.
#pragma once

#include "common/result.hpp"
#include "orchestrator/partial_rollouts.hpp"
#include "orchestrator/retry.hpp"
#include "orchestrator/trajectory.hpp"
#include "orchestrator/turn_profile.hpp"

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>

namespace leap {

// A record is [u8 format version][u8 record kind][fields], every field little-endian and fixed
// width: integers as their width, floats as IEEE-754 bits, bool as one byte, enums as one byte,
// strings and vectors as a u32 count then the elements, an optional as a u8 flag then the value.
// Token ids and log-probs are copied as arrays, 4 bytes each: encoding and decoding are memcpy's
// for the bulk of a group. Measured (g++ 12 -O2) on a paper-shaped group, 8 rollouts of 2 turns of
// 1k prompt and 2k output tokens from a 151k vocabulary with 6 KB of text each: 424 KB, encoded in
// 0.5 ms and decoded in 0.02 ms. nlohmann's MessagePack of the same group is 10% larger (token
// ids above 65535 take 5 bytes, log-probs 5), and 8x slower to write and about 1000x slower to
// read even before the conversion between the JSON tree and the struct; CBOR is the same size.
// The store's block compression takes the rest.
//
// Compatibility: the format version grows when fields are added; a decoder reads every version up
// to its own (fields newer than the record take their defaults) and refuses a newer one with an
// error that says so. Never change the meaning of an existing version's bytes. The version is the
// newest `since` among the stored records' fields (newest_since, common/field_list.hpp), so a field
// added with `opt().since(N + 1)` makes it N + 1 with no edit here (a number kept by hand could be
// left at N, and the writer, which writes versions up to its own, would silently drop the field).
// The history:
// Version 2 added group_record::weight_version (after the rollouts).
// Version 3 added turn_record::speedup: a group's, one f64 per turn in rollout and turn order after
// weight_version; a turn record's, after its last field.
// Version 4 added turn_record::speedup_noise the same way, after the speedups (a group's) or the
// speedup (a turn record's); older records read it as -1 (not stated).
// Version 5 added turn_record::compiled_speedup and compiled_speedup_noise the same way, after the
// noises (a group's: all speedups, then all noises) or the noise (a turn record's).
// Version 6 added turn_record::weight_segments: a group's, per turn in rollout and turn order after
// the compiled noises, a count then (u32 first, u64 version) each; a turn record's, after its last
// field. Older records read one segment {0, weight_version}.
// Version 7 added turn_profile_record::source after its last field; older profiles read "ncu".
inline const std::uint8_t trajectory_format_version =
    std::max({newest_since<group_record>(), newest_since<step_record>(), newest_since<run_record>(),
              newest_since<turn_record>(), newest_since<retry_step_record>(),
              newest_since<partial_carry_record>(), newest_since<turn_profile_record>()});

// turn: one finished turn of a group not yet stored (the store's per-turn resume records).
// retry: the retry buffer after a step (issue 35); its fields have had one layout since it was
// added (format version 4), so every version reads it the same way.
// carry: the groups a step's batch carried into the next step (schedule.partial, issue 33); one
// layout since it was added (format version 5). A new kind under keys of its own changes no
// record that a build before it reads, so the format version stays: bumping it would only make
// those builds refuse every record of a newer store.
// optimise: the optimisation decision of one group (gate.optimise, issue 31), stored beside the
// group record under keys of its own for the same reason; one layout since it was added (format
// version 5): the decision's byte.
// profile: the profile of one turn (verifier.profile, issue 34), made after the turn's verdict and
// stored under keys of its own (the key names the turn) as it arrives; one layout since it was
// added (format version 6): the kernels (name, duration, bottleneck, findings), the note, the
// seconds.
enum class record_kind : std::uint8_t {
  group = 1,
  step = 2,
  run = 3,
  turn = 4,
  retry = 5,
  carry = 6,
  optimise = 7,
  profile = 8
};

struct decode_options {
  // false skips token ids and log-probs (left empty), for readers that need only outcomes and
  // text, such as replay. Default: true
  bool tokens = true;
};

[[nodiscard]] std::string encode(const group_record& group);
[[nodiscard]] std::string encode(const step_record& step);
[[nodiscard]] std::string encode(const run_record& run);
[[nodiscard]] std::string encode(const turn_record& turn);
[[nodiscard]] std::string encode(const retry_step_record& retry);
[[nodiscard]] std::string encode(const partial_carry_record& carry);
[[nodiscard]] std::string encode_optimise(optimise_decision decision);
// The profile's kernels, note and seconds; its turn is the key's (left default by decode_profile).
[[nodiscard]] std::string encode(const turn_profile_record& profile);

// Errors: truncated or trailing bytes, a record of another kind, an unknown enum value, a format
// version newer than trajectory_format_version; each message names the field and the byte offset.
[[nodiscard]] result<group_record> decode_group(std::string_view bytes,
                                                decode_options options = {});
[[nodiscard]] result<step_record> decode_step(std::string_view bytes);
[[nodiscard]] result<run_record> decode_run(std::string_view bytes);
[[nodiscard]] result<turn_record> decode_turn(std::string_view bytes);
[[nodiscard]] result<retry_step_record> decode_retry(std::string_view bytes);
[[nodiscard]] result<partial_carry_record> decode_carry(std::string_view bytes);
[[nodiscard]] result<optimise_decision> decode_optimise(std::string_view bytes);
[[nodiscard]] result<turn_profile_record> decode_profile(std::string_view bytes);

}  // namespace leap
