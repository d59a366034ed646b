// Reading delimited text lines (Criteo TSV, CSV): splitting, numbers, and
// quoting a field for an error message. No quoting or escaping: a field is
// whatever lies between two delimiters.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tessera {

// `line` without a final '\r', so CRLF files read as LF ones.
std::string_view DropCarriageReturn(std::string_view line);

// Splits `line` on every `delimiter`, keeping empty fields (including a
// trailing one after a final delimiter) into *fields, which is cleared first
// (its capacity is kept: callers reuse it line after line).
void SplitFields(std::string_view line, char delimiter, std::vector<std::string_view>* fields);

// A field quoted for an error message, cut to a readable length.
std::string QuoteField(std::string_view field);

// Accepts -?[0-9]+ that fits in int64.
bool ParseInteger(std::string_view field, int64_t* value);

// Accepts a finite decimal number (from_chars' general format: "3", "-0.5",
// "1e3"); no leading '+' or spaces.
bool ParseFiniteDouble(std::string_view field, double* value);

// The Criteo dense transform, shared by every source that offers it:
// log(1 + max(x, 0)) computed in double, stored as float.
float Log1pOfPositive(double x);

}  // namespace tessera
