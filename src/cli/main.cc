// The `ember` executable: subcommands are declared in cli/commands.h and wired here.
#include <cstdio>

int main(int argc, char** argv) {
  (void)argc;
  (void)argv;
  std::fprintf(stderr, "ember: no subcommands yet\n");
  return 2;
}
