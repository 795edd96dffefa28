// Boost.JSON and Boost.URL compiled into relay-s3.so (the libraries' own one-file builds): Debian's
// static Boost archives are not position-independent, and the shared libraries would bring
// libstdc++ with them, which the module takes from its host instead (src/CMakeLists.txt).
#include <boost/json/src.hpp>
#include <boost/url/src.hpp>
