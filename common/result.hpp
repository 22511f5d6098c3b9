// Errors as values: a result<T> holds either a T or an error whose message names what failed and
// where (file, line, key, endpoint, ...). Errors travel up by value and become a message and a
// non-zero exit only at the edge of the program.
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace leap {

struct error {
  std::string message;

  // Prefixes context, e.g. error{"expected a number"}.wrap("configs/a.yaml:3: 'gate.tau_min'").
  [[nodiscard]] error wrap(const std::string& context) const { return {context + ": " + message}; }
};

template <class T>
class [[nodiscard]] result {
 public:
  result(T value) : state_(std::move(value)) {}          // NOLINT(google-explicit-constructor)
  result(error failure) : state_(std::move(failure)) {}  // NOLINT(google-explicit-constructor)

  [[nodiscard]] bool ok() const { return state_.index() == 0; }
  explicit operator bool() const { return ok(); }

  // Precondition: ok().
  [[nodiscard]] T& value() & { return std::get<0>(state_); }
  [[nodiscard]] const T& value() const& { return std::get<0>(state_); }
  [[nodiscard]] T&& value() && { return std::get<0>(std::move(state_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

  // Precondition: !ok().
  [[nodiscard]] const error& err() const { return std::get<1>(state_); }

 private:
  std::variant<T, error> state_;
};

// For operations that return nothing but may fail.
struct done {};
using status = result<done>;
inline status ok_status() { return done{}; }

}  // namespace leap
