#include "trainer/text_fields.h"

#include <algorithm>
#include <charconv>
#include <cmath>

namespace tessera {

std::string_view DropCarriageReturn(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return line;
}

void SplitFields(std::string_view line, char delimiter, std::vector<std::string_view>* fields) {
  fields->clear();
  size_t start = 0;
  for (;;) {
    const size_t at = line.find(delimiter, start);
    const size_t end = at == std::string_view::npos ? line.size() : at;
    fields->push_back(line.substr(start, end - start));
    if (at == std::string_view::npos) return;
    start = at + 1;
  }
}

std::string QuoteField(std::string_view field) {
  constexpr size_t kMax = 40;
  if (field.size() <= kMax) return "\"" + std::string(field) + "\"";
  return "\"" + std::string(field.substr(0, kMax)) + "...\"";
}

bool ParseInteger(std::string_view field, int64_t* value) {
  if (field.empty() || field[0] == '+') return false;
  const char* end = field.data() + field.size();
  const auto [ptr, ec] = std::from_chars(field.data(), end, *value);
  return ec == std::errc() && ptr == end;
}

bool ParseFiniteDouble(std::string_view field, double* value) {
  if (field.empty() || field[0] == '+') return false;
  const char* end = field.data() + field.size();
  const auto [ptr, ec] = std::from_chars(field.data(), end, *value);
  return ec == std::errc() && ptr == end && std::isfinite(*value);
}

float Log1pOfPositive(double x) { return static_cast<float>(std::log(1.0 + std::max(x, 0.0))); }

}  // namespace tessera
