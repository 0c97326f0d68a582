#include "util/host.h"

#include <unistd.h>

#include <fstream>
#include <sstream>

namespace keel {

namespace {
std::string cpuinfo_field(const std::string& name) {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(name, 0) == 0 && line.find(':') != std::string::npos) {
      const size_t start = line.find(':') + 1;
      return line.substr(start + (start < line.size() && line[start] == ' ' ? 1 : 0));
    }
  return "";
}
}  // namespace

std::string cpu_model() {
  const std::string m = cpuinfo_field("model name");
  return m.empty() ? "unknown CPU" : m;
}

std::string cpu_vendor() { return cpuinfo_field("vendor_id"); }

std::string cpu_isa() {
  std::istringstream flags(" " + cpuinfo_field("flags") + " ");
  std::string out;
  bool avx512 = false;
  for (std::string f; flags >> f;) {
    for (const char* want : {"avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile"})
      if (f == want) {
        if (f.rfind("avx512", 0) == 0 || f.rfind("amx", 0) == 0) avx512 = true;
        out += (out.empty() ? "" : " ") + f;
      }
  }
  // avx2 is implied when AVX-512 is there: name only the widest.
  if (avx512 && out.rfind("avx2", 0) == 0) out = out.substr(out.find(' ') + 1);
  return out;
}

std::string host_name() {
  char host[256] = "unknown";
  gethostname(host, sizeof host - 1);
  return host;
}

}  // namespace keel
