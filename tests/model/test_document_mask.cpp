// data.document_mask (model/documents.h): every attention path against an
// independent reference (each document's causal attention computed on its
// own slice), the statistics under the mask, a model's logits for a document
// inside a packed window against the document alone, and the blockwise
// path's work falling with the number of documents.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <numeric>

#include "model/attention.h"
#include "model/blockwise_attention.h"
#include "model/documents.h"
#include "test_model_reference.h"
#include "train/op_counter.h"

using namespace keel_model_test;

namespace {

// Segment ids [B, T] from each row's document lengths (they sum to T).
torch::Tensor segments_of(const std::vector<std::vector<int64_t>>& lengths) {
  std::vector<int64_t> ids;
  int64_t T = -1;
  for (const auto& row : lengths) {
    const int64_t total = std::accumulate(row.begin(), row.end(), int64_t{0});
    if (T < 0) T = total;
    EXPECT_EQ(total, T);
    for (size_t d = 0; d < row.size(); ++d) ids.insert(ids.end(), static_cast<size_t>(row[d]), static_cast<int64_t>(d));
  }
  return torch::tensor(ids, torch::kInt64).view({static_cast<int64_t>(lengths.size()), T});
}

struct Grads {
  torch::Tensor y, dq, dk, dv;
};

template <typename F>
Grads run(F attention, const torch::Tensor& q0, const torch::Tensor& k0, const torch::Tensor& v0,
          const torch::Tensor& dy) {
  auto q = q0.clone().requires_grad_(true), k = k0.clone().requires_grad_(true), v = v0.clone().requires_grad_(true);
  auto y = attention(q, k, v);
  y.backward(dy);
  return {y.detach(), q.grad(), k.grad(), v.grad()};
}

// The reference: each document's causal attention on its own slice of q, k
// and v (no mask code involved), written back into place.
torch::Tensor per_document(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                           const std::vector<std::vector<int64_t>>& lengths, double scale,
                           c10::optional<double> softcap) {
  std::vector<torch::Tensor> rows;
  for (size_t b = 0; b < lengths.size(); ++b) {
    std::vector<torch::Tensor> docs;
    int64_t start = 0;
    for (int64_t n : lengths[b]) {
      auto sl = [&](const torch::Tensor& t) { return t.narrow(0, static_cast<int64_t>(b), 1).narrow(2, start, n); };
      docs.push_back(keel::explicit_attention(sl(q), sl(k), sl(v), scale, softcap, nullptr));
      start += n;
    }
    rows.push_back(torch::cat(docs, 2));
  }
  return torch::cat(rows, 0);
}

double diff(const torch::Tensor& a, const torch::Tensor& b) { return (a - b).abs().max().item<double>(); }

TEST(DocumentLayout, SegmentsAndPositionsFromTheIds) {
  const int E = 1;  // an EOS opens the document after it
  auto ids = torch::tensor({5, E, 7, 8, E, 9, 4, E, 6, 6, 6, 6}, torch::kInt64).view({2, 6});
  auto layout = keel::document_layout(ids, {E, true});
  EXPECT_TRUE(torch::equal(layout.segments, torch::tensor({0, 1, 1, 1, 2, 2, 0, 1, 1, 1, 1, 1}, torch::kInt64).view({2, 6})));
  EXPECT_TRUE(torch::equal(layout.positions, torch::tensor({0, 0, 1, 2, 0, 1, 0, 0, 1, 2, 3, 4}, torch::kInt64).view({2, 6})));
  EXPECT_TRUE(layout.segments_host().device().is_cpu());
  EXPECT_FALSE(keel::document_layout(ids, {E, false}).positions.defined());
  // The mask: causal within a document, nothing across.
  auto mask = keel::document_attention_mask(layout.segments);
  ASSERT_EQ(mask.sizes(), (std::vector<int64_t>{2, 1, 6, 6}));
  EXPECT_TRUE(mask[0][0][3][1].item<bool>());   // same document, earlier
  EXPECT_FALSE(mask[0][0][3][0].item<bool>());  // the previous document
  EXPECT_FALSE(mask[0][0][2][3].item<bool>());  // the future
  EXPECT_TRUE(mask[0][0][4][4].item<bool>());   // itself
}

// Documents shorter than a block, spanning blocks, exactly one window long,
// and rows with different layouts in one batch; with and without a softcap;
// GQA. Blocks of 16 over T = 64.
TEST(DocumentMask, EveryPathEqualsEachDocumentAlone) {
  const std::vector<std::vector<std::vector<int64_t>>> layouts = {
      {{5, 7, 3, 9, 2, 11, 6, 4, 8, 9}, {64}},  // short documents; one row a single window-long document
      {{40, 24}, {17, 15, 32}},                 // documents across block edges
      {{64}, {64}},                             // one document: the plain causal mask
      {{1, 1, 62}, {63, 1}},                    // documents of one token
  };
  const double scale = 0.35;
  for (const auto& lengths : layouts)
    for (double cap : {0.0, 3.0}) {
      SCOPED_TRACE("layout " + std::to_string(&lengths - &layouts[0]) + " cap " + std::to_string(cap));
      torch::manual_seed(3);
      const int64_t B = 2, H = 4, Hkv = 2, T = 64, D = 8;
      auto q = torch::randn({B, H, T, D}) * 2, k = torch::randn({B, Hkv, T, D}) * 2, v = torch::randn({B, Hkv, T, D});
      auto dy = torch::randn({B, H, T, D});
      const auto seg = segments_of(lengths);
      const c10::optional<double> capo = cap > 0 ? c10::optional<double>(cap) : c10::nullopt;
      auto want = run([&](auto q, auto k, auto v) { return per_document(q, k, v, lengths, scale, capo); }, q, k, v, dy);
      auto expl = run([&](auto q, auto k, auto v) {
        return keel::explicit_attention(q, k, v, scale, capo, nullptr, c10::nullopt, nullptr, seg);
      }, q, k, v, dy);
      auto blockwise = run([&](auto q, auto k, auto v) {
        keel::BlockwiseOptions o;
        o.scale = scale;
        o.softcap = capo;
        o.block_q = o.block_k = 16;
        o.segments = seg;
        o.segments_host = seg;
        return keel::blockwise_attention(q, k, v, o).out;
      }, q, k, v, dy);
      std::vector<std::pair<std::string, Grads>> paths = {{"explicit", expl}, {"blockwise", blockwise}};
      if (cap == 0)  // SDPA has no softcap
        paths.push_back({"sdpa", run([&](auto q, auto k, auto v) {
                           return at::scaled_dot_product_attention(q, k, v, keel::document_attention_mask(seg), 0.0,
                                                                   false, scale, /*enable_gqa=*/true);
                         }, q, k, v, dy)});
      for (const auto& [name, got] : paths) {
        EXPECT_LT(diff(got.y, want.y), 1e-5) << name;
        EXPECT_LT(diff(got.dq, want.dq), 1e-5) << name;
        EXPECT_LT(diff(got.dk, want.dk), 1e-5) << name;
        EXPECT_LT(diff(got.dv, want.dv), 1e-5) << name;
      }
      // The mask matters wherever a row holds two documents (the check can fail).
      if (lengths[0].size() > 1)
        EXPECT_GT(diff(keel::explicit_attention(q, k, v, scale, capo, nullptr), want.y), 1e-3);
    }
}

// Monitoring under the mask: the blockwise statistics equal the explicit
// path's, and the per-head maximum is the maximum over documents alone.
TEST(DocumentMask, StatisticsHonourTheMask) {
  const std::vector<std::vector<int64_t>> lengths = {{10, 20, 18}, {30, 18}};
  const auto seg = segments_of(lengths);
  torch::manual_seed(8);
  auto q = torch::randn({2, 4, 48, 8}) * 2, k = torch::randn({2, 2, 48, 8}) * 2, v = torch::randn({2, 2, 48, 8});
  torch::NoGradGuard no_grad;
  for (double cap : {0.0, 3.0}) {
    const c10::optional<double> capo = cap > 0 ? c10::optional<double>(cap) : c10::nullopt;
    keel::AttentionStats st, unmasked;
    keel::explicit_attention(q, k, v, 0.35, capo, &st, c10::nullopt, nullptr, seg);
    keel::explicit_attention(q, k, v, 0.35, capo, &unmasked);
    keel::BlockwiseOptions o;
    o.scale = 0.35;
    o.softcap = capo;
    o.block_q = o.block_k = 16;
    o.head_max = o.stats = true;
    o.segments = o.segments_host = seg;
    auto r = keel::blockwise_attention(q, k, v, o);
    EXPECT_NEAR(r.entropy.item<double>(), st.entropy.item<double>(), 1e-5) << cap;
    EXPECT_NEAR(r.max_capped.item<double>(), st.max_score_capped.item<double>(), 1e-5) << cap;
    EXPECT_LT(diff(r.head_max, st.head_max_score), 1e-5) << cap;
    EXPECT_NEAR(r.first_token_mass.item<double>(), st.first_token_mass.item<double>(), 1e-6) << cap;
    // Only the first document's queries can see the window's first token.
    EXPECT_LT(st.first_token_mass.item<double>(), unmasked.first_token_mass.item<double>()) << cap;
    // Fewer keys per query: lower entropy than without the mask.
    EXPECT_LT(st.entropy.item<double>(), unmasked.entropy.item<double>()) << cap;
    // The per-head maximum over each document alone.
    torch::Tensor by_doc;
    for (size_t b = 0; b < lengths.size(); ++b) {
      int64_t start = 0;
      for (int64_t n : lengths[b]) {
        keel::AttentionStats one;
        auto sl = [&](const torch::Tensor& t) { return t.narrow(0, static_cast<int64_t>(b), 1).narrow(2, start, n); };
        keel::explicit_attention(sl(q), sl(k), sl(v), 0.35, capo, &one);
        by_doc = by_doc.defined() ? torch::maximum(by_doc, one.head_max_score) : one.head_max_score;
        start += n;
      }
    }
    EXPECT_LT(diff(st.head_max_score, by_doc), 1e-5) << cap;
  }
}

// A window of two documents gives the second exactly the logits it gets
// alone, with positions reset; on the SDPA path and on the blockwise path
// (a softcap), for each block layout.
TEST(DocumentMask, SecondDocumentOfAWindowGetsItsLogitsAlone) {
  const int E = 1;
  for (const char* layout : {"pre", "post", "reordered", "sandwich"})
    for (bool softcap : {false, true}) {
      SCOPED_TRACE(std::string(layout) + (softcap ? " softcap" : " sdpa"));
      auto cfg = tiny_config();
      cfg.norm_placement = as<NormPlacement>(layout);
      if (softcap) cfg.attn_softcap = 5.0;
      auto model = make_model(cfg, 21);
      perturb(model, 22);
      model->set_documents({E, true});
      auto first = torch::tensor({7, 9, 3, 12, 30}, torch::kInt64);
      auto second = torch::tensor({E, 4, 44, 8, 16, 2, 27, 5, 11, 3}, torch::kInt64);  // 15 tokens with the first
      auto window = torch::cat({first, second}).unsqueeze(0);
      torch::NoGradGuard no_grad;
      auto packed = model->forward(window).narrow(1, first.size(0), second.size(0));
      auto alone = model->forward(second.unsqueeze(0));
      // fp64 throughout on SDPA; the blockwise path's softmax is fp32 (blockwise_attention.h).
      const double tol = softcap ? 1e-5 : 1e-10;
      EXPECT_LT(max_abs_diff(packed, alone), tol);
      // The first document, too: nothing after it leaks back (causality) and it is unchanged by the mask.
      EXPECT_LT(max_abs_diff(model->forward(window).narrow(1, 0, first.size(0)), model->forward(first.unsqueeze(0))),
                tol);
      // Without the position reset the same up to rounding: RoPE's scores
      // depend on relative positions only, and the mask keeps every pair
      // inside one document (the reset matters for exact parity and long
      // positions in low precision, not for the function).
      model->set_documents({E, false});
      EXPECT_LT(max_abs_diff(model->forward(window).narrow(1, first.size(0), second.size(0)), alone), 1e-5);
      // Without the mask the second document sees the first.
      model->set_documents(keel::DocumentMasking{});
      EXPECT_GT(max_abs_diff(model->forward(window).narrow(1, first.size(0), second.size(0)), alone), 1e-6);
    }
}

// Issue 52: the layout's host copy of the segments is made at most once per
// forward, shared by every layer, and not at all on the masked SDPA path
// (which needs nothing on the host). On CUDA each such copy blocks the host;
// before, every forward made one, and the varlen path one more per layer.
TEST(DocumentMask, TheHostCopyOfTheSegmentsIsMadeOncePerForwardAtMost) {
  auto cfg = tiny_config();
  cfg.n_layers = 3;
  auto ids = torch::tensor({{3, 4, 1, 5, 6, 7, 1, 8, 9, 10, 11, 12, 13, 1, 14, 15}}, torch::kInt64);
  for (bool softcap : {false, true}) {
    SCOPED_TRACE(softcap ? "softcap: blockwise, plans on the host" : "SDPA with the mask");
    if (softcap) cfg.attn_softcap = 5.0;
    auto model = make_model(cfg, 4);
    model->set_documents({1, true});
    const int64_t before = keel::document_host_copies();
    auto loss = model->forward(ids).sum();
    loss.backward();  // the blockwise backward plans again, from the same copy
    EXPECT_EQ(keel::document_host_copies() - before, softcap ? 1 : 0);
  }
  // The layout's derived tensors are shared by its copies (checkpointing's recompute keeps one).
  auto layout = keel::document_layout(ids, {1, true});
  const keel::DocumentLayout copy = layout;
  const int64_t before = keel::document_host_copies();
  EXPECT_EQ(copy.segments_host().data_ptr(), layout.segments_host().data_ptr());
  EXPECT_EQ(copy.mask().data_ptr(), layout.mask().data_ptr());
  EXPECT_EQ(keel::document_host_copies() - before, 1);
  const auto [cu, longest] = layout.varlen();
  EXPECT_TRUE(torch::equal(cu, keel::document_cu_seqlens(layout.segments_host()).first));
  EXPECT_EQ(longest, 7);
}

// Monitoring forwards (statistics on: the blockwise path, fp32 softmax) under
// the mask equal the ordinary forward (SDPA with the mask, fp64 here).
TEST(DocumentMask, StatisticsForwardGivesTheSameLogits) {
  auto cfg = tiny_config();
  auto model = make_model(cfg, 4);
  model->set_documents({1, true});
  auto ids = torch::tensor({{3, 4, 1, 5, 6, 7, 1, 8, 9, 10, 11, 12, 13, 1, 14, 15}}, torch::kInt64);
  torch::NoGradGuard no_grad;
  std::vector<keel::AttentionStats> stats;
  keel::ForwardOptions o;
  o.attention_stats = &stats;
  auto with_stats = model->forward(ids, o);
  EXPECT_LT(max_abs_diff(with_stats, model->forward(ids)), 1e-5);
  model->set_documents({});
  EXPECT_GT(max_abs_diff(with_stats, model->forward(ids)), 1e-4);  // the mask changed them
  ASSERT_EQ(stats.size(), 2u);
  EXPECT_TRUE(stats[0].entropy.defined());
  model->set_documents({1, true});
  // The settings table names the masked SDPA call (or varlen, on CUDA when asked).
  EXPECT_NE(model->attention_kernel(2, 16, torch::kCPU, torch::kFloat32).find("with a document mask"), std::string::npos);
}

// The blockwise path skips key blocks wholly in earlier documents: its
// block pairs and its matmuls fall with the number of documents per window,
// forward and backward, while no operator sees a [T, T] tensor.
TEST(DocumentMask, BlockwiseWorkFallsWithTheDocumentsPerWindow) {
  const int64_t T = 4096, block = 128;
  int64_t previous = keel::blockwise_visited_blocks(T, block, block);
  EXPECT_EQ(previous, 32 * 33 / 2);  // causal: the lower triangle of 32 x 32 blocks
  for (int64_t docs : {2, 8, 32}) {
    const auto seg = segments_of({std::vector<int64_t>(static_cast<size_t>(docs), T / docs)});
    const int64_t visited = keel::blockwise_visited_blocks(T, block, block, seg);
    EXPECT_LT(visited, previous) << docs << " documents";
    previous = visited;
  }
  EXPECT_EQ(previous, 32);  // one document per block: the diagonal alone

  // Matmuls actually run, counted with the operator counter at T = 256, blocks of 32.
  const int64_t t = 256;
  auto matmuls = [&](int64_t docs) {
    torch::manual_seed(1);
    auto q = torch::randn({1, 2, t, 8}).requires_grad_(true), k = torch::randn({1, 1, t, 8}).requires_grad_(true),
         v = torch::randn({1, 1, t, 8}).requires_grad_(true);
    keel::BlockwiseOptions o;
    o.softcap = 5.0;
    o.block_q = o.block_k = 32;
    o.segments = o.segments_host = segments_of({std::vector<int64_t>(static_cast<size_t>(docs), t / docs)});
    keel::OpCounter counter(/*record_shapes=*/true);
    keel::blockwise_attention(q, k, v, o).out.sum().backward();
    auto counts = counter.counts();
    int64_t n = 0;
    for (const auto& [name, sizes] : counts.events) {
      n += name == "aten::mm" || name == "aten::bmm";
      const size_t d = sizes.size();
      EXPECT_FALSE(d >= 2 && sizes[d - 1] == t && sizes[d - 2] == t) << name << " saw a [T, T] tensor";
    }
    return n;
  };
  const int64_t one = matmuls(1), four = matmuls(4), eight = matmuls(8);
  EXPECT_GT(one, 0);
  EXPECT_LT(four, one);
  EXPECT_LT(eight, four);
}

TEST(DocumentMask, RopeAtPositionsEqualsTheWindowFromPositionZero) {
  auto tables = keel::make_rope_tables(16, 8, 10000.0, torch::kCPU);
  auto x = torch::randn({1, 6, 2, 8}, torch::kFloat64);
  // Positions 0..2 then 0..2 again: each half equals RoPE of that half alone.
  auto pos = torch::tensor({0, 1, 2, 0, 1, 2}, torch::kInt64).view({1, 6});
  auto y = keel::apply_rope(x, tables, pos);
  EXPECT_TRUE(torch::allclose(y.narrow(1, 3, 3), keel::apply_rope(x.narrow(1, 3, 3).contiguous(), tables), 1e-12, 1e-12));
  EXPECT_TRUE(torch::allclose(y.narrow(1, 0, 3), keel::apply_rope(x.narrow(1, 0, 3).contiguous(), tables), 1e-12, 1e-12));
  EXPECT_FALSE(torch::allclose(y, keel::apply_rope(x, tables), 1e-6, 1e-6));
}

// The varlen kernel's input (CUDA; tests/gpu/test_cuda.cpp runs the kernel):
// every document of every row, rows flattened, and the longest.
TEST(DocumentMask, CuSeqlensListEveryDocumentOfEveryRow) {
  auto [cu, longest] = keel::document_cu_seqlens(segments_of({{3, 5, 8}, {16}, {1, 15}}));
  EXPECT_TRUE(torch::equal(cu, torch::tensor({0, 3, 8, 16, 32, 33, 48}, torch::kInt32)));
  EXPECT_EQ(longest, 16);
  EXPECT_EQ(cu.scalar_type(), torch::kInt32);
}

}  // namespace
