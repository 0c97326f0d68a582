#include "replay/numerics_diff.h"

#include <cmath>
#include <iostream>
#include <map>

#include "data/loader.h"
#include "data/manifest.h"
#include "optim/schedule.h"
#include "replay/replay.h"
#include "train/device.h"
#include "train/train_state.h"
#include "train/training_setup.h"
#include "util/error.h"
#include "util/fault_inject.h"
#include "util/fs.h"
#include "util/log.h"

namespace keel {

namespace {

// One precision's copy of the run, from the same checkpoint.
struct Variant {
  std::string name;  // "bf16", "fp32", "fp64"
  Config cfg;
  ComputeSetup compute;
  TrainingParts parts;
};

// What one step of one variant computed, in forward order.
struct StepRecord {
  double loss = NAN;
  std::vector<std::string> names;      // activations, then "logits", then "grad.<group>"
  std::vector<torch::Tensor> tensors;  // fp64
};

std::string group_of(const std::string& param) {  // "blocks.3.attn.wq" -> "block3"; the rest: "other"
  if (param.rfind("blocks.", 0) != 0) return "other";
  return "block" + param.substr(7, param.find('.', 7) - 7);
}

StepRecord run_step(Variant& v, const Batch& batch, int64_t index, int64_t overflow_block) {
  StepRecord rec;
  auto& model = v.parts.model;
  v.parts.optimizer->zero_grad();
  ActivationRms acts;
  acts.keep = true;
  if (overflow_block >= 0) {  // a planted fp16 overflow in this precision's block output (tests)
    const std::string at = "block" + std::to_string(overflow_block) + ".out";
    acts.transform = [at](const std::string& name, const torch::Tensor& x) {
      if (name != at) return x;
      auto y = x * 1e5;
      return torch::where(y.abs() > 65504.0, y.sign() * std::numeric_limits<double>::infinity(), y);
    };
  }
  torch::Tensor logits;
  LossParts loss;
  {
    AutocastScope autocast(v.compute.bf16_autocast, v.compute.device.type());
    ForwardOptions o;
    o.activations = &acts;
    logits = model->forward(batch.inputs.to(v.compute.device), o);
    loss = language_model_loss(logits, batch.targets.to(v.compute.device), v.cfg.train.z_loss);
  }
  loss.total.backward();
  rec.loss = loss.ce.item<double>();
  rec.names = acts.names;
  rec.tensors = acts.kept;
  rec.names.push_back("logits");
  rec.tensors.push_back(logits.detach().to(torch::kFloat64));
  // Gradients, one flat vector per block (and one for the rest), before clipping.
  std::map<std::string, std::vector<torch::Tensor>> grads;
  std::vector<std::string> order;
  for (const auto& p : v.parts.optimizer->params()) {
    if (!p.param.grad().defined()) continue;
    const std::string g = group_of(p.name);
    if (!grads.count(g)) order.push_back(g);
    grads[g].push_back(p.param.grad().detach().to(torch::kFloat64).reshape({-1}));
  }
  for (const auto& g : order) {
    rec.names.push_back("grad." + g);
    rec.tensors.push_back(torch::cat(grads[g]));
  }
  // The variant's own update: the trajectories go on separately.
  const StepClip clip = v.parts.runner->clip(loss.ce);
  v.parts.runner->update(lr_at(v.cfg.train, index), clip.found_inf);
  return rec;
}

double relative_difference(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.sizes() != b.sizes()) return INFINITY;
  const double denom = b.norm().item<double>();
  const double num = (a - b).norm().item<double>();
  if (!std::isfinite(num)) return INFINITY;
  return denom > 0 ? num / denom : (num > 0 ? INFINITY : 0.0);
}

}  // namespace

int run_numerics_diff(const NumericsOptions& o) {
  ConfigErrors errors;
  if (o.step < 1) errors.add("--step", "must be a training step, 1 or more");
  if (o.steps < 0) errors.add("--steps", "must be 0 or more: the steps compared past --step");
  if (!(o.threshold > 0) || !std::isfinite(o.threshold))
    errors.add("--threshold", "must be a positive relative difference, e.g. 0.1");
  if (!errors.empty()) throw ConfigError(errors);
  const ReplayStart start = replay_start(o.run_dir, o.step, o.from);
  const RunCompute ran = read_run_compute(start.run_dir);
  const std::string own = ran.known ? ran.precision
                          : start.cfg.train.precision == Precision::bf16 ? "bf16"
                          : start.cfg.train.precision == Precision::fp64 ? "fp64"
                                                                         : "fp32";
  if (own == "fp64")
    throw ConfigError([] {
      ConfigErrors e;
      e.add("--numerics", "the run trained in fp64 already: there is no higher precision to compare it with");
      return e;
    }());
  std::vector<std::string> names = {own};
  if (own == "bf16") names.push_back("fp32");
  names.push_back("fp64");

  const Config& base = start.cfg;
  const BatchGeometry geometry = batch_geometry(base, 1);
  std::vector<Variant> variants;
  for (const auto& name : names) {
    Variant v;
    v.name = name;
    v.cfg = base;
    v.cfg.train.device = DeviceChoice::cpu;
    v.cfg.train.precision = name == "bf16" ? Precision::bf16 : name == "fp64" ? Precision::fp64 : Precision::fp32;
    v.cfg.train.cuda_graph = false;
    if (o.threads > 0) v.cfg.train.threads = o.threads;
    v.compute = setup_compute(v.cfg.train);
    v.parts = build_training_parts(v.cfg, v.compute, geometry, nullptr);
    load_training_checkpoint(start.dir, v.parts.model, v.parts.optimizer.get(), nullptr);
    variants.push_back(std::move(v));
  }
  if (base.data.document_mask) {
    const DataManifest data = read_data_manifest(base.data.dir);
    for (auto& v : variants) v.parts.model->set_documents({data.tokenizer.eos_id, base.data.resets_positions()});
  }
  BatchLoader loader(base.data.dir, "train", geometry.seq_len, geometry.global_batch, 0, 1,
                     static_cast<uint64_t>(base.run.seed), 0, base.data.verify, data_mixture(base.data), base.data.align);
  const TrainFaults faults = TrainFaults::from_environment(0);

  const int64_t last = std::min(o.step + o.steps, base.train.end_step());
  nlohmann::json steps = nlohmann::json::array();
  nlohmann::json first = nullptr;  // the first (step, quantity) where the run's precision differs past the threshold
  std::cout << strf("numerics diff of %s, %s against %s, steps %lld-%lld from %s (threshold %g)\n",
                    start.run_dir.c_str(), own.c_str(), names.size() == 3 ? "fp32 and fp64" : "fp64",
                    static_cast<long long>(start.from + 1), static_cast<long long>(last), start.dir.c_str(),
                    o.threshold);
  for (int64_t index = start.from; index < last; ++index) {
    const Batch batch = loader.get(index);
    std::vector<StepRecord> recs;
    for (size_t i = 0; i < variants.size(); ++i)
      recs.push_back(run_step(variants[i], batch, index, i == 0 ? faults.fp16_overflow_block : -1));
    nlohmann::json step = {{"step", index + 1}, {"loss", nlohmann::json::object()}};
    for (size_t i = 0; i < variants.size(); ++i)
      step["loss"][variants[i].name] = std::isfinite(recs[i].loss) ? nlohmann::json(recs[i].loss) : nlohmann::json();
    // The run's precision against each higher one, quantity by quantity in forward order.
    for (size_t j = 1; j < variants.size(); ++j) {
      nlohmann::json diffs = nlohmann::json::array();
      const StepRecord &a = recs[0], &b = recs[j];
      for (size_t q = 0; q < a.names.size() && q < b.names.size(); ++q) {
        const double d = relative_difference(a.tensors[q], b.tensors[q]);
        diffs.push_back({{"quantity", a.names[q]}, {"relative_difference", std::isfinite(d) ? nlohmann::json(d)
                                                                                               : nlohmann::json("inf")}});
        if (first.is_null() && !(d <= o.threshold))
          first = {{"step", index + 1}, {"quantity", a.names[q]}, {"against", variants[j].name},
                   {"relative_difference", std::isfinite(d) ? nlohmann::json(d) : nlohmann::json("inf")}};
      }
      const double dl = std::fabs(a.loss - b.loss);
      diffs.push_back({{"quantity", "loss"}, {"absolute_difference", std::isfinite(dl) ? nlohmann::json(dl)
                                                                                        : nlohmann::json("inf")}});
      step["vs_" + variants[j].name] = diffs;
    }
    steps.push_back(step);
    std::string line = strf("  step %lld: loss", static_cast<long long>(index + 1));
    for (size_t i = 0; i < variants.size(); ++i) line += strf(" %s %.5f", variants[i].name.c_str(), recs[i].loss);
    std::cout << line << "\n";
  }

  const std::string out = start.run_dir + "/branches/numerics-" + std::to_string(o.step);
  ensure_directory(out);
  const nlohmann::json report = {{"run", start.run_dir}, {"checkpoint", start.dir},   {"from_step", start.from},
                                 {"step", o.step},       {"precision", own},           {"compared_with", names},
                                 {"threshold", o.threshold}, {"first_difference", first}, {"steps", steps}};
  write_file_atomic(out + "/numerics.json", report.dump(1) + "\n");
  std::string md = "# Numerics diff: " + start.run_dir + ", spike step " + std::to_string(o.step) + "\n\n";
  md += "From `" + start.dir + "`, steps " + std::to_string(start.from + 1) + " to " + std::to_string(last) +
        " in the run's precision (" + own + ") and in " + (names.size() == 3 ? "fp32 and fp64" : "fp64") +
        ", each its own trajectory from the same weights, optimizer state and batches, on the CPU. A quantity "
        "differs when ||a - b|| / ||b|| > " + strf("%g", o.threshold) + " (activations in forward order: the "
        "embedding, each block's attention and MLP branch and its output, the logits; then each block's "
        "gradients).\n\n";
  if (first.is_null()) {
    md += "**No quantity differed past the threshold**: at this precision the window computes what higher "
          "precision computes, so rounding did not decide these steps.\n\n";
  } else {
    md += strf("**First difference: step %lld, %s** (against %s: %s).\n\n", first["step"].get<long long>(),
               first["quantity"].get<std::string>().c_str(), first["against"].get<std::string>().c_str(),
               first["relative_difference"].dump().c_str());
  }
  md += "| step |";
  for (const auto& v : variants) md += " loss " + v.name + " |";
  md += " largest relative difference (quantity) |\n|---|";
  for (size_t i = 0; i < variants.size(); ++i) md += "---|";
  md += "---|\n";
  for (const auto& s : steps) {
    md += "| " + std::to_string(s["step"].get<int64_t>()) + " |";
    for (const auto& v : variants)
      md += " " + (s["loss"][v.name].is_number() ? strf("%.5f", s["loss"][v.name].get<double>()) : std::string("non-finite")) + " |";
    double worst = -1;
    std::string what = "-";
    for (const auto& d : s["vs_" + variants[1].name])
      if (d.contains("relative_difference")) {
        const double x = d["relative_difference"].is_number() ? d["relative_difference"].get<double>() : INFINITY;
        if (x > worst) worst = x, what = d["quantity"].get<std::string>();
      }
    md += " " + (std::isfinite(worst) ? strf("%.3g", worst) : std::string("inf")) + " (" + what + ") |\n";
  }
  write_file_atomic(out + "/numerics.md", md);
  std::cout << (first.is_null() ? std::string("no quantity differed past the threshold")
                                : strf("first difference: step %lld, %s (against %s)", first["step"].get<long long>(),
                                       first["quantity"].get<std::string>().c_str(),
                                       first["against"].get<std::string>().c_str()))
            << "\nreport: " << out << "/numerics.md, " << out << "/numerics.json\n";
  return 0;
}

}  // namespace keel
