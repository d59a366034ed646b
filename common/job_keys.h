// JobKeys: a job's CURVE key pairs, one per role, and which role a public key
// belongs to (docs/design.md, "Who may say what").
//
// A job's key folder (scripts/make_job_keys.sh) holds, for each role R of
// master, ps, trainer and operator, R.public and R.secret (Z85 text, 40
// characters). Every process of a role uses its role's pair both as a server
// (the master and the parameter servers listen with theirs) and as a client;
// a listening process tells roles apart by the client's public key. A process
// needs every R.public and its own role's R.secret; an operator's machine
// needs only operator.secret and master.public.
//
// The keys are the job's secret: anyone who can read a role's secret can
// speak as that role. The folder is written 0700 and its secret files 0600.
#pragma once

#include <array>
#include <memory>
#include <string>

#include "common/status.h"

namespace tessera {

enum class Role { kNone = -1, kMaster = 0, kPs = 1, kTrainer = 2, kOperator = 3 };
constexpr int kNumRoles = 4;
// "master", "ps", "trainer", "operator"; "none" for kNone.
const char* RoleName(Role role);
// Inverse of RoleName for the four roles; kNone for anything else.
Role RoleFromName(const std::string& name);

class JobKeys {
 public:
  // Reads `dir`: every role's public key that is there and `own`'s secret
  // key, which must be there. A key file that exists but is not a key is an
  // error (a truncated copy must not pass for a key).
  static StatusOr<std::shared_ptr<const JobKeys>> Load(const std::string& dir, Role own);

  // Writes fresh key pairs for every role into `dir` (created 0700 when
  // missing). Refuses to overwrite a folder that already holds keys: a
  // running job's members would no longer agree.
  static Status Write(const std::string& dir);

  Role own_role() const { return own_; }
  // This process's key pair (Z85).
  const std::string& own_public() const { return public_[static_cast<int>(own_)]; }
  const std::string& own_secret() const { return own_secret_; }
  // own_secret() as its 32 raw bytes: the secret every member of this role
  // shares, from which trainers derive their collectives' cipher keys
  // (trainer/collective_seal.h).
  std::string own_secret_bytes() const;
  // `role`'s public key; empty when the folder had none.
  const std::string& public_key(Role role) const;
  // Which role a client's public key (Z85) is; kNone for a stranger's.
  Role RoleOfPublicKey(const std::string& z85) const;

 private:
  JobKeys() = default;
  Role own_ = Role::kNone;
  std::array<std::string, kNumRoles> public_;
  std::string own_secret_;
};

// What a role's --keys DIR and --insecure flags mean: the keys in DIR, or
// null (plain TCP) with --insecure. Neither, or both, is an error: a job
// never runs unprotected by default or by mistake.
StatusOr<std::shared_ptr<const JobKeys>> KeysFromFlags(const std::string& keys_dir, bool insecure, Role own);

// The line each role logs (and the master repeats) when it runs without keys.
extern const char* const kInsecureWarning;

}  // namespace tessera
