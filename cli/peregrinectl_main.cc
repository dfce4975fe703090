// peregrinectl: see cli/peregrinectl.h. The same binary is installed as kubectl-peregrine
// (a symlink the build makes next to it): kubectl runs it with the words after
// `kubectl peregrine`, so it needs nothing of argv[0].
#include <iostream>
#include <string>
#include <vector>

#include "cli/peregrinectl.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  return peregrine::RunPeregrinectl(args, std::cout, std::cerr);
}
