#!/usr/bin/env bash
# Regenerates docs/configuration.md, the configuration reference, from the schema (`keel config --describe --markdown`),
# so the documentation cannot drift from the code (a test checks every key is in it).
set -euo pipefail
cd "$(dirname "$0")/../.."
keel=${1:-build/keel}
{
  cat <<'TXT'
# Configuration reference

One YAML file per run, with sections `model`, `data`, `train`, `monitor`,
`checkpoint`, `dist` and `run`. Every key has a default; a file sets only what
it changes. Unknown keys, wrong types, out-of-range and inconsistent values
are errors that name the key path (and file:line), all reported at once, exit
code 2.

    build/keel validate configs/default.yaml --set train.lr=1e-3   # resolved config or every error
    build/keel config --describe                                   # this table, in the terminal

`--set KEY=VALUE` overrides go through the same validation; the resolved
config is written to `runs/<name>/config.yaml`.

## Shipped configs

In `configs/`:

| file | what it is |
|---|---|
| `default.yaml` | tiny pre-norm GQA model on the embedded corpus; trains on 2 CPU cores in minutes |
| `qwen3-style.yaml` | pre-norm, RMS QK-Norm per head (gain shared by heads) before RoPE, tied head |
| `olmo2-style.yaml` | reordered norm (OLMo 2), RMS QK-Norm over the whole projection, z-loss 1e-5 |
| `gemma2-style.yaml` | sandwich norm, attention softcap 50, final softcap 30, sqrt(d) embedding scale, query_pre_attn_scalar, gated GELU-tanh MLP, (1+w) RMSNorm gains |
| `gemma3-style.yaml` | Gemma 2's layout with an RMS QK-Norm per head ((1+w) gain) before RoPE instead of the softcaps |
| `post-ln.yaml` | classic Post-LN: LayerNorm(x + f(x)), no final norm |
| `l2-qknorm.yaml` | L2 QK-Norm with a learned temperature initialised to log2(L^2-L) (Henry et al. 2020) |
| `qk-clip.yaml` | QK-clip at τ = 100 (Kimi K2's clip, here with AdamW) |
| `muonclip.yaml` | MuonClip (Kimi K2): Muon on the matrices, per-head q/k/v, QK-clip τ = 100, no QK-Norm |
| `qkv-norm.yaml`, `qk-fc-norm.yaml`, `sigma-reparam.yaml`, `logit-clamp.yaml`, `qk-norm-group.yaml` | the other attention-logit stabilisers (docs/papers.md#other-stabilisers) |
| `soft-temperature.yaml`, `soft-clip.yaml`, `layer-scale.yaml`, `qk-norm-softcap.yaml` | Rybakov et al. 2024's comparison variants: softmax(0.5 s), the clipped softmax, LayerScale 0.1, QK-Norm + softcap 50 |
| `averaging-trunk.yaml` | the default model at a constant LR after warm-up, weight EMA 0.99, a checkpoint every 200 steps all kept: the trunk for `keel average` and cooldown branches |
| `gpt2-124m.yaml` | GPT-2-124M-class model for GPUs, bf16, T = 1024 |
| `bench-cpu-tiny.yaml` | CPU benchmark (`keel bench`, `scripts/bench/bench_compare.sh`): the default model and batch |
| `bench-cpu-gpt.yaml` | CPU benchmark, GPT-2-shaped and small (6.8M parameters: vocab 8192, T 256, d 256, 6 layers, GELU, LayerNorm, tied head, batch 8), where the elementwise passes and the head weigh most |
| `bench-cpu.yaml` | CPU benchmark: d_model 512, 8 layers, 8 query / 2 KV heads, T 512, SwiGLU, RMS QK-Norm per head, 4 sequences |

Sweep files for `keel sweep` (a base config, a grid of values, one run per
point; see [sweeps](sweeps.md)) are in `configs/sweeps/`:

| file | what it is |
|---|---|
| `configs/sweeps/qknorm-lr-cpu.yaml` | QK-Norm none / RMS per head / RMS per projection / L2 × 5 peak LRs (3e-3 … 3e-1) on the default model, 200 steps each; 2 CPU cores, about 15 minutes on an idle machine |
| `configs/sweeps/stabilisers-lr-cpu.yaml` | none / QK-Norm / QKV-norm / softcap 50 / QK-Norm + softcap 50 / clamp 50 / QK-clip τ 100 / σReparam × the same 5 LRs and settings; 40 points, 14.3 minutes on 2 cores ([result](results/stabilisers-lr-cpu/report.md)) |
| `configs/sweeps/stabilisers-lr-cpu-wide.yaml` | the same with 3e-4 and 1e-3 added below the grid (56 points; reuses the 40 above when copied in) ([result](results/stabilisers-lr-cpu-wide/report.md)) |
| `configs/sweeps/qknorm-seeds-cpu.yaml` | QK-Norm none / RMS per head × LR 0.1, 0.3, 1 × 8 seeds (48 points, the qknorm-lr-cpu settings): divergence frequencies with Wilson intervals, bootstrap intervals over seeds; 18.9 min on 2 cores ([result](results/qknorm-seeds-cpu/report.md)) |
| `configs/sweeps/qknorm-lr-gpu.yaml` | the same grid on a 64M-parameter Wortsman-style model (LayerNorm, GeLU, untied head), bf16, one GPU |
| `configs/sweeps/scaling-lr-cpu.yaml` | the model-size axis (Wortsman et al. Fig. 1): widths 64 / 128 / 256 × none / qk-layernorm × 6 LRs (1e-3 … 0.3), 200 steps; 36 points on 2 cores ([result](results/scaling-lr-cpu/report.md)) |
| `configs/sweeps/scaling-lr-gpu.yaml` | the same study on one GPU: d256×4, d512×8, d768×12 layers (3M–85M non-embedding parameters), 1,000 steps, bf16; not yet run |
| `configs/sweeps/output-logit-cpu.yaml` | output-logit divergence (Wortsman et al. §3.2): no weight decay, with and without z-loss × 4 LRs, 500 steps ([result](results/output-logit-cpu/report.md)) |
| `configs/sweeps/optimizers-lr-cpu.yaml` | AdamW against Muon, each with no stabiliser, QK-Norm (RMS per head) and QK-clip τ = 100 (MuonClip) × 7 LRs (1e-3 … 1) × 2 seeds, 200 steps; 84 points on 2 cores ([result](results/optimizers-lr-cpu/report.md)) |
| `configs/sweeps/mup-transfer-cpu.yaml` | does the best LR transfer across width? standard vs µP (base d32) × widths 32 / 64 / 128 / 256 × 7 LRs (2e-3 … 0.128) × 3 seeds, 100 steps; 168 points, 15.2 min on 2 cores ([result](results/mup-transfer-cpu/report.md)) |
| `configs/sweeps/completep-transfer-cpu.yaml` | the same across depth: standard vs CompleteP (base 2 layers) × depths 2 / 4 / 8 / 16 at width 64; 168 points, 10.3 min on 2 cores ([result](results/completep-transfer-cpu/report.md)) |
| `configs/sweeps/document-mask-cpu.yaml` | packed windows against `data.document_mask` × windows of 128 / 512 tokens × LR 3e-3, 1e-2 × 2 seeds, 400 steps; 16 points, 22.2 min on 2 cores ([result](results/document-mask-cpu/README.md)) |
| `configs/sweeps/edge-cpu.yaml` | where the stability edge lies (`search:`, sweeps.md#searching-for-the-stability-edge): AdamW / Muon × QK-Norm none / RMS per head × 3 seeds, the largest peak LR in 0.2 … 1.5 that trains 200 steps, to within 10%; 84 runs, 50.1 min on 2 cores ([result](results/edge-cpu/README.md)) |
| `configs/sweeps/qknorm-edge-cpu.yaml` | the headline: QK-Norm none / RMS per head × 7 LRs (1e-3 … 1) × 3 seeds on the papers' protocol at CPU scale (2,000 steps, warm-up 10%, T = 256), judged by loss divergence, attention-logit instability and degradation ([result](results/qknorm-edge-cpu/README.md)) |
| `configs/sweeps/qknorm-edge-bf16-cpu.yaml` | the headline grid in bf16 autocast (3 seeds, the 5 LRs that decide its fp32 edges), to see whether the precision moves the edges; 30 points, 61 min on 2 Zen 4 cores with bf16 GEMMs ([result](results/qknorm-edge-cpu/bf16/README.md)) |
| `configs/sweeps/qknorm-edge-search-cpu.yaml` | the headline's degradation edge by bisection (`search:`) instead of the grid: QK-Norm none / RMS per head × 3 seeds, LR 3e-3 … 0.1 to a factor of 2; 30 runs of 2,000 steps, 1 h 30 min on 2 cores ([result](results/qknorm-edge-cpu/search/README.md)) |
| `configs/sweeps/qknorm-edge-gpu.yaml` | the headline at GPU scale: a 64M-parameter Wortsman-style model, T = 1024, bf16, QK-Norm none / RMS per head × 7 LRs, one seed; about one H200 hour (estimated), not yet run |
| `configs/sweeps/cooldown-cpu.yaml` | cooldown branches of `averaging-trunk.yaml` at steps 400 and 800, 100 or 200 steps long, 1-sqrt shape ([result](results/cooldown-cpu/README.md)) |
| `configs/sweeps/rybakov-cpu.yaml` | Rybakov et al. 2024's table at CPU scale: baseline, soft temperature, soft clip, σReparam, LayerScale, softcap 50, QK-Norm, QK_FC-Norm, QKV-Norm, QK-Norm + softcap × 3 LRs (1e-2 to 1e-1), one seed |
| `configs/sweeps/wortsman-cpu.yaml` | Wortsman et al. 2023's protocol at CPU scale: qk-layernorm on / off, z-loss 1e-4, widths 64 / 128 / 256 × 4 LRs (3e-3 to 1e-1) |

## Where the variants come from

- `model.norm_placement`: `pre` (GPT-2, Llama), `post` (original Transformer), `reordered` (OLMo 2, arXiv 2501.00656), `sandwich` (Gemma 2).
- `model.qk_norm.*`: `rms` per head before RoPE is Qwen3; `rms` over the projection is OLMo 2; `layernorm` per head with a shared gain is Wortsman et al. 2023 (arXiv 2309.14322), with `gain_per_head` and `bias` it is Chameleon; `l2` with a learned temperature is Henry et al. 2020 (arXiv 2010.04245); `l2` after RoPE with a gain is nGPT's placement.
- `model.attn_softcap`, `model.final_softcap`, `model.query_pre_attn_scalar`, `model.embed_norm: scale_sqrt_d`: Gemma 2. `embed_norm: layernorm` is BLOOM; `rmsnorm` (parameter-free) is modded-nanogpt/nanochat.
- `train.z_loss`: PaLM (1e-4); `train.independent_weight_decay`: Wortsman et al. 2023.
- `train.optimizer: muon` and `train.muon.*`: Muon (Jordan et al. 2024; torch.optim.Muon's update), `adjust_lr: match_rms_adamw` from Moonlight (Liu et al. 2025), `split_qkv_heads` and `train.qk_clip_tau` together are Kimi K2's MuonClip.
- `model.attn_temperature`, `model.clipped_softmax`, `model.layer_scale`, `model.qkv_norm`: the variants Rybakov et al. 2024 (arXiv 2410.16682) compare; the clipped softmax is Bondarenko et al. 2023 (arXiv 2306.12929), LayerScale Touvron et al. 2021 (CaiT, arXiv 2103.17239). `train.fp32_head`: Megatron-LM's fp32 output layer.
- `model.mlp: geglu_tanh` (gated MLP with the tanh-approximated GELU, transformers' `gelu_pytorch_tanh`) and `model.norm_unit_offset` (gains applied as 1+w, w initialised to 0): Gemma 2 and 3.

## Hugging Face export

`keel export-hf RUN_OR_CHECKPOINT OUT_DIR` writes a model that
`transformers.AutoModelForCausalLM` and `AutoTokenizer` load with no custom
code, when the model section is one of these layouts (anything else is
refused, naming the keys):

| transformers class | `norm_placement` | `qk_norm` | other keys it requires |
|---|---|---|---|
| `LlamaForCausalLM` | `pre` | `none` | `embed_norm: none`, no softcaps (`bias` allowed: attention_bias + mlp_bias) |
| `Qwen3ForCausalLM` | `pre` | `rms`, `head`, `before_rope`, shared gain | `embed_norm: none`, no softcaps, no bias |
| `Olmo2ForCausalLM` | `reordered` | `rms`, `projection`, `before_rope` | `embed_norm: none`, no softcaps, no bias |
| `Gemma2ForCausalLM` | `sandwich` | `none` | `embed_norm: scale_sqrt_d`, no bias; softcaps and `query_pre_attn_scalar` optional |
| `Gemma3ForCausalLM` | `sandwich` | `rms`, `head`, `before_rope`, shared gain | as Gemma 2 |

All need `norm: rms`, `rope: true`, a gated MLP (`swiglu` or `geglu_tanh`)
and `qk_norm.eps` equal to `norm_eps`. Gains are converted between keel's
form (`norm_unit_offset`) and the class's. `keel import-hf HF_DIR [OUT_DIR]`
is the inverse: it writes a run directory with a step-0 checkpoint and a
`config.yaml` whose `train.init_from` and `data.tokenizer` make
`keel train OUT_DIR/config.yaml` continue pretraining from those weights.

## Every key

This table is generated by `scripts/build/gen_config_docs.sh` from the schema.

TXT
  "$keel" config --describe --markdown
} > docs/configuration.md
echo "wrote docs/configuration.md"
