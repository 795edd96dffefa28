#pragma once
// The operator dashboard's page: one HTML document with its styles and script inline
// (src/gateway/dashboard/index.html, embedded at build time), so it loads nothing from anywhere
// else and works offline.

#include <string>

namespace relay::gateway {

const std::string& dashboard_html();

}  // namespace relay::gateway
