// The training loop that `kiln train` and a standalone executable's `train` both run, so that the
// two behave alike and say each thing in one text: per step the interrupt check (SIGINT, SIGTERM
// or SIGUSR1 saves to --save, says so and stops), the batch and the step, the non-finite guard
// (stop, saving the weights from before the step, or skip), the loss lines (or a progress bar on
// a terminal), the validation loss every N steps, a JSON-lines record, rolling checkpoints; at the
// end the final save and the summary. What differs is given: how to compute the validation loss
// (kiln: a forward program of its own; an executable: its training step, undone after) and what to
// do with each point (kiln draws them).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/communicator.h"
#include "runtime/executable.h"
#include "runtime/model_description.h"
#include "runtime/output_file.h"
#include "runtime/tasks.h"
#include "runtime/trainer.h"
#include "support/status.h"

namespace kiln::runtime {

struct TrainingData {
  TaskKind task = TaskKind::Lm;
  TaskShape shape; // one rank's: shape.batch rows of each global batch
  uint64_t seed = 0;
  TaskText text; // the training text's ids (lm, mlm, pairs)
  // A data-parallel run: this process is rank `rank` of `ranks`, and step k trains on rows
  // [rank B, (rank + 1) B) of the batch k that one process with batch ranks B would draw.
  int rank = 0, ranks = 1;
};

// Batch `index` of `data`'s run, this rank's rows of it.
Batch trainingBatch(const TrainingData &data, uint64_t index);

struct TrainingOptions {
  int64_t steps = 100;
  uint64_t firstBatch = 0; // batches drawn before: a resumed run's (steps count on from it)
  int64_t logEvery = 0;    // print the loss every N steps (0: every step, or a bar on a terminal)
  int64_t evalEvery = 0;   // the validation loss every N steps and after the last (0: never)
  int64_t evalBatches = 0; // of each validation loss (for its line)
  std::string save;        // the checkpoint after the last step (and on an interrupt), or ""
  int64_t saveEvery = 0;   // also STEM.stepK.safetensors every N steps (two kept)
  std::string log;         // a JSON-lines record of the logged steps, or ""
  std::string plot;        // the caller's picture of the losses (the ranks agree on it), or ""
  bool skipNonFinite = false; // a step whose loss or gradient norm is not finite: skip, or stop
  // The digest (digest()) of the held-out ids the validation batches are drawn from: the ranks
  // must agree on it, as on their training text.
  uint64_t validationDigest = 0;
  std::string what;                            // "gpt on task lm": the summary line's
  std::optional<ModelDescription> description; // written into every checkpoint saved
};

struct TrainingResult {
  int64_t steps = 0, skipped = 0; // updates skipped (non-finite)
  double first = 0, last = 0;     // the first and last applied step's loss
  double seconds = 0;
  // Non-empty where the run stopped early, on every rank after the same step, its save tried (a
  // signal; a non-finite step without skipNonFinite; the step counter's last exact step): the
  // run's error ("interrupted by SIGINT after
  // K of N steps; saved ..."). The caller writes its last output, reports it (exit status 1), and
  // then ends the ranks together (Communicator::endTogether): mpirun ends the whole job as soon as
  // one rank exits non-zero, which cut rank 0's --plot and its "saved" line short.
  std::string stopped;
};

// The validation loss with the weights the training program holds now.
using Validate = std::function<Expected<double>()>;
// Each point of the run as it comes: the step, and its loss or validation loss.
using OnPoint = std::function<void(int64_t step, double loss, bool validation)>;

// A data-parallel run's part of the session, the same for kiln train and a standalone executable
// under mpirun: `exe` runs its collectives over `world`; `data` draws this rank's rows; rank 0
// alone writes (--save, --save-every, --log; every rank takes part in a save, which gathers a
// sharded optimizer's state) and prints (the others' stdout goes to /dev/null;
// their errors still reach stderr); and before the first step the ranks check that they run one
// program (`program`: a digest of it) on one text with one seed, step count and checkpoint. An
// Error (on every rank) where they differ. `background`: the gradients' reductions run beside the
// backward (Communicator::setBackground; backgroundPays says where that pays). Nothing to do for a
// world of one.
Status joinRanks(Communicator &world, uint64_t program, bool background, Executable &exe,
                 TrainingData &data, TrainingOptions &options);
// An Error (on every rank) naming what differs where the ranks' digests of `parts` (what each
// is, its digest here) do not all agree: one comparison each, in this order on every rank.
// joinRanks' check; kiln bench --train's too.
using RankPart = std::pair<std::string_view, uint64_t>;
Status checkRanksAgree(Communicator &world, std::span<const RankPart> parts);
// After the ranks have joined and each has its weights (initialized, or loaded from `loaded`, or
// ""): an Error on every rank where they start from different weights or optimizer state (each
// rank was given another checkpoint of the same model and batches drawn, which joinRanks cannot
// tell apart: the ranks would train different models, their losses averaged, or update alike
// weights by different moments). Nothing to do for a world of one.
Status checkSameWeights(Communicator &world, const Executable &exe, const std::string &loaded);
// FNV-1a of `bytes` continuing from `h`, 8 bytes a step and the tail byte by byte (GPT-2 124M's
// 0.5 GB of weights in a fraction of a second): the ranks' digests (joinRanks, checkSameWeights),
// never stored.
uint64_t digest(std::string_view bytes, uint64_t h = 14695981039346656037ull);
// The digest of token ids' bytes (a training or held-out text, as the ranks compare them).
uint64_t digest(std::span<const int32_t> ids);

// Runs `options.steps` steps of `trainer`'s program. An interrupt, a non-finite step without
// skipNonFinite, or the step counter's last exact step stops it early (TrainingResult::stopped,
// which says whether its save was written); a failing step, save or log is an Error.
Expected<TrainingResult> runTraining(Trainer &trainer, const TrainingData &data,
                                     const TrainingOptions &options, const Validate &validate = {},
                                     const OnPoint &onPoint = {});

// The mean loss of `exe`'s program over `batches`. `restore`: every parameter and state is put
// back after each batch, as it was before the first (a training step's program updates them in
// place as it runs): how a standalone executable evaluates with its training step. While an
// InterruptGuard holds a signal it stops early, with NaN: a training run being stopped drops
// that validation (runTraining), rather than finish 10000 batches before it saves.
Expected<double> meanLoss(Executable &exe, const std::vector<Batch> &batches, bool restore);
// The mean loss of `eval` (a forward program with a loss) over `batches`, with the parameters
// `weights` holds now.
Expected<double> validationLoss(Executable &eval, const Executable &weights,
                                const std::vector<Batch> &batches);

// The validation batches: the same at every evaluation (windows of the held-out ids; for the
// synthetic tasks, batches of their own seed), so that the losses compare. On `data.ranks` ranks,
// this rank's row block of each of `count` batches of the global batch (ranks x shape.batch
// rows); meanOverRanks then averages the ranks' losses. So the rows are those one process of the
// global batch evaluates, whatever the ranks (they were shape.batch rows, other rows for another
// rank count: 4.663486 on 2 ranks against 4.660997 alone). The loss is one process's within f32
// rounding for lm, copy and reverse; for mlm and pairs, whose blocks score different numbers of
// tokens, the blocks weigh alike, as the training loss's ranks do.
std::vector<Batch> validationBatches(const TrainingData &data, const std::vector<int32_t> &heldOut,
                                     int64_t count);
// `loss` averaged over the ranks of `world` (in f32: MPI's mean), or its error; `loss` itself on a
// world of one. Every rank calls it at the same point.
Expected<double> meanOverRanks(Communicator &world, Expected<double> loss);

// checkTask on the training part of a text (named `textName`: checkTask); where it fails only
// because --val-fraction `heldOut` kept the tail out (the whole text, `whole()`'s ids, passes), the
// error says so.
Status checkTrainingText(TaskKind task, const TaskShape &shape, const std::vector<int32_t> &train,
                         double heldOut, const std::function<std::vector<int32_t>()> &whole,
                         std::string_view textName = {});

// A note (for stderr, ending in a newline) where task pairs cuts lines of the text `ids`
// (`textName`'s): how many of them, and to what; nullopt where it cuts none, or for another task.
std::optional<std::string> cutLinesNote(TaskKind task, const TaskShape &shape,
                                        std::span<const int32_t> ids, std::string_view textName);

// --save-every's own checks, made before the work: it needs --save, a file to name its rolling
// checkpoints after (not a device: --save /dev/null made a regular file /dev/null.step1).
Status checkSaveEvery(int64_t saveEvery, const std::string &save);

// That no checkpoint --save-every will write in the run `o` replaces one of its `inputs` (--data
// over a file named d.step2.safetensors, --load of a checkpoint whose name says another step) or
// of its `outputs` (--log, --plot: written over, then removed with the old checkpoints): an error
// naming the step and both files. Checked before the first step.
Status checkRollingCheckpoints(const TrainingOptions &o, std::span<const RunInput> inputs,
                               std::span<const RunInput> outputs = {});

// The tokens a step of `shape` trains on (the rate and the log's token counts).
double tokensPerStep(const TaskShape &shape);

// Whether --val-fraction means something for `task`: an error for the tasks that make their own
// sequences (copy, reverse), which hold nothing out.
Status checkHeldOut(TaskKind task);

// --save-every's file for step k: STEM.stepK.safetensors beside --save's STEM.safetensors.
std::string rollingCheckpointPath(const std::string &save, int64_t step);

} // namespace kiln::runtime
