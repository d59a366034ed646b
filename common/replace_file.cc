#include "common/replace_file.h"

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>

namespace tessera {

Status ReplaceFile(const std::string& path, const std::string& bytes) {
  std::error_code ec;
  const auto kind = std::filesystem::symlink_status(path, ec).type();
  if (!ec && kind != std::filesystem::file_type::regular && kind != std::filesystem::file_type::not_found) {
    return Status::InvalidArgument("cannot write " + path + ": it exists and is not a regular file");
  }
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return ErrnoStatus("cannot write " + tmp);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.close();
    if (!out) return ErrnoStatus("writing " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return ErrnoStatus("cannot rename " + tmp + " to " + path);
  return Status::OK();
}

}  // namespace tessera
