#include "common/flag_help.h"

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include <gflags/gflags.h>

namespace tessera {
namespace {

// This file's folder's parent: the source tree every one of this project's
// flags was compiled from (their file names are the compiler's paths).
std::string SourceRoot() {
  const std::string self = __FILE__;
  const std::string tail = "common/flag_help.cc";
  return self.size() >= tail.size() && self.compare(self.size() - tail.size(), tail.size(), tail) == 0
             ? self.substr(0, self.size() - tail.size())
             : std::string();
}

}  // namespace

void ShowOwnFlagsIfAsked(int argc, char** argv) {
  bool asked = false;
  for (int i = 1; i < argc; ++i) {
    asked |= std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-help") == 0 ||
             std::strcmp(argv[i], "-h") == 0;
  }
  if (!asked) return;
  const std::string root = SourceRoot();
  std::vector<gflags::CommandLineFlagInfo> flags;
  gflags::GetAllFlags(&flags);  // sorted by file, then name
  std::cout << "usage: " << gflags::ProgramUsage() << "\n";
  std::string file;
  for (const gflags::CommandLineFlagInfo& f : flags) {
    if (root.empty() || f.filename.rfind(root, 0) != 0) continue;
    const std::string here = f.filename.substr(root.size());
    if (here != file) {
      file = here;
      std::cout << "\n  " << file << ":\n";
    }
    std::cout << "    --" << f.name << " (" << f.description << ") type: " << f.type
              << " default: " << (f.type == "string" ? "\"" + f.default_value + "\"" : f.default_value) << "\n";
  }
  std::cout << "\n--helpfull lists the flags of the libraries too (glog's, gflags', RocksDB's tools').\n";
  std::exit(0);
}

}  // namespace tessera
