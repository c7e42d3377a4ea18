// A Vision Transformer (Dosovitskiy et al. 2021, "An Image is Worth 16x16 Words") written in
// kiln's DSL and trained with kiln's library -- no kiln CLI -- on a task it makes up: 16 x 16
// grayscale images of noise with one bright 4 x 4 square somewhere in one quadrant; the class
// is the quadrant. The model: the image cut into 16 patches of 4 x 4 (a reshape and a
// transpose), each projected to d_model, a class token before them, learned positions, a
// pre-norm encoder, and a linear head on the class token's output.
//   vit [--steps N (1000)] [--seed S (1)] [--lr LR (3e-4, AdamW)] [--min-accuracy A] [--dump]
// prints the loss and the accuracy on fresh images (each batch scored before its update) every 50
// steps, then the accuracy of the trained weights on 1024 images it never trained on; with
// --min-accuracy, exits 1 below it. --dump prints the optimized forward graph's IR instead.
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "codegen/common/executor_backend.h"
#include "codegen/common/program.h"
#include "frontend/nn.h"
#include "ir/printer.h"
#include "passes/optimizer.h"
#include "passes/stages.h"
#include "runtime/trainer.h"
#include "runtime/weights.h"
#include "support/rng.h"

namespace {

using namespace kiln;
using frontend::Builder;
using frontend::Scope;
using frontend::Tensor;
namespace nn = frontend::nn;

constexpr int64_t kBatch = 32, kSide = 16, kPatch = 4, kClasses = 4;
constexpr int64_t kGrid = kSide / kPatch, kPatches = kGrid * kGrid;
constexpr int64_t kModel = 64, kHeads = 4, kLayers = 2;

class Vit : public nn::Module {
public:
  explicit Vit(Scope scope)
      : Module(std::move(scope)), patchEmbed(child("patch_embed"), kPatch * kPatch, kModel),
        cls(param("cls_token", {kModel}, nn::normalInit(), std::source_location::current())),
        pos(param("pos_embed", {kPatches + 1, kModel}, nn::normalInit(),
                  std::source_location::current())),
        blocks(nn::makeLayers<nn::EncoderLayer>(child("blocks"), kLayers,
                                                {.dModel = kModel,
                                                 .nHeads = kHeads,
                                                 .dFF = 4 * kModel,
                                                 .activation = nn::Activation::Gelu})),
        norm(child("norm"), kModel), head(child("head"), kModel, kClasses) {}

  // pixels [B, 1, 16, 16] -> logits [B, classes]
  Tensor operator()(const Tensor &pixels) const {
    const int64_t b = pixels.dim(0);
    // Row r of the image is (patch row r / 4, row r % 4 inside it); likewise the columns.
    Tensor grid = pixels.reshape({b, kGrid, kPatch, kGrid, kPatch});
    Tensor patches = grid.permute({0, 1, 3, 2, 4}).reshape({b, kPatches, kPatch * kPatch});
    Tensor x = nn::prependToken(patchEmbed(patches), cls); // [B, 17, d]
    x = x + pos;
    for (const nn::EncoderLayer &block : blocks)
      x = block(x);
    Tensor first = norm(x).slice(1, 0, 1).reshape({b, kModel}); // the class token's output
    return head(first);
  }

private:
  nn::Linear patchEmbed;
  Tensor cls, pos;
  std::vector<nn::EncoderLayer> blocks;
  nn::LayerNorm norm;
  nn::Linear head;
};

// The training graph: inputs "pixels" and "labels", outputs "logits" and "loss".
ir::Graph buildVit() {
  Builder b("vit");
  Tensor pixels = b.input("pixels", {ir::DType::F32, {kBatch, 1, kSide, kSide}});
  Tensor labels = b.input("labels", {ir::DType::I64, {kBatch}}, kClasses);
  Vit model{Scope(b)};
  Tensor logits = model(pixels);
  b.output("logits", logits);
  b.loss("loss", nn::crossEntropy(logits, labels));
  return b.finish();
}

// A batch of images: noise in [0, 0.5), a 4 x 4 square of 1s at a random place inside a random
// quadrant; the label is the quadrant (0 top left, 1 top right, 2 bottom left, 3 bottom right).
runtime::Batch images(uint64_t seed, int64_t index) {
  runtime::BatchTensor pixels{"pixels", {kBatch, 1, kSide, kSide}, {}, {}};
  runtime::BatchTensor labels{"labels", {kBatch}, {}, {}};
  uint64_t draw = static_cast<uint64_t>(index) * kBatch * (kSide * kSide + 3);
  auto next = [&] { return rng::uniform(seed, draw++); };
  const int64_t half = kSide / 2;
  for (int64_t n = 0; n < kBatch; ++n) {
    const int64_t quadrant = static_cast<int64_t>(next() * kClasses) % kClasses;
    const int64_t r0 = (quadrant / 2) * half + static_cast<int64_t>(next() * (half - 3));
    const int64_t c0 = (quadrant % 2) * half + static_cast<int64_t>(next() * (half - 3));
    for (int64_t r = 0; r < kSide; ++r)
      for (int64_t c = 0; c < kSide; ++c) {
        const bool square = r >= r0 && r < r0 + 4 && c >= c0 && c < c0 + 4;
        pixels.reals.push_back(square ? 1.0 : 0.5 * next());
      }
    labels.values.push_back(quadrant);
  }
  return {pixels, labels};
}

template <class T> T orDie(Expected<T> e, std::string_view what) {
  if (!e) {
    std::fprintf(stderr, "vit: %s: %s\n", std::string(what).c_str(), e.error().message.c_str());
    std::exit(1);
  }
  return std::move(*e);
}

// The fraction of the batch whose largest logit is its label.
double accuracy(runtime::Executable &exe, const runtime::Batch &batch) {
  const runtime::HostTensor logits = orDie(exe.read("logits"), "logits");
  int64_t right = 0;
  for (int64_t n = 0; n < kBatch; ++n) {
    int64_t best = 0;
    for (int64_t k = 1; k < kClasses; ++k)
      if (logits.get(n * kClasses + k) > logits.get(n * kClasses + best))
        best = k;
    right += best == batch[1].values[static_cast<size_t>(n)];
  }
  return double(right) / double(kBatch);
}

// A flag's value: a number, the whole text, within [lo, hi] (and whole if `integral`); anything
// else ends the program with the flag's name and what it expects.
double flagValue(std::string_view flag, const char *text, double lo, double hi, bool integral) {
  double v = 0;
  const char *end = text + std::strlen(text);
  const auto [stop, ec] = std::from_chars(text, end, v);
  if (ec != std::errc() || stop != end || !(v >= lo && v <= hi) ||
      (integral && v != std::floor(v))) {
    std::fprintf(stderr, "vit: %s %s: expected %s in [%g, %g]\n", std::string(flag).c_str(), text,
                 integral ? "a whole number" : "a number", lo, hi);
    std::exit(1);
  }
  return v;
}

} // namespace

// The model, or its DSL error said (the place in this file) and exit 1: a mistake in the model
// is the user's, not a crash.
ir::Graph builtVit() {
  try {
    return buildVit();
  } catch (const frontend::DslError &e) {
    std::fprintf(stderr, "vit: error: %s\n", e.what());
    std::exit(1);
  }
}

int main(int argc, char **argv) {
  int64_t steps = 1000;
  uint64_t seed = 1;
  // lr 3e-4: held-out accuracy 0.986-1.000 over seeds 1-10. At 1e-3 (the default before) some
  // seeds stalled on a plateau (0.58-0.90 after 1000 steps, and 2000 did not lift them), and
  // which ones moved with the rounding of any kernel.
  double minAccuracy = -1, lr = 3e-4;
  bool dump = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::printf("vit [--steps N] [--seed S] [--lr LR] [--min-accuracy A] [--dump]\n"
                  "  trains a Vision Transformer on made-up images (which quadrant holds a "
                  "bright square)\n  and scores it on held-out ones; --min-accuracy A: exit 1 "
                  "below it; --dump: print its\n  optimized forward IR\n");
      return 0;
    }
    if (flag == "--dump") {
      dump = true;
      continue;
    }
    if (i + 1 == argc) {
      std::fprintf(stderr, "vit: %s needs a value\n", argv[i]);
      return 1;
    }
    const char *value = argv[++i];
    if (flag == "--steps")
      steps = static_cast<int64_t>(flagValue(flag, value, 1, 1e7, true));
    else if (flag == "--seed")
      seed = static_cast<uint64_t>(flagValue(flag, value, 0, 0x1p53, true));
    else if (flag == "--lr")
      lr = flagValue(flag, value, 0, 10, false);
    else if (flag == "--min-accuracy")
      minAccuracy = flagValue(flag, value, 0, 1, false);
    else {
      std::fprintf(
          stderr, "vit: unknown flag %s (--steps N, --seed S, --lr LR, --min-accuracy A, --dump)\n",
          argv[i - 1]);
      return 1;
    }
  }
  // The forward program that scores held-out images: optimized (attention and norms fused).
  const ir::Graph forward = orDie(passes::optimizedForward(builtVit()), "forward");
  if (dump) {
    std::fputs(ir::print(forward).c_str(), stdout);
    return 0;
  }
  // The whole training step -- fused, differentiated, AdamW, lowered -- on the highway backend.
  passes::OptimizerConfig adamw;
  adamw.schedule.lr = lr;
  const ir::Graph step = orDie(passes::trainingStep(builtVit(), adamw), "training step");
  std::unique_ptr<runtime::Executor> exe =
      orDie(codegen::compileExecutor(codegen::withMemoryPlan(step), {}), "compile");
  if (Status s = runtime::initWeights(*exe, seed); !s)
    return orDie(Expected<int>(s.error()), "weights");
  runtime::Trainer trainer = orDie(runtime::Trainer::create(*exe), "trainer");
  double recent = 0; // accuracy over the last 50 batches, each scored before its update
  for (int64_t k = 0; k < steps; ++k) {
    const runtime::Batch batch = images(seed, k);
    const double loss = orDie(trainer.step(batch), "step");
    recent += accuracy(*exe, batch);
    if ((k + 1) % 50 == 0 || k + 1 == steps) {
      const int64_t n = (k + 1) % 50 == 0 ? 50 : (k + 1) % 50;
      std::printf("step %5lld  loss %.4f  accuracy on fresh images %.3f\n",
                  static_cast<long long>(k + 1), loss, recent / double(n));
      recent = 0;
    }
  }
  // Held out: 1024 images of another seed's stream, through the forward program with the
  // trained weights (no update).
  std::unique_ptr<runtime::Executor> eval =
      orDie(codegen::compileExecutor(codegen::withMemoryPlan(forward), {}), "compile");
  for (const runtime::Symbol &s : eval->program().symbols)
    if (s.kind == runtime::Symbol::Kind::Param)
      if (Status st = eval->write(s, orDie(exe->read(s.name), s.name)); !st)
        return orDie(Expected<int>(st.error()), s.name);
  double held = 0;
  const int64_t batches = 1024 / kBatch;
  for (int64_t k = 0; k < batches; ++k) {
    const runtime::Batch batch = images(seed + 1000, k);
    if (Status st = runtime::writeBatch(*eval, batch); !st)
      return orDie(Expected<int>(st.error()), "batch");
    if (Status st = eval->run(); !st)
      return orDie(Expected<int>(st.error()), "forward");
    held += accuracy(*eval, batch);
  }
  held /= double(batches);
  std::printf("accuracy on %lld held-out images: %.3f\n", static_cast<long long>(batches * kBatch),
              held);
  return minAccuracy >= 0 && held < minAccuracy ? 1 : 0;
}
