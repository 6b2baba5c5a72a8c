// Status and Result<T>: recoverable errors as values (leveldb style). Nothing in the prefix
// cache's API throws; `assert` is kept for internal invariants only.
#pragma once

#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace cedar::cache {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     // the caller broke a documented precondition (page size, position, ...)
  kNotFound,            // the tokens named are not cached
  kResourceExhausted,   // a budget (RAM, disk, soft-pin share) cannot hold what was asked
  kIOError,             // the cache directory or LMDB failed
  kCorruption,          // stored data or an internal invariant is inconsistent
  kFailedPrecondition,  // the cache is not in a state where the call makes sense
};

class [[nodiscard]] Status {
 public:
  Status() = default;  // ok

  static Status Ok() { return {}; }
  static Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
  static Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status ResourceExhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
  static Status IOError(std::string m) { return {StatusCode::kIOError, std::move(m)}; }
  static Status Corruption(std::string m) { return {StatusCode::kCorruption, std::move(m)}; }
  static Status FailedPrecondition(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string ToString() const;  // "OK" or "<Code>: <message>"

 private:
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// Either a value or a non-ok Status. REQUIRES: ok() before value().
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : state_(std::move(status)) {  // NOLINT: implicit by design
    assert(!std::get<Status>(state_).ok() && "a Result holding a Status must hold an error");
  }

  bool ok() const { return std::holds_alternative<T>(state_); }
  Status status() const { return ok() ? Status::Ok() : std::get<Status>(state_); }

  T& value() & { assert(ok()); return std::get<T>(state_); }
  const T& value() const& { assert(ok()); return std::get<T>(state_); }
  T&& value() && { assert(ok()); return std::get<T>(std::move(state_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> state_;
};

}  // namespace cedar::cache
