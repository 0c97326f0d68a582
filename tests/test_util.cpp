#include "test_util.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <random>
#include <vector>
#include <stdexcept>

namespace keel_test {

namespace {
// Compiled-in paths, unless the environment names others: the GPU check
// runs these programs on another machine, from another checkout.
std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}
}  // namespace

int run_keel(const std::string& args, std::string* output) {
  std::string cmd = env_or("KEEL_BINARY", KEEL_BINARY) + " " + args + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) throw std::runtime_error("popen failed for: " + cmd);
  std::array<char, 4096> buf;
  std::string out;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) out.append(buf.data(), n);
  int status = pclose(pipe);
  if (output) *output = out;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int spawn_keel(const std::vector<std::string>& args, const std::string& log) {
  const std::string binary = env_or("KEEL_BINARY", KEEL_BINARY);
  std::fflush(nullptr);  // or the child's freopen writes our buffered output a second time
  const pid_t pid = fork();
  if (pid == 0) {
    if (!freopen(log.c_str(), "a", stdout) || !freopen(log.c_str(), "a", stderr)) _exit(126);
    std::vector<char*> argv = {const_cast<char*>(binary.c_str())};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  if (pid < 0) throw std::runtime_error("fork failed for keel " + (args.empty() ? "" : args[0]));
  return pid;
}

int wait_exit(int pid, bool* killed) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  if (killed) *killed = !WIFEXITED(status);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string make_temp_dir(const std::string& tag) {
  // Not std::filesystem::temp_directory_path: libtorch.so exports its own
  // std::filesystem symbols (see src/util/fs.h).
  const char* tmp = std::getenv("TMPDIR");
  std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/keel_" + tag + "_XXXXXX";
  if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed for " + tmpl);
  return tmpl;
}

std::string source_path(const std::string& relative) {
  return env_or("KEEL_SOURCE_DIR", KEEL_SOURCE_DIR) + "/" + relative;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string make_sentence_corpus(unsigned seed, int docs) {
  const std::vector<std::string> subj = {"The cat", "A dog", "My friend", "The old man", "Every child", "The river",
                                         "Our teacher", "The small bird"};
  const std::vector<std::string> verb = {"sees", "likes", "follows", "finds", "remembers", "draws", "carries"};
  const std::vector<std::string> obj = {"the red ball", "a quiet house", "the long road", "an apple",
                                        "the blue sky", "a warm fire", "the morning light"};
  std::mt19937 rng(seed);
  std::string text;
  for (int doc = 0; doc < docs; ++doc) {
    for (int s = 0; s < 8; ++s) {
      // Drawn one statement each: the order of operands of + is unspecified
      // (GCC and Clang differ). This is the order GCC took, which the tests'
      // thresholds were set on.
      const auto o = rng() % obj.size(), v = rng() % verb.size(), n = rng() % subj.size();
      text += subj[n] + " " + verb[v] + " " + obj[o] + ". ";
    }
    text += "\n%\n";
  }
  return text;
}

}  // namespace keel_test
