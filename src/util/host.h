// What machine this is, for every speed figure keel records: the same code
// measured 2x apart on two x86 machines, so a figure without its CPU model
// and vector ISA cannot be compared.
#pragma once

#include <string>

namespace keel {

std::string cpu_model();  // /proc/cpuinfo "model name", or "unknown CPU"
std::string cpu_vendor();  // /proc/cpuinfo "vendor_id" ("GenuineIntel", "AuthenticAMD"), or ""
// The vector extensions the kernels can use, as the kernel reports them:
// "avx512f avx512_bf16 amx_bf16 ..." (the subset present), or "avx2", or "".
std::string cpu_isa();
std::string host_name();

}  // namespace keel
