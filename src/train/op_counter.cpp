#include "train/op_counter.h"

#include <atomic>
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

// Per thread: for each operator in progress, whether another one started inside it.
thread_local std::vector<bool> t_child_seen;

// The first tensor input's sizes, taken at the start: inputs are only valid then.
struct ShapeContext : at::ObserverContext {
  std::vector<int64_t> sizes;
};

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  // A metadata child (an empty output buffer, a view) does not make its
  // parent a composite: addmm allocating its result is still the kernel.
  if (!t_child_seen.empty() && !is_metadata_op(fn.name())) t_child_seen.back() = true;
  t_child_seen.push_back(false);
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
  if (t_child_seen.empty()) return;  // started before the counter
  const bool leaf = !t_child_seen.back();
  t_child_seen.pop_back();
  CounterState* s = g_state.load();
  if (!s) return;
  const std::string name = fn.name();
  std::lock_guard<std::mutex> lock(s->mutex);
  ++s->counts.dispatches;
  if (!leaf || is_metadata_op(name)) return;
  ++s->counts.kernels;
  ++s->counts.by_name[name];
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
