// Status and StatusOr<T>: how runtime failures cross module boundaries.
//
// A Status is either OK or a code plus a human-readable message. Functions
// that can fail at run time (sockets, files, RocksDB, bad input from the
// network) return Status or StatusOr<T>; glog CHECK is only for broken
// invariants. The codes are carried on the wire (common/wire_format.h), so
// their numeric values are part of the protocol: append, never renumber.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <variant>

#include <glog/logging.h>

namespace tessera {

enum class StatusCode : uint16_t {
  kOk = 0,
  kInvalidArgument = 1,
  kNotFound = 2,
  kAlreadyExists = 3,
  kOutOfRange = 4,
  kFailedPrecondition = 5,
  kDeadlineExceeded = 6,
  kUnavailable = 7,
  kAborted = 8,
  kResourceExhausted = 9,
  kDataLoss = 10,
  kInternal = 11,
  kUnimplemented = 12,
  kCancelled = 13,
  // A request was made against an older plan version than the server's.
  kPlanChanged = 14,
  // A retried gradient push that the server had already applied.
  kAlreadyApplied = 15,
  // The sender may not ask this: a stranger's key, another member's
  // request, a role that does not give such orders.
  kPermissionDenied = 16,
};
constexpr uint16_t kMaxStatusCode = 16;

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message);

  static Status OK() { return Status(); }
  static Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
  static Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status AlreadyExists(std::string m) { return {StatusCode::kAlreadyExists, std::move(m)}; }
  static Status OutOfRange(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
  static Status FailedPrecondition(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
  static Status DeadlineExceeded(std::string m) { return {StatusCode::kDeadlineExceeded, std::move(m)}; }
  static Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
  static Status Aborted(std::string m) { return {StatusCode::kAborted, std::move(m)}; }
  static Status ResourceExhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
  static Status DataLoss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
  static Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
  static Status Unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
  static Status Cancelled(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }
  static Status PlanChanged(std::string m) { return {StatusCode::kPlanChanged, std::move(m)}; }
  static Status AlreadyApplied(std::string m) { return {StatusCode::kAlreadyApplied, std::move(m)}; }
  static Status PermissionDenied(std::string m) { return {StatusCode::kPermissionDenied, std::move(m)}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "INVALID_ARGUMENT: lengths sum to 7 but 8 ids were sent"
  std::string ToString() const;

  // Returns a copy whose message is "context: message"; OK stays OK.
  Status WithContext(const std::string& context) const;

  bool operator==(const Status& o) const { return code_ == o.code_ && message_ == o.message_; }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

std::ostream& operator<<(std::ostream& os, const Status& s);

// A failed system call's Status: `what`, then errno's text. A full disk or
// quota (ENOSPC, EDQUOT) is RESOURCE_EXHAUSTED, mended by making room;
// anything else UNAVAILABLE. Reads errno, so call it right after the call
// that failed.
Status ErrnoStatus(const std::string& what);

// Either a value or a non-OK Status.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(const Status& status) : value_(status) {  // NOLINT: implicit by design
    CHECK(!status.ok()) << "StatusOr built from an OK status without a value";
  }
  StatusOr(Status&& status) : value_(std::move(status)) {  // NOLINT
    CHECK(!std::get<Status>(value_).ok()) << "StatusOr built from an OK status without a value";
  }
  StatusOr(const T& value) : value_(value) {}  // NOLINT
  StatusOr(T&& value) : value_(std::move(value)) {}  // NOLINT
  template <typename U, typename = std::enable_if_t<std::is_convertible_v<U&&, T> &&
                                                    !std::is_same_v<std::decay_t<U>, Status> &&
                                                    !std::is_same_v<std::decay_t<U>, StatusOr>>>
  StatusOr(U&& value) : value_(T(std::forward<U>(value))) {}  // NOLINT

  bool ok() const { return std::holds_alternative<T>(value_); }
  Status status() const { return ok() ? Status::OK() : std::get<Status>(value_); }

  // REQUIRES: ok().
  const T& value() const& {
    CHECK(ok()) << status();
    return std::get<T>(value_);
  }
  T& value() & {
    CHECK(ok()) << status();
    return std::get<T>(value_);
  }
  T&& value() && {
    CHECK(ok()) << status();
    return std::get<T>(std::move(value_));
  }
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }

 private:
  std::variant<Status, T> value_;
};

}  // namespace tessera

#define TESSERA_CONCAT_INNER_(a, b) a##b
#define TESSERA_CONCAT_(a, b) TESSERA_CONCAT_INNER_(a, b)

// Returns the Status of `expr` from the enclosing function if it is not OK.
#define TESSERA_RETURN_IF_ERROR(expr)           \
  do {                                          \
    ::tessera::Status _tessera_st = (expr);     \
    if (!_tessera_st.ok()) return _tessera_st;  \
  } while (0)

// `lhs = value of expr`, or returns its Status from the enclosing function.
#define TESSERA_ASSIGN_OR_RETURN(lhs, expr) \
  TESSERA_ASSIGN_OR_RETURN_IMPL_(TESSERA_CONCAT_(_tessera_so_, __LINE__), lhs, expr)
#define TESSERA_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                   \
  if (!tmp.ok()) return tmp.status();                  \
  lhs = std::move(tmp).value()
