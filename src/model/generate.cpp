#include "model/generate.h"

#include <algorithm>

namespace keel {

std::vector<int64_t> generate(Transformer& model, const std::vector<int64_t>& prompt, const SampleOptions& o) {
  torch::NoGradGuard no_grad;
  model->eval();
  auto gen = at::make_generator<at::CPUGeneratorImpl>(o.seed);
  std::vector<int64_t> ids = prompt;
  const int64_t context = model->config().max_seq_len;
  const auto device = model->wte.device();
  for (int64_t i = 0; i < o.max_new_tokens; ++i) {
    const int64_t start = std::max<int64_t>(0, static_cast<int64_t>(ids.size()) - context);
    auto x = torch::tensor(std::vector<int64_t>(ids.begin() + start, ids.end()), torch::kInt64).view({1, -1});
    auto logits = model->forward(x.to(device)).select(1, x.size(1) - 1).squeeze(0).to(torch::kCPU, torch::kFloat64);
    int64_t next;
    if (o.temperature <= 0) {
      next = logits.argmax().item<int64_t>();
    } else {
      logits = logits / o.temperature;
      if (o.top_k > 0 && o.top_k < logits.size(0)) {
        auto kth = std::get<0>(logits.topk(o.top_k)).min();
        logits = logits.masked_fill(logits < kth, -std::numeric_limits<double>::infinity());
      }
      next = torch::multinomial(torch::softmax(logits, -1), 1, false, gen).item<int64_t>();
    }
    ids.push_back(next);
    if (next == o.stop_id) break;
  }
  return std::vector<int64_t>(ids.begin() + static_cast<int64_t>(prompt.size()), ids.end());
}

}  // namespace keel
