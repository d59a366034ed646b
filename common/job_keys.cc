#include "common/job_keys.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <sstream>

#include <glog/logging.h>
#include <zmq.h>

namespace tessera {
namespace {

constexpr size_t kZ85KeyChars = 40;

const char* const kRoleNames[kNumRoles] = {"master", "ps", "trainer", "operator"};

std::string KeyPath(const std::string& dir, Role role, const char* kind) {
  return dir + "/" + RoleName(role) + "." + kind;
}

bool IsZ85Key(const std::string& s) {
  if (s.size() != kZ85KeyChars) return false;
  uint8_t binary[32];
  return zmq_z85_decode(binary, s.c_str()) != nullptr;
}

// Reads a key file: one Z85 key, optionally followed by a newline.
// NotFound when the file does not exist.
StatusOr<std::string> ReadKeyFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    if (errno == ENOENT) return Status::NotFound(path + " does not exist");
    return ErrnoStatus("cannot read " + path);
  }
  std::stringstream text;
  text << in.rdbuf();
  std::string key = text.str();
  while (!key.empty() && (key.back() == '\n' || key.back() == '\r')) key.pop_back();
  if (!IsZ85Key(key)) {
    return Status::InvalidArgument(path + " is not a CURVE key (40 Z85 characters); write keys with "
                                   "scripts/make_job_keys.sh");
  }
  return key;
}

Status WriteKeyFile(const std::string& path, const std::string& key, mode_t mode) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, mode);
  if (fd < 0) return ErrnoStatus("cannot create " + path);
  const std::string line = key + "\n";
  const bool ok = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  const bool closed = ::close(fd) == 0;
  if (!ok || !closed) return ErrnoStatus("cannot write " + path);
  return Status::OK();
}

}  // namespace

const char* RoleName(Role role) {
  const int i = static_cast<int>(role);
  return i >= 0 && i < kNumRoles ? kRoleNames[i] : "none";
}

Role RoleFromName(const std::string& name) {
  for (int i = 0; i < kNumRoles; ++i) {
    if (name == kRoleNames[i]) return static_cast<Role>(i);
  }
  return Role::kNone;
}

StatusOr<std::shared_ptr<const JobKeys>> JobKeys::Load(const std::string& dir, Role own) {
  if (own == Role::kNone) return Status::InvalidArgument("JobKeys::Load needs this process's role");
  std::shared_ptr<JobKeys> keys(new JobKeys());
  keys->own_ = own;
  for (int i = 0; i < kNumRoles; ++i) {
    auto key = ReadKeyFile(KeyPath(dir, static_cast<Role>(i), "public"));
    if (key.ok()) {
      keys->public_[i] = *key;
    } else if (key.status().code() != StatusCode::kNotFound) {
      return key.status();
    }
  }
  auto secret = ReadKeyFile(KeyPath(dir, own, "secret"));
  if (!secret.ok()) {
    return secret.status().WithContext(std::string("the job's keys for the ") + RoleName(own) + " role (--keys " +
                                       dir + ")");
  }
  if (keys->public_[static_cast<int>(own)].empty()) {
    return Status::NotFound(KeyPath(dir, own, "public") + " does not exist (--keys " + dir + ")");
  }
  // A secret that does not belong to its public key would fail every
  // handshake with a puzzling error; say it here.
  char derived[kZ85KeyChars + 1];
  if (zmq_curve_public(derived, secret->c_str()) != 0 || keys->public_[static_cast<int>(own)] != derived) {
    return Status::InvalidArgument(KeyPath(dir, own, "secret") + " does not belong to " +
                                   KeyPath(dir, own, "public"));
  }
  keys->own_secret_ = *secret;
  return std::shared_ptr<const JobKeys>(std::move(keys));
}

Status JobKeys::Write(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return ErrnoStatus("cannot create " + dir);
  }
  for (int i = 0; i < kNumRoles; ++i) {
    for (const char* kind : {"public", "secret"}) {
      const std::string path = KeyPath(dir, static_cast<Role>(i), kind);
      if (::access(path.c_str(), F_OK) == 0) {
        return Status::AlreadyExists(path + " exists: refusing to replace a job's keys (use a new folder)");
      }
    }
  }
  for (int i = 0; i < kNumRoles; ++i) {
    char pub[kZ85KeyChars + 1], sec[kZ85KeyChars + 1];
    if (zmq_curve_keypair(pub, sec) != 0) {
      return Status::Internal(std::string("zmq_curve_keypair: ") + zmq_strerror(zmq_errno()));
    }
    TESSERA_RETURN_IF_ERROR(WriteKeyFile(KeyPath(dir, static_cast<Role>(i), "secret"), sec, 0600));
    TESSERA_RETURN_IF_ERROR(WriteKeyFile(KeyPath(dir, static_cast<Role>(i), "public"), pub, 0644));
  }
  return Status::OK();
}

std::string JobKeys::own_secret_bytes() const {
  uint8_t binary[32];
  // Load checked the key, so it decodes.
  CHECK(zmq_z85_decode(binary, own_secret_.c_str()) != nullptr) << "a loaded secret key does not decode";
  return std::string(reinterpret_cast<const char*>(binary), sizeof(binary));
}

const std::string& JobKeys::public_key(Role role) const {
  static const std::string kEmpty;
  const int i = static_cast<int>(role);
  return i >= 0 && i < kNumRoles ? public_[i] : kEmpty;
}

Role JobKeys::RoleOfPublicKey(const std::string& z85) const {
  if (z85.empty()) return Role::kNone;
  for (int i = 0; i < kNumRoles; ++i) {
    if (public_[i] == z85) return static_cast<Role>(i);
  }
  return Role::kNone;
}

const char* const kInsecureWarning =
    "INSECURE: --insecure: this job's sockets are plain TCP. Anyone who can reach its ports can read its "
    "traffic and send it orders; use --keys DIR (scripts/make_job_keys.sh) on any shared network.";

StatusOr<std::shared_ptr<const JobKeys>> KeysFromFlags(const std::string& keys_dir, bool insecure, Role own) {
  if (insecure && !keys_dir.empty()) return Status::InvalidArgument("give --keys DIR or --insecure, not both");
  if (insecure) return std::shared_ptr<const JobKeys>();
  if (keys_dir.empty()) {
    return Status::InvalidArgument(
        "no --keys DIR: a job's members prove who they are with the job's keys (write them with "
        "scripts/make_job_keys.sh DIR and pass --keys DIR to every role; scripts/launch_local.sh does both), or run "
        "without any protection with --insecure");
  }
  return JobKeys::Load(keys_dir, own);
}

}  // namespace tessera
