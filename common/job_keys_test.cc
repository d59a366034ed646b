#include "common/job_keys.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace tessera {
namespace {

class JobKeysTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tessera_keys_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_F(JobKeysTest, WrittenKeysLoadForEveryRoleAndTellRolesApart) {
  const std::string keys = dir_ + "/keys";
  ASSERT_TRUE(JobKeys::Write(keys).ok());
  struct stat st;
  ASSERT_EQ(stat(keys.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_EQ(stat((keys + "/trainer.secret").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  auto trainer = JobKeys::Load(keys, Role::kTrainer);
  auto master = JobKeys::Load(keys, Role::kMaster);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  ASSERT_TRUE(master.ok()) << master.status();
  EXPECT_EQ((*trainer)->own_role(), Role::kTrainer);
  EXPECT_NE((*trainer)->own_secret(), (*master)->own_secret());
  for (Role r : {Role::kMaster, Role::kPs, Role::kTrainer, Role::kOperator}) {
    EXPECT_EQ((*master)->RoleOfPublicKey((*trainer)->public_key(r)), r) << RoleName(r);
  }
  EXPECT_EQ((*master)->RoleOfPublicKey((*master)->own_secret()), Role::kNone);
  EXPECT_EQ((*master)->RoleOfPublicKey(""), Role::kNone);
}

TEST_F(JobKeysTest, RefusesToOverwriteAJobsKeys) {
  ASSERT_TRUE(JobKeys::Write(dir_).ok());
  auto before = JobKeys::Load(dir_, Role::kPs);
  ASSERT_TRUE(before.ok());
  Status again = JobKeys::Write(dir_);
  EXPECT_EQ(again.code(), StatusCode::kAlreadyExists) << again;
  auto after = JobKeys::Load(dir_, Role::kPs);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ((*before)->own_secret(), (*after)->own_secret());
}

TEST_F(JobKeysTest, MissingDamagedOrMismatchedKeysAreClearErrors) {
  // No folder at all.
  auto none = JobKeys::Load(dir_ + "/absent", Role::kTrainer);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("trainer.secret"), std::string::npos) << none.status();

  ASSERT_TRUE(JobKeys::Write(dir_).ok());
  // An operator's folder: only what it needs.
  std::filesystem::remove(dir_ + "/trainer.secret");
  EXPECT_TRUE(JobKeys::Load(dir_, Role::kOperator).ok());
  EXPECT_FALSE(JobKeys::Load(dir_, Role::kTrainer).ok());

  // A truncated public key.
  {
    std::ofstream out(dir_ + "/ps.public", std::ios::trunc);
    out << "abc\n";
  }
  auto damaged = JobKeys::Load(dir_, Role::kOperator);
  ASSERT_FALSE(damaged.ok());
  EXPECT_EQ(damaged.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(damaged.status().message().find("ps.public"), std::string::npos) << damaged.status();

  // A secret that is another role's.
  std::filesystem::copy_file(dir_ + "/master.secret", dir_ + "/operator.secret",
                             std::filesystem::copy_options::overwrite_existing);
  std::filesystem::remove(dir_ + "/ps.public");
  auto mismatched = JobKeys::Load(dir_, Role::kOperator);
  ASSERT_FALSE(mismatched.ok());
  EXPECT_NE(mismatched.status().message().find("does not belong"), std::string::npos) << mismatched.status();
}

}  // namespace
}  // namespace tessera
