# The sources that use LibTorch, directly or through a keel header they
# include. They build in keel_core, with a precompiled header of LibTorch;
# every other source under src/ builds in keel_base, WITHOUT LibTorch's
# include path, so a base file that starts to include torch fails to compile
# (move it here) rather than silently slowing every build down: a LibTorch
# translation unit costs 8-15 s on the 2-core machine, a base one 1-5 s
# (docs/building.md). src/cli/ is its own library (keel_cli), linked only
# by the binary.
set(KEEL_TENSOR_SOURCES
  src/checkpoint/safetensors.cpp
  src/data/loader.cpp
  src/distributed/grad_sync.cpp
  src/distributed/process_group.cpp
  src/eval/task_evaluator.cpp
  src/interop/hf_export.cpp
  src/interop/hf_import.cpp
  src/model/attention.cpp
  src/model/autocast.cpp
  src/model/activation_checkpoint.cpp
  src/model/blockwise_attention.cpp
  src/model/chunked_loss.cpp
  src/model/documents.cpp
  src/model/fused_cuda.cpp
  src/model/cpu_attention.cpp
  src/model/cpu_parallel.cpp
  src/model/fused_glu.cpp
  src/model/fused_ops.cpp
  src/model/fused_xent.cpp
  src/model/generate.cpp
  src/model/init.cpp
  src/model/model_size.cpp
  src/model/norm.cpp
  src/model/param_scalings.cpp
  src/model/rope.cpp
  src/model/sigma_reparam.cpp
  src/model/simd_dispatch.cpp
  src/model/transformer.cpp
  src/monitor/param_stats.cpp
  src/monitor/stability.cpp
  src/train/bench.cpp
  src/train/coord_check.cpp
  src/train/device.cpp
  src/train/device_counters.cpp
  src/train/evaluator.cpp
  src/train/init_from.cpp
  src/train/memory_plan.cpp
  src/train/metrics_logger.cpp
  src/train/model_stats.cpp
  src/optim/grad_norms.cpp
  src/optim/muon.cpp
  src/train/op_counter.cpp
  src/optim/optimizer.cpp
  src/optim/qk_clip.cpp
  src/optim/update_clip.cpp
  src/replay/numerics_diff.cpp
  src/optim/zero.cpp
  src/train/step_runner.cpp
  src/train/train_state.cpp
  src/train/trainer.cpp
  src/train/trainer_checkpoint.cpp
  src/train/trainer_dist.cpp
  src/train/trainer_rewind.cpp
  src/train/training_setup.cpp
  src/train/weight_ema.cpp
  src/train/checkpoint_average.cpp
)
# The command-line files that use LibTorch (keel_cli: the precompiled header for these only).
set(KEEL_CLI_TENSOR_SOURCES src/cli/cmd_sample.cpp src/cli/cmd_eval.cpp src/cli/cmd_smoke.cpp src/cli/cmd_params.cpp src/cli/cmd_plan.cpp
    src/cli/cmd_coordcheck.cpp)
# The tensor files that read files a user hands keel (safetensors, checkpoint
# state): instrumented in the sanitizer build even where it reuses the rest
# of keel_core uninstrumented (KEEL_REUSE_CORE).
set(KEEL_TENSOR_READERS src/checkpoint/safetensors.cpp src/train/train_state.cpp src/data/loader.cpp)
# The keel_base sources that none of scripts/build/sanitize.sh's programs links
# (the sweep runner and reports, replay, the launcher): a sanitizer build
# (KEEL_REUSE_CORE) does not compile them again but takes them from the
# normal build's archive, uninstrumented, about 100 s of CPU less. Should a
# sanitized program come to call one, it still links, with that copy.
set(KEEL_BASE_UNSANITIZED
  src/distributed/launcher.cpp
  src/replay/replay.cpp
  src/analysis/early_warning.cpp
  src/analysis/edge_report.cpp
  src/analysis/lr_sensitivity.cpp
  src/analysis/lr_transfer.cpp
  src/sweep/point_source.cpp
  src/analysis/run_compare.cpp
  src/analysis/study_stats.cpp
  src/analysis/sweep_report.cpp
  src/sweep/sweep_runner.cpp
  src/analysis/warning_report.cpp
  src/train/data_skips.cpp
  src/train/step_plan.cpp
  src/util/child_process.cpp
)
