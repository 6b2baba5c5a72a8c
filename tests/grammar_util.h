// Helpers for the grammar tests: a real JSON Schema validator (Debian's header-only valijson,
// used only here, so our compiler never judges its own output), a seeded generator of random
// schemas, the fixed table of real tool schemas, and constrained sampling over any logits.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "grammar/token_matcher.h"

namespace cedar::test {

// True when `doc` is valid under `schema` (valijson, draft 7, $defs by JSON pointer).
bool Validates(const nlohmann::json& schema, const nlohmann::json& doc);
// `text` parsed as JSON and valid under `schema`.
bool TextValidates(const nlohmann::json& schema, const std::string& text);

// A random schema (objects, arrays, strings with maxLength, numbers, integers, booleans, null,
// enums, const, anyOf/oneOf of disjoint types, $ref to $defs), deterministic in `seed`. Every
// string has a maxLength and every array a maxItems, so a random model can finish one.
nlohmann::json RandomSchema(uint64_t seed);

// Real tools (file read/write, shell, search, nested objects, enums), in OpenAI's `tools` shape.
nlohmann::json RealTools();

// Samples up to `max_tokens` ids: `logits(ids so far)` gives [V] scores; with `matcher` they are
// masked first (and the matcher advances). Temperature 1, seeded. Stops at an id in `end_ids`.
std::vector<int32_t> SampleIds(const std::function<std::vector<float>(const std::vector<int32_t>&)>& logits,
                               grammar::TokenMatcher* matcher, const std::vector<int32_t>& end_ids, int max_tokens,
                               uint64_t seed);

}  // namespace cedar::test
