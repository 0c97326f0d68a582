#include "interop/hf_tokenizer.h"

#include <algorithm>
#include <cstring>
#include <tuple>
#include <unordered_map>

#include "util/error.h"

namespace keel {

namespace {

using ojson = nlohmann::ordered_json;

// Protobuf wire format: a key varint (field << 3 | wire type), then a varint
// (0), 8 bytes (1), a length-prefixed blob (2) or 4 bytes (5).
class WireReader {
 public:
  WireReader(const char* data, size_t size, const std::string& what) : p_(data), end_(data + size), what_(what) {}
  bool done() const { return p_ >= end_; }

  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p_ >= end_) fail("truncated varint");
      const uint8_t b = static_cast<uint8_t>(*p_++);
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    fail("varint longer than 10 bytes");
    return 0;
  }

  // Next field; returns false at the end.
  bool next(uint32_t* field, uint32_t* wire) {
    if (done()) return false;
    const uint64_t key = varint();
    *field = static_cast<uint32_t>(key >> 3);
    *wire = static_cast<uint32_t>(key & 7);
    return true;
  }

  std::string bytes() {
    const uint64_t n = varint();
    if (n > static_cast<uint64_t>(end_ - p_)) fail("length-delimited field runs past the end");
    std::string s(p_, static_cast<size_t>(n));
    p_ += n;
    return s;
  }

  float fixed32_float() {
    if (end_ - p_ < 4) fail("truncated fixed32");
    float f;
    std::memcpy(&f, p_, 4);  // little-endian, as the host (x86-64, aarch64)
    p_ += 4;
    return f;
  }

  void skip(uint32_t wire) {
    switch (wire) {
      case 0: varint(); break;
      case 1: advance(8); break;
      case 2: bytes(); break;
      case 5: advance(4); break;
      default: fail("unsupported wire type " + std::to_string(wire));
    }
  }

  [[noreturn]] void fail(const std::string& why) const {
    throw InteropError(what_ + ": not a valid SentencePiece model (" + why + ")");
  }

 private:
  void advance(size_t n) {
    if (static_cast<size_t>(end_ - p_) < n) fail("truncated field");
    p_ += n;
  }
  const char* p_;
  const char* end_;
  std::string what_;
};

SpmPiece parse_piece(const std::string& blob, const std::string& what) {
  WireReader r(blob.data(), blob.size(), what);
  SpmPiece p;
  uint32_t field, wire;
  while (r.next(&field, &wire)) {
    if (field == 1 && wire == 2) p.piece = r.bytes();
    else if (field == 2 && wire == 5) p.score = r.fixed32_float();
    else if (field == 3 && wire == 0) p.type = static_cast<int>(r.varint());
    else r.skip(wire);
  }
  return p;
}

bool is_special(const SpmPiece& p) { return p.type == SpmPiece::control || p.type == SpmPiece::unknown; }

// Byte offsets of the UTF-8 character boundaries strictly inside `s`.
std::vector<size_t> inner_char_boundaries(const std::string& s) {
  std::vector<size_t> out;
  for (size_t i = 1; i < s.size(); ++i)
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) out.push_back(i);
  return out;
}

ojson replace(const std::string& from, const std::string& to) {
  return {{"type", "Replace"}, {"pattern", {{"String", from}}}, {"content", to}};
}

const std::string kSpace = "\xE2\x96\x81";  // U+2581 LOWER ONE EIGHTH BLOCK, SentencePiece's space

std::string piece_of_type(const SpmModel& m, int64_t id) {
  if (id < 0 || id >= static_cast<int64_t>(m.pieces.size())) return "";
  return m.pieces[static_cast<size_t>(id)].piece;
}

}  // namespace

SpmModel parse_spm_model(const std::string& proto, const std::string& what) {
  SpmModel m;
  WireReader r(proto.data(), proto.size(), what);
  uint32_t field, wire;
  while (r.next(&field, &wire)) {
    if (field == 1 && wire == 2) {
      m.pieces.push_back(parse_piece(r.bytes(), what));
    } else if (field == 2 && wire == 2) {  // TrainerSpec
      const std::string blob = r.bytes();
      WireReader t(blob.data(), blob.size(), what);
      while (t.next(&field, &wire)) {
        if (field == 3 && wire == 0) m.model_type = static_cast<int>(t.varint());
        else t.skip(wire);
      }
    } else if (field == 3 && wire == 2) {  // NormalizerSpec
      const std::string blob = r.bytes();
      WireReader n(blob.data(), blob.size(), what);
      while (n.next(&field, &wire)) {
        if (field == 1 && wire == 2) m.normalizer_name = n.bytes();
        else if (field == 2 && wire == 2) m.has_precompiled_charsmap = !n.bytes().empty();
        else if (field == 3 && wire == 0) m.add_dummy_prefix = n.varint() != 0;
        else if (field == 4 && wire == 0) m.remove_extra_whitespaces = n.varint() != 0;
        else if (field == 5 && wire == 0) m.escape_whitespaces = n.varint() != 0;
        else n.skip(wire);
      }
    } else {
      r.skip(wire);
    }
  }
  if (m.pieces.empty()) r.fail("no pieces");
  return m;
}

ojson hf_tokenizer_json(const SpmModel& m, const std::string& what) {
  if (m.model_type != SpmModel::bpe && m.model_type != SpmModel::unigram)
    throw InteropError(what + ": SentencePiece model type " + std::to_string(m.model_type) +
                       " (word/char) has no tokenizer.json equivalent written by keel; use bpe or unigram");
  if (m.has_precompiled_charsmap)
    throw InteropError(what + ": normalization rule '" + m.normalizer_name +
                       "' (a precompiled character map) is not supported; keel's tokenizers use 'identity'");
  if (m.remove_extra_whitespaces)
    throw InteropError(what + ": remove_extra_whitespaces is on, which tokenizer.json cannot express exactly");
  const std::string unk = [&] {
    for (const auto& p : m.pieces)
      if (p.type == SpmPiece::unknown) return p.piece;
    return std::string();
  }();
  bool byte_fallback = false;
  for (const auto& p : m.pieces) byte_fallback |= p.type == SpmPiece::byte;

  ojson added = ojson::array();
  for (size_t i = 0; i < m.pieces.size(); ++i) {
    const auto& p = m.pieces[i];
    if (!is_special(p) && p.type != SpmPiece::user_defined) continue;
    // User-defined pieces are matched as a whole in SentencePiece, as added tokens are.
    added.push_back({{"id", i},
                     {"content", p.piece},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", p.type == SpmPiece::user_defined},
                     {"special", is_special(p)}});
  }

  ojson normalizers = ojson::array();
  if (m.add_dummy_prefix) normalizers.push_back({{"type", "Prepend"}, {"prepend", kSpace}});
  if (m.escape_whitespaces) normalizers.push_back(replace(" ", kSpace));
  ojson normalizer = nullptr;
  if (normalizers.size() == 1) normalizer = normalizers[0];
  else if (normalizers.size() > 1) normalizer = {{"type", "Sequence"}, {"normalizers", normalizers}};

  ojson decoders = ojson::array();
  if (m.escape_whitespaces) decoders.push_back(replace(kSpace, " "));
  if (byte_fallback) decoders.push_back({{"type", "ByteFallback"}});
  decoders.push_back({{"type", "Fuse"}});
  if (m.add_dummy_prefix) decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});

  ojson model;
  if (m.model_type == SpmModel::bpe) {
    ojson vocab = ojson::object();
    std::unordered_map<std::string, int64_t> mergeable;  // pieces that BPE builds words from
    for (size_t i = 0; i < m.pieces.size(); ++i) {
      const auto& p = m.pieces[i];
      if (vocab.contains(p.piece))
        throw InteropError(what + ": piece '" + p.piece + "' appears twice");
      vocab[p.piece] = i;
      if (p.type == SpmPiece::normal || p.type == SpmPiece::user_defined) mergeable[p.piece] = static_cast<int64_t>(i);
    }
    // (merged id, left id, right id): SentencePiece applies the merge whose
    // result has the highest score first, i.e. the lowest id.
    std::vector<std::tuple<int64_t, int64_t, int64_t>> merges;
    for (size_t i = 0; i < m.pieces.size(); ++i) {
      const auto& p = m.pieces[i];
      if (p.type != SpmPiece::normal) continue;
      for (size_t cut : inner_char_boundaries(p.piece)) {
        auto l = mergeable.find(p.piece.substr(0, cut)), r = mergeable.find(p.piece.substr(cut));
        if (l != mergeable.end() && r != mergeable.end())
          merges.emplace_back(static_cast<int64_t>(i), l->second, r->second);
      }
    }
    std::sort(merges.begin(), merges.end());
    ojson merge_list = ojson::array();
    for (const auto& [id, l, r] : merges)
      merge_list.push_back({m.pieces[static_cast<size_t>(l)].piece, m.pieces[static_cast<size_t>(r)].piece});
    model = {{"type", "BPE"},
             {"dropout", nullptr},
             {"unk_token", unk.empty() ? ojson(nullptr) : ojson(unk)},
             {"continuing_subword_prefix", nullptr},
             {"end_of_word_suffix", nullptr},
             {"fuse_unk", true},
             {"byte_fallback", byte_fallback},
             {"ignore_merges", false},
             {"vocab", vocab},
             {"merges", merge_list}};
  } else {
    ojson vocab = ojson::array();
    int64_t unk_id = -1;
    for (size_t i = 0; i < m.pieces.size(); ++i) {
      vocab.push_back({m.pieces[i].piece, m.pieces[i].score});
      if (m.pieces[i].type == SpmPiece::unknown) unk_id = static_cast<int64_t>(i);
    }
    model = {{"type", "Unigram"},
             {"unk_id", unk_id >= 0 ? ojson(unk_id) : ojson(nullptr)},
             {"vocab", vocab},
             {"byte_fallback", byte_fallback}};
  }

  ojson t;
  t["version"] = "1.0";
  t["truncation"] = nullptr;
  t["padding"] = nullptr;
  t["added_tokens"] = added;
  t["normalizer"] = normalizer;
  t["pre_tokenizer"] = nullptr;  // SentencePiece encodes the whole normalized string
  t["post_processor"] = nullptr; // no BOS/EOS added, as keel's encode
  t["decoder"] = {{"type", "Sequence"}, {"decoders", decoders}};
  t["model"] = model;
  return t;
}

ojson hf_special_tokens_map_json(const TokenOf& token_of, int64_t bos, int64_t eos, int64_t pad, int64_t unk) {
  ojson s = ojson::object();
  if (bos >= 0) s["bos_token"] = token_of(bos);
  if (eos >= 0) s["eos_token"] = token_of(eos);
  if (unk >= 0) s["unk_token"] = token_of(unk);
  if (pad >= 0) s["pad_token"] = token_of(pad);
  return s;
}

ojson hf_special_tokens_map_json(const SpmModel& m, int64_t bos, int64_t eos, int64_t pad, int64_t unk) {
  return hf_special_tokens_map_json([&](int64_t id) { return piece_of_type(m, id); }, bos, eos, pad, unk);
}

ojson hf_tokenizer_config_json(const SpmModel& m, int64_t bos, int64_t eos, int64_t pad, int64_t unk,
                               int64_t model_max_length) {
  return hf_tokenizer_config_json([&](int64_t id) { return piece_of_type(m, id); }, bos, eos, pad, unk,
                                  model_max_length);
}

ojson hf_tokenizer_config_json(const TokenOf& token_of, int64_t bos, int64_t eos, int64_t pad, int64_t unk,
                               int64_t model_max_length) {
  // The generic class reads tokenizer.json as it is; a model-specific class
  // (LlamaTokenizerFast) would re-derive pieces and add a BOS.
  ojson c;
  c["tokenizer_class"] = "PreTrainedTokenizerFast";
  const ojson specials = hf_special_tokens_map_json(token_of, bos, eos, pad, unk);
  for (auto it = specials.begin(); it != specials.end(); ++it) c[it.key()] = it.value();
  c["add_bos_token"] = false;
  c["add_eos_token"] = false;
  c["clean_up_tokenization_spaces"] = false;
  c["model_max_length"] = model_max_length;
  return c;
}

}  // namespace keel
