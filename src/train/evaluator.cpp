#include "train/evaluator.h"

#include "model/chunked_loss.h"
#include "data/prepare.h"
#include "util/fs.h"
#include "util/hashing.h"
#include "util/text.h"

namespace keel {

namespace {
std::string set_base_name(std::string entry) {
  while (entry.size() > 1 && entry.back() == '/') entry.pop_back();
  return base_name(entry);
}
}  // namespace

std::string eval_set_name(const Config& cfg, size_t i) {
  const std::string name = set_base_name(cfg.eval.sets[i]);
  for (size_t j = 0; j < i; ++j)  // two sets of one base name: the later one numbered
    if (set_base_name(cfg.eval.sets[j]) == name) return name + "_" + std::to_string(i);
  return name;
}

std::string eval_set_directory(const Config& cfg, size_t i) {
  const std::string& entry = cfg.eval.sets[i];
  if (has_data_manifest(entry)) return entry;
  // Keyed by the entry's absolute path: two sources of one base name get two directories.
  return cfg.data.dir + "/eval_sets/" + eval_set_name(cfg, i) + "-" +
         hex64(fnv1a64(real_path(entry))).substr(0, 8);
}

void prepare_eval_sets(const Config& cfg, const DataManifest& data) {
  for (size_t i = 0; i < cfg.eval.sets.size(); ++i) {
    const std::string dir = eval_set_directory(cfg, i);
    if (dir == cfg.eval.sets[i]) continue;  // a prepared directory
    Config c = cfg;
    c.data.dir = dir;
    c.data.sources = {cfg.eval.sets[i]};
    c.data.source_weights.clear();
    c.data.tokenizer = cfg.data.dir + "/" + data.tokenizer.file;
    c.data.val_fraction = 0;  // held out whole
    try {
      ensure_prepared(c, PrepareOptions{false, true});
    } catch (const Error& e) {
      ConfigErrors errors;
      errors.add("eval.sets[" + std::to_string(i) + "]", std::string("cannot prepare it: ") + e.what());
      throw ConfigError(errors);
    }
  }
}

Evaluator::Evaluator(const Config& cfg, const DataManifest& data, const BatchGeometry& g, Dist& dist,
                     const ComputeSetup& compute)
    : cfg_(cfg), dist_(dist), compute_(compute), rows_(g.val_rows) {
  enabled_ = data.val.tokens > g.seq_len;
  if (enabled_) loader_ = share(cfg.data.dir, "val", g.seq_len);
  for (size_t i = 0; i < cfg.eval.sets.size(); ++i) {
    const std::string dir = eval_set_directory(cfg, i);
    const std::string key = "eval.sets[" + std::to_string(i) + "]";
    auto fail = [&](const std::string& why) {
      ConfigErrors errors;
      errors.add(key, why);
      throw ConfigError(errors);
    };
    DataManifest m;
    try {
      m = read_data_manifest(dir);
    } catch (const std::exception& e) {
      fail(std::string("cannot read its prepared data: ") + e.what());
    }
    if (m.tokenizer.sha256 != data.tokenizer.sha256)
      fail(dir + " was prepared with another tokenizer (sha256 " + m.tokenizer.sha256.substr(0, 12) + ", data.dir's " +
           data.tokenizer.sha256.substr(0, 12) + "): its loss would not compare");
    // Its validation split; a directory prepared without one (data.val_fraction 0) is held out whole.
    const std::string split = m.val.tokens > g.seq_len ? "val" : "train";
    if (m.split(split).tokens <= g.seq_len)
      fail(dir + " holds " + std::to_string(m.split(split).tokens) + " tokens, not one sequence of " +
           std::to_string(g.seq_len));
    sets_.push_back({eval_set_name(cfg, i), share(dir, split, g.seq_len)});
  }
}

// Split over the ranks when the batch divides evenly, else all on rank 0:
// either way the same windows as a single process.
std::unique_ptr<BatchLoader> Evaluator::share(const std::string& dir, const std::string& split,
                                              int64_t seq_len) const {
  const uint64_t seed = static_cast<uint64_t>(cfg_.run.seed);
  if (rows_ % dist_.world() == 0)
    return std::make_unique<BatchLoader>(dir, split, seq_len, rows_, dist_.rank(), dist_.world(), seed, 0,
                                         cfg_.data.verify);
  if (dist_.rank() == 0) return std::make_unique<BatchLoader>(dir, split, seq_len, rows_, 0, 1, seed, 0, cfg_.data.verify);
  return nullptr;
}

double Evaluator::mean_loss(Transformer& model, const BatchLoader* loader, const char* what) {
  torch::NoGradGuard no_grad;
  auto total = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat64).device(compute_.device));
  for (int64_t i = 0; loader && i < cfg_.train.eval_batches; ++i) {
    Batch b = loader->val_batch(i);
    AutocastScope autocast(compute_.bf16_autocast, compute_.device.type());
    auto ce = model_loss(*model, b.inputs.to(compute_.device), b.targets.to(compute_.device), 0.0,
                         cfg_.train.loss_chunk_tokens).ce;
    total += ce.to(torch::kFloat64) * static_cast<double>(b.inputs.size(0));
  }
  dist_.all_reduce_sum(total, what);
  return total.item<double>() / static_cast<double>(rows_ * cfg_.train.eval_batches);  // sync point
}

double Evaluator::evaluate(Transformer& model) {
  last_ = mean_loss(model, loader_.get(), "the validation all-reduce");
  best_ = std::min(best_, last_);
  return last_;
}

nlohmann::json Evaluator::evaluate_sets(Transformer& model) {
  last_sets_ = loss_sets(model);
  return last_sets_;
}

double Evaluator::loss(Transformer& model) { return mean_loss(model, loader_.get(), "the validation all-reduce"); }

nlohmann::json Evaluator::loss_sets(Transformer& model) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& s : sets_) {
    const double loss = mean_loss(model, s.loader.get(), "the held-out set all-reduce");
    out[s.name] = {{"loss", loss}, {"ppl", std::exp(loss)}};
  }
  return out;
}

void Evaluator::save_state(nlohmann::json& extra) const {
  extra["best_val_loss"] = std::isfinite(best_) ? nlohmann::json(best_) : nlohmann::json();
  // The summary of a run resumed at its last step reports it (issue 20, defect 11).
  extra["last_val_loss"] = std::isfinite(last_) ? nlohmann::json(last_) : nlohmann::json();
  if (!last_sets_.is_null()) extra["last_sets"] = last_sets_;
}

void Evaluator::load_state(const nlohmann::json& extra) {
  if (extra.contains("best_val_loss") && extra["best_val_loss"].is_number()) best_ = extra["best_val_loss"].get<double>();
  if (extra.contains("last_val_loss") && extra["last_val_loss"].is_number()) last_ = extra["last_val_loss"].get<double>();
  if (extra.contains("last_sets") && extra["last_sets"].is_object()) last_sets_ = extra["last_sets"];
}

}  // namespace keel
