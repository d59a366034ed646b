// Reading fields of a JSON object with errors that say where: every getter
// names the full path ("tables[2].embedding_dim: must be >= 1, got 0").
// Unknown keys are errors too, so a typo in a config never goes unnoticed.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace tessera {

class JsonFields {
 public:
  // REQUIRES: `object` outlives this. Fails later calls if it is not an object.
  JsonFields(const nlohmann::json& object, std::string path);

  bool Has(const char* key) const;
  const nlohmann::json* Get(const char* key) const;
  std::string PathOf(const char* key) const;

  Status Int(const char* key, int64_t* out, bool required, int64_t min, int64_t max) const;
  Status Float(const char* key, double* out, bool required) const;
  Status Bool(const char* key, bool* out, bool required) const;
  Status String(const char* key, std::string* out, bool required) const;
  Status IntList(const char* key, std::vector<int64_t>* out, bool required, int64_t min) const;
  Status StringList(const char* key, std::vector<std::string>* out, bool required) const;
  // An object-valued field (required): returns a reader for it.
  Status Object(const char* key, bool required, const nlohmann::json** out) const;

  // Errors when the object has a key not in `allowed`.
  Status OnlyKeys(std::initializer_list<const char*> allowed) const;

  const std::string& path() const { return path_; }

 private:
  Status Missing(const char* key) const;
  const nlohmann::json& j_;
  std::string path_;
};

}  // namespace tessera
