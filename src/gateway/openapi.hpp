#pragma once
#include <string>

namespace relay::gateway {
// The OpenAPI 3 document served at /openapi.json; a test checks every route against it.
const std::string& openapi_json();
}  // namespace relay::gateway
