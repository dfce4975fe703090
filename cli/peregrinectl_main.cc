// peregrinectl: see controller/peregrinectl.h.
#include <iostream>
#include <string>
#include <vector>

#include "cli/peregrinectl.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  return peregrine::RunPeregrinectl(args, std::cout, std::cerr);
}
