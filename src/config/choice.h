// Choice keys are enums. Each enum spells its YAML names once, in enumerator
// order, with KEEL_CHOICE; the schema parses and prints them, name_of() gives
// the name for messages, and nlohmann::json writes the name (never the
// number: JSON_DISABLE_ENUM_SERIALIZATION is on for the whole build, so an
// enum without names does not compile into a JSON record).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace keel {

template <class E>
struct ChoiceNames;  // specialised by KEEL_CHOICE: static const std::vector<std::string>& names()

#define KEEL_CHOICE(E, ...)                                               \
  template <>                                                             \
  struct ChoiceNames<E> {                                                 \
    static const std::vector<std::string>& names() {                      \
      static const std::vector<std::string> n{__VA_ARGS__};               \
      return n;                                                           \
    }                                                                     \
  }

template <class E>
const std::string& name_of(E e) {
  return ChoiceNames<E>::names().at(static_cast<size_t>(e));
}

template <class E>
std::optional<E> choice_from_name(const std::string& name) {
  const auto& names = ChoiceNames<E>::names();
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == name) return static_cast<E>(i);
  return std::nullopt;
}

// Found by nlohmann's ADL lookup, for json and ordered_json alike.
template <class Json, class E, class = decltype(ChoiceNames<E>::names())>
void to_json(Json& j, E e) {
  j = name_of(e);
}

}  // namespace keel
