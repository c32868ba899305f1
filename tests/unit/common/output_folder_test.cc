// A folder of outputs is written whole or not at all (common/output_folder.h): the old
// folder stays as it was until the new one is complete, whether the writer fails, returns
// early or is killed; the new one replaces the old one's entries of its own kinds and keeps
// the rest.
#include "harp/common/output_folder.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "testutil/files.h"
#include "testutil/temp_dir.h"

namespace harp {
namespace {

namespace fs = std::filesystem;
using testing::read;
using testing::TempDir;
using testing::write;

bool owned_txt(const std::string& name) { return fs::path(name).extension() == ".txt"; }

std::set<std::string> entries(const std::string& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

TEST(OutputFolder, ANewFolderAppearsOnlyWhenCommitted) {
  TempDir d;
  const std::string out = d.file("deep/out");
  auto f = OutputFolder::begin(out, owned_txt);
  ASSERT_TRUE(f.ok()) << f.status().message();
  write(f->path() + "/a.txt", "new");
  EXPECT_FALSE(fs::exists(out));
  ASSERT_TRUE(f->commit().ok());
  EXPECT_EQ(read(out + "/a.txt"), "new");
  EXPECT_EQ(entries(d.file("deep")), std::set<std::string>{"out"}) << "no staging folder left";
}

TEST(OutputFolder, TheOldFoldersOwnEntriesAreReplacedAndTheRestKept) {
  TempDir d;
  const std::string out = d.file("out");
  fs::create_directories(out + "/keep/inner");
  write(out + "/a.txt", "old a");
  write(out + "/stale.txt", "an earlier output's file");
  write(out + "/tokenizer.json", "the user's");
  write(out + "/keep/inner/x.bin", "nested");
  fs::create_symlink("tokenizer.json", out + "/link");
  struct stat before {};
  ASSERT_EQ(stat((out + "/tokenizer.json").c_str(), &before), 0);
  {
    auto f = OutputFolder::begin(out + "/", owned_txt);  // a trailing slash names the same folder
    ASSERT_TRUE(f.ok()) << f.status().message();
    write(f->path() + "/a.txt", "new a");
    write(f->path() + "/b.txt", "new b");
    ASSERT_TRUE(f->commit().ok());
  }
  EXPECT_EQ(entries(out), (std::set<std::string>{"a.txt", "b.txt", "tokenizer.json", "keep", "link"}));
  EXPECT_EQ(read(out + "/a.txt"), "new a");
  EXPECT_EQ(read(out + "/tokenizer.json"), "the user's");
  EXPECT_EQ(read(out + "/keep/inner/x.bin"), "nested");
  EXPECT_EQ(fs::read_symlink(out + "/link"), "tokenizer.json");
  struct stat after {};
  ASSERT_EQ(stat((out + "/tokenizer.json").c_str(), &after), 0);
  EXPECT_EQ(after.st_ino, before.st_ino) << "carried by a hard link, not copied";
  EXPECT_EQ(entries(d.path()), std::set<std::string>{"out"});
}

TEST(OutputFolder, AWriterThatStopsBeforeCommittingLeavesTheOldFolderWhole) {
  TempDir d;
  const std::string out = d.file("out");
  fs::create_directories(out);
  write(out + "/a.txt", "old");
  {
    auto f = OutputFolder::begin(out, owned_txt);
    ASSERT_TRUE(f.ok());
    write(f->path() + "/a.txt", "half");
  }  // a failure: returned without commit
  EXPECT_EQ(entries(out), std::set<std::string>{"a.txt"});
  EXPECT_EQ(read(out + "/a.txt"), "old");
  EXPECT_EQ(entries(d.path()), std::set<std::string>{"out"});

  // Killed part-way (no destructor runs): the old folder is whole, and the next write to
  // the same target removes the dead writer's staging folder; a live process's is kept.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto f = OutputFolder::begin(out, owned_txt);
    if (f.ok()) write(f->path() + "/a.txt", "killed");
    _exit(f.ok() ? 0 : 1);  // as SIGKILL would: no commit, no cleanup
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_EQ(WEXITSTATUS(status), 0);
  const std::string dead = d.file(".out.harp-partial-" + std::to_string(child));
  ASSERT_TRUE(fs::exists(dead));
  EXPECT_EQ(read(out + "/a.txt"), "old");
  const std::string live = d.file(".out.harp-partial-1");  // init: always alive
  fs::create_directories(live);
  auto f = OutputFolder::begin(out, owned_txt);
  ASSERT_TRUE(f.ok());
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_TRUE(fs::exists(live));
}

TEST(OutputFolder, TheCurrentFolderIsNotReplaced) {
  TempDir d;
  fs::create_directories(d.file("work/inner"));
  const fs::path was = fs::current_path();
  fs::current_path(d.file("work/inner"));
  for (const std::string& dir : std::vector<std::string>{".", "..", d.file("work")}) {
    auto f = OutputFolder::begin(dir, owned_txt);
    ASSERT_FALSE(f.ok()) << dir;
    EXPECT_NE(f.status().message().find("is the current folder or holds it"), std::string::npos) << dir;
  }
  EXPECT_TRUE(OutputFolder::begin("export", owned_txt).ok());
  fs::current_path(was);
}

TEST(OutputFolder, AFileIsNotAFolder) {
  TempDir d;
  write(d.file("f"), "x");
  auto f = OutputFolder::begin(d.file("f"), owned_txt);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("is a file"), std::string::npos) << f.status().message();
  EXPECT_EQ(read(d.file("f")), "x");
}

}  // namespace
}  // namespace harp
