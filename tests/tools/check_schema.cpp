// Validates a JSON document against a JSON Schema (draft 2020-12), the subset Tessera's schemas
// use: type (one or a list), properties, required, additionalProperties (false or a schema),
// items, enum, const, minimum, minItems and $ref to "#/$defs/...". Unknown keywords are an error
// (a schema must not silently check less than it says). Prints "schema ok" or every violation.
//
// Usage: check_schema SCHEMA.json DOCUMENT.json
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

using nlohmann::json;

namespace {

struct Checker {
  const json& root;
  std::vector<std::string> errors;

  bool has_type(const json& v, const std::string& t) {
    if (t == "object") return v.is_object();
    if (t == "array") return v.is_array();
    if (t == "string") return v.is_string();
    if (t == "number") return v.is_number();
    if (t == "integer") return v.is_number_integer() || (v.is_number_float() && v.get<double>() == static_cast<double>(static_cast<long long>(v.get<double>())));
    if (t == "boolean") return v.is_boolean();
    if (t == "null") return v.is_null();
    errors.push_back("schema: unknown type '" + t + "'");
    return false;
  }

  void check(const json& v, const json& schema, const std::string& at) {
    static const std::set<std::string> known = {"$schema", "$id", "$defs", "$ref", "title", "description", "type", "properties", "required",
                                                "additionalProperties", "items", "enum", "const", "minimum", "minItems"};
    for (const auto& [key, _] : schema.items()) {
      if (!known.count(key)) errors.push_back("schema at " + at + ": unsupported keyword '" + key + "'");
    }
    if (schema.contains("$ref")) {
      const std::string ref = schema["$ref"];
      const std::string prefix = "#/$defs/";
      if (ref.rfind(prefix, 0) != 0 || !root["$defs"].contains(ref.substr(prefix.size()))) {
        errors.push_back("schema: unresolvable $ref " + ref);
        return;
      }
      check(v, root["$defs"][ref.substr(prefix.size())], at);
    }
    if (schema.contains("type")) {
      bool ok = false;
      if (schema["type"].is_array()) {
        for (const auto& t : schema["type"]) ok = ok || has_type(v, t);
      } else {
        ok = has_type(v, schema["type"]);
      }
      if (!ok) {
        errors.push_back(at + ": expected type " + schema["type"].dump() + ", got " + v.dump().substr(0, 80));
        return;
      }
    }
    if (schema.contains("enum")) {
      bool found = false;
      for (const auto& e : schema["enum"]) found = found || e == v;
      if (!found) errors.push_back(at + ": " + v.dump() + " is not one of " + schema["enum"].dump());
    }
    if (schema.contains("const") && schema["const"] != v) errors.push_back(at + ": expected " + schema["const"].dump() + ", got " + v.dump());
    if (schema.contains("minimum") && v.is_number() && v.get<double>() < schema["minimum"].get<double>())
      errors.push_back(at + ": " + v.dump() + " is below the minimum " + schema["minimum"].dump());
    if (v.is_object()) {
      for (const auto& r : schema.value("required", json::array())) {
        if (!v.contains(r.get<std::string>())) errors.push_back(at + ": missing required '" + r.get<std::string>() + "'");
      }
      const json props = schema.value("properties", json::object());
      for (const auto& [key, value] : v.items()) {
        if (props.contains(key)) {
          check(value, props[key], at + "." + key);
        } else if (schema.contains("additionalProperties")) {
          const json& extra = schema["additionalProperties"];
          if (extra.is_boolean() && !extra.get<bool>()) errors.push_back(at + ": unexpected property '" + key + "'");
          else if (extra.is_object()) check(value, extra, at + "." + key);
        }
      }
    }
    if (v.is_array()) {
      if (schema.contains("minItems") && v.size() < schema["minItems"].get<size_t>())
        errors.push_back(at + ": fewer than " + schema["minItems"].dump() + " items");
      if (schema.contains("items")) {
        for (size_t i = 0; i < v.size(); ++i) check(v[i], schema["items"], at + "[" + std::to_string(i) + "]");
      }
    }
  }
};

json read(const char* path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(std::string("cannot read ") + path);
  return json::parse(in);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: check_schema SCHEMA.json DOCUMENT.json\n");
    return 2;
  }
  try {
    const json schema = read(argv[1]);
    const json doc = read(argv[2]);
    Checker c{schema, {}};
    c.check(doc, schema, "$");
    for (const auto& e : c.errors) std::fprintf(stderr, "check_schema: %s\n", e.c_str());
    if (!c.errors.empty()) return 1;
    std::printf("schema ok: %s against %s\n", argv[2], argv[1]);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "check_schema: %s\n", e.what());
    return 1;
  }
}
