// keel's side of the Hugging Face parity tests in tests/python/test_hf_*.py.
// Skipped unless KEEL_INTEROP_DIR is set; the Python tests set it and run one
// test of this program, which reads $KEEL_INTEROP_DIR/requests.json and
// writes its answers where the requests say:
//   Interop.KeelLogits  [{"checkpoint": DIR, "tokens": FILE, "out": FILE, "set": ["model.k=v", ...]}]
//                       keel's fp32 logits (real vocabulary only) for the int64 [B, T] "ids"
//                       tensor in FILE, as safetensors {"logits": [B, T, vocab_size]}; "set"
//                       overrides config keys of the checkpoint (the mismatch tests); "eos": the
//                       EOS id a data.document_mask model opens documents with
//   Interop.KeelEncode  [{"tokenizer": FILE, "texts": FILE, "out": FILE}]
//                       keel's Tokenizer::encode of every string in the JSON list in "texts",
//                       as a JSON list of id lists
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <fstream>

#include "checkpoint/checkpoint_resolve.h"
#include "checkpoint/safetensors.h"
#include "config/config.h"
#include "data/tokenizer.h"
#include "model/transformer.h"
#include "test_util.h"
#include "train/train_state.h"

namespace {

const char* interop_dir() { return std::getenv("KEEL_INTEROP_DIR"); }

nlohmann::json requests() {
  return nlohmann::json::parse(keel_test::read_file(std::string(interop_dir()) + "/requests.json"));
}

}  // namespace

TEST(Interop, KeelLogits) {
  if (!interop_dir()) GTEST_SKIP() << "KEEL_INTEROP_DIR not set (run by tests/python)";
  torch::NoGradGuard no_grad;
  int done = 0;
  for (const auto& r : requests()) {
    const std::string dir = keel::resolve_checkpoint_dir(r.at("checkpoint").get<std::string>());
    auto state = nlohmann::json::parse(keel_test::read_file(dir + "/state.json"));
    std::vector<std::string> overrides = r.value("set", std::vector<std::string>{});
    keel::Config config = keel::config_from_yaml_text(state.at("config").get<std::string>(), overrides);
    keel::Transformer model(config.model);
    keel::load_training_checkpoint(dir, model, nullptr, nullptr);
    model->eval();
    // data.document_mask: the request names the EOS id (the tokenizer's) that opens a document.
    if (config.data.document_mask && r.contains("eos"))
      model->set_documents({r.at("eos").get<int64_t>(), config.data.resets_positions()});
    torch::Tensor ids;
    for (auto& [name, t] : keel::read_safetensors(r.at("tokens").get<std::string>()))
      if (name == "ids") ids = t.to(torch::kLong);
    ASSERT_TRUE(ids.defined()) << r.dump();
    auto logits = model->forward(ids).to(torch::kFloat32).narrow(-1, 0, config.model.vocab_size).contiguous();
    keel::write_safetensors(r.at("out").get<std::string>(), {{"logits", logits}});
    ++done;
  }
  EXPECT_GT(done, 0);
}

TEST(Interop, KeelEncode) {
  if (!interop_dir()) GTEST_SKIP() << "KEEL_INTEROP_DIR not set (run by tests/python)";
  int done = 0;
  for (const auto& r : requests()) {
    keel::Tokenizer tokenizer(r.at("tokenizer").get<std::string>());
    auto texts = nlohmann::json::parse(keel_test::read_file(r.at("texts").get<std::string>()));
    nlohmann::json out = nlohmann::json::array();
    for (const auto& t : texts) out.push_back(tokenizer.encode(t.get<std::string>()));
    std::ofstream(r.at("out").get<std::string>()) << out.dump();
    ++done;
  }
  EXPECT_GT(done, 0);
}
