// common/write_file.h — a file a user asked for, written whole or not at all.
//
// Owns `writable_file`, checked before minutes of work so that a wrong path
// fails at once (not a folder, its folder exists), and `write_file`: the text
// goes to PATH.tmp, which is renamed onto PATH once complete, so a reader never
// sees half a file and a failure leaves none behind. Messages leave out the
// path, as read_file.h's do: each caller names the flag and the file.
// Thread safety: stateless functions.
#pragma once

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

#include "common/status.h"

namespace tapp {

inline Status writable_file(const std::string& path) {
  std::error_code ec;
  if (path.empty()) return Status::coded(ErrorCode::invalid_argument, "no file named");
  if (std::filesystem::is_directory(path, ec)) return Status::coded(ErrorCode::invalid_argument, "is a folder, not a file");
  const std::filesystem::path folder = std::filesystem::path(path).parent_path();
  if (!folder.empty() && !std::filesystem::is_directory(folder, ec))
    return Status::coded(ErrorCode::not_found, "its folder " + folder.string() + " does not exist");
  return Status::ok();
}

inline Status write_file(const std::string& path, const std::string& text) {
  if (Status s = writable_file(path); !s) return s;
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return Status::error("cannot create the file (permissions?)");
    out << text;
    out.flush();
    if (!out) {
      out.close();
      std::remove(tmp.c_str());
      return Status::error("cannot write the file (disk full?)");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return Status::error("cannot replace the file");
  }
  return Status::ok();
}

}  // namespace tapp
