// UTF-8 validation. SentencePiece silently maps invalid bytes to U+FFFD, which
// would make decode(encode(text)) != text; keel rejects such input instead,
// naming the first bad byte.
#pragma once

#include <cstddef>
#include <string_view>

namespace keel {

// Offset of the first byte that is not part of a well-formed UTF-8 sequence
// (RFC 3629: no overlongs, no surrogates, nothing above U+10FFFF), or npos.
size_t first_invalid_utf8(std::string_view text);

}  // namespace keel
