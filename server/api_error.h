// Errors in OpenAI's shape: {"error": {"message", "type", "param", "code"}} with an HTTP status.
#pragma once
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "session/session_manager.h"
#include "server/http_message.h"

namespace cedar::server {

// A request the API refuses. Thrown by request parsing and the endpoints; Api::Handle turns it
// into a response, so it never reaches the transport.
class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string type, std::string code, std::string message, std::string param = "")
      : std::runtime_error(message), status(status), type(std::move(type)), code(std::move(code)),
        param(std::move(param)) {}
  int status;
  std::string type;   // "invalid_request_error", "not_found_error", "authentication_error", ...
  std::string code;   // "context_length_exceeded", "session_busy", ... ("" = null)
  std::string param;  // the offending field ("" = null)
  int retry_after_s = 0;  // > 0: the response carries `Retry-After: <seconds>` (429 queue_full)

  nlohmann::json ToJson() const;
};

// 400 invalid_request_error, naming `param`.
ApiError InvalidRequest(const std::string& message, const std::string& param = "",
                        const std::string& code = "");
// Seconds a client refused with queue_full should wait: the mean queue wait so far, rounded up,
// in [1, 60] (1 before any turn was admitted).
int RetryAfterSeconds(const session::EngineMetrics& m);

// A session manager refusal: kQueueFull 429 queue_full (Retry-After 1 unless the caller sets it),
// kInvalidRequest 400, kSessionNotFound 404, kSessionBusy 409,
// kPromptTooLong 400 context_length_exceeded, kShuttingDown 503, kInternal 500. `param` names
// the field for 400s ("" = none; kPromptTooLong defaults to "messages").
ApiError FromErrorKind(session::ErrorKind kind, const std::string& message, const std::string& param = "");
// 500 internal_error with a fixed message; `detail` (possibly a library's exception text) is
// logged, never sent.
ApiError InternalError(const std::string& detail);

HttpResponse ErrorResponse(const ApiError& error);
// The same error in Anthropic's shape, for /v1/messages: {"type":"error","error":{"type",
// "message"}}, the type from the status (invalid_request_error, authentication_error,
// not_found_error, request_too_large, rate_limit_error, api_error, overloaded_error).
HttpResponse AnthropicErrorResponse(const ApiError& error);
nlohmann::json AnthropicErrorJson(int status, const std::string& message);
HttpResponse JsonResponse(int status, const nlohmann::json& body);

}  // namespace cedar::server
