// `harp` entry point: everything happens in harp::cli::run so tests can drive it.
#include <iostream>

#include "commands.h"

int main(int argc, char** argv) { return harp::cli::run(argc, argv, std::cout, std::cerr); }
