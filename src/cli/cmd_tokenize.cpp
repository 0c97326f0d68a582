// `keel tokenize TOKENIZER FILE`: the ids keel's encoder gives a text, one
// line of space-separated ids per document, so they can be compared with
// another implementation's (tests/python/test_bpe_parity.py does, against the
// `tokenizers` package) or inspected by hand. --decode prints each document's
// round trip instead of ids, as a JSON line {"text": ...}. The speed lands on stderr: MB/s and tokens/s on
// one thread.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <sstream>

#include "cli/commands.h"
#include "data/tokenizer.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"

namespace keel {

namespace {

struct TokenizeArgs {
  std::string tokenizer, input;
  bool jsonl = false, decode = false;
};

// The documents of `input`: the whole file, or with --jsonl each line's "text".
std::vector<std::string> read_documents(const TokenizeArgs& a) {
  const std::string bytes = read_small_file(a.input, uint64_t{1} << 30);
  if (!a.jsonl) return {bytes};
  std::vector<std::string> docs;
  std::istringstream in(bytes);
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    const std::string where = a.input + ":" + std::to_string(n);
    nlohmann::json j = parse_json_bounded(line, where);
    if (!j.is_object() || !j.contains("text") || !j["text"].is_string())
      throw DataError(where + ": expected an object with a string field \"text\"");
    docs.push_back(j["text"].get<std::string>());
  }
  return docs;
}

int run_tokenize(const TokenizeArgs& a) {
  Tokenizer tok(a.tokenizer);
  const std::vector<std::string> docs = read_documents(a);
  const auto t0 = std::chrono::steady_clock::now();
  int64_t bytes = 0, tokens = 0;
  std::vector<std::vector<int32_t>> ids(docs.size());
  for (size_t i = 0; i < docs.size(); ++i) {
    ids[i] = tok.encode(docs[i]);
    bytes += static_cast<int64_t>(docs[i].size());
    tokens += static_cast<int64_t>(ids[i].size());
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::string line;
  for (const auto& doc : ids) {
    if (a.decode) {  // JSON, so that a document's own newlines stay inside its line
      std::cout << nlohmann::json({{"text", tok.decode(doc)}}).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                << "\n";
      continue;
    }
    line.clear();
    for (size_t k = 0; k < doc.size(); ++k) {
      if (k) line += ' ';
      line += std::to_string(doc[k]);
    }
    std::cout << line << "\n";
  }
  std::cout.flush();
  std::fprintf(stderr, "keel tokenize: %s (%s, %lld pieces): %zu document(s), %.2f MB -> %lld tokens in %.3f s: %.2f MB/s, %.0f tokens/s on one thread\n",
               a.tokenizer.c_str(), tok.kind().c_str(), static_cast<long long>(tok.vocab_size()), docs.size(), bytes / 1e6,
               static_cast<long long>(tokens), s, s > 0 ? bytes / 1e6 / s : 0.0, s > 0 ? tokens / s : 0.0);
  return exit_code::ok;
}

}  // namespace

Command add_tokenize_command(CLI::App& app) {
  auto args = std::make_shared<TokenizeArgs>();
  auto* cmd = app.add_subcommand("tokenize", "print the token ids of a text file (one line per document)");
  cmd->add_option("tokenizer", args->tokenizer, "tokenizer.model (SentencePiece) or tokenizer.json (byte-level BPE)")
      ->required();
  cmd->add_option("file", args->input, "UTF-8 text, encoded as one document (or JSON Lines with --jsonl)")->required();
  cmd->add_flag("--jsonl", args->jsonl, "FILE is JSON Lines: each line's \"text\" is one document");
  cmd->add_flag("--decode", args->decode, "print each document decoded from its ids, as a JSON line {\"text\": ...}");
  return [cmd, args]() -> int { return *cmd ? run_tokenize(*args) : -1; };
}

}  // namespace keel
