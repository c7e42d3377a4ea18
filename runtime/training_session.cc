// The training loop of kiln train and of standalone executables (see training_session.h).
#include "runtime/training_session.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include "runtime/checkpoint.h"
#include "runtime/input_file.h"
#include "runtime/interrupt.h"
#include "runtime/json_text.h"
#include "runtime/output_file.h"
#include "runtime/posix_file.h"
#include "runtime/progress.h"
#include "runtime/safetensors.h"
#include "runtime/sharded_state.h"
#include "support/param_init.h"

namespace kiln::runtime {

namespace {

// What rank 0 says the moment SIGTERM reaches it under mpirun (see interrupt.h): mpirun answers
// SIGINT or SIGTERM with SIGTERM to the ranks T seconds later and SIGKILL T seconds after that
// (T = odls_base_sigkill_timeout, 1 by default; a larger T delays both), so the save may not come.
std::string mpiTermNote() {
  const char *t = std::getenv("OMPI_MCA_odls_base_sigkill_timeout");
  return fmt::format("kiln: SIGTERM from mpirun, which kills every rank {} s later: a step and the "
                     "save after it may not fit in that. To stop with a save, send SIGUSR1 to "
                     "mpirun instead (kill -USR1 PID).\n",
                     t ? t : "1");
}

// --save-every's checkpoints: the two latest this run wrote are kept (a resumed run leaves the
// earlier run's alone).
struct RollingCheckpoints {
  static constexpr size_t kKept = 2;
  std::string base; // --save
  const ModelDescription *description;
  std::deque<std::string> written;

  Expected<std::string> save(const Executable &exe, int64_t step) {
    const std::string path = rollingCheckpointPath(base, step);
    if (Status s = saveCheckpoint(exe, path, step, description); !s)
      return s.error();
    if (!writesCheckpoints(exe))
      return path; // (rank 0 wrote it, and removes the old ones)
    written.push_back(path);
    if (written.size() > kKept) {
      std::error_code ec;
      std::filesystem::remove(written.front(), ec);
      written.pop_front();
    }
    return path;
  }
};

// A number as JSON has it: null for NaN and the infinities.
std::string jsonNumber(double v) {
  return std::isfinite(v) ? fmt::format("{}", v) : "null";
}

// The part of an earlier run's --log that a resumed run keeps: its records up to the first past
// the checkpoint's step `upTo` (that run went on past this checkpoint, and this one redoes those
// steps), as the bytes before it, and the last kept record's seconds, which the resumed run's
// records count on from (the steps after it under --log-every K uncounted): resuming with the
// same --log continues its history instead of writing over it. The file is cut there, never
// rewritten, so that no failure loses what it keeps. A last line cut short (a full disk, a kill
// while it was written) is dropped; any other line that is no record makes it no such log: an error
// naming the line, not a file to write over.
struct EarlierLog {
  uint64_t keep = 0; // the bytes kept
  double seconds = 0;
  bool endsCut = false; // the last kept record has no newline (written before the next)
  // The last kept record's step and tokens (tokens < 0: it has none), which the resumed run's
  // tokens count on from: its batch may be another.
  uint64_t step = 0;
  double tokens = -1;
};

Expected<EarlierLog> earlierLog(const std::string &path, uint64_t upTo) {
  EarlierLog kept;
  Expected<std::string> text = readInputText(path);
  if (!text)
    return makeError("--log {}", text.error().message);
  int64_t lineNo = 0;
  for (size_t at = 0; at < text->size(); ++lineNo) {
    const size_t newline = text->find('\n', at);
    const size_t end = std::min(newline, text->size());
    const std::string_view line(text->data() + at, end - at);
    if (line.empty()) { // (kept, as JSON lines readers skip it)
      kept.keep = at = end + 1;
      continue;
    }
    Expected<JsonText> record = readJson(line, {});
    const Json *step = nullptr, *seconds = nullptr, *tokens = nullptr;
    if (record && record->value.is_object()) {
      const Json &r = record->value;
      step = r.contains("step") && r["step"].is_number_unsigned() ? &r["step"] : nullptr;
      seconds = r.contains("seconds") && r["seconds"].is_number() ? &r["seconds"] : nullptr;
      tokens = r.contains("tokens") && r["tokens"].is_number() ? &r["tokens"] : nullptr;
    }
    if (!step || !seconds) {
      if (newline == std::string::npos)
        break; // (the last line, cut short)
      return makeError("--log {}: line {}: is not a record of kiln train's log ({{\"step\": N, "
                       "\"seconds\": S, ...}}); a run resumed with --load keeps the records of "
                       "its --log: give another --log, or remove this file",
                       path, lineNo + 1);
    }
    if (step->get<uint64_t>() > upTo)
      break;
    kept.keep = at = std::min(end + 1, text->size());
    kept.seconds = seconds->get<double>(), kept.endsCut = newline == std::string::npos;
    kept.step = step->get<uint64_t>(), kept.tokens = tokens ? tokens->get<double>() : -1;
  }
  return kept;
}

} // namespace

Status checkTrainingText(TaskKind task, const TaskShape &shape, const std::vector<int32_t> &train,
                         double heldOut, const std::function<std::vector<int32_t>()> &whole,
                         std::string_view textName) {
  Status st = checkTask(task, shape, train, textName);
  if (st || !(heldOut > 0) || !checkTask(task, shape, whole()))
    return st;
  return makeError("{}; that is the text without its held-out tail (--val-fraction {})",
                   st.error().message, heldOut);
}

std::optional<std::string> cutLinesNote(TaskKind task, const TaskShape &shape,
                                        std::span<const int32_t> ids, std::string_view textName) {
  if (task != TaskKind::Pairs)
    return std::nullopt;
  const PairLines p = pairLinesLongerThan(ids, shape.srcLen);
  if (p.cut == 0)
    return std::nullopt;
  return fmt::format("note: {}: {} of the {} lines it trains on have a source or target longer "
                     "than the model's {} tokens (src_len): each trains on its first {} (a target "
                     "so cut with no EOS to learn)\n",
                     textName, p.cut, p.lines, shape.srcLen, shape.srcLen);
}

Status checkSaveEvery(int64_t saveEvery, const std::string &save) {
  if (saveEvery <= 0)
    return {};
  if (save.empty())
    return makeError("--save-every: needs --save (its checkpoints are named after it)");
  // (A descriptor, /dev/fd/3, follows to a regular file, beside which no name can be made.)
  if (Expected<std::string> real = followedPath(save); !real)
    return makeError("--save-every: {}", real.error().message);
  std::error_code ec;
  const auto kind = std::filesystem::status(save, ec).type();
  if (kind != std::filesystem::file_type::not_found && kind != std::filesystem::file_type::regular)
    return makeError("--save-every: --save {} is not a regular file, and the rolling checkpoints "
                     "are named after it",
                     save);
  return {};
}

Status checkRollingCheckpoints(const TrainingOptions &o, std::span<const RunInput> inputs,
                               std::span<const RunInput> outputs) {
  if (o.saveEvery <= 0 || o.save.empty())
    return {};
  // STEM.stepK.safetensors for a K this run saves at: the step K a file name says, if any.
  const std::filesystem::path stem(rollingCheckpointPath(o.save, 0));
  const std::string name = stem.filename().string(), step = ".step";
  const std::string prefix = name.substr(0, name.rfind(step) + step.size()),
                    suffix = name.substr(prefix.size() + 1); // (after the "0")
  const std::filesystem::path dir = stem.has_parent_path() ? stem.parent_path() : ".";
  auto stepOf = [&](const std::string &file) -> std::optional<int64_t> {
    if (!file.starts_with(prefix) || !file.ends_with(suffix) ||
        file.size() <= prefix.size() + suffix.size())
      return std::nullopt;
    const std::string digits =
        file.substr(prefix.size(), file.size() - prefix.size() - suffix.size());
    int64_t k = 0;
    const auto [at, err] = std::from_chars(digits.data(), digits.data() + digits.size(), k);
    const auto first = static_cast<int64_t>(o.firstBatch);
    if (err != std::errc() || at != digits.data() + digits.size() || k <= first ||
        k >= first + o.steps || k % o.saveEvery != 0)
      return std::nullopt;
    return k;
  };
  auto what = [&](int64_t k) { return fmt::format("--save-every {} (step {})", o.saveEvery, k); };
  // The longest name it writes (the last step's) must be a file name (NAME_MAX bytes): it was
  // found so only at that step.
  const int64_t last =
      (static_cast<int64_t>(o.firstBatch) + o.steps - 1) / o.saveEvery * o.saveEvery;
  if (const std::string longest = rollingCheckpointPath(o.save, std::max<int64_t>(last, 1));
      std::filesystem::path(longest).filename().string().size() > NAME_MAX)
    return makeError("{}: the checkpoint {} has a file name of more than {} bytes: shorten --save",
                     what(last), longest, NAME_MAX);
  // Only a file that exists can be an input, so the directory's names are read, not the steps'
  // (a run may have 10^9).
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (const std::optional<int64_t> k = stepOf(it->path().filename().string()))
      if (Status s = checkNotAnInput(what(*k), rollingCheckpointPath(o.save, *k), inputs); !s)
        return s;
  // An output (existing or not) named as one of the checkpoints.
  for (const RunInput &out : outputs)
    if (!out.path.empty())
      if (const std::optional<int64_t> k =
              stepOf(std::filesystem::path(out.path).filename().string()))
        if (Status s = checkDistinctOutputs(what(*k), rollingCheckpointPath(o.save, *k), out.flag,
                                            out.path);
            !s)
          return s;
  return {};
}

double tokensPerStep(const TaskShape &shape) {
  return static_cast<double>(shape.batch * (shape.seqLen > 0 ? shape.seqLen : shape.srcLen));
}

Status checkHeldOut(TaskKind task) {
  if (task == TaskKind::Lm || task == TaskKind::Mlm || task == TaskKind::Pairs)
    return {};
  return makeError("--val-fraction: task {} makes its own sequences, so nothing is held out (lm, "
                   "mlm and pairs hold out their text's tail)",
                   taskName(task));
}

std::string rollingCheckpointPath(const std::string &save, int64_t step) {
  const std::string ext = ".safetensors";
  const bool hasExt = save.size() > ext.size() && save.ends_with(ext);
  return fmt::format("{}.step{}{}", hasExt ? save.substr(0, save.size() - ext.size()) : save, step,
                     hasExt ? ext : "");
}

Expected<double> meanLoss(Executable &exe, const std::vector<Batch> &batches, bool restore) {
  std::vector<std::pair<const Symbol *, HostTensor>> kept;
  for (const Symbol &s : exe.program().symbols)
    if (restore && s.isWeight())
      kept.emplace_back(&s, exe.read(s));
  double total = 0;
  for (const Batch &b : batches) {
    if (InterruptGuard::received() != 0) // (a run being stopped: see the header)
      return std::numeric_limits<double>::quiet_NaN();
    if (Status s = writeBatch(exe, b); !s)
      return s.error();
    if (Status s = exe.run(); !s)
      return s.error();
    total += exe.read(*exe.program().loss()).get(0);
    for (const auto &[s, t] : kept)
      if (Status st = exe.write(*s, t); !st)
        return st.error();
  }
  return total / static_cast<double>(batches.size());
}

Expected<double> validationLoss(Executable &eval, const Executable &weights,
                                const std::vector<Batch> &batches) {
  for (const Symbol &s : eval.program().symbols)
    if (s.kind == Symbol::Kind::Param) {
      Expected<HostTensor> t = weights.read(s.name);
      if (!t)
        return t.error();
      if (Status st = eval.write(s, *t); !st)
        return st.error();
    }
  return meanLoss(eval, batches, false);
}

Batch trainingBatch(const TrainingData &data, uint64_t index) {
  if (data.ranks == 1)
    return makeBatch(data.task, data.shape, data.seed, index, data.text);
  TaskShape global = data.shape;
  global.batch *= data.ranks;
  return batchRows(makeBatch(data.task, global, data.seed, index, data.text),
                   data.rank * data.shape.batch, data.shape.batch);
}

uint64_t digest(std::string_view bytes, uint64_t h) {
  size_t k = 0;
  for (; k + 8 <= bytes.size(); k += 8) {
    uint64_t word;
    std::memcpy(&word, bytes.data() + k, 8);
    h = (h ^ word) * 1099511628211ull;
  }
  for (; k < bytes.size(); ++k)
    h = (h ^ static_cast<unsigned char>(bytes[k])) * 1099511628211ull;
  return h;
}

uint64_t digest(std::span<const int32_t> ids) {
  return digest(std::string_view(reinterpret_cast<const char *>(ids.data()), ids.size_bytes()));
}

Status joinRanks(Communicator &world, uint64_t program, bool background, Executable &exe,
                 TrainingData &data, TrainingOptions &options) {
  exe.setCommunicator(&world);
  data.rank = world.rank(), data.ranks = world.size();
  if (world.size() == 1)
    return {};
  // The ranks must agree before the first step: one that differs would train on, or wait in a
  // collective that another rank's program lacks.
  const RankPart parts[] = {
      {"their program (the model, its settings, the precision, the optimizer or its rates)",
       program},
      {"their seed", digest(fmt::format("{}", data.seed))},
      {"their steps", digest(fmt::format("{}", options.steps))},
      {"the checkpoint they resume (its batches drawn)",
       digest(fmt::format("{}", options.firstBatch))},
      {"their --save", digest(options.save)},
      // (each save, each validation and each step's --on-nan check meets every rank)
      {"their --save-every", digest(fmt::format("{}", options.saveEvery))},
      {"their --eval-every or --eval-batches",
       digest(fmt::format("{} {}", options.evalEvery, options.evalBatches))},
      {"their --on-nan", digest(fmt::format("{}", options.skipNonFinite))},
      {"their --log", digest(options.log)}, // (rank 0's is written: one that has none writes none)
      {"their --plot", digest(options.plot)},
      {"their task", digest(fmt::format("{}", static_cast<int>(data.task)))},
      {"their data (its text or tokenizer)", digest(data.text.ids)},
      {"their validation text (the part of their data --val-fraction holds out)",
       options.validationDigest}};
  if (Status st = checkRanksAgree(world, parts); !st)
    return st;
  // Rank 0 speaks and writes for the run. Every rank saves with it (saveCheckpoint writes on rank
  // 0 only), since a sharded optimizer's state is gathered from them all.
  if (world.rank() != 0)
    options.log.clear();
  world.setBackground(background);
  return quietUnlessRankZero(world);
}

Status checkRanksAgree(Communicator &world, std::span<const RankPart> parts) {
  std::vector<std::string_view> differ;
  for (const auto &[what, value] : parts) {
    Expected<bool> same = world.same(value);
    if (!same)
      return same.error();
    if (!*same)
      differ.push_back(what);
  }
  if (!differ.empty())
    return makeError("the {} ranks differ in {}: each rank must be started with the same command "
                     "line and files",
                     world.size(), fmt::join(differ, ", "));
  return {};
}

Status checkSameWeights(Communicator &world, const Executable &exe, const std::string &loaded) {
  if (world.size() == 1)
    return {};
  auto add = [](uint64_t h, std::string_view name, std::span<const uint8_t> bytes) {
    return digest(std::string_view(reinterpret_cast<const char *>(bytes.data()), bytes.size()),
                  digest(name, h));
  };
  // The weights and the optimizer's state as they are, but a sharded optimizer's, which is each
  // rank's own part: for it, the state of the checkpoint each loaded, whole (read again, a
  // tensor at a time).
  uint64_t h = digest("");
  bool sharded = false;
  for (const Symbol &s : exe.program().symbols) {
    if (s.kind == Symbol::Kind::Param || (s.kind == Symbol::Kind::State && !isShardedState(s)))
      h = add(h, s.name, exe.read(s).raw());
    sharded = sharded || (s.kind == Symbol::Kind::State && isShardedState(s));
  }
  if (sharded && !loaded.empty()) {
    Expected<SafetensorsFile> header = readSafetensors(loaded, std::vector<std::string>{});
    if (!header)
      return header.error();
    std::vector<std::string> names = header->unread;
    std::sort(names.begin(), names.end());
    for (const std::string &name : names) {
      if (!name.starts_with(kOptimizerStatePrefix))
        continue;
      Expected<SafetensorsFile> one = readSafetensors(loaded, std::vector<std::string>{name});
      if (!one)
        return one.error();
      h = add(h, name, one->tensors.front().data);
    }
  }
  Expected<bool> same = world.same(h);
  if (!same)
    return same.error();
  if (!*same)
    return makeError("the {} ranks differ in their weights or optimizer state (each resumes "
                     "another checkpoint): each rank must be started with the same command line "
                     "and files",
                     world.size());
  return {};
}

std::vector<Batch> validationBatches(const TrainingData &data, const std::vector<int32_t> &heldOut,
                                     int64_t count) {
  TaskShape global = data.shape;
  global.batch *= data.ranks;
  std::vector<Batch> out;
  for (int64_t k = 0; k < count; ++k) {
    Batch whole = makeBatch(data.task, global, data.seed ^ 0x76616c6964617465ull,
                            static_cast<uint64_t>(k), heldOut);
    out.push_back(data.ranks == 1
                      ? std::move(whole)
                      : batchRows(whole, data.rank * data.shape.batch, data.shape.batch));
  }
  return out;
}

Expected<double> meanOverRanks(Communicator &world, Expected<double> loss) {
  if (!loss || world.size() == 1)
    return loss;
  float mean = static_cast<float>(*loss);
  if (Status s = world.allReduceMean(&mean, 1); !s)
    return s.error();
  return static_cast<double>(mean);
}

Expected<TrainingResult> runTraining(Trainer &trainer, const TrainingData &data,
                                     const TrainingOptions &o, const Validate &validate,
                                     const OnPoint &onPoint) {
  Executable &exe = trainer.executable();
  if (Status st = checkSaveEvery(o.saveEvery, o.save); !st)
    return st.error();
  // (The commands check it with the file's name; a library caller's short text read past its end.)
  if (Status st = checkTask(data.task, data.shape, data.text.ids); !st)
    return makeError("the training data: {}", st.error().message);
  // The optimizer counts its updates in its step counter (stepCounter, of the loss's dtype), which
  // holds whole numbers exactly up to exactIntegerLimit (f32: 2^24): past that the count, and with
  // it the learning-rate schedule and the bias corrections, would stop moving. A run stops there
  // (with its save), as at a signal: a run of --steps 1000000000 is one that a signal is meant to
  // stop.
  const Symbol *counter = exe.program().stepCounter();
  const uint64_t lastStep = counter ? static_cast<uint64_t>(exactIntegerLimit(counter->dtype))
                                    : std::numeric_limits<uint64_t>::max();
  std::ofstream log;
  EarlierLog earlier; // a resumed run's log so far
  if (!o.log.empty()) {
    // (A file it cuts and appends to by name: not a descriptor, which the open would truncate.)
    if (Expected<std::string> real = followedPath(o.log); !real)
      return makeError("--log {}", real.error().message);
    std::error_code ec;
    if (std::filesystem::is_directory(o.log, ec))
      return makeError("--log {}: is a directory", o.log);
    const bool resumes = o.firstBatch > 0 && std::filesystem::is_regular_file(o.log, ec);
    if (resumes) {
      Expected<EarlierLog> kept = earlierLog(o.log, o.firstBatch);
      if (!kept)
        return kept.error();
      earlier = *kept;
      std::filesystem::resize_file(o.log, earlier.keep, ec);
      if (ec)
        return makeError("--log {}: cannot cut it after step {}: {}", o.log, o.firstBatch,
                         ec.message());
    }
    errno = 0;
    log.open(o.log, std::ios::binary | (resumes ? std::ios::app : std::ios::trunc));
    if (!log) // (ofstream keeps no reason; open(2)'s errno is the one it met)
      return makeError("--log {}: cannot write it{}", o.log,
                       errno != 0 ? ": " + errnoText(errno) : std::string());
    if (earlier.endsCut && !(log << "\n"))
      return makeError("--log {}: write failed", o.log);
  }
  // On a terminal a progress bar takes the place of the per-step lines (unless --log-every asks
  // for them); validation losses, checkpoints and the summary are printed either way.
  Progress progress(o.steps, "tok");
  const int64_t logEvery = o.logEvery > 0 ? o.logEvery : progress.drawing() ? 0 : 1;
  const TaskShape &shape = data.shape;
  const double tokens = tokensPerStep(shape) * data.ranks; // the global batch's
  // The tokens trained on before this run: its earlier log's, counted on to the checkpoint's
  // step at that log's own rate; without one, at this run's (a run resumed at another batch).
  const auto before = static_cast<double>(o.firstBatch);
  const double tokensBefore = earlier.tokens < 0 ? tokens * before
                              : earlier.step == 0
                                  ? earlier.tokens
                                  : earlier.tokens * before / static_cast<double>(earlier.step);
  std::optional<double> lastValidation;
  const ModelDescription *description = o.description ? &*o.description : nullptr;
  RollingCheckpoints rolling{o.save, description, {}};
  TrainingResult result;
  const auto start = std::chrono::steady_clock::now();
  Communicator *world = exe.communicator();
  const bool ranks = world && world->size() > 1;
  const std::string termNote = ranks && world->rank() == 0 ? mpiTermNote() : std::string();
  InterruptGuard interrupt(termNote.empty() ? nullptr : termNote.c_str());
  // A stop's checkpoint (--save; "" without): every rank takes part and rank 0 writes it, and the
  // ranks agree on whether it was written, so that each says so truly and they still end together
  // (TrainingResult::stopped). The clause the stop's message ends with: "; saved WHAT to PATH".
  auto saveForStop = [&](int64_t batches, std::string_view what,
                         std::string_view after) -> Expected<std::string> {
    if (o.save.empty())
      return std::string();
    const Status saved = saveCheckpoint(exe, o.save, batches, description);
    bool written = saved.ok();
    if (ranks) {
      Expected<double> all = world->min(written ? 1 : 0);
      if (!all)
        return all.error();
      written = *all > 0;
    }
    const std::string whose = ranks && world->rank() != 0 ? "rank 0 " : "";
    if (written)
      return fmt::format("; {}saved {} to {}{}", whose, what, o.save, after);
    return saved ? fmt::format("; rank 0's save to {} failed", o.save)
                 : fmt::format("; the save failed: {}", saved.error().message);
  };
  // An output that failed during the run (the log, a --save-every checkpoint): said at once, and
  // the run goes on to its --save, which would be lost if it stopped there (its ranks would part
  // too: only rank 0 writes them); it then ends as failed (below, after the --save).
  std::string outputFailures;
  auto failedOutput = [&](const std::string &what) {
    progress.line(fmt::format("{}; the run goes on to its end", what));
    outputFailures += (outputFailures.empty() ? "" : "; ") + what;
  };
  // The signal any rank received, or 0: a data-parallel run's ranks stop together, after the same
  // step (mpirun hands SIGTERM or SIGUSR1 to each rank, which may see it a step apart).
  auto agreedSignal = [&]() -> Expected<int> {
    const int signal = InterruptGuard::received();
    if (!ranks)
      return signal;
    Expected<double> least = world->min(-static_cast<double>(signal));
    if (!least)
      return least.error();
    return static_cast<int>(-*least);
  };
  for (int64_t k = 0; k < o.steps; ++k) {
    Expected<int> agreed = agreedSignal();
    if (!agreed)
      return agreed.error();
    if (const int signal = *agreed; signal != 0) {
      Expected<std::string> saved =
          saveForStop(static_cast<int64_t>(o.firstBatch) + k, "parameters and optimizer state",
                      " (--load resumes)");
      if (!saved)
        return saved.error();
      result.stopped = fmt::format("interrupted by {} after {} of {} steps{}",
                                   InterruptGuard::name(signal), k, o.steps, *saved);
      return result;
    }
    if (o.firstBatch + k >= lastStep) {
      Expected<std::string> saved =
          saveForStop(static_cast<int64_t>(o.firstBatch) + k, "parameters and optimizer state", "");
      if (!saved)
        return saved.error();
      result.stopped = fmt::format("stopped after step {}: the optimizer's {} step count holds "
                                   "whole numbers exactly to {} (its learning-rate schedule would "
                                   "stop there){}",
                                   o.firstBatch + k, dtypeName(counter->dtype), lastStep, *saved);
      return result;
    }
    // Batch numbers continue from a loaded checkpoint, so a resumed run sees new data.
    Expected<double> loss = trainer.step(trainingBatch(data, o.firstBatch + k));
    if (!loss)
      return loss.error();
    // Steps count on from a loaded checkpoint's (so --eval-every and --save-every keep their
    // rhythm across a resume).
    const int64_t done = static_cast<int64_t>(o.firstBatch) + k + 1;
    // Without a guard the update went ahead: its non-finite values are in the weights now, where
    // going on, or saving them (which checkpointFile refuses), would only spread them.
    if (!trainer.guarded() && !std::isfinite(*loss))
      return makeError("step {}: the loss ({}) is not finite, and this training step has no guard "
                       "(no \"update_applied\" output, as an IR file's training step may lack), so "
                       "its update has put non-finite values into the weights: stopped, nothing "
                       "saved (compile the forward IR with --train, whose step has the guard and "
                       "keeps the weights from before such a step, or lower the learning rate)",
                       done, std::isnan(*loss) ? std::fabs(*loss) : *loss);
    if (!trainer.lastUpdateApplied()) {
      // The guarded update left every weight as it was before this step: its loss or its
      // gradient norm was not finite (a finite loss: the norm). A NaN prints as nan whatever its
      // sign bit (which the arithmetic that made it leaves to chance).
      const double shown = std::isnan(*loss) ? std::fabs(*loss) : *loss;
      std::string what =
          std::isfinite(*loss)
              ? fmt::format("step {}: the gradient norm is not finite (the loss is {})", done,
                            shown)
              : fmt::format("step {}: the loss ({}) is not finite", done, shown);
      if (!o.skipNonFinite) {
        // (Resumed, it draws this batch again.)
        Expected<std::string> saved = saveForStop(done - 1, "the weights from before it", "");
        if (!saved)
          return saved.error();
        result.stopped = fmt::format(
            "{}{}; stopped (--on-nan stop; --on-nan skip skips such steps)", what, *saved);
        return result;
      }
      ++result.skipped; // (the step still counts for --eval-every, --save-every and the log)
      progress.line(fmt::format("{}; update skipped (--on-nan skip)", what));
    } else {
      if (k == result.skipped) // the first step applied
        result.first = *loss;
      result.last = *loss;
      // (At the run's steps: a resumed run logs the steps the whole run would, its first beside.)
      const bool logged = logEvery > 0 && (done % logEvery == 0 || k == 0 || k + 1 == o.steps);
      if (logged)
        progress.line(fmt::format("step {:>5}  loss {:.6f}", done, *loss));
      if (onPoint)
        onPoint(done, *loss, false);
    }
    std::optional<double> validationNow;
    if (validate && o.evalEvery > 0 && (done % o.evalEvery == 0 || k + 1 == o.steps)) {
      Expected<double> v = validate();
      if (!v)
        return v.error();
      // A signal during it cut it short (meanLoss): it is dropped, and the loop's next turn stops
      // with a save (the ranks agree on that before any uses it).
      Expected<int> during = agreedSignal();
      if (!during)
        return during.error();
      if (*during == 0) {
        validationNow = lastValidation = *v;
        if (onPoint)
          onPoint(done, *v, true);
        progress.line(fmt::format("step {:>5}  validation loss {:.6f} ({} batches)", done, *v,
                                  o.evalBatches));
      }
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const int64_t recordEvery = std::max<int64_t>(o.logEvery, 1);
    if (log.is_open() && (done % recordEvery == 0 || k == 0 || k + 1 == o.steps || validationNow)) {
      errno = 0;
      const std::streampos whole = log.tellp(); // (the file's bytes: each record is flushed)
      log << fmt::format(R"({{"step": {}, "loss": {}, "tokens": {}, "seconds": {:.6f}{}}})", done,
                         jsonNumber(*loss), tokensBefore + tokens * static_cast<double>(k + 1),
                         earlier.seconds + seconds,
                         validationNow
                             ? fmt::format(R"(, "val_loss": {})", jsonNumber(*validationNow))
                             : "")
          << "\n"
          << std::flush;
      if (!log) { // (errno: the write's, where the stream kept it)
        failedOutput(fmt::format("--log {}: write failed{}; its records end before step {}", o.log,
                                 errno != 0 ? ": " + errnoText(errno) : std::string(), done));
        log.close();
        // The part of the record written is cut off: a JSON-lines reader fails on it. (A file
        // that cannot be cut, a device, keeps it.)
        if (whole != std::streampos(-1))
          (void)::truncate(o.log.c_str(), static_cast<off_t>(whole));
      }
    }
    if (o.saveEvery > 0 && done % o.saveEvery == 0 && k + 1 < o.steps) {
      if (Expected<std::string> path = rolling.save(exe, done); path)
        progress.line(fmt::format("step {:>5}  saved {}", done, *path));
      else
        failedOutput(fmt::format("step {}'s checkpoint: {}", done, path.error().message));
    }
    progress.update(
        k + 1, tokens * static_cast<double>(k + 1),
        fmt::format("loss {:.4f}{}", *loss,
                    lastValidation ? fmt::format("  val {:.4f}", *lastValidation) : std::string()));
  }
  progress.finish();
  result.steps = o.steps;
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!o.save.empty()) {
    if (Status s =
            saveCheckpoint(exe, o.save, static_cast<int64_t>(o.firstBatch) + o.steps, description);
        !s)
      return s.error();
    fmt::print("saved parameters and optimizer state to {}\n", o.save);
  }
  const double s = result.seconds;
  fmt::print("trained {} step{} of {} in {:.2f} s ({:.1f} ms/step): {}\n", o.steps,
             o.steps == 1 ? "" : "s", o.what, s, 1000 * s / double(std::max<int64_t>(o.steps, 1)),
             result.skipped == o.steps
                 ? std::string("no update applied")
                 : fmt::format("loss {:.4f} -> {:.4f}", result.first, result.last));
  if (result.skipped > 0)
    fmt::print("skipped {} of {} updates whose loss or gradient norm was not finite\n",
               result.skipped, o.steps);
  // Every rank ends as failed where rank 0's outputs did (they end together).
  bool failed = !outputFailures.empty();
  if (ranks) {
    Expected<double> none = world->min(failed ? 0 : 1);
    if (!none)
      return none.error();
    failed = *none == 0;
  }
  if (failed)
    result.stopped = outputFailures.empty() ? "rank 0's outputs failed" : outputFailures;
  return result;
}

} // namespace kiln::runtime
