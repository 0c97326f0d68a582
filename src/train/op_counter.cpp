#include "train/op_counter.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <stdexcept>

namespace keel {

namespace {

struct CounterState {
  std::mutex mutex;
  bool record_shapes = false;
  OpCounts counts;
};

// RecordFunction callbacks are plain function pointers: the live counter's
// state is reached through this pointer.
std::atomic<CounterState*> g_state{nullptr};

// Per thread: for each operator in progress, whether another one started
// inside it, how long the operators directly inside it took, and when it started.
struct InProgress {
  bool child_seen = false;
  double child_ms = 0;
  std::chrono::steady_clock::time_point start;
};
thread_local std::vector<InProgress> t_in_progress;

// The first tensor input's sizes, taken at the start: inputs are only valid then.
struct ShapeContext : at::ObserverContext {
  std::vector<int64_t> sizes;
};

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  // A metadata child (an empty output buffer, a view) does not make its
  // parent a composite: addmm allocating its result is still the kernel.
  if (!t_in_progress.empty() && !is_metadata_op(fn.name())) t_in_progress.back().child_seen = true;
  t_in_progress.push_back({false, 0.0, std::chrono::steady_clock::now()});
  CounterState* s = g_state.load();
  if (!s || !s->record_shapes) return nullptr;
  auto ctx = std::make_unique<ShapeContext>();
  for (const auto& v : fn.inputs())
    if (v.isTensor()) {
      ctx->sizes = v.toTensor().sizes().vec();
      break;
    }
  return ctx;
}

void on_end(const at::RecordFunction& fn, at::ObserverContext* ctx) {
  if (t_in_progress.empty()) return;  // started before the counter
  const InProgress op = t_in_progress.back();
  t_in_progress.pop_back();
  const bool leaf = !op.child_seen;
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - op.start).count();
  if (!t_in_progress.empty()) t_in_progress.back().child_ms += ms;
  CounterState* s = g_state.load();
  if (!s) return;
  const std::string name = fn.name();
  std::lock_guard<std::mutex> lock(s->mutex);
  ++s->counts.dispatches;
  if (is_metadata_op(name)) return;
  if (!leaf) {
    // A composite's own work between the operators it calls: CPU flash
    // attention's backward computes in its own loops after zero-filling its
    // gradients, fused AdamW after reading its step counters.
    s->counts.self_ms_by_name[name] += std::max(0.0, ms - op.child_ms);
    ++s->counts.composites_by_name[name];
    return;
  }
  ++s->counts.kernels;
  ++s->counts.by_name[name];
  s->counts.ms_by_name[name] += ms;
  if (s->record_shapes)
    s->counts.events.emplace_back(name, ctx ? static_cast<ShapeContext*>(ctx)->sizes : std::vector<int64_t>{});
}

}  // namespace

bool is_metadata_op(const std::string& name) {
  static const std::set<std::string> names = {
      "aten::view", "aten::_unsafe_view", "aten::reshape", "aten::_reshape_alias", "aten::view_as",
      "aten::t", "aten::transpose", "aten::permute", "aten::expand", "aten::expand_as", "aten::as_strided",
      "aten::narrow", "aten::slice", "aten::select", "aten::unsqueeze", "aten::squeeze", "aten::split",
      "aten::split_with_sizes", "aten::chunk", "aten::unbind", "aten::detach", "aten::detach_", "aten::alias",
      "aten::empty", "aten::empty_like", "aten::empty_strided", "aten::new_empty", "aten::new_empty_strided",
      "aten::empty_permuted", "aten::resize_", "aten::contiguous", "aten::to", "aten::lift_fresh",
      "aten::flatten", "aten::unflatten", "aten::movedim", "aten::diagonal", "aten::unfold", "aten::set_",
      "aten::requires_grad_", "aten::result_type", "aten::is_same_size", "aten::size", "aten::stride",
      "aten::numel", "aten::dim", "aten::record_stream", "aten::type_as", "aten::values", "aten::indices",
      "aten::resolve_conj", "aten::resolve_neg", "aten::conj", "aten::_conj", "aten::_neg_view", "detach"};
  // The autograd engine's records (evaluate_function: XBackward0) wrap the
  // backward's operators; a node that only passes gradients on has none.
  return names.count(name) > 0 || name.rfind("autograd::", 0) == 0;
}

std::string op_family(const std::string& name) {
  auto has = [&](const char* part) { return name.find(part) != std::string::npos; };
  if (has("attention")) return "attention";  // SDPA's flash / efficient / cuDNN / math kernels, keel's blockwise
  if (has("mm") || has("linear") || has("matmul") || has("mkldnn::") || has("dot")) return "matmul";
  if (has("vector_norm") || has("_foreach_norm")) return "reduction";  // gradient clipping's norms
  if (has("norm") || has("rsqrt")) return "norm";
  if (has("rope")) return "rope";
  if (has("softmax") || has("nll_loss") || has("cross_entropy") || has("logsumexp")) return "softmax+loss";
  if (has("embedding") || has("index_select") || has("index_add") || has("index_put") || has("gather") ||
      has("scatter"))
    return "embedding";
  if (has("_foreach_") || has("_fused_adam") || has("lerp") || has("addcdiv") || has("addcmul")) return "optimizer";
  if (has("copy") || has("fill") || has("zero") || has("clone") || has("cat") || has("stack") || has("ones") ||
      has("full") || has("arange") || has("_to_copy"))
    return "copy+fill";
  if (has("sum") || has("mean") || has("amax") || has("max") || has("min") || has("var") ||
      has("all") || has("any") || has("count_nonzero"))
    return "reduction";
  return "elementwise";
}

OpCounter::OpCounter(bool record_shapes) {
  auto* state = new CounterState();
  state->record_shapes = record_shapes;
  CounterState* expected = nullptr;
  if (!g_state.compare_exchange_strong(expected, state)) {
    delete state;
    throw std::logic_error("OpCounter: another counter is already running");
  }
  handle_ = at::addGlobalCallback(at::RecordFunctionCallback(&on_start, &on_end)
                                      .needsInputs(record_shapes)
                                      .scopes({at::RecordScope::FUNCTION}));
}

OpCounter::~OpCounter() {
  at::removeCallback(handle_);
  delete g_state.exchange(nullptr);
}

OpCounts OpCounter::counts() const {
  CounterState* s = g_state.load();
  std::lock_guard<std::mutex> lock(s->mutex);
  return s->counts;
}

}  // namespace keel
