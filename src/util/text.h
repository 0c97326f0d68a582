// Small string helpers shared across keel: durations, SI-prefixed numbers,
// affixes, hex.
#pragma once

#include <cstdint>
#include <string>

namespace keel {

// "H:MM:SS", rounded to the second; "?" when not finite or negative (an ETA
// before the first step).
std::string hms(double seconds);
// 1234567 -> "1.23M": k, M, G, T prefixes, for parameter counts and rates.
std::string si(double value);
bool starts_with(const std::string& s, const std::string& prefix);
bool ends_with(const std::string& s, const std::string& suffix);
// The time now in UTC, formatted by strftime (default "2026-12-01T04:23:07Z").
std::string utc_now(const char* format = "%Y-%m-%dT%H:%M:%SZ");
// 16 lower-case hex digits.
std::string hex64(uint64_t value);
// A name that stays one entry of one directory: non-empty, at most 255
// bytes, not "." or "..", no '/' and no NUL byte.
bool is_plain_file_name(const std::string& name);

}  // namespace keel
