// Cedar's BpeTokenizer against two independent implementations run by node on
// tests/tokenizer_js/encode.mjs: @huggingface/tokenizers (JavaScript) and `tokenizers` (Hugging
// Face's Node binding of the Rust crate, the tokenizer the released model was made with), on the
// released DeepSeek tokenizer (V3 files, and the same with the V4.1 added tokens): identical ids
// from both on every text of the corpus (bpe_corpus.h), which holds every added token. Also, on every text: decode(encode(x)) == x for valid UTF-8
// (RepairUtf8(x) otherwise), Encode never yields a special id, and a StreamDecoder fed the ids
// one at a time yields the same text as Decode.
// Exits 77 (ctest: skipped) with a message when node or the npm packages are missing.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/bpe_corpus.h"
#include "tests/tokenizer_fixtures.h"
#include "tools_bridge/lib/bpe_tokenizer.h"

using namespace cedar;
using namespace cedar::testing;
namespace fs = std::filesystem;

namespace {

std::string Excerpt(const std::string& s, size_t at, size_t width = 60) {
  const size_t a = at > width ? at - width : 0;
  return nlohmann::json(bridge::RepairUtf8(s.substr(a, 2 * width))).dump();
}

std::string Ids(const bridge::TokenIds& ids, size_t at) {
  std::string s;
  for (size_t i = at > 3 ? at - 3 : 0; i < std::min(ids.size(), at + 4); ++i) s += std::to_string(ids[i]) + " ";
  return s;
}

// Compares one tokenizer on one corpus; returns the number of failures (prints the first few).
// impl: encode.mjs's implementation, "hf-js" or "hf-rust".
int Check(const std::string& tokenizer, const std::string& impl, const std::string& dir,
          const bridge::BpeTokenizer* tok, const std::vector<CorpusText>& corpus, const std::string& work) {
  const std::string name = tokenizer + "/" + impl;
  const std::string corpus_path = work + "/" + tokenizer + ".corpus";
  const std::string ids_path = work + "/" + tokenizer + "." + impl + ".ids.json";
  WriteCorpus(corpus_path, corpus);
  const std::string cmd = "cd '" CEDAR_SOURCE_DIR "/tests/tokenizer_js' && node encode.mjs '" + dir + "' '" +
                          corpus_path + "' '" + ids_path + "' " + impl;
  const auto t0 = std::chrono::steady_clock::now();
  if (const int rc = std::system(cmd.c_str()); rc != 0) {
    std::printf("FAIL %s: node failed (status %d): %s\n", name.c_str(), rc, cmd.c_str());
    return 1;
  }
  const double js_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::ifstream f(ids_path);
  const nlohmann::json js = nlohmann::json::parse(f);
  if (js.size() != corpus.size()) {
    std::printf("FAIL %s: node returned %zu id lists for %zu texts\n", name.c_str(), js.size(), corpus.size());
    return 1;
  }
  int failures = 0;
  size_t bytes = 0, ids_total = 0;
  double cpp_s = 0;
  auto fail = [&](const std::string& what) {
    if (++failures <= 8) std::printf("FAIL %s: %s\n", name.c_str(), what.c_str());
  };
  for (size_t i = 0; i < corpus.size(); ++i) {
    const std::string& text = corpus[i].text;
    const std::string where = corpus[i].kind + " text #" + std::to_string(i);
    const auto c0 = std::chrono::steady_clock::now();
    const bridge::TokenIds ids = tok->EncodeWithSpecials(text);
    cpp_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - c0).count();
    bytes += text.size();
    ids_total += ids.size();
    const auto expected = js[i].get<bridge::TokenIds>();
    if (ids != expected) {
      size_t k = 0;
      while (k < ids.size() && k < expected.size() && ids[k] == expected[k]) ++k;
      const size_t at = tok->Decode(std::span(ids).first(k)).size();
      std::ofstream(work + "/" + tokenizer + "." + impl + ".mismatch" + std::to_string(i) + ".txt", std::ios::binary) << text;
      fail(where + ": first mismatch at token " + std::to_string(k) + " (decoded byte " + std::to_string(at) +
           "): cedar [" + Ids(ids, k) + "] js [" + Ids(expected, k) + "] near " + Excerpt(bridge::RepairUtf8(text), at));
      continue;
    }
    const std::string want = bridge::RepairUtf8(text);
    if (tok->Decode(ids) != want) fail(where + ": decode(encode(x)) != x near " + Excerpt(want, 0));
    const bridge::TokenIds plain = tok->Encode(text);
    for (auto id : plain) {
      if (tok->IsSpecial(id)) {
        fail(where + ": Encode yielded special id " + std::to_string(id));
        break;
      }
    }
    if (tok->Decode(plain) != want) fail(where + ": decode(Encode(x)) != x");
    bridge::StreamDecoder stream(*tok);
    std::string streamed;
    for (auto id : ids) streamed += stream.Push(id);
    streamed += stream.Finish();
    if (streamed != want) fail(where + ": streamed decode != Decode");
  }
  std::printf("{\"tokenizer\":\"%s\",\"texts\":%zu,\"bytes\":%zu,\"ids\":%zu,\"failures\":%d,"
              "\"cedar_mb_per_s\":%.2f,\"node_seconds\":%.2f}\n",
              name.c_str(), corpus.size(), bytes, ids_total, failures, bytes / 1e6 / cpp_s, js_s);
  return failures;
}

std::unique_ptr<bridge::BpeTokenizer> Load(const std::string& dir) {
  bridge::BpeTokenizerOptions options;
  options.vocab_size = 129280;
  return bridge::BpeTokenizer::FromDir(dir, options);
}

std::vector<std::string> AddedNames(const bridge::BpeTokenizer* tok) {
  std::vector<std::string> names;
  for (int32_t id = 0; id < tok->vocab_size(); ++id) {
    if (auto n = tok->SpecialName(id)) names.emplace_back(*n);
  }
  return names;
}

}  // namespace

int main() {
  const std::string v3 = DeepSeekV3TokenizerDir();
  if (v3.empty()) {
    std::printf("%s\n", MissingTokenizerMessage().c_str());
    return 77;
  }
  if (std::system("node --version > /dev/null 2>&1") != 0) {
    std::printf("SKIP: node is not installed (scripts/setup.sh installs nodejs)\n");
    return 77;
  }
  const std::string work = std::string(CEDAR_BINARY_DIR) + "/tokenizer_parity";
  fs::create_directories(work);
  try {
    const std::string v41 = MakeDeepSeekV41TokenizerDir(work);
    const auto v3_tok = Load(v3), v41_tok = Load(v41);
    std::vector<CorpusText> generated = GeneratedTexts(13);
    // V3: the whole corpus. The stdlib share is bounded so the test stays well under a
    // minute on two cores (node's tokenizer is the slow side).
    std::vector<CorpusText> v3_corpus = StdlibTexts("/usr/lib/python3.11", 500'000);
    for (auto& t : TraceTexts("/work/shared/traces/claude-code", 150'000)) v3_corpus.push_back(t);
    v3_corpus.insert(v3_corpus.end(), generated.begin(), generated.end());
    for (auto& t : SpecialTexts(AddedNames(v3_tok.get()))) v3_corpus.push_back(t);
    // V4.1: its added tokens and some random text (the BPE part is the V3 files').
    std::vector<CorpusText> v41_corpus(generated.begin(), generated.begin() + 150);
    for (auto& t : SpecialTexts(AddedNames(v41_tok.get()))) v41_corpus.push_back(t);
    int failures = 0;
    for (const char* impl : {"hf-js", "hf-rust"}) {
      failures += Check("deepseek_v3", impl, v3, v3_tok.get(), v3_corpus, work);
      failures += Check("deepseek_v41", impl, v41, v41_tok.get(), v41_corpus, work);
    }
    std::printf("%s\n", failures == 0 ? "PASS" : "FAIL");
    return failures == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::printf("FAIL: %s\n", e.what());
    return 1;
  }
}
