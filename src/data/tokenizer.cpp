#include "data/tokenizer.h"

#include <sentencepiece_processor.h>

#include <cstdint>

#include "data/bpe_tokenizer.h"
#include "util/error.h"
#include "util/fs.h"

namespace keel {

Tokenizer::Tokenizer(const std::string& model_path) : name_(model_path) {
  load_serialized(read_tokenizer_file(model_path));
}

std::string read_tokenizer_file(const std::string& path) {
  try {
    return read_small_file(path, kMaxTokenizerBytes);
  } catch (const FileError& e) {  // a tokenizer that cannot be read is a data error, like a bad one
    throw DataError(e.what());
  }
}

Tokenizer Tokenizer::from_serialized(const std::string& proto, const std::string& name) {
  Tokenizer t;
  t.name_ = name;
  t.load_serialized(proto);
  return t;
}

bool Tokenizer::is_json(const std::string& bytes) {
  for (char c : bytes) {
    if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
    return c == '{';  // a ModelProto starts with field 1's tag, 0x0A
  }
  return false;
}

const char* Tokenizer::file_name() const { return sp_ ? "tokenizer.model" : "tokenizer.json"; }
std::string Tokenizer::kind() const { return sp_ ? "sentencepiece" : "byte-level BPE"; }

void Tokenizer::load_serialized(const std::string& proto) {
  if (is_json(proto)) {
    bpe_ = std::make_unique<BpeTokenizer>(proto, name_);
    json_ = proto;
    return;
  }
  sp_ = std::make_unique<sentencepiece::SentencePieceProcessor>();
  auto status = sp_->LoadFromSerializedProto(proto);
  if (!status.ok())
    throw data_error(name_, "not a valid SentencePiece model: " + status.ToString());
  if (sp_->GetPieceSize() <= 0) throw data_error(name_, "SentencePiece model has no pieces");
}

Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  if (bpe_) {
    std::vector<int32_t> out;
    bpe_->encode(text, out);
    return out;
  }
  std::vector<int> ids;
  auto status = sp_->Encode(absl::string_view(text.data(), text.size()), &ids);
  if (!status.ok()) throw DataError("tokenizer " + name_ + ": encode failed: " + status.ToString());
  return std::vector<int32_t>(ids.begin(), ids.end());
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  if (bpe_) return bpe_->decode(ids);
  std::vector<int> v(ids.begin(), ids.end());
  const int n = sp_->GetPieceSize();
  for (int id : v)
    if (id < 0 || id >= n)
      throw DataError("tokenizer " + name_ + ": cannot decode id " + std::to_string(id) + " (vocab size " +
                      std::to_string(n) + ")");
  std::string out;
  auto status = sp_->Decode(v, &out);
  if (!status.ok()) throw DataError("tokenizer " + name_ + ": decode failed: " + status.ToString());
  return out;
}

std::string Tokenizer::decode(const std::vector<int64_t>& ids) const {
  std::vector<int32_t> v;
  v.reserve(ids.size());
  for (int64_t id : ids) {
    if (id < 0 || id > INT32_MAX)
      throw DataError("tokenizer " + name_ + ": cannot decode id " + std::to_string(id));
    v.push_back(static_cast<int32_t>(id));
  }
  return decode(v);
}

std::string Tokenizer::piece(int32_t id) const {
  if (bpe_) return bpe_->piece(id);
  if (id < 0 || id >= sp_->GetPieceSize())
    throw DataError("tokenizer " + name_ + ": no piece with id " + std::to_string(id));
  return sp_->IdToPiece(id);
}

int64_t Tokenizer::vocab_size() const { return bpe_ ? bpe_->vocab_size() : sp_->GetPieceSize(); }
int32_t Tokenizer::bos_id() const { return bpe_ ? bpe_->bos_id() : sp_->bos_id(); }
int32_t Tokenizer::eos_id() const { return bpe_ ? bpe_->eos_id() : sp_->eos_id(); }
int32_t Tokenizer::pad_id() const { return bpe_ ? bpe_->pad_id() : sp_->pad_id(); }
int32_t Tokenizer::unk_id() const { return bpe_ ? bpe_->unk_id() : sp_->unk_id(); }

bool Tokenizer::byte_fallback() const {
  if (bpe_) return false;  // byte-level: every byte is a symbol, nothing to fall back to
  int bytes = 0;
  for (int i = 0; i < sp_->GetPieceSize() && bytes < 256; ++i) bytes += sp_->IsByte(i) ? 1 : 0;
  return bytes == 256;
}

std::string Tokenizer::serialized() const { return bpe_ ? json_ : sp_->serialized_model_proto(); }

}  // namespace keel
