#include "common/json_fields.h"

#include <cmath>

#include <glog/logging.h>

namespace tessera {

Status ParseJson(std::string_view text, nlohmann::json* out, bool allow_comments) {
  bool too_deep = false;
  // Values past the limit are dropped as they are read, so nothing deep is
  // ever built (the parser itself keeps its nesting on the heap).
  auto depth_limit = [&too_deep](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
    if (depth > kMaxJsonDepth) too_deep = true;
    return !too_deep;
  };
  *out = nlohmann::json::parse(text.begin(), text.end(), depth_limit, /*allow_exceptions=*/false, allow_comments);
  if (too_deep) {
    *out = nlohmann::json();
    return Status::InvalidArgument("JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  }
  if (out->is_discarded()) return Status::InvalidArgument("not valid JSON");
  return Status::OK();
}

namespace {
// The live collector of this thread, if any.
thread_local std::vector<Status>* collecting = nullptr;

// `st` itself, or OK once recorded by a live collector.
Status Tolerate(Status st) {
  if (st.ok() || collecting == nullptr) return st;
  collecting->push_back(std::move(st));
  return Status::OK();
}
}  // namespace

JsonFieldErrorCollector::JsonFieldErrorCollector() {
  CHECK(collecting == nullptr) << "a JsonFieldErrorCollector is already live on this thread";
  collecting = &errors_;
}

JsonFieldErrorCollector::~JsonFieldErrorCollector() { collecting = nullptr; }

bool JsonFieldErrorCollector::AnyOnThisThread() { return collecting != nullptr && !collecting->empty(); }

Status JsonFields::Int(const char* key, int64_t* out, bool required, int64_t min, int64_t max) const {
  return Tolerate(IntField(key, out, required, min, max));
}
Status JsonFields::Float(const char* key, double* out, bool required) const {
  return Tolerate(FloatField(key, out, required));
}
Status JsonFields::Bool(const char* key, bool* out, bool required) const {
  return Tolerate(BoolField(key, out, required));
}
Status JsonFields::String(const char* key, std::string* out, bool required) const {
  return Tolerate(StringField(key, out, required));
}
Status JsonFields::IntList(const char* key, std::vector<int64_t>* out, bool required, int64_t min,
                           int64_t max) const {
  return Tolerate(IntListField(key, out, required, min, max));
}
Status JsonFields::StringList(const char* key, std::vector<std::string>* out, bool required) const {
  return Tolerate(StringListField(key, out, required));
}

JsonFields::JsonFields(const nlohmann::json& object, std::string path) : j_(object), path_(std::move(path)) {}

std::string JsonFields::PathOf(const char* key) const { return path_.empty() ? key : path_ + "." + key; }

bool JsonFields::Has(const char* key) const { return j_.is_object() && j_.contains(key) && !j_.at(key).is_null(); }

const nlohmann::json* JsonFields::Get(const char* key) const { return Has(key) ? &j_.at(key) : nullptr; }

Status JsonFields::Missing(const char* key) const {
  if (!j_.is_object()) return Status::InvalidArgument((path_.empty() ? "config" : path_) + ": must be a JSON object");
  return Status::InvalidArgument(PathOf(key) + ": required field is missing");
}

Status JsonFields::IntField(const char* key, int64_t* out, bool required, int64_t min, int64_t max) const {
  const nlohmann::json* v = Get(key);
  if (v == nullptr) return required ? Missing(key) : Status::OK();
  int64_t x = 0;
  if (v->is_number_integer()) {
    x = v->get<int64_t>();
  } else if (v->is_number_float() && std::floor(v->get<double>()) == v->get<double>() &&
             std::fabs(v->get<double>()) < 9e18) {
    x = static_cast<int64_t>(v->get<double>());
  } else {
    return Status::InvalidArgument(PathOf(key) + ": must be an integer, got " + v->dump());
  }
  if (x < min || x > max) {
    return Status::InvalidArgument(PathOf(key) + ": must be in [" + std::to_string(min) + ", " + std::to_string(max) +
                                   "], got " + std::to_string(x));
  }
  *out = x;
  return Status::OK();
}

Status JsonFields::FloatField(const char* key, double* out, bool required) const {
  const nlohmann::json* v = Get(key);
  if (v == nullptr) return required ? Missing(key) : Status::OK();
  if (!v->is_number()) return Status::InvalidArgument(PathOf(key) + ": must be a number, got " + v->dump());
  const double x = v->get<double>();
  if (!std::isfinite(x)) return Status::InvalidArgument(PathOf(key) + ": must be finite");
  *out = x;
  return Status::OK();
}

Status JsonFields::BoolField(const char* key, bool* out, bool required) const {
  const nlohmann::json* v = Get(key);
  if (v == nullptr) return required ? Missing(key) : Status::OK();
  if (!v->is_boolean()) return Status::InvalidArgument(PathOf(key) + ": must be true or false, got " + v->dump());
  *out = v->get<bool>();
  return Status::OK();
}

Status JsonFields::StringField(const char* key, std::string* out, bool required) const {
  const nlohmann::json* v = Get(key);
  if (v == nullptr) return required ? Missing(key) : Status::OK();
  if (!v->is_string()) return Status::InvalidArgument(PathOf(key) + ": must be a string, got " + v->dump());
  *out = v->get<std::string>();
  return Status::OK();
}

Status JsonFields::IntListField(const char* key, std::vector<int64_t>* out, bool required, int64_t min,
                           int64_t max) const {
  const nlohmann::json* v = Get(key);
  if (v == nullptr) return required ? Missing(key) : Status::OK();
  if (!v->is_array()) return Status::InvalidArgument(PathOf(key) + ": must be a list of integers, got " + v->dump());
  out->clear();
  for (size_t i = 0; i < v->size(); ++i) {
    const auto& e = (*v)[i];
    // An unsigned value past INT64_MAX reads as negative: refused below any min >= 0.
    if (!e.is_number_integer() || e.get<int64_t>() < min || e.get<int64_t>() > max) {
      return Status::InvalidArgument(PathOf(key) + "[" + std::to_string(i) + "]: must be an integer in [" +
                                     std::to_string(min) + ", " + std::to_string(max) + "], got " + e.dump());
    }
    out->push_back(e.get<int64_t>());
  }
  return Status::OK();
}

Status JsonFields::StringListField(const char* key, std::vector<std::string>* out, bool required) const {
  const nlohmann::json* v = Get(key);
  if (v == nullptr) return required ? Missing(key) : Status::OK();
  if (!v->is_array()) return Status::InvalidArgument(PathOf(key) + ": must be a list of strings, got " + v->dump());
  out->clear();
  for (size_t i = 0; i < v->size(); ++i) {
    if (!(*v)[i].is_string()) {
      return Status::InvalidArgument(PathOf(key) + "[" + std::to_string(i) + "]: must be a string");
    }
    out->push_back((*v)[i].get<std::string>());
  }
  return Status::OK();
}

Status JsonFields::Object(const char* key, bool required, const nlohmann::json** out) const {
  const nlohmann::json* v = Get(key);
  *out = nullptr;
  if (v == nullptr) return required ? Missing(key) : Status::OK();
  if (!v->is_object()) return Status::InvalidArgument(PathOf(key) + ": must be a JSON object");
  *out = v;
  return Status::OK();
}

Status JsonFields::OnlyKeys(std::initializer_list<const char*> allowed) const {
  if (!j_.is_object()) return Status::InvalidArgument((path_.empty() ? "config" : path_) + ": must be a JSON object");
  for (auto it = j_.begin(); it != j_.end(); ++it) {
    bool known = false;
    std::string names;
    for (const char* a : allowed) {
      if (it.key() == a) known = true;
      names += names.empty() ? a : std::string(", ") + a;
    }
    if (!known) {
      // Every unknown key, when collecting.
      Status unknown = Status::InvalidArgument(PathOf(it.key().c_str()) + ": unknown field (known: " + names + ")");
      if (collecting == nullptr) return unknown;
      collecting->push_back(std::move(unknown));
    }
  }
  return Status::OK();
}

}  // namespace tessera
