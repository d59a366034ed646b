// Reading fields of a JSON object with errors that say where: every getter
// names the full path ("tables[2].embedding_dim: must be >= 1, got 0").
// Unknown keys are errors too, so a typo in a config never goes unnoticed.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace tessera {

// Deeper JSON than any Tessera message or file has (a job config inside a
// start reply is about 6 levels).
inline constexpr int kMaxJsonDepth = 64;

// Parses JSON text (with // and /* */ comments when allow_comments) into
// *out. InvalidArgument when it is not JSON or nests deeper than
// kMaxJsonDepth: printing, copying and comparing a value recurse once per
// level, so a peer's 200 KB of '[' would otherwise overflow the stack of
// whoever prints its error. Every JSON that crosses the wire or comes from a
// file is read through this.
Status ParseJson(std::string_view text, nlohmann::json* out, bool allow_comments = false);

// While one lives, JsonFields' getters and OnlyKeys on this thread record a
// bad field here and return OK, the value left as it was (its default), so
// that a config check (tessera_master --check_config) lists every bad field
// of a section, not its first. Object() and "not an object" still fail:
// what follows would have nothing to read. Checks that combine fields stop
// at their first error as always. Nothing that parses for real uses it.
class JsonFieldErrorCollector {
 public:
  JsonFieldErrorCollector();  // REQUIRES: none is live on this thread
  ~JsonFieldErrorCollector();
  JsonFieldErrorCollector(const JsonFieldErrorCollector&) = delete;
  JsonFieldErrorCollector& operator=(const JsonFieldErrorCollector&) = delete;

  const std::vector<Status>& errors() const { return errors_; }
  // Whether a live collector on this thread has recorded any.
  static bool AnyOnThisThread();

 private:
  std::vector<Status> errors_;
};

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
  Status IntList(const char* key, std::vector<int64_t>* out, bool required, int64_t min, int64_t max) const;
  Status StringList(const char* key, std::vector<std::string>* out, bool required) const;
  // An object-valued field (required): returns a reader for it.
  Status Object(const char* key, bool required, const nlohmann::json** out) const;

  // Errors when the object has a key not in `allowed`.
  Status OnlyKeys(std::initializer_list<const char*> allowed) const;

  const std::string& path() const { return path_; }

 private:
  Status Missing(const char* key) const;
  Status IntField(const char* key, int64_t* out, bool required, int64_t min, int64_t max) const;
  Status FloatField(const char* key, double* out, bool required) const;
  Status BoolField(const char* key, bool* out, bool required) const;
  Status StringField(const char* key, std::string* out, bool required) const;
  Status IntListField(const char* key, std::vector<int64_t>* out, bool required, int64_t min, int64_t max) const;
  Status StringListField(const char* key, std::vector<std::string>* out, bool required) const;
  const nlohmann::json& j_;
  std::string path_;
};

}  // namespace tessera
