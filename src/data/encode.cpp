#include "data/encode.h"

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "data/corpus_reader.h"
#include "data/progress.h"
#include "data/shard.h"
#include "data/split.h"
#include "data/tokenizer.h"
#include "util/error.h"
#include "util/stop_signal.h"

namespace keel {

namespace {

constexpr int64_t kChunkBytes = int64_t{1} << 19;  // small enough to balance a few-MB corpus over cores
constexpr size_t kPieceBytes = size_t{1} << 20;    // longest text handed to SentencePiece at once

// The tokens of one split, cut into files of exactly shard_tokens (the last
// one shorter).
class SplitWriter {
 public:
  SplitWriter(std::string dir, std::string split, int64_t vocab, int64_t shard_tokens)
      : dir_(std::move(dir)), split_(std::move(split)), vocab_(vocab), shard_tokens_(shard_tokens) {}

  void append(const int32_t* ids, size_t n) {
    while (n > 0) {
      if (!current_) open_next();
      size_t room = static_cast<size_t>(shard_tokens_ - current_->tokens());
      size_t take = std::min(room, n);
      current_->append(ids, take);
      ids += take;
      n -= take;
      if (current_->tokens() == shard_tokens_) close_current();
    }
  }
  void finish() {
    if (current_) close_current();
  }
  std::vector<ShardEntry> entries;

 private:
  void open_next() {
    char name[64];
    std::snprintf(name, sizeof name, "%s_%06zu.bin", split_.c_str(), entries.size());
    name_ = name;
    current_ = std::make_unique<ShardWriter>(dir_ + "/" + name_, vocab_);
  }
  void close_current() {
    ShardHeader h = current_->close();
    entries.push_back({name_, split_, static_cast<int64_t>(h.tokens), h.crc32});
    current_.reset();
  }
  std::string dir_, split_, name_;
  int64_t vocab_, shard_tokens_;
  std::unique_ptr<ShardWriter> current_;
};

struct Chunk {
  int64_t seq = 0;
  int64_t raw_bytes = 0;
  std::vector<Record> records;
};

struct Encoded {
  std::vector<int32_t> tokens[2];  // [0] train, [1] val
  SplitStats stats[2];
  std::vector<SourceStats> per_file;  // sparse: only files this chunk touched (path holds nothing)
  std::vector<int32_t> files;         // file index of each per_file entry
  int64_t raw_bytes = 0;
  std::exception_ptr error;
};

// SentencePiece: text longer than kPieceBytes is encoded in pieces cut after
// a newline. For keel's tokenizers this is exact: no piece contains '\n' and
// there is no dummy prefix. A line longer than kPieceBytes is cut at a UTF-8
// boundary. A byte-level BPE tokenizer streams through any length itself, and
// its words may span newlines ("\n\n" is one in Llama 3's pattern), so it gets
// the whole document.
void encode_text(const Tokenizer& tok, std::string_view text, std::vector<int32_t>& out) {
  if (!tok.is_sentencepiece()) {
    auto ids = tok.encode(text);
    out.insert(out.end(), ids.begin(), ids.end());
    return;
  }
  while (!text.empty()) {
    size_t n = text.size();
    if (n > kPieceBytes) {
      size_t nl = text.rfind('\n', kPieceBytes - 1);
      if (nl != std::string_view::npos) {
        n = nl + 1;
      } else {
        n = kPieceBytes;
        while (n > 0 && (static_cast<unsigned char>(text[n]) & 0xC0) == 0x80) --n;
      }
    }
    auto ids = tok.encode(text.substr(0, n));
    out.insert(out.end(), ids.begin(), ids.end());
    text.remove_prefix(n);
  }
}

Encoded encode_chunk(Chunk& chunk, const std::vector<SourceFile>& files, const Tokenizer& tok, int32_t eos,
                     double val_fraction) {
  Encoded out;
  out.raw_bytes = chunk.raw_bytes;
  try {
    for (auto& r : chunk.records) {
      if (!decode_record(r, files[r.file])) continue;
      const int split = is_validation_document(r.bytes, val_fraction) ? 1 : 0;
      auto& tokens = out.tokens[split];
      const size_t before = tokens.size();
      encode_text(tok, r.bytes, tokens);
      tokens.push_back(eos);
      auto& st = out.stats[split];
      st.documents += 1;
      st.tokens += static_cast<int64_t>(tokens.size() - before);
      st.text_bytes += static_cast<int64_t>(r.bytes.size());
      if (out.files.empty() || out.files.back() != r.file) {
        out.files.push_back(r.file);
        out.per_file.emplace_back();
        out.per_file.back().train_tokens = 0;
      }
      out.per_file.back().documents += 1;
      out.per_file.back().text_bytes += static_cast<int64_t>(r.bytes.size());
      if (split == 0) out.per_file.back().train_tokens += static_cast<int64_t>(tokens.size() - before);
    }
  } catch (...) {
    out.error = std::current_exception();
  }
  chunk.records.clear();
  return out;
}

void add(SplitStats& a, const SplitStats& b) {
  a.documents += b.documents;
  a.tokens += b.tokens;
  a.text_bytes += b.text_bytes;
}

}  // namespace

EncodeResult encode_corpus(const std::vector<SourceFile>& files, const std::string& proto, const std::string& out_dir,
                           const EncodeOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  Tokenizer probe = Tokenizer::from_serialized(proto, out_dir + "/tokenizer");
  const int32_t eos = probe.eos_id();
  if (eos < 0) throw DataError("tokenizer " + probe.name() + " has no EOS piece; keel needs one between documents");
  const int64_t threads = std::max<int64_t>(1, o.threads);
  const int64_t max_in_flight = 2 * threads + 2;  // bounds memory: chunks read but not yet written

  int64_t total_estimate = 0;
  for (const auto& f : files) total_estimate += estimated_text_bytes(f);

  std::mutex mu;
  std::condition_variable cv_work, cv_done, cv_space;
  std::deque<Chunk> work;
  std::map<int64_t, Encoded> done;
  int64_t produced = 0, written = 0;
  bool reader_done = false, abort = false;
  std::exception_ptr reader_error;

  auto reader = [&]() {
    try {
      Chunk chunk;
      auto push = [&]() {
        std::unique_lock<std::mutex> lock(mu);
        cv_space.wait(lock, [&] { return abort || produced - written < max_in_flight; });
        if (abort) return false;
        chunk.seq = produced++;
        work.push_back(std::move(chunk));
        chunk = Chunk();
        cv_work.notify_one();
        return true;
      };
      for (size_t i = 0; i < files.size(); ++i) {
        bool go_on = true;
        read_records(files[i], static_cast<int32_t>(i), o.separator, [&](Record&& r) {
          chunk.raw_bytes += static_cast<int64_t>(r.bytes.size());
          chunk.records.push_back(std::move(r));
          if (chunk.raw_bytes >= kChunkBytes) go_on = push();
          return go_on;
        });
        if (!go_on) break;
      }
      if (!chunk.records.empty()) push();
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu);
      reader_error = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(mu);
    reader_done = true;
    cv_work.notify_all();
    cv_done.notify_all();
  };

  auto worker = [&]() {
    Tokenizer tok = Tokenizer::from_serialized(proto, probe.name());  // one per thread: no shared state
    for (;;) {
      Chunk chunk;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv_work.wait(lock, [&] { return abort || !work.empty() || reader_done; });
        if (abort || work.empty()) return;
        chunk = std::move(work.front());
        work.pop_front();
      }
      Encoded e = encode_chunk(chunk, files, tok, eos, o.val_fraction);
      std::lock_guard<std::mutex> lock(mu);
      done.emplace(chunk.seq, std::move(e));
      cv_done.notify_all();
    }
  };

  std::vector<std::thread> pool;
  auto stop_all = [&]() {
    {
      std::lock_guard<std::mutex> lock(mu);
      abort = true;
    }
    cv_work.notify_all();
    cv_space.notify_all();
    for (auto& t : pool)
      if (t.joinable()) t.join();
  };
  struct Joiner {  // threads are stopped on every exit path, exceptions included
    std::function<void()> f;
    ~Joiner() { f(); }
  } joiner{stop_all};

  pool.emplace_back(reader);
  for (int64_t i = 0; i < threads; ++i) pool.emplace_back(worker);

  EncodeResult result;
  result.sources.resize(files.size());
  for (size_t i = 0; i < files.size(); ++i) {
    result.sources[i].path = files[i].path;
    result.sources[i].format = format_name(files[i].format);
    result.sources[i].compression = compression_name(files[i].compression);
    result.sources[i].bytes = files[i].bytes;
    result.sources[i].train_tokens = 0;
    result.sources[i].entry = files[i].entry;
  }
  SplitWriter train(out_dir, "train", probe.vocab_size(), o.shard_tokens);
  SplitWriter val(out_dir, "val", probe.vocab_size(), o.shard_tokens);
  Progress progress("encode", total_estimate, o.progress);
  int64_t raw_done = 0;

  for (;;) {
    Encoded e;
    {
      std::unique_lock<std::mutex> lock(mu);
      cv_done.wait(lock, [&] { return done.count(written) || (reader_done && written == produced); });
      auto it = done.find(written);
      if (it == done.end()) break;  // reader finished and everything is written
      e = std::move(it->second);
      done.erase(it);
    }
    if (e.error) std::rethrow_exception(e.error);
    train.append(e.tokens[0].data(), e.tokens[0].size());
    val.append(e.tokens[1].data(), e.tokens[1].size());
    add(result.train, e.stats[0]);
    add(result.val, e.stats[1]);
    for (size_t k = 0; k < e.files.size(); ++k) {
      result.sources[e.files[k]].documents += e.per_file[k].documents;
      result.sources[e.files[k]].text_bytes += e.per_file[k].text_bytes;
      result.sources[e.files[k]].train_tokens += e.per_file[k].train_tokens;
    }
    raw_done += e.raw_bytes;
    progress.update(raw_done);
    // A chunk is the unit of work: a signal is honoured within one (the
    // staging directory is then removed, the data directory untouched).
    throw_if_stop_requested("encoding", "the partial shards were removed; data.dir is unchanged");
    {
      std::lock_guard<std::mutex> lock(mu);
      ++written;
    }
    cv_space.notify_one();
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    if (reader_error) std::rethrow_exception(reader_error);
  }
  train.finish();
  val.finish();
  progress.finish(raw_done);
  result.shards = train.entries;
  result.shards.insert(result.shards.end(), val.entries.begin(), val.entries.end());
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return result;
}

}  // namespace keel
