// The one reader of a user's file: its text, or an error for a missing path,
// a folder (which std::ifstream opens and then throws on) and an empty file
// read as empty text.
#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include "common/read_file.h"

using namespace tapp;

namespace {

// A fresh folder under the temp directory, removed at the end of the test.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    path = std::filesystem::temp_directory_path() / ("tapp_read_file_" + std::to_string(::getpid()));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

}  // namespace

TEST_CASE("read_file gives a file's bytes, and an error naming the cause for a missing path or a folder") {
  TempDir dir;
  const std::string file = (dir.path / "model.json").string();
  const std::string text = std::string("{\"layers\": []}\n") + '\0' + "tail";  // binary-safe
  std::ofstream(file, std::ios::binary) << text;
  Result<std::string> read = read_file(file);
  REQUIRE(read.is_ok());
  CHECK(*read == text);
  CHECK(regular_file(file).is_ok());

  const std::string empty = (dir.path / "empty.json").string();
  std::ofstream(empty).close();
  Result<std::string> none = read_file(empty);
  REQUIRE(none.is_ok());
  CHECK(none->empty());

  Result<std::string> missing = read_file((dir.path / "absent.json").string());
  REQUIRE_FALSE(missing.is_ok());
  CHECK(missing.status().code() == ErrorCode::not_found);
  CHECK(missing.error_message() == "cannot open the file");

  const std::string folder = (dir.path / "cluster.json").string();  // a folder named like a file
  std::filesystem::create_directories(folder);
  Result<std::string> from_folder = read_file(folder);
  REQUIRE_FALSE(from_folder.is_ok());
  CHECK(from_folder.status().code() == ErrorCode::invalid_argument);
  CHECK(from_folder.error_message() == "is a folder, not a file");
  CHECK_FALSE(regular_file(folder).is_ok());
}
