// common/read_file.h — a user's file, whole, with errors a user can act on.
//
// Owns `regular_file` and `read_file`, the one way the parts read a file a user
// named (a model, a cluster, a placement, a layer library, a calibration, a
// policy). std::ifstream opens a folder without complaint and throws on the
// first read, which would end a CLI or a server with std::terminate; here a
// missing path, a folder and a failed read are errors instead. Messages leave
// out the path, so each caller names the file as it does elsewhere:
// "cannot open the file" (code not_found), "is a folder, not a file"
// (invalid_argument), "cannot read the file" (unknown).
// Thread safety: stateless functions.
#pragma once

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>

#include "common/status.h"

namespace tapp {

// Ok when `path` names something that can be opened for reading and is not a folder.
inline Status regular_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    return Status::coded(ErrorCode::invalid_argument, "is a folder, not a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::coded(ErrorCode::not_found, "cannot open the file");
  return Status::ok();
}

inline Result<std::string> read_file(const std::string& path) {
  if (Status s = regular_file(path); !s) return s;
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();  // a read error (an exception in the stream) sets failbit on `text`
  if (!text.fail()) return text.str();
  // So does an empty file (nothing inserted): that is an empty text, not an error.
  std::error_code ec;
  if (std::filesystem::file_size(path, ec) == 0 && !ec) return std::string();
  return Status::error("cannot read the file");
}

}  // namespace tapp
