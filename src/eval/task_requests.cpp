#include "eval/task_requests.h"

namespace keel {

TokenizedRequest tokenize_request(const Tokenizer& tok, const EvalRequest& r, int64_t max_len,
                                  const std::string& where) {
  std::vector<int32_t> context, whole;
  std::string ctx = r.context, cont = r.continuation;
  if (ctx.empty()) {
    context = {tok.bos_id() >= 0 ? tok.bos_id() : tok.eos_id()};
    whole = context;
    for (int32_t id : tok.encode(cont)) whole.push_back(id);
  } else {
    const std::string kept = python_rstrip(ctx);
    cont = ctx.substr(kept.size()) + cont;
    ctx = kept;
    whole = tok.encode(ctx + cont);
    context = tok.encode(ctx);
  }
  const size_t n_ctx = std::min(context.size(), whole.size());
  const size_t n_cont = whole.size() - n_ctx;
  if (n_ctx == 0) throw TaskFileError(where + ": the context encodes to no tokens");
  if (n_cont == 0) throw TaskFileError(where + ": the continuation encodes to no tokens");
  if (static_cast<int64_t>(n_cont) > max_len)
    throw TaskFileError(where + ": the continuation is " + std::to_string(n_cont) + " tokens, more than the model's " +
                        std::to_string(max_len));
  TokenizedRequest out;
  // (context + continuation)[-(max_len + 1):][:-1]
  const size_t total = whole.size();
  const size_t begin = total > static_cast<size_t>(max_len) + 1 ? total - static_cast<size_t>(max_len) - 1 : 0;
  out.input.assign(whole.begin() + static_cast<std::ptrdiff_t>(begin), whole.end() - 1);
  out.target.assign(whole.end() - static_cast<std::ptrdiff_t>(n_cont), whole.end());
  return out;
}

}  // namespace keel
