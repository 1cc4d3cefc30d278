// The one writer of a file a user asked for: refused early for a folder or a
// missing folder, written whole through a temporary name, nothing left behind
// on failure; and JSON Schema's integers (5.0 is one, 2.5 is not).
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "common/json_fields.h"
#include "common/write_file.h"

using namespace tapp;

namespace {

std::string text_of(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST_CASE("write_file writes the whole text under its name and leaves no temporary file") {
  const auto dir = std::filesystem::temp_directory_path() / ("tapp_write_file_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string file = (dir / "plan.json").string();
  REQUIRE(writable_file(file).is_ok());
  REQUIRE(write_file(file, "{\"a\": 1}\n").is_ok());
  CHECK(text_of(file) == "{\"a\": 1}\n");
  REQUIRE(write_file(file, "second").is_ok());  // replaces, whole
  CHECK(text_of(file) == "second");
  CHECK_FALSE(std::filesystem::exists(file + ".tmp"));

  Status folder = write_file(dir.string(), "x");
  CHECK_FALSE(folder.is_ok());
  CHECK(folder.message() == "is a folder, not a file");
  const std::string missing = (dir / "no_such_folder" / "plan.json").string();
  Status absent = writable_file(missing);
  CHECK_FALSE(absent.is_ok());
  CHECK(absent.message().find("no_such_folder does not exist") != std::string::npos);
  CHECK_FALSE(write_file(missing, "x").is_ok());
  CHECK_FALSE(std::filesystem::exists(missing));
  CHECK_FALSE(writable_file("").is_ok());
  std::filesystem::remove_all(dir);
}

TEST_CASE("integer_value takes JSON Schema's integers: 5, 5.0 and 1e1, not 2.5, NaN-like or past int64") {
  using nlohmann::json;
  int64_t v = 0;
  CHECK((json_fields::integer_value(json(5), v) && v == 5));
  CHECK((json_fields::integer_value(json::parse("5.0"), v) && v == 5));
  CHECK((json_fields::integer_value(json::parse("1e1"), v) && v == 10));
  CHECK((json_fields::integer_value(json(-3), v) && v == -3));
  CHECK_FALSE(json_fields::integer_value(json::parse("2.5"), v));
  CHECK_FALSE(json_fields::integer_value(json::parse("1e300"), v));
  CHECK_FALSE(json_fields::integer_value(json::parse("18446744073709551615"), v));
  CHECK_FALSE(json_fields::integer_value(json("5"), v));
  CHECK_FALSE(json_fields::integer_value(json(true), v));
}
