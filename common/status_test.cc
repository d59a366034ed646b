#include "common/status.h"

#include <gtest/gtest.h>

#include <cerrno>

namespace tessera {
namespace {

StatusOr<int> Half(int x) {
  if (x % 2 != 0) return Status::InvalidArgument("odd: " + std::to_string(x));
  return x / 2;
}

Status Quarter(int x, int* out) {
  TESSERA_ASSIGN_OR_RETURN(int h, Half(x));
  TESSERA_ASSIGN_OR_RETURN(*out, Half(h));
  return Status::OK();
}

TEST(StatusTest, OkAndErrors) {
  EXPECT_TRUE(Status::OK().ok());
  Status s = Status::NotFound("table t");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.ToString(), "NOT_FOUND: table t");
  EXPECT_EQ(s.WithContext("lookup").message(), "lookup: table t");
  EXPECT_TRUE(Status(StatusCode::kOk, "ignored").message().empty());
}

// A full disk or quota is the operator's to mend (RESOURCE_EXHAUSTED); other
// failures of a system call may pass (UNAVAILABLE). Both say what failed and
// the system's words for why.
TEST(StatusTest, ErrnoStatusNamesTheCallAndTheCause) {
  errno = ENOSPC;
  Status s = ErrnoStatus("cannot write /x");
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(), "cannot write /x: No space left on device");
  errno = EDQUOT;
  EXPECT_EQ(ErrnoStatus("cannot write /x").code(), StatusCode::kResourceExhausted);
  errno = EACCES;
  s = ErrnoStatus("cannot create /y");
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), "cannot create /y: Permission denied");
}

TEST(StatusTest, StatusOrPropagates) {
  int out = 0;
  EXPECT_TRUE(Quarter(8, &out).ok());
  EXPECT_EQ(out, 2);
  Status s = Quarter(6, &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "odd: 3");
}

}  // namespace
}  // namespace tessera
