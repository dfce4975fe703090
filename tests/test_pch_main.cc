// Holds the test suites' precompiled header (tests/CMakeLists.txt: peregrine_test_pch).
// The header is built once with the suites' flags and every suite reuses it; this file
// only gives the target something to compile and link.
int main() { return 0; }
