#pragma once
// The members of a JSON object as their text: what a client wrote reaches the model byte for
// byte (boost::json would rewrite 0.1 as 1E-1 and round a 30-digit integer).

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace relay {

// For a JSON object's text (valid: parse it with boost::json first), each member's key and
// value: a string value decoded, any other value (number, true, false, null, object, array)
// exactly as written. Members in document order.
std::vector<std::pair<std::string, std::string>> json_members_as_written(std::string_view object);

}  // namespace relay
