// Tokenizer: a SentencePiece model, loaded from a standard .model file (the
// serialized ModelProto that the sentencepiece Python package and Hugging Face
// tokenizers also read), or a Hugging Face byte-level BPE tokenizer.json
// (bpe_tokenizer.h: GPT-2, Llama 3, Qwen 2/3, OLMo 2). Which one a file is
// follows from its bytes: a JSON object is a tokenizer.json.
//
// Tokenizers trained by keel (tokenizer_train.h) have the fixed special ids
// pad=0, bos=1, eos=2, unk=3, byte fallback on, and identity normalization
// without a dummy prefix, so decode(encode(text)) == text for any valid UTF-8
// and encode(a + b) == encode(a) + encode(b) whenever a ends in '\n'.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sentencepiece { class SentencePieceProcessor; }

namespace keel { class BpeTokenizer; }

namespace keel {

// Tokenizer files are read whole; the largest released ones (Gemma's
// tokenizer.json) are about 33 MB.
constexpr size_t kMaxTokenizerBytes = size_t{256} << 20;
// The bytes of a tokenizer file. Throws DataError naming it when it is
// missing, unreadable or larger than kMaxTokenizerBytes.
std::string read_tokenizer_file(const std::string& path);

class Tokenizer {
 public:
  // Throws DataError naming the file when it is missing or not a valid model.
  explicit Tokenizer(const std::string& model_path);
  // From a file's bytes (a serialized ModelProto or tokenizer.json); `name`
  // labels it in errors.
  static Tokenizer from_serialized(const std::string& proto, const std::string& name);
  // True when `bytes` look like a tokenizer.json (a JSON object), not a ModelProto.
  static bool is_json(const std::string& bytes);
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  std::vector<int32_t> encode(std::string_view text) const;    // no BOS/EOS added
  std::string decode(const std::vector<int32_t>& ids) const;   // control ids (BOS/EOS/PAD) decode to ""
  std::string decode(const std::vector<int64_t>& ids) const;
  std::string piece(int32_t id) const;                         // "▁the", "<0x0A>", "</s>"

  int64_t vocab_size() const;
  int32_t bos_id() const;  // -1 when the model has none
  int32_t eos_id() const;
  int32_t pad_id() const;
  int32_t unk_id() const;
  bool byte_fallback() const;  // true when the model has all 256 <0xNN> pieces
  const std::string& name() const { return name_; }
  std::string serialized() const;  // the file's bytes: the ModelProto, or tokenizer.json unchanged
  bool is_sentencepiece() const { return sp_ != nullptr; }
  // The name a data or checkpoint directory stores it under: tokenizer.model
  // for SentencePiece, tokenizer.json for a Hugging Face BPE tokenizer.
  const char* file_name() const;
  std::string kind() const;        // "sentencepiece" | "byte-level BPE"

 private:
  Tokenizer() = default;
  void load_serialized(const std::string& proto);
  std::string name_;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;  // one of these two is set
  std::unique_ptr<BpeTokenizer> bpe_;
  std::string json_;  // the tokenizer.json bytes, for serialized()
};

}  // namespace keel
