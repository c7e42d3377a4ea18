// Writing user-named files never destroys what is there: a device or FIFO is written through
// (not replaced by a regular file), a symbolic link is followed (not replaced), a directory or
// an empty name is refused with nothing written. (Atomic replacement of regular files is
// tested through its first user, tests/runtime/safetensors_test.cc.)
#include <gtest/gtest.h>

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include <fmt/format.h>

#include "runtime/output_file.h"
#include "tests/util/temp_dir.h"

namespace kiln::runtime::output_file_test {
namespace {

namespace fs = std::filesystem;

using OutputFile = testing_files::TempDirTest;

TEST_F(OutputFile, ReplacesARegularFileAndCreatesANewOne) {
  fs::path p = dir_ / "out.txt";
  ASSERT_TRUE(writeOutputFile(p.string(), "first").ok());
  ASSERT_TRUE(writeOutputFile(p.string(), "second").ok());
  EXPECT_EQ(readText(p), "second");
  EXPECT_EQ(listDir(), std::vector<std::string>{"out.txt"});
}

TEST_F(OutputFile, FollowsASymlinkInsteadOfReplacingIt) {
  fs::path target = dir_ / "target.txt", link = dir_ / "link", link2 = dir_ / "link2";
  ASSERT_TRUE(writeOutputFile(target.string(), "old").ok());
  fs::create_symlink("target.txt", link); // relative, resolved from the link's directory
  fs::create_symlink(link, link2);        // a chain of two
  ASSERT_TRUE(writeOutputFile(link2.string(), "new").ok());
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_TRUE(fs::is_symlink(link2));
  EXPECT_EQ(readText(target), "new");
  EXPECT_EQ(listDir(), (std::vector<std::string>{"link", "link2", "target.txt"}));
}

TEST_F(OutputFile, ADanglingSymlinkCreatesItsTarget) {
  fs::path link = dir_ / "link";
  fs::create_symlink("made.txt", link);
  ASSERT_TRUE(writeOutputFile(link.string(), "hello").ok());
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(readText(dir_ / "made.txt"), "hello");
}

TEST_F(OutputFile, ASymlinkLoopIsAnError) {
  fs::create_symlink("b", dir_ / "a");
  fs::create_symlink("a", dir_ / "b");
  Status s = writeOutputFile((dir_ / "a").string(), "x");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message, (dir_ / "a").string() + ": too many levels of symbolic links");
}

TEST_F(OutputFile, AFifoIsWrittenThroughNotReplaced) {
  fs::path fifo = dir_ / "pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string got;
  std::thread reader([&] { got = readText(fifo); });
  Status s = writeOutputFile(fifo.string(), "through the pipe");
  reader.join();
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(got, "through the pipe");
  EXPECT_TRUE(fs::is_fifo(fifo));
  EXPECT_EQ(listDir(), std::vector<std::string>{"pipe"});
}

// A character device (here the null device, made as a node of our own so that a regression
// could only ever replace this node) is written through. mknod needs root, as CI has.
TEST_F(OutputFile, ACharacterDeviceIsWrittenThroughNotReplaced) {
  fs::path dev = dir_ / "null";
  if (::mknod(dev.c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0)
    GTEST_SKIP() << "mknod needs root";
  ASSERT_TRUE(writeOutputFile(dev.string(), "discarded").ok());
  EXPECT_TRUE(fs::is_character_file(dev));
  EXPECT_EQ(listDir(), std::vector<std::string>{"null"});
}

TEST_F(OutputFile, ADirectoryOrAnEmptyNameIsRefused) {
  Status s = writeOutputFile(dir_.string(), "x");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message, dir_.string() + ": is a directory, expected a file name");
  Status empty = writeOutputFile("", "x");
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.error().message, "an empty path: expected a file name");
  EXPECT_TRUE(listDir().empty());
}

TEST_F(OutputFile, AMissingDirectoryFailsWithoutAFile) {
  fs::path p = dir_ / "missing" / "out.txt";
  Status s = writeOutputFile(p.string(), "x");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message, p.string() + ": cannot create a temporary file in \"" +
                                   (dir_ / "missing").string() + "\": No such file or directory");
  EXPECT_TRUE(listDir().empty());
}

// /dev/fd/N is a link to /proc/self/fd/N, which reads as the file the shell opened (or as
// "pipe:[N]"): it is written on the descriptor, at its offset, however the path reaches it.
// Following the link replaced the file, and lost what `3>> FILE` appended to; a pipe failed
// ("cannot create a temporary file in /proc/self/fd"). The standard output is refused: the
// command's report goes there too.
TEST_F(OutputFile, WritesAProcessDescriptorOnTheDescriptorItself) {
  const fs::path log = dir_ / "all.txt";
  ASSERT_TRUE(writeOutputFile(log.string(), "old ").ok());
  const int appending = ::open(log.c_str(), O_WRONLY | O_APPEND);
  ASSERT_GE(appending, 0);
  const std::string n = std::to_string(appending);
  fs::create_directory_symlink("/proc/self/fd", dir_ / "fds");
  for (const std::string &path :
       {"/dev/fd/" + n, "/proc/self/fd/" + n, fmt::format("/proc/{}/fd/{}", ::getpid(), n),
        (dir_ / "fds" / n).string()}) {
    EXPECT_TRUE(checkOutputFile(path).ok()) << path;
    ASSERT_TRUE(writeOutputFile(path, "new ").ok()) << path;
  }
  ::close(appending);
  EXPECT_EQ(readText(log), "old new new new new ");
  EXPECT_EQ(followedPath("/dev/fd/" + n).error().message, "/dev/fd/" + n +
                                                              ": names this process's descriptor " +
                                                              n + ", not a file: name the file");
  int pipe[2];
  ASSERT_EQ(::pipe(pipe), 0);
  ASSERT_TRUE(writeOutputFile("/dev/fd/" + std::to_string(pipe[1]), "through").ok());
  ::close(pipe[1]);
  char got[16] = {};
  EXPECT_EQ(::read(pipe[0], got, sizeof got), 7);
  EXPECT_EQ(std::string(got), "through");
  const std::string in = "/dev/fd/" + std::to_string(pipe[0]);
  EXPECT_EQ(writeOutputFile(in, "x").error().message,
            in + ": descriptor " + std::to_string(pipe[0]) + " is open for reading only");
  ::close(pipe[0]);
  EXPECT_EQ(checkOutputFile(in).error().message,
            in + ": descriptor " + std::to_string(pipe[0]) + " is not open");
  EXPECT_EQ(checkOutputFile("/dev/stdout").error().message,
            "/dev/stdout: writes where the standard output goes, where the command prints its "
            "report too: name a file (kiln dump and opt print there without -o)");
  fs::remove(dir_ / "fds");
  EXPECT_EQ(listDir(), std::vector<std::string>{"all.txt"});
}

// checkOutputFile answers before the work what the write would answer after it, and writes
// nothing (`kiln train --save /missing/x` used to train to the end, then fail).
TEST_F(OutputFile, CheckGivesTheWritesErrorsAndWritesNothing) {
  fs::path missing = dir_ / "missing" / "out.txt";
  Status check = checkOutputFile(missing.string());
  ASSERT_FALSE(check.ok());
  EXPECT_EQ(check.error().message, writeOutputFile(missing.string(), "x").error().message);
  EXPECT_EQ(checkOutputFile(dir_.string()).error().message,
            dir_.string() + ": is a directory, expected a file name");
  EXPECT_EQ(checkOutputFile("").error().message, "an empty path: expected a file name");
  EXPECT_TRUE(checkOutputFile((dir_ / "new.txt").string()).ok());
  EXPECT_TRUE(checkOutputFile("/dev/null").ok());
  EXPECT_TRUE(listDir().empty());
  ASSERT_TRUE(writeOutputFile((dir_ / "old.txt").string(), "kept").ok());
  EXPECT_TRUE(checkOutputFile((dir_ / "old.txt").string()).ok());
  EXPECT_EQ(readText(dir_ / "old.txt"), "kept");
  EXPECT_EQ(listDir(), std::vector<std::string>{"old.txt"});
}

// Sets a file's inode flags (chattr): whether the filesystem and the user allow it.
bool setFileFlags(const fs::path &p, int flags) {
  const int fd = ::open(p.c_str(), O_RDONLY);
  const bool set = fd >= 0 && ::ioctl(fd, FS_IOC_SETFLAGS, &flags) == 0;
  if (fd >= 0)
    ::close(fd);
  return set;
}

// A file the rename after the work could not replace (immutable: a run of 300 steps trained, then
// lost its checkpoint at the rename) is refused before it.
TEST_F(OutputFile, CheckRefusesAFileThatCannotBeReplaced) {
  const fs::path p = dir_ / "ck.safetensors";
  ASSERT_TRUE(writeOutputFile(p.string(), "kept").ok());
  if (!setFileFlags(p, FS_IMMUTABLE_FL))
    GTEST_SKIP() << "this filesystem (or user) cannot make a file immutable";
  const Status check = checkOutputFile(p.string());
  EXPECT_TRUE(setFileFlags(p, 0));
  ASSERT_FALSE(check.ok());
  EXPECT_EQ(check.error().message,
            p.string() + ": cannot be replaced: the file is immutable (chattr -i lifts it)");
  EXPECT_EQ(readText(p), "kept");
}

// Staged files replace their targets all or none: a target that a rename cannot replace is found
// before the first rename (an export replaced model.safetensors, then failed on an immutable
// config.json: another model's weights beside the old config).
TEST_F(OutputFile, StagedOutputsReplaceNoneWhereOneCannotBeReplaced) {
  const fs::path a = dir_ / "model.safetensors", b = dir_ / "config.json";
  ASSERT_TRUE(writeOutputFile(a.string(), "old model").ok());
  ASSERT_TRUE(writeOutputFile(b.string(), "old config").ok());
  if (!setFileFlags(b, FS_IMMUTABLE_FL))
    GTEST_SKIP() << "this filesystem (or user) cannot make a file immutable";
  Status committed;
  {
    StagedOutputs staged;
    ASSERT_TRUE(staged.stage(a.string(), "new model").ok());
    ASSERT_TRUE(staged.stage(b.string(), "new config").ok());
    committed = staged.commit();
  }
  EXPECT_TRUE(setFileFlags(b, 0));
  ASSERT_FALSE(committed.ok());
  EXPECT_EQ(committed.error().message,
            b.string() + ": cannot be replaced: the file is immutable (chattr -i lifts it)");
  EXPECT_EQ(readText(a), "old model");
  EXPECT_EQ(readText(b), "old config");
  EXPECT_EQ(listDir(), (std::vector<std::string>{"config.json", "model.safetensors"}));
}

// The temporary file has no name while it is written and synced (O_TMPFILE; this machine's
// filesystems have it), so a process killed then leaves nothing behind; it is named only for the
// rename. What a kill between the two (or a filesystem without O_TMPFILE) leaves, the next save of
// the same file removes: names of exactly the temporaries' pattern, no other file.
TEST_F(OutputFile, ATemporaryFileIsUnnamedUntilItsRename) {
  const std::string target = (dir_ / "ck.safetensors").string();
  std::vector<std::vector<std::string>> seen;
  WriteOptions o;
  o.chunkBytes = 3;
  o.beforeStep = [&](SaveStep step, uint64_t) {
    if (step != SaveStep::SyncDir)
      seen.push_back(listDir());
    return Status{};
  };
  ASSERT_TRUE(writeOutputFile(target, "twelve bytes", o).ok());
  ASSERT_EQ(seen.size(), 6u); // four chunks, the sync and the rename
  for (size_t k = 0; k + 1 < seen.size(); ++k)
    EXPECT_TRUE(seen[k].empty()) << "step " << k << ": " << seen[k].front();
  ASSERT_EQ(seen.back().size(), 1u); // named for the rename
  EXPECT_TRUE(seen.back()[0].starts_with("ck.safetensors.tmp-")) << seen.back()[0];
  EXPECT_EQ(listDir(), std::vector<std::string>{"ck.safetensors"});

  // Stale ones of this target's pattern go at its next save; other files stay.
  for (const char *name : {"ck.safetensors.tmp-0123456789abcdef", "ck.safetensors.tmp-keep",
                           "other.safetensors.tmp-0123456789abcdef", "ck.safetensors.tmp-0123"})
    ASSERT_TRUE(writeOutputFile((dir_ / name).string(), "x").ok());
  ASSERT_TRUE(writeOutputFile(target, "new").ok());
  EXPECT_EQ(listDir(), (std::vector<std::string>{"ck.safetensors", "ck.safetensors.tmp-0123",
                                                 "ck.safetensors.tmp-keep",
                                                 "other.safetensors.tmp-0123456789abcdef"}));
  EXPECT_EQ(readText(dir_ / "ck.safetensors"), "new");
}

} // namespace
} // namespace kiln::runtime::output_file_test
