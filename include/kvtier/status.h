// Status and Result<T>: kvtier's error model. No kvtier API throws.
//
// Codes follow abseil/gRPC numbering so that they map one-to-one onto wire error codes.
// Whether a retry makes sense is a property of the code (see IsRetryable()).
//
// Thread safety: Status and Result are values; const methods may be called concurrently.

#ifndef KVTIER_STATUS_H_
#define KVTIER_STATUS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace kvtier {

enum class StatusCode : uint8_t {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,    // The request is malformed; retrying it unchanged fails again.
  kDeadlineExceeded = 4,   // Timed out; a retry may succeed.
  kNotFound = 5,           // The key, tenant or object does not exist.
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,  // Capacity or quota; a retry succeeds only after space is freed.
  kFailedPrecondition = 9, // The system is not in the state the operation needs.
  kAborted = 10,           // Concurrency conflict; retry the whole operation.
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,          // An invariant broke: a bug.
  kUnavailable = 14,       // Transient; retry with backoff.
  kDataLoss = 15,          // Stored data is corrupt or lost.
  kUnauthenticated = 16,
};

// Returns the canonical name of `code`, e.g. "INVALID_ARGUMENT".
std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  // An OK status. Cheap: OK carries no allocation.
  Status() = default;
  Status(StatusCode code, std::string_view message);

  Status(const Status& other);
  Status& operator=(const Status& other);
  Status(Status&&) noexcept = default;
  Status& operator=(Status&&) noexcept = default;

  static Status OK() { return Status(); }
  static Status InvalidArgument(std::string_view msg) { return {StatusCode::kInvalidArgument, msg}; }
  static Status NotFound(std::string_view msg) { return {StatusCode::kNotFound, msg}; }
  static Status AlreadyExists(std::string_view msg) { return {StatusCode::kAlreadyExists, msg}; }
  static Status PermissionDenied(std::string_view msg) { return {StatusCode::kPermissionDenied, msg}; }
  static Status ResourceExhausted(std::string_view msg) { return {StatusCode::kResourceExhausted, msg}; }
  static Status FailedPrecondition(std::string_view msg) { return {StatusCode::kFailedPrecondition, msg}; }
  static Status Aborted(std::string_view msg) { return {StatusCode::kAborted, msg}; }
  static Status OutOfRange(std::string_view msg) { return {StatusCode::kOutOfRange, msg}; }
  static Status Unimplemented(std::string_view msg) { return {StatusCode::kUnimplemented, msg}; }
  static Status Internal(std::string_view msg) { return {StatusCode::kInternal, msg}; }
  static Status Unavailable(std::string_view msg) { return {StatusCode::kUnavailable, msg}; }
  static Status DataLoss(std::string_view msg) { return {StatusCode::kDataLoss, msg}; }
  static Status Unauthenticated(std::string_view msg) { return {StatusCode::kUnauthenticated, msg}; }
  static Status DeadlineExceeded(std::string_view msg) { return {StatusCode::kDeadlineExceeded, msg}; }

  bool ok() const { return state_ == nullptr; }
  StatusCode code() const { return state_ ? state_->code : StatusCode::kOk; }
  // Empty for OK.
  std::string_view message() const { return state_ ? std::string_view(state_->message) : std::string_view(); }

  // True for codes where repeating the same request later may succeed.
  bool IsRetryable() const;

  // "OK" or "NOT_FOUND: <message>".
  std::string ToString() const;

  friend bool operator==(const Status& a, const Status& b) {
    return a.code() == b.code() && a.message() == b.message();
  }

 private:
  struct State {
    StatusCode code;
    std::string message;
  };
  std::unique_ptr<State> state_;
};

// Either a value of type T or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  // REQUIRES: !status.ok(). An OK status is turned into an Internal error.
  Result(Status status) : v_(std::move(status)) {  // NOLINT: implicit by design
    if (std::get<Status>(v_).ok()) {
      v_ = Status::Internal("Result constructed from an OK status without a value");
    }
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  // OK when a value is held.
  Status status() const { return ok() ? Status::OK() : std::get<Status>(v_); }

  // REQUIRES: ok().
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<Status, T> v_;
};

}  // namespace kvtier

// Returns from the enclosing function when `expr` (a Status) is not OK.
#define KVTIER_RETURN_IF_ERROR(expr)             \
  do {                                           \
    ::kvtier::Status _kvtier_status = (expr);    \
    if (!_kvtier_status.ok()) return _kvtier_status; \
  } while (0)

#endif  // KVTIER_STATUS_H_
