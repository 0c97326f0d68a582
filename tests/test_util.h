// Small helpers shared by the test programs.
#pragma once

#include <string>

namespace keel_test {

// Runs `build/keel ARGS`, capturing stdout+stderr; returns the exit code.
int run_keel(const std::string& args, std::string* output);
// A fresh empty directory under the system temp dir.
std::string make_temp_dir(const std::string& tag);
std::string source_path(const std::string& relative);
// Whole-file binary read and write (no std::filesystem: see src/util/fs.h).
std::string read_file(const std::string& path);
void write_file(const std::string& path, const std::string& bytes);
// English-like text from a small grammar: `docs` documents of 8 sentences,
// separated by "%" lines. Deterministic in `seed`.
std::string make_sentence_corpus(unsigned seed, int docs);

}  // namespace keel_test
