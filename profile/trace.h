// Workload traces for `cedar profile` (../shared/traces/README.md): requests whose prompts are
// lists of block ids, where equal ids mean equal blocks of tokens.
//
// Two formats:
//   claude-code  one JSON object per file: `block_size` (64), `hash_id_scope` ("local": ids are
//                per file), `requests[]` of {t, in, out, hash_ids}; an entry of type "subagent"
//                nests its own `requests` (times relative to the entry's `t`), replayed as a
//                concurrent session with the same id scope.
//   mooncake     JSONL, one {timestamp (ms), input_length, output_length, hash_ids} per line;
//                512-token blocks, ids global.
// `in` / `input_length` is the exact prompt length: the last block may be cut short, and tokens
// past the last block (claude-code hashes whole blocks only) are unique to the request.
//
// Malformed entries are reported (file and line for JSONL, file and request path for JSON) and
// skipped, or, with `strict`, stop the load with std::runtime_error carrying the same message.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace cedar::profile {

enum class TraceFormat { kAuto, kClaudeCode, kMooncake };
const char* FormatName(TraceFormat f);                    // "auto", "claude-code", "mooncake"
bool ParseFormat(const std::string& s, TraceFormat* out);

struct TraceRequest {
  double t = 0;                    // arrival, seconds: recorded_t until an arrival model
                                   // (profile/arrival.h) places its conversation
  double recorded_t = 0;           // seconds from its file's first timestamp (as recorded)
  std::string session;             // conversation: file id, "<file id>/<agent id>" for sub-agents
  uint32_t conversation = 0;       // the unit an arrival model starts: its file's index in load
                                   // order (a sub-agent moves with its parent)
  bool subagent = false;           // a nested sub-agent request (claude-code "subagent" entries)
  size_t seq = 0;                  // load order, the tie-break among equal arrival times
  std::string source;              // "<file>:<line>" or "<file>: requests[3].requests[2]"
  uint32_t scope = 0;              // block-id namespace: 0 = global (claude-code "global" ids),
                                   // else one per file (local-scope claude-code, every mooncake file)
  int block_size = 0;              // tokens per block id
  int64_t input_tokens = 0;        // exact prompt length, >= 1
  int64_t output_tokens = 0;       // >= 0
  std::vector<int64_t> block_ids;  // ceil-ish: input_tokens > (block_ids.size() - 1) * block_size
};

struct TraceIssue {
  std::string where;  // file and line or request path
  std::string what;
};

struct Trace {
  std::vector<TraceRequest> requests;  // in arrival order (stable: equal times keep load order)
  std::vector<std::string> files;      // files read, in load order
  std::vector<std::string> formats;    // format of each file
  std::vector<TraceIssue> issues;      // malformed entries that were skipped
};

struct LoadOptions {
  TraceFormat format = TraceFormat::kAuto;
  bool strict = false;
  size_t limit = 0;  // stop reading after this many requests, in file order (0 = all)
};

// Reads files and directories (every *.json and *.jsonl below a directory, sorted by path).
// Throws std::runtime_error for a path that does not exist or cannot be read, and in strict mode
// for the first malformed entry.
Trace LoadTraces(const std::vector<std::string>& paths, const LoadOptions& options);

// Parses one file's text into `trace` (appending; requests are not re-sorted). `name` is used in
// messages; `scope` is the block-id namespace given to local-scope ids. Returns the format used.
TraceFormat ParseTraceText(std::string_view text, const std::string& name, uint32_t scope,
                           const LoadOptions& options, Trace* trace);

// Sorts requests by arrival time, keeping load order (seq) among equal times.
void SortByArrival(Trace* trace);

}  // namespace cedar::profile
