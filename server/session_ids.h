// Session ids as the API accepts them, and route parameters as they arrive in a path.
//
// A session id is 1 to 128 characters from [A-Za-z0-9_.:-]: the characters that need no
// escaping in a URL path, a header or a log line, so an id that can be created can also be
// named in GET/DELETE /v1/sessions/{id} and X-Session-Id. Anything else (space, '?', '/', NUL,
// CR/LF, non-ASCII) is refused with 400 naming `session_id`, before any session is touched.
// Generated ids ("sess_" + 32 hex digits from a CSPRNG) are in the same alphabet.
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace cedar::server {

inline constexpr size_t kMaxSessionIdLength = 128;

bool IsValidSessionId(std::string_view id);

// Throws InvalidRequest (param "session_id") unless `id` is valid; `source` says where it came
// from in the message ("session_id", "header X-Session-Id", "the path").
void CheckSessionId(std::string_view id, const std::string& source);

// RFC 3986 percent-decoding of one path segment ("%3A" -> ":"); nullopt for a '%' not followed
// by two hex digits. '+' stays '+' (that rule is for query strings only).
std::optional<std::string> PercentDecode(std::string_view segment);

}  // namespace cedar::server
