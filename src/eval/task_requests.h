// A request's tokens, as lm-evaluation-harness's causal models make them
// (lm_eval/api/model.py, TemplateLM._encode_pair and loglikelihood): the
// context's trailing whitespace moves to the continuation; the whole text is
// encoded once and the continuation is what follows the context's own
// encoding, so a token that spans the boundary counts as continuation; an
// empty context is one prefix token (BOS, else EOS). The model then reads
// the last max_len + 1 tokens minus the final one, and the continuation's
// tokens are scored at the end of that window.
#pragma once

#include <cstdint>
#include <vector>

#include "data/tokenizer.h"
#include "eval/task_files.h"

namespace keel {

struct TokenizedRequest {
  std::vector<int64_t> input;  // what the model reads (at most max_len tokens)
  std::vector<int64_t> target; // the continuation's tokens: the last target.size() positions of input predict them
};

// Throws TaskFileError (naming `where`) when the continuation is empty or
// longer than max_len tokens: nothing to score, or no room for a context.
TokenizedRequest tokenize_request(const Tokenizer& tok, const EvalRequest& r, int64_t max_len,
                                  const std::string& where);

}  // namespace keel
