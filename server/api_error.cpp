#include "server/api_error.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

namespace cedar::server {

using nlohmann::json;

json ApiError::ToJson() const {
  return {{"error",
           {{"message", what()},
            {"type", type},
            {"param", param.empty() ? json(nullptr) : json(param)},
            {"code", code.empty() ? json(nullptr) : json(code)}}}};
}

ApiError InvalidRequest(const std::string& message, const std::string& param, const std::string& code) {
  return ApiError(400, "invalid_request_error", code, message, param);
}

ApiError FromErrorKind(session::ErrorKind kind, const std::string& message, const std::string& param) {
  using session::ErrorKind;
  switch (kind) {
    case ErrorKind::kInvalidRequest: return InvalidRequest(message, param);
    case ErrorKind::kSessionNotFound:
      return ApiError(404, "not_found_error", "session_not_found", message, "session_id");
    case ErrorKind::kSessionBusy:
      return ApiError(409, "conflict_error", "session_busy",
                      message + "; wait for it to finish (or cancel it) before sending the next turn",
                      "session_id");
    case ErrorKind::kPromptTooLong:
      return InvalidRequest(message, param.empty() ? "messages" : param, "context_length_exceeded");
    case ErrorKind::kShuttingDown: return ApiError(503, "server_error", "shutting_down", message);
    case ErrorKind::kQueueFull: {
      ApiError e(429, "rate_limit_error", "queue_full", message);
      e.retry_after_s = 1;
      return e;
    }
    case ErrorKind::kNone:
    case ErrorKind::kInternal: break;
  }
  return InternalError(message);
}

ApiError InternalError(const std::string& detail) {
  // The detail may be a library's exception text: it goes to the log, not to the client.
  spdlog::error("internal error: {}", detail);
  return ApiError(500, "server_error", "internal_error", "internal error (the server's log has the details)");
}

HttpResponse JsonResponse(int status, const json& body) {
  HttpResponse r;
  r.status = status;
  r.body = body.dump(-1, ' ', false, json::error_handler_t::replace);
  return r;
}

HttpResponse ErrorResponse(const ApiError& error) {
  HttpResponse r = JsonResponse(error.status, error.ToJson());
  if (error.retry_after_s > 0) r.headers.emplace_back("Retry-After", std::to_string(error.retry_after_s));
  // A busy session stays busy until its turn ends: the OpenAI SDKs retry 409s (~2 s of
  // backoff) unless told not to; the client should wait for its turn instead.
  if (error.status == 409 && error.code == "session_busy") r.headers.emplace_back("x-should-retry", "false");
  return r;
}

int RetryAfterSeconds(const session::EngineMetrics& m) {
  if (m.turns_admitted <= 0) return 1;
  const double mean_s = m.queue_wait_ms_total / 1000.0 / double(m.turns_admitted);
  return int(std::clamp(std::ceil(mean_s), 1.0, 60.0));
}

}  // namespace cedar::server
