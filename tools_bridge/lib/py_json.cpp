#include "tools_bridge/lib/py_json.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <string_view>

namespace cedar::bridge {

void AppendPyJsonString(std::string_view text, std::string& out) {
  out += '"';
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

std::string PyFloatRepr(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "Infinity" : "-Infinity";
  // Shortest round-trip digits in scientific form: [-]d[.ddd]e(+|-)dd.
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, value, std::chars_format::scientific);
  std::string_view sci(buf, static_cast<size_t>(end - buf));
  const bool negative = !sci.empty() && sci.front() == '-';
  if (negative) sci.remove_prefix(1);
  const size_t e = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, e)) {
    if (c != '.') digits += c;
  }
  const int exponent = std::stoi(std::string(sci.substr(e + 1)));
  const int decpt = exponent + 1;  // digits d1d2... means 0.d1d2... * 10^decpt
  std::string out = negative ? "-" : "";
  if (decpt > -4 && decpt <= 16) {
    // Python repr: fixed notation unless decpt <= -4 or decpt > 16.
    if (decpt <= 0) {
      out += "0.";
      out.append(static_cast<size_t>(-decpt), '0');
      out += digits;
    } else if (static_cast<size_t>(decpt) >= digits.size()) {
      out += digits;
      out.append(static_cast<size_t>(decpt) - digits.size(), '0');
      out += ".0";
    } else {
      out += digits.substr(0, static_cast<size_t>(decpt));
      out += '.';
      out += digits.substr(static_cast<size_t>(decpt));
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) {
    out += '.';
    out += digits.substr(1);
  }
  char exp[16];
  std::snprintf(exp, sizeof exp, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  out += exp;
  return out;
}

namespace {

void Dump(const nlohmann::ordered_json& v, std::string& out) {
  using T = nlohmann::ordered_json::value_t;
  switch (v.type()) {
    case T::object: {
      out += '{';
      bool first = true;
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (!first) out += ", ";
        first = false;
        AppendPyJsonString(it.key(), out);
        out += ": ";
        Dump(it.value(), out);
      }
      out += '}';
      return;
    }
    case T::array: {
      out += '[';
      bool first = true;
      for (const auto& item : v) {
        if (!first) out += ", ";
        first = false;
        Dump(item, out);
      }
      out += ']';
      return;
    }
    case T::string: AppendPyJsonString(v.get_ref<const std::string&>(), out); return;
    case T::boolean: out += v.get<bool>() ? "true" : "false"; return;
    case T::number_integer: out += std::to_string(v.get<int64_t>()); return;
    case T::number_unsigned: out += std::to_string(v.get<uint64_t>()); return;
    case T::number_float: out += PyFloatRepr(v.get<double>()); return;
    case T::null:
    case T::discarded:
    case T::binary: out += "null"; return;
  }
}

}  // namespace

std::string PyJsonDumps(const nlohmann::ordered_json& value) {
  std::string out;
  Dump(value, out);
  return out;
}

}  // namespace cedar::bridge
