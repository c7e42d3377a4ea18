// Writing a file that the user named (a checkpoint, a dump, an IR file) without ever destroying
// what was there. What happens depends on what the path is:
//   - a regular file, or nothing yet: replaced atomically. The bytes go to a temporary file in the
//     same directory, which is fsynced and renamed over the target, then the directory is
//     fsynced. On any failure before the rename, the old file is untouched and the temporary file
//     is removed. An existing file keeps its permission bits.
//   - a symbolic link: followed (through chains of links), and its final target is what is
//     written as above; the link itself stays a link.
//   - a character device, FIFO or socket (/dev/null, a named pipe): written through, never
//     replaced. Replacing /dev/null by a regular file (as root) would break the machine.
//   - this process's descriptor (/dev/fd/N, /dev/stderr): written on it, at its offset, whatever
//     it is (`3>> FILE` appends; a pipe works); the standard output (/dev/stdout), or its file or
//     pipe behind another descriptor, is refused: the command prints its report there too.
// followedPath refuses a descriptor (a file is what is wanted there).
//   - a directory, or an empty path: an error, and nothing is written.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "support/status.h"

namespace kiln::runtime {

// The steps of an atomic replace, in order, for WriteOptions::beforeStep.
enum class SaveStep : uint8_t {
  WriteChunk, // about to write the next chunk of the temporary file
  SyncFile,   // about to fsync the temporary file
  Rename,     // about to rename the temporary file over the target
  SyncDir,    // about to fsync the directory (the target is already replaced)
};

struct WriteOptions {
  // Bytes per write(2). Small values let a test interrupt a save in the middle of the file.
  size_t chunkBytes = size_t{1} << 20;
  // Fault-injection seam for tests (empty in production): called before each step with the number
  // of bytes already in the temporary file. A non-ok Status fails the save exactly as if that
  // step's system call had failed, cleanup included.
  std::function<Status(SaveStep step, uint64_t bytesWritten)> beforeStep;
};

// Writes the concatenation of `pieces` to `path` as described above. Errors are prefixed with
// `path` and say which step failed.
Status writeOutputFile(const std::string &path, std::span<const std::span<const uint8_t>> pieces,
                       const WriteOptions &options = {});
Status writeOutputFile(const std::string &path, std::string_view text,
                       const WriteOptions &options = {});

// Several files replaced as one: each is written and synced to its temporary file when staged (a
// file with no name until commit, where the filesystem allows), and all are renamed over their
// targets only by commit(), after every one was written -- a bundle
// whose parts agree, whatever step fails (only a failing rename, after the first, can leave some
// replaced). Destroyed uncommitted, the temporaries go and the targets are as they were. A
// device or FIFO target is written through when it is staged (it cannot be replaced).
class StagedOutputs {
public:
  StagedOutputs();
  ~StagedOutputs();
  StagedOutputs(const StagedOutputs &) = delete;
  StagedOutputs &operator=(const StagedOutputs &) = delete;

  // Errors as writeOutputFile's.
  Status stage(const std::string &path, std::span<const std::span<const uint8_t>> pieces);
  Status stage(const std::string &path, std::string_view text);
  Status commit();

private:
  struct Staged;
  std::vector<std::unique_ptr<Staged>> staged_;
};

// An input of the same run: what its flag is and its path ("/proc/self/exe" for the running
// program itself).
struct RunInput {
  std::string_view flag;
  std::string path;
};
// Whether writing `output` (named by `flag` in errors) would destroy one of `inputs`: the same
// file through another path or a link (--save DATA.txt, forward --output over --weights, a
// checkpoint over the executable itself). An error naming both; nothing that does not exist
// yet is an input.
Status checkNotAnInput(std::string_view flag, const std::string &output,
                       std::span<const RunInput> inputs);

// Whether two outputs of one run, `output` (named by `flag` in errors) and `earlier` (by
// `earlierFlag`), are one file, existing or not (--save S --log S): an error naming both, as the
// one written last would replace the other.
Status checkDistinctOutputs(std::string_view flag, const std::string &output,
                            std::string_view earlierFlag, const std::string &earlier);

// The file that writeOutputFile(path, ...) writes: `path` with its symbolic links followed.
// Errors: a link that does not read, a loop, a descriptor (each prefixed with `path`).
Expected<std::string> followedPath(const std::string &path);

// `path` with its file name cut short enough that `suffixBytes` more still make a file name (at
// most NAME_MAX, 255 bytes): a temporary's name beside it ("NAME.tmp-..."), where NAME itself
// may be up to 255 bytes long.
std::string nameRoomFor(const std::string &path, size_t suffixBytes);

// Whether writeOutputFile(path, ...) can write there, checked before a long piece of work (a
// training run) rather than after it: the path's own errors, and for a file to replace, that a
// temporary file can be created beside it (which is removed again); for a device, that it is
// writable. Nothing is written. The same error text as the write would give.
Status checkOutputFile(const std::string &path);

// Fills a closed standard descriptor (0, 1 or 2: `kiln train >&-`) with /dev/null opened for
// reading, so that no file the run opens takes its number (the log took descriptor 1, and the
// progress lines went into it); a write there still fails (EBADF), as it did closed. kiln and the
// executables call it first.
void holdStandardDescriptors();

// Flushes standard output: an Error ("cannot write the output: REASON") where it, or an earlier
// write to it, failed (a full disk, a closed pipe). kiln and the standalone executables call it
// at the end of a run, which then fails: it did not give what it was asked for (a large output
// fails as it is written, a small one only here).
Status flushStandardOutput();
// How kiln and the standalone executables report a failure: what was printed first (stdout
// flushed), then `PROGRAM: error: MESSAGE` on stderr (`PROGRAM: error: rank R of N: MESSAGE`
// where mpirun started N > 1 processes).
void printError(std::string_view program, std::string_view message);
// A note on stderr (a line or more, as given), written as far as it can be: a note that cannot be
// written (standard error closed or full) stops nothing.
void printNote(std::string_view text);

} // namespace kiln::runtime
