#include "data/tokenizer.h"

#include <sentencepiece_processor.h>

#include <cstdint>

#include "data/bpe_tokenizer.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"
#include "util/utf8.h"

namespace keel {

namespace {

const char* const kFormats =
    "keel reads a SentencePiece model (tokenizer.model: a binary ModelProto, as keel prepare and the sentencepiece "
    "package write) or a Hugging Face byte-level BPE tokenizer.json (a JSON object, as GPT-2, Llama 3, Qwen 2/3 and "
    "OLMo 2 ship)";

size_t bom_size(const std::string& bytes) { return bytes.compare(0, 3, "\xEF\xBB\xBF") == 0 ? 3 : 0; }

// What a file that SentencePiece cannot parse looks like, when that is
// plainly not a model ("" when it may be a damaged one).
std::string not_a_model(const std::string& bytes, const std::string& name) {
  if (bytes.empty()) return "the file is empty";
  size_t i = bom_size(bytes);
  while (i < bytes.size() && (bytes[i] == ' ' || bytes[i] == '\n' || bytes[i] == '\r' || bytes[i] == '\t')) ++i;
  if (i < bytes.size() && bytes[i] == '[') return "it is a JSON list, not the JSON object a tokenizer.json holds";
  const bool json_name = name.size() >= 5 && name.compare(name.size() - 5, 5, ".json") == 0;
  if (json_name) return "it is named .json but is not a JSON object";
  if (first_invalid_utf8(bytes) == std::string_view::npos && bytes.find('\0') == std::string::npos) {
    std::string start = bytes.substr(i, 40);
    for (char& c : start)
      if (c == '\n' || c == '\r' || c == '\t') c = ' ';
    return "it is text (\"" + start + (bytes.size() - i > 40 ? "...\")" : "\")");
  }
  return "";
}

// A tokenizer.json that a SentencePiece model was converted to (byte
// fallback, "▁" for spaces: what keel export-hf and transformers write) is
// not byte-level BPE, which is all keel encodes from JSON; its .model is.
std::string sentencepiece_json_hint(const std::string& json_text, const std::string& name) {
  nlohmann::json j;
  try {
    j = parse_json_bounded(json_text, name);
  } catch (const JsonError&) {
    return "";
  }
  if (!j.is_object()) return "";
  const bool fallback = j.contains("model") && j["model"].is_object() && j["model"].contains("byte_fallback") &&
                        j["model"]["byte_fallback"] == true;
  std::string pipeline;  // where the "▁" for spaces shows
  for (const char* part : {"normalizer", "pre_tokenizer", "decoder"})
    if (j.contains(part)) pipeline += json_excerpt(j[part], 1u << 16);
  const bool metaspace =
      pipeline.find("Metaspace") != std::string::npos || pipeline.find("\xE2\x96\x81") != std::string::npos;
  if (!fallback && !metaspace) return "";
  return "; it is a SentencePiece model converted to tokenizer.json (byte fallback, \"\xE2\x96\x81\" for spaces, as "
         "keel export-hf and transformers write it): give keel the tokenizer.model it was made from";
}

}  // namespace

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
  for (size_t i = bom_size(bytes); i < bytes.size(); ++i) {  // an editor's UTF-8 byte order mark is no content
    const char c = bytes[i];
    if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
    return c == '{';  // a ModelProto starts with field 1's tag, 0x0A
  }
  return false;
}

const char* Tokenizer::file_name() const { return sp_ ? "tokenizer.model" : "tokenizer.json"; }
std::string Tokenizer::kind() const { return sp_ ? "sentencepiece" : "byte-level BPE"; }

void Tokenizer::load_serialized(const std::string& proto) {
  if (is_json(proto)) {
    try {
      bpe_ = std::make_unique<BpeTokenizer>(proto, name_);
    } catch (const DataError& e) {
      throw DataError(e.what() + sentencepiece_json_hint(proto, name_));
    }
    json_ = proto;
    return;
  }
  sp_ = std::make_unique<sentencepiece::SentencePieceProcessor>();
  auto status = sp_->LoadFromSerializedProto(proto);
  if (!status.ok()) {
    // SentencePiece's parse error says nothing to whoever passed a file of
    // another kind: say what the file is, and what keel reads.
    const std::string what = not_a_model(proto, name_);
    const bool model_name = name_.size() >= 6 && name_.compare(name_.size() - 6, 6, ".model") == 0;
    throw data_error(name_, (what.empty()  ? "not a valid SentencePiece model: " + status.ToString() + "; "
                             : model_name ? "not a valid SentencePiece model: " + what + "; "
                                          : "not a tokenizer keel reads: " + what + "; ") +
                                kFormats);
  }
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
