#pragma once

// The dashboard's own files (replica/web/dashboard/*), compiled in (replica/web/dashboard/embed.cmake):
// file name ("index.html") -> content.

#include <map>
#include <string>

namespace gfrep::replica::web::internal {

const std::map<std::string, std::string>& DashboardAssets();

}  // namespace gfrep::replica::web::internal
