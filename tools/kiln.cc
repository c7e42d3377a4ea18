// The `kiln` command: the command line (tools/cli.h) over the built-in models.
#include "tools/cli.h"

int main(int argc, char **argv) {
  return kiln::tools::cliMain(argc, argv);
}
