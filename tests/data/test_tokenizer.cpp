// The tokenizer: deterministic training, lossless round trips, fixed special
// ids, and clear errors for vocab sizes the corpus cannot support.
#include <gtest/gtest.h>

#include "data/sources.h"
#include "data/tokenizer.h"
#include "data/tokenizer_train.h"
#include "interop/hf_tokenizer.h"
#include "test_data_util.h"
#include "util/error.h"

using namespace keel;
using namespace keel_test;

namespace {

struct Corpus {
  std::string dir, file;
  std::vector<SourceFile> files;
};

const Corpus& corpus() {
  static Corpus c = [] {
    Corpus k;
    k.dir = make_temp_dir("tok");
    k.file = k.dir + "/corpus.txt";
    write_text(k.file, join_documents(make_documents(400, 1)));
    k.files = expand_sources({k.file});
    return k;
  }();
  return c;
}

std::string train(int64_t vocab, const std::string& type = "bpe") {
  TokenizerTrainOptions o;
  o.type = type;
  o.vocab_size = vocab;
  o.separator = "<|endoftext|>";
  return train_tokenizer(sample_for_tokenizer(corpus().files, o), o, corpus().file);
}

const Tokenizer& tok() {
  static Tokenizer t = Tokenizer::from_serialized(train(400), "test");
  return t;
}

}  // namespace

TEST(Tokenizer, TrainingIsDeterministic) {
  EXPECT_EQ(train(400), train(400));
  EXPECT_EQ(train(400, "unigram"), train(400, "unigram"));
  EXPECT_NE(train(400), train(420));
}

TEST(Tokenizer, SpecialIdsAndVocab) {
  EXPECT_EQ(tok().vocab_size(), 400);
  EXPECT_EQ(tok().pad_id(), 0);
  EXPECT_EQ(tok().bos_id(), 1);
  EXPECT_EQ(tok().eos_id(), 2);
  EXPECT_EQ(tok().unk_id(), 3);
  EXPECT_TRUE(tok().byte_fallback());
  EXPECT_EQ(tok().piece(2), "</s>");
  EXPECT_EQ(tok().piece(4), "<0x00>");
}

TEST(Tokenizer, RoundTripIsLossless) {
  const std::vector<std::string> texts = {
      "The model learns to predict the next token.",
      "  leading and   repeated spaces, trailing space ",
      "tabs\tand\r\nCRLF line ends\n\nand blank lines\n",
      "unseen characters: 東京 🙂 ß Ω \x01 control",
      "digits 1234567890 and \"quotes\" {braces} <angle> #hash",
      "",
      "\n",
  };
  for (const auto& t : texts) {
    auto ids = tok().encode(t);
    for (int32_t id : ids) {
      EXPECT_GE(id, 0);
      EXPECT_LT(id, tok().vocab_size());
      EXPECT_NE(id, tok().unk_id()) << "byte fallback should make <unk> unnecessary: " << t;
    }
    EXPECT_EQ(tok().decode(ids), t);
  }
}

TEST(Tokenizer, EncodingSplitsExactlyAfterNewlines) {
  // The encoder cuts very long documents after a newline; this must not
  // change the tokens.
  std::string a = "Attention logits grow large.\n", b = "Layer norm keeps them small.";
  auto ab = tok().encode(a + b), ea = tok().encode(a), eb = tok().encode(b);
  ea.insert(ea.end(), eb.begin(), eb.end());
  EXPECT_EQ(ab, ea);
}

TEST(Tokenizer, ModelFileRoundTripsThroughDisk) {
  std::string path = corpus().dir + "/t.model";
  write_text(path, tok().serialized());
  Tokenizer loaded(path);
  EXPECT_EQ(loaded.vocab_size(), 400);
  EXPECT_EQ(loaded.encode("the loss falls"), tok().encode("the loss falls"));
}

TEST(Tokenizer, DecodeOfInt64IdsAndControlIds) {
  std::vector<int64_t> ids;
  for (int32_t id : tok().encode("step")) ids.push_back(id);
  ids.push_back(tok().eos_id());
  EXPECT_EQ(tok().decode(ids), "step");  // EOS decodes to nothing
  EXPECT_THROW(tok().decode(std::vector<int64_t>{400}), DataError);
}

TEST(Tokenizer, VocabTooSmallIsAClearError) {
  try {
    train(200);
    FAIL() << "expected DataError";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("model.vocab_size = 200"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("260"), std::string::npos) << e.what();
  }
  try {
    train(280);  // above the reserved ids, below reserved + distinct characters
    FAIL() << "expected DataError";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("raise model.vocab_size"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(corpus().file), std::string::npos) << e.what();
  }
}

TEST(Tokenizer, VocabTooLargeForTheCorpusIsAClearError) {
  try {
    train(30000);
    FAIL() << "expected DataError";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("lower model.vocab_size"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(corpus().file), std::string::npos) << e.what();
  }
}

TEST(Tokenizer, BadModelFilesNameTheFile) {
  std::string missing = corpus().dir + "/missing.model";
  try {
    Tokenizer t(missing);
    FAIL();
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos);
  }
  std::string junk = corpus().dir + "/junk.model";
  write_text(junk, "this is not a protobuf");
  try {
    Tokenizer t(junk);
    FAIL();
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find(junk), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("not a valid SentencePiece model"), std::string::npos);
  }
}

TEST(Tokenizer, SampleLeavesOutValidationDocumentsAndRespectsBudget) {
  TokenizerTrainOptions o;
  o.separator = "<|endoftext|>";
  TokenizerSample all = sample_for_tokenizer(corpus().files, o);
  EXPECT_EQ(all.documents, 400);
  o.val_fraction = 0.25;
  TokenizerSample train_only = sample_for_tokenizer(corpus().files, o);
  EXPECT_LT(train_only.documents, 360);
  EXPECT_GT(train_only.documents, 240);
  o.val_fraction = 0;
  o.sample_bytes = all.bytes / 4;
  TokenizerSample small = sample_for_tokenizer(corpus().files, o);
  EXPECT_LT(small.bytes, all.bytes / 2);
  EXPECT_GE(small.bytes, all.bytes / 8);
}

// Issue 31: the sample rate rests on an estimate of the text's size; when it
// passed over every training document (here one document far larger than
// the budget) training said "no text to train the tokenizer on" with text
// there. The documents are then taken in order; and when there really is no
// text, the message says what was read.
TEST(Tokenizer, SampleHoldsTextWheneverTheTrainingSplitHasSome) {
  const std::string dir = make_temp_dir("tok_sample");
  write_text(dir + "/one.txt", join_documents(make_documents(400, 3)));
  TokenizerTrainOptions o;
  o.separator = "";  // the whole file is one document
  o.sample_bytes = 1000;
  const TokenizerSample one = sample_for_tokenizer(expand_sources({dir + "/one.txt"}), o);
  EXPECT_EQ(one.documents, 1);
  EXPECT_GT(one.bytes, 1000);

  write_text(dir + "/empty.jsonl", "{\"text\": \"\"}\n{\"text\": \"\"}\n{\"text\": \"\"}\n");
  const TokenizerSample none = sample_for_tokenizer(expand_sources({dir + "/empty.jsonl"}), o);
  try {
    train_tokenizer(none, o, dir + "/empty.jsonl");
    FAIL() << "trained on nothing";
  } catch (const DataError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("no text to train the tokenizer on: 3 document(s) read: 3 empty, 0 held out"), std::string::npos)
        << msg;
  }
}

// Issue 31: a file of another kind said "not a valid SentencePiece model:
// Internal: ... ParseFromArray"; it now says what the file is and what keel
// reads. A tokenizer.json with a UTF-8 byte order mark is a tokenizer.json.
TEST(Tokenizer, FilesOfAnotherKindSayWhatTheyAreAndWhatKeelReads) {
  const std::string dir = make_temp_dir("tok_kind");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "the file is empty"},
      {"[1, 2]", "it is a JSON list"},
      {"vocab: 1\n", "it is named .json but is not a JSON object"}};
  for (const auto& [content, says] : cases) {
    SCOPED_TRACE(says);
    const std::string path = dir + "/tokenizer.json";
    write_text(path, content);
    try {
      Tokenizer t(path);
      FAIL() << "loaded";
    } catch (const DataError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(path + ": not a tokenizer keel reads: " + says), std::string::npos) << msg;
      EXPECT_NE(msg.find("Hugging Face byte-level BPE tokenizer.json (a JSON object"), std::string::npos) << msg;
      EXPECT_EQ(msg.find("Internal"), std::string::npos) << msg;
    }
  }
  // A SentencePiece model converted to tokenizer.json (as keel export-hf
  // writes it) is not byte-level BPE: the message points to its .model.
  // With a byte order mark it is still JSON: the same refusal, not a
  // SentencePiece parse error.
  const std::string converted = dir + "/converted.json";
  const std::string json = hf_tokenizer_json(parse_spm_model(tok().serialized(), "test"), "test").dump();
  for (const std::string& bom : {std::string(), std::string("\xEF\xBB\xBF")}) {
    write_text(converted, bom + json);
    try {
      Tokenizer t(converted);
      FAIL() << "loaded (BOM: " << !bom.empty() << ")";
    } catch (const DataError& e) {
      EXPECT_NE(std::string(e.what()).find("give keel the tokenizer.model it was made from"), std::string::npos)
          << e.what();
    }
  }
}
