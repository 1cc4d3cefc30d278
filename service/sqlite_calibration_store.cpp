// service/sqlite_calibration_store.cpp — CalibrationStore over JobStore (see sqlite_calibration_store.h).
#include "service/sqlite_calibration_store.h"

namespace tapp::service {

std::optional<std::string> SqliteCalibrationStore::get(const std::string& fingerprint) {
  Result<std::optional<std::string>> v = store_.cache_get(key_of(fingerprint));
  if (!v) return std::nullopt;  // a read error: no calibration, predictions use the default
  return *v;
}

Status SqliteCalibrationStore::put(const std::string& fingerprint, const std::string& entry_json) {
  return store_.cache_put(key_of(fingerprint), entry_json);
}

}  // namespace tapp::service
