// Writing user-named files: links followed, devices and FIFOs written through, regular files
// replaced atomically (see output_file.h).
#include "runtime/output_file.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <filesystem>
#include <random>
#include <utility>

#include <fmt/format.h>

#include "runtime/communicator.h"
#include "runtime/posix_file.h"

namespace kiln::runtime {

// (In a namespace named after this file, not in the anonymous one: StagedOutputs::Staged, a member
// of a class with linkage, holds one, and GCC warns of a type of an anonymous namespace there once
// a unity batch makes this file not the main one, -Wsubobject-linkage.)
namespace output_file {

// A temporary file next to the target, removed on every path out unless committed. Where the
// filesystem has O_TMPFILE (ext4, xfs, btrfs, tmpfs), it has no name while it is written and
// synced: a process killed then leaves nothing behind (20 SIGKILLs during saves had left 7
// checkpoint-sized temporaries). It is named only just before the rename (linkAs); elsewhere it
// is named from the start.
struct TempFile {
  std::string path; // empty while unnamed
  Fd fd;
  uint64_t written = 0; // bytes, for WriteOptions::beforeStep
  bool committed = false;
  ~TempFile() { // `fd` closes after this; unlinking an open file is fine
    if (!committed && !path.empty())
      ::unlink(path.c_str());
  }
};

} // namespace output_file

namespace {

// As the kernel allows (MAXSYMLINKS): more hops than this is a loop.
constexpr int kMaxLinkHops = 40;

// N where `path` names one of this process's descriptors: an entry N (digits, no leading zero)
// of /proc/PID/fd or /proc/PID/task/TID/fd of this process, however the path reaches it
// (/dev/fd/N, /proc/self/fd/N, a relative path, a link to the directory; /dev/stdout and
// /dev/stderr are links to such paths); else -1. The entry is a link that reads as the file the
// shell opened, or as "pipe:[N]", which is no file at all: such a path is written on the
// descriptor (target), never by following the link and replacing the file (which lost what
// `>> FILE` had appended to).
int descriptorOf(const std::string &path) {
  const std::filesystem::path p(path);
  const std::string name = p.filename().string();
  if (name.empty() || name.size() > 9 || (name.size() > 1 && name[0] == '0') ||
      !std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return -1;
  std::error_code ec;
  const std::string dir =
      std::filesystem::canonical(p.has_parent_path() ? p.parent_path() : ".", ec).string();
  const std::string own = fmt::format("/proc/{}/", ::getpid());
  if (ec || !dir.starts_with(own))
    return -1;
  const std::string_view rest = std::string_view(dir).substr(own.size());
  const bool task =
      rest.starts_with("task/") && rest.ends_with("/fd") && rest.find('/', 5) == rest.size() - 3;
  return rest == "fd" || task ? std::stoi(name) : -1;
}

// The path that is finally written: `path` with every symbolic link along the last component
// followed (a dangling link names the file to create), up to a descriptor's path (descriptorOf).
// Directories above it are left to open(2).
Expected<std::string> followLinks(std::string path) {
  for (int hops = 0; hops < kMaxLinkHops; ++hops) {
    if (descriptorOf(path) >= 0)
      return path;
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0 || !S_ISLNK(st.st_mode))
      return path;
    std::string target(static_cast<size_t>(std::max<off_t>(st.st_size, 255)) + 1, '\0');
    ssize_t n = ::readlink(path.c_str(), target.data(), target.size());
    if (n < 0)
      return makeError("cannot read the symbolic link: {}", errnoText(errno));
    target.resize(static_cast<size_t>(n));
    std::filesystem::path link(path);
    path = std::filesystem::path(target).is_absolute() ? target
                                                       : (link.parent_path() / target).string();
  }
  return makeError("too many levels of symbolic links");
}

// One step's failure reason: the test hook's, if it fails the step, else the system call's.
Status hook(const WriteOptions &options, SaveStep step, uint64_t written) {
  return options.beforeStep ? options.beforeStep(step, written) : Status{};
}

Status writeAll(int fd, std::span<const uint8_t> bytes, uint64_t &written,
                const WriteOptions &options) {
  const size_t chunk = std::max<size_t>(1, options.chunkBytes);
  while (!bytes.empty()) {
    if (Status s = hook(options, SaveStep::WriteChunk, written); !s)
      return s;
    std::span<const uint8_t> part = bytes.first(std::min(chunk, bytes.size()));
    while (!part.empty()) {
      ssize_t n = ::write(fd, part.data(), part.size());
      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0)
        return Error{errnoText(errno)};
      part = part.subspan(static_cast<size_t>(n));
      bytes = bytes.subspan(static_cast<size_t>(n));
      written += static_cast<uint64_t>(n);
    }
  }
  return {};
}

// "TARGET.tmp-" and 16 hex digits of a random suffix: two concurrent saves never share a
// temporary file, and a stale one from a crashed save is never reused. TARGET's file name is cut
// where it would not leave room for them (nameRoomFor: a name of 235 to 255 bytes could be
// checked and trained for, then not saved).
constexpr std::string_view kTempMark = ".tmp-";
constexpr size_t kTempDigits = 16;
std::string tempPrefix(const std::string &target) {
  return nameRoomFor(target, kTempMark.size() + kTempDigits) + std::string(kTempMark);
}
std::string tempName(const std::string &target, std::random_device &random) {
  uint64_t suffix = uint64_t{random()} << 32 | random();
  return fmt::format("{}{:016x}", tempPrefix(target), suffix);
}

// Gives an unnamed temporary file a name (O_EXCL's guarantee: linkat never replaces a file).
Status linkAs(const std::string &target, output_file::TempFile &temp) {
  std::random_device random;
  const std::string self = fmt::format("/proc/self/fd/{}", temp.fd.fd);
  int err = EEXIST;
  for (int attempt = 0; attempt < 16 && err == EEXIST; ++attempt) {
    std::string name = tempName(target, random);
    if (::linkat(AT_FDCWD, self.c_str(), AT_FDCWD, name.c_str(), AT_SYMLINK_FOLLOW) == 0) {
      temp.path = std::move(name);
      return {};
    }
    err = errno;
  }
  return Error{errnoText(err)};
}

Status createTemp(const std::string &target, output_file::TempFile &temp) {
  const std::filesystem::path t(target);
  const std::string dir = t.has_parent_path() ? t.parent_path().string() : ".";
  // (linkAs names it through /proc: without /proc, a named one from the start.)
  if (::access("/proc/self/fd", X_OK) == 0)
    if (int fd = ::open(dir.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666); fd >= 0) {
      temp.fd.fd = fd;
      return {};
    }
  std::random_device random;
  int err = EEXIST;
  for (int attempt = 0; attempt < 16 && err == EEXIST; ++attempt) {
    std::string name = tempName(target, random);
    int fd = ::open(name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) {
      temp.path = std::move(name);
      temp.fd.fd = fd;
      return {};
    }
    err = errno;
  }
  return Error{errnoText(err)};
}

} // namespace

std::string nameRoomFor(const std::string &path, size_t suffixBytes) {
  const std::filesystem::path p(path);
  std::string name = p.filename().string();
  name.resize(std::min(name.size(), NAME_MAX - std::min<size_t>(suffixBytes, NAME_MAX)));
  return p.has_parent_path() ? (p.parent_path() / name).string() : name;
}

namespace {

// Removes the temporaries that saves of `target` killed before their rename left behind (named
// ones: a filesystem without O_TMPFILE, or a kill between linkAs and the rename). Only names of
// exactly our pattern, so no user file goes.
void removeStaleTemps(const std::string &target) {
  const std::filesystem::path t(target);
  const std::string prefix = std::filesystem::path(tempPrefix(target)).filename().string();
  std::error_code ec;
  for (const auto &entry : std::filesystem::directory_iterator(
           t.has_parent_path() ? t.parent_path() : std::filesystem::path("."), ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() == prefix.size() + kTempDigits && name.starts_with(prefix) &&
        name.find_first_not_of("0123456789abcdef", prefix.size()) == std::string::npos &&
        entry.is_regular_file(ec))
      std::filesystem::remove(entry.path(), ec);
  }
}

// What `path` names for writing: its final target (links followed), and whether that is written
// through (a device, FIFO or socket; or this process's descriptor `fd`, such as /dev/fd/3)
// rather than replaced (a regular file, or nothing yet).
struct Target {
  std::string real;
  bool through = false;
  int fd = -1;
};

// A device, FIFO or socket: opened as it is and written, as a shell's `>` would; a descriptor:
// written at its offset, after what this process printed there already.
Status writeThrough(const Target &t, std::span<const std::span<const uint8_t>> pieces,
                    const WriteOptions &options) {
  Fd opened;
  if (t.fd >= 0) {
    std::fflush(stdout), std::fflush(stderr);
  } else if (opened.fd = ::open(t.real.c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY); opened.fd < 0) {
    return makeError("cannot open for writing: {}", errnoText(errno));
  }
  uint64_t written = 0;
  for (std::span<const uint8_t> piece : pieces)
    if (Status s = writeAll(t.fd >= 0 ? t.fd : opened.fd, piece, written, options); !s)
      return makeError("cannot write: {}", s.error().message);
  if (opened.fd >= 0 && ::close(std::exchange(opened.fd, -1)) != 0)
    return makeError("cannot write: {}", errnoText(errno));
  return {};
}

// The first half of an atomic replace: the bytes in a temporary file beside `path`, synced (and
// left open: unnamed, where the filesystem allows, until commitTemp). `dir` is path's directory.
Status stageTemp(const std::string &path, const std::string &dir,
                 std::span<const std::span<const uint8_t>> pieces, const WriteOptions &options,
                 output_file::TempFile &temp) {
  removeStaleTemps(path);
  if (Status s = createTemp(path, temp); !s)
    return makeError("cannot create a temporary file in \"{}\": {}", dir, s.error().message);
  // Replacing a file should not change who may read it.
  struct stat old {};
  if (::stat(path.c_str(), &old) == 0)
    (void)::fchmod(temp.fd.fd, old.st_mode & 07777); // best effort: some filesystems refuse
  uint64_t &written = temp.written;
  for (std::span<const uint8_t> piece : pieces)
    if (Status s = writeAll(temp.fd.fd, piece, written, options); !s)
      return makeError("cannot write the temporary file: {}", s.error().message);
  Status synced = hook(options, SaveStep::SyncFile, written);
  if (synced && ::fsync(temp.fd.fd) != 0)
    synced = Error{errnoText(errno)};
  if (!synced)
    return makeError("cannot fsync the temporary file: {}", synced.error().message);
  return {};
}

// The second half: the temporary file named (if it has no name yet: only now, so that a process
// killed while StagedOutputs holds it leaves nothing) and closed, the rename over `path`, then the
// directory's fsync.
Status commitTemp(const std::string &path, const std::string &dir, const WriteOptions &options,
                  output_file::TempFile &temp) {
  if (temp.path.empty())
    if (Status s = linkAs(path, temp); !s)
      return makeError("cannot name the temporary file in \"{}\": {}", dir, s.error().message);
  // close can report a deferred write error (NFS), so it is checked too.
  if (::close(std::exchange(temp.fd.fd, -1)) != 0)
    return makeError("cannot write the temporary file: {}", errnoText(errno));
  Status renamed = hook(options, SaveStep::Rename, temp.written);
  if (renamed && ::rename(temp.path.c_str(), path.c_str()) != 0)
    renamed = Error{errnoText(errno)};
  if (!renamed) {
    // What was written is kept (a run's checkpoint is not lost with the rename), under a name the
    // next save's sweep of stale temporaries leaves alone: TARGET.unsaved-SUFFIX.
    temp.committed = true;
    std::string kept = temp.path;
    kept.replace(kept.rfind(kTempMark), kTempMark.size(), ".unsaved-");
    if (::rename(temp.path.c_str(), kept.c_str()) != 0)
      kept = temp.path;
    return makeError("cannot rename the temporary file over it: {}; what was written is kept in "
                     "{}",
                     renamed.error().message, kept);
  }
  temp.committed = true;

  // Without this, a crash soon after could leave the directory still naming the old file.
  Status dirSynced = hook(options, SaveStep::SyncDir, temp.written);
  if (dirSynced) {
    Fd dirFd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    // EINVAL: the filesystem cannot sync directories; there is nothing more to do.
    if (dirFd.fd < 0 || (::fsync(dirFd.fd) != 0 && errno != EINVAL))
      dirSynced = Error{errnoText(errno)};
  }
  if (!dirSynced)
    return makeError("saved, but cannot fsync directory \"{}\": {}", dir,
                     dirSynced.error().message);
  return {};
}

std::string dirOf(const std::string &path) {
  const std::filesystem::path target(path);
  return target.has_parent_path() ? target.parent_path().string() : ".";
}

Expected<Target> target(const std::string &path) {
  if (path.empty())
    return makeError("an empty path: expected a file name");
  Expected<std::string> real = followLinks(path);
  if (!real)
    return makeError("{}: {}", path, real.error().message);
  if (const int fd = descriptorOf(*real); fd >= 0) {
    const int flags = ::fcntl(fd, F_GETFL);
    if (flags < 0)
      return makeError("{}: descriptor {} is not open", path, fd);
    if ((flags & O_ACCMODE) == O_RDONLY)
      return makeError("{}: descriptor {} is open for reading only", path, fd);
    // The standard output carries the command's report too (a run's steps, an import's summary),
    // which would land in the file around its bytes: the same file or pipe behind another
    // descriptor (`3>&1`) is refused too; a terminal or /dev/null (character devices) is not.
    struct stat it {};
    struct stat out {};
    if (fd == STDOUT_FILENO ||
        (::fstat(fd, &it) == 0 && ::fstat(STDOUT_FILENO, &out) == 0 && !S_ISCHR(it.st_mode) &&
         it.st_dev == out.st_dev && it.st_ino == out.st_ino))
      return makeError("{}: writes where the standard output goes, where the command prints its "
                       "report too: name a file (kiln dump and opt print there without -o)",
                       path);
    return Target{*real, true, fd};
  }
  struct stat st {};
  if (::stat(real->c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    if (S_ISDIR(st.st_mode))
      return makeError("{}: is a directory, expected a file name", path);
    return Target{*real, true};
  }
  if (!std::filesystem::path(*real).has_filename())
    return makeError("{}: not a file name", path);
  return Target{*real, false};
}

} // namespace

Status writeOutputFile(const std::string &path, std::span<const std::span<const uint8_t>> pieces,
                       const WriteOptions &options) {
  Expected<Target> t = target(path);
  if (!t)
    return t.error();
  Status s;
  if (t->through) {
    s = writeThrough(*t, pieces, options);
  } else {
    const std::string dir = dirOf(t->real);
    output_file::TempFile temp;
    s = stageTemp(t->real, dir, pieces, options, temp);
    if (s)
      s = commitTemp(t->real, dir, options, temp);
  }
  return s ? s : makeError("{}: {}", path, s.error().message);
}

namespace {
// An existing file that a rename cannot replace though its directory takes new files: one that
// is immutable or append-only (chattr +i, +a), or another user's in a sticky directory (/tmp),
// which the rename after the work would fail on.
Status checkReplaceable(const std::string &path, const std::string &real, const std::string &dir) {
  struct stat file {
  }, parent{};
  if (::lstat(real.c_str(), &file) != 0 || !S_ISREG(file.st_mode))
    return {};
  Fd fd(::open(real.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  int flags = 0;
  if (fd.fd >= 0 && ::ioctl(fd.fd, FS_IOC_GETFLAGS, &flags) == 0 &&
      (flags & (FS_IMMUTABLE_FL | FS_APPEND_FL)) != 0)
    return makeError("{}: cannot be replaced: the file is {} (chattr -{} lifts it)", path,
                     flags & FS_IMMUTABLE_FL ? "immutable" : "append-only",
                     flags & FS_IMMUTABLE_FL ? 'i' : 'a');
  const uid_t me = ::geteuid();
  if (::stat(dir.c_str(), &parent) == 0 && (parent.st_mode & S_ISVTX) != 0 && me != 0 &&
      file.st_uid != me && parent.st_uid != me)
    return makeError("{}: cannot be replaced: another user owns it, in a directory where only a "
                     "file's owner may replace it (sticky, as /tmp)",
                     path);
  return {};
}
} // namespace

struct StagedOutputs::Staged {
  std::string path, real, dir;
  output_file::TempFile temp;
};
StagedOutputs::StagedOutputs() = default;
StagedOutputs::~StagedOutputs() = default;

Status StagedOutputs::stage(const std::string &path,
                            std::span<const std::span<const uint8_t>> pieces) {
  Expected<Target> t = target(path);
  if (!t)
    return t.error();
  if (t->through) {
    Status s = writeThrough(*t, pieces, {});
    return s ? s : makeError("{}: {}", path, s.error().message);
  }
  auto s = std::make_unique<Staged>();
  s->path = path, s->real = t->real, s->dir = dirOf(t->real);
  if (Status st = stageTemp(s->real, s->dir, pieces, {}, s->temp); !st)
    return makeError("{}: {}", path, st.error().message);
  staged_.push_back(std::move(s));
  return {};
}

Status StagedOutputs::stage(const std::string &path, std::string_view text) {
  std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t *>(text.data()), text.size());
  return stage(path, std::span(&bytes, 1));
}

Status StagedOutputs::commit() {
  // Every target first: one that a rename cannot replace would stop the renames midway, the
  // files before it new and those after it old (an export's weights with another's config).
  for (const std::unique_ptr<Staged> &s : staged_)
    if (Status st = checkReplaceable(s->path, s->real, s->dir); !st)
      return st;
  for (const std::unique_ptr<Staged> &s : staged_)
    if (Status st = commitTemp(s->real, s->dir, {}, s->temp); !st)
      return makeError("{}: {}", s->path, st.error().message);
  return {};
}

Status checkNotAnInput(std::string_view flag, const std::string &output,
                       std::span<const RunInput> inputs) {
  std::error_code ec;
  for (const RunInput &in : inputs)
    if (!in.path.empty() && std::filesystem::equivalent(output, in.path, ec) && !ec)
      return makeError("{} {}: is {}{}: writing it would destroy it", flag, output, in.flag,
                       in.flag.starts_with("--") ? " " + in.path : "");
  return {};
}

Status checkDistinctOutputs(std::string_view flag, const std::string &output,
                            std::string_view earlierFlag, const std::string &earlier) {
  // The files they would write, their links followed (the file need not exist yet); a path
  // that does not resolve is left to the write to report. Absolute first: weakly_canonical keeps
  // a relative path none of whose parts exist as it is, so c.ckpt and ./c.ckpt (a file yet to be
  // written) differed, and --save c.ckpt --log ./c.ckpt wrote the log over the checkpoint.
  Expected<std::string> a = followLinks(output), b = followLinks(earlier);
  if (!a || !b)
    return {};
  auto resolved = [](const std::string &path, std::error_code &ec) {
    const std::filesystem::path whole = std::filesystem::absolute(path, ec);
    return ec ? whole : std::filesystem::weakly_canonical(whole, ec);
  };
  std::error_code ec, ec2;
  const std::filesystem::path x = resolved(*a, ec), y = resolved(*b, ec2);
  if (!ec && !ec2 && x == y)
    return makeError("{} {}: is {} {} as well: one would replace the other", flag, output,
                     earlierFlag, earlier);
  return {};
}

Expected<std::string> followedPath(const std::string &path) {
  Expected<std::string> real = followLinks(path);
  if (!real)
    return makeError("{}: {}", path, real.error().message);
  if (const int fd = descriptorOf(*real); fd >= 0)
    return makeError("{}: names this process's descriptor {}, not a file: name the file", path, fd);
  return real;
}

Status checkOutputFile(const std::string &path) {
  Expected<Target> t = target(path);
  if (!t)
    return t.error();
  if (t->through)
    return t->fd >= 0 || ::access(t->real.c_str(), W_OK) == 0
               ? Status{}
               : makeError("{}: cannot open for writing: {}", path, errnoText(errno));
  output_file::TempFile temp; // removed again on the way out
  const std::filesystem::path real(t->real);
  const std::string dir = real.has_parent_path() ? real.parent_path().string() : ".";
  if (Status s = createTemp(t->real, temp); !s)
    return makeError("{}: cannot create a temporary file in \"{}\": {}", path, dir,
                     s.error().message);
  return checkReplaceable(path, t->real, dir);
}

Status writeOutputFile(const std::string &path, std::string_view text,
                       const WriteOptions &options) {
  std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t *>(text.data()), text.size());
  return writeOutputFile(path, std::span(&bytes, 1), options);
}

void printError(std::string_view program, std::string_view message) {
  std::fflush(stdout);
  const std::string rank = launchedRank();
  // Written as far as it can be: with standard error closed or full, the exit status alone says
  // it. (fmt::print throws where the write fails, which from a handler reporting an error was an
  // abort.)
  printNote(fmt::format("{}: error: {}{}\n", program, rank.empty() ? "" : rank + ": ", message));
}

void printNote(std::string_view text) {
  (void)std::fwrite(text.data(), 1, text.size(), stderr);
  (void)std::fflush(stderr);
}

void holdStandardDescriptors() {
  for (int fd = 0; fd <= 2; ++fd)
    if (::fcntl(fd, F_GETFD) < 0 && errno == EBADF) {
      const int opened = ::open("/dev/null", O_RDONLY); // (the lowest free number: fd)
      if (opened >= 0 && opened != fd)
        ::close(opened);
    }
}

Status flushStandardOutput() {
  errno = 0;
  if (std::fflush(stdout) == 0 && !std::ferror(stdout))
    return {};
  return makeError("cannot write the output{}", errno != 0 ? ": " + errnoText(errno) : "");
}

} // namespace kiln::runtime
