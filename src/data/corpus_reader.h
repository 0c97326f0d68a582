// Reads source files as a stream of documents ("records").
//
// Document boundaries:
//   - jsonl: one document per non-blank line, the line's "text" field.
//   - text, data.doc_separator empty: the whole file is one document.
//   - text, data.doc_separator set: a line equal to the separator (a trailing
//     '\r' is ignored) ends a document; the separator line belongs to no
//     document. Fortune files use "%", TinyStories "<|endoftext|>".
// A text document never includes the line terminator ("\n" or "\r\n") of its
// last line (EOS takes its place in the token stream); a JSONL "text" is taken
// verbatim. Empty documents are dropped.
//
// Reading and decoding are split so the expensive part (JSON parsing and
// UTF-8 checks) can run on the encoder's worker threads, while the reader
// remains one sequential pass over each file.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "data/sources.h"

namespace keel {

// One document's bytes as read, before validation.
struct Record {
  std::string bytes;   // the document (text) or one JSON line (jsonl)
  int32_t file = 0;    // index into the source list
  int64_t line = 1;    // 1-based line where the record starts
  int64_t offset = 0;  // byte offset of its first byte in the uncompressed file
};

// Calls `emit` with each non-empty record of `file` in order; `emit` returns
// false to stop early. Throws DataError on I/O, gzip or zstd errors, naming the
// file and the compressed byte offset. A gzip file may hold several members
// one after another; bytes after the last one that do not start another
// member are an error (zlib's gzread ignored them).
void read_records(const SourceFile& file, int32_t index, const std::string& separator,
                  const std::function<bool(Record&&)>& emit);

// Turns a record into its document text in place (parses the JSON line,
// checks UTF-8). Returns false when the document is empty. Throws DataError
// naming file, line and byte offset of the problem.
bool decode_record(Record& record, const SourceFile& file);

}  // namespace keel
