#pragma once

// The matrices that regenerate a table in docs/ (fault_matrix,
// security_matrix): writing a table between two markers of a Markdown file.

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

namespace meshstore::testing {

/// Replaces what lies between the lines "<!-- NAME:begin -->" and
/// "<!-- NAME:end -->" of `doc` by `table`; false (with a message) when
/// the file has no such markers.
inline bool replace_doc_table(const std::string& doc, const std::string& name,
                              const std::string& table) {
  std::ifstream in(doc);
  std::stringstream all;
  all << in.rdbuf();
  std::string text = all.str();
  const std::string begin = "<!-- " + name + ":begin -->\n", end = "<!-- " + name + ":end -->";
  const auto b = text.find(begin);
  const auto e = text.find(end);
  if (b == std::string::npos || e == std::string::npos || e < b) {
    std::fprintf(stderr, "%s has no %s markers\n", doc.c_str(), name.c_str());
    return false;
  }
  text.replace(b + begin.size(), e - b - begin.size(), table);
  std::ofstream(doc) << text;
  return true;
}

}  // namespace meshstore::testing
