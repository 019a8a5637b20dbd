// Status and Expected<T>: the error currency at core, backend and kernel boundaries.
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace mosaic {

/// Error categories. kUnsupported is distinct: it means "this backend/kernel cannot do
/// this, and here is why", which the planner uses to fall back and to report.
enum class StatusCode { kOk, kInvalidArgument, kUnsupported, kNotFound, kIoError, kInternal };

const char* status_code_name(StatusCode code);

/// Result of an operation that returns nothing. Cheap when ok.
class Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return {}; }
  static Status invalid(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
  static Status unsupported(std::string m) { return {StatusCode::kUnsupported, std::move(m)}; }
  static Status not_found(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status io_error(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
  static Status internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

  bool is_ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  /// Returns a copy whose message is "context: message".
  Status with_context(const std::string& context) const {
    return is_ok() ? *this : Status(code_, context + ": " + message_);
  }
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

/// A value or the Status explaining why there is none.
template <class T>
class Expected {
 public:
  Expected(T value) : v_(std::move(value)) {}  // NOLINT(implicit)
  Expected(Status status) : v_(std::move(status)) {}  // NOLINT(implicit)

  bool ok() const { return v_.index() == 0; }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T* operator->() { return &std::get<0>(v_); }
  const T* operator->() const { return &std::get<0>(v_); }
  T& operator*() { return std::get<0>(v_); }
  Status status() const { return ok() ? Status::ok() : std::get<1>(v_); }

 private:
  std::variant<T, Status> v_;
};

#define MOSAIC_CONCAT_INNER(a, b) a##b
#define MOSAIC_CONCAT(a, b) MOSAIC_CONCAT_INNER(a, b)

#define MOSAIC_RETURN_IF_ERROR(expr)           \
  do {                                         \
    ::mosaic::Status _mosaic_st = (expr);      \
    if (!_mosaic_st.is_ok()) return _mosaic_st; \
  } while (0)

#define MOSAIC_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()

/// `MOSAIC_ASSIGN_OR_RETURN(auto x, f());` binds x to f()'s value or returns its Status.
#define MOSAIC_ASSIGN_OR_RETURN(lhs, expr) \
  MOSAIC_ASSIGN_OR_RETURN_IMPL(MOSAIC_CONCAT(_mosaic_ex_, __LINE__), lhs, expr)

}  // namespace mosaic
