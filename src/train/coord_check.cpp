#include "train/coord_check.h"

#include <chrono>
#include <cmath>

#include "model/init.h"
#include "model/transformer.h"
#include "optim/grad_norms.h"
#include "optim/optimizer.h"
#include "train/training_setup.h"
#include "util/error.h"
#include "util/log.h"

namespace keel {

Config coord_check_config(const Config& base, int64_t width, int64_t depth) {
  Config c = base;
  auto& m = c.model;
  const auto& b = base.model;
  m.d_model = width;
  m.n_layers = depth;
  ConfigErrors e;
  if (b.d_ff > 0) {
    if ((b.d_ff * width) % b.d_model != 0)
      e.add("model.d_ff", strf("%lld x %lld/%lld (scaled with the width) is not a whole number",
                               static_cast<long long>(b.d_ff), static_cast<long long>(width),
                               static_cast<long long>(b.d_model)));
    else
      m.d_ff = b.d_ff * width / b.d_model;
  }
  if (b.mup.base_head_dim > 0 && b.n_heads > 0) {
    // head_dim is fixed: heads are added with width, key/value heads in proportion.
    const int64_t head_dim = b.head_dim();
    if (head_dim <= 0 || width % head_dim != 0 || (b.n_kv_heads * (width / head_dim)) % b.n_heads != 0)
      e.add("model.d_model", strf("width %lld does not hold whole heads of head_dim %lld in the ratio %lld/%lld",
                                  static_cast<long long>(width), static_cast<long long>(head_dim),
                                  static_cast<long long>(b.n_heads), static_cast<long long>(b.n_kv_heads)));
    else {
      m.n_heads = width / head_dim;
      m.n_kv_heads = b.n_kv_heads * m.n_heads / b.n_heads;
    }
  }
  if (!e.empty()) throw ConfigError(e);
  validate(c);
  return c;
}

namespace {

std::vector<CoordRecord> one_size(const Config& c, int64_t steps, const std::function<Batch(int64_t)>& batch) {
  auto model = build_model(c.model, static_cast<uint64_t>(c.run.seed));
  auto optimizer = make_model_optimizer(model, c);
  std::vector<CoordRecord> out;
  for (int64_t step = 0; step <= steps; ++step) {
    const Batch b = batch(step);
    ActivationRms rms;
    ForwardOptions o;
    o.activations = &rms;
    optimizer->zero_grad();
    auto logits = model->head_logits(model->forward_hidden(b.inputs, o));
    rms.add("logits", logits.narrow(-1, 0, c.model.vocab_size));  // not the -inf padding
    // The last block's output under one name for every depth.
    const std::string last = "block" + std::to_string(c.model.n_layers - 1) + ".out";
    for (size_t i = 0; i < rms.names.size(); ++i)
      if (rms.names[i] == last) {
        rms.add("residual", rms.values[i]);
        break;
      }
    if (step < steps) {  // the update after this forward; the last forward only reads
      language_model_loss(logits, b.targets, c.train.z_loss).total.backward();
      clip_grad_norm(optimizer->params(), c.train.grad_clip);
      optimizer->step(c.train.lr);
    }
    for (size_t i = 0; i < rms.names.size(); ++i)
      out.push_back({c.model.d_model, c.model.n_layers, step, rms.names[i], rms.values[i].item<double>()});
  }
  return out;
}

}  // namespace

std::vector<CoordRecord> coord_check(const Config& config, const CoordCheckOptions& options,
                                     const std::function<Batch(int64_t step)>& batch,
                                     const std::function<void(const std::string&)>& progress) {
  const std::vector<int64_t> widths = options.widths.empty() ? std::vector<int64_t>{config.model.d_model} : options.widths;
  const std::vector<int64_t> depths = options.depths.empty() ? std::vector<int64_t>{config.model.n_layers} : options.depths;
  // Every size's config first, so a bad one fails before any training.
  std::vector<Config> sizes;
  for (int64_t d : depths)
    for (int64_t w : widths) sizes.push_back(coord_check_config(config, w, d));
  std::vector<CoordRecord> all;
  for (const auto& c : sizes) {
    const auto t0 = std::chrono::steady_clock::now();
    auto records = one_size(c, options.steps, batch);
    double first = 0, last = 0;
    for (const auto& r : records)
      if (r.layer == "logits") (r.step == 0 ? first : last) = r.rms;
    if (progress)
      progress(strf("width %4lld, depth %3lld: logits RMS %.4g at step 0, %.4g at step %lld (%.1f s)",
                    static_cast<long long>(c.model.d_model), static_cast<long long>(c.model.n_layers), first, last,
                    static_cast<long long>(options.steps),
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()));
    all.insert(all.end(), records.begin(), records.end());
  }
  return all;
}

double coord_slope(const std::vector<CoordRecord>& records, const std::string& layer, int64_t step, bool by_depth) {
  // The first depth's widths, or the first width's depths.
  const CoordRecord* first = nullptr;
  for (const auto& r : records)
    if (r.layer == layer && r.step == step) {
      first = &r;
      break;
    }
  if (!first) return NAN;
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  int n = 0;
  for (const auto& r : records) {
    if (r.layer != layer || r.step != step) continue;
    if (by_depth ? r.width != first->width : r.depth != first->depth) continue;
    const double x = std::log(static_cast<double>(by_depth ? r.depth : r.width)), y = std::log(r.rms);
    sx += x;
    sy += y;
    sxx += x * x;
    sxy += x * y;
    ++n;
  }
  const double den = n * sxx - sx * sx;
  return n >= 2 && den > 0 ? (n * sxy - sx * sy) / den : NAN;
}

}  // namespace keel
