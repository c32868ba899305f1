#include "harp/common/document.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <unistd.h>
#include <yaml-cpp/yaml.h>

namespace harp {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Plain (unquoted) YAML scalars become numbers or booleans when they read as one, so
// `nodes: 2` is the number 2 and `name: "2"` stays a string.
Json yaml_scalar_to_json(const YAML::Node& node) {
  const std::string& text = node.Scalar();
  if (node.Tag() == "!") return text;  // quoted
  if (text == "true" || text == "True") return true;
  if (text == "false" || text == "False") return false;
  if (text == "null" || text == "~" || text.empty()) return nullptr;
  try {
    size_t used = 0;
    long long i = std::stoll(text, &used, 10);
    if (used == text.size()) return i;
  } catch (...) {
  }
  try {
    size_t used = 0;
    double d = std::stod(text, &used);
    if (used == text.size()) return d;
  } catch (...) {
  }
  return text;
}

Json yaml_to_json(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return nullptr;
    case YAML::NodeType::Scalar:
      return yaml_scalar_to_json(node);
    case YAML::NodeType::Sequence: {
      Json out = Json::array();
      for (const auto& item : node) out.push_back(yaml_to_json(item));
      return out;
    }
    case YAML::NodeType::Map: {
      Json out = Json::object();
      for (const auto& kv : node) out[kv.first.as<std::string>()] = yaml_to_json(kv.second);
      return out;
    }
  }
  return nullptr;
}

}  // namespace

StatusOr<std::string> read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_error(path + ": cannot open for reading; check the path");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return io_error(path + ": read failed");
  return ss.str();
}

StatusOr<Json> parse_yaml_text(const std::string& text, const std::string& name) {
  try {
    YAML::Node root = YAML::Load(text);
    return yaml_to_json(root);
  } catch (const YAML::Exception& e) {
    return invalid_argument(name + ": line " + std::to_string(e.mark.line + 1) + ", column " +
                            std::to_string(e.mark.column + 1) + ": not valid YAML (" + e.msg +
                            "); fix the syntax there");
  }
}

StatusOr<Json> parse_json_text(const std::string& text, const std::string& name) {
  try {
    return Json::parse(text);
  } catch (const Json::parse_error& e) {
    return invalid_argument(name + ": not valid JSON at byte " + std::to_string(e.byte) + " (" +
                            e.what() + "); fix the syntax there");
  }
}

StatusOr<Json> load_document(const std::string& path) {
  HARP_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
  if (ends_with(path, ".yaml") || ends_with(path, ".yml")) return parse_yaml_text(text, path);
  return parse_json_text(text, path);
}

Status write_text_file_atomic(const std::string& path, const std::string& text) {
  namespace fs = std::filesystem;
  fs::path target(path);
  fs::path tmp = target;
  tmp += ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return io_error(path + ": cannot open for writing; check the folder exists and is writable");
    out << text;
    out.flush();
    if (!out) {
      std::error_code ec;
      fs::remove(tmp, ec);
      return io_error(path + ": write failed (disk full?)");
    }
  }
  std::error_code ec;
  fs::rename(tmp, target, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return io_error(path + ": cannot rename the temporary file into place: " + ec.message());
  }
  return Status();
}

std::string resolve_relative_to(const std::string& base_file, const std::string& path) {
  namespace fs = std::filesystem;
  fs::path p(path);
  if (p.is_absolute()) return path;
  return (fs::path(base_file).parent_path() / p).lexically_normal().string();
}

}  // namespace harp
